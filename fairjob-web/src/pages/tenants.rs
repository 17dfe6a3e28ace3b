//! `/tenants` (recently active tenants, or those whose id contains `?q=`)
//! and `/tenants/{tenant}`: one tenant's queues, waits, reroute state, slot
//! limits in use, and its retry and dead entries.

use askama::Template;
use axum::extract::Path;
use axum::response::Response;
use fairjob::inspect::{JobPage, RECENT_MINUTES};

use super::{Chrome, EntryLine, WaitLine, entry_lines, wait_lines};
use crate::charts::histogram_svg;
use crate::error::WebError;
use crate::fmt::{duration_or_dash, format_count, millis_or_dash};
use crate::load;
use crate::params::url_component;
use crate::request::PageRequest;

#[derive(Template)]
#[template(path = "tenants.html", blocks = ["live"])]
pub(crate) struct TenantsPage {
    chrome: Chrome,
    query: String,
    exact: Option<String>,
    minutes: u64,
    tenants: Vec<WaitLine>,
}

/// `GET /tenants?q=`.
pub(crate) async fn tenants(request: PageRequest) -> Result<Response, WebError> {
    let needle = request.query.value("q").unwrap_or("").to_owned();
    let view = load::tenants(&request.state, &needle).await?;
    let page = TenantsPage {
        chrome: request.chrome("/tenants"),
        exact: (!needle.is_empty()).then(|| url_component(&needle)),
        query: needle,
        minutes: view.minutes,
        tenants: wait_lines(&view.tenants),
    };
    request.render(&page, TenantsPage::as_live)
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

#[derive(Template)]
#[template(path = "tenant.html", blocks = ["live"])]
pub(crate) struct TenantPage {
    chrome: Chrome,
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
    Path(tenant): Path<String>,
    request: PageRequest,
) -> Result<Response, WebError> {
    // The retry/dead scans are not part of the live refresh.
    let view = load::tenant(&request.state, &tenant, !request.live).await?;
    let count_or_dash = |n: Option<u64>| n.map_or_else(|| "-".to_owned(), format_count);
    let note = |set: &JobPage| {
        format!(
            "{} found among the first {} of {} entries.",
            set.rows.len(),
            format_count(set.scanned.unwrap_or(0)),
            format_count(set.total)
        )
    };
    let page = TenantPage {
        chrome: request.chrome("/tenants"),
        href: url_component(&view.tenant),
        tenant: view.tenant.clone(),
        recent: RECENT_MINUTES,
        queues: view
            .queues
            .iter()
            .map(|t| TenantQueueLine {
                queue: t.queue.clone(),
                href: url_component(&t.queue),
                sharded: t.sharded,
                pending: count_or_dash(t.pending),
                running: count_or_dash(t.running),
                limit: match (t.sharded, t.limit) {
                    (false, _) => "-".to_owned(),
                    (true, None) => "none".to_owned(),
                    (true, Some(0)) => "0 (paused)".to_owned(),
                    (true, Some(l)) => l.to_string(),
                },
                weight: t.weight.map_or_else(|| "-".to_owned(), |w| w.to_string()),
                floor: t
                    .floor
                    .map_or_else(|| "-".to_owned(), |floor| floor.to_string()),
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
        reroute: view
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
                    .map(|rule| RuleLine {
                        queue: rule.queue.clone(),
                        count: format_count(rule.count),
                        threshold: format_count(rule.threshold),
                        per: duration_or_dash(Some(rule.per as f64)),
                        matches: rule.matches,
                        clears: rule.clears_in.map_or_else(
                            || "-".to_owned(),
                            |secs| duration_or_dash(Some(secs as f64)),
                        ),
                    })
                    .collect(),
            })
            .collect(),
        slots: view
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
                    .map(|holder| {
                        let jid = holder.jid.as_deref().unwrap_or("?");
                        format!("{jid} on {}", holder.identity)
                    })
                    .collect(),
                waiters: d.waiters.iter().map(|w| w.jid.clone()).collect(),
            })
            .collect(),
        retries_note: note(&view.retries),
        retries: entry_lines(&view.retries.rows),
        dead_note: note(&view.dead),
        dead: entry_lines(&view.dead.rows),
    };
    request.render(&page, TenantPage::as_live)
}
