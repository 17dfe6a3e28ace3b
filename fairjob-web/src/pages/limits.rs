//! `/limits`: slot-limit keys with their limit, running, reserved and
//! waiting jobs, the holders and waiters of the keys in use, and setting a
//! key's limit (POST); rate limiters with their rate, waiting jobs and next
//! release, and setting, pausing or resetting a key's rate (POST `/limits/rate`).

use askama::Template;
use axum::response::Response;

use super::{Chrome, back};
use crate::act;
use crate::error::WebError;
use crate::fmt::time_or_dash;
use crate::load;
use crate::params::url_component;
use crate::request::{CheckedForm, PageRequest};

pub(crate) struct LimitLine {
    key: String,
    href: String,
    limit: String,
    running: u64,
    reserved: u64,
    waiting: u64,
}

pub(crate) struct RateLine {
    key: String,
    rate: String,
    burst: String,
    waiting: u64,
    next: String,
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
    chrome: Chrome,
    rows: Vec<LimitLine>,
    details: Vec<DetailLines>,
    rates: Vec<RateLine>,
    next: Option<u64>,
}

/// `GET /limits?cursor=&key=`.
pub(crate) async fn limits(request: PageRequest) -> Result<Response, WebError> {
    let view = load::limits(
        &request.state,
        request.query.cursor()?,
        request.query.value("key"),
    )
    .await?;
    let limit_of = |key: &str, set: Option<u32>| match set {
        Some(limit) => limit.to_string(),
        None => view.defaults.iter().find(|(k, _)| k == key).map_or_else(
            || "declared default".to_owned(),
            |(_, default)| format!("{default} (declared)"),
        ),
    };
    let page = LimitsPage {
        chrome: request.chrome("/limits"),
        rows: view
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
        details: view
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
                    .map(|holder| HolderLine {
                        jid: holder.jid.clone().unwrap_or_else(|| "?".to_owned()),
                        class: holder.class.clone().unwrap_or_default(),
                        tenant: holder.tenant.clone().unwrap_or_default(),
                        identity: holder.identity.clone(),
                        since: time_or_dash(holder.since_ms as f64 / 1000.0),
                    })
                    .collect(),
                waiters: d
                    .waiters
                    .iter()
                    .map(|waiter| WaiterLine {
                        jid: waiter.jid.clone(),
                        jid_href: url_component(&waiter.jid),
                        class: waiter.class.clone().unwrap_or_default(),
                        tenant: waiter.tenant.clone().unwrap_or_default(),
                        queue: waiter.queue.clone(),
                    })
                    .collect(),
            })
            .collect(),
        rates: view
            .rates
            .rows
            .iter()
            .map(|r| RateLine {
                key: r.key.clone(),
                rate: match r.rate {
                    Some(rate) if rate.is_paused() => "paused".to_owned(),
                    Some(rate) => format!(
                        "{}{}",
                        crate::fmt::rate(rate.limit, rate.per_ms),
                        if r.overridden { "" } else { " (declared)" }
                    ),
                    None => "?".to_owned(),
                },
                burst: r
                    .rate
                    .map_or_else(|| "?".to_owned(), |rate| rate.burst.to_string()),
                waiting: r.waiting,
                next: r
                    .next_release_in_secs
                    .map_or_else(|| "-".to_owned(), |s| format!("in {s:.1} s")),
            })
            .collect(),
        next: view.page.next,
    };
    request.render(&page, LimitsPage::as_live)
}

/// `POST /limits/rate`: a key's rate.
pub(crate) async fn post_rate(form: CheckedForm) -> Result<Response, WebError> {
    let done = act::on_rate(&form.state, &form.fields).await?;
    Ok(back(&form.caller, "/limits", "", &done))
}

/// `POST /limits`: a key's limit.
pub(crate) async fn post_limits(form: CheckedForm) -> Result<Response, WebError> {
    let done = act::on_limit(&form.state, &form.fields).await?;
    Ok(back(&form.caller, "/limits", "", &done))
}
