//! Rate limiters in Redis: pass a fetched job or park it in the limiter's FIFO
//! list (`rate_acquire.lua`), release waiters when the release schedule says
//! the key has room (`rate_release.lua`), and change a key's rate at runtime
//! (`rate_set.lua`). The rule (GCRA) is [`crate::policy::gcra`], its Lua twin
//! `lib/gcra.lua` on Redis's clock.
//!
//! On a Redis Cluster a limiter's keys share one hash tag (one slot), while
//! the job's record, its queue and the shared schedule live elsewhere: the
//! scripts then touch only the limiter's slot (with its own copy of its
//! schedule, `next`), and the other steps follow as separate commands —
//! registered before, the job out of its record after a park (a crash in
//! between runs the job twice, never loses it), released waiters staged in
//! the limiter's `releasing` set and delivered to their queues (a crash
//! redelivers them: the reaper, [`RedisBroker::reconcile_rates`]), and the
//! shared schedule mirrored from `next` after each script (and again by the
//! reaper, which repairs a mirror two racing releasers got wrong).

use std::time::Duration;

use super::scripts::{RATE_ACQUIRE, RATE_RELEASE, RATE_SET, RECLAIM};
use super::slots::waiter_entry_of;
use super::{RedisBroker, Setting, Token, keys};
use crate::error::Result;

/// How long a released waiter's counted start stays reserved for it.
pub const RATE_RESERVATION_TTL: Duration = Duration::from_secs(60);

/// The most waiters of one key released by one call.
pub const RELEASE_MAX: u32 = 100;

/// Redis Cluster mode: how long a staged released waiter is leased to its
/// deliverer before the reaper delivers it again.
const DELIVERY_LEASE: Duration = Duration::from_secs(30);

/// Limiters one reaper pass looks at (Redis Cluster mode).
const PASS_BATCH: usize = 200;

/// A fetched job asking its rate limiter to start.
#[derive(Debug, Clone, Copy)]
pub struct RateRequest<'a> {
    /// `<Class>:<key>` or `group:<group>:<key>`.
    pub full_key: &'a str,
    /// The declared starts per period (used while no runtime limit is set).
    pub limit: u32,
    /// The declared period, µs.
    pub per_us: u64,
    /// The declared burst.
    pub burst: u32,
    /// The job's jid.
    pub jid: &'a str,
    /// The payload to park if the limiter has no room (what a release pushes
    /// back to its queue).
    pub parked_payload: &'a str,
}

/// The result of asking a rate limiter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateAcquired {
    /// The job may start (its start is counted).
    Pass,
    /// The job was parked in the limiter's list (it left the in-progress
    /// record); the key's next release time (µs, Redis's clock), `None` while
    /// the key is paused.
    Parked(Option<u64>),
    /// The job was no longer this worker's (recovered by another worker).
    Lost,
}

/// What one release call did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateReleased {
    /// Waiters moved back to their queues.
    pub released: u64,
    /// The key's next release time (µs), `None` when nobody waits or it is paused.
    pub next: Option<u64>,
    /// Redis's clock at the call (µs).
    pub now: u64,
}

fn next_of(v: i64) -> Option<u64> {
    (v >= 0).then_some(v as u64)
}

impl RedisBroker {
    /// Passes a fetched job of `identity` through its rate limiter, or parks it.
    pub async fn rate_acquire(
        &self,
        identity: &str,
        token: &Token,
        req: RateRequest<'_>,
    ) -> Result<RateAcquired> {
        #[cfg(feature = "testing")]
        if let Some(store) = self.memory() {
            let entry = waiter_entry_of(token, req.jid, req.parked_payload);
            let record = self.inflight_of(identity, token);
            return Ok(store.rate_acquire(&record, token, req, entry));
        }
        if self.is_cluster() {
            return self.rate_acquire_split(identity, token, req).await;
        }
        let k = &self.keys;
        let rk = k.rate(req.full_key);
        let entry = waiter_entry_of(token, req.jid, req.parked_payload);
        let mut inv = RATE_ACQUIRE.call();
        for key in rk.all() {
            inv.key(key);
        }
        inv.key(k.rates_due())
            .key(self.inflight_of(identity, token))
            .key(k.rates_registry());
        inv.arg(req.limit)
            .arg(req.per_us)
            .arg(req.burst)
            .arg(req.jid)
            .arg(&token.raw)
            .arg(entry)
            .arg(keys::encode(req.full_key));
        match &token.tenant {
            Some(t) => {
                let sk = k.shard(&token.queue);
                for key in sk.state() {
                    inv.key(key);
                }
                inv.arg(&sk.shard_prefix).arg(t);
            }
            None => {
                inv.arg("").arg("");
            }
        }
        inv.arg("");
        let (status, next): (i64, i64) = self.invoke(&inv).await?;
        Ok(match status {
            1 => RateAcquired::Pass,
            0 => RateAcquired::Parked(next_of(next)),
            _ => RateAcquired::Lost,
        })
    }

    /// [`Self::rate_acquire`] on a Redis Cluster: (1) the limiter is
    /// registered; (2) `rate_acquire.lua` on the limiter's slot passes the job
    /// or parks it (the commit point of parking); (3) a parked job leaves its
    /// record (and its tenant's running count), and the shared schedule
    /// mirrors the limiter's. A job recovered meanwhile is taken back out of
    /// the waiting list: it runs where it was recovered.
    async fn rate_acquire_split(
        &self,
        identity: &str,
        token: &Token,
        req: RateRequest<'_>,
    ) -> Result<RateAcquired> {
        let k = &self.keys;
        let rk = k.rate(req.full_key);
        let member = keys::encode(req.full_key);
        let _: i64 = self
            .query(redis::cmd("SADD").arg(k.rates_registry()).arg(&member))
            .await?;
        let entry = waiter_entry_of(token, req.jid, req.parked_payload);
        let mut inv = RATE_ACQUIRE.call();
        for key in rk.all() {
            inv.key(key);
        }
        inv.key(&rk.next);
        inv.arg(req.limit)
            .arg(req.per_us)
            .arg(req.burst)
            .arg(req.jid)
            .arg(&token.raw)
            .arg(entry.as_slice())
            .arg(&member)
            .arg("")
            .arg("")
            .arg("c");
        let (status, next): (i64, i64) = self.invoke(&inv).await?;
        if status == 1 {
            return Ok(RateAcquired::Pass);
        }
        let left = self.leave_record(identity, token).await?;
        if left == 0 {
            let _: i64 = self
                .query(
                    redis::cmd("LREM")
                        .arg(&rk.waiters)
                        .arg(1)
                        .arg(entry.as_slice()),
                )
                .await?;
            return Ok(RateAcquired::Lost);
        }
        self.mirror_due(&member, next_of(next)).await?;
        Ok(RateAcquired::Parked(next_of(next)))
    }

    /// Redis Cluster mode: the shared schedule says what the limiter's own
    /// says (`None`: nothing scheduled).
    async fn mirror_due(&self, member: &str, next: Option<u64>) -> Result<()> {
        let due = self.keys.rates_due();
        let _: i64 = match next {
            Some(at) => {
                self.query(redis::cmd("ZADD").arg(due).arg(at).arg(member))
                    .await?
            }
            None => self.query(redis::cmd("ZREM").arg(due).arg(member)).await?,
        };
        Ok(())
    }

    /// Redis Cluster mode: one reaper pass over a page of rate limiters:
    /// released waiters whose deliverer died are delivered again, and the
    /// shared schedule is repaired from each limiter's own. Returns the
    /// waiters delivered again. (Nothing to do on one server.)
    pub(crate) async fn reconcile_rates(&self) -> Result<u64> {
        if !self.is_cluster() {
            return Ok(0);
        }
        let k = &self.keys;
        let (next, members): (u64, Vec<String>) = self
            .sscan(&k.rates_registry(), self.cursor("rates").await?, PASS_BATCH)
            .await?;
        let mut again = 0;
        for member in members {
            let Some(full) = keys::decode(&member) else {
                continue;
            };
            let rk = k.rate(&full);
            let mut inv = RECLAIM.call();
            inv.key(&rk.releasing)
                .arg(PASS_BATCH)
                .arg(DELIVERY_LEASE.as_millis() as u64);
            let stale: Vec<Vec<u8>> = self.invoke(&inv).await?;
            again += stale.len() as u64;
            self.deliver_released(&rk.releasing, stale).await?;
            let at: Option<f64> = self
                .query(redis::cmd("ZSCORE").arg(&rk.next).arg(&member))
                .await?;
            self.mirror_due(&member, at.map(|a| a.max(0.0) as u64))
                .await?;
        }
        self.set_cursor("rates", next).await?;
        Ok(again)
    }

    /// Redis's clock (µs) and the first `n` entries of the release schedule
    /// (encoded full key, next release µs), earliest first.
    pub(crate) async fn rates_due(&self, n: usize) -> Result<(u64, Vec<(String, u64)>)> {
        #[cfg(feature = "testing")]
        if let Some(store) = self.memory() {
            let (now, due) = store.rates_due();
            return Ok((
                now,
                due.into_iter()
                    .take(n)
                    .map(|(k, at)| (keys::encode(&k), at))
                    .collect(),
            ));
        }
        let mut pipe = redis::pipe();
        pipe.cmd("TIME")
            .cmd("ZRANGE")
            .arg(self.keys.rates_due())
            .arg(0)
            .arg(n.saturating_sub(1))
            .arg("WITHSCORES");
        let ((secs, micros), due): ((u64, u64), Vec<(String, f64)>) = self.pipe(&pipe).await?;
        let now = secs * 1_000_000 + micros;
        Ok((
            now,
            due.into_iter()
                .map(|(m, s)| (m, s.max(0.0) as u64))
                .collect(),
        ))
    }

    /// Releases the waiters of the limiter `member` (an encoded full key from
    /// the schedule) that its rate allows now.
    pub async fn rate_release(&self, member: &str) -> Result<RateReleased> {
        let Some(full) = keys::decode(member) else {
            let _: i64 = self
                .query(redis::cmd("ZREM").arg(self.keys.rates_due()).arg(member))
                .await?;
            return Ok(RateReleased {
                released: 0,
                next: None,
                now: 0,
            });
        };
        #[cfg(feature = "testing")]
        if let Some(store) = self.memory() {
            return Ok(store.rate_release(&full, RATE_RESERVATION_TTL, u64::from(RELEASE_MAX)));
        }
        let k = &self.keys;
        let rk = k.rate(&full);
        let cluster = self.is_cluster();
        let mut inv = RATE_RELEASE.call();
        for key in rk.all() {
            inv.key(key);
        }
        if cluster {
            inv.key(&rk.next).key(&rk.releasing);
        } else {
            inv.key(k.rates_due());
        }
        let (qp, wp) = k.queue_and_wake_prefixes();
        inv.arg(member)
            .arg(RATE_RESERVATION_TTL.as_micros() as u64)
            .arg(RELEASE_MAX)
            .arg(qp)
            .arg(wp);
        if cluster {
            inv.arg("c").arg(DELIVERY_LEASE.as_millis() as u64);
        }
        let reply: Vec<redis::Value> = self.invoke(&inv).await?;
        let mut it = reply.into_iter();
        let mut int = || -> i64 {
            it.next()
                .and_then(|v| redis::from_redis_value(v).ok())
                .unwrap_or(-1)
        };
        let (released, next, now) = (int().max(0) as u64, int(), int().max(0) as u64);
        let staged: Vec<Vec<u8>> = it.filter_map(|v| redis::from_redis_value(v).ok()).collect();
        if cluster {
            self.deliver_released(&rk.releasing, staged).await?;
            self.mirror_due(member, next_of(next)).await?;
        }
        Ok(RateReleased {
            released,
            next: next_of(next),
            now,
        })
    }

    /// Changes a limiter's runtime limit, period (µs) and burst (`Clear` =
    /// back to the declared value; limit 0 pauses), and schedules a release
    /// when jobs wait. Returns how many jobs wait.
    pub async fn set_rate_limit(
        &self,
        full_key: &str,
        limit: Setting<u32>,
        per_us: Setting<u64>,
        burst: Setting<u32>,
    ) -> Result<u64> {
        #[cfg(feature = "testing")]
        if let Some(store) = self.memory() {
            let text = |v: Setting<u64>| v.stored();
            let widen = |v: Setting<u32>| match v {
                Setting::Keep => Setting::Keep,
                Setting::Clear => Setting::Clear,
                Setting::Set(v) => Setting::Set(u64::from(v)),
            };
            return Ok(store.set_rate_limit(
                full_key,
                &text(widen(limit)),
                &text(per_us),
                &text(widen(burst)),
            ));
        }
        let k = &self.keys;
        let rk = k.rate(full_key);
        let member = keys::encode(full_key);
        let cluster = self.is_cluster();
        if cluster {
            let _: i64 = self
                .query(redis::cmd("SADD").arg(k.rates_registry()).arg(&member))
                .await?;
        }
        let mut inv = RATE_SET.call();
        for key in rk.all() {
            inv.key(key);
        }
        if cluster {
            inv.key(&rk.next);
        } else {
            inv.key(k.rates_due()).key(k.rates_registry());
        }
        let text = |v: Setting<u64>| match v {
            Setting::Keep => "-".to_owned(),
            Setting::Clear => String::new(),
            Setting::Set(v) => v.to_string(),
        };
        let widen = |v: Setting<u32>| match v {
            Setting::Keep => Setting::Keep,
            Setting::Clear => Setting::Clear,
            Setting::Set(v) => Setting::Set(u64::from(v)),
        };
        inv.arg(text(widen(limit)))
            .arg(text(per_us))
            .arg(text(widen(burst)))
            .arg(&member)
            .arg(if cluster { "c" } else { "" });
        let waiting: u64 = self.invoke(&inv).await?;
        if cluster {
            let at: Option<f64> = self
                .query(redis::cmd("ZSCORE").arg(&rk.next).arg(&member))
                .await?;
            self.mirror_due(&member, at.map(|a| a.max(0.0) as u64))
                .await?;
        }
        Ok(waiting)
    }
}
