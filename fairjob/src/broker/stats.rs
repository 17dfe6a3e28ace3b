//! Per-queue and per-tenant statistics a worker aggregates in memory and
//! flushes with its heartbeat (one pipeline, no round trip per job): how long
//! jobs waited from enqueue to start, per queue and tenant, as a histogram per
//! epoch minute, and jobs processed and failed per queue and minute. Each
//! minute's keys expire after [`WAIT_KEEP_SECS`], so the window rolls by
//! itself and the state is bounded by the tenants active in the last hour.
//!
//! The read side is `read::waits`, under the views of `inspect`.

use serde::Serialize;

use super::RedisBroker;
use super::keys::encode;
use crate::error::Result;

/// How long a minute of statistics is kept (a rolling hour, plus a margin).
pub const WAIT_KEEP_SECS: i64 = 3_900;

/// Buckets of a [`WaitHistogram`]: bucket 0 is under 1 ms, bucket `b ≥ 1`
/// holds waits in `[2^((b-1)/2), 2^(b/2))` ms, the last one everything from
/// about 4.6 hours on.
pub const WAIT_BUCKETS: usize = 48;

/// A histogram of waits, in milliseconds: count, sum, maximum and
/// half-octave buckets (percentiles within a factor of √2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WaitHistogram {
    /// Jobs counted.
    pub count: u64,
    /// Sum of their waits, ms.
    pub sum_ms: u64,
    /// The longest wait, ms.
    pub max_ms: u64,
    /// Counts per bucket (see [`WAIT_BUCKETS`]).
    #[serde(skip)]
    pub buckets: [u64; WAIT_BUCKETS],
}

impl Default for WaitHistogram {
    fn default() -> Self {
        WaitHistogram {
            count: 0,
            sum_ms: 0,
            max_ms: 0,
            buckets: [0; WAIT_BUCKETS],
        }
    }
}

/// The bucket of a wait of `ms` milliseconds.
pub fn wait_bucket(ms: u64) -> usize {
    if ms == 0 {
        return 0;
    }
    // 2 * log2(ms), rounded down: the half-octave ms falls in.
    let b = 1 + (2.0 * (ms as f64).log2()).floor() as usize;
    b.min(WAIT_BUCKETS - 1)
}

/// The lower and upper bound (ms) of bucket `b`.
fn bucket_bounds(b: usize) -> (f64, f64) {
    if b == 0 {
        return (0.0, 1.0);
    }
    (2f64.powf((b as f64 - 1.0) / 2.0), 2f64.powf(b as f64 / 2.0))
}

impl WaitHistogram {
    /// Counts one wait.
    pub fn record(&mut self, ms: u64) {
        self.count += 1;
        self.sum_ms = self.sum_ms.saturating_add(ms);
        self.max_ms = self.max_ms.max(ms);
        self.buckets[wait_bucket(ms)] += 1;
    }

    /// Adds another histogram's counts.
    pub fn merge(&mut self, other: &WaitHistogram) {
        self.count += other.count;
        self.sum_ms = self.sum_ms.saturating_add(other.sum_ms);
        self.max_ms = self.max_ms.max(other.max_ms);
        for (a, b) in self.buckets.iter_mut().zip(other.buckets.iter()) {
            *a += b;
        }
    }

    /// The `q`-quantile (0..=1) in ms, interpolated inside its bucket and
    /// never above the maximum; `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        let total: u64 = self.buckets.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = (q.clamp(0.0, 1.0) * total as f64).max(1.0);
        let mut seen = 0u64;
        for (b, &n) in self.buckets.iter().enumerate() {
            if n == 0 {
                continue;
            }
            if (seen + n) as f64 >= rank {
                let (lo, hi) = bucket_bounds(b);
                let within = (rank - seen as f64) / n as f64;
                let v = lo + (hi - lo) * within;
                return Some((v.round() as u64).min(self.max_ms));
            }
            seen += n;
        }
        Some(self.max_ms)
    }

    /// The mean wait in ms; `None` when empty.
    pub fn mean(&self) -> Option<u64> {
        (self.count > 0).then(|| self.sum_ms / self.count)
    }

    /// The histogram's fields as stored under `prefix` (`<prefix>|n` …).
    pub(crate) fn fields(&self, prefix: &str) -> Vec<(String, u64)> {
        let mut out = vec![
            (format!("{prefix}|n"), self.count),
            (format!("{prefix}|s"), self.sum_ms),
        ];
        for (b, &n) in self.buckets.iter().enumerate() {
            if n > 0 {
                out.push((format!("{prefix}|b{b}"), n));
            }
        }
        out
    }

    /// The field names [`WaitHistogram::fields`] may write under `prefix`, in
    /// the order [`WaitHistogram::from_values`] reads them.
    pub(crate) fn field_names(prefix: &str) -> Vec<String> {
        let mut out = vec![format!("{prefix}|n"), format!("{prefix}|s")];
        out.extend((0..WAIT_BUCKETS).map(|b| format!("{prefix}|b{b}")));
        out
    }

    /// Reads back the values of [`WaitHistogram::field_names`], with the
    /// maximum kept beside them (in the minute's `wait_top`).
    pub(crate) fn from_values(values: &[Option<u64>], max_ms: u64) -> WaitHistogram {
        let v = |i: usize| values.get(i).copied().flatten().unwrap_or(0);
        let mut h = WaitHistogram {
            count: v(0),
            sum_ms: v(1),
            max_ms,
            buckets: [0; WAIT_BUCKETS],
        };
        for (b, slot) in h.buckets.iter_mut().enumerate() {
            *slot = v(2 + b);
        }
        h
    }
}

/// What a worker flushes with one heartbeat.
#[derive(Debug, Clone, Default)]
pub struct StatsFlush {
    /// The epoch minute the samples are counted in.
    pub minute: u64,
    /// Waits per queue and tenant (`None`: jobs without a tenant).
    pub waits: Vec<(String, Option<String>, WaitHistogram)>,
    /// Waits counted for the queue as a whole only (tenants past the
    /// worker's cap of distinct tenants per flush).
    pub queue_only: Vec<(String, WaitHistogram)>,
    /// Per queue: jobs processed and failed since the last flush.
    pub finished: Vec<(String, u64, u64)>,
    /// Per tenant-sharded queue: jobs dispatched per (encoded) tenant since
    /// the last flush (the shard's per-minute dispatch counts, `served`), and
    /// the queue's total (`*`).
    pub dispatched: Vec<(String, Dispatched)>,
}

/// One tenant-sharded queue's dispatch counts in a flush.
#[derive(Debug, Clone, Default)]
pub struct Dispatched {
    /// Jobs dispatched per (encoded) tenant.
    pub tenants: Vec<(String, u64)>,
    /// The queue's total.
    pub total: u64,
}

impl StatsFlush {
    /// Nothing to write.
    pub fn is_empty(&self) -> bool {
        self.waits.is_empty()
            && self.queue_only.is_empty()
            && self.finished.is_empty()
            && self.dispatched.is_empty()
    }
}

impl RedisBroker {
    /// Increments a fairjob counter (`fenced`, `recovered`…).
    pub(crate) async fn count(&self, stat: &str, by: u64) -> Result<()> {
        if by > 0 {
            let _: i64 = self
                .query(redis::cmd("INCRBY").arg(self.keys.stat(stat)).arg(by))
                .await?;
        }
        Ok(())
    }

    /// Adds the writes of `flush` to a heartbeat's pipeline: HINCRBY per
    /// histogram field (per tenant and, under `*`, for the queue as a whole),
    /// the longest wait per tenant and for the queue (ZADD GT), processed and
    /// failed per queue, and each key's expiry.
    pub(crate) fn stats_writes(&self, pipe: &mut redis::Pipeline, flush: &StatsFlush) {
        let k = &self.keys;
        let mut totals: std::collections::BTreeMap<&str, WaitHistogram> = Default::default();
        let mut touched = std::collections::BTreeSet::new();
        for (queue, tenant, h) in &flush.waits {
            let key = k.waits(queue, flush.minute);
            let prefix = tenant.as_deref().map(encode).unwrap_or_default();
            for (field, n) in h.fields(&prefix) {
                pipe.hincr(&key, field, n).ignore();
            }
            let top = k.wait_top(queue, flush.minute);
            pipe.cmd("ZADD")
                .arg(&top)
                .arg("GT")
                .arg(h.max_ms)
                .arg(&prefix)
                .ignore();
            totals.entry(queue.as_str()).or_default().merge(h);
            touched.insert(queue.as_str());
        }
        for (queue, h) in &flush.queue_only {
            totals.entry(queue.as_str()).or_default().merge(h);
            touched.insert(queue.as_str());
        }
        for (queue, h) in &totals {
            let key = k.waits(queue, flush.minute);
            for (field, n) in h.fields("*") {
                pipe.hincr(&key, field, n).ignore();
            }
            pipe.cmd("ZADD")
                .arg(k.wait_top(queue, flush.minute))
                .arg("GT")
                .arg(h.max_ms)
                .arg("*")
                .ignore();
        }
        for queue in touched {
            for key in [
                k.waits(queue, flush.minute),
                k.wait_top(queue, flush.minute),
            ] {
                pipe.expire(key, WAIT_KEEP_SECS).ignore();
            }
        }
        if !flush.finished.is_empty() {
            let key = k.queue_counts(flush.minute);
            for (queue, processed, failed) in &flush.finished {
                let q = encode(queue);
                if *processed > 0 {
                    pipe.hincr(&key, format!("{q}|p"), *processed).ignore();
                }
                if *failed > 0 {
                    pipe.hincr(&key, format!("{q}|f"), *failed).ignore();
                }
            }
            pipe.expire(&key, WAIT_KEEP_SECS * 2).ignore();
        }
        for (queue, Dispatched { tenants, total }) in &flush.dispatched {
            let key = k.shard(queue).served(flush.minute);
            for (t, n) in tenants {
                pipe.hincr(&key, t, *n).ignore();
            }
            pipe.hincr(&key, "*", *total).ignore();
            pipe.expire(&key, SERVED_KEEP_SECS).ignore();
        }
    }
}

/// How long a sharded queue's per-minute dispatch counts are kept.
const SERVED_KEEP_SECS: i64 = 900;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_half_octaves() {
        assert_eq!(wait_bucket(0), 0);
        assert_eq!(wait_bucket(1), 1);
        assert_eq!(wait_bucket(2), 3);
        assert_eq!(wait_bucket(3), 4);
        assert_eq!(wait_bucket(1000), 20);
        assert_eq!(wait_bucket(u64::MAX), WAIT_BUCKETS - 1);
        for ms in [1u64, 5, 17, 999, 60_000] {
            let (lo, hi) = bucket_bounds(wait_bucket(ms));
            assert!(lo <= ms as f64 && (ms as f64) < hi, "{ms}: {lo}..{hi}");
        }
    }

    #[test]
    fn quantiles_come_within_a_bucket() {
        let mut h = WaitHistogram::default();
        for ms in 1..=1000 {
            h.record(ms);
        }
        let p50 = h.quantile(0.5).unwrap() as f64;
        let p95 = h.quantile(0.95).unwrap() as f64;
        assert!((500.0 / 1.42..=500.0 * 1.42).contains(&p50), "{p50}");
        assert!((950.0 / 1.42..=1000.0).contains(&p95), "{p95}");
        assert_eq!(h.quantile(1.0), Some(1000));
        assert_eq!(WaitHistogram::default().quantile(0.5), None);
        let values: Vec<Option<u64>> = {
            let names = WaitHistogram::field_names("t");
            let fields: std::collections::HashMap<String, u64> =
                h.fields("t").into_iter().collect();
            names.iter().map(|n| fields.get(n).copied()).collect()
        };
        let back = WaitHistogram::from_values(&values, h.max_ms);
        assert_eq!(back.count, h.count);
        assert_eq!(back.buckets, h.buckets);
    }
}
