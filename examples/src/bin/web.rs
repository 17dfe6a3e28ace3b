//! An axum handler that enqueues with the tenant of the current request.
//!
//! A client middleware reads the tenant from a task-local that a tower layer sets
//! from the `X-Tenant` header, so every job enqueued while handling the request
//! carries it (unless `.set_tenant()` named another explicitly). Run it with
//! `REDIS_URL=redis://127.0.0.1:6379 cargo run -p fairjob-examples --bin web`, then
//! `curl -XPOST -H 'X-Tenant: acme' localhost:3000/reports/7`.

use axum::extract::{Path, Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::post;
use axum::{Json, Router};
use fairjob::{Client, Job, client_middleware_fn};
use fairjob_examples::ReportJob;

tokio::task_local! {
    static TENANT: Option<String>;
}

async fn tenant_from_header(req: Request, next: Next) -> Response {
    let tenant = req
        .headers()
        .get("x-tenant")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    TENANT.scope(tenant, next.run(req)).await
}

async fn enqueue_report(
    State(client): State<Client>,
    Path(number): Path<u32>,
) -> Json<serde_json::Value> {
    // No explicit tenant and an empty `account`: the request's tenant applies.
    let job = ReportJob {
        account: String::new(),
        number,
    };
    match job.perform_async(&client).await {
        Ok(jid) => Json(serde_json::json!({ "jid": jid })),
        Err(e) => Json(serde_json::json!({ "error": e.to_string() })),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = Client::builder(url)
        .middleware(client_middleware_fn(|mut job, next| async move {
            if let Ok(Some(tenant)) = TENANT.try_with(|t| t.clone()) {
                job.set_tenant_if_absent(tenant);
            }
            next.run(job).await
        }))
        .build()
        .await?;
    let app = Router::new()
        .route("/reports/{number}", post(enqueue_report))
        .layer(middleware::from_fn(tenant_from_header))
        .with_state(client);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    println!("listening on http://127.0.0.1:3000 (POST /reports/:n with an X-Tenant header)");
    axum::serve(listener, app).await?;
    Ok(())
}
