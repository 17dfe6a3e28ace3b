//! The HTML pages: each handler reads one view (`views`), turns it into
//! display rows and renders a compile-time template (HTML-escaped by
//! default). `?fragment=live` renders only the page's live part, for the
//! script's refresh, at most once per the server's minimum interval. Each
//! action is a POST checked for origin and CSRF token, then redirected back
//! (303) with a message.

use std::sync::Arc;

use askama::Template;
use axum::body::Bytes;
use axum::extract::{Extension, Path, State};
use axum::http::{HeaderMap, Uri};
use axum::response::{Html, IntoResponse, Redirect, Response};
use fairjob::broker::JobSet;
use fairjob::broker::admin::{
    JobEntry, LongWait, MEASURED_MINUTES, RECENT_MINUTES, SCHEDULED_SAMPLE, SHARD_COUNT_PAGES,
    SHARE_MINUTES,
};

use crate::PAGE_ROWS;
use crate::act::Done;
use crate::charts::{bars_svg, histogram_svg, share_svg, split_svg};
use crate::error::WebError;
use crate::fmt::{duration_or_dash, format_count, millis_or_dash, percent, shorten, time_or_dash};
use crate::params::{Params, url_component};
use crate::request::CheckedForm;
use crate::security::{self, Caller};
use crate::state::WebState;
use crate::{act, load};

type S = State<Arc<WebState>>;
type C = Extension<Caller>;

/// One navigation link.
pub(crate) struct NavLink {
    href: &'static str,
    label: &'static str,
    active: bool,
}

/// What every page's frame shows.
pub(crate) struct Chrome {
    base: String,
    csrf: String,
    actions: bool,
    refresh: u64,
    logout: bool,
    nav: Vec<NavLink>,
    version: &'static str,
    redis: String,
    message: Option<String>,
}

const NAV: &[(&str, &str)] = &[
    ("/", "Overview"),
    ("/queues", "Queues"),
    ("/tenants", "Tenants"),
    ("/limits", "Limits"),
    ("/busy", "Busy"),
    ("/retries", "Retries"),
    ("/scheduled", "Scheduled"),
    ("/dead", "Dead"),
    ("/explain", "Explain"),
];

fn chrome(s: &WebState, caller: &Caller, active: &str, query: &Params) -> Chrome {
    Chrome {
        base: caller.base.clone(),
        csrf: caller.csrf.clone(),
        actions: s.config.actions,
        refresh: s.config.refresh_secs(),
        logout: s.config.token.is_some() && caller.session.is_some(),
        nav: NAV
            .iter()
            .map(|(href, label)| NavLink {
                href,
                label,
                active: *href == active,
            })
            .collect(),
        version: env!("CARGO_PKG_VERSION"),
        redis: s.broker().redis_display().to_owned(),
        message: query.value("msg").map(|m| shorten(m, 300)),
    }
}

/// The query pairs, and whether this is a live refresh (checked against
/// the minimum interval).
fn query(s: &WebState, caller: &Caller, uri: &Uri) -> Result<(Params, bool), WebError> {
    let pairs = Params::parse(uri.query().unwrap_or(""));
    let live = pairs.value("fragment") == Some("live");
    if live {
        security::check_live(s, caller, uri.path())?;
    }
    Ok((pairs, live))
}

fn render<T: Template>(page: &T) -> Result<Response, WebError> {
    Ok(Html(page.render()?).into_response())
}

fn tenant_label(t: &Option<String>) -> (String, Option<String>) {
    match t {
        Some(t) => (t.clone(), Some(url_component(t))),
        None => ("(no tenant)".to_owned(), None),
    }
}

// ---- overview ----

pub(crate) struct Card {
    value: String,
    label: &'static str,
    href: &'static str,
}

pub(crate) struct BlockedLine {
    count: String,
    label: &'static str,
}

pub(crate) struct QueueLine {
    name: String,
    href: String,
    anchor: String,
    sharded: bool,
    paused: bool,
    size: String,
    runnable: String,
    blocked: Vec<BlockedLine>,
    split: String,
    oldest: String,
    done_1m: String,
    failed_1m: String,
    done_1h: String,
    failed_1h: String,
}

pub(crate) struct WaitLine {
    tenant: String,
    href: Option<String>,
    queue: String,
    max: String,
}

fn wait_lines(waits: &[LongWait]) -> Vec<WaitLine> {
    waits
        .iter()
        .map(|w| {
            let (tenant, href) = tenant_label(&w.tenant);
            WaitLine {
                tenant,
                href,
                queue: w.queue.clone(),
                max: millis_or_dash(Some(w.max_ms)),
            }
        })
        .collect()
}

#[derive(Template)]
#[template(path = "overview.html", blocks = ["live"])]
pub(crate) struct OverviewPage {
    c: Chrome,
    warnings: Vec<String>,
    cards: Vec<Card>,
    chart: String,
    queues: Vec<QueueLine>,
    truncated: bool,
    waits: Vec<WaitLine>,
    recent: u64,
    shard_cap: usize,
    scheduled_sample: usize,
}

/// `GET /`.
pub(crate) async fn overview(
    State(s): S,
    Extension(caller): C,
    uri: Uri,
) -> Result<Response, WebError> {
    let (q, live) = query(&s, &caller, &uri)?;
    let v = load::overview(&s).await?;
    let plus = |exact: bool| if exact { "" } else { "+" };
    let page = OverviewPage {
        c: chrome(&s, &caller, "/", &q),
        warnings: v.warnings.clone(),
        cards: vec![
            Card {
                value: format_count(v.processed),
                label: "processed",
                href: "/",
            },
            Card {
                value: format_count(v.failed),
                label: "failed",
                href: "/",
            },
            Card {
                value: format_count(v.busy),
                label: "busy",
                href: "/busy",
            },
            Card {
                value: format_count(v.processes),
                label: "processes",
                href: "/busy",
            },
            Card {
                value: format_count(v.scheduled),
                label: "scheduled",
                href: "/scheduled",
            },
            Card {
                value: format_count(v.retries),
                label: "retries",
                href: "/retries",
            },
            Card {
                value: format_count(v.dead),
                label: "dead",
                href: "/dead",
            },
        ],
        chart: bars_svg(&v.per_minute, 600, 60),
        queues: v
            .queues
            .iter()
            .map(|q| QueueLine {
                name: q.name.clone(),
                href: url_component(&q.name),
                anchor: url_component(&q.name),
                sharded: q.sharded,
                paused: q.paused,
                size: format!("{}{}", format_count(q.size), plus(q.exact)),
                runnable: format!("{}{}", format_count(q.runnable), plus(q.exact)),
                blocked: q
                    .blocked
                    .iter()
                    .map(|b| BlockedLine {
                        count: format_count(b.jobs),
                        label: b.reason.label(),
                    })
                    .collect(),
                split: split_svg(q.runnable, q.blocked_total(), 90),
                oldest: duration_or_dash(q.oldest_secs),
                done_1m: format_count(q.processed_1m),
                failed_1m: format_count(q.failed_1m),
                done_1h: format_count(q.processed_1h),
                failed_1h: format_count(q.failed_1h),
            })
            .collect(),
        truncated: v.queues_truncated,
        waits: wait_lines(&v.longest_waits),
        recent: RECENT_MINUTES,
        shard_cap: SHARD_COUNT_PAGES * PAGE_ROWS,
        scheduled_sample: SCHEDULED_SAMPLE,
    };
    if live {
        render(&page.as_live())
    } else {
        render(&page)
    }
}

// ---- queues ----

pub(crate) struct QueueRow {
    name: String,
    href: String,
    anchor: String,
    sharded: bool,
    paused: bool,
    size: String,
    latency: String,
    planned: String,
    measured: String,
    chart: String,
    declared: String,
}

pub(crate) struct PlanRow {
    tier: usize,
    queue: String,
    weight: String,
    share: String,
}

pub(crate) struct PlanLines {
    processes: String,
    rows: Vec<PlanRow>,
}

#[derive(Template)]
#[template(path = "queues.html", blocks = ["live"])]
pub(crate) struct QueuesPage {
    c: Chrome,
    queues: Vec<QueueRow>,
    plans: Vec<PlanLines>,
    measured_minutes: u64,
}

/// `GET /queues`.
pub(crate) async fn queues(
    State(s): S,
    Extension(caller): C,
    uri: Uri,
) -> Result<Response, WebError> {
    let (q, live) = query(&s, &caller, &uri)?;
    let v = load::queues(&s).await?;
    let page = QueuesPage {
        c: chrome(&s, &caller, "/queues", &q),
        queues: v
            .queues
            .iter()
            .map(|q| {
                let planned = v.planned.get(&q.name).copied();
                let measured = v.measured.get(&q.name).copied().unwrap_or(0.0);
                QueueRow {
                    name: q.name.clone(),
                    href: url_component(&q.name),
                    anchor: url_component(&q.name),
                    sharded: q.sharded,
                    paused: q.paused,
                    size: format_count(q.size),
                    latency: duration_or_dash(q.oldest_secs),
                    planned: planned.map_or_else(|| "not fetched".to_owned(), percent),
                    measured: percent(measured),
                    chart: share_svg(planned.unwrap_or(0.0), measured, 120),
                    declared: v
                        .declared
                        .get(&q.name)
                        .map(|c| c.join(", "))
                        .unwrap_or_default(),
                }
            })
            .collect(),
        plans: v
            .plans
            .iter()
            .map(|p| PlanLines {
                processes: if p.processes.len() == 1 {
                    p.processes[0].clone()
                } else {
                    format!(
                        "{} processes: {}",
                        p.processes.len(),
                        p.processes.join(", ")
                    )
                },
                rows: p
                    .tiers
                    .iter()
                    .enumerate()
                    .flat_map(|(i, t)| {
                        t.queues.iter().map(move |(q, w, share)| PlanRow {
                            tier: i + 1,
                            queue: q.clone(),
                            weight: if *w == 0 {
                                "strict".to_owned()
                            } else {
                                w.to_string()
                            },
                            share: if i == 0 {
                                percent(*share)
                            } else {
                                format!("{} when tiers above are empty", percent(*share))
                            },
                        })
                    })
                    .collect(),
            })
            .collect(),
        measured_minutes: MEASURED_MINUTES,
    };
    if live {
        render(&page.as_live())
    } else {
        render(&page)
    }
}

// ---- tenants ----

#[derive(Template)]
#[template(path = "tenants.html", blocks = ["live"])]
pub(crate) struct TenantsPage {
    c: Chrome,
    query: String,
    exact: Option<String>,
    minutes: u64,
    tenants: Vec<WaitLine>,
}

/// `GET /tenants?q=`.
pub(crate) async fn tenants(
    State(s): S,
    Extension(caller): C,
    uri: Uri,
) -> Result<Response, WebError> {
    let (q, live) = query(&s, &caller, &uri)?;
    let needle = q.value("q").unwrap_or("").to_owned();
    let v = load::tenants(&s, &needle).await?;
    let page = TenantsPage {
        c: chrome(&s, &caller, "/tenants", &q),
        exact: (!needle.is_empty()).then(|| url_component(&needle)),
        query: needle,
        minutes: v.minutes,
        tenants: wait_lines(&v.tenants),
    };
    if live {
        render(&page.as_live())
    } else {
        render(&page)
    }
}

pub(crate) struct TenantQueueLine {
    queue: String,
    href: String,
    sharded: bool,
    pending: String,
    running: String,
    limit: String,
    weight: String,
    floor: String,
    rotation: String,
    started: String,
    p50: String,
    p95: String,
    max: String,
    histogram: String,
}

pub(crate) struct RuleLine {
    queue: String,
    count: String,
    threshold: String,
    per: String,
    matches: bool,
    clears: String,
}

pub(crate) struct RerouteLines {
    class: String,
    base_queue: String,
    next_queue: String,
    back: String,
    rules: Vec<RuleLine>,
}

pub(crate) struct SlotLines {
    key: String,
    href: String,
    limit: String,
    running: u64,
    waiting: u64,
    holders: Vec<String>,
    waiters: Vec<String>,
}

pub(crate) struct EntryLine {
    jid: String,
    jid_href: String,
    class: String,
    queue: String,
    error: String,
    at: String,
}

fn entry_lines(rows: &[JobEntry]) -> Vec<EntryLine> {
    rows.iter()
        .map(|e| EntryLine {
            jid: e.jid.clone(),
            jid_href: url_component(&e.jid),
            class: e.class.clone(),
            queue: e.queue.clone(),
            error: error_text(e),
            at: time_or_dash(e.at),
        })
        .collect()
}

fn error_text(e: &JobEntry) -> String {
    match (&e.error_class, &e.error_message) {
        (Some(c), Some(m)) => shorten(&format!("{c}: {m}"), 200),
        (Some(c), None) => c.clone(),
        (None, Some(m)) => shorten(m, 200),
        (None, None) => String::new(),
    }
}

#[derive(Template)]
#[template(path = "tenant.html", blocks = ["live"])]
pub(crate) struct TenantPage {
    c: Chrome,
    tenant: String,
    href: String,
    recent: u64,
    queues: Vec<TenantQueueLine>,
    reroute: Vec<RerouteLines>,
    slots: Vec<SlotLines>,
    retries: Vec<EntryLine>,
    retries_note: String,
    dead: Vec<EntryLine>,
    dead_note: String,
}

/// `GET /tenants/{tenant}`.
pub(crate) async fn tenant(
    State(s): S,
    Extension(caller): C,
    Path(tenant): Path<String>,
    uri: Uri,
) -> Result<Response, WebError> {
    let (q, live) = query(&s, &caller, &uri)?;
    // The retry/dead scans are not part of the live refresh.
    let v = load::tenant(&s, &tenant, !live).await?;
    let opt = |x: Option<u64>| x.map_or_else(|| "-".to_owned(), format_count);
    let note = |p: &fairjob::broker::admin::JobPage| {
        format!(
            "{} found among the first {} of {} entries.",
            p.rows.len(),
            format_count(p.scanned.unwrap_or(0)),
            format_count(p.total)
        )
    };
    let page = TenantPage {
        c: chrome(&s, &caller, "/tenants", &q),
        href: url_component(&v.tenant),
        tenant: v.tenant.clone(),
        recent: RECENT_MINUTES,
        queues: v
            .queues
            .iter()
            .map(|t| TenantQueueLine {
                queue: t.queue.clone(),
                href: url_component(&t.queue),
                sharded: t.sharded,
                pending: opt(t.pending),
                running: opt(t.running),
                limit: match (t.sharded, t.limit) {
                    (false, _) => "-".to_owned(),
                    (true, None) => "none".to_owned(),
                    (true, Some(0)) => "0 (paused)".to_owned(),
                    (true, Some(l)) => l.to_string(),
                },
                weight: t.weight.map_or_else(|| "-".to_owned(), |w| w.to_string()),
                floor: t.floor.map_or_else(|| "-".to_owned(), |f| f.to_string()),
                rotation: t
                    .rotation
                    .map_or_else(|| "-".to_owned(), |r| format!("#{r}")),
                started: format_count(t.wait.started),
                p50: millis_or_dash(t.wait.p50_ms),
                p95: millis_or_dash(t.wait.p95_ms),
                max: millis_or_dash(t.wait.max_ms),
                histogram: histogram_svg(&t.wait.histogram.buckets, 120, 24),
            })
            .collect(),
        reroute: v
            .reroute
            .iter()
            .map(|r| RerouteLines {
                class: r.class.clone(),
                base_queue: r.base_queue.clone(),
                next_queue: r.next_queue.clone(),
                back: match r.back_in {
                    Some(secs) if r.next_queue != r.base_queue => {
                        format!(
                            "; back to {} in {}",
                            r.base_queue,
                            duration_or_dash(Some(secs as f64))
                        )
                    }
                    _ => String::new(),
                },
                rules: r
                    .rules
                    .iter()
                    .map(|x| RuleLine {
                        queue: x.queue.clone(),
                        count: format_count(x.count),
                        threshold: format_count(x.threshold),
                        per: duration_or_dash(Some(x.per as f64)),
                        matches: x.matches,
                        clears: x
                            .clears_in
                            .map_or_else(|| "-".to_owned(), |c| duration_or_dash(Some(c as f64))),
                    })
                    .collect(),
            })
            .collect(),
        slots: v
            .slots
            .iter()
            .map(|d| SlotLines {
                key: d.row.key.clone(),
                href: url_component(&d.row.key),
                limit: d
                    .row
                    .limit
                    .map_or_else(|| "declared default".to_owned(), |l| l.to_string()),
                running: d.row.running,
                waiting: d.row.waiting,
                holders: d
                    .holders
                    .iter()
                    .map(|h| format!("{} on {}", h.jid.as_deref().unwrap_or("?"), h.identity))
                    .collect(),
                waiters: d.waiters.iter().map(|w| w.jid.clone()).collect(),
            })
            .collect(),
        retries_note: note(&v.retries),
        retries: entry_lines(&v.retries.rows),
        dead_note: note(&v.dead),
        dead: entry_lines(&v.dead.rows),
    };
    if live {
        render(&page.as_live())
    } else {
        render(&page)
    }
}

// ---- explain ----

pub(crate) struct JobLines {
    class: String,
    queue: String,
    tenant: String,
    tenant_href: Option<String>,
    args: String,
    enqueued: String,
    retries: String,
}

#[derive(Template)]
#[template(path = "explain.html")]
pub(crate) struct ExplainPage {
    c: Chrome,
    asked: bool,
    jid: String,
    tenant: String,
    found: bool,
    reasons: Vec<fairjob::broker::admin::Reason>,
    more: Option<String>,
    scanned: String,
    total: String,
    job: Option<JobLines>,
}

/// `GET /explain?jid=&tenant=&cursor=&budget=` (a walk, run on request only).
pub(crate) async fn explain(
    State(s): S,
    Extension(caller): C,
    uri: Uri,
) -> Result<Response, WebError> {
    let (q, _) = query(&s, &caller, &uri)?;
    let jid = q.value("jid").unwrap_or("").to_owned();
    let tenant = q.value("tenant").map(str::to_owned);
    let mut page = ExplainPage {
        c: chrome(&s, &caller, "/explain", &q),
        asked: !jid.is_empty(),
        jid: jid.clone(),
        tenant: tenant.clone().unwrap_or_default(),
        found: false,
        reasons: Vec::new(),
        more: None,
        scanned: String::new(),
        total: String::new(),
        job: None,
    };
    if !jid.is_empty() {
        let e = load::explain(
            &s,
            &jid,
            tenant.as_deref(),
            q.value("cursor"),
            q.number("budget")?,
        )
        .await?;
        page.found = e.found;
        page.scanned = format_count(e.scanned);
        page.total = format_count(e.total.max(e.scanned));
        page.more = e.next.as_ref().map(|n| {
            let mut href = format!("jid={}&cursor={}", url_component(&jid), url_component(n));
            if let Some(t) = &tenant {
                href.push_str(&format!("&tenant={}", url_component(t)));
            }
            href
        });
        page.job = e.job.as_ref().map(|j| {
            let (tenant, tenant_href) = tenant_label(&j.tenant);
            JobLines {
                class: j.class.clone(),
                queue: j.queue.clone(),
                tenant,
                tenant_href,
                args: shorten(&j.args, 2_000),
                enqueued: j.enqueued_at.map_or_else(|| "-".to_owned(), time_or_dash),
                retries: j
                    .retry_count
                    .map_or_else(|| "0".to_owned(), |r| r.to_string()),
            }
        });
        page.reasons = e.reasons;
    }
    render(&page)
}

// ---- shards ----

pub(crate) struct ShardLine {
    tenant: String,
    href: Option<String>,
    raw: Option<String>,
    pending: String,
    running: String,
    weight: String,
    floor: String,
    cap: String,
    pass: String,
    order: String,
    share: String,
}

#[derive(Template)]
#[template(path = "shards.html", blocks = ["live"])]
pub(crate) struct ShardsPage {
    c: Chrome,
    queue: String,
    href: String,
    tenants: String,
    runnable: String,
    inbox: String,
    dispatched: String,
    share_minutes: u64,
    defaults: String,
    next_up: Vec<String>,
    rows: Vec<ShardLine>,
    next: Option<u64>,
}

/// `GET /shards/{queue}?cursor=`.
pub(crate) async fn shards(
    State(s): S,
    Extension(caller): C,
    Path(queue): Path<String>,
    uri: Uri,
) -> Result<Response, WebError> {
    let (q, live) = query(&s, &caller, &uri)?;
    let cursor = q.number("cursor")?.unwrap_or(0);
    let v = load::shards(&s, &queue, cursor).await?;
    let page = ShardsPage {
        c: chrome(&s, &caller, "/queues", &q),
        href: url_component(&queue),
        queue: queue.clone(),
        tenants: format_count(v.tenants),
        runnable: format_count(v.runnable),
        inbox: format_count(v.inbox),
        dispatched: format_count(v.dispatched),
        share_minutes: SHARE_MINUTES,
        defaults: format!(
            "{} / {} / {}",
            v.default_weight
                .map_or_else(|| "1".to_owned(), |w| w.to_string()),
            v.default_floor.unwrap_or(0),
            v.default_limit
                .map_or_else(|| "none".to_owned(), |l| l.to_string())
        ),
        next_up: v
            .next_up
            .iter()
            .map(|t| t.clone().unwrap_or_else(|| "(no tenant)".to_owned()))
            .collect(),
        rows: v
            .rows
            .iter()
            .map(|r| {
                let (tenant, href) = tenant_label(&r.tenant);
                ShardLine {
                    tenant,
                    href,
                    raw: r.tenant.clone(),
                    pending: format_count(r.pending),
                    running: format_count(r.running),
                    weight: r.weight.map_or_else(
                        || format!("{} (default)", v.default_weight.unwrap_or(1.0)),
                        |w| w.to_string(),
                    ),
                    floor: r.floor.map_or_else(
                        || format!("{} (default)", v.default_floor.unwrap_or(0)),
                        |f| f.to_string(),
                    ),
                    cap: match (r.limit, v.default_limit) {
                        (Some(l), _) => l.to_string(),
                        (None, Some(d)) => format!("{d} (default)"),
                        (None, None) => "none".to_owned(),
                    },
                    pass: r.pass.map_or_else(|| "-".to_owned(), |p| format!("{p:.3}")),
                    order: r.rotation.map_or_else(
                        || "-".to_owned(),
                        |o| format!("#{o}{}", if r.under_floor { " (floor)" } else { "" }),
                    ),
                    share: if v.dispatched > 0 {
                        percent(r.dispatched as f64 / v.dispatched as f64)
                    } else {
                        "-".to_owned()
                    },
                }
            })
            .collect(),
        next: v.next,
    };
    if live {
        render(&page.as_live())
    } else {
        render(&page)
    }
}

// ---- limits ----

pub(crate) struct LimitLine {
    key: String,
    href: String,
    limit: String,
    running: u64,
    reserved: u64,
    waiting: u64,
}

pub(crate) struct HolderLine {
    jid: String,
    class: String,
    tenant: String,
    identity: String,
    since: String,
}

pub(crate) struct WaiterLine {
    jid: String,
    jid_href: String,
    class: String,
    tenant: String,
    queue: String,
}

pub(crate) struct DetailLines {
    key: String,
    limit: String,
    running: u64,
    waiting: u64,
    holders: Vec<HolderLine>,
    waiters: Vec<WaiterLine>,
}

#[derive(Template)]
#[template(path = "limits.html", blocks = ["live"])]
pub(crate) struct LimitsPage {
    c: Chrome,
    rows: Vec<LimitLine>,
    details: Vec<DetailLines>,
    next: Option<u64>,
}

/// `GET /limits?cursor=&key=`.
pub(crate) async fn limits(
    State(s): S,
    Extension(caller): C,
    uri: Uri,
) -> Result<Response, WebError> {
    let (q, live) = query(&s, &caller, &uri)?;
    let v = load::limits(&s, q.number("cursor")?.unwrap_or(0), q.value("key")).await?;
    let limit_of = |key: &str, set: Option<u32>| match set {
        Some(l) => l.to_string(),
        None => v.defaults.iter().find(|(k, _)| k == key).map_or_else(
            || "declared default".to_owned(),
            |(_, d)| format!("{d} (declared)"),
        ),
    };
    let page = LimitsPage {
        c: chrome(&s, &caller, "/limits", &q),
        rows: v
            .page
            .rows
            .iter()
            .map(|r| LimitLine {
                key: r.key.clone(),
                href: url_component(&r.key),
                limit: limit_of(&r.key, r.limit),
                running: r.running,
                reserved: r.reserved,
                waiting: r.waiting,
            })
            .collect(),
        details: v
            .details
            .iter()
            .map(|d| DetailLines {
                key: d.row.key.clone(),
                limit: limit_of(&d.row.key, d.row.limit),
                running: d.row.running,
                waiting: d.row.waiting,
                holders: d
                    .holders
                    .iter()
                    .map(|h| HolderLine {
                        jid: h.jid.clone().unwrap_or_else(|| "?".to_owned()),
                        class: h.class.clone().unwrap_or_default(),
                        tenant: h.tenant.clone().unwrap_or_default(),
                        identity: h.identity.clone(),
                        since: time_or_dash(h.since_ms as f64 / 1000.0),
                    })
                    .collect(),
                waiters: d
                    .waiters
                    .iter()
                    .map(|w| WaiterLine {
                        jid: w.jid.clone(),
                        jid_href: url_component(&w.jid),
                        class: w.class.clone().unwrap_or_default(),
                        tenant: w.tenant.clone().unwrap_or_default(),
                        queue: w.queue.clone(),
                    })
                    .collect(),
            })
            .collect(),
        next: v.page.next,
    };
    if live {
        render(&page.as_live())
    } else {
        render(&page)
    }
}

// ---- retries, scheduled, dead ----

pub(crate) struct ActionButton {
    value: &'static str,
    label: &'static str,
    danger: bool,
}

pub(crate) struct Hidden {
    name: &'static str,
    value: String,
}

pub(crate) struct JobLine {
    key: String,
    at: String,
    class: String,
    jid: String,
    jid_href: String,
    tenant: String,
    tenant_href: Option<String>,
    queue: String,
    args: String,
    error: String,
    retries: String,
}

#[derive(Template)]
#[template(path = "jobs.html", blocks = ["live"])]
pub(crate) struct JobsPage {
    c: Chrome,
    title: &'static str,
    set: &'static str,
    total: String,
    when_label: &'static str,
    f_class: String,
    f_tenant: String,
    f_queue: String,
    f_error: String,
    filtered: bool,
    live: bool,
    scanned: Option<String>,
    from: String,
    next_query: Option<String>,
    prev_query: Option<String>,
    back: String,
    hidden: Vec<Hidden>,
    actions: Vec<ActionButton>,
    all_what: &'static str,
    rows: Vec<JobLine>,
}

fn filter_query(f: &fairjob::broker::admin::JobFilter) -> String {
    let mut out = String::new();
    for (k, v) in [
        ("class", &f.class),
        ("tenant", &f.tenant),
        ("queue", &f.queue),
        ("error", &f.error),
    ] {
        if let Some(v) = v {
            out.push_str(&format!("{k}={}&", url_component(v)));
        }
    }
    out
}

/// `GET /retries`, `/scheduled`, `/dead` (`?class=&tenant=&queue=&error=&cursor=`).
pub(crate) async fn jobs(
    s: &WebState,
    caller: &Caller,
    set: JobSet,
    uri: &Uri,
) -> Result<Response, WebError> {
    let (q, live) = query(s, caller, uri)?;
    let filter = load::job_filter(&q);
    let cursor = q.number("cursor")?.unwrap_or(0);
    let v = load::jobs(s, set, &filter, cursor).await?;
    let fq = filter_query(&filter);
    let (title, when_label) = match set {
        JobSet::Retry => ("Retries", "next retry"),
        JobSet::Scheduled => ("Scheduled", "due"),
        JobSet::Dead => ("Dead", "died"),
    };
    let mut hidden = Vec::new();
    for (name, value) in [
        ("class", &filter.class),
        ("tenant", &filter.tenant),
        ("queue", &filter.queue),
        ("error", &filter.error),
    ] {
        if let Some(v) = value {
            hidden.push(Hidden {
                name,
                value: v.clone(),
            });
        }
    }
    let page = JobsPage {
        c: chrome(
            s,
            caller,
            match set {
                JobSet::Retry => "/retries",
                JobSet::Scheduled => "/scheduled",
                JobSet::Dead => "/dead",
            },
            &q,
        ),
        title,
        set: set.name(),
        total: format_count(v.total),
        when_label,
        f_class: filter.class.clone().unwrap_or_default(),
        f_tenant: filter.tenant.clone().unwrap_or_default(),
        f_queue: filter.queue.clone().unwrap_or_default(),
        f_error: filter.error.clone().unwrap_or_default(),
        filtered: !filter.is_empty(),
        // A filtered listing is a scan: run on request, never on refresh.
        live: filter.is_empty() && cursor == 0,
        scanned: v.scanned.map(format_count),
        from: format_count(cursor),
        next_query: v.next.map(|n| format!("{fq}cursor={n}")),
        prev_query: (cursor > 0).then(|| fq.trim_end_matches('&').to_owned()),
        back: fq.trim_end_matches('&').to_owned(),
        hidden,
        actions: set
            .actions()
            .iter()
            .map(|a| ActionButton {
                value: a.as_str(),
                label: a.label(),
                danger: matches!(
                    a,
                    fairjob::broker::SetAction::Delete | fairjob::broker::SetAction::Kill
                ),
            })
            .collect(),
        all_what: if filter.is_empty() {
            "entries"
        } else {
            "matching entries"
        },
        rows: v
            .rows
            .iter()
            .map(|e| {
                let (tenant, tenant_href) = tenant_label(&e.tenant);
                JobLine {
                    key: e.key.clone(),
                    at: time_or_dash(e.at),
                    class: e.class.clone(),
                    jid: e.jid.clone(),
                    jid_href: url_component(&e.jid),
                    tenant,
                    tenant_href,
                    queue: e.queue.clone(),
                    args: shorten(&e.args, 300),
                    error: error_text(e),
                    retries: match e.retry_count {
                        Some(r) => format!("{r} of {}", e.max_retries),
                        None => "-".to_owned(),
                    },
                }
            })
            .collect(),
    };
    if live {
        render(&page.as_live())
    } else {
        render(&page)
    }
}

pub(crate) async fn retries(State(s): S, Extension(c): C, uri: Uri) -> Result<Response, WebError> {
    jobs(&s, &c, JobSet::Retry, &uri).await
}
pub(crate) async fn scheduled(
    State(s): S,
    Extension(c): C,
    uri: Uri,
) -> Result<Response, WebError> {
    jobs(&s, &c, JobSet::Scheduled, &uri).await
}
pub(crate) async fn dead(State(s): S, Extension(c): C, uri: Uri) -> Result<Response, WebError> {
    jobs(&s, &c, JobSet::Dead, &uri).await
}

// ---- busy ----

pub(crate) struct ProcLine {
    identity: String,
    tag: String,
    started: String,
    beat: String,
    busy: String,
    rss: String,
    queues: String,
    quiet: bool,
}

pub(crate) struct RunLine {
    identity: String,
    queue: String,
    class: String,
    jid: String,
    jid_href: String,
    tenant: String,
    tenant_href: Option<String>,
    elapsed: String,
    args: String,
}

#[derive(Template)]
#[template(path = "busy.html", blocks = ["live"])]
pub(crate) struct BusyPage {
    c: Chrome,
    procs: Vec<ProcLine>,
    jobs: Vec<RunLine>,
}

/// `GET /busy`.
pub(crate) async fn busy(
    State(s): S,
    Extension(caller): C,
    uri: Uri,
) -> Result<Response, WebError> {
    let (q, live) = query(&s, &caller, &uri)?;
    let v = load::busy(&s, q.number("cursor")?.unwrap_or(0)).await?;
    let now = s.broker().time().await?;
    let page = BusyPage {
        c: chrome(&s, &caller, "/busy", &q),
        procs: v
            .rows
            .iter()
            .map(|p| ProcLine {
                identity: p.identity.clone(),
                tag: p.tag.clone(),
                started: time_or_dash(p.started_at),
                beat: format!("{} ago", duration_or_dash(Some(now - p.beat))),
                busy: format!("{} / {}", p.busy, p.concurrency),
                rss: format!("{} MB", p.rss_kb / 1024),
                queues: p.queues.join(", "),
                quiet: p.quiet,
            })
            .collect(),
        jobs: v
            .rows
            .iter()
            .flat_map(|p| p.jobs.iter())
            .map(|j| {
                let (tenant, tenant_href) = tenant_label(&j.tenant);
                RunLine {
                    identity: j.identity.clone(),
                    queue: j.queue.clone(),
                    class: j.class.clone(),
                    jid: j.jid.clone(),
                    jid_href: url_component(&j.jid),
                    tenant,
                    tenant_href,
                    elapsed: duration_or_dash(Some(now - j.run_at)),
                    args: shorten(&j.args, 300),
                }
            })
            .collect(),
    };
    if live {
        render(&page.as_live())
    } else {
        render(&page)
    }
}

// ---- login ----

#[derive(Template)]
#[template(path = "login.html")]
pub(crate) struct LoginPage {
    base: String,
    csrf: String,
    next: String,
    version: &'static str,
}

/// `GET /login?next=`.
pub(crate) async fn login_form(
    State(s): S,
    Extension(caller): C,
    uri: Uri,
) -> Result<Response, WebError> {
    if s.config.token.is_none() {
        return Ok(Redirect::to(&format!("{}/", caller.base)).into_response());
    }
    let q = Params::parse(uri.query().unwrap_or(""));
    render(&LoginPage {
        base: caller.base.clone(),
        csrf: caller.csrf.clone(),
        next: q.value("next").unwrap_or("").to_owned(),
        version: env!("CARGO_PKG_VERSION"),
    })
}

/// `POST /login`.
pub(crate) async fn login(
    State(s): S,
    Extension(caller): C,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, WebError> {
    let form = Params::parse(&String::from_utf8_lossy(&body));
    security::login(&s, &caller, &headers, &form)
}

/// `POST /logout`.
pub(crate) async fn logout(
    State(s): S,
    Extension(caller): C,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, WebError> {
    let form = Params::parse(&String::from_utf8_lossy(&body));
    security::logout(&s, &caller, &headers, &form)
}

// ---- actions: the form checked by `CheckedForm`, one call, then back ----

/// A 303 back to `path?query` with the action's message.
fn back(caller: &Caller, path: &str, query: &str, done: &Done) -> Response {
    let sep = if query.is_empty() { "" } else { "&" };
    Redirect::to(&format!(
        "{}{path}?{query}{sep}msg={}",
        caller.base,
        url_component(&done.message)
    ))
    .into_response()
}

/// `POST /queues`.
pub(crate) async fn post_queues(form: CheckedForm) -> Result<Response, WebError> {
    let done = act::on_queue(&form.state, &form.fields).await?;
    Ok(back(&form.caller, "/queues", "", &done))
}

/// `POST /shards/{queue}`.
pub(crate) async fn post_shards(
    Path(queue): Path<String>,
    form: CheckedForm,
) -> Result<Response, WebError> {
    let done = act::on_shards(&form.state, &queue, &form.fields).await?;
    let path = format!("/shards/{}", url_component(&queue));
    Ok(back(&form.caller, &path, "", &done))
}

/// `POST /limits`.
pub(crate) async fn post_limits(form: CheckedForm) -> Result<Response, WebError> {
    let done = act::on_limit(&form.state, &form.fields).await?;
    Ok(back(&form.caller, "/limits", "", &done))
}

/// `POST /busy`.
pub(crate) async fn post_busy(form: CheckedForm) -> Result<Response, WebError> {
    let done = act::on_process(&form.state, &form.fields).await?;
    Ok(back(&form.caller, "/busy", "", &done))
}

/// An action on a set, then back to the same filters (re-encoded from the
/// form, nothing else kept).
async fn post_jobs(set: JobSet, form: CheckedForm) -> Result<Response, WebError> {
    let done = act::on_jobs(&form.state, set, &form.fields).await?;
    let keep: Vec<String> = ["class", "tenant", "queue", "error"]
        .iter()
        .filter_map(|k| {
            form.fields
                .value(k)
                .map(|v| format!("{k}={}", url_component(v)))
        })
        .collect();
    let path = format!("/{}", set.name());
    Ok(back(&form.caller, &path, &keep.join("&"), &done))
}

/// `POST /retries`.
pub(crate) async fn post_retries(form: CheckedForm) -> Result<Response, WebError> {
    post_jobs(JobSet::Retry, form).await
}

/// `POST /scheduled`.
pub(crate) async fn post_scheduled(form: CheckedForm) -> Result<Response, WebError> {
    post_jobs(JobSet::Scheduled, form).await
}

/// `POST /dead`.
pub(crate) async fn post_dead(form: CheckedForm) -> Result<Response, WebError> {
    post_jobs(JobSet::Dead, form).await
}
