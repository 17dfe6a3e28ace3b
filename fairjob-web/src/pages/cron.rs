//! `/cron`: periodic schedules with their expression, zone, policies, next
//! and last fire time and outcome, counters, paused; pause, resume and run
//! now (POST, under the actions switch).

use askama::Template;
use axum::response::Response;

use super::{Chrome, back};
use crate::act;
use crate::error::WebError;
use crate::fmt::time_or_dash;
use crate::load;
use crate::request::{CheckedForm, PageRequest};

pub(crate) struct CronLine {
    name: String,
    expr: String,
    tz: String,
    policies: String,
    class: String,
    source: String,
    next: String,
    last_fire: String,
    last_outcome: String,
    last_jid: String,
    fires: u64,
    skipped: u64,
    missed: u64,
    paused: bool,
    problem: String,
}

#[derive(Template)]
#[template(path = "cron.html", blocks = ["live"])]
pub(crate) struct CronPage {
    chrome: Chrome,
    rows: Vec<CronLine>,
}

/// `GET /cron`.
pub(crate) async fn cron(request: PageRequest) -> Result<Response, WebError> {
    let rows = load::cron(&request.state).await?;
    let page = CronPage {
        chrome: request.chrome("/cron"),
        rows: rows
            .into_iter()
            .map(|r| CronLine {
                policies: format!("catch-up {}, overlap {}", r.catch_up, r.overlap),
                source: match r.source {
                    fairjob::inspect::CronSource::Code => "code".to_owned(),
                    _ => "run time".to_owned(),
                },
                next: if r.paused {
                    "paused".to_owned()
                } else {
                    r.next
                        .map_or_else(|| "never".to_owned(), |n| time_or_dash(n as f64))
                },
                last_fire: r
                    .last_fire
                    .map_or_else(|| "-".to_owned(), |n| time_or_dash(n as f64)),
                last_outcome: r.last_outcome.unwrap_or_else(|| "-".to_owned()),
                last_jid: r.last_jid.unwrap_or_default(),
                problem: r.problem.unwrap_or_default(),
                name: r.name,
                expr: r.expr,
                tz: r.tz,
                class: r.class,
                fires: r.fires,
                skipped: r.skipped,
                missed: r.missed,
                paused: r.paused,
            })
            .collect(),
    };
    request.render(&page, CronPage::as_live)
}

/// `POST /cron`: pause, resume or run now.
pub(crate) async fn post_cron(form: CheckedForm) -> Result<Response, WebError> {
    let done = act::on_cron(&form.state, &form.fields).await?;
    Ok(back(&form.caller, "/cron", "", &done))
}
