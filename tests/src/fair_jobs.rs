//! Jobs of the fair-share tests (`tests/tests/fair_share.rs`): each records its
//! dispatch order and measures how many jobs run at once.

use std::time::Duration;

use fairjob::prelude::*;
use serde::{Deserialize, Serialize};

/// Raises gauge `KEYS[1]` and keeps its highest value in `KEYS[2]`.
static UP: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| {
    redis::Script::new(
        r"
local v = redis.call('INCR', KEYS[1])
if v > tonumber(redis.call('GET', KEYS[2]) or '0') then redis.call('SET', KEYS[2], v) end
return v
",
    )
});

/// A job of the sharded queue `fair`: records `"<dispatch seq> <tenant>"` on
/// `record` (the token's sequence number is the worker's dispatch order), and
/// while it sleeps `ms` counts itself in the gauges `gauge:<tenant>` and
/// `gauge:*`, whose highest values are kept in `max:<tenant>` and `max:*`.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "FairJob", queue = "fair", shard_by_tenant)]
#[fair_tenant(tenant)]
pub struct FairJob {
    /// Tenant.
    pub tenant: String,
    /// How long it runs.
    #[serde(default)]
    pub ms: u64,
}

impl Perform for FairJob {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        let b = cx.client().broker();
        let ns = b.keys().prefix().to_owned();
        let seq = cx.token().raw.split('|').next().unwrap_or("0").to_owned();
        let mut conn = b.connection();
        for g in [self.tenant.as_str(), "*"] {
            let _: i64 = UP
                .key(format!("{ns}gauge:{g}"))
                .key(format!("{ns}max:{g}"))
                .invoke_async(&mut conn)
                .await?;
        }
        let mut pipe = redis::pipe();
        pipe.rpush(format!("{ns}record"), format!("{seq} {}", self.tenant));
        crate::pipe::<()>(b, &pipe).await?;
        tokio::time::sleep(Duration::from_millis(self.ms)).await;
        let mut pipe = redis::pipe();
        pipe.decr(format!("{ns}gauge:{}", self.tenant), 1)
            .decr(format!("{ns}gauge:*"), 1)
            .incr(format!("{ns}done"), 1);
        crate::pipe::<()>(b, &pipe).await?;
        Ok(())
    }
}

/// A job of the sharded queue `hang` that never finishes on its own: it sleeps
/// an hour, or (`honour`) until it is cancelled. Its type's timeout is 300 ms.
/// Records `"start <tenant> <n>"` on `record` when it starts.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(
    class = "HangJob",
    queue = "hang",
    shard_by_tenant,
    retry = 1,
    timeout = "300ms"
)]
#[fair_tenant(tenant)]
pub struct HangJob {
    /// Tenant.
    pub tenant: String,
    /// Which job.
    pub n: u32,
    /// Whether it stops when cancelled.
    pub honour: bool,
}

impl Perform for HangJob {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        let b = cx.client().broker();
        let mut pipe = redis::pipe();
        pipe.rpush(
            format!("{}record", b.keys().prefix()),
            format!("start {} {}", self.tenant, self.n),
        );
        crate::pipe::<()>(b, &pipe).await?;
        if self.honour {
            cx.cancelled().await;
            return Ok(());
        }
        tokio::time::sleep(Duration::from_secs(3600)).await;
        Ok(())
    }
}

/// A plain job with no timeout of its own that sleeps `0` ms (for the worker's default).
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "SlowJob", queue = "slow", retry = 1)]
pub struct SlowJob(pub u64);

impl Perform for SlowJob {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        tokio::time::sleep(Duration::from_millis(self.0)).await;
        Ok(())
    }
}
