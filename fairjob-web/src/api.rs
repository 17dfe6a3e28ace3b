//! The JSON twins: `/api` + each page's path returns the view the page
//! renders, serialized (arguments redacted the same way), and `POST` to
//! `/api/…` runs the same actions, answering `{ "ok": true, "message": … }`.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use fairjob::inspect::JobSet;
use fairjob::inspect::{
    BatchView, BatchesView, JobPage, OverviewView, ProcessPage, QueuesView, ShardView, TenantView,
    UniqueLockPage, WorkflowView,
};

use crate::act::{self, Done};
use crate::error::WebError;
use crate::load::{self, LimitsView, TenantsView};
use crate::params::Params;
use crate::reasons::ExplanationJson;
use crate::request::CheckedForm;
use crate::state::WebState;

/// A JSON answer, or the error's status and message.
type JsonResult<T> = Result<Json<T>, WebError>;

/// `GET /healthz`: the process is alive (no Redis involved). Open without
/// the token, for probes.
pub(crate) async fn healthz() -> &'static str {
    "ok\n"
}

/// `GET /readyz`: 200 when Redis answers a PING within a second (and, beside
/// a worker, the worker is fetching or quiet on purpose), otherwise 503 with
/// the reason. Open without the token, for probes; it shows nothing else.
pub(crate) async fn readyz(State(state): State<Arc<WebState>>) -> Response {
    use axum::http::StatusCode;
    if let Some(worker) = &state.config.worker {
        if worker.is_stopping() {
            return (StatusCode::SERVICE_UNAVAILABLE, "stopping\n").into_response();
        }
        if !worker.is_fetching() && !worker.is_quiet() {
            return (StatusCode::SERVICE_UNAVAILABLE, "not fetching yet\n").into_response();
        }
    }
    let (status, text) = readiness(state.inspector()).await;
    (status, text).into_response()
}

/// What `/readyz` answers about Redis, beside a worker or not: 200 `ready`;
/// 200 `degraded: <why>` while Redis answers but refuses writes (read-only
/// replica, out of memory, writes stopped after a failed save); 503 with the
/// reason when it does not answer (unreachable, busy, loading).
pub async fn readiness(
    inspector: &fairjob::inspect::Inspector,
) -> (axum::http::StatusCode, String) {
    let r = inspector.readiness().await;
    let status = axum::http::StatusCode::from_u16(r.status()).expect("200 or 503");
    (status, r.text())
}

/// `GET /api/`.
pub(crate) async fn overview(State(state): State<Arc<WebState>>) -> JsonResult<OverviewView> {
    Ok(Json(load::overview(&state).await?))
}

/// `GET /api/queues`.
pub(crate) async fn queues(State(state): State<Arc<WebState>>) -> JsonResult<QueuesView> {
    Ok(Json(load::queues(&state).await?))
}

/// `GET /api/tenants?q=`.
pub(crate) async fn tenants(
    State(state): State<Arc<WebState>>,
    query: Params,
) -> JsonResult<TenantsView> {
    let needle = query.value("q").unwrap_or("");
    Ok(Json(load::tenants(&state, needle).await?))
}

/// `GET /api/tenants/{tenant}`.
pub(crate) async fn tenant(
    State(state): State<Arc<WebState>>,
    Path(tenant): Path<String>,
) -> JsonResult<TenantView> {
    Ok(Json(load::tenant(&state, &tenant, true).await?))
}

/// `GET /api/explain?jid=&tenant=&cursor=&budget=`.
pub(crate) async fn explain(
    State(state): State<Arc<WebState>>,
    query: Params,
) -> JsonResult<ExplanationJson> {
    let jid = query
        .value("jid")
        .ok_or_else(|| WebError::BadRequest("`jid` is required".into()))?;
    let (tenant, cursor) = (query.value("tenant"), query.value("cursor"));
    let budget = query.number("budget")?;
    let mut json: ExplanationJson = load::explain(&state, jid, tenant, cursor, budget)
        .await?
        .into();
    json.elsewhere = load::explain_sources(&state, jid).await;
    Ok(Json(json))
}

/// `GET /api/shards/{queue}?cursor=`.
pub(crate) async fn shards(
    State(state): State<Arc<WebState>>,
    Path(queue): Path<String>,
    query: Params,
) -> JsonResult<ShardView> {
    Ok(Json(load::shards(&state, &queue, query.cursor()?).await?))
}

/// `GET /api/limits?cursor=&key=`.
pub(crate) async fn limits(
    State(state): State<Arc<WebState>>,
    query: Params,
) -> JsonResult<LimitsView> {
    let key = query.value("key");
    Ok(Json(load::limits(&state, query.cursor()?, key).await?))
}

/// `GET /api/unique?cursor=`.
pub(crate) async fn unique(
    State(state): State<Arc<WebState>>,
    query: Params,
) -> JsonResult<UniqueLockPage> {
    Ok(Json(load::unique(&state, query.cursor()?).await?))
}

async fn jobs(state: &WebState, set: JobSet, query: &Params) -> JsonResult<JobPage> {
    let filter = load::job_filter(query);
    Ok(Json(
        load::jobs(state, set, &filter, query.cursor()?).await?,
    ))
}

/// `GET /api/retries?class=&tenant=&queue=&error=&cursor=`.
pub(crate) async fn retries(
    State(state): State<Arc<WebState>>,
    query: Params,
) -> JsonResult<JobPage> {
    jobs(&state, JobSet::Retry, &query).await
}

/// `GET /api/scheduled?…` (as retries).
pub(crate) async fn scheduled(
    State(state): State<Arc<WebState>>,
    query: Params,
) -> JsonResult<JobPage> {
    jobs(&state, JobSet::Scheduled, &query).await
}

/// `GET /api/dead?…` (as retries).
pub(crate) async fn dead(State(state): State<Arc<WebState>>, query: Params) -> JsonResult<JobPage> {
    jobs(&state, JobSet::Dead, &query).await
}

/// `GET /api/busy?cursor=`.
pub(crate) async fn busy(
    State(state): State<Arc<WebState>>,
    query: Params,
) -> JsonResult<ProcessPage> {
    Ok(Json(load::busy(&state, query.cursor()?).await?))
}

// ---- actions: the form checked by `CheckedForm`, then one call ----

/// `POST /api/queues`.
pub(crate) async fn post_queues(form: CheckedForm) -> JsonResult<Done> {
    Ok(Json(act::on_queue(&form.state, &form.fields).await?))
}

/// `POST /api/shards/{queue}`.
pub(crate) async fn post_shards(Path(queue): Path<String>, form: CheckedForm) -> JsonResult<Done> {
    Ok(Json(
        act::on_shards(&form.state, &queue, &form.fields).await?,
    ))
}

/// `POST /api/limits`.
pub(crate) async fn post_limits(form: CheckedForm) -> JsonResult<Done> {
    Ok(Json(act::on_limit(&form.state, &form.fields).await?))
}

/// `POST /api/limits/rate`.
pub(crate) async fn post_rate(form: CheckedForm) -> JsonResult<Done> {
    Ok(Json(act::on_rate(&form.state, &form.fields).await?))
}

/// `GET /api/cron`.
pub(crate) async fn cron(
    State(state): State<Arc<WebState>>,
) -> JsonResult<Vec<fairjob::inspect::CronRow>> {
    Ok(Json(load::cron(&state).await?))
}

/// `GET /api/batches`.
pub(crate) async fn batches(State(state): State<Arc<WebState>>) -> JsonResult<BatchesView> {
    Ok(Json(load::batches(&state).await?))
}

/// `GET /api/batches/{bid}`.
pub(crate) async fn batch(
    State(state): State<Arc<WebState>>,
    Path(bid): Path<String>,
) -> JsonResult<BatchView> {
    Ok(Json(load::batch(&state, &bid).await?))
}

/// `GET /api/workflows/{wid}?from=&limit=`.
pub(crate) async fn workflow(
    State(state): State<Arc<WebState>>,
    Path(wid): Path<String>,
    query: Params,
) -> JsonResult<WorkflowView> {
    let from = query.number("from")?.unwrap_or(0);
    Ok(Json(
        load::workflow(&state, &wid, from, query.number("limit")?).await?,
    ))
}

/// `POST /api/cron`.
pub(crate) async fn post_cron(form: CheckedForm) -> JsonResult<Done> {
    Ok(Json(act::on_cron(&form.state, &form.fields).await?))
}

/// `POST /api/unique`.
pub(crate) async fn post_unique(form: CheckedForm) -> JsonResult<Done> {
    Ok(Json(act::on_unique(&form.state, &form.fields).await?))
}

/// `POST /api/busy`.
pub(crate) async fn post_busy(form: CheckedForm) -> JsonResult<Done> {
    Ok(Json(act::on_process(&form.state, &form.fields).await?))
}

/// `POST /api/retries`.
pub(crate) async fn post_retries(form: CheckedForm) -> JsonResult<Done> {
    Ok(Json(
        act::on_jobs(&form.state, JobSet::Retry, &form.fields).await?,
    ))
}

/// `POST /api/scheduled`.
pub(crate) async fn post_scheduled(form: CheckedForm) -> JsonResult<Done> {
    Ok(Json(
        act::on_jobs(&form.state, JobSet::Scheduled, &form.fields).await?,
    ))
}

/// `POST /api/dead`.
pub(crate) async fn post_dead(form: CheckedForm) -> JsonResult<Done> {
    Ok(Json(
        act::on_jobs(&form.state, JobSet::Dead, &form.fields).await?,
    ))
}
