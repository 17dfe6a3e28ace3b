//! `fairjob-worker postgres migrate`, `fairjob-worker pump` and
//! `worker run --postgres URL`: fairjob-postgres' schema and its pump, alone
//! or beside the worker.

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

/// A pump running beside the worker.
#[derive(Debug)]
pub(crate) struct RunningPump {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<fairjob_postgres::Result<()>>,
}

impl RunningPump {
    /// Stops it after its current batch.
    pub(crate) async fn stop(self) {
        let _ = self.stop.send(());
        match self.task.await {
            Ok(Err(e)) => tracing::error!(error = %e, "the pump stopped with an error"),
            Err(e) => tracing::error!(error = %e, "the pump panicked"),
            Ok(Ok(())) => {}
        }
    }
}

/// Starts the pump beside the worker, pushing through the worker's client.
pub(crate) async fn spawn_pump(url: &str, client: fairjob::Client) -> Result<RunningPump> {
    let pool = pool(url).await?;
    fairjob_postgres::check_schema(&pool).await?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(Pump::new(pool, client).run(async {
        let _ = stopped.await;
    }));
    Ok(RunningPump { stop, task })
}
