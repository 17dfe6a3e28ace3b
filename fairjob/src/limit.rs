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
//!
//! Layer 3: the naming and parking policy; the scripts are the broker's.

use crate::broker::{Acquired, RedisBroker, SlotRequest, Token};
use crate::error::Result;
use crate::wire::{ConcurrencyLimit, Payload, fields};

/// The full key of a job's slot limit.
pub fn full_key(class: &str, limit: &ConcurrencyLimit, key: &str) -> String {
    match limit.group {
        Some(g) => format!("group:{g}:{key}"),
        None => format!("{class}:{key}"),
    }
}

/// The declared limit of a full key (`Class:key` or `group:name:key`) among
/// `jobs` (class and slot limit of each job type), if one declares it.
pub fn declared_limit<'a>(
    jobs: impl IntoIterator<Item = (&'a str, &'a ConcurrencyLimit)>,
    full: &str,
) -> Option<u32> {
    jobs.into_iter().find_map(|(class, c)| {
        let matches = match c.group {
            Some(g) => full
                .strip_prefix("group:")
                .and_then(|r| r.strip_prefix(g))
                .is_some_and(|r| r.starts_with(':')),
            None => full.strip_prefix(class).is_some_and(|r| r.starts_with(':')),
        };
        matches.then_some(c.limit)
    })
}

/// The payload a waiting job is parked with (in a slot's or a rate
/// limiter's list), stamped with why and when (`reason` is `"slot"` or
/// `"rate_limit"`: the perform span's wait reason): a released waiter of a
/// sharded queue re-enters through the inbox, and the marker puts it at the
/// front of its tenant's list there.
pub(crate) fn parked_payload(payload: &Payload, token: &Token, reason: &str) -> String {
    let mut p = payload.clone();
    p.set(fields::PARKED, reason);
    p.set(fields::PARKED_AT, crate::wire::now_f64());
    if token.is_sharded() {
        p.set(fields::SLOT_RELEASED, true);
    }
    p.to_json()
}

/// Takes a slot of `full` for a fetched job of `identity`, or parks it.
pub(crate) async fn acquire(
    broker: &RedisBroker,
    identity: &str,
    token: &Token,
    payload: &Payload,
    full: &str,
    default_limit: u32,
) -> Result<Acquired> {
    let parked = parked_payload(payload, token, "slot");
    broker
        .slot_acquire(
            identity,
            token,
            SlotRequest {
                full_key: full,
                default_limit,
                jid: &payload.jid(),
                parked_payload: &parked,
            },
        )
        .await
}

/// Sets a key's limit at runtime (`None` = back to the declared `default`), and
/// releases waiters into the new free slots. Returns how many were released.
pub async fn set_limit(
    broker: &RedisBroker,
    full: &str,
    limit: Option<u32>,
    default: u32,
) -> Result<u64> {
    broker.set_slot_limit(full, limit, default).await
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
        let jobs = [("Webhook", &l), ("Other", &g)];
        assert_eq!(declared_limit(jobs, "Webhook:42"), Some(3));
        assert_eq!(declared_limit(jobs, "group:endpoint:x:y"), Some(3));
        assert_eq!(declared_limit(jobs, "Webhooks:42"), None);
        assert_eq!(declared_limit(jobs, "group:endpoints:1"), None);
    }
}
