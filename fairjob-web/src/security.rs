//! Who may see the dashboard and what a request may do: the token (bearer
//! header or login cookie) on every route, a session per browser with its
//! CSRF token, the origin check of every POST, the server's minimum refresh
//! interval, and the security headers on every response (a strict
//! Content-Security-Policy: only the dashboard's own script and stylesheet).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{OriginalUri, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use rand::Rng;

use crate::error::WebError;
use crate::params::Params;
use crate::state::{MAX_SESSIONS, Session, WebState};

/// The session cookie.
pub(crate) const COOKIE: &str = "fairjob_session";

/// How long a session lasts.
const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);

/// The Content-Security-Policy of every response.
pub(crate) const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; \
     base-uri 'none'";

/// What the guard learned about a request (a request extension).
#[derive(Debug, Clone)]
pub(crate) struct Caller {
    /// The mount point (`""` or `/fairjob`), for links.
    pub base: String,
    /// The session id, if the browser has one.
    pub session: Option<String>,
    /// Its CSRF token.
    pub csrf: String,
    /// Whether the request carried the right bearer token.
    pub bearer: bool,
}

/// Compares secrets in time independent of where they differ.
pub(crate) fn same_secret(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn random_hex() -> String {
    let bytes: [u8; 24] = rand::rng().random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_owned())
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(str::trim)
}

/// The mount point: the original path minus the path this router sees.
fn base_of(original: &str, seen: &str) -> String {
    original
        .strip_suffix(seen)
        .unwrap_or("")
        .trim_end_matches('/')
        .to_owned()
}

impl WebState {
    /// A new session (logged in or not); returns its id.
    pub(crate) fn new_session(&self, authed: bool) -> (String, String) {
        let id = random_hex();
        let csrf = random_hex();
        let mut sessions = self.sessions.lock().expect("sessions lock");
        if sessions.len() >= MAX_SESSIONS {
            let now = Instant::now();
            sessions.retain(|_, s| s.expires > now);
            if sessions.len() >= MAX_SESSIONS
                && let Some(oldest) = sessions
                    .iter()
                    .min_by_key(|(_, s)| s.expires)
                    .map(|(k, _)| k.clone())
            {
                sessions.remove(&oldest);
            }
        }
        sessions.insert(
            id.clone(),
            Session {
                csrf: csrf.clone(),
                authed,
                expires: Instant::now() + SESSION_TTL,
                last_live: Default::default(),
            },
        );
        (id, csrf)
    }

    fn session(&self, id: &str) -> Option<Session> {
        let sessions = self.sessions.lock().expect("sessions lock");
        sessions
            .get(id)
            .filter(|s| s.expires > Instant::now())
            .cloned()
    }

    pub(crate) fn end_session(&self, id: &str) {
        self.sessions.lock().expect("sessions lock").remove(id);
    }
}

pub(crate) fn session_cookie(base: &str, id: &str, max_age: u64) -> HeaderValue {
    let path = if base.is_empty() { "/" } else { base };
    HeaderValue::from_str(&format!(
        "{COOKIE}={id}; Path={path}; HttpOnly; SameSite=Strict; Max-Age={max_age}"
    ))
    .expect("cookie is ASCII")
}

fn with_headers(mut resp: Response, static_file: bool) -> Response {
    let headers = resp.headers_mut();
    headers.insert("content-security-policy", HeaderValue::from_static(CSP));
    headers.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    headers.insert("x-frame-options", HeaderValue::from_static("DENY"));
    // `same-origin`: browsers then send the dashboard's own `Origin` with its
    // form POSTs (with `no-referrer` they send `Origin: null`).
    headers.insert("referrer-policy", HeaderValue::from_static("same-origin"));
    if !static_file {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    resp
}

/// The guard every route passes: finds the mount point, checks the token,
/// gives a browser its session, and adds the security headers.
pub(crate) async fn guard(
    State(shared): State<Arc<WebState>>,
    OriginalUri(original): OriginalUri,
    mut req: Request,
    next: Next,
) -> Response {
    let path = req.uri().path().to_owned();
    let base = base_of(original.path(), &path);
    if path.starts_with("/static/") {
        return with_headers(next.run(req).await, true);
    }
    let headers = req.headers();
    let token = shared.config.token.clone();
    let is_bearer = match (&token, bearer(headers)) {
        (Some(t), Some(given)) => same_secret(t, given),
        _ => false,
    };
    let found = cookie(headers, COOKIE).and_then(|id| shared.session(&id).map(|s| (id, s)));
    let authed = token.is_none() || is_bearer || found.as_ref().is_some_and(|(_, s)| s.authed);
    let login = path == "/login";
    if !authed && !login {
        let resp = if path.starts_with("/api") || req.method() != Method::GET {
            WebError::Unauthorized.into_response()
        } else {
            let next_url = original
                .path_and_query()
                .map_or_else(|| path.clone(), |p| p.as_str().to_owned());
            let target = format!(
                "{base}/login?next={}",
                crate::params::url_component(&next_url)
            );
            Redirect::to(&target).into_response()
        };
        return with_headers(resp, false);
    }
    let (session, csrf, new_cookie) = match found {
        Some((id, s)) => (Some(id), s.csrf, None),
        None if is_bearer && bearer(headers).is_some() => (None, String::new(), None),
        None => {
            let (id, csrf) = shared.new_session(false);
            (Some(id.clone()), csrf, Some(id))
        }
    };
    req.extensions_mut().insert(Caller {
        base: base.clone(),
        session,
        csrf,
        bearer: is_bearer,
    });
    let mut resp = next.run(req).await;
    if let Some(id) = new_cookie {
        resp.headers_mut().append(
            header::SET_COOKIE,
            session_cookie(&base, &id, SESSION_TTL.as_secs()),
        );
    }
    with_headers(resp, false)
}

/// The checks of every POST: from the dashboard's own origin, and either
/// the bearer token or the session's CSRF token.
pub(crate) fn check_post(
    shared: &WebState,
    caller: &Caller,
    headers: &HeaderMap,
    csrf: Option<&str>,
) -> Result<(), WebError> {
    if let Some(site) = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok())
        && site != "same-origin"
        && site != "none"
    {
        return Err(WebError::Forbidden(format!(
            "cross-site request refused (Sec-Fetch-Site: {site})"
        )));
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("");
        let own = origin
            .split_once("://")
            .is_some_and(|(_, rest)| !host.is_empty() && rest == host);
        let allowed = shared
            .config
            .allowed_origins
            .iter()
            .any(|o| o.trim_end_matches('/') == origin);
        if !own && !allowed {
            return Err(WebError::Forbidden(format!(
                "cross-origin request refused (Origin: {origin})"
            )));
        }
    }
    if caller.bearer {
        return Ok(());
    }
    let given = csrf
        .map(str::to_owned)
        .or_else(|| {
            headers
                .get("x-csrf-token")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        })
        .unwrap_or_default();
    if caller.session.is_none() || caller.csrf.is_empty() || !same_secret(&caller.csrf, &given) {
        return Err(WebError::Forbidden(
            "missing or wrong CSRF token: reload the page and try again".into(),
        ));
    }
    Ok(())
}

/// Actions must be enabled.
pub(crate) fn check_actions(shared: &WebState) -> Result<(), WebError> {
    if !shared.config.actions {
        return Err(WebError::Forbidden(
            "actions are disabled: the dashboard is read-only (enable them with --web-actions or \
             WebConfig::actions)"
                .into(),
        ));
    }
    Ok(())
}

/// A live refresh of `page` by this session: refused when sooner than the
/// minimum interval after the last one.
pub(crate) fn check_live(shared: &WebState, caller: &Caller, page: &str) -> Result<(), WebError> {
    let Some(id) = &caller.session else {
        return Ok(());
    };
    let min = shared.config.min_refresh;
    let mut sessions = shared.sessions.lock().expect("sessions lock");
    if let Some(s) = sessions.get_mut(id) {
        let now = Instant::now();
        if let Some(last) = s.last_live.get(page)
            && now.duration_since(*last) < min
        {
            return Err(WebError::TooSoon(min.as_secs().max(1)));
        }
        if s.last_live.len() > 50 {
            s.last_live.clear();
        }
        s.last_live.insert(page.to_owned(), now);
    }
    Ok(())
}

/// `POST /login`: the token for a logged-in session cookie.
pub(crate) fn login(
    shared: &WebState,
    caller: &Caller,
    headers: &HeaderMap,
    form: &Params,
) -> Result<Response, WebError> {
    check_post(shared, caller, headers, form.raw("csrf"))?;
    let Some(token) = &shared.config.token else {
        return Ok(Redirect::to(&format!("{}/", caller.base)).into_response());
    };
    if !same_secret(token, form.raw("token").unwrap_or("")) {
        tracing::warn!("dashboard login with a wrong token");
        return Ok((StatusCode::UNAUTHORIZED, "wrong token").into_response());
    }
    if let Some(old) = &caller.session {
        shared.end_session(old);
    }
    let (id, _) = shared.new_session(true);
    let next = form.raw("next").unwrap_or("");
    // Only back into the dashboard (no open redirect).
    let target = if next.starts_with(&format!("{}/", caller.base))
        && !next.starts_with("//")
        && !next.contains("://")
    {
        next.to_owned()
    } else {
        format!("{}/", caller.base)
    };
    let mut resp = Redirect::to(&target).into_response();
    resp.headers_mut().append(
        header::SET_COOKIE,
        session_cookie(&caller.base, &id, SESSION_TTL.as_secs()),
    );
    Ok(resp)
}

/// `POST /logout`.
pub(crate) fn logout(
    shared: &WebState,
    caller: &Caller,
    headers: &HeaderMap,
    form: &Params,
) -> Result<Response, WebError> {
    check_post(shared, caller, headers, form.raw("csrf"))?;
    if let Some(id) = &caller.session {
        shared.end_session(id);
    }
    let mut resp = Redirect::to(&format!("{}/login", caller.base)).into_response();
    resp.headers_mut()
        .append(header::SET_COOKIE, session_cookie(&caller.base, "", 0));
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abc", "abd"));
        assert!(!same_secret("abc", "ab"));
    }

    #[test]
    fn the_mount_point_is_what_the_router_does_not_see() {
        assert_eq!(base_of("/fairjob/tenants/x", "/tenants/x"), "/fairjob");
        assert_eq!(base_of("/tenants/x", "/tenants/x"), "");
        assert_eq!(base_of("/fairjob/", "/"), "/fairjob");
    }

    #[test]
    fn cookies_are_found_by_name() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; fairjob_session=xyz; b=2"),
        );
        assert_eq!(cookie(&headers, COOKIE).as_deref(), Some("xyz"));
        assert_eq!(cookie(&headers, "c"), None);
    }
}
