//! Slot limits (`#[concurrency(limit = N, key = ...)]`): at most N jobs of one key
//! run at once, across every worker.
//!
//! A fetched job takes a slot of its key before `perform`, or is parked in the
//! key's lock-wait list, where it holds no worker and nobody polls it. When a
//! holder finishes (ack, retry, dead, requeue, or recovery from a dead worker),
//! the same script that ends it frees its slot and moves as many waiters as there
//! are free slots back to the **front** of their queues, each with a slot
//! reserved for it ([`crate::broker::RESERVATION_TTL`]), so several workers
//! releasing at once never release more waiters than there are slots. The limit
//! lives in Redis (`fairjob-worker limits set <key> <n>`; 0 pauses the key) and a
//! raised limit releases waiters at once. A slot held by a dead worker is freed
//! when the reaper recovers its job; a frozen worker past its lease is the one
//! case where more than N bodies can run (its late completion is fenced).
//!
//! Keys are per class (`<Class>:<key>`) unless the job names a shared group
//! (`group = "endpoint"` → `group:endpoint:<key>`), so several job types can share
//! one limit.

use crate::broker::{self, RedisBroker, SlotHold, Token, keys};
use crate::error::Result;
use crate::job::ConcurrencyLimit;
use crate::payload::Payload;

/// Marks a parked job of a sharded queue, so that when a slot frees it goes to the
/// front of its tenant's list.
pub const SLOT_RELEASED: &str = "fairjob_slot_released";

/// The full key of a job's slot limit.
pub fn full_key(class: &str, limit: &ConcurrencyLimit, key: &str) -> String {
    match limit.group {
        Some(g) => format!("group:{g}:{key}"),
        None => format!("{class}:{key}"),
    }
}

/// The result of trying to take a slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Acquired {
    /// The job holds a slot.
    Slot(SlotHold),
    /// The job was parked in the lock-wait list (it left the in-progress record).
    Parked,
    /// The job was no longer this worker's (recovered elsewhere).
    Lost,
}

fn field(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(bytes.len().to_string().as_bytes());
    out.push(b':');
    out.extend_from_slice(bytes);
}

/// Takes a slot for a fetched job or parks it.
pub(crate) async fn acquire(
    broker: &RedisBroker,
    identity: &str,
    token: &Token,
    payload: &Payload,
    full: &str,
    default_limit: u32,
) -> Result<Acquired> {
    let k = broker.keys();
    let lk = k.limit(full);
    let hold = SlotHold {
        full_key: full.to_owned(),
        holder: format!("{identity}|{}", token.raw),
        default_limit,
    };
    let raw = if token.tenant.is_some() {
        // A released waiter of a sharded queue re-enters through the inbox; the
        // marker puts it at the front of its tenant's list there.
        let mut p = payload.clone();
        p.set(SLOT_RELEASED, true);
        p.to_json()
    } else {
        payload.to_json()
    };
    let mut entry = Vec::with_capacity(raw.len() + 256);
    field(&mut entry, payload.jid().as_bytes());
    field(&mut entry, token.queue.as_bytes());
    field(&mut entry, keys::encode(&token.queue).as_bytes());
    field(&mut entry, raw.as_bytes());
    let mut inv = broker::SLOT_ACQUIRE.prepare_invoke();
    inv.key(&lk.limit)
        .key(&lk.holders)
        .key(&lk.reserved)
        .key(&lk.waiters);
    inv.key(broker.inflight_of(identity, token))
        .key(k.limits_registry())
        .key(k.slots(identity));
    inv.arg(default_limit)
        .arg(&hold.holder)
        .arg(payload.jid())
        .arg(&token.raw);
    inv.arg(entry).arg(keys::encode(full)).arg(hold.record());
    broker::shard_part(k, &mut inv, token);
    let r: i64 = broker.invoke(&inv).await?;
    Ok(match r {
        1 => Acquired::Slot(hold),
        0 => Acquired::Parked,
        _ => Acquired::Lost,
    })
}

/// Sets a key's limit at runtime (`None` = back to the declared `default`), and
/// releases waiters into the new free slots. Returns how many were released.
pub async fn set_limit(
    broker: &RedisBroker,
    full: &str,
    limit: Option<u32>,
    default: u32,
) -> Result<u64> {
    let k = broker.keys();
    let lk = k.limit(full);
    let mut inv = broker::SLOT_SET.prepare_invoke();
    inv.key(&lk.limit)
        .key(&lk.holders)
        .key(&lk.reserved)
        .key(&lk.waiters)
        .key(k.limits_registry());
    inv.arg(limit.map(|l| l.to_string()).unwrap_or_default());
    inv.arg(default)
        .arg(broker::RESERVATION_TTL.as_millis() as u64)
        .arg(keys::encode(full));
    let (qp, wp) = k.queue_and_wake_prefixes();
    inv.arg(qp).arg(wp);
    broker.invoke(&inv).await
}

/// One slot-limited key as `fairjob-worker limits` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitInfo {
    /// `<Class>:<key>` or `group:<group>:<key>`.
    pub key: String,
    /// The runtime limit, if one is set (otherwise the job's declared default applies).
    pub limit: Option<u32>,
    /// Slots held.
    pub running: u64,
    /// Slots reserved for released waiters not started yet.
    pub reserved: u64,
    /// Jobs in the lock-wait list.
    pub waiting: u64,
}

/// Every key that has been used, with its state.
pub async fn list(broker: &RedisBroker) -> Result<Vec<LimitInfo>> {
    let k = broker.keys();
    let mut members: Vec<String> = broker
        .query(redis::cmd("SMEMBERS").arg(k.limits_registry()))
        .await?;
    members.sort();
    let mut out = Vec::with_capacity(members.len());
    for m in members {
        let Some(full) = keys::decode(&m) else {
            continue;
        };
        let lk = k.limit(&full);
        let mut pipe = redis::pipe();
        pipe.get(&lk.limit)
            .zcard(&lk.holders)
            .hlen(&lk.reserved)
            .llen(&lk.waiters);
        let (limit, running, reserved, waiting): (Option<u32>, u64, u64, u64) =
            broker.pipe(&pipe).await?;
        out.push(LimitInfo {
            key: full,
            limit,
            running,
            reserved,
            waiting,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_per_class_unless_grouped() {
        let l = ConcurrencyLimit {
            limit: 3,
            group: None,
        };
        assert_eq!(full_key("Webhook", &l, "42"), "Webhook:42");
        let g = ConcurrencyLimit {
            limit: 3,
            group: Some("endpoint"),
        };
        assert_eq!(full_key("Webhook", &g, "42"), "group:endpoint:42");
    }

    #[test]
    fn waiter_fields_are_length_prefixed() {
        let mut out = Vec::new();
        field(&mut out, b"p");
        field(&mut out, b"a:b\n c");
        assert_eq!(out, b"1:p6:a:b\n c");
    }

    #[test]
    fn slot_records_round_trip() {
        let h = SlotHold {
            full_key: "A:k|x".into(),
            holder: "id|7|q".into(),
            default_limit: 3,
        };
        let back = SlotHold::from_record("id", "7|q", &h.record()).unwrap();
        assert_eq!(back, h);
    }
}
