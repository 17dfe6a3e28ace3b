//! The scheduler's steps in Redis: claim due entries of `schedule` or `retry`
//! into the set's promoting record under a lease (`promote.lua`), then, per
//! entry, drop the claim or bury the entry in `dead`. The push of a claimed
//! entry removes its claim in the same step (`push.rs`).

use std::time::Duration;

use super::RedisBroker;
use super::push::ZSet;
use super::scripts::PROMOTE;
use crate::error::Result;

/// The sets the scheduler promotes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Due {
    /// `schedule`: `perform_in` / `perform_at` jobs.
    Scheduled,
    /// `retry`: failed jobs waiting for their next attempt.
    Retry,
}

impl RedisBroker {
    /// The promoting record of `set`.
    pub(crate) fn promoting_record(&self, set: Due) -> String {
        let source = match set {
            Due::Scheduled => self.keys.schedule(),
            Due::Retry => self.keys.retry(),
        };
        self.keys.promoting(&source)
    }

    /// Claims up to `batch` due entries of `set` (and claims whose lease
    /// expired) for `lease`; returns the claimed entries.
    pub(crate) async fn promote(
        &self,
        set: Due,
        batch: usize,
        lease: Duration,
        clock_offset: i64,
    ) -> Result<Vec<Vec<u8>>> {
        let source = match set {
            Due::Scheduled => self.keys.schedule(),
            Due::Retry => self.keys.retry(),
        };
        let record = self.keys.promoting(&source);
        let mut inv = PROMOTE.call();
        inv.key(&source).key(&record);
        inv.arg(batch)
            .arg(lease.as_millis() as u64)
            .arg(clock_offset);
        self.invoke(&inv).await
    }

    /// Stages `members` in `record` unless they are there already (a relay's
    /// claim before its push; see [`super::keys::Keys::staged`]).
    pub(crate) async fn stage_claims(
        &self,
        record: &str,
        members: &[String],
        now_ms: u64,
    ) -> Result<()> {
        if members.is_empty() {
            return Ok(());
        }
        let mut cmd = redis::cmd("ZADD");
        cmd.arg(record).arg("NX");
        for m in members {
            cmd.arg(now_ms).arg(m.as_bytes());
        }
        let _: i64 = self.query(&cmd).await?;
        Ok(())
    }

    /// Forgets once marks (queue, member) in the queues' slots
    /// (`Keys::pushed`): the relay that asked for them has noted its pushes.
    pub(crate) async fn forget_pushed(&self, marks: &[(String, String)]) -> Result<()> {
        let mut by_queue: Vec<(&str, Vec<&str>)> = Vec::new();
        for (queue, member) in marks {
            match by_queue.iter_mut().find(|(q, _)| q == queue) {
                Some((_, members)) => members.push(member),
                None => by_queue.push((queue, vec![member])),
            }
        }
        for (queue, members) in by_queue {
            // One slot per queue: a command each, bounded chunks.
            for chunk in members.chunks(500) {
                let _: i64 = self
                    .query(redis::cmd("ZREM").arg(self.keys.pushed(queue)).arg(chunk))
                    .await?;
            }
        }
        Ok(())
    }

    /// Drops a claim (a middleware stopped the job, or it was pushed).
    pub(crate) async fn drop_claim(&self, record: &str, member: &[u8]) -> Result<bool> {
        let removed: i64 = self
            .query(redis::cmd("ZREM").arg(record).arg(member))
            .await?;
        Ok(removed == 1)
    }

    /// Moves a claimed entry to `dead` as `entry`: written there first, then
    /// taken out of the promoting record (two keys in two cluster slots; the
    /// removal is the commit point); if another poller had already taken it,
    /// the dead entry is withdrawn again.
    pub(crate) async fn bury_claimed(
        &self,
        record: &str,
        member: &[u8],
        entry: &str,
        clock_offset: i64,
    ) -> Result<()> {
        self.zset_add(ZSet::Dead, 0.0, entry, clock_offset).await?;
        if !self.drop_claim(record, member).await? {
            self.zset_remove(ZSet::Dead, entry).await?;
        }
        Ok(())
    }
}
