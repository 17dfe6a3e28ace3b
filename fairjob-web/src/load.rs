//! Loading the views pages and their JSON twins share: one call into
//! `fairjob::inspect` per view (the page renders it, the API serializes it),
//! with the argument redaction hook applied to every job shown.

use fairjob::inspect::JobSet;
use fairjob::inspect::{
    BATCH_ROWS, BatchView, BatchesView, Explanation, JobFilter, JobPage, LimitDetail, LimitPage,
    LongWait, MAX_MINUTES, OverviewView, Page, ProcessPage, QueuesView, RateLimitsView,
    SCAN_BUDGET, STEP_ROWS, ShardView, TenantView, UniqueLockPage, WorkflowView, class_of_limit,
};
use serde::Serialize;

use crate::PAGE_ROWS;
use crate::error::WebError;
use crate::params::Params;
use crate::state::WebState;

/// Rows of a retry, scheduled or dead listing.
const JOB_ROWS: usize = 50;

/// Slot-limit keys in use whose holders and waiters the limits page shows.
const BUSY_KEYS_SHOWN: usize = 10;

/// Holders and waiters shown per key in use (all of them, up to a page, for
/// the one key asked for).
const BUSY_KEY_ROWS: usize = 5;

fn redact_page(state: &WebState, page: &mut JobPage) {
    for entry in &mut page.rows {
        entry.args = state.config.show_args(&entry.class, &entry.args);
    }
}

/// The overview.
pub(crate) async fn overview(state: &WebState) -> Result<OverviewView, WebError> {
    let classes = state.classes().await?;
    Ok(state.inspector().dashboard_overview(&classes).await?)
}

/// The queues page.
pub(crate) async fn queues(state: &WebState) -> Result<QueuesView, WebError> {
    let classes = state.classes().await?;
    Ok(state.inspector().queues_view(&classes).await?)
}

/// Recently active tenants, optionally those whose id contains `query`.
#[derive(Debug, Serialize)]
pub(crate) struct TenantsView {
    pub query: String,
    pub minutes: u64,
    pub tenants: Vec<LongWait>,
}

pub(crate) async fn tenants(state: &WebState, query: &str) -> Result<TenantsView, WebError> {
    let (names, _, _) = state.inspector().queue_names().await?;
    let minutes = MAX_MINUTES;
    let tenants = state
        .inspector()
        .recent_tenants(&names, minutes, query, PAGE_ROWS)
        .await?;
    Ok(TenantsView {
        query: query.to_owned(),
        minutes,
        tenants,
    })
}

/// One tenant (`sets`: with its entries in `retry` and `dead`, a bounded scan).
pub(crate) async fn tenant(
    state: &WebState,
    tenant: &str,
    sets: bool,
) -> Result<TenantView, WebError> {
    let classes = state.classes().await?;
    let mut view = state
        .inspector()
        .tenant_view(tenant, &classes, sets)
        .await?;
    redact_page(state, &mut view.retries);
    redact_page(state, &mut view.dead);
    Ok(view)
}

/// Explain one job.
pub(crate) async fn explain(
    state: &WebState,
    jid: &str,
    tenant: Option<&str>,
    cursor: Option<&str>,
    budget: Option<u64>,
) -> Result<Explanation, WebError> {
    let classes = state.classes().await?;
    let mut explanation = state
        .inspector()
        .explain(jid, tenant, cursor, budget, &classes)
        .await?;
    if let Some(job) = &mut explanation.job {
        job.args = state.config.show_args(&job.class, &job.args);
    }
    Ok(explanation)
}

/// What a place besides Redis knows of a jid (explain's other sources).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SourceView {
    /// The panel's heading ("" when the lookup failed).
    pub title: String,
    /// `(label, value)` rows.
    pub rows: Vec<(String, String)>,
    /// Why the lookup failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Looks `jid` up in each place besides Redis the dashboard was given
/// ([`crate::WebConfig::explain_source`]), in order.
pub(crate) async fn explain_sources(state: &WebState, jid: &str) -> Vec<SourceView> {
    let mut out = Vec::new();
    for look_up in &state.config.explain_sources {
        match look_up(jid.to_owned()).await {
            Ok(Some(p)) => out.push(SourceView {
                title: p.title,
                rows: p.rows,
                error: None,
            }),
            Ok(None) => {}
            Err(e) => out.push(SourceView {
                title: String::new(),
                rows: Vec::new(),
                error: Some(e),
            }),
        }
    }
    out
}

/// A sharded queue's fair-yield settings, as shown (defaults filled in).
pub(crate) async fn yield_settings(
    state: &WebState,
    queue: &str,
) -> Result<fairjob::policy::share::YieldSettings, WebError> {
    let stored = state.inspector().yield_policy(queue).await?;
    let d = fairjob::policy::share::YieldSettings::DEFAULT;
    Ok(fairjob::policy::share::YieldSettings {
        grace: stored.grace.unwrap_or(d.grace),
        min_run: stored.min_run.unwrap_or(d.min_run),
        cooldown: stored.cooldown.unwrap_or(d.cooldown),
        enabled: !stored.off,
    })
}

/// A sharded queue, a page of its tenants.
pub(crate) async fn shards(
    state: &WebState,
    queue: &str,
    cursor: u64,
) -> Result<ShardView, WebError> {
    let page = Page {
        cursor,
        count: PAGE_ROWS,
    };
    Ok(state.inspector().shard_view(queue, page).await?)
}

/// A page of live unique locks.
pub(crate) async fn unique(state: &WebState, cursor: u64) -> Result<UniqueLockPage, WebError> {
    Ok(state
        .inspector()
        .unique_locks(Page {
            cursor,
            count: PAGE_ROWS,
        })
        .await?)
}

/// Slot limits: a page of keys, and the detail of the keys in use (or of one key).
#[derive(Debug, Serialize)]
pub(crate) struct LimitsView {
    pub page: LimitPage,
    pub details: Vec<LimitDetail>,
    /// Declared default limits by key, where a published class says.
    pub defaults: Vec<(String, u32)>,
    /// Rate limiters (the first page).
    pub rates: RateLimitsView,
}

pub(crate) async fn limits(
    state: &WebState,
    cursor: u64,
    key: Option<&str>,
) -> Result<LimitsView, WebError> {
    let inspector = state.inspector();
    let page = inspector
        .limits(Page {
            cursor,
            count: PAGE_ROWS,
        })
        .await?;
    let mut details = Vec::new();
    match key {
        Some(key) => details.push(inspector.limit_detail(key, PAGE_ROWS).await?),
        None => {
            for row in page
                .rows
                .iter()
                .filter(|r| r.running > 0 || r.waiting > 0)
                .take(BUSY_KEYS_SHOWN)
            {
                details.push(inspector.limit_detail(&row.key, BUSY_KEY_ROWS).await?);
            }
        }
    }
    let classes = state.classes().await?;
    let defaults = page
        .rows
        .iter()
        .filter_map(|r| {
            class_of_limit(&classes, &r.key)
                .and_then(|c| c.concurrency)
                .map(|d| (r.key.clone(), d))
        })
        .collect();
    let rates = inspector.rate_limits().list(Page::first(PAGE_ROWS)).await?;
    Ok(LimitsView {
        page,
        details,
        defaults,
        rates,
    })
}

/// The filter of a jobs listing, from query or form pairs.
pub(crate) fn job_filter(params: &Params) -> JobFilter {
    let field = |key: &str| params.value(key).map(str::to_owned);
    JobFilter {
        class: field("class"),
        tenant: field("tenant"),
        queue: field("queue"),
        error: field("error"),
    }
}

/// A set of jobs: a page, or a filtered scan step.
pub(crate) async fn jobs(
    state: &WebState,
    set: JobSet,
    filter: &JobFilter,
    cursor: u64,
) -> Result<JobPage, WebError> {
    let mut page = state
        .inspector()
        .jobs_page(set, filter, cursor, JOB_ROWS, SCAN_BUDGET)
        .await?;
    redact_page(state, &mut page);
    Ok(page)
}

/// Periodic schedules.
pub(crate) async fn cron(state: &WebState) -> Result<Vec<fairjob::inspect::CronRow>, WebError> {
    Ok(state.inspector().cron().await?)
}

/// The newest batches.
pub(crate) async fn batches(state: &WebState) -> Result<BatchesView, WebError> {
    Ok(state.inspector().batches(BATCH_ROWS).await?)
}

/// One batch with some of its failed members; an unknown (or expired) one
/// is not found.
pub(crate) async fn batch(state: &WebState, bid: &str) -> Result<BatchView, WebError> {
    state
        .inspector()
        .batch(bid)
        .await?
        .ok_or_else(|| WebError::NotFound(format!("batch {bid:?} (unknown, or its data expired)")))
}

/// A workflow and a page of its steps from the `from`-th, in name order
/// (`limit`, default [`STEP_ROWS`]); an unknown (or expired) batch, or one
/// that is not a workflow, is not found.
pub(crate) async fn workflow(
    state: &WebState,
    wid: &str,
    from: u64,
    limit: Option<usize>,
) -> Result<WorkflowView, WebError> {
    state
        .inspector()
        .workflow(wid, from, limit.unwrap_or(STEP_ROWS))
        .await?
        .ok_or_else(|| {
            WebError::NotFound(format!(
                "workflow {wid:?} (unknown, not a workflow, or its data expired)"
            ))
        })
}

/// The worker processes and their running jobs.
pub(crate) async fn busy(state: &WebState, cursor: u64) -> Result<ProcessPage, WebError> {
    let mut page = state
        .inspector()
        .processes(Page {
            cursor,
            count: PAGE_ROWS,
        })
        .await?;
    for process in &mut page.rows {
        for job in &mut process.jobs {
            job.args = state.config.show_args(&job.class, &job.args);
        }
    }
    Ok(page)
}
