//! Slot limits and rate limiters in memory: what `slot_acquire.lua`,
//! `slot_release.lua`, `slot_set.lua`, `rate_acquire.lua`,
//! `rate_release.lua` and `rate_set.lua` do, through the same rules
//! ([`crate::policy::slots`], [`crate::policy::gcra`]). A parked job leaves
//! its in-progress record (and its tenant's running count) and waits as its
//! entry; a released one goes back to the front of its queue (a sharded
//! queue's inbox).

use std::time::Duration;

use super::{MemoryStore, State};
use crate::broker::rates::{RateAcquired, RateReleased, RateRequest};
use crate::broker::slots::{Acquired, SlotRequest};
use crate::broker::token::{SlotHold, Token};
use crate::policy::dispatch::Call;
use crate::policy::gcra::{Admit, Declared, Limiter};
use crate::policy::slots::{self, SlotState};

impl State {
    /// A parked job leaves its in-progress record `record` and its tenant's running
    /// count; false when it was not there (recovered meanwhile).
    fn park_leave(&mut self, record: &str, token: &Token) -> bool {
        if self.leave(record, token).is_none() {
            return false;
        }
        if let Some(t) = &token.tenant {
            let now = self.now_us();
            let sh = self.shards.entry(token.queue.clone()).or_default();
            let mut call = Call::new(&mut sh.state, now);
            call.release(t);
            call.end();
        }
        true
    }

    /// Released waiters' jobs back at the front of their queues, in order.
    fn released(&mut self, entries: Vec<Vec<u8>>) {
        for e in entries {
            let f = slots::fields(&e);
            let (Some(queue), Some(payload)) = (f.get(1), f.get(3)) else {
                continue;
            };
            let queue = String::from_utf8_lossy(queue).into_owned();
            let payload = String::from_utf8_lossy(payload).into_owned();
            self.requeue(&queue, payload, None, true);
        }
    }
}

impl MemoryStore {
    /// `slot_acquire.lua`: the slot `hold` for a fetched job (in record
    /// `record`), or a park.
    pub(crate) fn slot_acquire(
        &self,
        record: &str,
        token: &Token,
        req: SlotRequest<'_>,
        hold: SlotHold,
        entry: Vec<u8>,
    ) -> Acquired {
        let mut st = self.lock();
        let now_ms = st.now_us() / 1000;
        let slot = st.slots.entry(req.full_key.to_owned()).or_default();
        if slot.try_take(f64::from(req.default_limit), &hold.holder, req.jid, now_ms) {
            return Acquired::Slot(hold);
        }
        if !st.park_leave(record, token) {
            return Acquired::Lost;
        }
        st.slots
            .entry(req.full_key.to_owned())
            .or_default()
            .park(entry);
        Acquired::Parked
    }

    /// `slot_release.lua`: the slot a finished job held goes back; waiters
    /// move into the freed slots.
    pub(crate) fn release_slot(&self, hold: &SlotHold, ttl: Duration) {
        let mut st = self.lock();
        let now_ms = st.now_us() / 1000;
        let slot = st.slots.entry(hold.full_key.clone()).or_default();
        let out = slot.release(
            &hold.holder,
            f64::from(hold.default_limit),
            ttl.as_millis() as u64,
            now_ms,
        );
        st.released(out);
    }

    /// `slot_set.lua`: a runtime limit (`None`: the declared one); returns
    /// how many waiters it released.
    pub(crate) fn set_slot_limit(
        &self,
        full_key: &str,
        limit: Option<u32>,
        default: u32,
        ttl: Duration,
    ) -> u64 {
        let mut st = self.lock();
        let now_ms = st.now_us() / 1000;
        let slot = st.slots.entry(full_key.to_owned()).or_default();
        let out = slot.set_limit(
            limit.map(f64::from),
            f64::from(default),
            ttl.as_millis() as u64,
            now_ms,
        );
        let n = out.len() as u64;
        st.released(out);
        n
    }

    /// `rate_acquire.lua`: a start for a fetched job (in record `record`), or a park.
    pub(crate) fn rate_acquire(
        &self,
        record: &str,
        token: &Token,
        req: RateRequest<'_>,
        entry: Vec<u8>,
    ) -> RateAcquired {
        let mut st = self.lock();
        let now = st.now_us();
        let declared = Declared {
            limit: req.limit,
            per_us: req.per_us,
            burst: req.burst,
        };
        let mut trial = st.limiters.get(req.full_key).cloned().unwrap_or_default();
        match trial.acquire(declared, req.jid, entry, now) {
            Admit::Pass => {
                st.limiters.insert(req.full_key.to_owned(), trial);
                RateAcquired::Pass
            }
            Admit::Parked(at) => {
                if !st.park_leave(record, token) {
                    // Recovered meanwhile: nothing waits (the script leaves
                    // before its park, its spent reservation gone).
                    if let Some(l) = st.limiters.get_mut(req.full_key) {
                        l.reserved.remove(req.jid);
                    }
                    return RateAcquired::Lost;
                }
                st.limiters.insert(req.full_key.to_owned(), trial);
                RateAcquired::Parked(at)
            }
        }
    }

    /// `rate_release.lua`: the waiters of `full_key` the rule allows now.
    pub(crate) fn rate_release(&self, full_key: &str, ttl: Duration, max: u64) -> RateReleased {
        let mut st = self.lock();
        let now = st.now_us();
        let limiter = st.limiters.entry(full_key.to_owned()).or_default();
        let (out, next) = limiter.release(now, ttl.as_micros() as u64, max);
        let released = out.len() as u64;
        st.released(out);
        RateReleased {
            released,
            next,
            now,
        }
    }

    /// `rate_set.lua`: runtime settings as stored (`-` keep, empty clear);
    /// returns how many jobs wait.
    pub(crate) fn set_rate_limit(
        &self,
        full_key: &str,
        limit: &str,
        per: &str,
        burst: &str,
    ) -> u64 {
        let mut st = self.lock();
        let now = st.now_us();
        st.limiters
            .entry(full_key.to_owned())
            .or_default()
            .set(limit, per, burst, now) as u64
    }

    /// The limiters with a release scheduled, earliest first: (full key, µs),
    /// and the virtual clock (µs).
    pub(crate) fn rates_due(&self) -> (u64, Vec<(String, u64)>) {
        let st = self.lock();
        let mut due: Vec<(String, u64)> = st
            .limiters
            .iter()
            .filter_map(|(k, l)| l.due.map(|d| (k.clone(), d)))
            .collect();
        due.sort_by_key(|(k, d)| (*d, k.clone()));
        (st.now_us(), due)
    }

    /// A slot limit as the fake holds it.
    pub(crate) fn slot_state(&self, full_key: &str) -> SlotState {
        self.lock().slots.get(full_key).cloned().unwrap_or_default()
    }

    /// A rate limiter as the fake holds it.
    pub(crate) fn limiter(&self, full_key: &str) -> Limiter {
        self.lock()
            .limiters
            .get(full_key)
            .cloned()
            .unwrap_or_default()
    }

    /// Every parked job's payload (waiting for a slot or its rate), with its queue.
    pub(crate) fn parked(&self) -> Vec<(String, String)> {
        let st = self.lock();
        st.slots
            .values()
            .flat_map(|s| s.waiters.iter())
            .chain(st.limiters.values().flat_map(|l| l.waiters.iter()))
            .filter_map(|e| {
                let f = slots::fields(e);
                Some((
                    String::from_utf8_lossy(f.get(1)?).into_owned(),
                    String::from_utf8_lossy(f.get(3)?).into_owned(),
                ))
            })
            .collect()
    }
}
