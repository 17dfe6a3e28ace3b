//! Sidekiq's wire format, with no IO: the job [`payload`], the payload
//! [`fields`] fairjob reads and writes, and the per-type job [`options`]
//! (`Retry`, `ArgsShape`, `JobOptions`, `ThrottleRule`, `ConcurrencyLimit`),
//! and the text form of a [`duration`] in settings.
//!
//! Layer 1: it names only [`crate::error`] below it, and nothing of Redis.

pub mod duration;
pub mod fields;
pub mod options;
pub mod payload;

pub use options::{ArgsShape, ConcurrencyLimit, JobOptions, Retry, ThrottleRule, WireRule};
pub use payload::{Malformed, Payload, malformed_entry, new_jid, now_f64};
