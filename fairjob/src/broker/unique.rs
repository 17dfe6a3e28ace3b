//! Unique jobs' locks as the push and finish scripts take and release them
//! (`scripts/lib_unique.lua`): [`UniqueLock`], the arguments a push passes;
//! [`UniqueHold`], a fetched job's lock to release; `unique_release.lua`;
//! and the capped list of refused duplicates that explain reads.

use super::RedisBroker;
use super::scripts::{Call, UNIQUE_RELEASE};
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
pub(crate) struct UniqueHold {
    /// The lock's queue (its cluster slot).
    pub queue: String,
    pub digest: String,
    /// The job's jid: only its own lock is released.
    pub jid: String,
    pub until: crate::wire::UniqueUntil,
}

impl UniqueHold {
    /// The lock a fetched payload holds, if it is a unique job's.
    pub(crate) fn of(payload: &crate::wire::Payload) -> Option<UniqueHold> {
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
