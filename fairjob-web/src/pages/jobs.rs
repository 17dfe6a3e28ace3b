//! `/retries`, `/scheduled` and `/dead`: Sidekiq's sets, a page at a time or
//! filtered (a resumable scan, run on request), and their actions (POST) on
//! one entry, the selected ones, or all matching the filter.

use askama::Template;
use axum::response::Response;
use fairjob::inspect::{JobEntry, JobFilter};
use fairjob::inspect::{JobSet, SetAction};

use super::{Chrome, back, error_text, tenant_label};
use crate::act;
use crate::error::WebError;
use crate::fmt::{format_count, shorten, time_or_dash};
use crate::load;
use crate::params::url_component;
use crate::request::{CheckedForm, PageRequest};

pub(crate) struct ActionButton {
    value: &'static str,
    label: &'static str,
    danger: bool,
}

pub(crate) struct Hidden {
    name: &'static str,
    value: String,
}

pub(crate) struct JobLine {
    key: String,
    at: String,
    class: String,
    jid: String,
    jid_href: String,
    tenant: String,
    tenant_href: Option<String>,
    queue: String,
    args: String,
    error: String,
    retries: String,
}

#[derive(Template)]
#[template(path = "jobs.html", blocks = ["live"])]
pub(crate) struct JobsPage {
    chrome: Chrome,
    title: &'static str,
    set: &'static str,
    total: String,
    when_label: &'static str,
    f_class: String,
    f_tenant: String,
    f_queue: String,
    f_error: String,
    filtered: bool,
    live: bool,
    scanned: Option<String>,
    from: String,
    next_query: Option<String>,
    prev_query: Option<String>,
    back: String,
    hidden: Vec<Hidden>,
    actions: Vec<ActionButton>,
    all_what: &'static str,
    rows: Vec<JobLine>,
}

/// The filter as query pairs, each followed by `&`.
fn filter_query(filter: &JobFilter) -> String {
    let mut out = String::new();
    for (name, value) in filter_fields(filter) {
        if let Some(value) = value {
            out.push_str(&format!("{name}={}&", url_component(value)));
        }
    }
    out
}

fn filter_fields(filter: &JobFilter) -> [(&'static str, &Option<String>); 4] {
    [
        ("class", &filter.class),
        ("tenant", &filter.tenant),
        ("queue", &filter.queue),
        ("error", &filter.error),
    ]
}

/// `GET /retries`, `/scheduled`, `/dead` (`?class=&tenant=&queue=&error=&cursor=`).
async fn jobs(request: PageRequest, set: JobSet) -> Result<Response, WebError> {
    let filter = load::job_filter(&request.query);
    let cursor = request.query.cursor()?;
    let view = load::jobs(&request.state, set, &filter, cursor).await?;
    let filter_pairs = filter_query(&filter);
    let (title, when_label, path) = match set {
        JobSet::Retry => ("Retries", "next retry", "/retries"),
        JobSet::Scheduled => ("Scheduled", "due", "/scheduled"),
        JobSet::Dead => ("Dead", "died", "/dead"),
    };
    let hidden = filter_fields(&filter)
        .into_iter()
        .filter_map(|(name, value)| {
            value.as_ref().map(|value| Hidden {
                name,
                value: value.clone(),
            })
        })
        .collect();
    let page = JobsPage {
        chrome: request.chrome(path),
        title,
        set: set.name(),
        total: format_count(view.total),
        when_label,
        f_class: filter.class.clone().unwrap_or_default(),
        f_tenant: filter.tenant.clone().unwrap_or_default(),
        f_queue: filter.queue.clone().unwrap_or_default(),
        f_error: filter.error.clone().unwrap_or_default(),
        filtered: !filter.is_empty(),
        // A filtered listing is a scan: run on request, never on refresh.
        live: filter.is_empty() && cursor == 0,
        scanned: view.scanned.map(format_count),
        from: format_count(cursor),
        next_query: view.next.map(|next| format!("{filter_pairs}cursor={next}")),
        prev_query: (cursor > 0).then(|| filter_pairs.trim_end_matches('&').to_owned()),
        back: filter_pairs.trim_end_matches('&').to_owned(),
        hidden,
        actions: set
            .actions()
            .iter()
            .map(|action| ActionButton {
                value: action.as_str(),
                label: action.label(),
                danger: matches!(action, SetAction::Delete | SetAction::Kill),
            })
            .collect(),
        all_what: if filter.is_empty() {
            "entries"
        } else {
            "matching entries"
        },
        rows: view.rows.iter().map(job_line).collect(),
    };
    request.render(&page, JobsPage::as_live)
}

fn job_line(entry: &JobEntry) -> JobLine {
    let (tenant, tenant_href) = tenant_label(&entry.tenant);
    JobLine {
        key: entry.key.clone(),
        at: time_or_dash(entry.at),
        class: entry.class.clone(),
        jid: entry.jid.clone(),
        jid_href: url_component(&entry.jid),
        tenant,
        tenant_href,
        queue: entry.queue.clone(),
        args: shorten(&entry.args, 300),
        error: error_text(entry),
        retries: match entry.retry_count {
            Some(count) => format!("{count} of {}", entry.max_retries),
            None => "-".to_owned(),
        },
    }
}

/// `GET /retries`.
pub(crate) async fn retries(request: PageRequest) -> Result<Response, WebError> {
    jobs(request, JobSet::Retry).await
}

/// `GET /scheduled`.
pub(crate) async fn scheduled(request: PageRequest) -> Result<Response, WebError> {
    jobs(request, JobSet::Scheduled).await
}

/// `GET /dead`.
pub(crate) async fn dead(request: PageRequest) -> Result<Response, WebError> {
    jobs(request, JobSet::Dead).await
}

/// An action on a set, then back to the same filters (re-encoded from the
/// form, nothing else kept).
async fn post_jobs(set: JobSet, form: CheckedForm) -> Result<Response, WebError> {
    let done = act::on_jobs(&form.state, set, &form.fields).await?;
    let keep: Vec<String> = ["class", "tenant", "queue", "error"]
        .iter()
        .filter_map(|k| {
            form.fields
                .value(k)
                .map(|v| format!("{k}={}", url_component(v)))
        })
        .collect();
    let path = format!("/{}", set.name());
    Ok(back(&form.caller, &path, &keep.join("&"), &done))
}

/// `POST /retries`.
pub(crate) async fn post_retries(form: CheckedForm) -> Result<Response, WebError> {
    post_jobs(JobSet::Retry, form).await
}

/// `POST /scheduled`.
pub(crate) async fn post_scheduled(form: CheckedForm) -> Result<Response, WebError> {
    post_jobs(JobSet::Scheduled, form).await
}

/// `POST /dead`.
pub(crate) async fn post_dead(form: CheckedForm) -> Result<Response, WebError> {
    post_jobs(JobSet::Dead, form).await
}
