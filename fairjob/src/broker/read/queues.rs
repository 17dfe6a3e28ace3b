//! The queues Redis knows and the cheap facts about each: names (plain and
//! sharded), length and oldest entry, the next scheduled jobs, and the
//! counters the overview shows.

use std::collections::BTreeSet;

use crate::broker::RedisBroker;
use crate::error::Result;

/// Queues a read covers at most.
pub const MAX_QUEUES: usize = 200;

/// The counters beside the queues: the sets' sizes, processed and failed
/// totals and the registered processes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    /// `schedule` size.
    pub scheduled: u64,
    /// `retry` size.
    pub retries: u64,
    /// `dead` size.
    pub dead: u64,
    /// `stat:processed`.
    pub processed: u64,
    /// `stat:failed`.
    pub failed: u64,
    /// Entries of Sidekiq's `processes` set.
    pub processes: u64,
}

impl RedisBroker {
    /// Every queue's name (plain and sharded), at most [`MAX_QUEUES`], the
    /// sharded ones, and whether there were more.
    pub async fn queue_names(&self) -> Result<(Vec<String>, BTreeSet<String>, bool)> {
        let plain: BTreeSet<String> = self
            .query(redis::cmd("SMEMBERS").arg(self.keys.queues()))
            .await?;
        let sharded: BTreeSet<String> = self.sharded_queues().await?.into_iter().collect();
        let mut names: Vec<String> = plain.union(&sharded).cloned().collect();
        let truncated = names.len() > MAX_QUEUES;
        names.truncate(MAX_QUEUES);
        Ok((names, sharded, truncated))
    }

    /// Each queue's length and its oldest entry (`LLEN`, `LINDEX -1`), in
    /// one pipeline: two cheap reads per queue, never a range.
    pub async fn queue_heads(&self, names: &[String]) -> Result<Vec<(u64, Option<Vec<u8>>)>> {
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for q in names {
            let list = self.keys.queue(q);
            pipe.llen(&list).lindex(&list, -1);
        }
        self.pipe(&pipe).await
    }

    /// The payloads of the next `n` scheduled jobs (next due first).
    pub async fn scheduled_head(&self, n: usize) -> Result<Vec<Vec<u8>>> {
        self.query(
            redis::cmd("ZRANGE")
                .arg(self.keys.schedule())
                .arg(0)
                .arg(n.max(1) - 1),
        )
        .await
    }

    /// The sets' sizes, the processed and failed totals and the number of
    /// registered processes, in one pipeline.
    pub async fn totals(&self) -> Result<Totals> {
        let k = &self.keys;
        let mut pipe = redis::pipe();
        pipe.zcard(k.schedule())
            .zcard(k.retry())
            .zcard(k.dead())
            .get(k.stat_processed(None))
            .get(k.stat_failed(None))
            .scard(k.processes());
        type Counts = (u64, u64, u64, Option<u64>, Option<u64>, u64);
        let (scheduled, retries, dead, processed, failed, processes): Counts =
            self.pipe(&pipe).await?;
        Ok(Totals {
            scheduled,
            retries,
            dead,
            processed: processed.unwrap_or(0),
            failed: failed.unwrap_or(0),
            processes,
        })
    }

    /// `maxmemory-policy` as the overview warns about it: `Ok(None)` when
    /// every server says `noeviction`, `Err` when it cannot be read.
    pub async fn eviction_policy(&self) -> Result<Option<String>> {
        Ok(self.maxmemory_policy().await?.filter(|p| p != "noeviction"))
    }
}
