//! Reroute windows of a job class per tenant, found by a resumable scan of
//! the keyspace (run on request, never on a page's refresh).

use serde::Serialize;

use crate::broker::RedisBroker;
use crate::broker::keys::glob_escape;
use crate::error::Result;
use crate::wire::WireRule;

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

impl RedisBroker {
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
        let k = &self.keys;
        let pattern = k.fair_window(&glob_escape(class), "*", base_queue);
        let prefix = k.fair_window(class, "", base_queue);
        let now = self.time().await?.floor() as i64;
        let (next, found) = self
            .scan_step(&pattern, cursor, count.clamp(1, 10_000))
            .await?;
        let mut rows = Vec::with_capacity(found.len());
        if !found.is_empty() && !rules.is_empty() {
            let mut pipe = redis::pipe();
            for key in &found {
                for r in rules {
                    let per = r.per.unwrap_or(max_window_secs) as i64;
                    pipe.zcount(key, now - per, "+inf");
                }
            }
            let counts: Vec<u64> = self.pipe(&pipe).await?;
            for (key, counts) in found.iter().zip(counts.chunks(rules.len())) {
                let mut next_queue = base_queue.to_owned();
                for (r, n) in rules.iter().zip(counts) {
                    // The next job is counted before the rules are checked.
                    if r.threshold < n + 1 {
                        next_queue = r.queue.clone();
                    }
                }
                rows.push(WindowRow {
                    tenant: key.strip_prefix(&prefix).unwrap_or(key).to_owned(),
                    counts: counts.to_vec(),
                    next_queue,
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
