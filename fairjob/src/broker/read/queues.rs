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

    /// Queues that workers declared tenant-sharded.
    pub async fn sharded_queues(&self) -> Result<Vec<String>> {
        self.query(redis::cmd("SMEMBERS").arg(self.keys.sharded_queues()))
            .await
    }

    /// `maxmemory-policy` (on a cluster, the first primary's that is not
    /// `noeviction`, so a warning names it), or `None` when no server says.
    pub(crate) async fn maxmemory_policy(&self) -> Result<Option<String>> {
        let mut found = None;
        for node in self
            .primaries()
            .await?
            .map_or(vec![None], |ns| ns.into_iter().map(Some).collect())
        {
            let v: Vec<String> = self
                .query_on_node(
                    redis::cmd("CONFIG").arg("GET").arg("maxmemory-policy"),
                    node.as_ref(),
                )
                .await?;
            match v.get(1) {
                Some(p) if p != "noeviction" => return Ok(Some(p.clone())),
                Some(p) => found = Some(p.clone()),
                None => {}
            }
        }
        Ok(found)
    }
}

/// What the server says about its ability to take writes (`INFO`, and
/// `CONFIG GET` where an ACL allows it): raw facts, judged in `inspect`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServerFacts {
    /// `loading:1`: loading its dataset.
    pub loading: bool,
    /// `role:slave`: a replica.
    pub replica: bool,
    /// `rdb_last_bgsave_status:err`: the last snapshot failed.
    pub bgsave_failed: bool,
    /// `stop-writes-on-bgsave-error` and whether any `save` point is set:
    /// `None` when `CONFIG GET` is refused.
    pub stops_writes_on_failed_save: Option<bool>,
    /// `used_memory`, bytes.
    pub used_memory: u64,
    /// `maxmemory`, bytes (0: no limit).
    pub maxmemory: u64,
    /// `maxmemory_policy`.
    pub maxmemory_policy: String,
}

impl RedisBroker {
    /// The facts of [`ServerFacts`] (on a cluster, one node's). Fails with
    /// the server's refusal when it cannot even answer `INFO` (busy).
    pub async fn server_facts(&self) -> Result<ServerFacts> {
        let info: String = self.query(&redis::cmd("INFO")).await?;
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(str::trim)
                .unwrap_or_default()
                .to_owned()
        };
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        pipe.cmd("CONFIG")
            .arg("GET")
            .arg("stop-writes-on-bgsave-error");
        pipe.cmd("CONFIG").arg("GET").arg("save");
        let got: Vec<redis::RedisResult<Vec<String>>> = self.pipe(&pipe).await.unwrap_or_default();
        let value = |i: usize| match got.get(i) {
            Some(Ok(v)) => v.get(1).cloned(),
            _ => None,
        };
        let stops = match (value(0), value(1)) {
            (Some(stop), Some(save)) => Some(stop == "yes" && !save.trim().is_empty()),
            _ => None,
        };
        Ok(ServerFacts {
            loading: field("loading") == "1",
            replica: field("role") == "slave",
            bgsave_failed: field("rdb_last_bgsave_status") == "err",
            stops_writes_on_failed_save: stops,
            used_memory: field("used_memory").parse().unwrap_or(0),
            maxmemory: field("maxmemory").parse().unwrap_or(0),
            maxmemory_policy: field("maxmemory_policy"),
        })
    }
}
