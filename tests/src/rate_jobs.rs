//! Jobs with a `#[rate_limit]`, each recording its start on Redis's clock
//! (`<ns>started:<key>`: `<µs> <jid>`, in start order).

use std::sync::LazyLock;
use std::time::Duration;

use fairjob::{Job, JobContext, JobError, Perform};
use serde::{Deserialize, Serialize};

static STARTED: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        "local t = redis.call('TIME') \
         redis.call('RPUSH', KEYS[1], string.format('%d%06d', t[1], t[2]) .. ' ' .. ARGV[1]) \
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
        .arg(cx.jid());
    let mut conn = b.connection();
    let _: i64 = inv.invoke_async(&mut conn).await?;
    Ok(())
}
