//! Jobs with a `#[concurrency]` slot limit, and a job-side gauge that records how
//! many of one key ran at once (`<ns>:gauge:<key>` now, `<ns>:gauge-max:<key>` peak).

use std::sync::LazyLock;
use std::time::Duration;

use fairjob::{Job, JobContext, JobError, Perform};
use serde::{Deserialize, Serialize};

static GAUGE_UP: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        "local v = redis.call('INCR', KEYS[1]) \
         if v > tonumber(redis.call('GET', KEYS[2]) or '0') then redis.call('SET', KEYS[2], v) end \
         return v",
    )
});

/// Sleeps `ms` holding a slot of `key` (limit 3 by default).
#[derive(Debug, Clone, Serialize, Deserialize, Job)]
#[job(class = "SlotJob", queue = "slots")]
#[concurrency(limit = 3, key = key)]
pub struct SlotJob {
    /// The limited key.
    pub key: String,
    /// Sleep.
    pub ms: u64,
}

impl SlotJob {
    /// `n` jobs of `key`, each sleeping `ms`.
    pub fn batch(key: &str, n: usize, ms: u64) -> Vec<SlotJob> {
        let job = SlotJob {
            key: key.to_owned(),
            ms,
        };
        std::iter::repeat_n(job, n).collect()
    }
}

impl Perform for SlotJob {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        let b = cx.client().broker();
        let p = b.keys().prefix();
        let mut inv = GAUGE_UP.prepare_invoke();
        inv.key(format!("{p}gauge:{}", self.key))
            .key(format!("{p}gauge-max:{}", self.key));
        let mut conn = b.connection();
        let _: i64 = inv.invoke_async(&mut conn).await?;
        tokio::time::sleep(Duration::from_millis(self.ms)).await;
        let mut pipe = redis::pipe();
        pipe.decr(format!("{p}gauge:{}", self.key), 1).ignore();
        pipe.rpush(format!("{p}done"), format!("{} {}", self.key, cx.jid()))
            .ignore();
        crate::pipe::<()>(b, &pipe).await?;
        Ok(())
    }
}

/// A job on a tenant-sharded queue that is also slot-limited: one at a time per tenant.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "ShardSlotJob", queue = "conv_slots", shard_by_tenant)]
#[fair_tenant(tenant)]
#[concurrency(limit = 1, key = tenant)]
pub struct ShardSlotJob {
    /// Tenant, and the limited key.
    pub tenant: String,
    /// Sleep.
    pub ms: u64,
}

impl Perform for ShardSlotJob {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        SlotJob {
            key: self.tenant,
            ms: self.ms,
        }
        .perform(cx)
        .await
    }
}

/// Jobs done by this process (the slot benchmark waits on it).
pub static BENCH_DONE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// A slot-limited job for the slot benchmark: `limit = 2` per key.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "BenchSlotJob", queue = "bench_slots")]
#[concurrency(limit = 2, key = key)]
pub struct BenchSlotJob {
    /// The limited key.
    pub key: String,
    /// Sleep.
    pub ms: u64,
}

impl Perform for BenchSlotJob {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        tokio::time::sleep(Duration::from_millis(self.ms)).await;
        BENCH_DONE.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
}

/// The same job (the same payload, the same work) without a limit.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "BenchFreeJob", queue = "bench_slots")]
pub struct BenchFreeJob(pub BenchSlotJob);

impl Perform for BenchFreeJob {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        self.0.perform(cx).await
    }
}
