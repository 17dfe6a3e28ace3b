//! rusty-sidekiq's side of fairjob's benchmark (`bench --peers rusty-sidekiq`),
//! through its own client and worker:
//!
//! ```text
//! rusty-sidekiq-bench enqueue --url redis://127.0.0.1:PORT --jobs N [--batch 1000]
//! rusty-sidekiq-bench process --url redis://127.0.0.1:PORT --jobs N --concurrency 25
//! ```
//!
//! `enqueue` pushes N `BenchNoopJob`s to queue `bench` and prints
//! `<wall seconds> <cpu seconds>` (connecting excluded). rusty-sidekiq 0.15.2 has
//! no bulk push, so a batch is that many `perform_async` calls in flight at once
//! over its connection pool, and the next batch starts when the last one is in.
//!
//! `process` runs a worker on queue `bench` until SIGTERM; the job stamps
//! `bench:first` on its first call and `bench:last` on call N (Unix seconds), as
//! the fairjob and Ruby Sidekiq twins in `tests/src/bin/bench.rs` and
//! `tests/ruby/bench/jobs.rb` do.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use async_trait::async_trait;
use sidekiq::{Processor, ProcessorConfig, RedisConnectionManager, RedisPool, Worker};

/// The no-op job; its class name on the wire is `BenchNoopJob`.
#[derive(Clone)]
struct BenchNoopJob {
    redis: RedisPool,
    performed: Arc<AtomicU64>,
    target: u64,
}

fn now_f64() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

impl BenchNoopJob {
    async fn stamp(&self, key: &str) -> sidekiq::Result<()> {
        let mut con = self.redis.get().await?;
        sidekiq::redis_rs::cmd("SET")
            .arg(key)
            .arg(now_f64().to_string())
            .query_async::<()>(con.unnamespaced_borrow_mut())
            .await?;
        Ok(())
    }
}

#[async_trait]
impl Worker<u64> for BenchNoopJob {
    fn opts() -> sidekiq::WorkerOpts<u64, Self> {
        sidekiq::WorkerOpts::new().queue("bench")
    }

    async fn perform(&self, _index: u64) -> sidekiq::Result<()> {
        let n = self.performed.fetch_add(1, Ordering::Relaxed) + 1;
        if n == 1 {
            self.stamp("bench:first").await?;
        }
        if n == self.target {
            self.stamp("bench:last").await?;
        }
        Ok(())
    }
}

/// `--name value` pairs after the subcommand.
struct Flags(Vec<(String, String)>);

impl Flags {
    fn parse(args: &[String]) -> Result<Flags> {
        let mut pairs = Vec::new();
        let mut it = args.iter();
        while let Some(name) = it.next() {
            let Some(name) = name.strip_prefix("--") else {
                bail!("unexpected argument {name:?}");
            };
            let value = it
                .next()
                .with_context(|| format!("--{name} needs a value"))?;
            pairs.push((name.to_owned(), value.clone()));
        }
        Ok(Flags(pairs))
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn url(&self) -> Result<&str> {
        self.get("url").context("--url is required")
    }

    fn number(&self, name: &str, default: Option<u64>) -> Result<u64> {
        match (self.get(name), default) {
            (Some(v), _) => v
                .parse()
                .with_context(|| format!("--{name} {v:?} is not a number")),
            (None, Some(d)) => Ok(d),
            (None, None) => bail!("--{name} is required"),
        }
    }
}

async fn pool(url: &str, size: u32) -> Result<RedisPool> {
    let manager = RedisConnectionManager::new(url)?;
    Ok(bb8::Pool::builder().max_size(size).build(manager).await?)
}

/// CPU time this process has used, in seconds (its threads' schedstat run times).
fn cpu_secs() -> f64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    let ns: u64 = tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    ns as f64 / 1e9
}

async fn enqueue(flags: &Flags) -> Result<()> {
    let n = flags.number("jobs", None)?;
    let batch = flags.number("batch", Some(1000))?.max(1);
    // bb8's default pool size.
    let redis = pool(flags.url()?, flags.number("pool", Some(10))? as u32).await?;
    drop(redis.get().await?); // connect before the clock starts
    let (t0, c0) = (Instant::now(), cpu_secs());
    let mut i = 0;
    while i < n {
        let end = (i + batch).min(n);
        let redis = &redis;
        let pushes = (i..end).map(|k| async move {
            let opts = BenchNoopJob::opts();
            opts.perform_async(redis, k).await
        });
        for r in futures_util::future::join_all(pushes).await {
            r?;
        }
        i = end;
    }
    println!("{} {}", t0.elapsed().as_secs_f64(), cpu_secs() - c0);
    Ok(())
}

async fn process(flags: &Flags) -> Result<()> {
    let target = flags.number("jobs", None)?;
    let concurrency = flags.number("concurrency", Some(25))? as usize;
    // One connection per worker's BRPOP, plus the jobs' stamps and heartbeats.
    let size = flags.number("pool", Some(concurrency as u64 + 5))? as u32;
    let redis = pool(flags.url()?, size).await?;
    let mut processor = Processor::new(redis.clone(), vec!["bench".to_owned()])
        .with_config(ProcessorConfig::default().num_workers(concurrency));
    processor.register(BenchNoopJob {
        redis,
        performed: Arc::new(AtomicU64::new(0)),
        target,
    });
    let token = processor.get_cancellation_token();
    tokio::spawn(async move {
        if let Ok(mut term) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            term.recv().await;
        }
        token.cancel();
    });
    processor.run().await;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((command, rest)) = args.split_first() else {
        bail!("usage: rusty-sidekiq-bench enqueue|process --url URL --jobs N [--concurrency C]");
    };
    let flags = Flags::parse(rest)?;
    match command.as_str() {
        "enqueue" => enqueue(&flags).await,
        "process" => process(&flags).await,
        other => bail!("unknown command {other:?} (enqueue or process)"),
    }
}
