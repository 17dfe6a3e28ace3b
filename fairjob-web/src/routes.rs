//! The route table: every page, its JSON twin under `/api`, the actions
//! (POST), login, and the static files, all behind the security guard;
//! `/healthz` and `/readyz` for probes in front of it.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::routing::get;
use fairjob::{Client, Registry};

use crate::config::WebConfig;
use crate::state::WebState;
use crate::{api, assets, pages, security};

pub(crate) fn router(client: Client, config: WebConfig) -> Router {
    // The classes this binary links (an app that nests the dashboard links
    // its jobs); workers publish theirs in Redis too.
    let local_classes = Registry::from_inventory()
        .map(|r| r.class_infos())
        .unwrap_or_default();
    let state = Arc::new(WebState {
        inspector: client.inspector(),
        client,
        config,
        sessions: Mutex::new(Default::default()),
        local_classes,
    });
    Router::new()
        .route("/", get(pages::overview))
        .route("/queues", get(pages::queues).post(pages::post_queues))
        .route("/tenants", get(pages::tenants))
        .route("/tenants/{tenant}", get(pages::tenant))
        .route("/explain", get(pages::explain))
        .route(
            "/shards/{queue}",
            get(pages::shards).post(pages::post_shards),
        )
        .route("/limits", get(pages::limits).post(pages::post_limits))
        .route("/limits/rate", axum::routing::post(pages::post_rate))
        .route("/unique", get(pages::unique).post(pages::post_unique))
        .route("/retries", get(pages::retries).post(pages::post_retries))
        .route(
            "/scheduled",
            get(pages::scheduled).post(pages::post_scheduled),
        )
        .route("/dead", get(pages::dead).post(pages::post_dead))
        .route("/busy", get(pages::busy).post(pages::post_busy))
        .route("/cron", get(pages::cron).post(pages::post_cron))
        .route("/batches", get(pages::batches))
        .route("/batches/{bid}", get(pages::batch))
        .route("/workflows/{wid}", get(pages::workflow))
        .route("/login", get(pages::login_form).post(pages::login))
        .route("/logout", axum::routing::post(pages::logout))
        .route("/api", get(api::overview))
        .route("/api/", get(api::overview))
        .route("/api/queues", get(api::queues).post(api::post_queues))
        .route("/api/tenants", get(api::tenants))
        .route("/api/tenants/{tenant}", get(api::tenant))
        .route("/api/explain", get(api::explain))
        .route(
            "/api/shards/{queue}",
            get(api::shards).post(api::post_shards),
        )
        .route("/api/limits", get(api::limits).post(api::post_limits))
        .route("/api/limits/rate", axum::routing::post(api::post_rate))
        .route("/api/unique", get(api::unique).post(api::post_unique))
        .route("/api/retries", get(api::retries).post(api::post_retries))
        .route(
            "/api/scheduled",
            get(api::scheduled).post(api::post_scheduled),
        )
        .route("/api/dead", get(api::dead).post(api::post_dead))
        .route("/api/busy", get(api::busy).post(api::post_busy))
        .route("/api/cron", get(api::cron).post(api::post_cron))
        .route("/api/batches", get(api::batches))
        .route("/api/batches/{bid}", get(api::batch))
        .route("/api/workflows/{wid}", get(api::workflow))
        .route("/static/{file}", get(assets::file))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            security::guard,
        ))
        // Probes, outside the guard: they answer with a word and no data.
        .route("/healthz", get(api::healthz))
        .route("/readyz", get(api::readyz))
        .with_state(state)
}
