//! Unique jobs' locks as the push and finish scripts take and release them
//! (`scripts/lib/unique.lua`): [`UniqueLock`], the arguments a push passes;
//! [`UniqueHold`], a fetched job's lock to release; `unique_release.lua`;
//! and the capped list of refused duplicates that explain reads.

use super::RedisBroker;
use super::scripts::{Call, UNIQUE_RELEASE, UNIQUE_TAKE};
use crate::error::Result;

/// A unique job's lock, as a push script takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UniqueLock {
    /// `Keys::unique_prefix` of the lock's queue.
    pub prefix: String,
    pub digest: String,
    /// The jid that takes it.
    pub jid: String,
    pub ttl_ms: u64,
    /// Replace a waiting holder instead of refusing.
    pub replace: bool,
}

/// A fetched unique job's lock, to release when the job ends (an ack or a
/// burial) or, for `until = "start"`, when it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UniqueHold {
    /// The lock's queue (its cluster slot).
    pub queue: String,
    /// The lock's digest (its key under the queue's unique prefix).
    pub digest: String,
    /// The job's jid: only its own lock is released.
    pub jid: String,
    /// When the lock goes (at the start or at the end).
    pub until: crate::wire::UniqueUntil,
}

impl UniqueHold {
    /// The lock a fetched payload holds, if it is a unique job's.
    pub fn of(payload: &crate::wire::Payload) -> Option<UniqueHold> {
        let spec = crate::wire::UniqueSpec::of(payload)?;
        Some(UniqueHold {
            queue: spec.queue,
            digest: spec.digest,
            jid: payload.jid(),
            until: spec.until,
        })
    }
}

impl RedisBroker {
    /// The Redis key of a held lock.
    pub(crate) fn unique_key(&self, hold: &UniqueHold) -> String {
        format!("{}{}", self.keys.unique_prefix(&hold.queue), hold.digest)
    }
}

impl UniqueLock {
    /// The lock's Redis key.
    pub(crate) fn key(&self) -> String {
        format!("{}{}", self.prefix, self.digest)
    }
}

/// What a lock taken alone (`unique_take.lua`) found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Taken {
    /// Taken (or already held by the jid).
    Ok,
    /// Held by `holder`, which waits as `waiting` (replace mode) if known.
    Held {
        holder: String,
        waiting: Option<String>,
    },
}

/// `payload` with its `"jid":"<from>"` changed to `<to>` (as
/// `lib/unique.lua`'s `unique_swap_jid`).
pub(crate) fn swap_jid(payload: &str, from: &str, to: &str) -> String {
    payload.replacen(
        &format!(r#""jid":"{from}""#),
        &format!(r#""jid":"{to}""#),
        1,
    )
}

impl RedisBroker {
    /// Takes a unique lock in a step of its own (the job is written after,
    /// in another slot): see `scripts/unique_take.lua`.
    pub(crate) async fn unique_take_alone(&self, lock: &UniqueLock) -> Result<Taken> {
        let mut inv = UNIQUE_TAKE.call();
        inv.key(lock.key())
            .arg("take")
            .arg(&lock.jid)
            .arg(lock.ttl_ms);
        let reply: Vec<String> = self.invoke(&inv).await?;
        Ok(match reply.as_slice() {
            [holder_kind, holder, waiting] if holder_kind == "held" => Taken::Held {
                holder: holder.clone(),
                waiting: Some(waiting.clone()).filter(|w| !w.is_empty()),
            },
            _ => Taken::Ok,
        })
    }

    /// Records where `jid`, the lock's holder, waits (replace mode) and
    /// restarts the lock's life; false if `jid` no longer holds it.
    pub(crate) async fn unique_waits_as(
        &self,
        lock: &UniqueLock,
        jid: &str,
        payload: &str,
    ) -> Result<bool> {
        let mut inv = UNIQUE_TAKE.call();
        inv.key(lock.key())
            .arg("waits")
            .arg(jid)
            .arg(lock.ttl_ms)
            .arg(payload.as_bytes());
        let n: i64 = self.invoke(&inv).await?;
        Ok(n == 1)
    }
}

impl UniqueLock {
    /// Appends the lock's arguments to a push or schedule call (`''` for none).
    pub(crate) fn args(lock: Option<&UniqueLock>, inv: &mut Call<'_>) {
        match lock {
            Some(u) => {
                inv.arg(&u.digest)
                    .arg(&u.prefix)
                    .arg(&u.jid)
                    .arg(u.ttl_ms)
                    .arg(if u.replace { "1" } else { "0" });
            }
            None => {
                inv.arg("");
            }
        }
    }
}

impl RedisBroker {
    /// Remembers refused duplicates for explain (newest first, the last
    /// [`RECENT_REJECTIONS`](super::read::RECENT_REJECTIONS) kept).
    pub(crate) async fn remember_rejections(
        &self,
        rejected: &[super::read::Rejection],
    ) -> Result<()> {
        if rejected.is_empty() {
            return Ok(());
        }
        #[cfg(feature = "testing")]
        if self.memory().is_some() {
            return Ok(());
        }
        let key = self.keys.unique_rejected();
        let entries: Vec<String> = rejected
            .iter()
            .map(|r| serde_json::to_string(r).expect("rejections encode"))
            .collect();
        let mut pipe = redis::pipe();
        pipe.lpush(&key, entries)
            .ignore()
            .ltrim(&key, 0, super::read::RECENT_REJECTIONS as isize - 1)
            .ignore();
        self.pipe::<()>(&pipe).await
    }

    /// Releases a unique job's lock if `jid` holds it (`None`: whoever
    /// does). Returns whether a lock was released.
    pub(crate) async fn unique_release(&self, lock: &str, jid: Option<&str>) -> Result<bool> {
        #[cfg(feature = "testing")]
        if let Some(store) = self.memory() {
            return Ok(store.unique_release(lock, jid));
        }
        let mut inv = UNIQUE_RELEASE.call();
        inv.key(lock).arg(jid.unwrap_or_default());
        let n: i64 = self.invoke(&inv).await?;
        Ok(n > 0)
    }
}
