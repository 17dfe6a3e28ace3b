//! `/batches` (the newest batches: description, tenant, counts, state, fire
//! times, callback queues) and `/batches/{bid}` (one batch with some of its
//! failed members). Read-only.

use askama::Template;
use axum::extract::Path;
use axum::response::Response;
use fairjob::inspect::{BATCH_FAILURES, BatchView};

use super::Chrome;
use crate::error::WebError;
use crate::fmt::{format_count, shorten, time_or_dash};
use crate::load;
use crate::params::url_component;
use crate::request::PageRequest;

/// A time an event fired, or `-`.
fn fired(at: Option<f64>) -> String {
    at.map_or_else(|| "-".to_owned(), time_or_dash)
}

pub(crate) struct BatchLine {
    bid: String,
    href: String,
    description: String,
    tenant: String,
    state: &'static str,
    /// The state badge's class: `ok` (success), `warn` (open, staging), ``.
    badge: &'static str,
    died: bool,
    total: String,
    pending: String,
    unsucceeded: String,
    failures: String,
    staged: String,
    created: String,
    opened: String,
    complete: String,
    success: String,
    death: String,
    callbacks: String,
}

fn line(v: &BatchView) -> BatchLine {
    let s = &v.status;
    BatchLine {
        href: url_component(&s.bid),
        bid: s.bid.clone(),
        description: shorten(&s.description, 200),
        tenant: s.tenant.clone(),
        state: v.state.as_str(),
        badge: match v.state {
            fairjob::inspect::BatchState::Success => "ok",
            fairjob::inspect::BatchState::Complete => "",
            _ => "warn",
        },
        died: v.died,
        total: format_count(s.total),
        pending: format_count(s.pending),
        unsucceeded: format_count(s.unsucceeded),
        failures: format_count(s.failures),
        staged: format_count(s.staged),
        created: time_or_dash(s.created_at),
        opened: fired(v.opened_at),
        complete: fired(s.complete_at),
        success: fired(s.success_at),
        death: fired(s.death_at),
        callbacks: if v.callbacks.is_empty() {
            "-".to_owned()
        } else {
            v.callbacks
                .iter()
                .map(|c| format!("{} → {}", c.event, c.queue))
                .collect::<Vec<_>>()
                .join(", ")
        },
    }
}

#[derive(Template)]
#[template(path = "batches.html", blocks = ["live"])]
pub(crate) struct BatchesPage {
    chrome: Chrome,
    rows: Vec<BatchLine>,
    limit: usize,
}

/// `GET /batches`.
pub(crate) async fn batches(request: PageRequest) -> Result<Response, WebError> {
    let view = load::batches(&request.state).await?;
    let page = BatchesPage {
        chrome: request.chrome("/batches"),
        rows: view.rows.iter().map(line).collect(),
        limit: view.limit,
    };
    request.render(&page, BatchesPage::as_live)
}

pub(crate) struct FailureLine {
    jid: String,
    jid_href: String,
    failure: String,
}

#[derive(Template)]
#[template(path = "batch.html", blocks = ["live"])]
pub(crate) struct BatchPage {
    chrome: Chrome,
    batch: BatchLine,
    failed: Vec<FailureLine>,
    failed_note: String,
}

/// `GET /batches/{bid}`.
pub(crate) async fn batch(
    Path(bid): Path<String>,
    request: PageRequest,
) -> Result<Response, WebError> {
    let view = load::batch(&request.state, &bid).await?;
    let failed: Vec<FailureLine> = view
        .status
        .failed_jids
        .iter()
        .map(|(jid, failure)| FailureLine {
            jid: jid.clone(),
            jid_href: url_component(jid),
            failure: shorten(failure, 300),
        })
        .collect();
    let failed_note = if view.status.failures > failed.len() as u64 {
        format!(
            "{} of {} failed members shown (at most {BATCH_FAILURES}).",
            failed.len(),
            format_count(view.status.failures)
        )
    } else {
        String::new()
    };
    let page = BatchPage {
        chrome: request.chrome("/batches"),
        batch: line(&view),
        failed,
        failed_note,
    };
    request.render(&page, BatchPage::as_live)
}
