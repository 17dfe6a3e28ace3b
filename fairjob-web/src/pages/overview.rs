//! `GET /`: the counters, jobs finished per minute, each queue's runnable
//! and blocked jobs (and why blocked), and the longest waits by tenant.

use askama::Template;
use axum::response::Response;
use fairjob::inspect::{RECENT_MINUTES, SCHEDULED_SAMPLE, SHARD_COUNT_PAGES};

use super::{Chrome, WaitLine, wait_lines};
use crate::PAGE_ROWS;
use crate::charts::{bars_svg, split_svg};
use crate::error::WebError;
use crate::fmt::{duration_or_dash, format_count};
use crate::load;
use crate::params::url_component;
use crate::request::PageRequest;

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

pub(crate) struct PanelView {
    title: String,
    rows: Vec<(String, String)>,
    error: Option<String>,
}

#[derive(Template)]
#[template(path = "overview.html", blocks = ["live"])]
pub(crate) struct OverviewPage {
    chrome: Chrome,
    panels: Vec<PanelView>,
    refusal: Option<String>,
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
pub(crate) async fn overview(request: PageRequest) -> Result<Response, WebError> {
    let view = load::overview(&request.state).await?;
    let mut panels = Vec::new();
    for load in &request.state.config.panels {
        panels.push(match load().await {
            Ok(p) => PanelView {
                title: p.title,
                rows: p.rows,
                error: None,
            },
            Err(e) => PanelView {
                title: String::new(),
                rows: Vec::new(),
                error: Some(e),
            },
        });
    }
    let plus = |exact: bool| if exact { "" } else { "+" };
    let page = OverviewPage {
        chrome: request.chrome("/"),
        panels,
        refusal: view
            .redis_refusal
            .as_ref()
            .map(crate::reasons::refusal_text),
        warnings: view.warnings.clone(),
        cards: vec![
            Card {
                value: format_count(view.processed),
                label: "processed",
                href: "/",
            },
            Card {
                value: format_count(view.failed),
                label: "failed",
                href: "/",
            },
            Card {
                value: format_count(view.busy),
                label: "busy",
                href: "/busy",
            },
            Card {
                value: format_count(view.processes),
                label: "processes",
                href: "/busy",
            },
            Card {
                value: format_count(view.scheduled),
                label: "scheduled",
                href: "/scheduled",
            },
            Card {
                value: format_count(view.retries),
                label: "retries",
                href: "/retries",
            },
            Card {
                value: format_count(view.dead),
                label: "dead",
                href: "/dead",
            },
        ],
        chart: bars_svg(&view.per_minute, 600, 60),
        queues: view
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
                    .map(|blocked| BlockedLine {
                        count: format_count(blocked.jobs),
                        label: blocked.reason.label(),
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
        truncated: view.queues_truncated,
        waits: wait_lines(&view.longest_waits),
        recent: RECENT_MINUTES,
        shard_cap: SHARD_COUNT_PAGES * PAGE_ROWS,
        scheduled_sample: SCHEDULED_SAMPLE,
    };
    request.render(&page, OverviewPage::as_live)
}
