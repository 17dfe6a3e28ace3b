//! Sidekiq's wire format, with no IO: the job [`payload`], the payload
//! [`fields`] fairjob reads and writes, and the per-type job [`options`]
//! (`Retry`, `ArgsShape`, `JobOptions`, `ThrottleRule`, `ConcurrencyLimit`),
//! ActiveJob's payloads on Sidekiq ([`active_job`]),
//! the published declaration of a job class ([`ClassInfo`]), the pure
//! reroute rule (which rule matches and where a job goes), the [`unique`]
//! job key, the [`wait`] before a run and its reason, and the text form
//! of a [`duration`] in settings.
//!
//! Layer 1: it names only [`crate::error`] below it, and nothing of Redis.

pub mod active_job;
pub mod classes;
pub mod cron;
pub mod date;
pub mod duration;
pub mod encoding;
pub mod fields;
pub mod options;
pub mod payload;
pub mod trace_context;
pub mod unique;
pub mod wait;

pub use classes::ClassInfo;
pub use date::{utc_date, utc_day};
pub use options::{
    ArgsShape, ConcurrencyLimit, IterableOptions, JobOptions, RateLimit, Retry, ThrottleRule,
    WireRule, reroute_window, rule_window,
};
pub use payload::{Malformed, Payload, malformed_entry, new_jid, now_f64};
pub use trace_context::Propagation;
pub use unique::{OnConflict, UniqueOptions, UniqueSpec, UniqueUntil, unique_digest};
pub use wait::{Wait, WaitReason};
