//! Command-line parsing (flags familiar to Sidekiq users) and dispatch.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use fairjob::config::{WorkerConfig, parse_duration};
use fairjob::{Registry, Worker};

/// The fairjob worker.
#[derive(Debug, Parser)]
#[command(name = "worker", version, about = "Runs fairjob jobs (Sidekiq-compatible) and inspects queues", long_about = None)]
pub struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(flatten)]
    run: RunArgs,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Args)]
struct Global {
    /// Redis URL, e.g. redis://:password@host:6379/0 (default redis://127.0.0.1:6379)
    #[arg(
        short = 'r',
        long = "redis",
        env = "REDIS_URL",
        global = true,
        hide_env_values = true
    )]
    redis: Option<String>,
    /// Key prefix, as redis-namespace did for Sidekiq
    #[arg(long, global = true)]
    namespace: Option<String>,
    /// TOML config file; every flag has a key (durations in humantime form, e.g. "25s")
    #[arg(short = 'C', long = "config", global = true)]
    config: Option<PathBuf>,
}

#[derive(Debug, Args, Default)]
struct RunArgs {
    /// A queue and its weight, Sidekiq style: -q default,4 -q throttled,1 (repeatable)
    #[arg(short = 'q', long = "queue", value_name = "NAME[,WEIGHT]")]
    queues: Vec<String>,
    /// A strict tier of weighted queues, most urgent first: -Q critical -Q "default,4 slow,1"
    #[arg(short = 'Q', long = "tier", value_name = "QUEUES")]
    tiers: Vec<String>,
    /// Jobs run at once (default 10)
    #[arg(short = 'c', long)]
    concurrency: Option<usize>,
    /// Shutdown timeout (default 25s)
    #[arg(short = 't', long, value_parser = duration)]
    timeout: Option<Duration>,
    /// Worker lease: a silent worker's jobs are offered again after this (default 30s)
    #[arg(long, value_parser = duration)]
    lease: Option<Duration>,
    /// Heartbeat interval (default lease / 3)
    #[arg(long, value_parser = duration)]
    heartbeat: Option<Duration>,
    /// How often dead workers' jobs are looked for (default 15s)
    #[arg(long, value_parser = duration)]
    reaper_interval: Option<Duration>,
    /// Idle poll for jobs pushed by non-fairjob clients such as Ruby (default 1s)
    #[arg(long, value_parser = duration)]
    poll_interval: Option<Duration>,
    /// Average scheduler interval for schedule/retry (default 5s)
    #[arg(long, value_parser = duration)]
    scheduled_poll_interval: Option<Duration>,
    /// Worker deaths a job may cause before it is dead-lettered (default 3)
    #[arg(long)]
    max_interruptions: Option<u32>,
    /// Largest entry read as a job; larger ones go to dead (default 16 MiB)
    #[arg(long)]
    max_payload_bytes: Option<usize>,
    /// Declare a queue tenant-sharded (repeatable)
    #[arg(long = "shard", value_name = "QUEUE")]
    sharded_queues: Vec<String>,
    /// Sidekiq process tag (shown in the Web UI)
    #[arg(short = 'g', long)]
    tag: Option<String>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run jobs (the default)
    Run,
    /// List the registered job types, their queues and options
    Jobs,
    /// Queue sizes, scheduled/retry/dead counts, processed/failed counters, workers
    Stats,
    /// Per tenant of a job class: counts per reroute window and the queue its next job would get
    Tenants {
        /// Job class
        class: String,
        /// A rule when the class is not registered here: QUEUE:THRESHOLD:PER (repeatable)
        #[arg(long = "rule")]
        rules: Vec<String>,
    },
    /// A sharded queue's tenants: pending, running, limit and position in the rotation
    Shards {
        /// Queue name
        queue: String,
    },
    /// Slot limits (`#[concurrency]`): keys with limit, running and waiting; `limits set KEY N` changes one
    Limits {
        #[command(subcommand)]
        action: Option<LimitsAction>,
    },
    /// Set a sharded queue's per-tenant running limit (0 pauses; "none" removes it)
    ShardLimit {
        /// Queue name
        queue: String,
        /// Limit (a number, or "none")
        limit: String,
        /// The tenant (default: every tenant without its own limit)
        #[arg(long)]
        tenant: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
enum LimitsAction {
    /// Set a key's limit at runtime (0 pauses it; "default" returns to the declared limit)
    Set {
        /// The full key, as `limits` lists it (`Class:key` or `group:name:key`)
        key: String,
        /// The new limit, or "default"
        limit: String,
    },
}

fn duration(s: &str) -> Result<Duration, String> {
    parse_duration(s).map_err(|e| e.to_string())
}

pub(crate) fn run(with_jobs: bool) -> ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_env("FAIRJOB_LOG")
        .or_else(|_| tracing_subscriber::EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(dispatch(cli, with_jobs)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

const NO_JOBS: &str = "\
this `fairjob-worker` binary links no job types, so it cannot run jobs. A worker must \
link the crate that declares your `#[derive(Job)]` types: add `fairjob-worker` to that \
crate's dependencies and create `src/bin/worker.rs` containing the single line \
`fairjob_worker::main!(my_jobs);` (naming your crate, and any other crate with jobs), \
then run `cargo run --release --bin worker -- -r redis://127.0.0.1:6379 -c 10`. The \
commands that need no job types (`stats`, `tenants`, `shards`, `shard-limit`) work here.";

async fn dispatch(cli: Cli, with_jobs: bool) -> Result<()> {
    let config = load_config(&cli)?;
    let url = config
        .redis
        .clone()
        .unwrap_or_else(|| "redis://127.0.0.1:6379".to_owned());
    let registry = || -> Result<Registry> { Ok(Registry::from_inventory()?) };
    match cli.command.unwrap_or(Command::Run) {
        Command::Run => {
            if !with_jobs {
                bail!("{NO_JOBS}");
            }
            let registry = registry()?;
            if registry.is_empty() {
                bail!(
                    "no job types are registered in this binary: name the crates that hold your jobs in \
                     `fairjob_worker::main!(...)`"
                );
            }
            // Redis down at start-up is waited for, with backoff; bad credentials
            // or settings end the worker at once.
            let mut delay = std::time::Duration::from_millis(200);
            let worker = loop {
                let built = Worker::builder(url.clone())
                    .config(config.clone())
                    .registry(registry.clone())
                    .build()
                    .await;
                match built {
                    Ok(w) => break w,
                    Err(e) if matches!(e, fairjob::Error::Connection(_)) || e.is_transient() => {
                        tracing::error!(error = %e, retry_in = ?delay, "cannot reach redis; waiting for it");
                        tokio::time::sleep(delay).await;
                        delay = (delay * 2).min(std::time::Duration::from_secs(5));
                    }
                    Err(e) => return Err(e.into()),
                }
            };
            println!(
                "fairjob worker {} — queues: {}",
                worker.identity(),
                worker.queues()
            );
            worker.run().await?;
            Ok(())
        }
        Command::Jobs => {
            if !with_jobs {
                bail!("{NO_JOBS}");
            }
            crate::inspect::jobs(&registry()?);
            Ok(())
        }
        Command::Stats => crate::inspect::stats(&url, config.namespace.as_deref()).await,
        Command::Tenants { class, rules } => {
            let registry = if with_jobs {
                registry()?
            } else {
                Registry::new()
            };
            crate::inspect::tenants(&url, config.namespace.as_deref(), &registry, &class, &rules)
                .await
        }
        Command::Limits { action } => {
            let registry = if with_jobs {
                registry()?
            } else {
                Registry::new()
            };
            match action {
                None => crate::inspect::limits(&url, config.namespace.as_deref(), &registry).await,
                Some(LimitsAction::Set { key, limit }) => {
                    let limit = match limit.as_str() {
                        "default" => None,
                        n => Some(
                            n.parse::<u32>()
                                .context("the limit is a number or `default`")?,
                        ),
                    };
                    crate::inspect::set_limit(
                        &url,
                        config.namespace.as_deref(),
                        &registry,
                        &key,
                        limit,
                    )
                    .await
                }
            }
        }
        Command::Shards { queue } => {
            crate::inspect::shards(&url, config.namespace.as_deref(), &queue).await
        }
        Command::ShardLimit {
            queue,
            limit,
            tenant,
        } => {
            let limit = match limit.as_str() {
                "none" => None,
                n => Some(
                    n.parse::<u32>()
                        .context("the limit is a number or `none`")?,
                ),
            };
            crate::inspect::shard_limit(
                &url,
                config.namespace.as_deref(),
                &queue,
                tenant.as_deref(),
                limit,
            )
            .await
        }
    }
}

fn load_config(cli: &Cli) -> Result<WorkerConfig> {
    let mut c = match &cli.global.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            toml::from_str::<WorkerConfig>(&text)
                .with_context(|| format!("in {}", path.display()))?
        }
        None => WorkerConfig::default(),
    };
    let r = &cli.run;
    if let Some(v) = &cli.global.redis {
        c.redis = Some(v.clone());
    }
    if let Some(v) = &cli.global.namespace {
        c.namespace = Some(v.clone());
    }
    if !r.queues.is_empty() {
        c.queues = r.queues.clone();
        c.tiers.clear();
    }
    if !r.tiers.is_empty() {
        if !r.queues.is_empty() {
            bail!("use either -q/--queue (one tier) or -Q/--tier (several tiers), not both");
        }
        // `-Q "default,4 slow,1"`: whitespace separates a tier's queues on the
        // command line (a queue name with spaces needs the config file's `tiers`).
        c.tiers = r
            .tiers
            .iter()
            .map(|t| t.split_whitespace().map(str::to_owned).collect())
            .collect();
        c.queues.clear();
    }
    macro_rules! set {
        ($($f:ident),*) => { $( if let Some(v) = r.$f.clone() { c.$f = v; } )* };
    }
    set!(
        concurrency,
        timeout,
        lease,
        reaper_interval,
        poll_interval,
        scheduled_poll_interval,
        max_interruptions,
        max_payload_bytes,
        tag
    );
    if r.heartbeat.is_some() {
        c.heartbeat = r.heartbeat;
    }
    c.sharded_queues.extend(r.sharded_queues.iter().cloned());
    c.validate()?;
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn flags_override_the_config_file() {
        let dir = std::env::temp_dir().join(format!("fairjob-cli-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("w.toml");
        std::fs::write(
            &path,
            "concurrency = 3\ntimeout = \"10s\"\nqueues = [\"a,2\", \"b,1\"]\n",
        )
        .unwrap();
        let cli = Cli::try_parse_from(["worker", "-C", path.to_str().unwrap(), "-c", "7"]).unwrap();
        let c = load_config(&cli).unwrap();
        assert_eq!(c.concurrency, 7);
        assert_eq!(c.timeout, Duration::from_secs(10));
        assert_eq!(c.queues, vec!["a,2".to_owned(), "b,1".to_owned()]);
        let cli = Cli::try_parse_from([
            "worker",
            "-Q",
            "critical",
            "-Q",
            "default,4 slow,1",
            "-t",
            "3s",
        ])
        .unwrap();
        let c = load_config(&cli).unwrap();
        assert_eq!(
            c.queue_spec().unwrap().unwrap().to_string(),
            "critical > default,4 slow,1"
        );
        assert_eq!(c.timeout, Duration::from_secs(3));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
