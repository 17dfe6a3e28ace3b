//! Reading requests: the `k=v` pairs of a query string or a form body
//! ([`Params`], repeated keys kept, `+` as a space), and percent-encoding
//! for the links the pages build.

use std::convert::Infallible;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};

use crate::error::WebError;

/// Bytes kept as they are in a URL component.
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Percent-encodes a path segment or query value (tenant ids, queue names, keys).
pub(crate) fn url_component(s: &str) -> String {
    utf8_percent_encode(s, COMPONENT).to_string()
}

/// The pairs of a query string or form body, in order, repeated keys kept.
/// As an extractor: the request's query string.
#[derive(Debug, Clone, Default)]
pub(crate) struct Params(Vec<(String, String)>);

impl Params {
    /// Parses `k=v&k2=v2`, decoding `+` and `%XX`.
    pub(crate) fn parse(s: &str) -> Params {
        let decode = |x: &str| {
            percent_decode_str(&x.replace('+', " "))
                .decode_utf8_lossy()
                .into_owned()
        };
        Params(
            s.split('&')
                .filter(|p| !p.is_empty())
                .map(|p| {
                    let (k, v) = p.split_once('=').unwrap_or((p, ""));
                    (decode(k), decode(v))
                })
                .collect(),
        )
    }

    /// The first value of `key`, trimmed, when not empty.
    pub(crate) fn value(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.trim())
            .filter(|v| !v.is_empty())
    }

    /// The first value of `key` as sent (untrimmed, possibly empty).
    pub(crate) fn raw(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Every value of `key`, as sent.
    pub(crate) fn values(&self, key: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// A number (absent → `None`, not a number → a bad request).
    pub(crate) fn number<T: std::str::FromStr>(&self, key: &str) -> Result<Option<T>, WebError> {
        match self.value(key) {
            None => Ok(None),
            Some(v) => v
                .parse()
                .map(Some)
                .map_err(|_| WebError::BadRequest(format!("`{key}` must be a number, not {v:?}"))),
        }
    }

    /// A list cursor: a number, 0 when absent.
    pub(crate) fn cursor(&self) -> Result<u64, WebError> {
        Ok(self.number("cursor")?.unwrap_or(0))
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Params {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Params::parse(parts.uri.query().unwrap_or("")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_keep_repeats_and_decode() {
        let p = Params::parse("key=1%7Ca&key=2%7Cb&tenant=a+b%3Cc&empty=");
        assert_eq!(p.values("key"), vec!["1|a", "2|b"]);
        assert_eq!(p.value("tenant"), Some("a b<c"));
        assert_eq!(p.value("empty"), None);
        assert_eq!(p.raw("empty"), Some(""));
    }

    #[test]
    fn components_are_encoded_whole() {
        assert_eq!(url_component("a/b {c}:é"), "a%2Fb%20%7Bc%7D%3A%C3%A9");
    }
}
