//! The dashboard's one error type, and how each error becomes a response
//! (never a panic): a status code and a short plain-text or JSON message.

use std::net::SocketAddr;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// What can go wrong serving the dashboard.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WebError {
    /// Redis or fairjob failed.
    #[error(transparent)]
    Fairjob(#[from] fairjob::Error),
    /// A template failed to render.
    #[error("rendering a page failed: {0}")]
    Render(#[from] askama::Error),
    /// Binding or serving failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// No such page or entry.
    #[error("not found: {0}")]
    NotFound(String),
    /// A request the dashboard cannot read.
    #[error("bad request: {0}")]
    BadRequest(String),
    /// Refused: a cross-site request, a missing CSRF token, or actions off.
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// No valid token.
    #[error("a token is required: send `Authorization: Bearer <token>` or log in")]
    Unauthorized,
    /// A live refresh sooner than the server's minimum interval.
    #[error("too many refreshes: at most one every {0} s")]
    TooSoon(u64),
    /// A non-loopback address without a token.
    #[error(
        "refusing to serve the dashboard on {0} without a token: it is not a loopback address; \
         set --web-token (or FAIRJOB_WEB_TOKEN), or bind 127.0.0.1"
    )]
    Unprotected(SocketAddr),
}

impl WebError {
    fn status(&self) -> StatusCode {
        match self {
            WebError::Fairjob(fairjob::Error::Config(_)) | WebError::BadRequest(_) => {
                StatusCode::BAD_REQUEST
            }
            WebError::NotFound(_) => StatusCode::NOT_FOUND,
            WebError::Forbidden(_) => StatusCode::FORBIDDEN,
            WebError::Unauthorized => StatusCode::UNAUTHORIZED,
            WebError::TooSoon(_) => StatusCode::TOO_MANY_REQUESTS,
            WebError::Fairjob(e) if e.is_transient() => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl IntoResponse for WebError {
    fn into_response(self) -> Response {
        let status = self.status();
        if status.is_server_error() {
            tracing::warn!(error = %self, "dashboard request failed");
        }
        let mut resp = (status, self.to_string()).into_response();
        let headers = resp.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        if let WebError::TooSoon(secs) = self
            && let Ok(v) = HeaderValue::from_str(&secs.to_string())
        {
            headers.insert(header::RETRY_AFTER, v);
        }
        if status == StatusCode::UNAUTHORIZED {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        resp
    }
}
