//! Sidekiq's wire format: one JSON object per job.
//!
//! A [`Payload`] keeps every top-level field as the exact JSON text it arrived
//! with (`RawValue`), in order, so unknown fields, big numbers and `[]` survive
//! every round trip, and keeps the original bytes beside the parsed form: an
//! entry that will be removed by value (`LREM`/`ZREM`/`HDEL`) is always removed
//! with the bytes Redis holds. Edits happen here, in Rust; Lua scripts only move
//! strings they are given.
//!
//! This file owns the payload's shape; it does no IO.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use rand::Rng;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::options::Retry;
use super::{active_job, fields};
use crate::error::Error;

/// A Sidekiq job payload.
#[derive(Clone)]
pub struct Payload {
    /// The bytes as read from Redis; `None` for a payload built here and not yet written.
    raw: Option<String>,
    fields: Vec<(String, Box<RawValue>)>,
}

impl fmt::Debug for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Payload")
            .field("class", &self.class())
            .field("jid", &self.jid())
            .field("queue", &self.queue())
            .field("bytes", &self.raw.as_ref().map_or(0, String::len))
            .finish()
    }
}

/// Why some bytes are not a usable Sidekiq job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed(pub String);

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Payload {
    /// A new payload for `class` with `args`, a fresh jid and `created_at`.
    pub fn new(class: &str, args: Box<RawValue>, queue: &str) -> Payload {
        let mut p = Payload {
            raw: None,
            fields: Vec::with_capacity(8),
        };
        p.set("class", class);
        p.fields.push(("args".to_owned(), args));
        p.set("jid", new_jid());
        p.set("queue", queue);
        p
    }

    /// Like [`Payload::parse`], leaving the caller its bytes (to dead-letter them intact).
    pub fn parse_slice(bytes: &[u8]) -> std::result::Result<Payload, Malformed> {
        let s = std::str::from_utf8(bytes)
            .map_err(|e| Malformed(format!("payload is not valid UTF-8: {e}")))?;
        Payload::parse(s.as_bytes().to_vec())
    }

    /// Parses bytes read from Redis. Checks that it is a JSON object with a string
    /// `class`, an array `args` and a string `jid`.
    pub fn parse(bytes: Vec<u8>) -> std::result::Result<Payload, Malformed> {
        Payload::parse_owned(bytes).map_err(|(m, _)| m)
    }

    /// Like [`Payload::parse`] (the bytes become the payload's, uncopied),
    /// giving them back when they are not a job (to dead-letter them intact).
    pub(crate) fn parse_owned(
        bytes: Vec<u8>,
    ) -> std::result::Result<Payload, (Malformed, Vec<u8>)> {
        let raw = match String::from_utf8(bytes) {
            Ok(raw) => raw,
            Err(e) => {
                let m = Malformed(format!("payload is not valid UTF-8: {}", e.utf8_error()));
                return Err((m, e.into_bytes()));
            }
        };
        Payload::parse_string(raw).map_err(|(m, raw)| (m, raw.into_bytes()))
    }

    fn parse_string(raw: String) -> std::result::Result<Payload, (Malformed, String)> {
        match Payload::checked_fields(&raw) {
            Ok(fields) => Ok(Payload {
                raw: Some(raw),
                fields,
            }),
            Err(m) => Err((m, raw)),
        }
    }

    /// The fields of `raw`, checked as [`Payload::parse`] says.
    fn checked_fields(raw: &str) -> std::result::Result<Vec<(String, Box<RawValue>)>, Malformed> {
        if nesting_depth(raw.as_bytes()) > MAX_DEPTH {
            return Err(Malformed(format!(
                "payload nests deeper than {MAX_DEPTH} levels"
            )));
        }
        let fields: OrderedFields = serde_json::from_str(raw)
            .map_err(|e| Malformed(format!("payload is not a JSON object: {e}")))?;
        let p = Payload {
            raw: None,
            fields: fields.0,
        };
        match p.field("class").map(|v| v.get()) {
            None => return Err(Malformed("payload has no `class`".into())),
            Some(v) if !v.starts_with('"') => {
                return Err(Malformed("payload `class` is not a string".into()));
            }
            _ => {}
        }
        match p.field("args").map(|v| v.get()) {
            None => return Err(Malformed("payload has no `args`".into())),
            Some(v) if !v.starts_with('[') => {
                return Err(Malformed("payload `args` is not an array".into()));
            }
            _ => {}
        }
        match p.field("jid").map(|v| v.get()) {
            None => return Err(Malformed("payload has no `jid`".into())),
            Some(v) if !v.starts_with('"') => {
                return Err(Malformed("payload `jid` is not a string".into()));
            }
            _ => {}
        }
        // `""` is the only JSON text of an empty string.
        if p.field("class").is_some_and(|v| v.get() == r#""""#) {
            return Err(Malformed("payload `class` is empty".into()));
        }
        Ok(p.fields)
    }

    /// The raw JSON text of a field, exactly as it arrived.
    pub fn field(&self, key: &str) -> Option<&RawValue> {
        self.fields
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_ref())
    }

    /// A field decoded as `T`, or `None` when absent or of another type.
    pub fn get<T: for<'de> Deserialize<'de>>(&self, key: &str) -> Option<T> {
        self.field(key)
            .and_then(|v| serde_json::from_str(v.get()).ok())
    }

    /// A string field.
    pub fn get_str(&self, key: &str) -> Option<String> {
        self.get::<String>(key)
    }

    /// When its current wait began: its last requeue by a yield
    /// (`fairjob_requeued_at`), else `enqueued_at`, else `created_at`.
    pub fn wait_started(&self) -> Option<f64> {
        self.timestamp(super::fields::REQUEUED_AT)
            .or_else(|| self.timestamp("enqueued_at"))
            .or_else(|| self.timestamp("created_at"))
    }

    /// Sets a field.
    pub fn set(&mut self, key: &str, value: impl Serialize) {
        let raw = serde_json::value::to_raw_value(&value)
            .unwrap_or_else(|_| RawValue::from_string("null".into()).expect("null is JSON"));
        self.set_raw(key, raw);
    }

    /// Sets a field to already-encoded JSON.
    pub fn set_raw(&mut self, key: &str, raw: Box<RawValue>) {
        self.raw = None;
        if let Some(slot) = self.fields.iter_mut().find(|(k, _)| k == key) {
            slot.1 = raw;
        } else {
            self.fields.push((key.to_owned(), raw));
        }
    }

    /// Removes a field.
    pub fn remove(&mut self, key: &str) {
        let before = self.fields.len();
        self.fields.retain(|(k, _)| k != key);
        if self.fields.len() != before {
            self.raw = None;
        }
    }

    /// True when the field exists.
    pub fn has(&self, key: &str) -> bool {
        self.field(key).is_some()
    }

    /// The job's class: the ActiveJob class (`wrapped`) when `class` is one of
    /// ActiveJob's Sidekiq wrappers, as Sidekiq's Web UI and the
    /// `sidekiq-fair_tenant` gem name it, else `class` (`""` if missing;
    /// [`Payload::parse`] rejects that).
    pub fn class(&self) -> String {
        let class = self.wire_class();
        if active_job::is_wrapper(&class)
            && let Some(wrapped) = self.get_str(active_job::WRAPPED).filter(|w| !w.is_empty())
        {
            return wrapped;
        }
        class
    }

    /// The `class` field as written (an ActiveJob wrapper for ActiveJob jobs).
    pub fn wire_class(&self) -> String {
        self.get_str("class").unwrap_or_default()
    }

    /// True when the payload is ActiveJob's: its `class` is a wrapper.
    pub fn is_active_job(&self) -> bool {
        active_job::is_wrapper(&self.wire_class())
    }

    /// The jid.
    pub fn jid(&self) -> String {
        self.get_str("jid").unwrap_or_default()
    }

    /// The queue, `default` when absent.
    pub fn queue(&self) -> String {
        self.get_str("queue")
            .unwrap_or_else(|| "default".to_owned())
    }

    /// The `args` array.
    pub fn args(&self) -> &RawValue {
        self.field("args").expect("a parsed payload has args")
    }

    /// The tenant, if one is set and non-empty.
    pub fn tenant(&self) -> Option<String> {
        let v = self.field(fields::FAIR_TENANT)?;
        // Ruby may write a tenant as a number or a symbol-turned-string.
        let s = match serde_json::from_str::<serde_json::Value>(v.get()).ok()? {
            serde_json::Value::String(s) => s,
            // Integers (also `42.0`) name the tenant `42`, as the shard scripts do.
            serde_json::Value::Number(n) => match n.as_f64() {
                Some(f) if f.fract() == 0.0 && n.as_i64().is_none() && n.as_u64().is_none() => {
                    format!("{f:.0}")
                }
                _ => n.to_string(),
            },
            _ => return None,
        };
        (!s.is_empty()).then_some(s)
    }

    /// `retry_count`, if the job failed before.
    pub fn retry_count(&self) -> Option<u32> {
        self.get("retry_count")
    }

    /// The maximum number of retries Sidekiq allows this job (`retry` option).
    pub fn max_retries(&self) -> u32 {
        match self.get::<serde_json::Value>("retry") {
            Some(serde_json::Value::Bool(false)) => 0,
            Some(serde_json::Value::Number(n)) => {
                n.as_u64().unwrap_or(0).min(u32::MAX as u64) as u32
            }
            _ => Retry::DEFAULT_MAX,
        }
    }

    /// True when the job has `"retry": false` (a failure is final and not kept in `dead`).
    pub fn retry_disabled(&self) -> bool {
        matches!(
            self.get::<serde_json::Value>("retry"),
            Some(serde_json::Value::Bool(false))
        )
    }

    /// A timestamp field as epoch seconds, accepting Sidekiq 6/7 float seconds
    /// and Sidekiq 8 integer milliseconds.
    pub fn timestamp(&self, key: &str) -> Option<f64> {
        let v = self.field(key)?.get();
        if v.contains(['.', 'e', 'E']) {
            v.parse::<f64>().ok()
        } else {
            v.parse::<i64>().ok().map(|ms| ms as f64 / 1000.0)
        }
    }

    /// The bytes Redis holds for this payload (the original ones if unedited).
    pub fn to_json(&self) -> String {
        if let Some(raw) = &self.raw {
            return raw.clone();
        }
        let (prefix, value, suffix) = self.split_at("\u{0}");
        debug_assert!(value.is_empty());
        let mut s = prefix;
        s.push_str(&suffix);
        s
    }

    /// Renders the payload split around one field's value: `(before, value, after)`,
    /// so a script can splice in another value (the rerouted queue) without
    /// re-encoding JSON. A missing field is not rendered (`value` is empty).
    pub(crate) fn split_at(&self, key: &str) -> (String, String, String) {
        let size = self
            .fields
            .iter()
            .map(|(k, v)| k.len() + v.get().len() + 4)
            .sum::<usize>()
            + 2;
        let mut before = String::with_capacity(size);
        let mut after = String::new();
        let mut value = String::new();
        before.push('{');
        let mut out = &mut before;
        let mut first = true;
        for (k, v) in &self.fields {
            if !first {
                out.push(',');
            }
            first = false;
            push_json_string(out, k);
            out.push(':');
            if k == key {
                value.push_str(v.get());
                out = &mut after;
            } else {
                out.push_str(v.get());
            }
        }
        out.push('}');
        (before, value, after)
    }
}

/// The deepest nesting a payload may have (serde_json's own recursion limit).
pub const MAX_DEPTH: usize = 128;

/// Maximum depth of `[`/`{` nesting outside strings.
fn nesting_depth(bytes: &[u8]) -> usize {
    let (mut depth, mut max, mut in_str, mut escaped) = (0usize, 0usize, false, false);
    for &b in bytes {
        if in_str {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_str = true,
            b'[' | b'{' => {
                depth += 1;
                max = max.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

fn push_json_string(out: &mut String, s: &str) {
    out.push_str(&serde_json::to_string(s).expect("strings encode"));
}

/// A top-level JSON object read as ordered `(key, raw value)` pairs; a repeated key
/// keeps its last value, as Ruby's `JSON.parse` does.
struct OrderedFields(Vec<(String, Box<RawValue>)>);

impl<'de> Deserialize<'de> for OrderedFields {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = OrderedFields;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Self::Value, A::Error> {
                let mut fields: Vec<(String, Box<RawValue>)> = Vec::with_capacity(12);
                while let Some((k, v)) = map.next_entry::<String, Box<RawValue>>()? {
                    if let Some(slot) = fields.iter_mut().find(|(key, _)| *key == k) {
                        slot.1 = v;
                    } else {
                        fields.push((k, v));
                    }
                }
                Ok(OrderedFields(fields))
            }
        }
        d.deserialize_map(V).map_err(de::Error::custom)
    }
}

/// A new jid: 24 lowercase hex characters, as Sidekiq's `SecureRandom.hex(12)`.
pub fn new_jid() -> String {
    let bytes: [u8; 12] = rand::rng().random();
    let mut s = String::with_capacity(24);
    for b in bytes {
        s.push(char::from_digit((b >> 4) as u32, 16).expect("hex"));
        s.push(char::from_digit((b & 0xf) as u32, 16).expect("hex"));
    }
    s
}

/// Now as float epoch seconds (Sidekiq 6/7's `created_at`/`enqueued_at` format).
pub fn now_f64() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Wraps bytes that are not a usable job into a Sidekiq-shaped dead entry that
/// Sidekiq's tools can list: the error fields say why, and `raw_payload` (or
/// `raw_payload_base64` for bytes that are not UTF-8) carries the original bytes.
pub fn malformed_entry(raw: &[u8], queue: &str, reason: &str) -> String {
    let mut p = Payload::new(
        "fairjob::MalformedPayload",
        RawValue::from_string("[]".into()).expect("[] is JSON"),
        queue,
    );
    p.set("error_class", "MalformedPayload");
    p.set("error_message", reason);
    p.set("failed_at", now_f64());
    p.set("retry_count", 0);
    p.set("retry", false);
    match std::str::from_utf8(raw) {
        Ok(s) => p.set("raw_payload", s),
        Err(_) => p.set(
            "raw_payload_base64",
            base64::engine::general_purpose::STANDARD.encode(raw),
        ),
    }
    p.to_json()
}

impl From<Malformed> for Error {
    fn from(m: Malformed) -> Self {
        Error::Malformed(m.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUBY: &str = r#"{"retry":3,"queue":"critical","backtrace":2,"tags":["alpha"],"args":[1,"two",[],12345678901234567890123],"class":"HardJob","jid":"2c7101b44ec815e2c18ca3b1","created_at":1795310393.4854891,"mw_seen":"HardJob","enqueued_at":1795310393.4857502}"#;

    #[test]
    fn unedited_payload_keeps_its_bytes() {
        let p = Payload::parse(RUBY.as_bytes().to_vec()).unwrap();
        assert_eq!(p.to_json(), RUBY);
        assert_eq!(p.class(), "HardJob");
        assert_eq!(p.jid(), "2c7101b44ec815e2c18ca3b1");
        assert_eq!(p.queue(), "critical");
        assert_eq!(p.max_retries(), 3);
    }

    #[test]
    fn edits_keep_unknown_fields_empty_arrays_and_big_numbers() {
        let mut p = Payload::parse(RUBY.as_bytes().to_vec()).unwrap();
        p.set("retry_count", 0);
        let out = p.to_json();
        assert!(out.contains(r#""mw_seen":"HardJob""#));
        assert!(out.contains(r#""args":[1,"two",[],12345678901234567890123]"#));
        assert!(out.contains(r#""created_at":1795310393.4854891"#));
        assert!(out.ends_with(r#""retry_count":0}"#));
        let again = Payload::parse(out.into_bytes()).unwrap();
        assert_eq!(again.retry_count(), Some(0));
    }

    #[test]
    fn split_at_splices_a_field_value() {
        let p = Payload::parse(RUBY.as_bytes().to_vec()).unwrap();
        let (a, v, b) = p.split_at("queue");
        assert_eq!(v, r#""critical""#);
        assert_eq!(format!("{a}{v}{b}"), RUBY);
        let spliced = format!("{a}\"slow\"{b}");
        assert_eq!(
            Payload::parse(spliced.into_bytes()).unwrap().queue(),
            "slow"
        );
    }

    #[test]
    fn numeric_tenants_name_like_the_shard_scripts() {
        let t = |v: &str| {
            Payload::parse(
                format!(r#"{{"class":"A","args":[],"jid":"j","fair_tenant":{v}}}"#).into_bytes(),
            )
            .unwrap()
            .tenant()
        };
        assert_eq!(t("42").as_deref(), Some("42"));
        assert_eq!(t("42.0").as_deref(), Some("42"));
        assert_eq!(t("\"acme\"").as_deref(), Some("acme"));
        assert_eq!(t("\"\""), None);
    }

    #[test]
    fn timestamps_accept_float_seconds_and_integer_millis() {
        let p = Payload::parse(
            br#"{"class":"A","args":[],"jid":"x","created_at":1795310393.5,"enqueued_at":1795310393500}"#.to_vec(),
        )
        .unwrap();
        assert_eq!(p.timestamp("created_at"), Some(1795310393.5));
        assert_eq!(p.timestamp("enqueued_at"), Some(1795310393.5));
    }

    #[test]
    fn malformed_inputs_say_why() {
        let cases: [(&[u8], &str); 6] = [
            (b"not json", "not a JSON object"),
            (b"\xff\xfe", "not valid UTF-8"),
            (b"[1,2]", "not a JSON object"),
            (br#"{"args":[],"jid":"x"}"#, "no `class`"),
            (
                br#"{"class":"A","args":{},"jid":"x"}"#,
                "`args` is not an array",
            ),
            (br#"{"class":"A","args":[]}"#, "no `jid`"),
        ];
        for (bytes, want) in cases {
            let err = Payload::parse(bytes.to_vec()).unwrap_err();
            assert!(
                err.0.contains(want),
                "{:?}: {}",
                String::from_utf8_lossy(bytes),
                err.0
            );
        }
        let deep = format!(
            "{{\"class\":\"A\",\"jid\":\"x\",\"args\":{}{}}}",
            "[".repeat(10_000),
            "]".repeat(10_000)
        );
        assert!(Payload::parse(deep.into_bytes()).is_err());
    }

    #[test]
    fn malformed_entry_keeps_the_bytes() {
        let entry = malformed_entry(b"oops", "default", "payload is not a JSON object");
        let p = Payload::parse(entry.into_bytes()).unwrap();
        assert_eq!(p.get_str("raw_payload").as_deref(), Some("oops"));
        assert_eq!(
            p.get_str("error_class").as_deref(),
            Some("MalformedPayload")
        );
        let entry = malformed_entry(b"\xff", "default", "bad");
        let p = Payload::parse(entry.into_bytes()).unwrap();
        assert_eq!(p.get_str("raw_payload_base64").as_deref(), Some("/w=="));
    }

    #[test]
    fn active_job_payloads_are_named_by_their_wrapped_class() {
        for wrapper in [active_job::WRAPPER, active_job::WRAPPER_SIDEKIQ_8] {
            let p = Payload::parse(
                format!(r#"{{"class":"{wrapper}","wrapped":"ReportJob","args":[{{}}],"jid":"j"}}"#)
                    .into_bytes(),
            )
            .unwrap();
            assert_eq!(p.class(), "ReportJob");
            assert_eq!(p.wire_class(), wrapper);
            assert!(p.is_active_job());
        }
        let p = Payload::parse(RUBY.as_bytes().to_vec()).unwrap();
        assert!(!p.is_active_job());
        assert_eq!(p.class(), p.wire_class());
    }

    #[test]
    fn jids_look_like_sidekiqs() {
        let j = new_jid();
        assert_eq!(j.len(), 24);
        assert!(
            j.chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
        assert_ne!(j, new_jid());
    }
}
