//! Jobs the tests run. `LedgerJob`s append `start`/`end` lines to a file per
//! process in `$FAIRJOB_TEST_LEDGER` (outside the Redis under test).

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use fairjob::{Job, JobContext, JobError, Perform};
use serde::{Deserialize, Serialize};

/// Does nothing.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(queue = "default")]
pub struct NoopJob(pub u64);

/// Count of NoopJobs performed in this process.
pub static NOOPS: AtomicUsize = AtomicUsize::new(0);

impl Perform for NoopJob {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        NOOPS.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// The list, inside the namespace, that the jobs here RPUSH what they did to
/// (read with [`crate::Redis::records`]).
pub const RECORD: &str = "record";

/// RPUSHes `line` to the list [`RECORD`] of the job's namespace.
async fn record(
    cx: &JobContext,
    line: impl redis::ToRedisArgs + Send + Sync,
) -> Result<(), JobError> {
    let b = cx.client().broker();
    let key = format!("{}{RECORD}", b.keys().prefix());
    crate::query::<i64>(b, redis::cmd("RPUSH").arg(key).arg(line)).await?;
    Ok(())
}

/// Records `<queue> <tenant> <arg> <attempt> <interrupted>` onto the list `record`
/// (inside the namespace) so a test can see what ran where.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "RecordJob")]
pub struct RecordJob(pub String);

impl Perform for RecordJob {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        let line = format!(
            "{} {} {} {} {}",
            cx.queue(),
            cx.tenant().unwrap_or("-"),
            self.0,
            cx.attempt(),
            cx.was_interrupted()
        );
        record(cx, line).await
    }
}

/// Always fails with `boom <arg>`.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "FailJob", retry = 2)]
pub struct FailJob(pub String);

impl Perform for FailJob {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        Err(JobError::retry(format!("boom {}", self.0)).with_class("ArgumentError"))
    }
}

/// Records `"flaky <arg> <attempt>"` onto `record`; fails its first attempt
/// (retried 200 ms later), succeeds after.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "FlakyJob", retry = 3)]
pub struct FlakyJob(pub String);

impl Perform for FlakyJob {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        record(cx, format!("flaky {} {}", self.0, cx.attempt())).await?;
        if cx.retry_count().is_none() {
            return Err(JobError::retry_in(Duration::from_millis(200), "first try"));
        }
        Ok(())
    }
}

/// Panics.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "PanicJob", retry = 1)]
pub struct PanicJob;

impl Perform for PanicJob {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        panic!("kaboom")
    }
}

/// Sleeps `ms`, writing `start`/`end` ledger lines; aborts the process when `abort`.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "LedgerJob", queue = "ledger")]
pub struct LedgerJob {
    /// Sleep.
    pub ms: u64,
    /// Abort the process instead (a poison pill).
    #[serde(default)]
    pub abort: bool,
}

impl LedgerJob {
    /// A job that sleeps `ms`.
    pub fn sleeping(ms: u64) -> LedgerJob {
        LedgerJob { ms, abort: false }
    }

    /// A poison pill: aborts the worker process that runs it.
    pub fn poison() -> LedgerJob {
        LedgerJob { ms: 0, abort: true }
    }
}

fn ledger(kind: &str, jid: &str) {
    ledger_line(&format!("{kind} {jid} {}\n", std::process::id()));
}

/// [`ledger`] with the time (unix ms) as a fourth field.
fn ledger_timed(kind: &str, id: &str) {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis();
    ledger_line(&format!("{kind} {id} {} {ms}\n", std::process::id()));
}

fn ledger_line(line: &str) {
    if let Some(dir) = std::env::var_os("FAIRJOB_TEST_LEDGER") {
        let path = std::path::Path::new(&dir).join(format!("{}.log", std::process::id()));
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            // One write(2) per line: `writeln!` issues several writes, and the
            // lines of concurrent jobs of one process would interleave.
            let _ = f.write_all(line.as_bytes());
            let _ = f.sync_data();
        }
    }
}

impl Perform for LedgerJob {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        ledger("start", cx.jid());
        if self.abort {
            std::process::abort();
        }
        tokio::time::sleep(Duration::from_millis(self.ms)).await;
        ledger("end", cx.jid());
        Ok(())
    }
}

/// A workflow's step for the fault tests: appends `start|end <bid>/<step>
/// <pid> <unix ms>` to the ledger (the step's name, not its jid, so a test
/// reads its workflow by name; [`crate::timed_ledger`] reads the times), sleeps
/// `ms`, and is discarded when `die`.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "WfLedgerJob", queue = "ledger")]
pub struct WfLedgerJob {
    /// Sleep.
    pub ms: u64,
    /// Fail for good (discarded) after the sleep.
    #[serde(default)]
    pub die: bool,
}

impl Perform for WfLedgerJob {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        let bid = cx.batch().map(|b| b.bid().to_owned()).unwrap_or_default();
        let id = format!("{bid}/{}", cx.workflow_step().unwrap_or_default());
        ledger_timed("start", &id);
        tokio::time::sleep(Duration::from_millis(self.ms)).await;
        ledger_timed("end", &id);
        if self.die {
            return Err(JobError::discard("the step dies"));
        }
        Ok(())
    }
}

/// [`LedgerJob`] on a tenant-sharded queue (`ledger_shards`), of `tenant`.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "ShardLedgerJob", queue = "ledger_shards", shard_by_tenant)]
#[fair_tenant(tenant)]
pub struct ShardLedgerJob {
    /// Its tenant.
    pub tenant: String,
    /// Sleep.
    pub ms: u64,
}

impl Perform for ShardLedgerJob {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        ledger("start", cx.jid());
        tokio::time::sleep(Duration::from_millis(self.ms)).await;
        ledger("end", cx.jid());
        Ok(())
    }
}

/// A tenant-aware job with the gem spec's two rules (1/day → semislow, 1/hour → supaslow).
#[allow(clippy::duplicated_attributes)] // rust-clippy#13238: repeated #[throttle] is not a duplicate
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "TJob", queue = "whatever")]
#[fair_tenant(tenant)]
#[throttle(queue = "whatever_semislow", threshold = 1, per = "1d")]
#[throttle(queue = "whatever_supaslow", threshold = 1, per = "1h")]
pub struct TJob {
    /// Tenant.
    pub tenant: String,
}

impl Perform for TJob {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// A job with threshold 2 on a short window, for concurrency and bulk tests.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "BurstJob", queue = "burst")]
#[fair_tenant(0)]
#[throttle(queue = "burst_slow", threshold = 2, per = "1h")]
pub struct BurstJob(pub String);

impl Perform for BurstJob {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// A job on a tenant-sharded queue that records its start (like RecordJob).
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "ShardJob", queue = "conversions", shard_by_tenant)]
#[fair_tenant(tenant)]
pub struct ShardJob {
    /// Tenant.
    pub tenant: String,
    /// Sequence within the tenant.
    pub n: u32,
    /// Sleep.
    #[serde(default)]
    pub ms: u64,
}

impl ShardJob {
    /// `n` jobs of `tenant` numbered from 0, that don't sleep.
    pub fn batch(tenant: &str, n: u32) -> Vec<ShardJob> {
        (0..n)
            .map(|n| ShardJob {
                tenant: tenant.to_owned(),
                n,
                ms: 0,
            })
            .collect()
    }
}

impl Perform for ShardJob {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        record(cx, format!("{} {}", self.tenant, self.n)).await?;
        if self.ms > 0 {
            tokio::time::sleep(Duration::from_millis(self.ms)).await;
        }
        Ok(())
    }
}

/// Like [`LedgerJob`] (queue `ledger`, `start`/`end` ledger lines around a sleep of
/// `ms`), and at its start also records what it knows about itself onto the list
/// `record` (inside the namespace) as one JSON object: `tag`, `jid`, `attempt`,
/// `interrupted_count`, `was_interrupted`, `retry_count`, `pid`.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "ProbeJob", queue = "ledger")]
pub struct ProbeJob {
    /// A label for the test.
    pub tag: String,
    /// Sleep.
    pub ms: u64,
}

impl Perform for ProbeJob {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        ledger("start", cx.jid());
        let line = serde_json::json!({
            "tag": self.tag,
            "jid": cx.jid(),
            "attempt": cx.attempt(),
            "interrupted_count": cx.interrupted_count(),
            "was_interrupted": cx.was_interrupted(),
            "retry_count": cx.retry_count(),
            "pid": std::process::id(),
        });
        record(cx, line.to_string()).await?;
        tokio::time::sleep(Duration::from_millis(self.ms)).await;
        ledger("end", cx.jid());
        Ok(())
    }
}

/// Records, as one JSON object on the list `record` (inside the namespace), the
/// queue it was fetched from, its tenant and the payload's `queue` and
/// `fair_tenant` fields, byte for byte (for odd tenant ids and queue names).
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "EchoTenantJob")]
pub struct EchoTenantJob(pub String);

impl Perform for EchoTenantJob {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        let line = serde_json::json!({
            "tag": self.0,
            "queue": cx.queue(),
            "tenant": cx.tenant(),
            "payload_queue": cx.payload().queue(),
            "payload_tenant": cx.payload().tenant(),
        });
        record(cx, line.to_string()).await
    }
}

// ---------------------------------------------------------------------------
// Tenant-sharded queue jobs (tests/tests/shards.rs, tests/src/bin/shards_scale.rs)

/// INCR `KEYS[1]` (a tenant's gauge) and raise the tenant's field `ARGV[1]` of
/// the HASH `KEYS[2]` to the new value if it is higher, in one step.
static GAUGE_UP: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| {
    redis::Script::new(
        r"
local v = redis.call('INCR', KEYS[1])
local m = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
if v > m then redis.call('HSET', KEYS[2], ARGV[1], v) end
return v
",
    )
});

/// A job on the sharded queue `conversions` that measures, from inside the job,
/// how many jobs of its tenant run at once: INCR `gauge:<tenant>`, keep the
/// highest value in the HASH `gauge-max` (field: tenant), sleep `ms`, DECR; then
/// SADD `"<tenant> <n>"` to the SET `done` and INCR `performed` (all inside the
/// namespace). Records `"<tenant> <n>"` onto `record` at its start.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "GaugeJob", queue = "conversions", shard_by_tenant)]
#[fair_tenant(tenant)]
pub struct GaugeJob {
    /// Tenant.
    pub tenant: String,
    /// Sequence within the tenant.
    pub n: u32,
    /// Sleep.
    #[serde(default)]
    pub ms: u64,
}

impl GaugeJob {
    /// `n` jobs of `tenant` numbered from 0, each sleeping `ms`.
    pub fn batch(tenant: &str, n: u32, ms: u64) -> Vec<GaugeJob> {
        (0..n)
            .map(|n| GaugeJob {
                tenant: tenant.to_owned(),
                n,
                ms,
            })
            .collect()
    }
}

impl Perform for GaugeJob {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        let b = cx.client().broker();
        let ns = b.keys().prefix().to_owned();
        let me = format!("{} {}", self.tenant, self.n);
        let gauge = format!("{ns}gauge:{}", self.tenant);
        let mut conn = b.connection();
        let _: i64 = GAUGE_UP
            .key(&gauge)
            .key(format!("{ns}gauge-max"))
            .arg(&self.tenant)
            .invoke_async(&mut conn)
            .await
            .map_err(|e| JobError::retry(e.to_string()))?;
        record(cx, &me).await?;
        tokio::time::sleep(Duration::from_millis(self.ms)).await;
        let mut pipe = redis::pipe();
        pipe.decr(&gauge, 1)
            .ignore()
            .sadd(format!("{ns}done"), &me)
            .ignore()
            .incr(format!("{ns}performed"), 1)
            .ignore();
        crate::pipe::<()>(b, &pipe).await?;
        Ok(())
    }
}

/// A job on the sharded queue `conversions` that always fails (one retry), after
/// recording `"<tenant> fail <attempt>"` onto `record`.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(
    class = "ShardFailJob",
    queue = "conversions",
    shard_by_tenant,
    retry = 1
)]
#[fair_tenant(tenant)]
pub struct ShardFailJob {
    /// Tenant.
    pub tenant: String,
}

impl Perform for ShardFailJob {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        record(cx, format!("{} fail {}", self.tenant, cx.attempt())).await?;
        Err(JobError::retry(format!("boom {}", self.tenant)).with_class("ArgumentError"))
    }
}

/// Per-job perform counts of [`ScaleJob`]/[`PlainScaleJob`] (index = the job's
/// id), set up by the test or benchmark that enqueues them; empty = not counted.
pub static SCALE_SEEN: std::sync::RwLock<Vec<std::sync::atomic::AtomicU8>> =
    std::sync::RwLock::new(Vec::new());
/// ScaleJobs and PlainScaleJobs performed in this process.
pub static SCALE_DONE: AtomicUsize = AtomicUsize::new(0);

/// Makes [`SCALE_SEEN`] count ids `0..n` from zero, and [`SCALE_DONE`] zero.
pub fn scale_reset(n: usize) {
    let mut seen = SCALE_SEEN.write().expect("scale lock");
    seen.clear();
    seen.resize_with(n, || std::sync::atomic::AtomicU8::new(0));
    SCALE_DONE.store(0, Ordering::SeqCst);
}

/// Waits until [`SCALE_DONE`] reaches `total`; an error when it stops moving for `stall`.
pub async fn scale_wait(total: usize, stall: Duration) -> Result<(), String> {
    let mut last = (std::time::Instant::now(), 0);
    loop {
        let done = SCALE_DONE.load(Ordering::SeqCst);
        if done >= total {
            return Ok(());
        }
        if done != last.1 {
            last = (std::time::Instant::now(), done);
        }
        if last.0.elapsed() > stall {
            return Err(format!("stuck at {done}/{total} for {stall:?}"));
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// The first ten ids of [`SCALE_SEEN`] not performed exactly once, with their counts.
pub fn scale_not_once() -> Vec<(usize, u8)> {
    SCALE_SEEN
        .read()
        .expect("scale lock")
        .iter()
        .enumerate()
        .map(|(i, c)| (i, c.load(Ordering::SeqCst)))
        .filter(|(_, c)| *c != 1)
        .take(10)
        .collect()
}

fn scale_mark(id: u64) {
    if let Some(c) = SCALE_SEEN.read().expect("scale lock").get(id as usize) {
        c.fetch_add(1, Ordering::Relaxed);
    }
    SCALE_DONE.fetch_add(1, Ordering::Relaxed);
}

/// A no-op job of tenant `.0` with id `.1` on the sharded queue `scale`; counts
/// itself in [`SCALE_SEEN`] and [`SCALE_DONE`].
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "ScaleJob", queue = "scale", shard_by_tenant)]
#[fair_tenant(0)]
pub struct ScaleJob(pub u32, pub u64);

impl Perform for ScaleJob {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        scale_mark(self.1);
        Ok(())
    }
}

/// [`ScaleJob`] on the plain queue `plain_scale` (same payload shape, same work),
/// to compare a sharded queue with a plain one.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "PlainScaleJob", queue = "plain_scale")]
#[fair_tenant(0)]
pub struct PlainScaleJob(pub u32, pub u64);

impl Perform for PlainScaleJob {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        scale_mark(self.1);
        Ok(())
    }
}

/// Enqueues a [`TJob`] for its tenant from inside `perform`, through the
/// worker's own client (its middleware, namespace and reroute windows).
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "SpawnJob", queue = "spawn")]
pub struct SpawnJob(pub String);

impl Perform for SpawnJob {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        TJob { tenant: self.0 }.perform_async(cx.client()).await?;
        Ok(())
    }
}

/// A job that ends the way `kind` says: `ok`, `fail` (retried, `retry = 3`)
/// or `dead` (discarded with `dead` allowed: straight to `dead`).
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "OutcomeJob", queue = "outcomes", retry = 3)]
#[fair_tenant(tenant)]
pub struct OutcomeJob {
    /// `ok`, `fail` or `dead`.
    pub kind: String,
    /// Tenant.
    pub tenant: String,
}

impl Perform for OutcomeJob {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        match self.kind.as_str() {
            "fail" => Err(JobError::retry("boom")),
            "dead" => Err(JobError::discard("hopeless")),
            _ => Ok(()),
        }
    }
}

/// Fails once and is not kept (`retry = false`): dropped, as Sidekiq does.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "DropJob", queue = "outcomes", retry = false)]
pub struct DropJob;

impl Perform for DropJob {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        Err(JobError::retry("not worth keeping"))
    }
}

/// A job on the sharded queue `conversions` that ends the way `kind` says:
/// `dead` (discarded to `dead`), `abort` (aborts the worker process that runs
/// it: a poison pill), anything else succeeds.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(
    class = "ShardEndJob",
    queue = "conversions",
    shard_by_tenant,
    retry = 3
)]
#[fair_tenant(tenant)]
pub struct ShardEndJob {
    /// `dead`, `abort` or `ok`.
    pub kind: String,
    /// Tenant.
    pub tenant: String,
}

impl Perform for ShardEndJob {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        match self.kind.as_str() {
            "dead" => Err(JobError::discard("hopeless")),
            "abort" => std::process::abort(),
            _ => Ok(()),
        }
    }
}

/// A job of tenant `.0` on the sharded queue `many` that sleeps `.1` ms.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "ManyJob", queue = "many", shard_by_tenant)]
#[fair_tenant(0)]
pub struct ManyJob(pub u32, pub u64);

impl Perform for ManyJob {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        tokio::time::sleep(Duration::from_millis(self.1)).await;
        Ok(())
    }
}

/// An `#[iterable]` job of `steps` steps of `ms` each (checkpoint 200 ms,
/// slice 1 s): each step appends `step <jid>:<n>:<run> <pid>` to the ledger,
/// `<run>` being the token of the run (one per fetch).
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "StepLedgerJob", queue = "ledger")]
#[iterable(checkpoint = "200ms", slice = "1s")]
pub struct StepLedgerJob {
    /// Number of steps.
    pub steps: u64,
    /// Sleep per step.
    pub ms: u64,
}

impl fairjob::Iterate for StepLedgerJob {
    type Cursor = u64;

    async fn step(
        &self,
        cursor: Option<u64>,
        cx: &JobContext,
    ) -> Result<fairjob::Step<u64>, JobError> {
        let n = cursor.map_or(0, |c| c + 1);
        if n >= self.steps {
            return Ok(fairjob::Step::Done);
        }
        tokio::time::sleep(Duration::from_millis(self.ms)).await;
        let seq = cx.token().raw.split('|').next().unwrap_or("");
        ledger("step", &format!("{}:{n}:{seq}", cx.jid()));
        Ok(fairjob::Step::Next(n))
    }
}

/// A plain job that resumes by hand: it reads its place with
/// `cx.saved_cursor()`, and when `cx.should_yield()` saves it with
/// `cx.checkpoint()` and returns `JobError::yield_now()`. Counts items done
/// in [`RESUMED_ITEMS`].
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "ResumingJob", queue = "ledger")]
pub struct ResumingJob {
    /// Items to go through.
    pub items: u64,
}

/// Items `ResumingJob`s went through in this process.
pub static RESUMED_ITEMS: AtomicUsize = AtomicUsize::new(0);

impl Perform for ResumingJob {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        let start = cx.saved_cursor::<u64>().await?.unwrap_or(0);
        for i in start..self.items {
            if i > start && cx.should_yield() {
                cx.checkpoint(&i).await?;
                return Err(JobError::yield_now());
            }
            RESUMED_ITEMS.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    }
}

/// [`StepLedgerJob`] on the tenant-sharded queue `iter_shard` (slice 500 ms):
/// a yield goes to the tail of its tenant's shard.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "ShardStepJob", queue = "iter_shard", shard_by_tenant)]
#[fair_tenant(tenant)]
#[iterable(checkpoint = "200ms", slice = "500ms")]
pub struct ShardStepJob {
    /// The tenant.
    pub tenant: String,
    /// Number of steps.
    pub steps: u64,
    /// Sleep per step.
    pub ms: u64,
}

impl fairjob::Iterate for ShardStepJob {
    type Cursor = u64;

    async fn step(
        &self,
        cursor: Option<u64>,
        cx: &JobContext,
    ) -> Result<fairjob::Step<u64>, JobError> {
        let n = cursor.map_or(0, |c| c + 1);
        if n >= self.steps {
            return Ok(fairjob::Step::Done);
        }
        tokio::time::sleep(Duration::from_millis(self.ms)).await;
        let seq = cx.token().raw.split('|').next().unwrap_or("");
        ledger("step", &format!("{}:{n}:{seq}", cx.jid()));
        Ok(fairjob::Step::Next(n))
    }
}

/// [`StepLedgerJob`] on the tenant-sharded queue `thron` with a slice of an
/// hour: only fair yield (or shutdown) makes it give its slot back.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "ThronStepJob", queue = "thron", shard_by_tenant)]
#[fair_tenant(tenant)]
#[iterable(checkpoint = "200ms", slice = "1h")]
pub struct ThronStepJob {
    /// The tenant.
    pub tenant: String,
    /// Number of steps.
    pub steps: u64,
    /// Sleep per step.
    pub ms: u64,
}

impl fairjob::Iterate for ThronStepJob {
    type Cursor = u64;

    async fn step(
        &self,
        cursor: Option<u64>,
        cx: &JobContext,
    ) -> Result<fairjob::Step<u64>, JobError> {
        let n = cursor.map_or(0, |c| c + 1);
        if n >= self.steps {
            return Ok(fairjob::Step::Done);
        }
        tokio::time::sleep(Duration::from_millis(self.ms)).await;
        let seq = cx.token().raw.split('|').next().unwrap_or("");
        ledger("step", &format!("{}:{n}:{seq}", cx.jid()));
        Ok(fairjob::Step::Next(n))
    }
}

/// A plain (not iterable) job of the tenant-sharded queue `thron` that
/// polls `cx.should_yield()` after each of its `steps` steps of `ms` ms:
/// when asked it saves its place with `cx.checkpoint()` and returns
/// `JobError::yield_now()`; its next run resumes from `cx.saved_cursor()`.
/// Writes `step <jid>:<n>:<run>` per step to the ledger, like
/// [`ThronStepJob`].
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "ThronPlainJob", queue = "thron", shard_by_tenant)]
#[fair_tenant(tenant)]
pub struct ThronPlainJob {
    /// The tenant.
    pub tenant: String,
    /// Number of steps.
    pub steps: u64,
    /// Sleep per step.
    pub ms: u64,
}

impl Perform for ThronPlainJob {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        let start = cx.saved_cursor::<u64>().await?.unwrap_or(0);
        let seq = cx.token().raw.split('|').next().unwrap_or("").to_owned();
        for n in start..self.steps {
            tokio::time::sleep(Duration::from_millis(self.ms)).await;
            ledger("step", &format!("{}:{n}:{seq}", cx.jid()));
            if n + 1 < self.steps && cx.should_yield() {
                cx.checkpoint(&(n + 1)).await?;
                return Err(JobError::yield_now());
            }
        }
        Ok(())
    }
}

/// An `#[iterable]` job whose step `fail_at` fails on the first attempt;
/// the steps that succeeded are pushed to [`FLAKY_STEPS`].
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "FlakyStepJob", queue = "ledger")]
#[iterable]
pub struct FlakyStepJob {
    /// Number of steps.
    pub steps: u64,
    /// The step that fails once.
    pub fail_at: u64,
}

/// Steps `FlakyStepJob`s completed in this process, in order.
pub static FLAKY_STEPS: std::sync::Mutex<Vec<u64>> = std::sync::Mutex::new(Vec::new());

impl fairjob::Iterate for FlakyStepJob {
    type Cursor = u64;

    async fn step(
        &self,
        cursor: Option<u64>,
        cx: &JobContext,
    ) -> Result<fairjob::Step<u64>, JobError> {
        let n = cursor.map_or(0, |c| c + 1);
        if n >= self.steps {
            return Ok(fairjob::Step::Done);
        }
        if n == self.fail_at && cx.retry_count().is_none() {
            return Err(JobError::retry("step failed"));
        }
        FLAKY_STEPS.lock().expect("lock").push(n);
        Ok(fairjob::Step::Next(n))
    }
}

/// Records `<schedule> <fire time> <jid> <pid>` onto the list `record` (the
/// cron tests' ledger: which fire times were enqueued, as which jobs, run by
/// which process). Sleeps `.0` milliseconds first.
#[derive(Debug, Default, Serialize, Deserialize, Job)]
#[job(class = "CronRecordJob")]
pub struct CronRecordJob(pub u64);

impl Perform for CronRecordJob {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        if self.0 > 0 {
            tokio::time::sleep(Duration::from_millis(self.0)).await;
        }
        let fire = cx
            .fire_time()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(-1, |d| d.as_secs() as i64);
        let line = format!(
            "{} {} {} {}",
            cx.schedule().unwrap_or_else(|| "-".into()),
            fire,
            cx.jid(),
            std::process::id()
        );
        record(cx, line).await
    }
}

/// A unique job (`by(key)`, held until success): sleeps `sleep_ms` (unless
/// it was interrupted before: a recovered run is quick), records
/// `<key> <note> <jid>` onto [`RECORD`], then fails when `fail` (retried
/// once, then dead).
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "UniqueJob", queue = "unique", retry = 1)]
#[unique(for = "1h", by(key))]
pub struct UniqueJob {
    /// The unique key.
    pub key: u64,
    /// Anything; not part of the key.
    pub note: String,
    /// Sleep before recording.
    #[serde(default)]
    pub sleep_ms: u64,
    /// Fail after recording.
    #[serde(default)]
    pub fail: bool,
}

impl Perform for UniqueJob {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        if !cx.was_interrupted() {
            tokio::time::sleep(Duration::from_millis(self.sleep_ms)).await;
        }
        record(cx, format!("{} {} {}", self.key, self.note, cx.jid())).await?;
        if self.fail {
            return Err(JobError::retry("unique boom"));
        }
        Ok(())
    }
}

/// A unique job released when it starts: sleeps `sleep_ms`, then records
/// `start <key> <note>` onto [`RECORD`].
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "UniqueStartJob", queue = "unique")]
#[unique(for = "1h", until = "start")]
pub struct UniqueStartJob {
    /// The unique key (all arguments are).
    pub key: u64,
    /// Sleep before recording.
    pub sleep_ms: u64,
}

impl Perform for UniqueStartJob {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        tokio::time::sleep(Duration::from_millis(self.sleep_ms)).await;
        record(cx, format!("start {} {}", self.key, cx.jid())).await
    }
}

/// A debounced job: a push while one of its key waits replaces the waiting
/// one's arguments (and due time). Records `debounce <key> <note> <jid>`.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "DebounceJob", queue = "unique")]
#[unique(for = "1h", by(key), on_conflict = "replace")]
pub struct DebounceJob {
    /// The unique key.
    pub key: u64,
    /// The payload that the last push sets.
    pub note: String,
}

impl Perform for DebounceJob {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        record(
            cx,
            format!("debounce {} {} {}", self.key, self.note, cx.jid()),
        )
        .await
    }
}
