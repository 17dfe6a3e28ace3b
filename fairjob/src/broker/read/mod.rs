//! Raw, bounded reads of fairjob's state in Redis: counts, rows and payloads,
//! for the views in [`crate::inspect`] (the CLI, the dashboard and the
//! metrics sampler read through those). No sentences and no rule matching
//! here: a read returns what Redis holds, and the view above explains it.
//!
//! Every read is a bounded number of cheap commands: counts Redis keeps
//! (`LLEN`, `ZCARD`, `HLEN`, `SCARD`) are read, lists of things come in pages
//! of at most [`MAX_READ_ROWS`] rows with a cursor to resume, and nothing uses
//! `KEYS`. A walk over a set that can be large (tenants of a sharded queue,
//! reroute windows) is a resumable scan step that says how far it got.

mod classes;
mod cron;
mod limits;
mod lists;
mod processes;
mod queues;
mod rates;
mod sets;
mod shards;
mod unique;
mod waits;
mod windows;
mod workflow;

use std::collections::BTreeSet;

use serde::Serialize;

pub use classes::MAX_CLASSES;
pub use cron::CronStateRow;
pub(crate) use limits::waiter_fields;
pub use limits::{LimitDetail, LimitPage, LimitRow, SlotHolder, SlotWaiter};
pub use processes::ProcessRecord;
pub use queues::{MAX_QUEUES, ServerFacts, Totals};
pub use rates::{RatePage, RateRow};
pub use shards::{SHARE_MINUTES, ShardRow, ShardView, tenant_name};
pub use unique::{RECENT_REJECTIONS, Rejection, UniqueLockPage, UniqueLockRow};
pub use waits::{FinishedCounts, LongWait, MAX_MINUTES, RECENT_MINUTES, Throughput, WaitSummary};
pub use workflow::{StepPage, StepRow};

use super::{RedisBroker, keys};
use crate::error::Result;

/// The most rows one read returns.
pub const MAX_READ_ROWS: usize = 500;

/// How many tenants of a sharded queue (or slot keys) a count walks before it
/// reports its total as a lower bound.
pub const OVERVIEW_TENANT_CAP: usize = 10_000;

/// Where a paged view starts: `cursor` 0 is the beginning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Page {
    /// Resume point (from the previous page's `next`).
    pub cursor: u64,
    /// Rows wanted (capped at [`MAX_READ_ROWS`]).
    pub count: usize,
}

impl Page {
    /// The first page of `count` rows.
    pub fn first(count: usize) -> Page {
        Page {
            cursor: 0,
            count: count.clamp(1, MAX_READ_ROWS),
        }
    }
}

/// The state of every queue, the sets and the fleet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Overview {
    /// Per queue, by name.
    pub queues: Vec<QueueRow>,
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
    /// Jobs recovered from dead workers.
    pub recovered: u64,
    /// Stale completions fenced.
    pub fenced: u64,
    /// Registered worker processes.
    pub workers: Vec<WorkerRow>,
}

/// One queue's size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QueueRow {
    /// The queue's name.
    pub name: String,
    /// Jobs waiting: the list, plus for a sharded queue its tenants' lists.
    pub size: u64,
    /// Whether `size` is exact (a sharded queue with more than
    /// [`OVERVIEW_TENANT_CAP`] tenants is summed over that many only).
    pub size_exact: bool,
    /// For a sharded queue: tenants with pending or running jobs.
    pub tenants: Option<u64>,
    /// Entries in the list itself (for a sharded queue: its inbox).
    pub list: u64,
}

/// A registered worker process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WorkerRow {
    /// `host:pid:random`.
    pub identity: String,
    /// Whether its lease is alive.
    pub alive: bool,
    /// Jobs in its in-progress records.
    pub in_progress: u64,
}

impl RedisBroker {
    /// How many entries `key` holds (LLEN, ZCOUNT of finite scores, HLEN, SCARD by its type; 0
    /// for a missing key or a string).
    pub async fn key_len(&self, key: &str) -> Result<u64> {
        let kind: String = self.query(redis::cmd("TYPE").arg(key)).await?;
        let cmd = match kind.as_str() {
            "list" => "LLEN",
            // Members at +inf (the dispatch order's mark,
            // policy::dispatch::state::READY_MARK) are not counted.
            "zset" => {
                return self
                    .query(redis::cmd("ZCOUNT").arg(key).arg("-inf").arg("(+inf"))
                    .await;
            }
            "hash" => "HLEN",
            "set" => "SCARD",
            _ => return Ok(0),
        };
        self.query(redis::cmd(cmd).arg(key)).await
    }

    /// `key`'s time to live in seconds (-1: none, -2: no such key).
    pub async fn key_ttl(&self, key: &str) -> Result<i64> {
        self.query(redis::cmd("TTL").arg(key)).await
    }

    /// Every queue's size, the sets, the counters and the workers.
    pub async fn overview(&self) -> Result<Overview> {
        let k = &self.keys;
        let plain: BTreeSet<String> = self.query(redis::cmd("SMEMBERS").arg(k.queues())).await?;
        let sharded: BTreeSet<String> = self.sharded_queues().await?.into_iter().collect();
        let names: Vec<&String> = plain.union(&sharded).collect();
        let mut pipe = redis::pipe();
        for q in &names {
            pipe.llen(k.queue(q));
        }
        pipe.zcard(k.schedule())
            .zcard(k.retry())
            .zcard(k.dead())
            .get(k.stat_processed(None))
            .get(k.stat_failed(None))
            .get(k.stat("recovered"))
            .get(k.stat("fenced"));
        let values: Vec<redis::Value> = self.pipe(&pipe).await?;
        let (lists, rest) = values.split_at(names.len());
        let num = |v: &redis::Value| -> u64 {
            redis::FromRedisValue::from_redis_value_ref(v)
                .ok()
                .flatten()
                .unwrap_or(0)
        };
        let mut queues = Vec::with_capacity(names.len());
        for (q, list) in names.iter().zip(lists) {
            let list = num(list);
            let mut row = QueueRow {
                name: (*q).clone(),
                size: list,
                size_exact: true,
                tenants: None,
                list,
            };
            if sharded.contains(*q) {
                let (tenants, pending, exact) = self.shard_pending(q).await?;
                row.tenants = Some(tenants);
                row.size += pending;
                row.size_exact = exact;
            }
            queues.push(row);
        }
        let mut workers = Vec::new();
        for (identity, alive) in self.workers_alive().await? {
            let in_progress = self.in_progress(&identity).await?;
            workers.push(WorkerRow {
                identity,
                alive,
                in_progress,
            });
        }
        Ok(Overview {
            queues,
            scheduled: num(&rest[0]),
            retries: num(&rest[1]),
            dead: num(&rest[2]),
            processed: num(&rest[3]),
            failed: num(&rest[4]),
            recovered: num(&rest[5]),
            fenced: num(&rest[6]),
            workers,
        })
    }

    /// One `SSCAN` step of a registry of encoded keys (slot limits, rate
    /// limiters): the next cursor (0 at the end) and the full keys found,
    /// decoded, sorted and without the repeats a `SSCAN` may return.
    pub(super) async fn registry_step(
        &self,
        registry: &str,
        cursor: u64,
        count: usize,
    ) -> Result<(u64, Vec<String>)> {
        let (next, members) = self.sscan(registry, cursor, count).await?;
        let mut keys: Vec<String> = members.iter().filter_map(|m| keys::decode(m)).collect();
        keys.sort();
        keys.dedup();
        Ok((next, keys))
    }

    /// A sharded queue's tenant count and pending jobs summed over at most
    /// [`OVERVIEW_TENANT_CAP`] tenants (`exact` when that was all of them).
    async fn shard_pending(&self, queue: &str) -> Result<(u64, u64, bool)> {
        let tenants = self.shard_tenant_count(queue).await?;
        let mut pending = 0;
        let mut seen = 0usize;
        let mut cursor = 0u64;
        loop {
            let (next, batch) = self
                .shard_pending_step(queue, cursor, MAX_READ_ROWS)
                .await?;
            pending += batch.iter().map(|(_, n)| n).sum::<u64>();
            seen += batch.len();
            cursor = next;
            if cursor == 0 {
                return Ok((tenants, pending, true));
            }
            if seen >= OVERVIEW_TENANT_CAP {
                return Ok((tenants, pending, false));
            }
        }
    }
}
