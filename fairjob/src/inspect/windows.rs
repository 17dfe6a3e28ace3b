//! Reroute windows of a job class per tenant, found by a resumable scan of
//! the keyspace (run on request, never on a page's refresh).

use serde::Serialize;

use super::Inspector;
use crate::error::Result;
use crate::policy::reroute::reroute_next_queue;
use crate::wire::{WireRule, rule_window};

/// One tenant's reroute window of a job class.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WindowRow {
    /// The tenant, as the window key holds it (raw).
    pub tenant: String,
    /// Per rule: jobs counted in its window now.
    pub counts: Vec<u64>,
    /// The queue the tenant's next job would get.
    pub next_queue: String,
}

/// A step of a scan over the keyspace for reroute windows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WindowPage {
    /// Redis's clock (whole seconds) the counts were taken at.
    pub now: i64,
    /// Windows found in this step.
    pub rows: Vec<WindowRow>,
    /// The scan's cursor to resume from, or `None` when the scan is complete.
    pub next: Option<u64>,
    /// Keys the scan looked at in this step.
    pub scanned: u64,
}

impl Inspector {
    /// One step of a scan for the reroute windows of `class` (declared for
    /// `base_queue`, judged by `rules`): each tenant's count per rule and the
    /// queue its next job would get. Looks at about `count` keys per step.
    pub async fn reroute_windows(
        &self,
        class: &str,
        base_queue: &str,
        rules: &[WireRule],
        max_window_secs: u64,
        cursor: u64,
        count: usize,
    ) -> Result<WindowPage> {
        let now = self.time().await?.floor() as i64;
        let (next, found) = self
            .broker
            .window_keys_step(class, base_queue, cursor, count.clamp(1, 10_000))
            .await?;
        let mut rows = Vec::with_capacity(found.len());
        if !found.is_empty() && !rules.is_empty() {
            let from: Vec<i64> = rules
                .iter()
                .map(|r| now - rule_window(r, max_window_secs) as i64)
                .collect();
            let keys: Vec<String> = found.iter().map(|(_, key)| key.clone()).collect();
            let counts = self.broker.window_counts(&keys, &from).await?;
            for ((tenant, _), counts) in found.into_iter().zip(counts.chunks(rules.len())) {
                rows.push(WindowRow {
                    tenant,
                    counts: counts.to_vec(),
                    next_queue: reroute_next_queue(base_queue, rules, counts).to_owned(),
                });
            }
        }
        rows.sort_by(|a, b| a.tenant.cmp(&b.tenant));
        Ok(WindowPage {
            now,
            rows,
            next: (next != 0).then_some(next),
            scanned: count as u64,
        })
    }
}
