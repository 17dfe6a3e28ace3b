//! What the metrics sampler reads: per queue its size and the age of its
//! oldest job, per sharded queue its tenants' pending and running jobs, per
//! slot limit key its waiting jobs, and the batches not complete (and the
//! workflow steps held) among the newest listed.
//!
//! Bounded: `LLEN` and `LINDEX -1` per queue (never a range of a queue); per
//! sharded queue one `HGETALL` of its running counts (tenants with running
//! jobs only), its tenant set in `SSCAN` pages with one `LLEN` per tenant (at
//! most [`OVERVIEW_TENANT_CAP`] tenants, then `exact` is false), and
//! `LINDEX -1` of the inbox and of the [`SAMPLE_HEADS`] largest backlogs; the
//! slot limit registry in pages, one `LLEN` per key, at most
//! [`OVERVIEW_TENANT_CAP`] keys; the newest [`BATCH_ROWS`] batches, one
//! bounded status read each ([`Inspector::batches`]), which also carries a
//! workflow's count of held steps. No `KEYS`, no `SCAN` of the keyspace.

use std::collections::HashMap;

use serde::Serialize;

use super::{BATCH_ROWS, Inspector, MAX_READ_ROWS, OVERVIEW_TENANT_CAP, Page, enqueued_at};
use crate::broker::read::tenant_name;
use crate::error::Result;

/// Tenant lists of a sharded queue whose oldest job is read for its latency:
/// the largest backlogs (a tenant held back the longest usually has one).
pub const SAMPLE_HEADS: usize = 50;

/// One sample of the gauges read from Redis.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct MetricsSample {
    /// Per queue (plain and sharded), by name.
    pub queues: Vec<QueueSample>,
    /// Slot limit keys with jobs waiting: full key, waiting jobs.
    pub slot_waiting: Vec<(String, u64)>,
    /// Whether every slot limit key was read.
    pub slots_exact: bool,
    /// Rate limiters with jobs waiting or released: full key, waiting jobs,
    /// waiters released so far.
    pub rate_waiting: Vec<(String, u64, u64)>,
    /// Batches whose `complete` has not fired, among the newest
    /// [`BATCH_ROWS`] listed (not every batch).
    pub batches_open: u64,
    /// Workflow steps held (waiting for their dependencies in no queue), in
    /// the same newest [`BATCH_ROWS`] batches: the sum of each workflow's
    /// count of held steps, kept by the scripts that hold and release them.
    pub workflow_steps_held: u64,
}

/// One queue in a [`MetricsSample`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QueueSample {
    /// The queue.
    pub name: String,
    /// Jobs waiting: the list (a sharded queue's inbox) plus its tenants' lists.
    pub size: u64,
    /// Age of the oldest waiting job read, seconds.
    pub oldest_secs: Option<f64>,
    /// A sharded queue's tenants with pending or running jobs.
    pub tenants: Option<Vec<TenantSample>>,
    /// Whether every tenant was counted.
    pub exact: bool,
    /// A sharded queue's tenants out of the dispatch order, waiting for their rate.
    pub rate_waiting_tenants: Option<u64>,
}

/// One tenant of a sharded queue in a [`QueueSample`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TenantSample {
    /// The tenant (`None`: the shared shard of jobs without one).
    pub tenant: Option<String>,
    /// Jobs in its list.
    pub pending: u64,
    /// Jobs running.
    pub running: u64,
}

impl Inspector {
    /// One sample for the metrics sampler (see the module doc for its bounds).
    pub async fn metrics_sample(&self) -> Result<MetricsSample> {
        let (names, sharded, _) = self.queue_names().await?;
        let now = self.time().await?;
        let heads = self.broker.queue_heads(&names).await?;
        let age = |raw: &[u8]| enqueued_at(raw).map(|t| (now - t).max(0.0));
        let mut queues = Vec::with_capacity(names.len());
        for (name, (len, head)) in names.iter().zip(heads) {
            let mut q = QueueSample {
                name: name.clone(),
                size: len,
                oldest_secs: head.as_deref().and_then(age),
                tenants: None,
                exact: true,
                rate_waiting_tenants: None,
            };
            if sharded.contains(name) {
                self.sample_shards(&mut q, now).await?;
            }
            queues.push(q);
        }
        let mut slot_waiting = Vec::new();
        let mut page = Page::first(MAX_READ_ROWS);
        let mut seen = 0usize;
        let slots_exact = loop {
            let p = self.limits(page).await?;
            seen += p.rows.len();
            slot_waiting.extend(
                p.rows
                    .into_iter()
                    .filter(|r| r.waiting > 0)
                    .map(|r| (r.key, r.waiting)),
            );
            match p.next {
                None => break true,
                Some(_) if seen >= OVERVIEW_TENANT_CAP => break false,
                Some(c) => page.cursor = c,
            }
        };
        let mut rate_waiting = Vec::new();
        let mut page = Page::first(MAX_READ_ROWS);
        let mut seen = 0usize;
        loop {
            let p = self.broker.rate_limits(page).await?;
            seen += p.rows.len();
            rate_waiting.extend(
                p.rows
                    .into_iter()
                    .filter(|r| r.waiting > 0 || r.released > 0)
                    .map(|r| (r.key, r.waiting, r.released)),
            );
            match p.next {
                Some(c) if seen < OVERVIEW_TENANT_CAP => page.cursor = c,
                _ => break,
            }
        }
        let batches = self.batches(BATCH_ROWS).await?.rows;
        let batches_open = batches.iter().filter(|b| !b.state.is_complete()).count() as u64;
        let workflow_steps_held = batches.iter().map(|b| b.status.held).sum();
        Ok(MetricsSample {
            queues,
            slot_waiting,
            slots_exact,
            rate_waiting,
            batches_open,
            workflow_steps_held,
        })
    }

    /// A sharded queue's tenants: running counts, pending per tenant list,
    /// and the oldest head among the largest backlogs.
    async fn sample_shards(&self, q: &mut QueueSample, now: f64) -> Result<()> {
        let running = self.broker.shard_running(&q.name).await?;
        q.rate_waiting_tenants = Some(self.broker.shard_rate_waiting(&q.name).await?);
        let mut pending: HashMap<String, u64> = HashMap::new();
        let mut cursor = 0u64;
        loop {
            let (next, batch) = self
                .broker
                .shard_pending_step(&q.name, cursor, MAX_READ_ROWS)
                .await?;
            for (t, n) in batch {
                pending.entry(t).or_insert(n);
            }
            cursor = next;
            if cursor == 0 {
                break;
            }
            if pending.len() >= OVERVIEW_TENANT_CAP {
                q.exact = false;
                break;
            }
        }
        q.size += pending.values().sum::<u64>();
        let mut by_backlog: Vec<(&String, u64)> = pending
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(t, n)| (t, *n))
            .collect();
        by_backlog.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        by_backlog.truncate(SAMPLE_HEADS);
        let backlogs: Vec<String> = by_backlog.iter().map(|(t, _)| (*t).clone()).collect();
        let heads = self.broker.shard_heads(&q.name, &backlogs).await?;
        for h in heads.iter().flatten() {
            if let Some(t) = enqueued_at(h) {
                let age = (now - t).max(0.0);
                q.oldest_secs = Some(q.oldest_secs.map_or(age, |a| a.max(age)));
            }
        }
        let mut tenants: Vec<TenantSample> = Vec::with_capacity(pending.len());
        for (t, n) in &pending {
            let r = running.get(t).copied().unwrap_or(0);
            if *n > 0 || r > 0 {
                tenants.push(TenantSample {
                    tenant: tenant_name(t),
                    pending: *n,
                    running: r,
                });
            }
        }
        for (t, r) in &running {
            if *r > 0 && !pending.contains_key(t) {
                tenants.push(TenantSample {
                    tenant: tenant_name(t),
                    pending: 0,
                    running: *r,
                });
            }
        }
        tenants.sort_by(|a, b| a.tenant.cmp(&b.tenant));
        q.tenants = Some(tenants);
        Ok(())
    }
}
