//! The sampler: sets the gauges whose values live in Redis (queue sizes and
//! latency, sharded queues' pending and running jobs per tenant, slot
//! waiters per key, batches not complete among the newest listed). One
//! process at a time holds the sampler lease (a `SET NX PX` renewed by its
//! holder, `sampler_lease.lua`) and reads one bounded
//! [`RedisBroker::metrics_sample`](crate::broker::RedisBroker::metrics_sample)
//! per `metrics.sample_interval`; the others set none of these gauges, so a
//! query never has to de-duplicate them across processes. When the holder
//! dies its lease lapses (three intervals, at least 5 s) and another process
//! takes over.
//!
//! Tenants and slot keys are labelled through [`TopK`] (by backlog: pending
//! plus running jobs); a labelled tenant whose jobs are gone, or that fell
//! out of the top K, has its gauges set to 0 once and then left alone, so
//! the exporter's idle timeout drops them.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use tokio_util::sync::CancellationToken;

use super::{Shared, backoff_sleep};
use crate::config::MetricsConfig;
use crate::inspect::MetricsSample;
use crate::metrics::{self, OTHER, TopK};

pub(crate) async fn run(shared: Arc<Shared>, stop: CancellationToken) {
    let config = &shared.config.metrics;
    if !config.sample {
        return;
    }
    let broker = shared.client.broker();
    let inspector = shared.client.inspector();
    let interval = config.sample_interval;
    // Three intervals, and never less than 5 s: a holder that is slow for a
    // moment keeps the lease rather than leaving two processes' gauges.
    let lease = (interval * 3).max(std::time::Duration::from_secs(5));
    let mut gauges = Gauges::new(config);
    let mut failures = 0;
    let mut holding = false;
    loop {
        let result = async {
            if !broker.sampler_lease(&shared.identity, lease).await? {
                return Ok(false);
            }
            let sample = inspector.metrics_sample().await?;
            gauges.set(&sample, Instant::now());
            Ok::<_, crate::Error>(true)
        }
        .await;
        match result {
            Ok(held) => {
                failures = 0;
                if held != holding {
                    tracing::info!(
                        identity = %shared.identity,
                        "{}",
                        if held {
                            "this process samples the Redis gauges"
                        } else {
                            "another process samples the Redis gauges"
                        }
                    );
                    holding = held;
                }
            }
            Err(e) => {
                failures += 1;
                shared.redis_trouble("metrics sampler", &e);
                if failures > 1 {
                    tokio::select! {
                        _ = backoff_sleep(failures) => {}
                        _ = stop.cancelled() => return,
                    }
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = stop.cancelled() => return,
        }
    }
}

/// Label slots and what was last shown, per sharded queue and for slot keys.
struct Gauges {
    k: usize,
    retire_after: std::time::Duration,
    shards: HashMap<String, Shown>,
    slots: Shown,
    rates: Shown,
}

/// One family of labelled gauges: who is labelled, and who was set last time.
struct Shown {
    topk: TopK,
    set: HashSet<String>,
}

impl Shown {
    fn new(k: usize, retire_after: std::time::Duration) -> Shown {
        Shown {
            topk: TopK::new(k, retire_after),
            set: HashSet::new(),
        }
    }

    /// Splits `rows` (value, volume) into labelled values and the rest, and
    /// returns the values to set back to 0 (set last time, not labelled now).
    fn split<'a>(
        &mut self,
        rows: &mut [(&'a str, u64)],
        now: Instant,
    ) -> (Vec<&'a str>, Vec<String>) {
        // The largest first, so free slots go to them.
        rows.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        let mut labelled = Vec::new();
        for (v, vol) in rows.iter() {
            if self.topk.observe(v, *vol as f64, now) {
                labelled.push(*v);
            }
        }
        let now_set: HashSet<String> = labelled.iter().map(|v| (*v).to_owned()).collect();
        let zero: Vec<String> = self.set.difference(&now_set).cloned().collect();
        for v in &zero {
            self.topk.touch(v, now);
        }
        self.set = now_set;
        (labelled, zero)
    }
}

impl Gauges {
    fn new(config: &MetricsConfig) -> Gauges {
        let k = config.tenant_slots();
        let retire_after = config.idle_timeout + metrics::RETIRE_MARGIN;
        Gauges {
            k,
            retire_after,
            shards: HashMap::new(),
            slots: Shown::new(k, retire_after),
            rates: Shown::new(k, retire_after),
        }
    }

    fn set(&mut self, sample: &MetricsSample, now: Instant) {
        use ::metrics::gauge;
        for q in &sample.queues {
            let queue = q.name.clone();
            gauge!(metrics::QUEUE_SIZE, "queue" => queue.clone()).set(q.size as f64);
            gauge!(metrics::QUEUE_LATENCY, "queue" => queue.clone())
                .set(q.oldest_secs.unwrap_or(0.0));
            if let Some(n) = q.rate_waiting_tenants {
                gauge!(metrics::SHARD_RATE_WAITING, "queue" => queue.clone()).set(n as f64);
            }
            let Some(tenants) = &q.tenants else { continue };
            let (k, retire_after) = (self.k, self.retire_after);
            let shown = self
                .shards
                .entry(queue.clone())
                .or_insert_with(|| Shown::new(k, retire_after));
            let by_name: HashMap<&str, (u64, u64)> = tenants
                .iter()
                .map(|t| (t.tenant.as_deref().unwrap_or(""), (t.pending, t.running)))
                .collect();
            let mut rows: Vec<(&str, u64)> =
                by_name.iter().map(|(t, (p, r))| (*t, p + r)).collect();
            let (labelled, zero) = shown.split(&mut rows, now);
            let (mut other_p, mut other_r) = (0, 0);
            let labelled_set: HashSet<&str> = labelled.iter().copied().collect();
            for (t, (p, r)) in &by_name {
                if labelled_set.contains(t) {
                    gauge!(metrics::SHARD_PENDING, "queue" => queue.clone(), "tenant" => (*t).to_owned())
                        .set(*p as f64);
                    gauge!(metrics::SHARD_RUNNING, "queue" => queue.clone(), "tenant" => (*t).to_owned())
                        .set(*r as f64);
                } else {
                    other_p += p;
                    other_r += r;
                }
            }
            for t in zero {
                gauge!(metrics::SHARD_PENDING, "queue" => queue.clone(), "tenant" => t.clone())
                    .set(0.0);
                gauge!(metrics::SHARD_RUNNING, "queue" => queue.clone(), "tenant" => t).set(0.0);
            }
            gauge!(metrics::SHARD_PENDING, "queue" => queue.clone(), "tenant" => OTHER)
                .set(other_p as f64);
            gauge!(metrics::SHARD_RUNNING, "queue" => queue, "tenant" => OTHER).set(other_r as f64);
        }
        let mut rows: Vec<(&str, u64)> = sample
            .slot_waiting
            .iter()
            .map(|(k, n)| (k.as_str(), *n))
            .collect();
        let (labelled, zero) = self.slots.split(&mut rows, now);
        let labelled_set: HashSet<&str> = labelled.iter().copied().collect();
        let mut other = 0;
        for (key, n) in &sample.slot_waiting {
            if labelled_set.contains(key.as_str()) {
                gauge!(metrics::SLOT_WAITING, "key" => key.clone()).set(*n as f64);
            } else {
                other += n;
            }
        }
        for key in zero {
            gauge!(metrics::SLOT_WAITING, "key" => key).set(0.0);
        }
        gauge!(metrics::SLOT_WAITING, "key" => OTHER).set(other as f64);
        gauge!(metrics::BATCHES_OPEN).set(sample.batches_open as f64);
        gauge!(metrics::WORKFLOW_STEPS_HELD).set(sample.workflow_steps_held as f64);
        self.set_rates(sample, now);
    }

    /// Rate limiters: waiting (a gauge) and released (a counter) per key,
    /// the same bounded labels as slot keys (the busiest K, the rest `other`).
    fn set_rates(&mut self, sample: &MetricsSample, now: Instant) {
        use ::metrics::{counter, gauge};
        let mut rows: Vec<(&str, u64)> = sample
            .rate_waiting
            .iter()
            .map(|(k, w, _)| (k.as_str(), (*w).max(1)))
            .collect();
        let (labelled, zero) = self.rates.split(&mut rows, now);
        let labelled_set: HashSet<&str> = labelled.iter().copied().collect();
        let mut other = 0;
        for (key, waiting, released) in &sample.rate_waiting {
            if labelled_set.contains(key.as_str()) {
                gauge!(metrics::RATE_WAITING, "key" => key.clone()).set(*waiting as f64);
                counter!(metrics::RATE_RELEASED_TOTAL, "key" => key.clone()).absolute(*released);
            } else {
                other += waiting;
            }
        }
        for key in zero {
            gauge!(metrics::RATE_WAITING, "key" => key).set(0.0);
        }
        gauge!(metrics::RATE_WAITING, "key" => OTHER).set(other as f64);
    }
}
