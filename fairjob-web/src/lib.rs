//! # fairjob-web
//!
//! The fairjob dashboard: what fairjob's fairness is doing, and the
//! operator's controls. It shows per queue the jobs runnable now against the
//! jobs blocked and why (paused, tenant at its limit, slot limit,
//! scheduled), each queue's planned share of fetches next to its measured
//! share, per tenant its pending and running jobs, limits, wait percentiles
//! and reroute state (the rule that matches now and when new jobs go back),
//! sharded queues' dispatch order, slot holders and waiters, Sidekiq's
//! `retry`, `schedule` and `dead` sets with their actions and a tenant
//! column, the worker processes, batches (the newest, and one with its
//! failed members), and "explain": where one job is and why it waits. Every page has a JSON twin under `/api`.
//!
//! An application nests it:
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let client = fairjob::Client::connect("redis://127.0.0.1/").await?;
//! let app = axum::Router::new().nest("/fairjob", fairjob_web::router(client, fairjob_web::WebConfig::default()));
//! # let _ = app; Ok(()) }
//! ```
//!
//! and the worker serves it: `worker web --bind 127.0.0.1:7433`, or beside
//! processing with `worker run --web 127.0.0.1:7433`.
//!
//! Security: read-only unless actions are enabled ([`WebConfig::actions`]);
//! with a token ([`WebConfig::token`]) every route, pages and API, wants
//! `Authorization: Bearer <token>` or the cookie the login form sets; every
//! POST must come from the dashboard's own origin (`Origin`,
//! `Sec-Fetch-Site`) and carry the session's CSRF token; a strict
//! Content-Security-Policy allows only the dashboard's own script and
//! stylesheet; every tenant id, class, argument and error message is
//! HTML-escaped by the compile-time templates; arguments can be redacted
//! ([`WebConfig::redact_args`]). Nothing a page or its auto-refresh reads
//! walks a whole queue or set: lists come in pages of at most 100 rows,
//! bulk actions take at most 1,000 entries, and walks (filters, explain) run
//! only when asked, bounded and resumable.
//!
//! Modules, in layers (a test checks that imports only point down): `error`,
//! `config`, `state`, `fmt`, `params`, `charts`, `escape` (0) → `security`,
//! `load`, `act`, `assets` (1) → `request` (2, the extractors) → `pages/`
//! (one file per page), `api` (3) → `routes` (4).

mod act;
mod api;
mod assets;
mod charts;
mod config;
mod error;
mod escape;
pub mod fmt;
mod load;
mod pages;
mod params;
mod reasons;
mod request;
mod routes;
mod security;
mod state;

use std::future::Future;
use std::net::SocketAddr;

pub use api::readiness;
pub use config::{Panel, WebConfig};
pub use error::WebError;
pub use reasons::{reason_text, refusal_text};

/// Rows on one page of a dashboard list (tenants, shards, slot-limit keys,
/// worker processes); the JSON twins page the same way.
pub const PAGE_ROWS: usize = 100;

/// The dashboard's routes on `client`, ready to serve or to nest
/// (`app.nest("/fairjob", fairjob_web::router(client, config))`).
pub fn router(client: fairjob::Client, config: WebConfig) -> axum::Router {
    routes::router(client, config)
}

/// Refuses to serve on a non-loopback address without a token: the
/// dashboard shows job arguments and, with actions, changes state.
pub fn check_bind(addr: SocketAddr, config: &WebConfig) -> Result<(), WebError> {
    if !addr.ip().is_loopback() && config.token.is_none() {
        return Err(WebError::Unprotected(addr));
    }
    Ok(())
}

/// Serves the dashboard on `listener` until `shutdown` resolves (after
/// [`check_bind`] on its address).
pub async fn serve(
    client: fairjob::Client,
    config: WebConfig,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), WebError> {
    check_bind(listener.local_addr()?, &config)?;
    let app = router(client, config);
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await?;
    Ok(())
}
