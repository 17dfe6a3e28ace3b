//! `/shards/{queue}`: a sharded queue's tenants in dispatch order, their
//! settings, rate, measured share and fair-yield requests (asked / honoured
//! / ignored), and changing a tenant's or the defaults' weight, floor, cap,
//! rate and burst (POST).

use askama::Template;
use axum::extract::Path;
use axum::response::Response;
use fairjob::inspect::SHARE_MINUTES;
use fairjob::rate::describe_tenant_rate;

use super::{Chrome, back, tenant_label};
use crate::act;
use crate::error::WebError;
use crate::fmt::{format_count, percent};
use crate::load;
use crate::params::url_component;
use crate::request::{CheckedForm, PageRequest};

pub(crate) struct ShardLine {
    tenant: String,
    href: Option<String>,
    raw: Option<String>,
    pending: String,
    running: String,
    weight: String,
    floor: String,
    cap: String,
    rate: String,
    burst: String,
    yields: String,
    pass: String,
    order: String,
    share: String,
}

#[derive(Template)]
#[template(path = "shards.html", blocks = ["live"])]
pub(crate) struct ShardsPage {
    chrome: Chrome,
    queue: String,
    href: String,
    tenants: String,
    runnable: String,
    inbox: String,
    dispatched: String,
    share_minutes: u64,
    defaults: String,
    fair_yield: String,
    rate_waiting: String,
    next_up: Vec<String>,
    rows: Vec<ShardLine>,
    next: Option<u64>,
}

/// `GET /shards/{queue}?cursor=`.
pub(crate) async fn shards(
    Path(queue): Path<String>,
    request: PageRequest,
) -> Result<Response, WebError> {
    let cursor = request.query.cursor()?;
    let view = load::shards(&request.state, &queue, cursor).await?;
    let fy = load::yield_settings(&request.state, &queue).await?;
    let page = ShardsPage {
        chrome: request.chrome("/queues"),
        href: url_component(&queue),
        queue: queue.clone(),
        tenants: format_count(view.tenants),
        runnable: format_count(view.runnable),
        inbox: format_count(view.inbox),
        dispatched: format_count(view.dispatched),
        share_minutes: SHARE_MINUTES,
        fair_yield: if fy.enabled {
            format!(
                "on: grace {:?}, min run {:?}, cool-down {:?}",
                fy.grace, fy.min_run, fy.cooldown
            )
        } else {
            "off".to_owned()
        },
        defaults: format!(
            "{} / {} / {} / {} / {}",
            view.default_weight
                .map_or_else(|| "1".to_owned(), |w| w.to_string()),
            view.default_floor.unwrap_or(0),
            view.default_limit
                .map_or_else(|| "none".to_owned(), |l| l.to_string()),
            view.default_rate
                .map_or_else(|| "none".to_owned(), describe_tenant_rate),
            view.default_burst
                .map_or_else(|| "none".to_owned(), |l| l.to_string())
        ),
        rate_waiting: format_count(view.rate_waiting),
        next_up: view
            .next_up
            .iter()
            .map(|t| t.clone().unwrap_or_else(|| "(no tenant)".to_owned()))
            .collect(),
        rows: view
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
                        || format!("{} (default)", view.default_weight.unwrap_or(1.0)),
                        |w| w.to_string(),
                    ),
                    floor: r.floor.map_or_else(
                        || format!("{} (default)", view.default_floor.unwrap_or(0)),
                        |floor| floor.to_string(),
                    ),
                    cap: match (r.limit, view.default_limit) {
                        (Some(l), _) => l.to_string(),
                        (None, Some(d)) => format!("{d} (default)"),
                        (None, None) => "none".to_owned(),
                    },
                    rate: {
                        let rate = match (r.rate, view.default_rate) {
                            (Some(own), _) => describe_tenant_rate(own),
                            (None, Some(d)) => format!("{} (default)", describe_tenant_rate(d)),
                            (None, None) => "none".to_owned(),
                        };
                        match r.rate_wait_until {
                            Some(u) => format!(
                                "{rate}; waits {:.1} s",
                                u.saturating_sub(view.now_us) as f64 / 1e6
                            ),
                            None => rate,
                        }
                    },
                    burst: match (r.burst, view.default_burst) {
                        (Some(b), _) => b.to_string(),
                        (None, Some(d)) => format!("{d} (default)"),
                        (None, None) => "none".to_owned(),
                    },
                    yields: if r.yields_requested == 0 && r.yields_ignored == 0 {
                        "-".to_owned()
                    } else {
                        format!(
                            "{} / {} / {}",
                            format_count(r.yields_requested),
                            format_count(r.yields_honoured),
                            format_count(r.yields_ignored)
                        )
                    },
                    pass: r.pass.map_or_else(|| "-".to_owned(), |p| format!("{p:.3}")),
                    order: r.rotation.map_or_else(
                        || "-".to_owned(),
                        |o| format!("#{o}{}", if r.under_floor { " (floor)" } else { "" }),
                    ),
                    share: if view.dispatched > 0 {
                        percent(r.dispatched as f64 / view.dispatched as f64)
                    } else {
                        "-".to_owned()
                    },
                }
            })
            .collect(),
        next: view.next,
    };
    request.render(&page, ShardsPage::as_live)
}

/// `POST /shards/{queue}`: a tenant's or the defaults' weight, floor, cap, rate,
/// burst.
pub(crate) async fn post_shards(
    Path(queue): Path<String>,
    form: CheckedForm,
) -> Result<Response, WebError> {
    let done = act::on_shards(&form.state, &queue, &form.fields).await?;
    let path = format!("/shards/{}", url_component(&queue));
    Ok(back(&form.caller, &path, "", &done))
}
