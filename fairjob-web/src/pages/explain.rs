//! `/explain?jid=&tenant=&cursor=&budget=`: where one job is and why it
//! waits (a walk, run on request only, resumable), and what the places
//! besides Redis ([`crate::WebConfig::explain_source`]) know of it.

use askama::Template;
use axum::response::Response;
use fairjob::inspect::Reason;

use super::{Chrome, render, tenant_label};
use crate::error::WebError;
use crate::fmt::{format_count, iteration_text, shorten, time_or_dash};
use crate::load;
use crate::params::url_component;
use crate::reasons::RenderedReason;
use crate::request::PageRequest;

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
    chrome: Chrome,
    asked: bool,
    jid: String,
    tenant: String,
    found: bool,
    reasons: Vec<RenderedReason>,
    more: Option<String>,
    scanned: String,
    total: String,
    job: Option<JobLines>,
    progress: String,
    /// What the places besides Redis (fairjob-postgres' outbox) know of it.
    elsewhere: Vec<load::SourceView>,
    /// Its batch's (or workflow's) page, for a member: path and label.
    batch_link: Option<(String, String)>,
}

/// `GET /explain?jid=&tenant=&cursor=&budget=` (a walk, run on request only).
pub(crate) async fn explain(request: PageRequest) -> Result<Response, WebError> {
    let jid = request.query.value("jid").unwrap_or("").to_owned();
    let tenant = request.query.value("tenant").map(str::to_owned);
    let mut page = ExplainPage {
        chrome: request.chrome("/explain"),
        asked: !jid.is_empty(),
        jid: jid.clone(),
        tenant: tenant.clone().unwrap_or_default(),
        found: false,
        reasons: Vec::new(),
        more: None,
        scanned: String::new(),
        total: String::new(),
        job: None,
        progress: String::new(),
        elsewhere: Vec::new(),
        batch_link: None,
    };
    if !jid.is_empty() {
        let explanation = load::explain(
            &request.state,
            &jid,
            tenant.as_deref(),
            request.query.value("cursor"),
            request.query.number("budget")?,
        )
        .await?;
        page.found = explanation.found;
        page.progress = iteration_text(explanation.iteration.as_ref());
        page.scanned = format_count(explanation.scanned);
        page.total = format_count(explanation.total.max(explanation.scanned));
        page.more = explanation.next.as_ref().map(|next| {
            let mut href = format!("jid={}&cursor={}", url_component(&jid), url_component(next));
            if let Some(tenant) = &tenant {
                href.push_str(&format!("&tenant={}", url_component(tenant)));
            }
            href
        });
        page.job = explanation.job.as_ref().map(|job| {
            let (tenant, tenant_href) = tenant_label(&job.tenant);
            JobLines {
                class: job.class.clone(),
                queue: job.queue.clone(),
                tenant,
                tenant_href,
                args: shorten(&job.args, 2_000),
                enqueued: job.enqueued_at.map_or_else(|| "-".to_owned(), time_or_dash),
                retries: job
                    .retry_count
                    .map_or_else(|| "0".to_owned(), |r| r.to_string()),
            }
        });
        page.batch_link = explanation.reasons.iter().find_map(|r| match r {
            Reason::BatchMember { bid, workflow, .. } => Some(if *workflow {
                (
                    format!("/workflows/{}", url_component(bid)),
                    "its workflow's steps".to_owned(),
                )
            } else {
                (
                    format!("/batches/{}", url_component(bid)),
                    "its batch".to_owned(),
                )
            }),
            _ => None,
        });
        page.reasons = explanation
            .reasons
            .iter()
            .map(RenderedReason::from)
            .collect();
        page.elsewhere = load::explain_sources(&request.state, &jid).await;
    }
    render(&page)
}
