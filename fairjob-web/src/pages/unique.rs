//! `/unique`: a page of live unique locks (the queue, the holder, the time
//! left), and removing one by hand (POST, under the actions switch).

use askama::Template;
use axum::response::Response;

use super::{Chrome, back};
use crate::act;
use crate::error::WebError;
use crate::fmt::format_duration;
use crate::load;
use crate::params::url_component;
use crate::request::{CheckedForm, PageRequest};

pub(crate) struct LockLine {
    key: String,
    queue: String,
    digest: String,
    jid: String,
    jid_href: String,
    ttl: String,
}

#[derive(Template)]
#[template(path = "unique.html", blocks = ["live"])]
pub(crate) struct UniquePage {
    chrome: Chrome,
    rows: Vec<LockLine>,
    next: Option<u64>,
}

/// `GET /unique?cursor=`.
pub(crate) async fn unique(request: PageRequest) -> Result<Response, WebError> {
    let view = load::unique(&request.state, request.query.cursor()?).await?;
    let page = UniquePage {
        chrome: request.chrome("/unique"),
        rows: view
            .rows
            .iter()
            .map(|r| LockLine {
                key: r.key.clone(),
                queue: r.queue.clone().unwrap_or_else(|| "?".to_owned()),
                digest: r.digest.clone(),
                jid: r.jid.clone(),
                jid_href: url_component(&r.jid),
                ttl: r
                    .ttl_ms
                    .map_or_else(|| "-".to_owned(), |ms| format_duration(ms as f64 / 1000.0)),
            })
            .collect(),
        next: view.next,
    };
    request.render(&page, UniquePage::as_live)
}

/// `POST /unique`: `key` to unlock.
pub(crate) async fn post_unique(form: CheckedForm) -> Result<Response, WebError> {
    let done = act::on_unique(&form.state, &form.fields).await?;
    Ok(back(&form.caller, "/unique", "", &done))
}
