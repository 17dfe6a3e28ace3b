//! Per-type job options as the derive writes them ([`JobOptions`], [`Retry`],
//! [`ThrottleRule`], [`ConcurrencyLimit`], [`RateLimit`]), how a type's serde form maps to
//! Sidekiq's positional `args` ([`ArgsShape`]), and a reroute rule as it travels
//! in the payload ([`WireRule`]).

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::error::DecodeError;

/// Per-type options set by `#[job(...)]`, `#[throttle(...)]` and `#[concurrency(...)]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobOptions {
    /// The queue jobs go to unless rerouted or chosen at enqueue. Default `default`.
    pub queue: &'static str,
    /// Sidekiq's `retry` option.
    pub retry: Retry,
    /// Reroute rules, in declaration order (the last matching rule wins).
    pub throttles: &'static [ThrottleRule],
    /// Whether the job's queue is a tenant-sharded queue.
    pub shard_by_tenant: bool,
    /// A slot limit: at most `limit` jobs of one key run at once.
    pub concurrency: Option<ConcurrencyLimit>,
    /// A rate limit: at most `limit` starts of one key per `per`.
    pub rate_limit: Option<RateLimit>,
    /// A run longer than this is cancelled (`cx.cancelled()`), then after a
    /// short grace counted as a failure and retried; `None`: the worker's
    /// default (none, as in Sidekiq).
    pub timeout: Option<Duration>,
    /// `#[job(active_job)]`: the type is a Rails ActiveJob class. It runs the
    /// payloads of ActiveJob's Sidekiq wrappers that name it (`wrapped`), and
    /// is pushed in that form, so a Rails worker can run it too.
    pub active_job: bool,
    /// `#[iterable]`: the type implements `Iterate` (a run is a series of
    /// steps over a cursor that is saved and resumed), with these options.
    pub iterable: Option<IterableOptions>,
    /// `#[unique(...)]`: at most one job per key is queued, scheduled or
    /// running (see [`super::unique`]).
    pub unique: Option<super::UniqueOptions>,
}

impl JobOptions {
    /// The defaults: queue `default`, Sidekiq's 25 retries, no rules.
    pub const DEFAULT: JobOptions = JobOptions {
        queue: "default",
        retry: Retry::Default,
        throttles: &[],
        shard_by_tenant: false,
        concurrency: None,
        rate_limit: None,
        timeout: None,
        active_job: false,
        iterable: None,
        unique: None,
    };
}

impl Default for JobOptions {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// `#[iterable(checkpoint = "5s", slice = "10m")]`: how often an iterable
/// job's cursor is saved, and how long one run may go on before the job
/// goes back to its queue's tail on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IterableOptions {
    /// The cursor is saved at most this long after the step that produced
    /// it (a crash repeats at most this much work). Default 5 s, Sidekiq's
    /// `STATE_FLUSH_INTERVAL`.
    pub checkpoint: Duration,
    /// A run yields (cursor saved, job to its queue's tail) once it has gone
    /// on this long. Default 10 minutes.
    pub slice: Duration,
}

impl IterableOptions {
    /// The defaults: checkpoint every 5 s, a 10-minute slice.
    pub const DEFAULT: IterableOptions = IterableOptions {
        checkpoint: Duration::from_secs(5),
        slice: Duration::from_secs(600),
    };
}

impl Default for IterableOptions {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Sidekiq's `retry` option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// `"retry": true`: Sidekiq's default of 25 retries.
    Default,
    /// `"retry": N`: at most N retries.
    Times(u32),
    /// `"retry": false`: a failure is final (and, as in Sidekiq, not kept in `dead`).
    Never,
}

impl Retry {
    /// Sidekiq's default number of retries.
    pub const DEFAULT_MAX: u32 = 25;

    /// The JSON value written to the payload.
    pub fn to_json(self) -> serde_json::Value {
        match self {
            Retry::Default => serde_json::Value::Bool(true),
            Retry::Times(n) => serde_json::Value::from(n),
            Retry::Never => serde_json::Value::Bool(false),
        }
    }
}

/// One `#[throttle(queue, threshold, per)]` rule: when more than `threshold` jobs
/// of one tenant were enqueued within `per`, the job goes to `queue`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThrottleRule {
    /// The slower queue.
    pub queue: &'static str,
    /// Jobs allowed in the window before this rule matches (`threshold < count`).
    pub threshold: u64,
    /// The window.
    pub per: Duration,
    /// The fetch weight of `queue` when the worker derives its queue list.
    pub weight: Option<u32>,
}

/// A `#[concurrency(limit = N, key = ...)]` slot limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConcurrencyLimit {
    /// The default number of slots per key (overridable at runtime in Redis).
    pub limit: u32,
    /// A key group shared by several job types; by default keys are per class.
    pub group: Option<&'static str>,
}

/// A `#[rate_limit(limit = N, per = "1m", burst = B, key = ..., group = ...)]`
/// rate limit: at most `limit` starts of one key per `per` (see `fairjob::rate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// The default starts per period (overridable at runtime in Redis).
    pub limit: u32,
    /// The period.
    pub per: Duration,
    /// Extra starts allowed at once (default 0: starts spread evenly).
    pub burst: u32,
    /// A limiter shared by several job types; by default keys are per class.
    pub group: Option<&'static str>,
    /// `key = tenant`: the job's tenant is the key.
    pub by_tenant: bool,
}

/// A reroute rule as it travels in the payload (`fair_tenant_queues`), like the gem's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireRule {
    /// Target queue.
    pub queue: String,
    /// Jobs allowed in the window.
    pub threshold: u64,
    /// Window in seconds (the gem may write it as a string).
    #[serde(deserialize_with = "lenient_secs", default)]
    pub per: Option<u64>,
}

fn lenient_secs<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum N {
        Int(u64),
        Float(f64),
        Str(String),
    }
    Ok(match Option::<N>::deserialize(d)? {
        Some(N::Int(n)) => Some(n),
        Some(N::Float(f)) if f >= 0.0 => Some(f as u64),
        Some(N::Str(s)) => s.trim().parse::<f64>().ok().map(|f| f as u64),
        _ => None,
    })
}

/// A rule's window in seconds: its own `per`, else `max_window_secs` (the
/// gem writes rules without one, counted over the longest window).
pub fn rule_window(rule: &WireRule, max_window_secs: u64) -> u64 {
    rule.per.unwrap_or(max_window_secs)
}

/// The window a tenant's enqueues are kept for: the longest `per` among
/// `rules`, at least `configured_secs` (the gem's one day unless configured),
/// and at least one second.
pub fn reroute_window(rules: &[WireRule], configured_secs: u64) -> u64 {
    rules
        .iter()
        .filter_map(|r| r.per)
        .max()
        .unwrap_or(0)
        .max(configured_secs)
        .max(1)
}

impl From<&ThrottleRule> for WireRule {
    fn from(r: &ThrottleRule) -> Self {
        WireRule {
            queue: r.queue.to_owned(),
            threshold: r.threshold,
            per: Some(r.per.as_secs()),
        }
    }
}

/// How a job type's serde form maps to Sidekiq's positional `args`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgsShape {
    /// A unit struct: `args: []`.
    Unit,
    /// A newtype `Job(v)`: `args: [v]`.
    Newtype,
    /// A tuple struct `Job(a, b, ...)` of this many fields: `args: [a, b, ...]`.
    Tuple(usize),
    /// A struct with named fields: `args: [{...}]`.
    Named,
}

impl ArgsShape {
    /// The arity of `args` this shape expects.
    pub fn arity(self) -> usize {
        match self {
            ArgsShape::Unit => 0,
            ArgsShape::Newtype | ArgsShape::Named => 1,
            ArgsShape::Tuple(n) => n,
        }
    }

    /// Encodes `value` as Sidekiq's `args` array.
    pub fn encode<T: Serialize>(self, value: &T) -> Result<Box<RawValue>, serde_json::Error> {
        let json = match self {
            ArgsShape::Unit => "[]".to_owned(),
            ArgsShape::Tuple(_) => serde_json::to_string(value)?,
            ArgsShape::Newtype | ArgsShape::Named => {
                let mut s = String::from("[");
                s.push_str(&serde_json::to_string(value)?);
                s.push(']');
                s
            }
        };
        RawValue::from_string(json)
    }

    /// Decodes Sidekiq's `args` array, checking its arity first.
    pub fn decode<T: DeserializeOwned>(self, args: &RawValue) -> Result<T, DecodeError> {
        let items: Vec<&RawValue> =
            serde_json::from_str(args.get()).map_err(DecodeError::NotAnArray)?;
        let expected = self.arity();
        if items.len() != expected {
            return Err(DecodeError::Arity {
                expected,
                got: items.len(),
            });
        }
        let parsed = match self {
            ArgsShape::Unit => serde_json::from_str("null"),
            ArgsShape::Tuple(_) => serde_json::from_str(args.get()),
            ArgsShape::Newtype | ArgsShape::Named => serde_json::from_str(items[0].get()),
        };
        parsed.map_err(DecodeError::Json)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_encode_like_sidekiq() {
        #[derive(Serialize)]
        struct Two(u32, String);
        #[derive(Serialize)]
        struct One(String);
        #[derive(Serialize)]
        struct Unit;
        #[derive(Serialize)]
        struct Named {
            id: u32,
        }
        assert_eq!(
            ArgsShape::Tuple(2)
                .encode(&Two(1, "a".into()))
                .unwrap()
                .get(),
            r#"[1,"a"]"#
        );
        assert_eq!(
            ArgsShape::Newtype.encode(&One("x".into())).unwrap().get(),
            r#"["x"]"#
        );
        assert_eq!(ArgsShape::Unit.encode(&Unit).unwrap().get(), "[]");
        assert_eq!(
            ArgsShape::Named.encode(&Named { id: 7 }).unwrap().get(),
            r#"[{"id":7}]"#
        );
    }

    #[test]
    fn decode_checks_arity_and_says_what_it_expected() {
        #[derive(serde::Deserialize, Debug, PartialEq)]
        struct Two(u32, String);
        let ok: Two = ArgsShape::Tuple(2)
            .decode(&RawValue::from_string(r#"[1,"a"]"#.into()).unwrap())
            .unwrap();
        assert_eq!(ok, Two(1, "a".into()));
        let err = ArgsShape::Tuple(2)
            .decode::<Two>(&RawValue::from_string(r#"[1]"#.into()).unwrap())
            .unwrap_err();
        assert_eq!(err.to_string(), "expected 2 arguments in `args`, got 1");
        let err = ArgsShape::Newtype
            .decode::<String>(&RawValue::from_string(r#"{"a":1}"#.into()).unwrap())
            .unwrap_err();
        assert!(err.to_string().contains("not a JSON array"), "{err}");
        assert!(std::error::Error::source(&err).is_some());
    }

    #[test]
    fn rules_read_like_the_gems_even_with_string_per() {
        let rules: Vec<WireRule> = serde_json::from_str(
            r#"[{"queue":"slow","threshold":1,"per":"86400"},{"queue":"supaslow","threshold":1,"per":3600}]"#,
        )
        .unwrap();
        assert_eq!(rules[0].per, Some(86400));
        assert_eq!(rules[1].queue, "supaslow");
    }
}
