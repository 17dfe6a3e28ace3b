//! Postgres as the source of truth: an axum app that writes a signup and
//! enqueues its welcome job in the same PostgreSQL transaction, and a pump
//! that moves committed jobs into Redis (in this process here; in production
//! usually `fairjob-worker pump --postgres URL`, or several).
//!
//! Run it with `DATABASE_URL=postgres://… REDIS_URL=redis://127.0.0.1:6379
//! cargo run -p fairjob-examples --bin postgres`, then
//! `curl -XPOST -H 'X-Tenant: acme' localhost:3001/signups/ada`, and a worker
//! (`cargo run -p fairjob-examples --bin worker`) runs the job. A failing
//! request (`/signups/` with a name over 40 characters) rolls back: the
//! signup and its job are both gone.

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use fairjob::prelude::*;
use fairjob_examples::EchoJob;
use fairjob_postgres::{EnqueueTx, KeepExt, Pump, notify_pumps};
use sqlx::PgPool;

async fn signup(
    State(pool): State<PgPool>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Result<String, (StatusCode, String)> {
    let tenant = headers
        .get("x-tenant")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let fail = |e: &dyn std::fmt::Display| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string());
    let mut tx = pool.begin().await.map_err(|e| fail(&e))?;
    sqlx::query("INSERT INTO signups (tenant, name) VALUES ($1, $2)")
        .bind(&tenant)
        .bind(&name)
        .execute(&mut *tx)
        .await
        .map_err(|e| fail(&e))?;
    // Kept until done: if Redis loses it before it ran, the pump pushes it again.
    let jid = EchoJob(format!("welcome {name}"))
        .set_tenant(tenant)
        .keep_until_done()
        .perform_async_tx(&mut *tx)
        .await
        .map_err(|e| fail(&e))?;
    if name.len() > 40 {
        // Dropping `tx` rolls back: neither the signup nor the job exists.
        return Err((StatusCode::BAD_REQUEST, "name too long".into()));
    }
    tx.commit().await.map_err(|e| fail(&e))?;
    // Wakes the pump at once; sent after the commit, never inside the transaction.
    let _ = notify_pumps(&pool).await;
    Ok(format!("{jid}\n"))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let redis = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let database = std::env::var("DATABASE_URL")?;
    let pool = PgPool::connect(&database).await?;
    fairjob_postgres::migrate(&pool).await?;
    sqlx::query("CREATE TABLE IF NOT EXISTS signups (tenant text, name text)")
        .execute(&pool)
        .await?;
    let client = Client::connect(&redis).await?;
    let pump = tokio::spawn(
        Pump::new(pool.clone(), client)
            .listen(true)
            .run(std::future::pending()),
    );
    let app = Router::new()
        .route("/signups/{name}", post(signup))
        .with_state(pool);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:3001").await?;
    println!("listening on http://127.0.0.1:3001 (POST /signups/:name with an X-Tenant header)");
    tokio::select! {
        served = axum::serve(listener, app) => served?,
        pumped = pump => pumped??,
    }
    Ok(())
}
