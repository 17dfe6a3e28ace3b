//! Queues as an operator sees them: per queue, jobs runnable now against jobs
//! blocked and why (paused, tenant at its running limit, slot limit,
//! scheduled), the age of the oldest runnable job, throughput over the last
//! minute and hour; the fleet's fetch plans (tiers and weights) with each
//! queue's planned share of fetches next to its measured share.
//!
//! Bounded: at most [`MAX_QUEUES`](super::MAX_QUEUES) queues; a sharded queue's tenants are
//! counted over at most [`SHARD_COUNT_PAGES`] pages of its tenant set (the
//! count then says it is a lower bound); slot waiters over one page of limit
//! keys; scheduled jobs among the next [`SCHEDULED_SAMPLE`] due. Every count
//! Redis keeps (`LLEN`, `ZCARD`, `SCARD`) is read, not recomputed.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::{
    ClassInfo, Inspector, LongWait, MAX_READ_ROWS, Page, RECENT_MINUTES, encode_key, enqueued_at,
};
use crate::error::Result;
use crate::queues::planned_shares;
use crate::wire::Payload;

/// Tenants one page of a sharded queue's counts reads.
const SHARD_COUNT_PAGE: usize = 100;

/// Pages of 100 tenants a sharded queue's counts read at most.
pub const SHARD_COUNT_PAGES: usize = 5;

/// Scheduled jobs (next due first) whose queues the overview attributes.
pub const SCHEDULED_SAMPLE: usize = 100;

/// Minutes over which the measured share of fetches is taken.
pub const MEASURED_MINUTES: u64 = 5;

/// Why jobs of a queue cannot run now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockReason {
    /// The queue is paused.
    Paused,
    /// Their tenant is at its running limit (cap) in a sharded queue (0 pauses it).
    TenantLimit,
    /// They wait for a slot of their concurrency key.
    SlotLimit,
    /// They are scheduled for later (counted among the next due).
    Scheduled,
}

impl BlockReason {
    /// How the dashboard names it.
    pub fn label(self) -> &'static str {
        match self {
            BlockReason::Paused => "queue paused",
            BlockReason::TenantLimit => "tenant at its limit",
            BlockReason::SlotLimit => "slot limit",
            BlockReason::Scheduled => "scheduled",
        }
    }
}

/// Jobs blocked for one reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Blocked {
    /// Why.
    pub reason: BlockReason,
    /// How many (a lower bound when the queue's counts are not exact).
    pub jobs: u64,
}

/// One queue's state.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QueueState {
    /// The queue.
    pub name: String,
    /// Whether it is tenant-sharded.
    pub sharded: bool,
    /// Whether workers are told not to fetch it.
    pub paused: bool,
    /// Jobs waiting in it (list, plus a sharded queue's tenant lists).
    pub size: u64,
    /// Whether the counts cover every tenant (false: lower bounds).
    pub exact: bool,
    /// Jobs a worker could start now.
    pub runnable: u64,
    /// Jobs that cannot start now, by reason.
    pub blocked: Vec<Blocked>,
    /// For a sharded queue: tenants with pending or running jobs.
    pub tenants: Option<u64>,
    /// For a sharded queue: tenants whose counts were read.
    pub tenants_counted: Option<u64>,
    /// Age of the oldest runnable job, seconds (Sidekiq's latency).
    pub oldest_secs: Option<f64>,
    /// Jobs finished in the last complete minute.
    pub processed_1m: u64,
    /// Of which failed.
    pub failed_1m: u64,
    /// Jobs finished in the last 60 complete minutes.
    pub processed_1h: u64,
    /// Of which failed.
    pub failed_1h: u64,
    /// Jobs started over the last [`MEASURED_MINUTES`] minutes.
    pub started_recent: u64,
}

impl QueueState {
    /// Jobs blocked in all.
    pub fn blocked_total(&self) -> u64 {
        self.blocked.iter().map(|b| b.jobs).sum()
    }
}

/// Everything the overview shows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OverviewView {
    /// Redis's clock, epoch seconds.
    pub now: f64,
    /// Per queue.
    pub queues: Vec<QueueState>,
    /// Whether more queues exist than [`MAX_QUEUES`](super::MAX_QUEUES).
    pub queues_truncated: bool,
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
    /// Sidekiq's `processes` (live worker processes).
    pub processes: u64,
    /// Busy job slots over those processes.
    pub busy: u64,
    /// The tenants that waited longest over the recent window.
    pub longest_waits: Vec<LongWait>,
    /// Jobs finished per minute over the last hour, all queues, oldest first.
    pub per_minute: Vec<u64>,
    /// Warnings about the Redis server (eviction policy).
    pub warnings: Vec<String>,
    /// Why Redis refuses writes now, if it does (the banner).
    pub redis_refusal: Option<super::Refusal>,
}

/// One tier of a fetch plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanTier {
    /// Queues with their weight (0: strict order) and planned share of
    /// fetches while every queue has work.
    pub queues: Vec<(String, u32, f64)>,
}

/// The queue order a group of worker processes fetches with.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FetchPlan {
    /// Processes with this plan.
    pub processes: Vec<String>,
    /// Tiers, most urgent first.
    pub tiers: Vec<PlanTier>,
}

/// The queues page.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QueuesView {
    /// Per queue (as in the overview).
    pub queues: Vec<QueueState>,
    /// Fetch plans of the live processes.
    pub plans: Vec<FetchPlan>,
    /// Per queue: share of the jobs started over [`MEASURED_MINUTES`]
    /// minutes (all queues' starts = 1).
    pub measured: BTreeMap<String, f64>,
    /// Per queue: planned share of fetches in the first plan (first tier).
    pub planned: BTreeMap<String, f64>,
    /// Per queue: the classes declared for it, and for which it is a reroute target.
    pub declared: BTreeMap<String, Vec<String>>,
}

impl Inspector {
    /// The state of every queue (see the module doc for the bounds).
    pub async fn queue_states(
        &self,
        classes: &[ClassInfo],
    ) -> Result<(Vec<QueueState>, bool, f64)> {
        let (names, sharded, truncated) = self.queue_names().await?;
        let paused: BTreeSet<String> = self.paused_queues().await?.into_iter().collect();
        let now = self.time().await?;
        let heads = self.broker.queue_heads(&names).await?;
        let through = self.throughput(&names, 61).await?;
        let started = self.waits(&names, None, MEASURED_MINUTES).await?;
        let slot_waiting = self.slot_waiting_by_queue(classes).await?;
        let scheduled = self.scheduled_by_queue().await?;
        let mut out = Vec::with_capacity(names.len());
        for (i, q) in names.iter().enumerate() {
            let (list, head) = &heads[i];
            let mut state = QueueState {
                name: q.clone(),
                sharded: sharded.contains(q),
                paused: paused.contains(q),
                size: *list,
                exact: true,
                runnable: *list,
                blocked: Vec::new(),
                tenants: None,
                tenants_counted: None,
                oldest_secs: head
                    .as_deref()
                    .and_then(enqueued_at)
                    .map(|t| (now - t).max(0.0)),
                processed_1m: 0,
                failed_1m: 0,
                processed_1h: 0,
                failed_1h: 0,
                started_recent: started.get(i).map_or(0, |w| w.started),
            };
            let m1 = through.last(q, 1);
            let h1 = through.last(q, 60);
            state.processed_1m = m1.processed;
            state.failed_1m = m1.failed;
            state.processed_1h = h1.processed;
            state.failed_1h = h1.failed;
            if state.sharded {
                self.count_shards(&mut state, now).await?;
            }
            if let Some(n) = slot_waiting.get(q) {
                state.blocked.push(Blocked {
                    reason: BlockReason::SlotLimit,
                    jobs: *n,
                });
            }
            if state.paused && state.runnable > 0 {
                state.blocked.push(Blocked {
                    reason: BlockReason::Paused,
                    jobs: state.runnable,
                });
                state.runnable = 0;
            }
            if let Some(n) = scheduled.get(q) {
                state.blocked.push(Blocked {
                    reason: BlockReason::Scheduled,
                    jobs: *n,
                });
            }
            state.blocked.sort_by_key(|b| b.reason);
            out.push(state);
        }
        Ok((out, truncated, now))
    }

    /// Counts a sharded queue's tenants' jobs into `state`: runnable, or
    /// blocked at the tenant's running limit; the oldest head among the
    /// tenants served next.
    async fn count_shards(&self, state: &mut QueueState, now: f64) -> Result<()> {
        let mut page = Page::first(SHARD_COUNT_PAGE);
        let mut counted = 0u64;
        let mut at_limit = 0u64;
        let mut first = true;
        for _ in 0..SHARD_COUNT_PAGES {
            let view = self.shard_view(&state.name, page).await?;
            if first {
                state.tenants = Some(view.tenants);
                first = false;
                // The oldest head among the tenants served next.
                let next_up: Vec<String> = view
                    .next_up
                    .iter()
                    .map(|t| t.as_deref().map(encode_key).unwrap_or_default())
                    .collect();
                let heads = self.broker.shard_heads(&state.name, &next_up).await?;
                for h in heads.iter().flatten() {
                    if let Some(t) = enqueued_at(h) {
                        let age = (now - t).max(0.0);
                        state.oldest_secs = Some(state.oldest_secs.map_or(age, |a| a.max(age)));
                    }
                }
            }
            for row in &view.rows {
                counted += 1;
                state.size += row.pending;
                let limit = row.limit.or(view.default_limit);
                if limit.is_some_and(|l| row.running >= u64::from(l)) {
                    at_limit += row.pending;
                } else {
                    state.runnable += row.pending;
                }
            }
            match view.next {
                Some(c) => page.cursor = c,
                None => {
                    state.tenants_counted = Some(counted);
                    if at_limit > 0 {
                        state.blocked.push(Blocked {
                            reason: BlockReason::TenantLimit,
                            jobs: at_limit,
                        });
                    }
                    return Ok(());
                }
            }
        }
        state.exact = false;
        state.tenants_counted = Some(counted);
        if at_limit > 0 {
            state.blocked.push(Blocked {
                reason: BlockReason::TenantLimit,
                jobs: at_limit,
            });
        }
        Ok(())
    }

    /// Jobs waiting for a slot, by the declared queue of their class (one
    /// page of limit keys).
    async fn slot_waiting_by_queue(&self, classes: &[ClassInfo]) -> Result<BTreeMap<String, u64>> {
        let page = self.limits(Page::first(MAX_READ_ROWS)).await?;
        let mut out = BTreeMap::new();
        for row in page.rows.iter().filter(|r| r.waiting > 0) {
            if let Some(c) = class_of_limit(classes, &row.key) {
                *out.entry(c.queue.clone()).or_default() += row.waiting;
            }
        }
        Ok(out)
    }

    /// Scheduled jobs among the next [`SCHEDULED_SAMPLE`] due, by queue.
    async fn scheduled_by_queue(&self) -> Result<BTreeMap<String, u64>> {
        let next = self.broker.scheduled_head(SCHEDULED_SAMPLE).await?;
        let mut out = BTreeMap::new();
        for raw in next {
            if let Ok(p) = Payload::parse_slice(&raw) {
                *out.entry(p.queue()).or_default() += 1;
            }
        }
        Ok(out)
    }

    /// The overview: every queue's state, the sets, the counters, the fleet,
    /// the longest recent waits and the Redis warnings.
    pub async fn dashboard_overview(&self, classes: &[ClassInfo]) -> Result<OverviewView> {
        let (queues, truncated, now) = self.queue_states(classes).await?;
        let totals = self.broker.totals().await?;
        let names: Vec<String> = queues.iter().map(|q| q.name.clone()).collect();
        let longest_waits = self.longest_waits(&names, RECENT_MINUTES, 5).await?;
        let per_minute = self.throughput(&names, 60).await?.total_series();
        let busy = self.processes(Page::first(MAX_READ_ROWS)).await?.busy;
        let mut warnings = Vec::new();
        match self.broker.eviction_policy().await {
            Ok(Some(p)) => warnings.push(format!(
                "maxmemory-policy is `{p}`, not `noeviction`: an evicting Redis silently deletes \
                 queues, leases and limits"
            )),
            Ok(None) => {}
            Err(_) => warnings.push(
                "cannot read maxmemory-policy (an ACL may forbid CONFIG): make sure it is `noeviction`"
                    .to_owned(),
            ),
        }
        let redis_refusal = self.redis_refusal().await.unwrap_or(None);
        Ok(OverviewView {
            redis_refusal,
            now,
            queues,
            queues_truncated: truncated,
            scheduled: totals.scheduled,
            retries: totals.retries,
            dead: totals.dead,
            processed: totals.processed,
            failed: totals.failed,
            processes: totals.processes,
            busy,
            longest_waits,
            per_minute,
            warnings,
        })
    }

    /// The queues page: states, the live processes' fetch plans, planned and
    /// measured shares.
    pub async fn queues_view(&self, classes: &[ClassInfo]) -> Result<QueuesView> {
        let (queues, _, _) = self.queue_states(classes).await?;
        let procs = self.processes(Page::first(MAX_READ_ROWS)).await?;
        let mut plans: Vec<FetchPlan> = Vec::new();
        for p in &procs.rows {
            let tiers: Vec<PlanTier> = p
                .tiers
                .iter()
                .map(|t| PlanTier {
                    queues: t
                        .iter()
                        .zip(planned_shares(t))
                        .map(|((q, w), s)| (q.clone(), *w, s))
                        .collect(),
                })
                .collect();
            match plans.iter_mut().find(|pl| pl.tiers == tiers) {
                Some(pl) => pl.processes.push(p.identity.clone()),
                None => plans.push(FetchPlan {
                    processes: vec![p.identity.clone()],
                    tiers,
                }),
            }
        }
        let total: u64 = queues.iter().map(|q| q.started_recent).sum();
        let measured = queues
            .iter()
            .map(|q| {
                let share = if total > 0 {
                    q.started_recent as f64 / total as f64
                } else {
                    0.0
                };
                (q.name.clone(), share)
            })
            .collect();
        let mut planned = BTreeMap::new();
        if let Some(plan) = plans.first() {
            for (i, tier) in plan.tiers.iter().enumerate() {
                for (q, _, s) in &tier.queues {
                    planned.insert(q.clone(), if i == 0 { *s } else { 0.0 });
                }
            }
        }
        let mut declared: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for c in classes {
            declared
                .entry(c.queue.clone())
                .or_default()
                .push(c.class.clone());
            for r in &c.throttles {
                declared.entry(r.queue.clone()).or_default().push(format!(
                    "{} (rerouted, > {} per {}s)",
                    c.class,
                    r.threshold,
                    r.per.unwrap_or(0)
                ));
            }
        }
        Ok(QueuesView {
            queues,
            plans,
            measured,
            planned,
            declared,
        })
    }
}

/// The class a slot-limit key belongs to (`<Class>:<key>`, or a class of
/// group `<group>` for `group:<group>:<key>`).
pub fn class_of_limit<'a>(classes: &'a [ClassInfo], key: &str) -> Option<&'a ClassInfo> {
    if let Some(rest) = key.strip_prefix("group:") {
        let (group, _) = rest.split_once(':')?;
        return classes.iter().find(|c| c.group.as_deref() == Some(group));
    }
    classes
        .iter()
        .filter(|c| c.concurrency.is_some() && key.starts_with(&format!("{}:", c.class)))
        .max_by_key(|c| c.class.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_key_belongs_to_a_class_of_its_group() {
        let class = |name: &str, group: Option<&str>| ClassInfo {
            class: name.into(),
            queue: "q".into(),
            throttles: Vec::new(),
            sharded: false,
            concurrency: Some(2),
            group: group.map(str::to_owned),
            retries: None,
        };
        let classes = [class("Sync", None), class("SyncAll", Some("g"))];
        assert_eq!(class_of_limit(&classes, "Sync:42").unwrap().class, "Sync");
        assert_eq!(
            class_of_limit(&classes, "group:g:42").unwrap().class,
            "SyncAll"
        );
        assert!(class_of_limit(&classes, "Other:1").is_none());
    }
}
