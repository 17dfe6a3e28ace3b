//! The worker: fetch (Sidekiq's weighted order, at-least-once), the processor
//! pool, retries, the scheduler, the heartbeat, the reaper of dead workers' jobs,
//! and graceful shutdown.
//!
//! - `builder.rs`: [`WorkerBuilder`]; `runtime.rs`: [`Worker`] and shutdown;
//!   `handle.rs`: [`WorkerHandle`] and OS signals;
//! - `fetch.rs`: the fetch loop; `processor.rs`: one job from parse to its
//!   end; `retry.rs`: Sidekiq's retry rules (pure); `middleware.rs`: the
//!   server chain; `exit.rs`: every write that ends a fetched job (ack, retry,
//!   dead, requeue, recovery), one broker call each;
//! - `heartbeat.rs`, `reaper.rs`, `scheduler.rs`, `cron.rs`: the background
//!   loops (`cron.rs`: periodic schedules, reconciled at start-up);
//!   `stats.rs`: wait statistics gathered in memory, flushed by the heartbeat;
//!   `sampler.rs`: the gauges read from Redis, set by one process at a time;
//!   `series.rs`: the per-job series and their kept handles; `acks.rs`: the
//!   task that writes succeeded jobs' acks in batches; `stall.rs`: Redis-wide
//!   stalls seen through the lease renewals, and the rule that keeps one
//!   from recovering live workers' jobs.
//!
//! A fetched job moves atomically (one `fetch.lua` call, or `shard_fetch.lua`
//! for a tenant-sharded queue, whose record lives in the queue's cluster slot)
//! into this process's in-progress record and leaves it only through
//! `exit.rs` (`finish.lua`, `shard_finish.lua`, or a batch of acks): ack,
//! retry, dead, or back to its queue.
//! The process holds a lease that its heartbeat renews; when the lease of some
//! process expires, a reaper returns that process's jobs to their queues. Idle
//! workers block on wake-up tokens that fairjob clients push with every job,
//! and look at their queues every `poll_interval` for jobs pushed by clients
//! that don't (Ruby Sidekiq).
//!
//! Layer 6: the top of the library; only `testing` and `prelude` sit above.

mod acks;
mod batch;
mod builder;
mod cron;
mod exit;
mod fair_yield;
mod fetch;
mod handle;
mod heartbeat;
pub(crate) mod iterate;
mod middleware;
mod processor;
mod reaper;
mod relay;
mod releaser;
mod retry;
mod runtime;
mod sampler;
mod scheduler;
mod series;
mod stall;
mod stats;

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::Rng;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

pub use builder::{StopSignal, WorkerBuilder};
pub use handle::WorkerHandle;
pub use heartbeat::rss_kb;
#[cfg(feature = "testing")]
pub(crate) use iterate::perform as perform_prepared;
pub use middleware::{FnServerMiddleware, ServerMiddleware, ServerNext, server_middleware_fn};
#[cfg(feature = "testing")]
pub(crate) use processor::perform_detached;
pub use relay::HANG_AFTER_KEPT_END_ENV;
#[cfg(feature = "testing")]
pub(crate) use retry::Outcome;
pub use retry::backoff;
pub use runtime::Worker;

use crate::broker::SlotHold;
use crate::client::Client;
use crate::config::WorkerConfig;
use crate::error::Error;
use crate::job::{JobContext, Registry};
use crate::metrics;
use crate::queues::QueueSpec;

#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub processed: AtomicU64,
    pub failed: AtomicU64,
}

/// A job being performed: its context and the slot it holds.
pub(crate) struct Running {
    pub cx: JobContext,
    pub slot: Option<SlotHold>,
    /// An `#[iterable]` job (fair yield may ask it to yield).
    pub iterable: bool,
    /// When this run started (epoch seconds).
    pub started: f64,
}

/// State shared by the fetch loop, job tasks and background loops.
pub(crate) struct Shared {
    pub client: Client,
    pub registry: Registry,
    pub identity: String,
    pub config: WorkerConfig,
    pub queues: QueueSpec,
    pub sharded: Vec<String>,
    /// The periodic schedules this worker's code declares.
    pub cron: Vec<crate::wire::cron::CronEntry>,
    /// The user's server middleware.
    pub chain: Arc<[Arc<dyn ServerMiddleware>]>,
    /// Jobs being performed, by token.
    pub running: Mutex<HashMap<String, Running>>,
    /// Tokens of every job this process fetched and has not finished with
    /// (parsing, waiting for a slot, performing, finishing).
    pub held: Mutex<std::collections::HashSet<String>>,
    pub stats: Stats,
    /// Waits and per-queue throughput since the last heartbeat (when
    /// `config.wait_stats` is on).
    pub waits: Mutex<stats::WaitAgg>,
    /// Cancelled when running jobs should stop (shutdown timeout reached).
    pub job_cancel: CancellationToken,
    /// Cancelled when the worker gives up on Redis work still pending (exit).
    pub abandon: CancellationToken,
    /// Quiet/stop controls (signals, Sidekiq's remote signals).
    pub control: WorkerHandle,
    pub started_at: f64,
    /// This process's per-job series and their tenant labels.
    pub series: Mutex<series::JobSeries>,
    /// Where succeeded jobs hand their acks to be written in batches (`None`
    /// with `config.batch_acks` off).
    pub acks: Option<acks::AckSender>,
    /// Where succeeded jobs of tenant-sharded queues hand their acks (and
    /// their permits) to the fetch loop, whose next fetch carries them
    /// (`None` unless `config.batch_acks` and `config.fold_acks` are on).
    pub(crate) fold: Option<acks::AckSender>,
    /// Wakes the rate releaser when a job of this process is parked.
    pub rate_release: releaser::ReleaseBell,
    last_trouble: Mutex<Option<Instant>>,
    suppressed: AtomicU64,
    /// Tokens of the jobs this process held when it found Redis had lost its
    /// data (`heartbeat::redis_lost_data`): their fenced completions are
    /// explained by that one warning.
    pub(crate) lost_with_redis: Mutex<std::collections::HashSet<String>>,
}

impl Shared {
    /// The `class` label of a job class: the class if this worker knows it
    /// (class names from Redis are data), otherwise `__unknown__`.
    pub(crate) fn class_label(&self, class: &str) -> &'static str {
        match self.registry.get(class) {
            Some(r) => r.class,
            None => metrics::UNKNOWN_CLASS,
        }
    }

    /// Logs a Redis failure at a bounded rate (one line per 10 s, with a count).
    pub(crate) fn redis_trouble(&self, during: &str, e: &Error) {
        ::metrics::counter!(metrics::REDIS_ERRORS_TOTAL, "kind" => e.redis_kind()).increment(1);
        let mut last = self.last_trouble.lock().expect("trouble lock");
        let now = Instant::now();
        if last.is_none_or(|t| now.duration_since(t) >= Duration::from_secs(10)) {
            let suppressed = self.suppressed.swap(0, Ordering::Relaxed);
            tracing::error!(during, error = %e, suppressed, "redis unavailable; retrying with backoff");
            *last = Some(now);
        } else {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Sleeps for an exponential backoff with full jitter, capped at 5 s.
pub(crate) async fn backoff_sleep(attempt: u32) {
    let cap = Duration::from_millis(100u64.saturating_mul(1 << attempt.min(6)))
        .min(Duration::from_secs(5));
    let d = rand::rng().random_range(cap / 4..=cap);
    tokio::time::sleep(d).await;
}
