//! The pump's throughput and latency, in one run on private PostgreSQL and
//! Redis servers:
//!
//! - throughput: N jobs committed to `fairjob.outbox` in one transaction,
//!   drained into Redis by 1, 2 and 4 pumps, against the same jobs pushed
//!   directly with `push_bulk`;
//! - commit → start: jobs committed one at a time at a steady rate while a
//!   worker runs them, through a polling pump, a pump woken by `NOTIFY`
//!   (`notify_pumps` after the commit), and pushed directly (`perform_async`),
//!   p50/p99 of the time from the commit returning to the job starting.
//!
//! `cargo run --release -p fairjob-tests --bin pump_bench -- [--jobs 20000] [--tenants 10] [--batch 500] [--latency-jobs 200] [--rate 50]`

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

#[derive(Clone, Copy, Debug)]
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
    println!("{n} jobs, {tenants} tenants, batches of {batch}");

    let client = redis.client().await;
    let t = Instant::now();
    client.push_bulk(jobs(n, tenants)).await.unwrap();
    let direct = n as f64 / t.elapsed().as_secs_f64();
    println!("direct push_bulk: {direct:.0} jobs/s");

    for pumps in [1usize, 2, 4] {
        let _: () = redis.query(&redis::cmd("FLUSHALL")).await;
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
        let rate = n as f64 / t.elapsed().as_secs_f64();
        let in_redis = redis.llen(redis.keys().queue(EchoJob::OPTIONS.queue)).await;
        assert_eq!(in_redis, n);
        println!("{pumps} pump(s): {rate:.0} jobs/s into Redis");
    }

    // Commit → start, with a worker and a running pump.
    let _: () = redis.query(&redis::cmd("FLUSHALL")).await;
    println!(
        "commit → start: {latency_jobs} jobs at {rate}/s each way (pump: poll 100ms, idle max 2s)"
    );
    let worker = redis
        .worker()
        .queues(fairjob_tests::queues(&["latency"]))
        .concurrency(20)
        .build()
        .await
        .unwrap();
    let running = fairjob_tests::spawn(worker);
    for (k, path) in [Path::Direct, Path::Polling, Path::Notify]
        .into_iter()
        .enumerate()
    {
        let pump =
            Pump::new(pool.clone(), redis.client().await).listen(matches!(path, Path::Notify));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(pump.run(async {
            let _ = stopped.await;
        }));
        tokio::time::sleep(Duration::from_millis(500)).await;
        let _: () = redis.query(redis::cmd("DEL").arg(redis.key(STARTS))).await;
        let ms = latency(
            path,
            latency_jobs,
            rate,
            &pool,
            &redis,
            (k as u64) * 1_000_000,
        )
        .await;
        let _ = stop.send(());
        task.await.unwrap().unwrap();
        println!(
            "{path:?}: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms ({} jobs)",
            percentile(&ms, 50.0),
            percentile(&ms, 99.0),
            ms.last().copied().unwrap_or(f64::NAN),
            ms.len()
        );
    }
    running.stop().await;
}
