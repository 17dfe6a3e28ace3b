//! `worker run --metrics ADDR`: installs the Prometheus exporter's recorder
//! (the library reports through the `metrics` facade) and serves, on one
//! small HTTP listener, `/metrics` (the text format), `/healthz` (the process
//! is alive) and `/readyz` (Redis answers and the worker is fetching, or is
//! quiet on purpose; 503 otherwise).
//!
//! The exporter is built without its own listener, push-gateway client or
//! TLS: the handle's `render()` is served from an axum router (axum stays a
//! plain dependency so `--metrics` works with `default-features = false`:
//! measured in a release worker built without `web` and `postgres`, the
//! axum/hyper/tower/matchit/httparse symbols are about 0.2 MB of its 9.6 MB of
//! text, against 3.5 MB of text for the dashboard and sqlx, so a hand-written HTTP/1.1
//! handler would not be worth its code). Gauges and
//! histograms that stop changing are dropped after the idle timeout
//! (`--metrics-idle-timeout`); the listener renders once a second in the
//! background so that timeout is kept even when nobody scrapes, which is what
//! lets a tenant's label slot be given to another tenant safely (see
//! `fairjob::metrics`).

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, Result};
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use fairjob::config::MetricsConfig;
use fairjob::{Client, WorkerHandle};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use metrics_util::MetricKindMask;

/// How often the exporter's idle timeout is applied without a scrape.
const UPKEEP: Duration = Duration::from_secs(1);

/// Installs the Prometheus recorder as the process's global recorder, with
/// the idle timeout of `config` for gauges and histograms and fairjob's
/// histogram buckets; the handle renders the text format.
pub fn install_metrics(config: &MetricsConfig) -> Result<PrometheusHandle> {
    let recorder = PrometheusBuilder::new()
        .idle_timeout(
            MetricKindMask::GAUGE | MetricKindMask::HISTOGRAM,
            Some(config.idle_timeout),
        )
        .set_buckets(fairjob::metrics::BUCKETS)
        .context("histogram buckets")?
        .build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder)
        .map_err(|_| anyhow::anyhow!("a metrics recorder is already installed"))?;
    fairjob::metrics::describe();
    Ok(handle)
}

#[derive(Clone)]
struct Probe {
    handle: PrometheusHandle,
    worker: WorkerHandle,
    client: Client,
}

/// The metrics listener running beside a worker ([`serve_metrics`]).
#[derive(Debug)]
pub struct MetricsListener {
    /// The address it listens on.
    pub local: SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
    upkeep: tokio::task::JoinHandle<()>,
}

/// Binds `addr` and serves `/metrics` (what `handle` renders), `/healthz`
/// and `/readyz` (Redis answers through `client` and `worker` is fetching or
/// quiet on purpose) in the background, until [`MetricsListener::stop`].
pub async fn serve_metrics(
    addr: SocketAddr,
    handle: PrometheusHandle,
    worker: WorkerHandle,
    client: Client,
) -> Result<MetricsListener> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}"))?;
    let local = listener.local_addr()?;
    // Tests and scripts read this line for the port (`--metrics 127.0.0.1:0`).
    println!("fairjob metrics on http://{local}/metrics");
    tracing::info!(%local, "metrics listening (/metrics, /healthz, /readyz)");
    let upkeep = {
        let handle = handle.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(UPKEEP).await;
                drop(handle.render());
            }
        })
    };
    let app = Router::new()
        .route("/metrics", get(scrape))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(Probe {
            handle,
            worker,
            client,
        });
    let (stop, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let shutdown = async move {
            let _ = rx.await;
        };
        if let Err(e) = axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await
        {
            tracing::error!(error = %e, "the metrics listener stopped");
        }
    });
    Ok(MetricsListener {
        local,
        stop,
        task,
        upkeep,
    })
}

impl MetricsListener {
    /// Stops the listener (after the worker stopped).
    pub async fn stop(self) {
        self.upkeep.abort();
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

async fn scrape(State(p): State<Probe>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        p.handle.render(),
    )
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(p): State<Probe>) -> (StatusCode, String) {
    if p.worker.is_stopping() {
        return (StatusCode::SERVICE_UNAVAILABLE, "stopping\n".into());
    }
    if !p.worker.is_fetching() && !p.worker.is_quiet() {
        return (StatusCode::SERVICE_UNAVAILABLE, "not fetching yet\n".into());
    }
    let (status, text) = readiness(&p.client.inspector()).await;
    match p.worker.redis_refusal() {
        // Redis refuses this worker's lease renewals (what its `/readyz`
        // adds to the server's own facts).
        Some((_, said)) if status == StatusCode::OK => (
            StatusCode::OK,
            format!("degraded: redis refuses this worker's lease renewals: {said}\n"),
        ),
        _ => (status, text),
    }
}

/// What `/readyz` answers about Redis (the dashboard's answer too).
async fn readiness(inspector: &fairjob::inspect::Inspector) -> (StatusCode, String) {
    let r = inspector.readiness().await;
    let status = StatusCode::from_u16(r.status()).expect("200 or 503");
    (status, r.text())
}
