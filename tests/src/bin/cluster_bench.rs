//! `cluster_bench`: the same workloads on one Redis primary and on a
//! three-primary Redis Cluster, side by side in one run (rep by rep,
//! interleaved), each against private servers this binary starts.
//!
//! ```text
//! cargo run --release -p fairjob-tests --bin cluster_bench -- [--jobs 20000] [--reps 3]
//! ```
//!
//! Workloads, each timed from the first push to the last job performed by one
//! in-process worker (concurrency 25):
//! - `push_bulk`: jobs/s of `push_bulk` in batches of 1,000 over 4 plain queues;
//! - `plain`: processing jobs/s of no-op jobs pre-filled over 4 plain queues;
//! - `sharded`: processing jobs/s of no-op jobs over 100 tenants of one
//!   tenant-sharded queue (the shard scale drain at a small scale).
//!
//! Also: Redis commands per processed job (every node's `INFO commandstats`,
//! calls summed, commands inside scripts counted under their own names, and
//! script calls counted once each), which is what a job costs in requests.
//!
//! On a 2-core machine three primaries share the cores with the worker, so the
//! ratio shows the cluster client's overhead, not a speed-up.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use fairjob::testing::{RedisCluster, RedisServer};
use fairjob::{Client, Job, JobContext, JobError, Perform, QueueSpec, Worker};
use fairjob_tests::flag;
use serde::{Deserialize, Serialize};

static DONE: AtomicU64 = AtomicU64::new(0);

#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "ClusterBenchJob", queue = "cb0")]
struct Noop(u64);

impl Perform for Noop {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        DONE.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "ClusterBenchShardJob", queue = "cbshard")]
#[fair_tenant(tenant)]
struct ShardNoop {
    tenant: String,
}

impl Perform for ShardNoop {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        DONE.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

const QUEUES: [&str; 4] = ["cb0", "cb1", "cb2", "cb3"];

/// Every node's `INFO commandstats` calls, summed.
async fn commands(ports: &[u16]) -> Result<u64> {
    let mut total = 0;
    for p in ports {
        let mut c = redis::Client::open(format!("redis://127.0.0.1:{p}"))?
            .get_multiplexed_async_connection()
            .await?;
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut c)
            .await?;
        total += fairjob_tests::commandstats_calls(&info)
            .into_iter()
            .map(|(_, calls)| calls)
            .sum::<u64>();
    }
    Ok(total)
}

async fn reset(ports: &[u16]) -> Result<()> {
    for p in ports {
        let mut c = redis::Client::open(format!("redis://127.0.0.1:{p}"))?
            .get_multiplexed_async_connection()
            .await?;
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async(&mut c)
            .await?;
    }
    Ok(())
}

struct Figures {
    bulk: f64,
    plain: f64,
    sharded: f64,
    plain_cmds: f64,
    sharded_cmds: f64,
}

async fn drain(url: &str, ns: &str, n: u64, sharded: bool) -> Result<Duration> {
    let mut names: Vec<String> = QUEUES.map(String::from).to_vec();
    names.push("cbshard".into());
    let mut b = Worker::builder(url)
        .namespace(ns)
        .queues(QueueSpec::parse(&names)?)
        .concurrency(25);
    if sharded {
        b = b.sharded_queue("cbshard");
    }
    let w = b.build().await?;
    DONE.store(0, Ordering::Relaxed);
    let start = Instant::now();
    let (stop, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(w.run_until(async move {
        let _ = rx.await;
    }));
    while DONE.load(Ordering::Relaxed) < n {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let took = start.elapsed();
    let _ = stop.send(());
    task.await??;
    Ok(took)
}

async fn run(url: &str, ports: &[u16], n: u64, rep: usize) -> Result<Figures> {
    let ns = format!("cb{rep}");
    let c = Client::builder(url).namespace(&ns).build().await?;
    let start = Instant::now();
    for from in (0..n).step_by(1000) {
        let part: Vec<_> = (from..(from + 1000).min(n))
            .map(|i| Noop(i).queue(QUEUES[(i % 4) as usize]))
            .collect();
        c.push_bulk(part).await?;
    }
    let bulk = n as f64 / start.elapsed().as_secs_f64();
    reset(ports).await?;
    let plain_took = drain(url, &ns, n, false).await?;
    let plain_cmds = commands(ports).await? as f64 / n as f64;

    let ns = format!("cbs{rep}");
    let c = Client::builder(url).namespace(&ns).build().await?;
    for from in (0..n).step_by(1000) {
        let part: Vec<_> = (from..(from + 1000).min(n))
            .map(|i| ShardNoop {
                tenant: format!("t{}", i % 100),
            })
            .collect();
        c.push_bulk(part).await?;
    }
    // The first worker to build announces the sharded queue; pushes before
    // that land in the queue's list and are sorted into shards on fetch.
    reset(ports).await?;
    let sharded_took = drain(url, &ns, n, true).await?;
    let sharded_cmds = commands(ports).await? as f64 / n as f64;
    Ok(Figures {
        bulk,
        plain: n as f64 / plain_took.as_secs_f64(),
        sharded: n as f64 / sharded_took.as_secs_f64(),
        plain_cmds,
        sharded_cmds,
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> Result<()> {
    let n: u64 = flag("--jobs", 20_000);
    let reps: usize = flag("--reps", 3);
    let single = RedisServer::start(&[]).context("redis-server")?;
    let cluster = RedisCluster::start(3, 0, &[]).context("redis cluster")?;
    let (mut one, mut three) = (Vec::new(), Vec::new());
    for rep in 0..reps {
        one.push(run(&single.url(), &[single.port()], n, rep).await?);
        three.push(run(&cluster.url(), &cluster.ports(), n, rep).await?);
        eprintln!("rep {} of {reps} done", rep + 1);
    }
    let row = |name: &str, f: &dyn Fn(&Figures) -> f64, unit: &str| {
        let a = median(one.iter().map(f).collect());
        let b = median(three.iter().map(f).collect());
        println!("| {name} | {a:.0}{unit} | {b:.0}{unit} | {:.2}× |", b / a);
    };
    println!("{n} jobs, median of {reps} reps, 1 primary vs 3-primary cluster, interleaved:\n");
    println!("| measure | 1 primary | 3-primary cluster | cluster ÷ single |");
    println!("|---|---|---|---|");
    row(
        "`push_bulk` ×1,000, 4 plain queues, jobs/s",
        &|f| f.bulk,
        "",
    );
    row(
        "no-op processing, 4 plain queues, c=25, jobs/s",
        &|f| f.plain,
        "",
    );
    row(
        "no-op processing, sharded queue (100 tenants), c=25, jobs/s",
        &|f| f.sharded,
        "",
    );
    let cmds = |name: &str, f: &dyn Fn(&Figures) -> f64| {
        let a = median(one.iter().map(f).collect());
        let b = median(three.iter().map(f).collect());
        println!("| {name} | {a:.2} | {b:.2} | {:.2}× |", b / a);
    };
    cmds("Redis commands per processed job, plain", &|f| f.plain_cmds);
    cmds("Redis commands per processed job, sharded", &|f| {
        f.sharded_cmds
    });
    Ok(())
}
