//! `/busy`: the worker processes and the jobs they run, and sending a
//! process `quiet` or `stop` (POST).

use askama::Template;
use axum::response::Response;

use super::{Chrome, back, tenant_label};
use crate::act;
use crate::error::WebError;
use crate::fmt::{duration_or_dash, iteration_text, shorten, time_or_dash};
use crate::load;
use crate::params::url_component;
use crate::request::{CheckedForm, PageRequest};

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
    progress: String,
}

#[derive(Template)]
#[template(path = "busy.html", blocks = ["live"])]
pub(crate) struct BusyPage {
    chrome: Chrome,
    procs: Vec<ProcLine>,
    jobs: Vec<RunLine>,
}

/// `GET /busy`.
pub(crate) async fn busy(request: PageRequest) -> Result<Response, WebError> {
    let view = load::busy(&request.state, request.query.cursor()?).await?;
    let now = request.state.inspector().time().await?;
    let page = BusyPage {
        chrome: request.chrome("/busy"),
        procs: view
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
        jobs: view
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
                    progress: iteration_text(j.iteration.as_ref()),
                }
            })
            .collect(),
    };
    request.render(&page, BusyPage::as_live)
}

/// `POST /busy`: `quiet` or `stop` to a process.
pub(crate) async fn post_busy(form: CheckedForm) -> Result<Response, WebError> {
    let done = act::on_process(&form.state, &form.fields).await?;
    Ok(back(&form.caller, "/busy", "", &done))
}
