//! What operators see: the read models of the CLI, the dashboard and the
//! metrics sampler, built from the broker's raw reads ([`crate::broker::read`])
//! and the policy modules' pure functions, so a rule is written once and a
//! view explains it by calling it ("next job goes to `reports_slowest`, back
//! in 61 s" comes from [`crate::policy::reroute::reroute_target`], the function the
//! testing fake runs and `push.lua` states).
//!
//! [`Inspector`] is the one handle the UI crates hold: every view, and the
//! operator's actions (retry, delete, pause, shard policy, slot limits,
//! process signals), go through it. Sentences are not built here: a view
//! carries typed facts and reasons ([`Reason`]), and the dashboard and the CLI
//! render them.
//!
//! Layer 4: above `fair`, `limit`, `queues` and `config`; no `redis::` here.

mod batches;
mod cron;
mod explain;
mod health;
mod iteration;
mod jobs;
mod processes;
mod queues;
mod rates;
mod sample;
mod tenant;
mod windows;
mod workflow;

use crate::broker::{ConnectOptions, RedisBroker};
use crate::error::Result;

pub use crate::broker::keys::{decode as decode_key, encode as encode_key};
pub use crate::broker::read::{
    FinishedCounts, LimitDetail, LimitPage, LimitRow, LongWait, MAX_CLASSES, MAX_MINUTES,
    MAX_QUEUES, MAX_READ_ROWS, OVERVIEW_TENANT_CAP, Overview, Page, QueueRow, RECENT_MINUTES,
    SHARE_MINUTES, ServerFacts, ShardRow, ShardView, SlotHolder, SlotWaiter, Throughput,
    UniqueLockPage, UniqueLockRow, WaitSummary, WorkerRow,
};
pub use crate::broker::{
    Acted, JobSet, MAX_BULK, ProcessSignal, SetAction, Setting, ShardPolicy, ShardRate,
    StoredYield, YieldCounts, YieldPolicy, YieldRequest,
};
pub use crate::wire::ClassInfo;
pub use crate::wire::cron::CronSource;
pub use batches::{
    BATCH_FAILURES, BATCH_ROWS, BatchCallback, BatchState, BatchStatus, BatchView, BatchesView,
};
pub use cron::CronRow;
pub use explain::{EXPLAIN_BUDGET, EXPLAIN_MAX_BUDGET, Explanation, JobSummary, Location, Reason};
pub use health::{Readiness, Refusal, refusal_of};
pub use iteration::{IterationView, iteration_view};
pub use jobs::{JobEntry, JobFilter, JobPage, SCAN_BUDGET};
pub use processes::{ProcessPage, ProcessRow, RunningJob};
pub use queues::{
    BlockReason, Blocked, FetchPlan, MEASURED_MINUTES, OverviewView, PlanTier, QueueState,
    QueuesView, SCHEDULED_SAMPLE, SHARD_COUNT_PAGES, class_of_limit,
};
pub use rates::{
    RateLimitView, RateLimits, RateLimitsView, RateView, effective as effective_rate,
    view_of as rate_view_of,
};
pub use sample::{MetricsSample, QueueSample, SAMPLE_HEADS, TenantSample};
pub use tenant::{RerouteState, RuleState, TENANT_SET_SCAN, TenantQueue, TenantView};
pub use windows::{WindowPage, WindowRow};
pub use workflow::{
    EXPLAIN_STEP_DEPS, MAX_STEP_ROWS, STEP_DEPS, STEP_ROWS, StepStatus, StepView, WorkflowView,
};

/// The operator's handle on fairjob's state: views and actions, over one
/// connection (cheap to clone).
#[derive(Debug, Clone)]
pub struct Inspector {
    broker: RedisBroker,
    /// Seconds added to Redis's clock, as the client that made this
    /// inspector adds them to its pushes (see `Client::set_clock_offset`).
    clock_offset: i64,
}

impl Inspector {
    /// Connects to Redis for inspection only (the CLI's commands).
    pub async fn connect(url: &str, options: ConnectOptions) -> Result<Inspector> {
        Ok(Inspector {
            broker: RedisBroker::connect(url, options).await?,
            clock_offset: 0,
        })
    }

    /// Inspects through an existing connection, judging time-based rules
    /// (reroute windows) with the same clock offset as the client's pushes.
    pub(crate) fn new(broker: RedisBroker, clock_offset: i64) -> Inspector {
        Inspector {
            broker,
            clock_offset,
        }
    }

    /// The server, without credentials.
    pub fn redis_display(&self) -> &str {
        self.broker.redis_display()
    }

    /// Redis's clock (plus the client's clock offset), in float seconds:
    /// the `now` every view is judged at.
    pub async fn time(&self) -> Result<f64> {
        Ok(self.broker.time().await? + self.clock_offset as f64)
    }

    /// One PING's round trip.
    pub async fn ping(&self) -> Result<std::time::Duration> {
        self.broker.ping().await
    }

    /// Every queue's size, the sets, the counters and the workers.
    pub async fn overview(&self) -> Result<Overview> {
        self.broker.overview().await
    }

    /// The classes workers published, by name.
    pub async fn classes(&self) -> Result<Vec<ClassInfo>> {
        self.broker.classes().await
    }

    /// Every queue's name, the sharded ones, and whether there were more
    /// than [`MAX_QUEUES`].
    pub async fn queue_names(
        &self,
    ) -> Result<(Vec<String>, std::collections::BTreeSet<String>, bool)> {
        self.broker.queue_names().await
    }

    /// The paused queues.
    pub async fn paused_queues(&self) -> Result<Vec<String>> {
        self.broker.paused_queues().await
    }

    /// Waits over the last `minutes` minutes per queue (of `tenant` when
    /// given; `Some(None)`: jobs without a tenant).
    pub async fn waits(
        &self,
        queues: &[String],
        tenant: Option<Option<&str>>,
        minutes: u64,
    ) -> Result<Vec<WaitSummary>> {
        self.broker.waits(queues, tenant, minutes).await
    }

    /// The tenants that waited longest over the last `minutes` minutes.
    pub async fn longest_waits(
        &self,
        queues: &[String],
        minutes: u64,
        n: usize,
    ) -> Result<Vec<LongWait>> {
        self.broker.longest_waits(queues, minutes, n).await
    }

    /// Tenants seen in `queues` over the last `minutes` minutes whose name
    /// contains `needle`, longest wait first, at most `n`.
    pub async fn recent_tenants(
        &self,
        queues: &[String],
        minutes: u64,
        needle: &str,
        n: usize,
    ) -> Result<Vec<LongWait>> {
        self.broker.recent_tenants(queues, minutes, needle, n).await
    }

    /// Jobs finished per queue per minute over the last `minutes` minutes.
    pub async fn throughput(&self, queues: &[String], minutes: u64) -> Result<Throughput> {
        self.broker.throughput(queues, minutes).await
    }

    /// One page of a sharded queue's tenants.
    pub async fn shard_view(&self, queue: &str, page: Page) -> Result<ShardView> {
        self.broker.shard_view(queue, page).await
    }

    /// The given tenants of a sharded queue, with the queue's defaults.
    pub async fn shard_tenants(&self, queue: &str, tenants: &[Option<&str>]) -> Result<ShardView> {
        self.broker.shard_tenants(queue, tenants).await
    }

    /// One page of live unique locks (a bounded `SCAN`).
    pub async fn unique_locks(&self, page: Page) -> Result<UniqueLockPage> {
        self.broker.unique_locks(page).await
    }

    /// Removes a unique lock by hand (its key from [`UniqueLockRow::key`]),
    /// whoever holds it: the next push of its key is accepted. Returns
    /// whether there was one. Only keys named like a unique lock are taken.
    pub async fn unlock(&self, key: &str) -> Result<bool> {
        if !key.contains(":unique:") || !key.contains("fairjob:{") {
            return Err(crate::Error::Config(format!(
                "{key:?} is not a unique lock key"
            )));
        }
        self.broker.unique_release(key, None).await
    }

    /// One page of slot-limited keys with their state.
    pub async fn limits(&self, page: Page) -> Result<LimitPage> {
        self.broker.limits(page).await
    }

    /// One slot-limited key with its first `n` holders and waiters.
    pub async fn limit_detail(&self, full_key: &str, n: usize) -> Result<LimitDetail> {
        self.broker.limit_detail(full_key, n).await
    }

    /// Rate limiters: list, set, pause, resume.
    pub fn rate_limits(&self) -> RateLimits {
        RateLimits::new(self.broker.clone())
    }

    /// Pauses `queue`: workers stop fetching it; jobs can still be enqueued.
    pub async fn pause_queue(&self, queue: &str) -> Result<()> {
        self.broker.pause_queue(queue).await
    }

    /// Resumes a paused queue and wakes its idle workers.
    pub async fn resume_queue(&self, queue: &str) -> Result<()> {
        self.broker.resume_queue(queue).await
    }

    /// Applies `action` to entries of `set`, each given by its exact bytes
    /// (at most [`MAX_BULK`] per call).
    pub async fn act_on_entries(
        &self,
        set: JobSet,
        action: SetAction,
        entries: &[Vec<u8>],
    ) -> Result<Acted> {
        self.broker.act_on_entries(set, action, entries).await
    }

    /// Sends a worker process one of Sidekiq's remote signals (quiet, stop),
    /// as Sidekiq's Web UI does.
    pub async fn signal_process(&self, identity: &str, signal: ProcessSignal) -> Result<()> {
        self.broker.signal_process(identity, signal).await
    }

    /// Changes a sharded queue's settings for `tenant` (`None`: the default).
    pub async fn set_shard_policy(
        &self,
        queue: &str,
        tenant: Option<&str>,
        policy: ShardPolicy,
    ) -> Result<()> {
        self.broker.set_shard_policy(queue, tenant, policy).await
    }

    /// A sharded queue's fair-yield settings as stored (`None`: the default,
    /// [`crate::policy::share::YieldSettings::DEFAULT`]).
    pub async fn yield_policy(&self, queue: &str) -> Result<StoredYield> {
        self.broker.yield_policy(queue).await
    }

    /// Changes a sharded queue's fair-yield settings (grace, minimum run,
    /// cool-down, on/off; queue-wide).
    pub async fn set_yield_policy(&self, queue: &str, policy: YieldPolicy) -> Result<()> {
        self.broker.set_yield_policy(queue, policy).await
    }

    /// Sets a sharded queue's running limit (cap) for a tenant (`None`: the
    /// default); `limit` `None` removes it.
    pub async fn set_shard_limit(
        &self,
        queue: &str,
        tenant: Option<&str>,
        limit: Option<u32>,
    ) -> Result<()> {
        self.broker.set_shard_limit(queue, tenant, limit).await
    }

    /// Sets a slot-limited key's limit (`None`: back to the declared
    /// `default`) and releases waiters into the new free slots; returns how
    /// many were released.
    pub async fn set_slot_limit(
        &self,
        full_key: &str,
        limit: Option<u32>,
        default: u32,
    ) -> Result<u64> {
        crate::limit::set_limit(&self.broker, full_key, limit, default).await
    }
}

/// When a job's current wait began, from its raw payload (its last requeue
/// by a yield, else `enqueued_at`, else `created_at`).
fn enqueued_at(raw: &[u8]) -> Option<f64> {
    crate::wire::Payload::parse_slice(raw).ok()?.wait_started()
}
