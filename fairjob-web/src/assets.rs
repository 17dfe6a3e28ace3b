//! The dashboard's own stylesheet and script, embedded in the binary (no
//! CDN, no build step, no third-party code) and served with a long cache
//! lifetime: pages link them with the crate version as a query.

use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

const CSS: &str = include_str!("../static/app.css");
const JS: &str = include_str!("../static/app.js");
const ICON: &[u8] = include_bytes!("../static/favicon.svg");

/// `GET /static/{file}`.
pub(crate) async fn file(Path(name): Path<String>) -> Response {
    let (body, kind): (&[u8], &str) = match name.as_str() {
        "app.css" => (CSS.as_bytes(), "text/css; charset=utf-8"),
        "app.js" => (JS.as_bytes(), "text/javascript; charset=utf-8"),
        "favicon.svg" => (ICON, "image/svg+xml"),
        _ => return (StatusCode::NOT_FOUND, "no such file").into_response(),
    };
    let mut resp = body.into_response();
    let headers = resp.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=86400"),
    );
    resp
}
