//! Redis-wide stalls, as this process sees them through its own lease
//! renewals, and the rule that keeps a stall from recovering anybody.
//!
//! When Redis refuses every write for a while (a long script makes it
//! `BUSY`, `MISCONF`, `LOADING` after a restart, a failover's read-only
//! window, or it is unreachable), every process misses its renewals at once
//! and every lease may expire, though no process died. The rule: **a process
//! whose own renewal failed recovers nobody until one full lease has passed
//! since its own renewal succeeded again** (Redis accepted writes again). In
//! that lease every live peer renews (its heartbeat runs three times per
//! lease) and its lease key comes back, so only a peer that really died is
//! still expired when recovery resumes. A real death outside a stall is
//! recovered as before (its lease plus the reaper interval); one during a
//! stall, a lease after the stall ends.
//!
//! Each stall is logged once when it ends: what Redis said first and how long
//! renewals failed. [`Stalls`] is the pure state; the heartbeat feeds it, the
//! reaper asks it, and the worker's health reads it.

use std::time::{Duration, Instant};

use crate::error::Error;

/// This process's view of Redis stalls.
#[derive(Debug, Default)]
pub(crate) struct Stalls {
    /// Since when renewals fail, and the first refusal's text and kind.
    failing: Option<(Instant, String, &'static str)>,
    /// When renewals last succeeded again after failing.
    back_at: Option<Instant>,
}

/// A stall that just ended, to log once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ended {
    /// What Redis said first.
    pub said: String,
    /// How long renewals failed.
    pub lasted: Duration,
}

impl Stalls {
    /// A renewal failed at `now` with `err`.
    pub(crate) fn failed(&mut self, now: Instant, err: &Error) {
        if self.failing.is_none() {
            self.failing = Some((now, err.to_string(), err.redis_kind()));
        }
    }

    /// A renewal succeeded at `now`; returns the stall it ends, if any.
    pub(crate) fn succeeded(&mut self, now: Instant) -> Option<Ended> {
        let (since, said, _) = self.failing.take()?;
        self.back_at = Some(now);
        Some(Ended {
            said,
            lasted: now.saturating_duration_since(since),
        })
    }

    /// Whether this process may recover other processes' jobs at `now`,
    /// with leases of `lease`: not while its own renewals fail, nor within
    /// one lease of their coming back.
    pub(crate) fn may_recover(&self, now: Instant, lease: Duration) -> bool {
        self.failing.is_none()
            && self
                .back_at
                .is_none_or(|back| now.saturating_duration_since(back) >= lease)
    }

    /// While renewals fail: the kind of the first refusal and what Redis said.
    pub(crate) fn current(&self) -> Option<(&'static str, &str)> {
        self.failing
            .as_ref()
            .map(|(_, said, kind)| (*kind, said.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stall_holds_recovery_for_one_lease_after_it_ends() {
        let lease = Duration::from_secs(3);
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut s = Stalls::default();
        assert!(s.may_recover(t0, lease), "no stall seen: recovery as usual");
        assert_eq!(s.succeeded(at(10)), None, "nothing to end");
        s.failed(at(1000), &Error::Busy("BUSY script".into()));
        s.failed(at(2000), &Error::Loading("LOADING".into()));
        assert_eq!(s.current().map(|c| c.0), Some("busy"), "the first refusal");
        assert!(!s.may_recover(at(2500), lease), "during the stall");
        let ended = s.succeeded(at(5500)).expect("a stall ended");
        assert_eq!(ended.lasted, Duration::from_millis(4500));
        assert!(ended.said.contains("BUSY script"), "{}", ended.said);
        assert_eq!(s.succeeded(at(6000)), None, "logged once");
        assert!(s.current().is_none());
        assert!(
            !s.may_recover(at(8000), lease),
            "within a lease of writes coming back"
        );
        assert!(s.may_recover(at(8500), lease), "a full lease later");
    }
}
