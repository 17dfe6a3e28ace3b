//! The W3C trace context a job carries, as the Ruby Sidekiq OpenTelemetry
//! instrumentation writes it: top-level payload fields `traceparent` (and
//! `tracestate` when not empty), and how a worker continues it
//! ([`Propagation`]). Parsing is strict: anything that is not a valid
//! `traceparent` is no context (the job then starts a new trace), never an
//! error.

use serde::{Deserialize, Serialize};

/// The payload field holding the W3C `traceparent`.
pub const TRACEPARENT: &str = "traceparent";
/// The payload field holding the W3C `tracestate`.
pub const TRACESTATE: &str = "tracestate";

/// A parsed `traceparent`: `00-<trace id>-<parent id>-<flags>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    /// The trace id (not all zero).
    pub trace_id: [u8; 16],
    /// The parent span id (not all zero).
    pub span_id: [u8; 8],
    /// Trace flags (bit 0: sampled).
    pub flags: u8,
}

impl TraceParent {
    /// Parses a `traceparent` value: version `00` exactly as specified, or a
    /// later version's first four fields; `None` for anything else.
    pub fn parse(s: &str) -> Option<TraceParent> {
        let mut parts = s.trim().split('-');
        let version = parts.next()?;
        let (trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?);
        if version.len() != 2 || !is_lower_hex(version) || version == "ff" {
            return None;
        }
        if version == "00" && parts.next().is_some() {
            return None;
        }
        let trace_id: [u8; 16] = hex(trace)?;
        let span_id: [u8; 8] = hex(span)?;
        let [flags]: [u8; 1] = hex(flags)?;
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        Some(TraceParent {
            trace_id,
            span_id,
            flags,
        })
    }

    /// The `traceparent` value (version `00`).
    pub fn to_header(&self) -> String {
        let mut s = String::with_capacity(55);
        s.push_str("00-");
        push_hex(&mut s, &self.trace_id);
        s.push('-');
        push_hex(&mut s, &self.span_id);
        s.push('-');
        push_hex(&mut s, &[self.flags]);
        s
    }
}

fn is_lower_hex(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn hex<const N: usize>(s: &str) -> Option<[u8; N]> {
    if s.len() != 2 * N || !is_lower_hex(s) {
        return None;
    }
    let mut out = [0u8; N];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

fn push_hex(s: &mut String, bytes: &[u8]) {
    for b in bytes {
        s.push_str(&format!("{b:02x}"));
    }
}

/// How a performed job's span continues the context its enqueue wrote, as
/// the Ruby instrumentation's `propagation_style`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Propagation {
    /// The perform span is a child of the enqueue: one trace from the request
    /// to the jobs it enqueued (fairjob's default).
    #[default]
    Child,
    /// The perform span starts its own trace, linked to the enqueue (the
    /// Ruby instrumentation's default, and the conventions' for batches).
    Link,
    /// The perform span starts its own trace, with no link.
    None,
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_w3c_traceparent_round_trips() {
        let t = TraceParent::parse(VALID).unwrap();
        assert_eq!(t.flags, 1);
        assert_eq!(t.span_id[0], 0x00);
        assert_eq!(t.span_id[1], 0xf0);
        assert_eq!(t.to_header(), VALID);
        // A later version may add fields.
        assert!(
            TraceParent::parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra")
                .is_some()
        );
    }

    #[test]
    fn malformed_values_are_no_context() {
        for bad in [
            "",
            "garbage",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1z",
        ] {
            assert_eq!(TraceParent::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn propagation_reads_like_the_ruby_setting() {
        let p: Propagation = serde_json::from_str("\"link\"").unwrap();
        assert_eq!(p, Propagation::Link);
        assert_eq!(Propagation::default(), Propagation::Child);
    }
}
