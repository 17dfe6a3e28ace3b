//! The per-job series of this process (`fairjob_jobs_total`,
//! `fairjob_job_duration_seconds`, `fairjob_job_wait_seconds`) with their
//! handles kept between jobs: looking a series up in the recorder costs
//! about a microsecond (a key built and hashed, a map read), more than the
//! rest of a no-op job's bookkeeping, so a handle is reused while it is
//! fresh.
//!
//! Fresh means used within half the idle timeout: a recorder that drops
//! series idle for the timeout (as `worker run --metrics` does for gauges
//! and histograms) cannot have dropped a series used that recently, so a
//! write through the kept handle is never lost on a dropped series; an older
//! handle is looked up again (which registers the series anew if it was
//! dropped). Tenant labels come from the queue's [`TopK`].

use std::collections::HashMap;
use std::time::{Duration, Instant};

use ::metrics::{Counter, Histogram, SharedString, counter, histogram};

use crate::config::MetricsConfig;
use crate::metrics::{self, Outcome, TopK};

/// A handle and when it was last used.
struct Kept<H> {
    handle: H,
    used: Instant,
}

/// Returns the handle in `slot` if fresh, else `make()`'s (kept).
fn fresh<H>(
    slot: &mut Option<Kept<H>>,
    now: Instant,
    within: Duration,
    make: impl FnOnce() -> H,
) -> &H {
    match slot {
        Some(k) if now.saturating_duration_since(k.used) < within => {
            k.used = now;
        }
        _ => {
            *slot = Some(Kept {
                handle: make(),
                used: now,
            });
        }
    }
    &slot.as_ref().expect("just set").handle
}

const OUTCOMES: [Outcome; 6] = [
    Outcome::Success,
    Outcome::Retry,
    Outcome::Dead,
    Outcome::Discarded,
    Outcome::Fenced,
    Outcome::Yielded,
];

#[derive(Default)]
struct ClassSeries {
    duration: Option<Kept<Histogram>>,
    outcomes: [Option<Kept<Counter>>; 6],
}

struct QueueSeries {
    label: SharedString,
    tenants: TopK,
    waits: HashMap<String, Option<Kept<Histogram>>>,
    classes: HashMap<&'static str, ClassSeries>,
}

/// This process's per-job series, by queue.
pub(crate) struct JobSeries {
    within: Duration,
    k: usize,
    retire_after: Duration,
    queues: HashMap<String, QueueSeries>,
}

impl JobSeries {
    pub(crate) fn new(config: &MetricsConfig) -> JobSeries {
        JobSeries {
            within: config.idle_timeout / 2,
            k: config.tenant_slots(),
            retire_after: config.idle_timeout + metrics::RETIRE_MARGIN,
            queues: HashMap::new(),
        }
    }

    fn queue(&mut self, queue: &str) -> &mut QueueSeries {
        if !self.queues.contains_key(queue) {
            let series = QueueSeries {
                label: SharedString::from(queue.to_owned()),
                tenants: TopK::new(self.k, self.retire_after),
                waits: HashMap::new(),
                classes: HashMap::new(),
            };
            self.queues.insert(queue.to_owned(), series);
        }
        self.queues.get_mut(queue).expect("just inserted")
    }

    /// A job of `queue` and `tenant` (`""`: none) started after `wait`.
    pub(crate) fn waited(&mut self, queue: &str, tenant: &str, wait: f64) {
        let now = Instant::now();
        let (within, k) = (self.within, self.k);
        let q = self.queue(queue);
        let label = if q.tenants.observe(tenant, 1.0, now) {
            tenant
        } else {
            metrics::OTHER
        };
        if !q.waits.contains_key(label) {
            if q.waits.len() > 2 * (k + 1) {
                // Retired tenants' handles: of no use once stale.
                q.waits.retain(|_, h| {
                    h.as_ref()
                        .is_some_and(|h| now.saturating_duration_since(h.used) < within)
                });
            }
            q.waits.insert(label.to_owned(), None);
        }
        let slot = q.waits.get_mut(label).expect("just inserted");
        let queue_label = &q.label;
        fresh(slot, now, within, || {
            histogram!(
                metrics::JOB_WAIT,
                "queue" => queue_label.clone(),
                "tenant" => label.to_owned()
            )
        })
        .record(wait);
    }

    /// A job of `class` (a label: registered or `__unknown__`) and `queue`
    /// finished with `outcome`, after `perform` ran for `duration` (if it ran).
    pub(crate) fn finished(
        &mut self,
        class: &'static str,
        queue: &str,
        outcome: Outcome,
        duration: Option<Duration>,
    ) {
        let now = Instant::now();
        let within = self.within;
        let q = self.queue(queue);
        let queue_label = q.label.clone();
        let c = q.classes.entry(class).or_default();
        if let Some(d) = duration {
            let ql = queue_label.clone();
            fresh(
                &mut c.duration,
                now,
                within,
                || histogram!(metrics::JOB_DURATION, "class" => class, "queue" => ql),
            )
            .record(d.as_secs_f64());
        }
        let i = OUTCOMES
            .iter()
            .position(|o| *o == outcome)
            .expect("every outcome");
        fresh(&mut c.outcomes[i], now, within, || {
            counter!(
                metrics::JOBS_TOTAL,
                "class" => class,
                "queue" => queue_label,
                "outcome" => outcome.as_str()
            )
        })
        .increment(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_handle_is_used_only_while_fresh() {
        let mut slot: Option<Kept<u32>> = None;
        let t0 = Instant::now();
        let within = Duration::from_secs(10);
        assert_eq!(*fresh(&mut slot, t0, within, || 1), 1);
        assert_eq!(
            *fresh(&mut slot, t0 + Duration::from_secs(9), within, || 2),
            1
        );
        // Used at 9 s: fresh until 19 s.
        assert_eq!(
            *fresh(&mut slot, t0 + Duration::from_secs(18), within, || 3),
            1
        );
        assert_eq!(
            *fresh(&mut slot, t0 + Duration::from_secs(40), within, || 4),
            4
        );
    }

    #[test]
    fn wait_handles_stay_bounded_with_many_tenants() {
        let config = MetricsConfig {
            top_k: 3,
            ..MetricsConfig::default()
        };
        let mut s = JobSeries::new(&config);
        for t in 0..1000 {
            s.waited("q", &format!("t{t}"), 0.1);
        }
        let q = &s.queues["q"];
        assert!(q.waits.len() <= 4, "{}", q.waits.len());
        assert!(q.waits.contains_key(metrics::OTHER));
    }
}
