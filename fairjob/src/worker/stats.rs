//! Statistics a worker gathers in memory and flushes with its heartbeat (no
//! round trip per job): per queue and tenant, how long jobs waited from
//! enqueue to start; per queue, jobs processed and failed; per tenant-sharded
//! queue and tenant, jobs dispatched (the shard's per-minute dispatch counts:
//! a crash loses at most one heartbeat interval of them, a display figure).
//! Bounded: at most [`MAX_PAIRS`] distinct (queue, tenant) pairs of each
//! between two flushes; further tenants count for their queue as a whole only.

use std::collections::HashMap;

use crate::broker::stats::{Dispatched, StatsFlush, WaitHistogram};

/// Distinct (queue, tenant) pairs kept between two flushes.
pub(crate) const MAX_PAIRS: usize = 10_000;

#[derive(Debug, Default)]
struct QueueAgg {
    /// By tenant (`""`: jobs without one).
    tenants: HashMap<String, WaitHistogram>,
    overflow: WaitHistogram,
    processed: u64,
    failed: u64,
    /// Dispatches by encoded tenant (a sharded queue's), and in all.
    dispatched: HashMap<String, u64>,
    dispatched_total: u64,
}

/// The statistics gathered since the last flush.
#[derive(Debug, Default)]
pub(crate) struct WaitAgg {
    queues: HashMap<String, QueueAgg>,
    pairs: usize,
    dispatch_pairs: usize,
}

impl WaitAgg {
    fn queue(&mut self, queue: &str) -> &mut QueueAgg {
        if !self.queues.contains_key(queue) {
            self.queues.insert(queue.to_owned(), QueueAgg::default());
        }
        self.queues.get_mut(queue).expect("just inserted")
    }

    /// A job of `queue` and `tenant` started after waiting `wait_ms`.
    pub(crate) fn started(&mut self, queue: &str, tenant: Option<&str>, wait_ms: u64) {
        let full = self.pairs >= MAX_PAIRS;
        let q = self.queue(queue);
        let t = tenant.unwrap_or("");
        if let Some(h) = q.tenants.get_mut(t) {
            h.record(wait_ms);
        } else if full {
            q.overflow.record(wait_ms);
        } else {
            let mut h = WaitHistogram::default();
            h.record(wait_ms);
            q.tenants.insert(t.to_owned(), h);
            self.pairs += 1;
        }
    }

    /// A job of tenant-sharded `queue` was dispatched for (encoded) tenant `t`.
    pub(crate) fn dispatched(&mut self, queue: &str, t: &str) {
        let full = self.dispatch_pairs >= MAX_PAIRS;
        let q = self.queue(queue);
        q.dispatched_total += 1;
        if let Some(n) = q.dispatched.get_mut(t) {
            *n += 1;
        } else if !full {
            q.dispatched.insert(t.to_owned(), 1);
            self.dispatch_pairs += 1;
        }
    }

    /// A job of `queue` finished.
    pub(crate) fn finished(&mut self, queue: &str, failed: bool) {
        let q = self.queue(queue);
        q.processed += 1;
        if failed {
            q.failed += 1;
        }
    }

    /// Everything gathered, for a flush counted in epoch minute `minute`;
    /// leaves the aggregate empty.
    pub(crate) fn take(&mut self, minute: u64) -> StatsFlush {
        let queues = std::mem::take(&mut self.queues);
        self.pairs = 0;
        self.dispatch_pairs = 0;
        let mut flush = StatsFlush {
            minute,
            ..StatsFlush::default()
        };
        for (queue, agg) in queues {
            for (t, h) in agg.tenants {
                flush
                    .waits
                    .push((queue.clone(), (!t.is_empty()).then_some(t), h));
            }
            if agg.overflow.count > 0 {
                flush.queue_only.push((queue.clone(), agg.overflow));
            }
            if agg.dispatched_total > 0 {
                flush.dispatched.push((
                    queue.clone(),
                    Dispatched {
                        tenants: agg.dispatched.into_iter().collect(),
                        total: agg.dispatched_total,
                    },
                ));
            }
            if agg.processed > 0 {
                flush.finished.push((queue, agg.processed, agg.failed));
            }
        }
        flush
    }

    /// Puts back a flush that could not be written (counted again next time).
    pub(crate) fn restore(&mut self, flush: StatsFlush) {
        for (queue, tenant, h) in flush.waits {
            let full = self.pairs >= MAX_PAIRS;
            let q = self.queue(&queue);
            let t = tenant.unwrap_or_default();
            match q.tenants.get_mut(&t) {
                Some(mine) => mine.merge(&h),
                None if full => q.overflow.merge(&h),
                None => {
                    q.tenants.insert(t, h);
                    self.pairs += 1;
                }
            }
        }
        for (queue, h) in flush.queue_only {
            self.queue(&queue).overflow.merge(&h);
        }
        for (queue, p, f) in flush.finished {
            let q = self.queue(&queue);
            q.processed += p;
            q.failed += f;
        }
        for (queue, Dispatched { tenants, total }) in flush.dispatched {
            let q = self.queue(&queue);
            q.dispatched_total += total;
            for (t, n) in tenants {
                *q.dispatched.entry(t).or_default() += n;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aggregates_per_queue_and_tenant_and_caps_tenants() {
        let mut a = WaitAgg::default();
        a.started("q", Some("acme"), 10);
        a.started("q", Some("acme"), 30);
        a.started("q", None, 5);
        a.finished("q", false);
        a.finished("q", true);
        for i in 0..MAX_PAIRS + 5 {
            a.started("big", Some(&format!("t{i}")), 1);
        }
        let f = a.take(7);
        assert_eq!(f.minute, 7);
        let acme = f
            .waits
            .iter()
            .find(|(q, t, _)| q == "q" && t.as_deref() == Some("acme"))
            .unwrap();
        assert_eq!((acme.2.count, acme.2.max_ms), (2, 30));
        assert_eq!(f.finished, vec![("q".to_owned(), 2, 1)]);
        let overflow = f.queue_only.iter().find(|(q, _)| q == "big").unwrap();
        assert_eq!(overflow.1.count, 7);
        assert!(a.take(8).is_empty());
        a.restore(f);
        assert_eq!(a.take(9).waits.len(), MAX_PAIRS);
    }
}
