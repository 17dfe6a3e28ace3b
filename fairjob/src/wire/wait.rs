//! How long a job waited before a run, and why, from its payload alone (a pure
//! rule; the perform span shows it as `fairjob.wait_ms`, `fairjob.wait_reason`
//! and one `fairjob.wait.<reason>_ms` per part).
//!
//! The wait runs from when this attempt was asked for (`created_at`; for a
//! retry, the failure that scheduled it: `retried_at`, else `failed_at`) to
//! the run's start, in up to three parts:
//!
//! - before the job was due: `scheduled` (a job pushed with `perform_in`/`at`)
//!   or `retry` (the backoff after a failure), until `enqueued_at`;
//! - in its queue: `shard` (a tenant-sharded queue: its tenant's turn in shard
//!   order) or `queue` (the queue's backlog), from `enqueued_at`;
//! - parked by a limiter, from the park stamped in the payload
//!   ([`PARKED`], [`PARKED_AT`] in [`super::fields`]) to the run: `slot` or `rate_limit`.
//!
//! The reason is the longest part.

use super::Payload;
use super::fields::{PARKED, PARKED_AT};

/// Why a job waited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitReason {
    /// Its queue's backlog (a plain queue).
    Queue,
    /// Its tenant's turn in a tenant-sharded queue.
    Shard,
    /// A concurrency slot (parked until one freed).
    Slot,
    /// A rate limiter (parked until its next release).
    RateLimit,
    /// Scheduled for later.
    Scheduled,
    /// The backoff before a retry.
    Retry,
}

impl WaitReason {
    /// The attribute value: `queue`, `shard`, `slot`, `rate_limit`,
    /// `scheduled`, `retry`.
    pub fn as_str(self) -> &'static str {
        match self {
            WaitReason::Queue => "queue",
            WaitReason::Shard => "shard",
            WaitReason::Slot => "slot",
            WaitReason::RateLimit => "rate_limit",
            WaitReason::Scheduled => "scheduled",
            WaitReason::Retry => "retry",
        }
    }

    /// The parked reason a payload carries, if it is one.
    pub fn parked(s: &str) -> Option<WaitReason> {
        match s {
            "slot" => Some(WaitReason::Slot),
            "rate_limit" => Some(WaitReason::RateLimit),
            _ => None,
        }
    }
}

/// A run's wait: the total, its parts (in the order they happened), and the
/// main reason (the longest part).
#[derive(Debug, Clone, PartialEq)]
pub struct Wait {
    /// From when the attempt was asked for to the run's start, in ms.
    pub total_ms: u64,
    /// The longest part's reason.
    pub reason: WaitReason,
    /// Each part that took time, in ms.
    pub parts: Vec<(WaitReason, u64)>,
}

/// The wait of a run starting at `now` (epoch seconds) of `payload`, fetched
/// from a tenant-sharded queue if `sharded`; None if the payload carries no
/// `enqueued_at` or `created_at` to count from.
pub fn wait(payload: &Payload, sharded: bool, now: f64) -> Option<Wait> {
    let enqueued = payload
        .timestamp("enqueued_at")
        .or_else(|| payload.timestamp("created_at"))?;
    // A job that yielded (fair share, its slice, shutdown) went back at
    // `fairjob_requeued_at`, keeping its first `enqueued_at`: this wait began
    // at the requeue. A requeue older than `enqueued_at` belongs to an
    // earlier attempt (a retry was enqueued since).
    let requeued = payload
        .timestamp(super::fields::REQUEUED_AT)
        .filter(|at| *at >= enqueued && *at <= now);
    let enqueued = requeued.unwrap_or(enqueued);
    let retry = requeued.is_none() && payload.retry_count().is_some();
    let asked = if requeued.is_some() {
        Some(enqueued)
    } else if retry {
        payload
            .timestamp("retried_at")
            .or_else(|| payload.timestamp("failed_at"))
    } else {
        payload.timestamp("created_at")
    }
    .unwrap_or(enqueued)
    .min(enqueued);
    // A park stamped before the latest enqueue belongs to an earlier attempt.
    let parked = payload
        .get_str(PARKED)
        .and_then(|r| WaitReason::parked(&r))
        .zip(payload.timestamp(PARKED_AT))
        .filter(|(_, at)| *at >= enqueued && *at <= now);
    let ms = |secs: f64| (secs.max(0.0) * 1000.0).round() as u64;
    let before = if retry {
        WaitReason::Retry
    } else {
        WaitReason::Scheduled
    };
    let queued = if sharded {
        WaitReason::Shard
    } else {
        WaitReason::Queue
    };
    let mut parts = vec![
        (before, ms(enqueued - asked)),
        (queued, ms(parked.map_or(now, |(_, at)| at) - enqueued)),
    ];
    if let Some((reason, at)) = parked {
        parts.push((reason, ms(now - at)));
    }
    // The longest part; on a tie the later one (nearer the run: `max_by_key`
    // keeps the last of equal maxima).
    let reason = parts
        .iter()
        .max_by_key(|(_, ms)| *ms)
        .map_or(queued, |(r, _)| *r);
    parts.retain(|(_, ms)| *ms > 0);
    Some(Wait {
        total_ms: ms(now - asked),
        reason,
        parts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(extra: &str) -> Payload {
        Payload::parse(format!(r#"{{"class":"A","args":[],"jid":"j"{extra}}}"#).into_bytes())
            .unwrap()
    }

    #[test]
    fn a_yielded_jobs_wait_starts_at_its_requeue() {
        let p = payload(r#","created_at":100.0,"enqueued_at":100.0,"fairjob_requeued_at":160.0"#);
        let w = wait(&p, true, 160.5).unwrap();
        assert_eq!(w.total_ms, 500);
        assert_eq!(w.reason, WaitReason::Shard);
        // A requeue before the latest enqueue (a retry since) is an earlier attempt's.
        let p = payload(
            r#","created_at":100.0,"enqueued_at":170.0,"retry_count":0,"retried_at":169.0,"fairjob_requeued_at":160.0"#,
        );
        let w = wait(&p, false, 170.5).unwrap();
        assert_eq!(w.total_ms, 1500);
    }

    #[test]
    fn a_plain_job_waited_in_its_queue_or_its_shard() {
        let p = payload(r#","created_at":100.0,"enqueued_at":100.0"#);
        let w = wait(&p, false, 100.25).unwrap();
        assert_eq!(w.total_ms, 250);
        assert_eq!(w.reason, WaitReason::Queue);
        assert_eq!(w.parts, [(WaitReason::Queue, 250)]);
        let w = wait(&p, true, 100.25).unwrap();
        assert_eq!(w.reason, WaitReason::Shard);
    }

    #[test]
    fn a_scheduled_job_waited_for_its_time_then_in_its_queue() {
        let p = payload(r#","created_at":100.0,"enqueued_at":160.0"#);
        let w = wait(&p, false, 160.5).unwrap();
        assert_eq!(w.total_ms, 60_500);
        assert_eq!(w.reason, WaitReason::Scheduled);
        assert_eq!(
            w.parts,
            [(WaitReason::Scheduled, 60_000), (WaitReason::Queue, 500)]
        );
    }

    #[test]
    fn a_retry_counts_from_its_failure() {
        let p =
            payload(r#","created_at":10.0,"failed_at":100.0,"retry_count":0,"enqueued_at":130.0"#);
        let w = wait(&p, false, 131.0).unwrap();
        assert_eq!(w.total_ms, 31_000);
        assert_eq!(w.reason, WaitReason::Retry);
        let p = payload(
            r#","created_at":10.0,"failed_at":100.0,"retried_at":200.0,"retry_count":1,"enqueued_at":201.0"#,
        );
        let w = wait(&p, true, 205.0).unwrap();
        assert_eq!(w.reason, WaitReason::Shard);
        assert_eq!(
            w.parts,
            [(WaitReason::Retry, 1_000), (WaitReason::Shard, 4_000)]
        );
    }

    #[test]
    fn a_parked_job_waited_for_its_slot_or_its_rate() {
        let p = payload(
            r#","created_at":100.0,"enqueued_at":100.0,"fairjob_parked":"slot","fairjob_parked_at":100.5"#,
        );
        let w = wait(&p, false, 103.5).unwrap();
        assert_eq!(w.total_ms, 3_500);
        assert_eq!(w.reason, WaitReason::Slot);
        assert_eq!(
            w.parts,
            [(WaitReason::Queue, 500), (WaitReason::Slot, 3_000)]
        );
        let p = payload(
            r#","created_at":100.0,"enqueued_at":100.0,"fairjob_parked":"rate_limit","fairjob_parked_at":101.0"#,
        );
        assert_eq!(wait(&p, true, 110.0).unwrap().reason, WaitReason::RateLimit);
    }

    #[test]
    fn a_park_of_an_earlier_attempt_is_not_this_wait() {
        let p = payload(
            r#","created_at":100.0,"fairjob_parked":"slot","fairjob_parked_at":101.0,"failed_at":102.0,"retry_count":0,"enqueued_at":140.0"#,
        );
        let w = wait(&p, false, 140.1).unwrap();
        assert_eq!(w.reason, WaitReason::Retry);
        assert!(w.parts.iter().all(|(r, _)| *r != WaitReason::Slot));
    }

    #[test]
    fn no_timestamps_no_wait_and_a_clock_behind_is_zero() {
        assert_eq!(wait(&payload(""), false, 1.0), None);
        let p = payload(r#","created_at":100.0,"enqueued_at":100.0"#);
        let w = wait(&p, false, 99.0).unwrap();
        assert_eq!((w.total_ms, w.reason), (0, WaitReason::Queue));
        assert!(w.parts.is_empty());
    }
}
