//! The JSON twins: `/api` + each page's path returns the view the page
//! renders, serialized (arguments redacted the same way), and `POST` to
//! `/api/…` runs the same actions, answering `{ "ok": true, "message": … }`.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Extension, Path, State};
use axum::http::{HeaderMap, Uri};
use axum::response::{IntoResponse, Response};
use fairjob::broker::JobSet;

use crate::error::WebError;
use crate::params::Params;
use crate::security::{self, Caller};
use crate::state::WebState;
use crate::{act, load};

type S = State<Arc<WebState>>;
type C = Extension<Caller>;

fn query(uri: &Uri) -> Params {
    Params::parse(uri.query().unwrap_or(""))
}

fn json<T: serde::Serialize>(v: T) -> Response {
    Json(v).into_response()
}

/// How long `/readyz` waits for Redis to answer a PING.
const READY_PING: std::time::Duration = std::time::Duration::from_secs(1);

/// `GET /healthz`: the process is alive (no Redis involved). Open without
/// the token, for probes.
pub(crate) async fn healthz() -> &'static str {
    "ok\n"
}

/// `GET /readyz`: 200 when Redis answers a PING within a second (and, beside
/// a worker, the worker is fetching or quiet on purpose), otherwise 503 with
/// the reason. Open without the token, for probes; it shows nothing else.
pub(crate) async fn readyz(State(s): S) -> Response {
    use axum::http::StatusCode;
    if let Some(w) = &s.config.worker {
        if w.is_stopping() {
            return (StatusCode::SERVICE_UNAVAILABLE, "stopping\n").into_response();
        }
        if !w.is_fetching() && !w.is_quiet() {
            return (StatusCode::SERVICE_UNAVAILABLE, "not fetching yet\n").into_response();
        }
    }
    match tokio::time::timeout(READY_PING, s.client.broker().ping()).await {
        Ok(Ok(_)) => (StatusCode::OK, "ready\n").into_response(),
        Ok(Err(_)) | Err(_) => {
            (StatusCode::SERVICE_UNAVAILABLE, "redis unreachable\n").into_response()
        }
    }
}

/// `GET /api/`.
pub(crate) async fn overview(State(s): S) -> Result<Response, WebError> {
    Ok(json(load::overview(&s).await?))
}

/// `GET /api/queues`.
pub(crate) async fn queues(State(s): S) -> Result<Response, WebError> {
    Ok(json(load::queues(&s).await?))
}

/// `GET /api/tenants?q=`.
pub(crate) async fn tenants(State(s): S, uri: Uri) -> Result<Response, WebError> {
    let q = query(&uri);
    Ok(json(load::tenants(&s, q.value("q").unwrap_or("")).await?))
}

/// `GET /api/tenants/{tenant}`.
pub(crate) async fn tenant(State(s): S, Path(tenant): Path<String>) -> Result<Response, WebError> {
    Ok(json(load::tenant(&s, &tenant, true).await?))
}

/// `GET /api/explain?jid=&tenant=&cursor=&budget=`.
pub(crate) async fn explain(State(s): S, uri: Uri) -> Result<Response, WebError> {
    let q = query(&uri);
    let jid = q
        .value("jid")
        .ok_or_else(|| WebError::BadRequest("`jid` is required".into()))?;
    Ok(json(
        load::explain(
            &s,
            jid,
            q.value("tenant"),
            q.value("cursor"),
            q.number("budget")?,
        )
        .await?,
    ))
}

/// `GET /api/shards/{queue}?cursor=`.
pub(crate) async fn shards(
    State(s): S,
    Path(queue): Path<String>,
    uri: Uri,
) -> Result<Response, WebError> {
    let q = query(&uri);
    Ok(json(
        load::shards(&s, &queue, q.number("cursor")?.unwrap_or(0)).await?,
    ))
}

/// `GET /api/limits?cursor=&key=`.
pub(crate) async fn limits(State(s): S, uri: Uri) -> Result<Response, WebError> {
    let q = query(&uri);
    Ok(json(
        load::limits(&s, q.number("cursor")?.unwrap_or(0), q.value("key")).await?,
    ))
}

async fn jobs(s: &WebState, set: JobSet, uri: &Uri) -> Result<Response, WebError> {
    let q = query(uri);
    let filter = load::job_filter(&q);
    Ok(json(
        load::jobs(s, set, &filter, q.number("cursor")?.unwrap_or(0)).await?,
    ))
}

/// `GET /api/retries`.
pub(crate) async fn retries(State(s): S, uri: Uri) -> Result<Response, WebError> {
    jobs(&s, JobSet::Retry, &uri).await
}
/// `GET /api/scheduled`.
pub(crate) async fn scheduled(State(s): S, uri: Uri) -> Result<Response, WebError> {
    jobs(&s, JobSet::Scheduled, &uri).await
}
/// `GET /api/dead`.
pub(crate) async fn dead(State(s): S, uri: Uri) -> Result<Response, WebError> {
    jobs(&s, JobSet::Dead, &uri).await
}

/// `GET /api/busy`.
pub(crate) async fn busy(State(s): S, uri: Uri) -> Result<Response, WebError> {
    let q = query(&uri);
    Ok(json(
        load::busy(&s, q.number("cursor")?.unwrap_or(0)).await?,
    ))
}

fn form(
    s: &WebState,
    caller: &Caller,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Params, WebError> {
    let f = Params::parse(&String::from_utf8_lossy(body));
    security::check_post(s, caller, headers, f.value("csrf"))?;
    security::check_actions(s)?;
    Ok(f)
}

/// `POST /api/queues`.
pub(crate) async fn post_queues(
    State(s): S,
    Extension(c): C,
    h: HeaderMap,
    b: Bytes,
) -> Result<Response, WebError> {
    let f = form(&s, &c, &h, &b)?;
    Ok(json(act::on_queue(&s, &f).await?))
}
/// `POST /api/shards/{queue}`.
pub(crate) async fn post_shards(
    State(s): S,
    Extension(c): C,
    Path(queue): Path<String>,
    h: HeaderMap,
    b: Bytes,
) -> Result<Response, WebError> {
    let f = form(&s, &c, &h, &b)?;
    Ok(json(act::on_shards(&s, &queue, &f).await?))
}
/// `POST /api/limits`.
pub(crate) async fn post_limits(
    State(s): S,
    Extension(c): C,
    h: HeaderMap,
    b: Bytes,
) -> Result<Response, WebError> {
    let f = form(&s, &c, &h, &b)?;
    Ok(json(act::on_limit(&s, &f).await?))
}
/// `POST /api/busy`.
pub(crate) async fn post_busy(
    State(s): S,
    Extension(c): C,
    h: HeaderMap,
    b: Bytes,
) -> Result<Response, WebError> {
    let f = form(&s, &c, &h, &b)?;
    Ok(json(act::on_process(&s, &f).await?))
}
/// `POST /api/retries`.
pub(crate) async fn post_retries(
    State(s): S,
    Extension(c): C,
    h: HeaderMap,
    b: Bytes,
) -> Result<Response, WebError> {
    let f = form(&s, &c, &h, &b)?;
    Ok(json(act::on_jobs(&s, JobSet::Retry, &f).await?))
}
/// `POST /api/scheduled`.
pub(crate) async fn post_scheduled(
    State(s): S,
    Extension(c): C,
    h: HeaderMap,
    b: Bytes,
) -> Result<Response, WebError> {
    let f = form(&s, &c, &h, &b)?;
    Ok(json(act::on_jobs(&s, JobSet::Scheduled, &f).await?))
}
/// `POST /api/dead`.
pub(crate) async fn post_dead(
    State(s): S,
    Extension(c): C,
    h: HeaderMap,
    b: Bytes,
) -> Result<Response, WebError> {
    let f = form(&s, &c, &h, &b)?;
    Ok(json(act::on_jobs(&s, JobSet::Dead, &f).await?))
}
