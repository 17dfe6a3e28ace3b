//! `fairjob-worker postgres migrate` and `fairjob-worker pump`: fairjob-postgres'
//! schema and its pump, run alone.

use std::time::Duration;

use anyhow::{Context, Result};
use fairjob::WorkerConfig;
use fairjob_postgres::Pump;
use sqlx::postgres::PgPoolOptions;

async fn pool(url: &str) -> Result<sqlx::PgPool> {
    PgPoolOptions::new()
        .max_connections(4)
        .connect(url)
        .await
        .with_context(|| "cannot connect to PostgreSQL (--postgres / DATABASE_URL)")
}

/// Brings the `fairjob` schema up to date.
pub(crate) async fn migrate(url: &str) -> Result<()> {
    fairjob_postgres::migrate(&pool(url).await?).await?;
    println!(
        "fairjob schema at version {}",
        fairjob_postgres::SCHEMA_VERSION
    );
    Ok(())
}

/// Runs the pump until Ctrl-C / SIGTERM.
pub(crate) async fn pump(
    config: &WorkerConfig,
    url: &str,
    batch: usize,
    poll: Duration,
    max_idle: Duration,
) -> Result<()> {
    let pool = pool(url).await?;
    let client = fairjob::ClientBuilder::from_config(config.client.clone())
        .build()
        .await?;
    println!("fairjob pump: PostgreSQL → {}", config.client.redis_url());
    Pump::new(pool, client)
        .batch(batch)
        .poll_interval(poll)
        .max_idle_interval(max_idle)
        .run(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
