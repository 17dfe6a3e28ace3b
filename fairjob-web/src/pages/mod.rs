//! The HTML pages, one file per page or small group: each handler loads one
//! view (`load`), turns it into display rows and renders a compile-time
//! template (HTML-escaped by default). `?fragment=live` renders only the
//! page's live part, for the script's refresh, at most once per the
//! server's minimum interval ([`PageRequest`] checks it). Each action is a
//! POST taken as a [`CheckedForm`](crate::request::CheckedForm) (origin,
//! CSRF token, actions switch), then redirected back (303) with a message.
//!
//! This file holds what the pages share: the frame ([`Chrome`]), rendering,
//! the redirect after an action, and the rows several pages show.

mod auth;
mod batches;
mod busy;
mod cron;
mod explain;
mod jobs;
mod limits;
mod overview;
mod queues;
mod shards;
mod tenants;
mod unique;

use askama::Template;
use axum::response::{Html, IntoResponse, Redirect, Response};
use fairjob::inspect::{JobEntry, LongWait};

pub(crate) use auth::{login, login_form, logout};
pub(crate) use batches::{batch, batches, workflow};
pub(crate) use busy::{busy, post_busy};
pub(crate) use cron::{cron, post_cron};
pub(crate) use explain::explain;
pub(crate) use jobs::{dead, post_dead, post_retries, post_scheduled, retries, scheduled};
pub(crate) use limits::{limits, post_limits, post_rate};
pub(crate) use overview::overview;
pub(crate) use queues::{post_queues, queues};
pub(crate) use shards::{post_shards, shards};
pub(crate) use tenants::{tenant, tenants};
pub(crate) use unique::{post_unique, unique};

use crate::act::Done;
use crate::error::WebError;
use crate::fmt::{millis_or_dash, shorten, time_or_dash};
use crate::params::url_component;
use crate::request::PageRequest;
use crate::security::Caller;

/// One navigation link.
pub(crate) struct NavLink {
    href: &'static str,
    label: &'static str,
    active: bool,
}

/// What every page's frame shows.
pub(crate) struct Chrome {
    base: String,
    csrf: String,
    actions: bool,
    refresh: u64,
    logout: bool,
    nav: Vec<NavLink>,
    version: &'static str,
    redis: String,
    message: Option<String>,
}

const NAV: &[(&str, &str)] = &[
    ("/", "Overview"),
    ("/queues", "Queues"),
    ("/tenants", "Tenants"),
    ("/limits", "Limits"),
    ("/unique", "Unique"),
    ("/busy", "Busy"),
    ("/cron", "Cron"),
    ("/batches", "Batches"),
    ("/retries", "Retries"),
    ("/scheduled", "Scheduled"),
    ("/dead", "Dead"),
    ("/explain", "Explain"),
];

impl PageRequest {
    /// The frame of a page whose navigation link is `active`.
    fn chrome(&self, active: &str) -> Chrome {
        let config = &self.state.config;
        Chrome {
            base: self.caller.base.clone(),
            csrf: self.caller.csrf.clone(),
            actions: config.actions,
            refresh: config.refresh_secs(),
            logout: config.token.is_some() && self.caller.session.is_some(),
            nav: NAV
                .iter()
                .map(|(href, label)| NavLink {
                    href,
                    label,
                    active: *href == active,
                })
                .collect(),
            version: env!("CARGO_PKG_VERSION"),
            redis: self.state.inspector().redis_display().to_owned(),
            message: self.query.value("msg").map(|m| shorten(m, 300)),
        }
    }

    /// Renders `page`, or only its live part (`live_part`, the template's
    /// `as_live`) on a live refresh.
    fn render<'a, P: Template, L: Template>(
        &self,
        page: &'a P,
        live_part: impl FnOnce(&'a P) -> L,
    ) -> Result<Response, WebError> {
        if self.live {
            render(&live_part(page))
        } else {
            render(page)
        }
    }
}

fn render<T: Template>(page: &T) -> Result<Response, WebError> {
    Ok(Html(page.render()?).into_response())
}

/// A 303 back to `path?query` with the action's message.
fn back(caller: &Caller, path: &str, query: &str, done: &Done) -> Response {
    let sep = if query.is_empty() { "" } else { "&" };
    Redirect::to(&format!(
        "{}{path}?{query}{sep}msg={}",
        caller.base,
        url_component(&done.message)
    ))
    .into_response()
}

/// A tenant's name and link (`None`: jobs without a tenant).
fn tenant_label(tenant: &Option<String>) -> (String, Option<String>) {
    match tenant {
        Some(t) => (t.clone(), Some(url_component(t))),
        None => ("(no tenant)".to_owned(), None),
    }
}

/// A tenant's longest wait (the overview, the tenants list).
pub(crate) struct WaitLine {
    tenant: String,
    href: Option<String>,
    queue: String,
    max: String,
}

fn wait_lines(waits: &[LongWait]) -> Vec<WaitLine> {
    waits
        .iter()
        .map(|wait| {
            let (tenant, href) = tenant_label(&wait.tenant);
            WaitLine {
                tenant,
                href,
                queue: wait.queue.clone(),
                max: millis_or_dash(Some(wait.max_ms)),
            }
        })
        .collect()
}

/// A retry or dead entry in a short list (a tenant's page).
pub(crate) struct EntryLine {
    jid: String,
    jid_href: String,
    class: String,
    queue: String,
    error: String,
    at: String,
}

fn entry_lines(rows: &[JobEntry]) -> Vec<EntryLine> {
    rows.iter()
        .map(|entry| EntryLine {
            jid: entry.jid.clone(),
            jid_href: url_component(&entry.jid),
            class: entry.class.clone(),
            queue: entry.queue.clone(),
            error: error_text(entry),
            at: time_or_dash(entry.at),
        })
        .collect()
}

/// An entry's error, `Class: message`, shortened.
fn error_text(entry: &JobEntry) -> String {
    match (&entry.error_class, &entry.error_message) {
        (Some(class), Some(message)) => shorten(&format!("{class}: {message}"), 200),
        (Some(class), None) => class.clone(),
        (None, Some(message)) => shorten(message, 200),
        (None, None) => String::new(),
    }
}
