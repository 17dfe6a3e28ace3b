//! The pump's throughput and latency, in one run on private PostgreSQL and
//! Redis servers:
//!
//! - throughput: N jobs committed to `fairjob.outbox` in one transaction,
//!   drained into Redis by 1, 2 and 4 pumps, against the same jobs pushed
//!   directly with `push_bulk` (jobs/s, and Redis commands per job from
//!   `INFO commandstats`, commands inside scripts counted);
//! - commit → start: jobs committed one at a time at a steady rate while a
//!   worker runs them, through a polling pump, a pump woken by `NOTIFY`
//!   (`notify_pumps` after the commit), and pushed directly (`perform_async`),
//!   p50/p99 of the time from the commit returning to the job starting.
//!
//! Every figure is measured `--reps` times (default 3) with the paths
//! alternated (the order rotating each rep) and printed with its median.
//!
//! `cargo run --release -p fairjob-tests --bin pump_bench -- [--jobs 20000] [--tenants 10] [--batch 500] [--latency-jobs 200] [--rate 50] [--reps 3]`

use std::collections::HashMap;
use std::time::{Duration, Instant};

use fairjob::prelude::*;
use fairjob_examples::EchoJob;
use fairjob_postgres::testing::PostgresServer;
use fairjob_postgres::{EnqueueTx, Pump, migrate, notify_pumps, perform_bulk_tx};
use fairjob_tests::{Redis, flag, percentile};
use serde::{Deserialize, Serialize};

const STARTS: &str = "bench-starts";

/// Records `<id> <start time>` when it starts.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "PumpLatencyJob", queue = "latency")]
struct PumpLatencyJob(u64);

impl Perform for PumpLatencyJob {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        let started = fairjob::wire::now_f64();
        let b = cx.client().broker();
        let key = format!("{}{STARTS}", b.keys().prefix());
        fairjob_tests::query::<i64>(
            b,
            redis::cmd("RPUSH")
                .arg(key)
                .arg(format!("{} {started}", self.0)),
        )
        .await?;
        Ok(())
    }
}

fn jobs(n: usize, tenants: usize) -> impl Iterator<Item = fairjob::Enqueue<EchoJob>> {
    (0..n).map(move |i| EchoJob(i.to_string()).set_tenant(format!("t{}", i % tenants)))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path {
    Direct,
    Polling,
    Notify,
}

/// Commits (or pushes) `n` jobs at `rate`/s; returns the commit → start
/// latencies in ms, sorted.
async fn latency(
    path: Path,
    n: usize,
    rate: f64,
    pool: &sqlx::PgPool,
    redis: &Redis,
    base: u64,
) -> Vec<f64> {
    let client = redis.client().await;
    let mut committed: HashMap<u64, f64> = HashMap::new();
    let gap = Duration::from_secs_f64(1.0 / rate);
    let t0 = Instant::now();
    for i in 0..n as u64 {
        let id = base + i;
        match path {
            Path::Direct => {
                let at = fairjob::wire::now_f64();
                PumpLatencyJob(id).perform_async(&client).await.unwrap();
                committed.insert(id, at);
            }
            Path::Polling | Path::Notify => {
                let mut tx = pool.begin().await.unwrap();
                PumpLatencyJob(id).perform_async_tx(&mut *tx).await.unwrap();
                tx.commit().await.unwrap();
                committed.insert(id, fairjob::wire::now_f64());
                if let Path::Notify = path {
                    notify_pumps(pool).await.unwrap();
                }
            }
        }
        let next = gap * (i as u32 + 1);
        if let Some(wait) = next.checked_sub(t0.elapsed()) {
            tokio::time::sleep(wait).await;
        }
    }
    let key = redis.key(STARTS);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let lines = redis.lrange(&key).await;
        let mut out: Vec<f64> = lines
            .iter()
            .filter_map(|l| {
                let (id, at) = l.split_once(' ')?;
                let id: u64 = id.parse().ok()?;
                let at: f64 = at.parse().ok()?;
                committed.get(&id).map(|c| (at - c) * 1000.0)
            })
            .collect();
        if out.len() >= n || Instant::now() > deadline {
            out.sort_by(f64::total_cmp);
            return out;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

impl Path {
    fn name(self) -> &'static str {
        match self {
            Path::Direct => "direct",
            Path::Polling => "polling",
            Path::Notify => "notify",
        }
    }
}

/// A throughput path's name: 0 = the direct push.
fn name(pumps: usize) -> String {
    match pumps {
        0 => "direct push_bulk".to_owned(),
        1 => "1 pump".to_owned(),
        n => format!("{n} pumps"),
    }
}

fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

#[tokio::main]
async fn main() {
    let n: usize = flag("--jobs", 20_000);
    let tenants: usize = flag("--tenants", 10);
    let batch: usize = flag("--batch", 500);
    let latency_jobs: usize = flag("--latency-jobs", 200);
    let rate: f64 = flag("--rate", 50.0);
    let pg = PostgresServer::start().expect("a private PostgreSQL");
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(10)
        .connect(&pg.url())
        .await
        .unwrap();
    migrate(&pool).await.unwrap();
    let redis = Redis::start().await;

    let reps: usize = flag("--reps", 3);
    println!("{n} jobs, {tenants} tenants, batches of {batch}, {reps} rep(s), paths alternated");
    // Throughput: each rep runs every path in turn (the order rotating), so
    // the machine's load falls on all of them alike.
    let paths = [0usize, 1, 2, 4]; // 0 = direct push_bulk, else that many pumps
    let mut rates: HashMap<usize, Vec<f64>> = HashMap::new();
    let mut commands: HashMap<usize, Vec<f64>> = HashMap::new();
    for rep in 0..reps {
        for k in 0..paths.len() {
            let pumps = paths[(k + rep) % paths.len()];
            let _: () = redis.query(&redis::cmd("FLUSHALL")).await;
            fairjob_tests::reset_redis_stats(redis.url()).await;
            let rate = if pumps == 0 {
                let client = redis.client().await;
                let t = Instant::now();
                client.push_bulk(jobs(n, tenants)).await.unwrap();
                n as f64 / t.elapsed().as_secs_f64()
            } else {
                let mut tx = pool.begin().await.unwrap();
                perform_bulk_tx(&mut *tx, jobs(n, tenants)).await.unwrap();
                tx.commit().await.unwrap();
                let t = Instant::now();
                let mut handles = Vec::new();
                for _ in 0..pumps {
                    let pump = Pump::new(pool.clone(), redis.client().await).batch(batch);
                    handles.push(tokio::spawn(async move {
                        while pump.pump_once().await.unwrap().claimed > 0 {}
                    }));
                }
                for h in handles {
                    h.await.unwrap();
                }
                n as f64 / t.elapsed().as_secs_f64()
            };
            let in_redis = redis.llen(redis.keys().queue(EchoJob::OPTIONS.queue)).await;
            assert_eq!(in_redis, n);
            // Less the `LLEN` just above.
            let cmds = (fairjob_tests::redis_commands(redis.url()).await - 1) as f64 / n as f64;
            println!(
                "rep {}: {}: {rate:.0} jobs/s into Redis, {cmds:.3} Redis commands per job",
                rep + 1,
                name(pumps)
            );
            rates.entry(pumps).or_default().push(rate);
            commands.entry(pumps).or_default().push(cmds);
        }
    }
    for pumps in paths {
        let runs = &rates[&pumps];
        let shown: Vec<String> = runs.iter().map(|r| format!("{r:.0}")).collect();
        println!(
            "{}: median {:.0} jobs/s (reps: {}), median {:.3} Redis commands per job",
            name(pumps),
            median(runs),
            shown.join(" · "),
            median(&commands[&pumps])
        );
    }

    // Commit → start, with a worker and a running pump.
    let _: () = redis.query(&redis::cmd("FLUSHALL")).await;
    println!(
        "commit → start: {latency_jobs} jobs at {rate}/s each way per rep (pump: poll 100ms, idle max 2s)"
    );
    let worker = redis
        .worker()
        .queues(fairjob_tests::queues(&["latency"]))
        .concurrency(20)
        .build()
        .await
        .unwrap();
    let running = fairjob_tests::spawn(worker);
    let mut lat: HashMap<&'static str, (Vec<f64>, Vec<f64>)> = HashMap::new();
    let order = [Path::Direct, Path::Polling, Path::Notify];
    let mut base = 0u64;
    for rep in 0..reps {
        for k in 0..order.len() {
            let path = order[(k + rep) % order.len()];
            let pump =
                Pump::new(pool.clone(), redis.client().await).listen(matches!(path, Path::Notify));
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let task = tokio::spawn(pump.run(async {
                let _ = stopped.await;
            }));
            tokio::time::sleep(Duration::from_millis(500)).await;
            let _: () = redis.query(redis::cmd("DEL").arg(redis.key(STARTS))).await;
            base += 1_000_000;
            let ms = latency(path, latency_jobs, rate, &pool, &redis, base).await;
            let _ = stop.send(());
            task.await.unwrap().unwrap();
            let (p50, p99) = (percentile(&ms, 50.0), percentile(&ms, 99.0));
            println!(
                "rep {}: {path:?}: p50 {p50:.1} ms, p99 {p99:.1} ms, max {:.1} ms ({} jobs)",
                rep + 1,
                ms.last().copied().unwrap_or(f64::NAN),
                ms.len()
            );
            let e = lat.entry(path.name()).or_default();
            e.0.push(p50);
            e.1.push(p99);
        }
    }
    for path in order {
        let (p50s, p99s) = &lat[path.name()];
        println!(
            "{path:?}: median p50 {:.1} ms, median p99 {:.1} ms",
            median(p50s),
            median(p99s)
        );
    }
    running.stop().await;
}
