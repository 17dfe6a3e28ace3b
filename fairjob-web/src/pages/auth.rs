//! `/login` (the form, and the token for a logged-in session cookie) and
//! `/logout`; both POSTs are checked for origin and CSRF token by
//! `security` (not by `CheckedForm`: they work with actions off).

use std::sync::Arc;

use askama::Template;
use axum::body::Bytes;
use axum::extract::{Extension, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Redirect, Response};

use super::render;
use crate::error::WebError;
use crate::params::Params;
use crate::security::{self, Caller};
use crate::state::WebState;

#[derive(Template)]
#[template(path = "login.html")]
pub(crate) struct LoginPage {
    base: String,
    csrf: String,
    next: String,
    version: &'static str,
}

/// `GET /login?next=`.
pub(crate) async fn login_form(
    State(state): State<Arc<WebState>>,
    Extension(caller): Extension<Caller>,
    query: Params,
) -> Result<Response, WebError> {
    if state.config.token.is_none() {
        return Ok(Redirect::to(&format!("{}/", caller.base)).into_response());
    }
    render(&LoginPage {
        base: caller.base.clone(),
        csrf: caller.csrf.clone(),
        next: query.value("next").unwrap_or("").to_owned(),
        version: env!("CARGO_PKG_VERSION"),
    })
}

/// `POST /login` (open with actions off; `security::login` checks origin
/// and CSRF token, then the token).
pub(crate) async fn login(
    State(state): State<Arc<WebState>>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, WebError> {
    let form = Params::parse(&String::from_utf8_lossy(&body));
    security::login(&state, &caller, &headers, &form)
}

/// `POST /logout` (open with actions off; origin and CSRF token checked).
pub(crate) async fn logout(
    State(state): State<Arc<WebState>>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, WebError> {
    let form = Params::parse(&String::from_utf8_lossy(&body));
    security::logout(&state, &caller, &headers, &form)
}
