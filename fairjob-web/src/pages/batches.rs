//! `/batches` (the newest batches: description, tenant, counts, state, fire
//! times, callback queues), `/batches/{bid}` (one batch with some of its
//! failed members) and `/workflows/{wid}` (a workflow's steps, a page at a
//! time: state, jid, dependencies, what a held step waits for). Read-only.

use askama::Template;
use axum::extract::Path;
use axum::response::Response;
use fairjob::inspect::{BATCH_FAILURES, BatchView, StepStatus, StepView, WorkflowView};

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
    /// Whether it is a workflow (its steps have a page of their own).
    workflow: bool,
    held: String,
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
        workflow: s.workflow,
        held: format_count(s.held),
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

/// Names as the steps table shows them: `a, b, c` and how many more.
fn names(shown: &[String], total: u64) -> String {
    if shown.is_empty() && total == 0 {
        return "-".to_owned();
    }
    let mut text = shown.join(", ");
    let more = total.saturating_sub(shown.len() as u64);
    if more > 0 {
        if !text.is_empty() {
            text.push_str(&format!(" and {} more", format_count(more)));
        } else {
            text = format!("{} (beyond the first shown)", format_count(more));
        }
    }
    text
}

pub(crate) struct StepLine {
    name: String,
    state: &'static str,
    /// The state badge's class.
    badge: &'static str,
    running_on: Option<String>,
    jid: String,
    jid_href: String,
    deps: String,
    waiting: String,
    continued: String,
}

fn step_line(s: &StepView) -> StepLine {
    StepLine {
        name: s.name.clone(),
        state: s.state.as_str(),
        badge: match s.state {
            StepStatus::Done => "ok",
            StepStatus::Failed | StepStatus::Cancelled => "bad",
            StepStatus::Held | StepStatus::Retrying => "warn",
            StepStatus::Running => "sharded",
            StepStatus::Queued => "",
        },
        running_on: s.running_on.clone(),
        jid: s.jid.clone(),
        jid_href: url_component(&s.jid),
        deps: names(&s.dependencies, s.dependencies_total),
        waiting: if s.state == StepStatus::Held {
            format!("waiting for {}", names(&s.waiting_for, s.waiting_total))
        } else {
            String::new()
        },
        continued: if s.continued_past.is_empty() {
            String::new()
        } else {
            format!("continued past failed {}", s.continued_past.join(", "))
        },
    }
}

#[derive(Template)]
#[template(path = "workflow.html", blocks = ["live"])]
pub(crate) struct WorkflowPage {
    chrome: Chrome,
    batch: BatchLine,
    steps: Vec<StepLine>,
    /// "101–200 of 10,003".
    range: String,
    prev: Option<String>,
    next: Option<String>,
}

/// `GET /workflows/{wid}?from=&limit=`.
pub(crate) async fn workflow(
    Path(wid): Path<String>,
    request: PageRequest,
) -> Result<Response, WebError> {
    let from = request.query.number("from")?.unwrap_or(0);
    let limit = request.query.number("limit")?;
    let view: WorkflowView = load::workflow(&request.state, &wid, from, limit).await?;
    let page_link = |from: u64| {
        let mut q = format!("from={from}");
        if let Some(l) = limit {
            q.push_str(&format!("&limit={l}"));
        }
        q
    };
    let range = if view.steps.is_empty() {
        format!("none shown of {}", format_count(view.total))
    } else {
        format!(
            "{}–{} of {}",
            format_count(view.from.saturating_add(1)),
            format_count(view.from.saturating_add(view.steps.len() as u64)),
            format_count(view.total)
        )
    };
    let page = WorkflowPage {
        chrome: request.chrome("/batches"),
        batch: line(&view.batch),
        steps: view.steps.iter().map(step_line).collect(),
        range,
        prev: view.prev.map(page_link),
        next: view.next.map(page_link),
    };
    request.render(&page, WorkflowPage::as_live)
}
