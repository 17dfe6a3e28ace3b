//! What fairjob reports through the [`metrics`] facade: the series' names
//! (their names and labels are a public interface), their descriptions, the
//! outcome labels, and [`TopK`], which keeps `tenant` and slot `key` labels
//! bounded.
//!
//! The library records and never exports: an application (or
//! `fairjob-worker run --metrics ADDR`) installs a recorder; without one
//! every call is a no-op. Counters and histograms are each process's own
//! (jobs it ran, reroutes its pushes made, jobs its reaper recovered); the
//! gauges read from Redis (`fairjob_queue_*`, `fairjob_shard_*`,
//! `fairjob_slot_waiting`, `fairjob_batches_open`, `fairjob_workflow_steps_held`) are set only by the process holding the sampler
//! lease, so summing them over processes is never needed.
//!
//! Bounded labels: per queue, at most K tenants (K = `metrics.top_k`,
//! default 20) get series of their own, chosen by volume; every other
//! tenant's value is in `tenant="__other__"`. A labelled tenant that goes
//! quiet (or falls out of the top K) stops being updated and its slot is
//! given to another tenant only after the exporter's idle timeout has
//! dropped its series, so a scrape never shows more than K + 1 tenant series
//! per queue and metric.
//!
//! Layer 3: names and label policy; no IO.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use ::metrics::{Unit, describe_counter, describe_gauge, describe_histogram};

/// Jobs finished, by `class`, `queue`, `outcome` ([`Outcome`]). Counter.
pub const JOBS_TOTAL: &str = "fairjob_jobs_total";
/// Time in `perform` (with the server middleware), by `class`, `queue`. Histogram, seconds.
pub const JOB_DURATION: &str = "fairjob_job_duration_seconds";
/// Time from (latest) enqueue to start, by `queue`, `tenant`. Histogram, seconds.
pub const JOB_WAIT: &str = "fairjob_job_wait_seconds";
/// Jobs waiting in a queue (a sharded queue: its inbox and tenant lists), by `queue`. Gauge.
pub const QUEUE_SIZE: &str = "fairjob_queue_size";
/// Age of the oldest waiting job, by `queue`. Gauge, seconds.
pub const QUEUE_LATENCY: &str = "fairjob_queue_latency_seconds";
/// Jobs a reroute rule sent to another queue, by `class`, `to_queue`. Counter.
pub const REROUTES_TOTAL: &str = "fairjob_reroutes_total";
/// Unique jobs not enqueued because their key was held, by `class`. Counter.
pub const UNIQUE_REJECTIONS_TOTAL: &str = "fairjob_unique_rejections_total";
/// Running jobs of a sharded queue, by `queue`, `tenant`. Gauge.
pub const SHARD_RUNNING: &str = "fairjob_shard_running";
/// Pending jobs of a sharded queue, by `queue`, `tenant`. Gauge.
pub const SHARD_PENDING: &str = "fairjob_shard_pending";
/// Tenants of a sharded queue out of its dispatch order, waiting for their
/// rate, by `queue`. Gauge.
pub const SHARD_RATE_WAITING: &str = "fairjob_shard_rate_waiting";
/// Jobs parked in a slot limit's lock-wait list, by `key`. Gauge.
pub const SLOT_WAITING: &str = "fairjob_slot_waiting";
/// Jobs waiting in a rate limiter's list, by `key`. Gauge.
pub const RATE_WAITING: &str = "fairjob_rate_waiting";
/// Jobs a rate limiter released from its list, by `key`. Counter.
pub const RATE_RELEASED_TOTAL: &str = "fairjob_rate_released_total";
/// Jobs this process's reaper returned from dead workers. Counter.
pub const RECOVERED_TOTAL: &str = "fairjob_recovered_total";
/// Yields of running jobs back to their queues' tails, by `reason`
/// (`shutdown`, `slice`, `cancelled`, `asked`, `job`). Counter.
pub const YIELDS_TOTAL: &str = "fairjob_yields_total";
/// Fair-yield requests sent to running iterable jobs of sharded queues, by
/// `queue` and `reason` (`share`, `floor`, `burst`). Counter.
pub const YIELD_REQUESTS_TOTAL: &str = "fairjob_yield_requests_total";
/// Fair-yield requests this process's jobs left unhonoured past the
/// cool-down (the job is not killed), by `queue`. Counter.
pub const YIELD_IGNORED_TOTAL: &str = "fairjob_yield_ignored_total";
/// Time a waiting tenant of a sharded queue took to get a slot (from when
/// fair yield first saw it waiting in the dispatch order), by `queue`. Histogram.
pub const SLOT_WAIT_SECONDS: &str = "fairjob_shard_slot_wait_seconds";
/// Completions of this process fenced (the job had been recovered from it). Counter.
pub const FENCED_TOTAL: &str = "fairjob_fenced_total";
/// Jobs this process is running, by `process` (its identity). Gauge.
pub const BUSY: &str = "fairjob_busy";
/// Fire times of periodic schedules this process enqueued, by `schedule`. Counter.
pub const CRON_FIRES_TOTAL: &str = "fairjob_cron_fires_total";
/// Fire times skipped, by `schedule`, `reason` (`overlap`: the previous run was
/// still queued or running; `missed`: missed while no poller ran, past the
/// catch-up grace or collapsed into the latest). Counter.
pub const CRON_SKIPPED_TOTAL: &str = "fairjob_cron_skipped_total";
/// How late a fire time was enqueued after it came due, by `schedule`. Histogram, seconds.
pub const CRON_LATENESS_SECONDS: &str = "fairjob_cron_lateness_seconds";
/// Batches whose `complete` has not fired (staging or open), among the
/// newest 50 listed only: a bounded read, not a count of every batch. Gauge.
pub const BATCHES_OPEN: &str = "fairjob_batches_open";
/// Workflow steps held (waiting for their dependencies, in no queue),
/// among the newest 50 listed batches only: the sum of each workflow's count
/// of held steps, which the scripts that hold and release a step keep. Gauge.
pub const WORKFLOW_STEPS_HELD: &str = "fairjob_workflow_steps_held";
/// Batch callbacks this process started, by `event` (`complete`,
/// `success`, `death`): counted when `perform` starts on a callback job's
/// attempt 1 (no `retry_count`, no interrupted run before it), so a retry
/// or a run after a crash is not counted again (a yielded run that starts
/// again is). Callbacks started, not callbacks that succeeded. Counter.
pub const BATCH_CALLBACKS_TOTAL: &str = "fairjob_batch_callbacks_total";
/// Redis calls of this process that failed, by `kind` (`unreachable`,
/// `busy`, `loading`, `readonly`, `oom`, `misconf`, `clusterdown`,
/// `noscript`, `auth`, `maybe_enqueued`, `other`). Counter.
pub const REDIS_ERRORS_TOTAL: &str = "fairjob_redis_errors_total";

/// Every series name, in the order the README lists them.
pub const ALL: &[&str] = &[
    JOBS_TOTAL,
    JOB_DURATION,
    JOB_WAIT,
    QUEUE_SIZE,
    QUEUE_LATENCY,
    REROUTES_TOTAL,
    UNIQUE_REJECTIONS_TOTAL,
    SHARD_RUNNING,
    SHARD_PENDING,
    SHARD_RATE_WAITING,
    SLOT_WAITING,
    RATE_WAITING,
    RATE_RELEASED_TOTAL,
    RECOVERED_TOTAL,
    FENCED_TOTAL,
    BUSY,
    CRON_FIRES_TOTAL,
    CRON_SKIPPED_TOTAL,
    CRON_LATENESS_SECONDS,
    BATCHES_OPEN,
    WORKFLOW_STEPS_HELD,
    BATCH_CALLBACKS_TOTAL,
    REDIS_ERRORS_TOTAL,
];

/// The label value of every tenant (or slot key) without a series of its own.
pub const OTHER: &str = "__other__";

/// The `class` label of a job whose class this worker does not know (or of
/// an entry that is not a job): class names from Redis are data, and only
/// registered ones become labels.
pub const UNKNOWN_CLASS: &str = "__unknown__";

/// Histogram buckets, seconds: 5 ms to 6 h, as jobs can be long.
pub const BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0,
    3600.0, 21600.0,
];

/// How long after the idle timeout a tenant's label slot is given away:
/// room for the exporter to notice (it checks when it renders) that the old
/// series went idle and drop it first.
pub const RETIRE_MARGIN: Duration = Duration::from_secs(5);

/// How a job's run ended, the `outcome` label of [`JOBS_TOTAL`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// `perform` returned `Ok`.
    Success,
    /// Failed; scheduled for another attempt.
    Retry,
    /// Failed for the last time (or discarded with `dead` allowed): moved to `dead`.
    Dead,
    /// Failed and dropped: `retry: false` or `dead: false`, as Sidekiq does.
    Discarded,
    /// Finished, but the job had been recovered from this worker (its lease
    /// expired), so the completion was fenced and changed nothing.
    Fenced,
    /// Gave its place back (an iterable job's yield, or `JobError::yield_now`):
    /// to its queue's tail, no retry used, not a failure.
    Yielded,
}

impl Outcome {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Retry => "retry",
            Outcome::Dead => "dead",
            Outcome::Discarded => "discarded",
            Outcome::Fenced => "fenced",
            Outcome::Yielded => "yielded",
        }
    }
}

/// Registers every series' description and unit with the installed recorder
/// (call after installing it; the worker does at start).
pub fn describe() {
    describe_counter!(
        YIELD_REQUESTS_TOTAL,
        "Fair-yield requests sent to running iterable jobs, by queue and reason (share, floor, burst)."
    );
    describe_counter!(
        YIELD_IGNORED_TOTAL,
        "Fair-yield requests left unhonoured past the cool-down (the job keeps running), by queue."
    );
    describe_histogram!(
        SLOT_WAIT_SECONDS,
        Unit::Seconds,
        "Time a waiting tenant of a sharded queue took to get a slot, by queue."
    );
    describe_counter!(
        JOBS_TOTAL,
        "Jobs finished, by outcome (success, retry, dead, discarded, fenced)."
    );
    describe_histogram!(
        JOB_DURATION,
        Unit::Seconds,
        "Time a job spent in perform, with the server middleware."
    );
    describe_histogram!(
        JOB_WAIT,
        Unit::Seconds,
        "Time from a job's latest enqueue to its start; tenants beyond the top K are __other__."
    );
    describe_gauge!(
        QUEUE_SIZE,
        "Jobs waiting in the queue (a sharded queue: inbox and tenant lists). Sampled by one process."
    );
    describe_gauge!(
        QUEUE_LATENCY,
        Unit::Seconds,
        "Age of the oldest waiting job. Sampled by one process."
    );
    describe_counter!(
        REROUTES_TOTAL,
        "Jobs a reroute rule pushed to another queue than their own."
    );
    describe_counter!(
        UNIQUE_REJECTIONS_TOTAL,
        "Unique jobs not enqueued because another job held their key."
    );
    describe_gauge!(
        SHARD_RUNNING,
        "Running jobs of a sharded queue's tenant. Sampled by one process."
    );
    describe_gauge!(
        SHARD_PENDING,
        "Pending jobs of a sharded queue's tenant. Sampled by one process."
    );
    describe_gauge!(
        SHARD_RATE_WAITING,
        "Tenants of a sharded queue waiting for their rate (out of the dispatch order). Sampled by one process."
    );
    describe_gauge!(
        SLOT_WAITING,
        "Jobs waiting for a slot of a concurrency limit key. Sampled by one process."
    );
    describe_gauge!(
        RATE_WAITING,
        "Jobs waiting in a rate limiter's list. Sampled by one process."
    );
    describe_counter!(
        RATE_RELEASED_TOTAL,
        "Jobs a rate limiter released from its list. Sampled by one process."
    );
    describe_counter!(
        RECOVERED_TOTAL,
        "Jobs this process's reaper returned from dead workers."
    );
    describe_counter!(
        FENCED_TOTAL,
        "Completions of this process fenced because the job had been recovered from it."
    );
    describe_gauge!(BUSY, "Jobs this process is running.");
    describe_counter!(
        CRON_FIRES_TOTAL,
        "Fire times of periodic schedules this process enqueued."
    );
    describe_counter!(
        CRON_SKIPPED_TOTAL,
        "Fire times of periodic schedules skipped (overlap, missed)."
    );
    describe_histogram!(
        CRON_LATENESS_SECONDS,
        Unit::Seconds,
        "How late a periodic schedule's fire time was enqueued."
    );
    describe_gauge!(
        BATCHES_OPEN,
        "Batches whose complete has not fired, among the newest 50 listed only (not every batch). Sampled by one process."
    );
    describe_gauge!(
        WORKFLOW_STEPS_HELD,
        "Workflow steps held (waiting for their dependencies, in no queue), among the newest 50 listed batches only. Sampled by one process."
    );
    describe_counter!(
        BATCH_CALLBACKS_TOTAL,
        "Batch callbacks this process started, by event (complete, success, death): a callback job's first run, retries not counted."
    );
    describe_counter!(
        REDIS_ERRORS_TOTAL,
        "Redis calls of this process that failed, by the kind of refusal or failure."
    );
}

/// Bounded label values for one queue's tenants (or for slot keys): at most
/// `k` values get a series of their own, the rest are [`OTHER`].
///
/// Volume is counted per value ([`TopK::observe`]'s weight) and decays by
/// half every rank interval (a quarter of the idle timeout, 100 ms to 10 s),
/// in a map that each rank cuts back to the `16 × k` largest (newcomers fill
/// it up to twice that between ranks; O(1) per observation). At each rank the `k` largest volumes are the
/// wanted set; a labelled value that is not wanted any more (or that was not
/// seen for `retire_after`) stops being labelled, and its slot is freed
/// `retire_after` after its last update, when its series is gone.
#[derive(Debug)]
pub struct TopK {
    k: usize,
    retire_after: Duration,
    rank_every: Duration,
    slots: HashMap<String, Slot>,
    volume: HashMap<String, f64>,
    wanted: HashSet<String>,
    ranked_at: Option<Instant>,
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    last: Instant,
    retiring: bool,
}

impl TopK {
    /// At most `k` labelled values (0: none); a slot is freed `retire_after`
    /// after its value's last update (the exporter's idle timeout plus
    /// [`RETIRE_MARGIN`]).
    pub fn new(k: usize, retire_after: Duration) -> TopK {
        TopK {
            k,
            retire_after,
            rank_every: (retire_after / 4)
                .clamp(Duration::from_millis(100), Duration::from_secs(10)),
            slots: HashMap::new(),
            volume: HashMap::new(),
            wanted: HashSet::new(),
            ranked_at: None,
        }
    }

    /// Counts `weight` for `value` and says whether it has a label of its
    /// own now (true) or belongs to [`OTHER`] (false).
    pub fn observe(&mut self, value: &str, weight: f64, now: Instant) -> bool {
        if self.k == 0 {
            return false;
        }
        self.add_volume(value, weight);
        if self
            .ranked_at
            .is_none_or(|t| now.duration_since(t) >= self.rank_every)
        {
            self.rank(now);
        }
        if let Some(slot) = self.slots.get_mut(value) {
            if slot.retiring {
                return false;
            }
            slot.last = now;
            return true;
        }
        if self.slots.len() < self.k && (self.wanted.len() < self.k || self.wanted.contains(value))
        {
            self.slots.insert(
                value.to_owned(),
                Slot {
                    last: now,
                    retiring: false,
                },
            );
            return true;
        }
        false
    }

    /// `value`'s label or [`OTHER`], after [`TopK::observe`].
    pub fn label<'a>(&mut self, value: &'a str, weight: f64, now: Instant) -> &'a str {
        if self.observe(value, weight, now) {
            value
        } else {
            OTHER
        }
    }

    /// Marks a value's series as updated now, labelled or retiring (a
    /// sampler that sets a gauge of a value it did not observe back to 0):
    /// its slot is kept until `retire_after` from now.
    pub fn touch(&mut self, value: &str, now: Instant) {
        if let Some(slot) = self.slots.get_mut(value) {
            slot.last = now;
        }
    }

    /// Whether `value` is labelled (and not retiring).
    pub fn is_labelled(&self, value: &str) -> bool {
        self.slots.get(value).is_some_and(|s| !s.retiring)
    }

    /// The labelled values (not retiring).
    pub fn labelled(&self) -> impl Iterator<Item = &str> {
        self.slots
            .iter()
            .filter(|(_, s)| !s.retiring)
            .map(|(v, _)| v.as_str())
    }

    /// Slots taken (labelled or retiring): never more than `k`.
    pub fn slots_taken(&self) -> usize {
        self.slots.len()
    }

    /// Volumes kept after a rank; up to twice as many between ranks.
    fn volume_cap(&self) -> usize {
        16 * self.k.max(4)
    }

    fn add_volume(&mut self, value: &str, weight: f64) {
        if let Some(v) = self.volume.get_mut(value) {
            *v += weight;
        } else if self.volume.len() < 2 * self.volume_cap() {
            self.volume.insert(value.to_owned(), weight);
        }
        // Full: a newcomer counts from the next rank on, which keeps only the
        // largest volumes and so makes room again.
    }

    /// Picks the wanted set, retires slots not in it, frees slots whose
    /// series are gone, and decays the volumes.
    fn rank(&mut self, now: Instant) {
        self.ranked_at = Some(now);
        let mut by_volume: Vec<(String, f64)> = self.volume.drain().collect();
        by_volume.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        by_volume.truncate(self.volume_cap());
        self.wanted = by_volume
            .iter()
            .take(self.k)
            .map(|(k, _)| k.clone())
            .collect();
        self.volume = by_volume.into_iter().collect();
        let retire_after = self.retire_after;
        self.slots
            .retain(|_, s| now.saturating_duration_since(s.last) <= retire_after);
        for (value, slot) in &mut self.slots {
            slot.retiring = !self.wanted.contains(value);
        }
        self.volume.retain(|_, v| {
            *v *= 0.5;
            *v >= 0.01
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_k_slots_and_the_rest_is_other() {
        let mut t = TopK::new(3, Duration::from_secs(60));
        let now = Instant::now();
        let labelled: Vec<bool> = (0..10)
            .map(|i| t.observe(&format!("t{i}"), 1.0, now))
            .collect();
        assert_eq!(labelled.iter().filter(|l| **l).count(), 3);
        assert_eq!(t.slots_taken(), 3);
        assert_eq!(t.label("t9", 1.0, now), OTHER);
        assert_eq!(t.label("t0", 1.0, now), "t0");
        assert_eq!(
            TopK::new(0, Duration::from_secs(1)).label("a", 1.0, now),
            OTHER
        );
    }

    #[test]
    fn a_busier_tenant_takes_a_slot_only_after_the_old_series_retired() {
        let retire = Duration::from_secs(8);
        let mut t = TopK::new(2, retire);
        let start = Instant::now();
        assert!(t.observe("quiet-a", 1.0, start));
        assert!(t.observe("quiet-b", 1.0, start));
        // "busy" is far busier, but both slots are taken.
        let mut now = start;
        for _ in 0..50 {
            now += Duration::from_millis(100);
            assert!(!t.observe("busy", 10.0, now), "no free slot yet");
            t.observe("quiet-a", 0.1, now);
            assert!(t.slots_taken() <= 2);
        }
        // After a rank, the quiet ones retire (not labelled any more) but keep
        // their slots until `retire` after their last update.
        now += Duration::from_secs(3);
        t.observe("busy", 10.0, now);
        assert!(!t.is_labelled("quiet-b"));
        assert_eq!(t.slots_taken(), 2);
        // quiet-b's last update was at `start`: its slot frees at start + 8 s.
        now = start + retire + Duration::from_secs(3);
        assert!(t.observe("busy", 10.0, now));
        assert!(t.slots_taken() <= 2);
        assert_eq!(t.label("quiet-b", 1.0, now), OTHER);
    }

    #[test]
    fn quiet_tenants_free_their_slots() {
        let retire = Duration::from_secs(2);
        let mut t = TopK::new(1, retire);
        let start = Instant::now();
        assert!(t.observe("a", 1.0, start));
        assert!(!t.observe("b", 1.0, start + Duration::from_secs(1)));
        // a went quiet: after `retire` (and a rank), b gets the slot.
        let later = start + retire + Duration::from_secs(1);
        assert!(t.observe("b", 1.0, later));
        assert!(!t.observe("a", 1.0, later));
    }

    #[test]
    fn the_volume_map_stays_bounded() {
        let mut t = TopK::new(2, Duration::from_secs(60));
        let now = Instant::now();
        for i in 0..10_000 {
            t.observe(&format!("t{i}"), 1.0, now);
        }
        assert!(t.volume.len() <= 2 * 64);
        assert!(t.slots_taken() <= 2);
    }
}
