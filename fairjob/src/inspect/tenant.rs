//! One tenant across the system: per queue its pending and running jobs and
//! running limit (sharded queues), its recent waits; per job class with
//! reroute rules, its window counts against each rule's threshold, the rule
//! that matches now and when new jobs go back to the declared queue; the slot
//! keys named after it; its jobs in `retry` and `dead` (a bounded scan of
//! the newest entries).
//!
//! Bounded: one read per (queue | class rule | slot key), plus at most
//! [`TENANT_SET_SCAN`] entries of each set.

use serde::Serialize;

use super::jobs::{JobFilter, JobPage};
use super::{ClassInfo, Inspector, JobSet, LimitDetail, RECENT_MINUTES, WaitSummary};
use crate::error::Result;
use crate::fair::DEFAULT_MAX_WINDOW;
use crate::policy::reroute::{reroute_clears_in, reroute_next_queue, reroute_target};
use crate::wire::{WireRule, reroute_window, rule_window};

/// Entries of `retry` and of `dead` the tenant page looks at (newest first for dead).
pub const TENANT_SET_SCAN: usize = 1_000;

/// A tenant in one queue.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TenantQueue {
    /// The queue.
    pub queue: String,
    /// Whether it is sharded (pending, running and limit are known only there).
    pub sharded: bool,
    /// Jobs waiting in its shard.
    pub pending: Option<u64>,
    /// Jobs running.
    pub running: Option<u64>,
    /// Its running limit (its own, else the queue's default).
    pub limit: Option<u32>,
    /// Its weight (its own, else the queue's default, else 1).
    pub weight: Option<f64>,
    /// Its floor.
    pub floor: Option<u32>,
    /// Its place in the dispatch order, if runnable.
    pub rotation: Option<u64>,
    /// Jobs of the queue dispatched over the last minutes, and of those its own.
    pub dispatched: Option<(u64, u64)>,
    /// Its waits over the recent window.
    pub wait: WaitSummary,
}

/// One reroute rule of a class for a tenant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RuleState {
    /// The slower queue.
    pub queue: String,
    /// Jobs allowed in the window.
    pub threshold: u64,
    /// The window, seconds.
    pub per: u64,
    /// Jobs of the tenant counted in the window now.
    pub count: u64,
    /// Whether the tenant's next job matches the rule (it is counted first).
    pub matches: bool,
    /// While it matches: seconds until the next job no longer does.
    pub clears_in: Option<u64>,
}

/// A tenant's reroute state for one job class.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RerouteState {
    /// The class.
    pub class: String,
    /// Its declared queue.
    pub base_queue: String,
    /// Its rules, in declaration order.
    pub rules: Vec<RuleState>,
    /// The queue the tenant's next job would get (the last matching rule's).
    pub next_queue: String,
    /// Seconds until new jobs go back to the declared queue (no rule matches).
    pub back_in: Option<u64>,
}

/// The tenant page.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TenantView {
    /// The tenant.
    pub tenant: String,
    /// Queues where the tenant has jobs or recent waits.
    pub queues: Vec<TenantQueue>,
    /// Per class with reroute rules.
    pub reroute: Vec<RerouteState>,
    /// Slot keys named after the tenant that are in use or set.
    pub slots: Vec<LimitDetail>,
    /// Its entries among the first [`TENANT_SET_SCAN`] of `retry`.
    pub retries: JobPage,
    /// Its entries among the newest [`TENANT_SET_SCAN`] of `dead`.
    pub dead: JobPage,
}

impl Inspector {
    /// `tenant`'s reroute state for a class declared for `base_queue` with
    /// `rules`: each rule's count now, whether the tenant's next job matches
    /// it, and when it stops matching, judged by [`reroute_target`] (the rule
    /// `push.lua` applies) over the windows the client would count in.
    pub async fn reroute_state(
        &self,
        class: &str,
        base_queue: &str,
        rules: &[WireRule],
        tenant: &str,
    ) -> Result<RerouteState> {
        let now = self.time().await?.floor() as i64;
        let key = self.broker.keys().fair_window(class, tenant, base_queue);
        let max_window = reroute_window(rules, DEFAULT_MAX_WINDOW.as_secs());
        let windows: Vec<u64> = rules.iter().map(|r| rule_window(r, max_window)).collect();
        let from: Vec<i64> = windows.iter().map(|w| now - *w as i64).collect();
        let counts = self
            .broker
            .window_counts(std::slice::from_ref(&key), &from)
            .await?;
        let mut states: Vec<RuleState> = rules
            .iter()
            .zip(&counts)
            .zip(&windows)
            .map(|((r, &count), &per)| RuleState {
                queue: r.queue.clone(),
                threshold: r.threshold,
                per,
                count,
                // The next job is counted before the rule is checked.
                matches: reroute_target([(r.threshold, count + 1)]) == 1,
                clears_in: None,
            })
            .collect();
        // A matching rule stops matching once its oldest entries leave the
        // window until the next job's count is back at the threshold.
        let asked: Vec<usize> = (0..states.len()).filter(|&i| states[i].matches).collect();
        let at: Vec<(i64, u64)> = asked
            .iter()
            .map(|&i| (from[i], states[i].count - states[i].threshold))
            .collect();
        let scores = self.broker.window_scores_at(&key, &at).await?;
        for (i, score) in asked.into_iter().zip(scores) {
            if let Some(score) = score {
                states[i].clears_in = Some(reroute_clears_in(score as i64, states[i].per, now));
            }
        }
        let next_queue = reroute_next_queue(base_queue, rules, &counts).to_owned();
        let back_in = states.iter().filter_map(|r| r.clears_in).max();
        Ok(RerouteState {
            class: class.to_owned(),
            base_queue: base_queue.to_owned(),
            rules: states,
            next_queue,
            back_in,
        })
    }

    /// Everything about one tenant (see the module doc); `with_sets` false
    /// leaves out the scans of `retry` and `dead` (a page's live refresh).
    pub async fn tenant_view(
        &self,
        tenant: &str,
        classes: &[ClassInfo],
        with_sets: bool,
    ) -> Result<TenantView> {
        let (names, sharded, _) = self.queue_names().await?;
        let waits = self
            .waits(&names, Some(Some(tenant)), RECENT_MINUTES)
            .await?;
        let mut queues = Vec::new();
        for (q, wait) in names.iter().zip(waits) {
            let mut row = TenantQueue {
                queue: q.clone(),
                sharded: sharded.contains(q),
                pending: None,
                running: None,
                limit: None,
                weight: None,
                floor: None,
                rotation: None,
                dispatched: None,
                wait,
            };
            if row.sharded {
                let view = self.shard_tenants(q, &[Some(tenant)]).await?;
                if let Some(r) = view.rows.first() {
                    row.pending = Some(r.pending);
                    row.running = Some(r.running);
                    row.limit = r.limit.or(view.default_limit);
                    row.weight = r.weight.or(view.default_weight).or(Some(1.0));
                    row.floor = r.floor.or(view.default_floor);
                    row.rotation = r.rotation;
                    row.dispatched = Some((view.dispatched, r.dispatched));
                }
            }
            let active = row.wait.started > 0
                || row.pending.unwrap_or(0) > 0
                || row.running.unwrap_or(0) > 0;
            if active {
                queues.push(row);
            }
        }
        let mut reroute = Vec::new();
        for c in classes.iter().filter(|c| !c.throttles.is_empty()) {
            reroute.push(
                self.reroute_state(&c.class, &c.queue, &c.throttles, tenant)
                    .await?,
            );
        }
        let mut keys: Vec<String> = classes.iter().filter_map(|c| c.limit_key(tenant)).collect();
        keys.sort();
        keys.dedup();
        let mut slots = Vec::new();
        for key in keys {
            let d = self.limit_detail(&key, 10).await?;
            if d.row.running > 0 || d.row.waiting > 0 || d.row.limit.is_some() {
                slots.push(d);
            }
        }
        let filter = JobFilter {
            tenant: Some(tenant.to_owned()),
            ..JobFilter::default()
        };
        let budget = if with_sets { TENANT_SET_SCAN } else { 0 };
        let retries = self
            .jobs_page(JobSet::Retry, &filter, 0, 20, budget)
            .await?;
        let dead = self.jobs_page(JobSet::Dead, &filter, 0, 20, budget).await?;
        Ok(TenantView {
            tenant: tenant.to_owned(),
            queues,
            reroute,
            slots,
            retries,
            dead,
        })
    }
}
