//! `fairjob-worker postgres migrate|status`, `fairjob-worker pump` and
//! `worker run --postgres URL` (or the TOML's `[postgres]` table):
//! fairjob-postgres' schema, its view and its pump, alone or beside the
//! worker. Built with this crate's `postgres` feature (on by default);
//! without it those commands and a PostgreSQL URL fail before anything
//! starts, saying how to enable it.

use std::time::Duration;

#[cfg(feature = "postgres")]
use anyhow::{Context, Result, anyhow};
#[cfg(feature = "postgres")]
use fairjob::{PostgresConfig, WorkerConfig};
#[cfg(feature = "postgres")]
use fairjob_postgres::Pump;
#[cfg(feature = "postgres")]
use sqlx::postgres::PgPoolOptions;

/// What the PostgreSQL commands and flags say when the binary was built
/// without the feature.
#[cfg(not(feature = "postgres"))]
pub(crate) const NOT_BUILT: &str = "\
this worker was built without PostgreSQL support (fairjob-postgres, sqlx): `postgres migrate|status`, \
`pump`, `explain --postgres`, `run --postgres` and the config's [postgres] url need it. Enable the \
`postgres` feature of fairjob-worker in the crate that builds your worker (it is on by default: \
`fairjob-worker = { version = \"0.1\", default-features = false, features = [\"postgres\"] }`, or \
`cargo build --features fairjob-worker/postgres`).";

#[cfg(feature = "postgres")]
async fn pool(url: &str) -> Result<sqlx::PgPool> {
    PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(5))
        .connect(url)
        .await
        .with_context(|| "cannot connect to PostgreSQL (--postgres / DATABASE_URL)")
}

#[cfg(feature = "postgres")]
fn url<'a>(config: &'a WorkerConfig, flag: Option<&'a str>) -> Result<&'a str> {
    flag.or(config.postgres.url.as_deref()).ok_or_else(|| {
        anyhow!("no PostgreSQL URL: pass --postgres URL, set DATABASE_URL, or `url` in the config's [postgres] table")
    })
}

/// The flags of `fairjob-worker pump` (defaults: the config's `[postgres]` table).
#[derive(Debug, clap::Args)]
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) struct PumpArgs {
    /// PostgreSQL URL
    #[arg(long, env = "DATABASE_URL", hide_env_values = true, value_name = "URL")]
    postgres: Option<String>,
    /// Rows per batch (default 500)
    #[arg(long)]
    batch: Option<usize>,
    /// Poll interval while there is work (default 100ms)
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    poll_interval: Option<Duration>,
    /// Longest wait between polls when idle; the interval doubles up to it (default 2s)
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    max_idle_interval: Option<Duration>,
    /// A queue whose jobs stay in PostgreSQL until they end ("Postgres stays
    /// the truth"; repeatable)
    #[arg(long = "keep-queue", value_name = "QUEUE")]
    keep_queues: Vec<String>,
    /// Also wake on NOTIFY fairjob_outbox
    #[arg(long)]
    listen: bool,
    /// How often Redis's epoch is checked and completions drained (default 1s)
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    check_interval: Option<Duration>,
    /// How long finished kept rows stay (default 7d)
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    retention: Option<Duration>,
    /// How long a kept job may be missing from Redis before it is published again (default 60s)
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    lost_grace: Option<Duration>,
}

#[cfg(feature = "postgres")]
impl PumpArgs {
    fn merged(&self, mut c: PostgresConfig) -> PostgresConfig {
        if let Some(v) = &self.postgres {
            c.url = Some(v.clone());
        }
        if let Some(v) = self.batch {
            c.batch = v;
        }
        if let Some(v) = self.poll_interval {
            c.poll_interval = v;
        }
        if let Some(v) = self.max_idle_interval {
            c.max_idle_interval = v;
        }
        if let Some(v) = self.check_interval {
            c.check_interval = v;
        }
        if let Some(v) = self.retention {
            c.retention = v;
        }
        if let Some(v) = self.lost_grace {
            c.lost_grace = v;
        }
        c.keep_queues.extend(self.keep_queues.iter().cloned());
        c.listen |= self.listen;
        c
    }
}

/// Brings the `fairjob` schema up to date.
#[cfg(feature = "postgres")]
pub(crate) async fn migrate(config: &WorkerConfig, flag: Option<&str>) -> Result<()> {
    fairjob_postgres::migrate(&pool(url(config, flag)?).await?).await?;
    println!(
        "fairjob schema at version {}",
        fairjob_postgres::SCHEMA_VERSION
    );
    Ok(())
}

/// Prints the PostgreSQL side's status.
#[cfg(feature = "postgres")]
pub(crate) async fn status(config: &WorkerConfig, flag: Option<&str>, json: bool) -> Result<()> {
    let pool = pool(url(config, flag)?).await?;
    fairjob_postgres::check_schema(&pool).await?;
    let s = fairjob_postgres::status(&pool).await?;
    if json {
        let v = serde_json::json!({
            "backlog": s.backlog,
            "lag_seconds": s.lag.map(|d| d.as_secs_f64()),
            "tenants": s.tenants.iter().map(|(t, n)| serde_json::json!({"tenant": t, "pending": n})).collect::<Vec<_>>(),
            "kept_running": s.kept_running,
            "kept_finished": s.kept_finished,
            "failed": s.failed,
            "pumps": s.pumps.iter().map(|p| serde_json::json!({"id": p.id, "host": p.host, "seen_ago": p.seen_ago, "alive": p.alive})).collect::<Vec<_>>(),
            "republished": s.republished.iter().map(|e| serde_json::json!({"at": e.at, "jobs": e.jobs, "pump": e.pump})).collect::<Vec<_>>(),
            "epoch": s.epoch,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    let lag = s
        .lag
        .map_or_else(|| "-".to_owned(), |d| format!("{:.1}s", d.as_secs_f64()));
    println!(
        "backlog: {} rows waiting for a pump (oldest {lag})",
        s.backlog
    );
    for (t, n) in &s.tenants {
        println!("  {:<30} {n}", if t.is_empty() { "(no tenant)" } else { t });
    }
    println!(
        "kept jobs: {} in Redis not ended, {} ended (within the retention); {} failed rows",
        s.kept_running, s.kept_finished, s.failed
    );
    let alive = s.pumps.iter().filter(|p| p.alive).count();
    println!("pumps alive: {alive}");
    for p in &s.pumps {
        println!(
            "  {:<40} seen {:.0}s ago{}",
            p.id,
            p.seen_ago,
            if p.alive { "" } else { " (gone)" }
        );
    }
    if s.republished.is_empty() {
        println!("republish events: none");
    } else {
        println!("republish events (Redis lost data):");
        for e in &s.republished {
            let ago = fairjob::wire::now_f64() - e.at;
            println!(
                "  {ago:.0}s ago — {} jobs published again by {}",
                e.jobs, e.pump
            );
        }
    }
    Ok(())
}

/// The PostgreSQL part of explain.
#[cfg(feature = "postgres")]
pub(crate) async fn explain(url: &str, jid: &str) -> Result<()> {
    let pool = pool(url).await?;
    match fairjob_postgres::find_job(&pool, jid).await? {
        Some(row) => println!("{}", row.describe()),
        None => println!("PostgreSQL: no row for {jid} (never enqueued there, or its row is gone)"),
    }
    Ok(())
}

/// Runs the pump until Ctrl-C / SIGTERM.
#[cfg(feature = "postgres")]
pub(crate) async fn pump(config: &WorkerConfig, args: &PumpArgs) -> Result<()> {
    let pg = args.merged(config.postgres.clone());
    let pool = pool(url(config, pg.url.as_deref())?).await?;
    let client = fairjob::ClientBuilder::from_config(config.client.clone())
        .build()
        .await?;
    println!("fairjob pump: PostgreSQL → {}", config.client.redis_url());
    let pump = fairjob_postgres::configured(Pump::new(pool, client), &pg);
    pump.run(async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    Ok(())
}

/// A pump running beside the worker.
#[cfg(feature = "postgres")]
#[derive(Debug)]
pub(crate) struct RunningPump {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<fairjob_postgres::Result<()>>,
}

#[cfg(feature = "postgres")]
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
#[cfg(feature = "postgres")]
pub(crate) async fn spawn_pump(
    url: &str,
    config: &PostgresConfig,
    client: fairjob::Client,
) -> Result<RunningPump> {
    let pool = pool(url).await?;
    fairjob_postgres::check_schema(&pool).await?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let pump = fairjob_postgres::configured(Pump::new(pool, client), config);
    let task = tokio::spawn(pump.run(async {
        let _ = stopped.await;
    }));
    Ok(RunningPump { stop, task })
}

/// The dashboard's view of the PostgreSQL side (a lazy pool: the dashboard
/// starts even while PostgreSQL is away): the overview's panel, and explain
/// finding a jid that is still only in PostgreSQL.
#[cfg(all(feature = "web", feature = "postgres"))]
pub(crate) fn web_hooks(web: fairjob_web::WebConfig, url: &str) -> Result<fairjob_web::WebConfig> {
    let pool = PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(3))
        .connect_lazy(url)
        .with_context(|| "bad PostgreSQL URL ([postgres] url / --postgres)")?;
    let explain_pool = pool.clone();
    Ok(web
        .panel(move || {
            let pool = pool.clone();
            async move {
                match fairjob_postgres::status(&pool).await {
                    Ok(s) => Ok(fairjob_web::Panel::new("PostgreSQL outbox", s.rows())),
                    Err(e) => Err(format!("PostgreSQL outbox: {e}")),
                }
            }
        })
        .explain_source(move |jid| {
            let pool = explain_pool.clone();
            async move {
                let rows = match fairjob_postgres::find_job(&pool, &jid).await {
                    Ok(Some(row)) => row.rows(),
                    Ok(None) => vec![(
                        "row".to_owned(),
                        "none (never enqueued through PostgreSQL, or its row is gone)".to_owned(),
                    )],
                    Err(e) => return Err(format!("PostgreSQL: {e}")),
                };
                Ok(Some(fairjob_web::Panel::new("In PostgreSQL", rows)))
            }
        }))
}
