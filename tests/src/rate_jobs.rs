//! Jobs with a `#[rate_limit]`, each recording its start on Redis's clock
//! (`<ns>started:<key>`: `<µs> <jid>`, in start order).

use std::sync::LazyLock;
use std::time::Duration;

use fairjob::{Job, JobContext, JobError, Perform};
use serde::{Deserialize, Serialize};

static STARTED: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        "local t = redis.call('TIME') \
         redis.call('RPUSH', KEYS[1], string.format('%d%06d', t[1], t[2]) .. ' ' .. ARGV[1] .. ' ' .. ARGV[2]) \
         return 1",
    )
});

/// Records its start under `key`, then sleeps `ms`. 20 starts per second per key.
#[derive(Debug, Clone, Serialize, Deserialize, Job)]
#[job(class = "RateJob", queue = "rates")]
#[rate_limit(limit = 20, per = "1s", key = key)]
pub struct RateJob {
    /// The limited key.
    pub key: String,
    /// Sleep.
    pub ms: u64,
}

impl RateJob {
    /// `n` jobs of `key`, each sleeping `ms`.
    pub fn batch(key: &str, n: usize, ms: u64) -> Vec<RateJob> {
        let job = RateJob {
            key: key.to_owned(),
            ms,
        };
        std::iter::repeat_n(job, n).collect()
    }
}

impl Perform for RateJob {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        started(cx, &self.key).await?;
        tokio::time::sleep(Duration::from_millis(self.ms)).await;
        Ok(())
    }
}

/// The same as [`RateJob`] without a limit, on the same queue.
#[derive(Debug, Clone, Serialize, Deserialize, Job)]
#[job(class = "RateFreeJob", queue = "rates")]
pub struct RateFreeJob {
    /// The key its start is recorded under.
    pub key: String,
    /// Sleep.
    pub ms: u64,
}

impl Perform for RateFreeJob {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        started(cx, &self.key).await?;
        tokio::time::sleep(Duration::from_millis(self.ms)).await;
        Ok(())
    }
}

/// Records a start of `key` on Redis's clock.
async fn started(cx: &JobContext, key: &str) -> Result<(), JobError> {
    let b = cx.client().broker();
    let mut inv = STARTED.prepare_invoke();
    inv.key(format!("{}started:{key}", b.keys().prefix()))
        .arg(cx.jid())
        .arg(std::process::id());
    let mut conn = b.connection();
    let _: i64 = inv.invoke_async(&mut conn).await?;
    Ok(())
}

/// One start recorded by a job of this module: Redis µs, jid, and the pid
/// of the process that ran it.
pub type Start = (u64, String, String);

/// Parses the lines of a `started:<key>` list; malformed lines are skipped.
pub fn parse_starts(lines: &[String]) -> Vec<Start> {
    lines
        .iter()
        .filter_map(|s| {
            let mut f = s.split(' ');
            let at = f.next()?.parse().ok()?;
            Some((at, f.next()?.to_owned(), f.next()?.to_owned()))
        })
        .collect()
}

/// The most starts in any window of `window` µs (half-open).
pub fn max_in_window(times: &[u64], window: u64) -> usize {
    times
        .iter()
        .map(|&a| times.iter().filter(|&&t| t >= a && t < a + window).count())
        .max()
        .unwrap_or(0)
}

/// Jobs of the rate benchmark that have finished.
pub static RATE_BENCH_DONE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// When each job of the rate benchmark started (process clock).
pub static RATE_BENCH_STARTS: std::sync::Mutex<Vec<std::time::Instant>> =
    std::sync::Mutex::new(Vec::new());

/// A job for the rate benchmark with a limit far above any rate it reaches:
/// what the limiter check costs.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "BenchRateJob", queue = "bench_rates")]
#[rate_limit(limit = 1000000, per = "1s", key = key)]
pub struct BenchRateJob {
    /// The limited key.
    pub key: String,
}

impl Perform for BenchRateJob {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        bench_started();
        Ok(())
    }
}

/// The same job without a limit.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "BenchUnratedJob", queue = "bench_rates")]
pub struct BenchUnratedJob(pub BenchRateJob);

impl Perform for BenchUnratedJob {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        bench_started();
        Ok(())
    }
}

/// A job for the rate benchmark held at 50 starts per second.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "BenchPacedJob", queue = "bench_rates")]
#[rate_limit(limit = 50, per = "1s")]
pub struct BenchPacedJob;

impl Perform for BenchPacedJob {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        bench_started();
        Ok(())
    }
}

fn bench_started() {
    RATE_BENCH_STARTS
        .lock()
        .expect("starts lock")
        .push(std::time::Instant::now());
    RATE_BENCH_DONE.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
}

/// A job for the rate benchmark's many-keys phase: one start per second per key.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "BenchKeyedJob", queue = "bench_rates")]
#[rate_limit(limit = 1, per = "1s", key = key)]
pub struct BenchKeyedJob {
    /// The limited key.
    pub key: u32,
}

impl Perform for BenchKeyedJob {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        bench_started();
        Ok(())
    }
}

/// Rate- and slot-limited: 20 starts per second and 2 at once per key.
#[derive(Debug, Clone, Serialize, Deserialize, Job)]
#[job(class = "RateSlotJob", queue = "rates")]
#[rate_limit(limit = 20, per = "1s", key = key)]
#[concurrency(limit = 2, key = key)]
pub struct RateSlotJob {
    /// The limited key.
    pub key: String,
    /// Sleep.
    pub ms: u64,
}

impl Perform for RateSlotJob {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        crate::slot_jobs::SlotJob {
            key: self.key.clone(),
            ms: self.ms,
        }
        .perform(cx)
        .await?;
        started(cx, &self.key).await
    }
}

/// A job of the sharded queue `tenant_rates`: records its start under
/// `t:<tenant>` on Redis's clock, then sleeps `ms`. It declares no rate; the
/// queue's shard policy gives tenants theirs.
#[derive(Debug, Clone, Serialize, Deserialize, Job)]
#[job(class = "TenantRateJob", queue = "tenant_rates", shard_by_tenant)]
#[fair_tenant(tenant)]
pub struct TenantRateJob {
    /// Tenant.
    pub tenant: String,
    /// Sleep.
    pub ms: u64,
}

impl TenantRateJob {
    /// `n` jobs of `tenant`, each sleeping `ms`.
    pub fn batch(tenant: &str, n: usize, ms: u64) -> Vec<TenantRateJob> {
        let job = TenantRateJob {
            tenant: tenant.to_owned(),
            ms,
        };
        std::iter::repeat_n(job, n).collect()
    }
}

impl Perform for TenantRateJob {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        started(cx, &format!("t:{}", self.tenant)).await?;
        tokio::time::sleep(Duration::from_millis(self.ms)).await;
        Ok(())
    }
}

/// Starts of the sharded phases of the rate benchmark: (tenant, when).
pub static SHARD_BENCH_STARTS: std::sync::Mutex<Vec<(u32, std::time::Instant)>> =
    std::sync::Mutex::new(Vec::new());

/// A job of the sharded queue `bench_shard` for the rate benchmark's tenant
/// phases: records its tenant and start time (the shard policy gives rates).
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "BenchShardJob", queue = "bench_shard", shard_by_tenant)]
#[fair_tenant(tenant)]
pub struct BenchShardJob {
    /// Tenant.
    pub tenant: u32,
}

impl Perform for BenchShardJob {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        SHARD_BENCH_STARTS
            .lock()
            .expect("starts lock")
            .push((self.tenant, std::time::Instant::now()));
        RATE_BENCH_DONE.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
}

/// The proof job: 20 starts per second, one limiter for the class.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "BenchProofJob", queue = "bench_rates")]
#[rate_limit(limit = 20, per = "1s")]
pub struct BenchProofJob {
    /// Sleep.
    pub ms: u64,
}

impl Perform for BenchProofJob {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        SHARD_BENCH_STARTS
            .lock()
            .expect("starts lock")
            .push((1, std::time::Instant::now()));
        tokio::time::sleep(Duration::from_millis(self.ms)).await;
        RATE_BENCH_DONE.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
}

/// The proof's unlimited jobs, on the same queue.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "BenchProofFreeJob", queue = "bench_rates")]
pub struct BenchProofFreeJob {
    /// Sleep.
    pub ms: u64,
}

impl Perform for BenchProofFreeJob {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        SHARD_BENCH_STARTS
            .lock()
            .expect("starts lock")
            .push((2, std::time::Instant::now()));
        tokio::time::sleep(Duration::from_millis(self.ms)).await;
        RATE_BENCH_DONE.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
}

/// Starts as the limit counts them, on Redis's clock, read from the
/// limiter's own state by polling it (a job's own start record adds the
/// jitter between the grant and the job's call to Redis):
/// - [`DispatchLog::start`]: a tenant with a rate on a sharded queue; its pace
///   keeps its last starts (`s:<tenant>` in the queue's `rstate`, at least a
///   period of them), read every 50 ms;
/// - [`DispatchLog::grants`]: a job rate limiter with `burst = 0`; each grant
///   at `g` sets its theoretical arrival time to `g + T` (a released waiter is
///   granted at or after the old one), so each value seen, read every 10 ms
///   (T is longer in the tests), is one grant at `tat - T`.
#[derive(Debug)]
pub struct DispatchLog {
    seen: std::sync::Arc<std::sync::Mutex<std::collections::BTreeSet<u64>>>,
    task: tokio::task::JoinHandle<()>,
}

impl DispatchLog {
    /// Polls `tenant`'s record of starts on the sharded `queue`.
    pub fn start(client: &fairjob::Client, queue: &str, tenant: &str) -> DispatchLog {
        let mut cmd = redis::cmd("HGET");
        cmd.arg(client.broker().keys().shard(queue).rstate)
            .arg(format!("s:{tenant}"));
        DispatchLog::poll(client, cmd, Duration::from_millis(50), |v| {
            (0..v.len() / 16)
                .filter_map(|i| v[i * 16..i * 16 + 16].parse().ok())
                .collect()
        })
    }

    /// Polls the theoretical arrival time of the job rate limiter `key` (its
    /// full key, e.g. `BenchProofJob` or `RateJob:hot`), whose emission
    /// interval is `interval_us` and burst 0.
    pub fn grants(client: &fairjob::Client, key: &str, interval_us: u64) -> DispatchLog {
        let mut cmd = redis::cmd("GET");
        cmd.arg(client.broker().keys().rate(key).tat);
        DispatchLog::poll(client, cmd, Duration::from_millis(10), move |v| {
            v.parse::<u64>()
                .ok()
                .and_then(|t| t.checked_sub(interval_us))
                .into_iter()
                .collect()
        })
    }

    fn poll(
        client: &fairjob::Client,
        cmd: redis::Cmd,
        every: Duration,
        parse: impl Fn(&str) -> Vec<u64> + Send + 'static,
    ) -> DispatchLog {
        let seen: std::sync::Arc<std::sync::Mutex<std::collections::BTreeSet<u64>>> =
            std::sync::Arc::default();
        let client = client.clone();
        let log = std::sync::Arc::clone(&seen);
        let task = tokio::spawn(async move {
            loop {
                let v: Option<String> = crate::query(client.broker(), &cmd)
                    .await
                    .unwrap_or_default();
                if let Some(v) = v {
                    log.lock().expect("dispatch log").extend(parse(&v));
                }
                tokio::time::sleep(every).await;
            }
        });
        DispatchLog { seen, task }
    }

    /// Every start seen so far (µs), in order.
    pub fn times(&self) -> Vec<u64> {
        self.seen
            .lock()
            .expect("dispatch log")
            .iter()
            .copied()
            .collect()
    }
}

impl Drop for DispatchLog {
    fn drop(&mut self) {
        self.task.abort();
    }
}
