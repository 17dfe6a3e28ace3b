//! Rails' ActiveJob on Sidekiq, with no IO: which payloads are ActiveJob's
//! (their `class` is a wrapper and `wrapped` names the job class), what its
//! serialized job in `args[0]` says about itself ([`JobData`]), and its
//! argument serialization turned into plain JSON and back.
//!
//! Decoding maps ActiveJob's markers to the obvious serde shapes:
//!
//! | ActiveJob writes | fairjob hands serde |
//! |---|---|
//! | a Hash with `_aj_symbol_keys`, `_aj_ruby2_keywords` (keyword arguments) or `_aj_hash_with_indifferent_access` | a JSON object, the marker removed |
//! | `{"_aj_globalid": "gid://app/User/1"}` | the string `"gid://app/User/1"` |
//! | Symbol, Module | its name as a string |
//! | Time, DateTime, ActiveSupport::TimeWithZone | the ISO 8601 string (`time_zone` dropped) |
//! | Date | `"YYYY-MM-DD"` |
//! | ActiveSupport::Duration | its number of seconds |
//! | BigDecimal | its decimal string (precision kept) |
//! | Range | `{"begin", "end", "exclude_end"}` |
//!
//! Encoding (a Rust job pushed for a Rails worker) writes JSON values as they
//! are, an object as a Hash with symbol keys (`_aj_symbol_keys`), and the
//! object of a job with named fields as keyword arguments
//! (`_aj_ruby2_keywords`), which Ruby passes to `perform(a:, b:)` as keywords
//! or to `perform(opts)` as one Hash.

use rand::Rng;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The wrapper class of ActiveJob's Sidekiq adapter up to Sidekiq 7 (and
/// Rails' own adapter); Sidekiq 8 keeps it as an alias, so fairjob writes it.
pub const WRAPPER: &str = "ActiveJob::QueueAdapters::SidekiqAdapter::JobWrapper";
/// The wrapper class Sidekiq 8's own adapter writes.
pub const WRAPPER_SIDEKIQ_8: &str = "Sidekiq::ActiveJob::Wrapper";
/// The payload field naming the ActiveJob class.
pub const WRAPPED: &str = "wrapped";

const SYMBOL_KEYS: &str = "_aj_symbol_keys";
const RUBY2_KEYWORDS: &str = "_aj_ruby2_keywords";
const INDIFFERENT: &str = "_aj_hash_with_indifferent_access";
const GLOBALID: &str = "_aj_globalid";
const SERIALIZED: &str = "_aj_serialized";
/// Keys ActiveJob reserves in a Hash (a Hash using one is rejected by Rails).
const RESERVED: [&str; 5] = [
    SYMBOL_KEYS,
    RUBY2_KEYWORDS,
    INDIFFERENT,
    GLOBALID,
    SERIALIZED,
];

/// True when `class` is one of ActiveJob's Sidekiq wrappers.
pub fn is_wrapper(class: &str) -> bool {
    class == WRAPPER || class == WRAPPER_SIDEKIQ_8
}

/// What ActiveJob's serialized job (`args[0]`) says about itself; fields a
/// Rails version does not write are `None`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobData {
    /// The ActiveJob class.
    #[serde(default)]
    pub job_class: Option<String>,
    /// ActiveJob's id (a UUID), kept across ActiveJob's own retries.
    #[serde(default)]
    pub job_id: Option<String>,
    /// ActiveJob's queue name.
    #[serde(default)]
    pub queue_name: Option<String>,
    /// ActiveJob's priority.
    #[serde(default)]
    pub priority: Option<i64>,
    /// Runs before this enqueue (ActiveJob's `retry_on` re-enqueues with it raised).
    #[serde(default)]
    pub executions: Option<u32>,
    /// `I18n.locale` at enqueue.
    #[serde(default)]
    pub locale: Option<String>,
    /// `Time.zone` at enqueue.
    #[serde(default)]
    pub timezone: Option<String>,
    /// When ActiveJob enqueued it, ISO 8601.
    #[serde(default)]
    pub enqueued_at: Option<String>,
    /// When it was scheduled for (Rails 7.1+), ISO 8601.
    #[serde(default)]
    pub scheduled_at: Option<String>,
}

pub use crate::error::ActiveJobArgumentError as ArgumentError;

fn argument(path: &str, problem: impl Into<String>) -> ArgumentError {
    ArgumentError::Argument {
        path: path.to_owned(),
        problem: problem.into(),
    }
}

/// Splits a wrapper payload's `args` into the job's metadata and its
/// arguments decoded to plain JSON (an array, one element per argument).
pub fn decode(args: &str) -> Result<(JobData, Value), ArgumentError> {
    let args: Value = serde_json::from_str(args)
        .map_err(|e| ArgumentError::NotSerialized(format!("not JSON: {e}")))?;
    let Value::Array(mut items) = args else {
        return Err(ArgumentError::NotSerialized("not an array".into()));
    };
    if items.len() != 1 {
        return Err(ArgumentError::NotSerialized(format!(
            "expected one element, got {}",
            items.len()
        )));
    }
    let Value::Object(mut job) = items.remove(0) else {
        return Err(ArgumentError::NotSerialized(
            "its element is not an object".into(),
        ));
    };
    let arguments = match job.remove("arguments") {
        Some(Value::Array(a)) => a,
        Some(_) => {
            return Err(ArgumentError::NotSerialized(
                "`arguments` is not an array".into(),
            ));
        }
        None => return Err(ArgumentError::NotSerialized("it has no `arguments`".into())),
    };
    let data: JobData = serde_json::from_value(Value::Object(job))
        .map_err(|e| ArgumentError::NotSerialized(e.to_string()))?;
    let mut out = Vec::with_capacity(arguments.len());
    for (i, a) in arguments.into_iter().enumerate() {
        out.push(decode_value(a, &format!("[{i}]"))?);
    }
    Ok((data, Value::Array(out)))
}

/// The metadata of a wrapper payload's serialized job alone (for `cx`).
pub fn job_data(args: &str) -> Option<JobData> {
    let items: Vec<JobData> = serde_json::from_str(args).ok()?;
    items.into_iter().next()
}

/// One serialized argument as plain JSON.
fn decode_value(v: Value, path: &str) -> Result<Value, ArgumentError> {
    match v {
        Value::Array(items) => items
            .into_iter()
            .enumerate()
            .map(|(i, v)| decode_value(v, &format!("{path}[{i}]")))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
        Value::Object(map) => decode_hash(map, path),
        other => Ok(other),
    }
}

fn decode_hash(mut map: Map<String, Value>, path: &str) -> Result<Value, ArgumentError> {
    if map.len() == 1 && map.contains_key(GLOBALID) {
        return match map.remove(GLOBALID) {
            Some(Value::String(gid)) => Ok(Value::String(gid)),
            _ => Err(argument(path, "`_aj_globalid` is not a string")),
        };
    }
    if let Some(serializer) = map.remove(SERIALIZED) {
        let Value::String(serializer) = serializer else {
            return Err(argument(path, "`_aj_serialized` is not a string"));
        };
        return decode_serialized(&serializer, map, path);
    }
    map.remove(INDIFFERENT);
    map.remove(SYMBOL_KEYS);
    map.remove(RUBY2_KEYWORDS);
    let mut out = Map::with_capacity(map.len());
    for (k, v) in map {
        let inner = format!("{path}.{k}");
        out.insert(k, decode_value(v, &inner)?);
    }
    Ok(Value::Object(out))
}

/// An object one of ActiveJob's serializers wrote.
fn decode_serialized(
    serializer: &str,
    mut map: Map<String, Value>,
    path: &str,
) -> Result<Value, ArgumentError> {
    let name = serializer
        .strip_prefix("ActiveJob::Serializers::")
        .unwrap_or(serializer);
    let value = |map: &mut Map<String, Value>| {
        map.remove("value")
            .ok_or_else(|| argument(path, format!("{serializer} without a `value`")))
    };
    match name {
        "SymbolSerializer"
        | "ModuleSerializer"
        | "TimeSerializer"
        | "DateTimeSerializer"
        | "TimeWithZoneSerializer"
        | "DateSerializer"
        | "BigDecimalSerializer" => match value(&mut map)? {
            Value::String(s) => Ok(Value::String(s)),
            // BigDecimal may arrive as a number from hand-written payloads.
            Value::Number(n) if name == "BigDecimalSerializer" => Ok(Value::String(n.to_string())),
            other => Err(argument(
                path,
                format!("{serializer} with a non-string value {other}"),
            )),
        },
        "DurationSerializer" => match value(&mut map)? {
            Value::Number(n) => Ok(Value::Number(n)),
            other => Err(argument(
                path,
                format!("{serializer} with a non-numeric value {other}"),
            )),
        },
        "RangeSerializer" => {
            let begin = decode_value(map.remove("begin").unwrap_or(Value::Null), path)?;
            let end = decode_value(map.remove("end").unwrap_or(Value::Null), path)?;
            let exclude_end = map.remove("exclude_end").unwrap_or(Value::Bool(false));
            Ok(serde_json::json!({"begin": begin, "end": end, "exclude_end": exclude_end}))
        }
        _ => Err(argument(
            path,
            format!(
                "an object of a custom ActiveJob serializer `{serializer}` fairjob cannot read"
            ),
        )),
    }
}

/// Plain JSON arguments (an array) in ActiveJob's serialized form. With
/// `keywords`, a last argument that is an object is written as keyword
/// arguments.
pub fn encode_arguments(args: Value, keywords: bool) -> Result<Value, ArgumentError> {
    let Value::Array(items) = args else {
        return Err(ArgumentError::NotSerialized("not an array".into()));
    };
    let last = items.len().saturating_sub(1);
    items
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            let path = format!("[{i}]");
            match v {
                Value::Object(map) if keywords && i == last => {
                    encode_hash(map, RUBY2_KEYWORDS, &path)
                }
                v => encode_value(v, &path),
            }
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Value::Array)
}

fn encode_value(v: Value, path: &str) -> Result<Value, ArgumentError> {
    match v {
        Value::Array(items) => items
            .into_iter()
            .enumerate()
            .map(|(i, v)| encode_value(v, &format!("{path}[{i}]")))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
        Value::Object(map) => encode_hash(map, SYMBOL_KEYS, path),
        other => Ok(other),
    }
}

fn encode_hash(map: Map<String, Value>, marker: &str, path: &str) -> Result<Value, ArgumentError> {
    let mut out = Map::with_capacity(map.len() + 1);
    let mut keys = Vec::with_capacity(map.len());
    for (k, v) in map {
        if RESERVED.contains(&k.as_str()) {
            return Err(argument(
                path,
                format!("the key `{k}` is reserved by ActiveJob"),
            ));
        }
        let inner = format!("{path}.{k}");
        out.insert(k.clone(), encode_value(v, &inner)?);
        keys.push(Value::String(k));
    }
    out.insert(marker.to_owned(), Value::Array(keys));
    Ok(Value::Object(out))
}

/// ActiveJob's serialized job (`args[0]`) for a job fairjob pushes, in the
/// form Rails 6.1 writes (newer Rails reads it too).
pub fn serialize_job(class: &str, queue: &str, arguments: Value, enqueued_at: &str) -> Value {
    serde_json::json!({
        "job_class": class,
        "job_id": new_job_id(),
        "provider_job_id": null,
        "queue_name": queue,
        "priority": null,
        "arguments": arguments,
        "executions": 0,
        "exception_executions": {},
        "locale": "en",
        "timezone": "UTC",
        "enqueued_at": enqueued_at,
    })
}

/// A random (version 4) UUID, as ActiveJob's `job_id`.
pub fn new_job_id() -> String {
    let mut b: [u8; 16] = rand::rng().random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// What Rails 6.1's `perform_later` wrote for
    /// `ReportJob.perform_later(7, :pdf, {"a" => 1}, at: Time, on: Date, every: 2.hours, by: user)`.
    const RAILS: &str = r#"[{"job_class":"ReportJob","job_id":"0f9c4a57-3f55-4a8e-9d0e-7d1c1f5c2b1a","provider_job_id":null,"queue_name":"reports","priority":null,"arguments":[7,{"_aj_serialized":"ActiveJob::Serializers::SymbolSerializer","value":"pdf"},{"a":1,"_aj_symbol_keys":[]},{"at":{"_aj_serialized":"ActiveJob::Serializers::TimeWithZoneSerializer","value":"2026-11-25T12:00:00.123456789Z"},"on":{"_aj_serialized":"ActiveJob::Serializers::DateSerializer","value":"2026-11-25"},"every":{"_aj_serialized":"ActiveJob::Serializers::DurationSerializer","value":7200,"parts":[[{"_aj_serialized":"ActiveJob::Serializers::SymbolSerializer","value":"hours"},2]]},"by":{"_aj_globalid":"gid://app/User/1"},"_aj_ruby2_keywords":["at","on","every","by"]}],"executions":0,"exception_executions":{},"locale":"de","timezone":"UTC","enqueued_at":"2026-11-25T12:00:00Z"}]"#;

    #[test]
    fn wrappers_of_sidekiq_7_and_8_are_recognised() {
        assert!(is_wrapper(WRAPPER));
        assert!(is_wrapper(WRAPPER_SIDEKIQ_8));
        assert!(!is_wrapper("ReportJob"));
    }

    #[test]
    fn rails_arguments_decode_to_plain_json() {
        let (data, args) = decode(RAILS).unwrap();
        assert_eq!(data.job_class.as_deref(), Some("ReportJob"));
        assert_eq!(data.locale.as_deref(), Some("de"));
        assert_eq!(data.executions, Some(0));
        assert_eq!(data.queue_name.as_deref(), Some("reports"));
        assert_eq!(
            args,
            json!([7, "pdf", {"a": 1}, {
                "at": "2026-11-25T12:00:00.123456789Z",
                "on": "2026-11-25",
                "every": 7200,
                "by": "gid://app/User/1",
            }])
        );
    }

    #[test]
    fn indifferent_hashes_ranges_and_big_decimals() {
        let args = r#"[{"arguments":[{"x":{"_aj_serialized":"ActiveJob::Serializers::BigDecimalSerializer","value":"12.3400"},"_aj_hash_with_indifferent_access":true},{"_aj_serialized":"ActiveJob::Serializers::RangeSerializer","begin":1,"end":5,"exclude_end":true},[{"_aj_serialized":"ActiveJob::Serializers::ModuleSerializer","value":"Foo::Bar"}]]}]"#;
        let (data, args) = decode(args).unwrap();
        assert_eq!(data, JobData::default());
        assert_eq!(
            args,
            json!([{"x": "12.3400"}, {"begin": 1, "end": 5, "exclude_end": true}, ["Foo::Bar"]])
        );
    }

    #[test]
    fn what_does_not_decode_names_the_argument() {
        let err = decode(
            r#"[{"arguments":[1,{"k":[0,{"_aj_serialized":"MoneySerializer","value":1}]}]}]"#,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "argument [1].k[1]: an object of a custom ActiveJob serializer `MoneySerializer` fairjob cannot read"
        );
        let err = decode(r#"[{"arguments":[{"_aj_serialized":"ActiveJob::Serializers::DurationSerializer","value":"x"}]}]"#).unwrap_err();
        assert!(err.to_string().starts_with("argument [0]: "), "{err}");
        for (bad, want) in [
            ("[1,2]", "expected one element"),
            ("[{}]", "no `arguments`"),
            ("{}", "not an array"),
            (r#"[{"arguments":{}}]"#, "`arguments` is not an array"),
        ] {
            let err = decode(bad).unwrap_err().to_string();
            assert!(err.contains(want), "{bad}: {err}");
        }
    }

    #[test]
    fn encoding_round_trips_and_marks_keywords() {
        let plain = json!([1, {"a": {"b": [true]}, "c": "x"}]);
        let encoded = encode_arguments(plain.clone(), true).unwrap();
        assert_eq!(
            encoded,
            json!([1, {"a": {"b": [true], "_aj_symbol_keys": ["b"]}, "c": "x", "_aj_ruby2_keywords": ["a", "c"]}])
        );
        let job = serialize_job("ReportJob", "default", encoded, "2026-11-25T12:00:00Z");
        let (data, back) = decode(&json!([job]).to_string()).unwrap();
        assert_eq!(back, plain);
        assert_eq!(data.job_class.as_deref(), Some("ReportJob"));
        assert_eq!(data.job_id.as_deref().map(str::len), Some(36));
        let positional = encode_arguments(json!([{"a": 1}]), false).unwrap();
        assert_eq!(positional, json!([{"a": 1, "_aj_symbol_keys": ["a"]}]));
    }

    #[test]
    fn reserved_keys_are_refused_on_encode() {
        let err = encode_arguments(json!([{"_aj_globalid": "x"}]), false).unwrap_err();
        assert_eq!(
            err.to_string(),
            "argument [0]: the key `_aj_globalid` is reserved by ActiveJob"
        );
    }

    #[test]
    fn job_ids_are_v4_uuids() {
        let id = new_job_id();
        assert_eq!(id.len(), 36);
        assert_eq!(&id[14..15], "4");
        assert!("89ab".contains(&id[19..20]));
        assert_ne!(id, new_job_id());
    }
}
