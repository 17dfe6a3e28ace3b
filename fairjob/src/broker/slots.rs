//! Slot limits in Redis: take a slot or park in the lock-wait list
//! (`slot_acquire.lua`), and change a key's limit at runtime, releasing waiters
//! (`slot_set.lua`). Releasing a held slot is part of finishing a job
//! (`finish.rs`).

use std::time::Duration;

use super::scripts::{SLOT_ACQUIRE, SLOT_SET, SLOT_TAKE};
use super::{RedisBroker, SlotHold, Token, keys};
use crate::error::Result;

/// How long a slot stays reserved for a released waiter that has not started yet.
pub const RESERVATION_TTL: Duration = Duration::from_secs(30);

/// A fetched job asking for a slot of `full_key`.
#[derive(Debug, Clone, Copy)]
pub struct SlotRequest<'a> {
    /// `<Class>:<key>` or `group:<group>:<key>`.
    pub full_key: &'a str,
    /// The declared limit (used while no runtime limit is set).
    pub default_limit: u32,
    /// The job's jid.
    pub jid: &'a str,
    /// The payload to park in the lock-wait list if no slot is free (what a
    /// released waiter pushes back to its queue).
    pub parked_payload: &'a str,
}

/// The result of trying to take a slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquired {
    /// The job holds a slot.
    Slot(SlotHold),
    /// The job was parked in the lock-wait list (it left the in-progress record).
    Parked,
    /// The job was no longer this worker's (recovered by another worker).
    Lost,
}

/// Reads a lock-wait entry's fields back: jid, queue, encoded queue, payload.
pub(crate) fn waiter_fields(entry: &[u8]) -> Vec<Vec<u8>> {
    crate::policy::slots::fields(entry)
}

impl RedisBroker {
    /// Takes a slot for a fetched job of `identity`, or parks it.
    pub async fn slot_acquire(
        &self,
        identity: &str,
        token: &Token,
        req: SlotRequest<'_>,
    ) -> Result<Acquired> {
        if self.is_cluster() {
            return self.slot_acquire_split(identity, token, req).await;
        }
        let k = &self.keys;
        let lk = k.limit(req.full_key);
        let hold = SlotHold {
            full_key: req.full_key.to_owned(),
            holder: format!("{identity}|{}", token.raw),
            default_limit: req.default_limit,
        };
        let entry = waiter_entry(token, &req);
        #[cfg(feature = "testing")]
        if let Some(store) = self.memory() {
            let record = self.inflight_of(identity, token);
            return Ok(store.slot_acquire(&record, token, req, hold, entry));
        }
        let mut inv = SLOT_ACQUIRE.call();
        inv.key(&lk.limit)
            .key(&lk.holders)
            .key(&lk.reserved)
            .key(&lk.waiters);
        inv.key(self.inflight_of(identity, token))
            .key(k.limits_registry())
            .key(k.slots(identity));
        inv.arg(req.default_limit)
            .arg(&hold.holder)
            .arg(req.jid)
            .arg(&token.raw);
        inv.arg(entry)
            .arg(keys::encode(req.full_key))
            .arg(hold.record());
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
        let r: i64 = self.invoke(&inv).await?;
        Ok(match r {
            1 => Acquired::Slot(hold),
            0 => Acquired::Parked,
            _ => Acquired::Lost,
        })
    }

    /// [`Self::slot_acquire`] in cluster mode, where the limit's keys, the
    /// job's record and the worker's slot record are in different slots:
    /// (1) the slot record and the limits registry are written first, so a
    /// slot taken next can always be found and released; (2) `slot_take.lua`
    /// takes a slot or parks the job (the commit point of parking); (3) a
    /// parked job leaves its in-progress record (and its tenant's running
    /// count), and its slot record goes. A crash between (2) and (3) runs the
    /// job twice, never loses it; a job recovered meanwhile is taken back out
    /// of the wait list.
    async fn slot_acquire_split(
        &self,
        identity: &str,
        token: &Token,
        req: SlotRequest<'_>,
    ) -> Result<Acquired> {
        let k = &self.keys;
        let lk = k.limit(req.full_key);
        let hold = SlotHold {
            full_key: req.full_key.to_owned(),
            holder: format!("{identity}|{}", token.raw),
            default_limit: req.default_limit,
        };
        let mut pipe = redis::pipe();
        pipe.sadd(k.limits_registry(), keys::encode(req.full_key))
            .ignore()
            .hset(k.slots(identity), &token.raw, hold.record())
            .ignore();
        self.pipe::<()>(&pipe).await?;
        let entry = waiter_entry(token, &req);
        let mut inv = SLOT_TAKE.call();
        inv.key(&lk.limit)
            .key(&lk.holders)
            .key(&lk.reserved)
            .key(&lk.waiters);
        inv.arg(req.default_limit)
            .arg(&hold.holder)
            .arg(req.jid)
            .arg(entry.as_slice());
        let taken: i64 = self.invoke(&inv).await?;
        if taken == 1 {
            return Ok(Acquired::Slot(hold));
        }
        // Parked: the job leaves its record.
        let left = self.leave_record(identity, token).await?;
        let _: i64 = self
            .query(redis::cmd("HDEL").arg(k.slots(identity)).arg(&token.raw))
            .await?;
        if left == 0 {
            // Recovered by a reaper meanwhile: it runs there, not from here.
            let _: i64 = self
                .query(
                    redis::cmd("LREM")
                        .arg(&lk.waiters)
                        .arg(1)
                        .arg(entry.as_slice()),
                )
                .await?;
            return Ok(Acquired::Lost);
        }
        Ok(Acquired::Parked)
    }

    /// Sets a key's limit at runtime (`None` = back to the declared `default`),
    /// and releases waiters into the new free slots. Returns how many were released.
    pub async fn set_slot_limit(
        &self,
        full_key: &str,
        limit: Option<u32>,
        default: u32,
    ) -> Result<u64> {
        #[cfg(feature = "testing")]
        if let Some(store) = self.memory() {
            return Ok(store.set_slot_limit(full_key, limit, default, RESERVATION_TTL));
        }
        let k = &self.keys;
        let lk = k.limit(full_key);
        let mut inv = SLOT_SET.call();
        inv.key(&lk.limit)
            .key(&lk.holders)
            .key(&lk.reserved)
            .key(&lk.waiters);
        if self.is_cluster() {
            let _: i64 = self
                .query(
                    redis::cmd("SADD")
                        .arg(k.limits_registry())
                        .arg(keys::encode(full_key)),
                )
                .await?;
            inv.key(&lk.releasing);
        } else {
            inv.key(k.limits_registry());
        }
        inv.arg(limit.map(|l| l.to_string()).unwrap_or_default());
        inv.arg(default)
            .arg(RESERVATION_TTL.as_millis() as u64)
            .arg(keys::encode(full_key));
        let (qp, wp) = k.queue_and_wake_prefixes();
        inv.arg(qp).arg(wp);
        if !self.is_cluster() {
            return self.invoke(&inv).await;
        }
        inv.arg("c");
        let released: Vec<Vec<u8>> = self.invoke(&inv).await?;
        let n = released.len() as u64;
        self.deliver_released(&lk.releasing, released).await?;
        Ok(n)
    }
}

/// The lock-wait entry of a job: jid, queue, encoded queue, payload.
fn waiter_entry(token: &Token, req: &SlotRequest<'_>) -> Vec<u8> {
    waiter_entry_of(token, req.jid, req.parked_payload)
}

/// A waiting job's entry (slot and rate limiters share the format): jid,
/// queue, encoded queue, payload.
pub(crate) fn waiter_entry_of(token: &Token, jid: &str, payload: &str) -> Vec<u8> {
    crate::policy::slots::entry(jid, &token.queue, &keys::encode(&token.queue), payload)
}
