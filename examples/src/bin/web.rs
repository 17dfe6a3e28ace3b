//! An axum app that enqueues with the tenant of the current request.
//!
//! The handler ([`fairjob_examples::web`]) names the tenant from the
//! `X-Tenant` header explicitly with `.set_tenant()`. For jobs enqueued
//! deeper in a request's code without a tenant, a client middleware reads it
//! from a task-local that a tower layer sets from the same header (an
//! explicit `.set_tenant()` wins over it). Run it with
//! `REDIS_URL=redis://127.0.0.1:6379 cargo run -p fairjob-examples --bin web`, then
//! `curl -XPOST -H 'X-Tenant: acme' localhost:3000/reports/7`.

use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::Response;
use fairjob::client_middleware_fn;
use fairjob::prelude::*;

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
    let app = fairjob_examples::web::router(client).layer(middleware::from_fn(tenant_from_header));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    println!("listening on http://127.0.0.1:3000 (POST /reports/:n with an X-Tenant header)");
    axum::serve(listener, app).await?;
    Ok(())
}
