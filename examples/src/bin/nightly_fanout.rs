//! A nightly fan-out, fair by construction:
//! `cargo run -p fairjob-examples --bin nightly_fanout` (Redis at `$REDIS_URL`,
//! default `redis://127.0.0.1/`).
//!
//! `NightlyFanOut` is a periodic job (`#[cron]`, 02:00 in Berlin, skipped
//! while the previous night's fan-out still runs). It enqueues one
//! `TenantReport` per tenant into the tenant-sharded queue `reports`, through
//! the ordinary push path: each tenant's reports wait in that tenant's shard,
//! and workers serve the shards in fair-share order, so the tenant with
//! 10,000 accounts does not hold up the one with 3. Any number of these
//! workers may run: each fire time is enqueued once.

use std::time::UNIX_EPOCH;

use fairjob::{Job, JobContext, JobError, Perform, Registry, Worker};
use serde::{Deserialize, Serialize};

/// The periodic fan-out.
#[derive(Debug, Default, Serialize, Deserialize, Job)]
#[cron("0 2 * * *", tz = "Europe/Berlin", overlap = "skip")]
struct NightlyFanOut;

/// One tenant's report.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(queue = "reports", shard_by_tenant)]
#[fair_tenant(tenant)]
struct TenantReport {
    tenant: String,
    /// The night it reports on (the fan-out's fire time, Unix seconds).
    night: u64,
}

impl Perform for NightlyFanOut {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        let night = cx
            .fire_time()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_secs());
        // In an application: the tenants from its database.
        let tenants = ["acme", "globex", "initech", "umbrella"];
        let reports: Vec<TenantReport> = tenants
            .into_iter()
            .map(|t| TenantReport {
                tenant: t.to_owned(),
                night,
            })
            .collect();
        let pushed = cx.client().push_bulk(reports).await?;
        tracing::info!(night, reports = pushed.len(), "nightly reports enqueued");
        Ok(())
    }
}

impl Perform for TenantReport {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        tracing::info!(tenant = %self.tenant, night = self.night, "report built");
        Ok(())
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt().with_env_filter("info").init();
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1/".into());
    let mut registry = Registry::new();
    registry.register::<NightlyFanOut>()?;
    registry.register::<TenantReport>()?;
    Worker::builder(url)
        .registry(registry)
        .build()
        .await?
        .run()
        .await?;
    Ok(())
}
