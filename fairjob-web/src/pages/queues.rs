//! `/queues`: each queue's size, latency, planned share of fetches next to
//! its measured share, the fetch plans of the running processes, and pause
//! or resume (POST).

use askama::Template;
use axum::response::Response;
use fairjob::inspect::MEASURED_MINUTES;

use super::{Chrome, back};
use crate::act;
use crate::charts::share_svg;
use crate::error::WebError;
use crate::fmt::{duration_or_dash, format_count, percent};
use crate::load;
use crate::params::url_component;
use crate::request::{CheckedForm, PageRequest};

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
    chrome: Chrome,
    queues: Vec<QueueRow>,
    plans: Vec<PlanLines>,
    measured_minutes: u64,
}

/// `GET /queues`.
pub(crate) async fn queues(request: PageRequest) -> Result<Response, WebError> {
    let view = load::queues(&request.state).await?;
    let page = QueuesPage {
        chrome: request.chrome("/queues"),
        queues: view
            .queues
            .iter()
            .map(|q| {
                let planned = view.planned.get(&q.name).copied();
                let measured = view.measured.get(&q.name).copied().unwrap_or(0.0);
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
                    declared: view
                        .declared
                        .get(&q.name)
                        .map(|c| c.join(", "))
                        .unwrap_or_default(),
                }
            })
            .collect(),
        plans: view
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
    request.render(&page, QueuesPage::as_live)
}

/// `POST /queues`: pause or resume a queue.
pub(crate) async fn post_queues(form: CheckedForm) -> Result<Response, WebError> {
    let done = act::on_queue(&form.state, &form.fields).await?;
    Ok(back(&form.caller, "/queues", "", &done))
}
