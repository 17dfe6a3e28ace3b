//! The extractors handlers take: [`PageRequest`] for every HTML page (who
//! asks, the query, a live refresh checked against the minimum interval),
//! and [`CheckedForm`] for every action POST (its origin, its CSRF token and
//! the actions switch checked before the handler runs, as axum's
//! `examples/validator` builds `ValidatedForm`).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Extension, FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};

use crate::params::Params;
use crate::security::{self, Caller};
use crate::state::WebState;

/// A page request: the state, who asks, the query string, and whether it
/// is a live refresh (`?fragment=live`, refused with 429 when sooner than
/// the server's minimum interval after this session's last one).
pub(crate) struct PageRequest {
    pub state: Arc<WebState>,
    pub caller: Caller,
    pub query: Params,
    pub live: bool,
}

impl FromRequestParts<Arc<WebState>> for PageRequest {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<WebState>,
    ) -> Result<Self, Response> {
        let Extension(caller) = Extension::<Caller>::from_request_parts(parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let query = Params::parse(parts.uri.query().unwrap_or(""));
        let live = query.value("fragment") == Some("live");
        if live {
            security::check_live(state, &caller, parts.uri.path())
                .map_err(IntoResponse::into_response)?;
        }
        Ok(PageRequest {
            state: Arc::clone(state),
            caller,
            query,
            live,
        })
    }
}

/// An action's form, accepted only from the dashboard's own origin (or an
/// allowed one), with the session's CSRF token (field `csrf` or header
/// `X-CSRF-Token`) or the bearer token, and with actions enabled; otherwise
/// the request is refused (403) before the handler runs.
pub(crate) struct CheckedForm {
    pub state: Arc<WebState>,
    pub caller: Caller,
    pub fields: Params,
}

impl FromRequest<Arc<WebState>> for CheckedForm {
    type Rejection = Response;

    async fn from_request(req: Request, state: &Arc<WebState>) -> Result<Self, Response> {
        let (mut parts, body) = req.into_parts();
        let Extension(caller) = Extension::<Caller>::from_request_parts(&mut parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let headers = parts.headers.clone();
        let body = Bytes::from_request(Request::from_parts(parts, body), state)
            .await
            .map_err(IntoResponse::into_response)?;
        let fields = Params::parse(&String::from_utf8_lossy(&body));
        security::check_post(state, &caller, &headers, fields.value("csrf"))
            .and_then(|()| security::check_actions(state))
            .map_err(IntoResponse::into_response)?;
        Ok(CheckedForm {
            state: Arc::clone(state),
            caller,
            fields,
        })
    }
}
