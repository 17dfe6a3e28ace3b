//! Wait statistics (enqueue → start) per queue and tenant, and jobs
//! processed and failed per queue, over the last minutes, as workers flush
//! them with their heartbeats (see `broker::stats`). Each read is a bounded
//! number of `HMGET`s and `ZREVRANGE`s of per-minute keys: minutes × queues
//! (× the tenants asked about); no walk over tenants.
//!
//! The dashboard's overview and tenant pages read these; the metrics
//! exporter is meant to read the same views.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::broker::RedisBroker;
use crate::broker::fetch::epoch_minute;
use crate::broker::keys::{decode, encode};
use crate::broker::stats::WaitHistogram;
use crate::error::Result;

/// The window the dashboard calls "recent": the last 15 minutes.
pub const RECENT_MINUTES: u64 = 15;

/// The longest window a view reads (the keys expire after about an hour).
pub const MAX_MINUTES: u64 = 60;

/// Waits of one queue (and tenant) over a window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WaitSummary {
    /// The queue.
    pub queue: String,
    /// The tenant (`None`: the queue as a whole, or jobs without a tenant
    /// when [`WaitSummary::whole_queue`] is false).
    pub tenant: Option<String>,
    /// Whether this is the whole queue.
    pub whole_queue: bool,
    /// Minutes the window spans (the current one included).
    pub minutes: u64,
    /// Jobs that started in the window.
    pub started: u64,
    /// Median wait, ms.
    pub p50_ms: Option<u64>,
    /// 95th percentile, ms.
    pub p95_ms: Option<u64>,
    /// Mean, ms.
    pub mean_ms: Option<u64>,
    /// Longest, ms.
    pub max_ms: Option<u64>,
    /// The histogram itself.
    #[serde(skip)]
    pub histogram: WaitHistogram,
}

impl WaitSummary {
    fn of(queue: &str, tenant: Option<&str>, whole: bool, minutes: u64, h: WaitHistogram) -> Self {
        WaitSummary {
            queue: queue.to_owned(),
            tenant: tenant.map(str::to_owned),
            whole_queue: whole,
            minutes,
            started: h.count,
            p50_ms: h.quantile(0.5),
            p95_ms: h.quantile(0.95),
            mean_ms: h.mean(),
            max_ms: (h.count > 0).then_some(h.max_ms),
            histogram: h,
        }
    }
}

/// A tenant's longest recent wait in a queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LongWait {
    /// The queue.
    pub queue: String,
    /// The tenant (`None`: jobs without one).
    pub tenant: Option<String>,
    /// Its longest wait in the window, ms.
    pub max_ms: u64,
}

/// Jobs finished in one queue over a window.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct FinishedCounts {
    /// Processed (succeeded or failed).
    pub processed: u64,
    /// Failed.
    pub failed: u64,
}

/// Per queue, per minute, jobs finished (oldest minute first).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Throughput {
    /// The epoch minute of the first entry of each series.
    pub first_minute: u64,
    /// Per queue, one entry per minute.
    pub per_queue: BTreeMap<String, Vec<FinishedCounts>>,
}

impl Throughput {
    /// A queue's jobs finished over the last `minutes` complete minutes
    /// (the current, partial minute left out).
    pub fn last(&self, queue: &str, minutes: usize) -> FinishedCounts {
        let mut f = FinishedCounts::default();
        if let Some(series) = self.per_queue.get(queue) {
            let complete = &series[..series.len().saturating_sub(1)];
            for m in complete.iter().rev().take(minutes) {
                f.processed += m.processed;
                f.failed += m.failed;
            }
        }
        f
    }

    /// All queues' processed jobs per minute, oldest first.
    pub fn total_series(&self) -> Vec<u64> {
        let len = self.per_queue.values().map(Vec::len).max().unwrap_or(0);
        (0..len)
            .map(|i| {
                self.per_queue
                    .values()
                    .map(|s| s.get(i).map_or(0, |f| f.processed))
                    .sum()
            })
            .collect()
    }
}

fn minutes_back(minutes: u64) -> Vec<u64> {
    let now = epoch_minute();
    let minutes = minutes.clamp(1, MAX_MINUTES);
    (0..minutes).rev().map(|m| now.saturating_sub(m)).collect()
}

impl RedisBroker {
    /// Waits over the last `minutes` minutes, for each queue of `queues`:
    /// of `tenant` when given (`Some(None)`: jobs without a tenant), else
    /// of the queue as a whole.
    pub async fn waits(
        &self,
        queues: &[String],
        tenant: Option<Option<&str>>,
        minutes: u64,
    ) -> Result<Vec<WaitSummary>> {
        let mins = minutes_back(minutes);
        let prefix = match tenant {
            None => "*".to_owned(),
            Some(t) => t.map(encode).unwrap_or_default(),
        };
        let names = WaitHistogram::field_names(&prefix);
        let mut pipe = redis::pipe();
        for q in queues {
            for &m in &mins {
                pipe.cmd("HMGET").arg(self.keys.waits(q, m)).arg(&names);
                pipe.zscore(self.keys.wait_top(q, m), &prefix);
            }
        }
        if queues.is_empty() {
            return Ok(Vec::new());
        }
        let values: Vec<redis::Value> = self.pipe(&pipe).await?;
        let mut out = Vec::with_capacity(queues.len());
        let mut it = values.into_iter();
        for q in queues {
            let mut h = WaitHistogram::default();
            for _ in &mins {
                let (Some(fields), Some(max)) = (it.next(), it.next()) else {
                    break;
                };
                let fields: Vec<Option<u64>> =
                    redis::FromRedisValue::from_redis_value(fields).unwrap_or_default();
                let max: Option<f64> = redis::FromRedisValue::from_redis_value(max).unwrap_or(None);
                h.merge(&WaitHistogram::from_values(
                    &fields,
                    max.unwrap_or(0.0) as u64,
                ));
            }
            let t = tenant.flatten();
            out.push(WaitSummary::of(
                q,
                t,
                tenant.is_none(),
                mins.len() as u64,
                h,
            ));
        }
        Ok(out)
    }

    /// The `n` longest waits of any tenant in `queues` over the last
    /// `minutes` minutes (each queue's top `n` per minute, merged).
    pub async fn longest_waits(
        &self,
        queues: &[String],
        minutes: u64,
        n: usize,
    ) -> Result<Vec<LongWait>> {
        if queues.is_empty() || n == 0 {
            return Ok(Vec::new());
        }
        let mins = minutes_back(minutes);
        let mut pipe = redis::pipe();
        for q in queues {
            for &m in &mins {
                pipe.cmd("ZRANGE")
                    .arg(self.keys.wait_top(q, m))
                    .arg(0)
                    .arg(n)
                    .arg("REV")
                    .arg("WITHSCORES");
            }
        }
        let found: Vec<Vec<(String, f64)>> = self.pipe(&pipe).await?;
        let mut best: BTreeMap<(String, String), u64> = BTreeMap::new();
        for (i, rows) in found.into_iter().enumerate() {
            let q = &queues[i / mins.len()];
            for (member, ms) in rows {
                if member == "*" {
                    continue;
                }
                let e = best.entry((q.clone(), member)).or_default();
                *e = (*e).max(ms as u64);
            }
        }
        let mut all: Vec<LongWait> = best
            .into_iter()
            .map(|((queue, t), max_ms)| LongWait {
                queue,
                tenant: (!t.is_empty()).then(|| decode(&t).unwrap_or(t)),
                max_ms,
            })
            .collect();
        all.sort_by_key(|w| std::cmp::Reverse(w.max_ms));
        all.truncate(n);
        Ok(all)
    }

    /// Tenants with a recorded wait in `queues` over the last `minutes`
    /// minutes whose id contains `needle` (all when empty), at most `n`, by
    /// longest wait: the dashboard's list of recently active tenants.
    pub async fn recent_tenants(
        &self,
        queues: &[String],
        minutes: u64,
        needle: &str,
        n: usize,
    ) -> Result<Vec<LongWait>> {
        let all = self.longest_waits(queues, minutes, 500).await?;
        Ok(all
            .into_iter()
            .filter(|w| {
                needle.is_empty() || w.tenant.as_deref().is_some_and(|t| t.contains(needle))
            })
            .take(n)
            .collect())
    }

    /// Jobs processed and failed per queue and minute over the last
    /// `minutes` minutes (the current one included, last).
    pub async fn throughput(&self, queues: &[String], minutes: u64) -> Result<Throughput> {
        let mins = minutes_back(minutes);
        let mut pipe = redis::pipe();
        let fields: Vec<String> = queues
            .iter()
            .flat_map(|q| {
                let e = encode(q);
                [format!("{e}|p"), format!("{e}|f")]
            })
            .collect();
        let mut out = Throughput {
            first_minute: mins[0],
            per_queue: queues.iter().map(|q| (q.clone(), Vec::new())).collect(),
        };
        if queues.is_empty() {
            return Ok(out);
        }
        for &m in &mins {
            pipe.cmd("HMGET")
                .arg(self.keys.queue_counts(m))
                .arg(&fields);
        }
        let found: Vec<Vec<Option<u64>>> = self.pipe(&pipe).await?;
        for row in found {
            for (i, q) in queues.iter().enumerate() {
                let f = FinishedCounts {
                    processed: row.get(2 * i).copied().flatten().unwrap_or(0),
                    failed: row.get(2 * i + 1).copied().flatten().unwrap_or(0),
                };
                out.per_queue.get_mut(q).expect("queue listed").push(f);
            }
        }
        Ok(out)
    }
}
