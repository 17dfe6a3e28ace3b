//! The axum side of the examples: `POST /reports/{number}` enqueues a
//! [`ReportJob`] for the tenant named by the request's `X-Tenant` header.
//! `src/bin/web.rs` serves it; `tests/testing.rs` tests it without Redis, on
//! `fairjob::testing::Fake`.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use fairjob::prelude::*;
use serde_json::{Value, json};

use crate::ReportJob;

/// The routes, on `client` (a real one in production, a fake's in tests).
pub fn router(client: Client) -> Router {
    Router::new()
        .route("/reports/{number}", post(enqueue_report))
        .with_state(client)
}

/// Enqueues report `number` for the request's tenant; answers with its jid,
/// 400 without an `X-Tenant` header, 500 when the push failed.
pub async fn enqueue_report(
    State(client): State<Client>,
    headers: HeaderMap,
    Path(number): Path<u32>,
) -> (StatusCode, Json<Value>) {
    let Some(tenant) = headers
        .get("x-tenant")
        .and_then(|v| v.to_str().ok())
        .filter(|t| !t.is_empty())
    else {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({ "error": "an X-Tenant header is required" })),
        );
    };
    let job = ReportJob {
        account: tenant.to_owned(),
        number,
    };
    // `.set_tenant()` names the tenant explicitly: it wins over any client
    // middleware and over the type's `#[fair_tenant]`.
    match job.set_tenant(tenant).perform_async(&client).await {
        Ok(jid) => (StatusCode::OK, Json(json!({ "jid": jid }))),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(json!({ "error": e.to_string() })),
        ),
    }
}
