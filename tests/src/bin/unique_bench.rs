//! What a unique check adds to a push: jobs/s of plain and unique pushes
//! (every key distinct, so every push takes a lock), interleaved in the same
//! run on one private redis-server, one at a time (`perform_async` from 8
//! tasks) and in bulk (`push_bulk`); then, with 100,000 live locks, every
//! unique script call's time (`SLOWLOG` at threshold 0: median, p99,
//! slowest) over 2,000 pushes, duplicates, replacing and scheduled pushes
//! each, and a worker running (and releasing) them. Redis commands per job
//! (`INFO commandstats`, commands inside scripts counted) for each push phase.
//!
//! `cargo run --release -p fairjob-tests --bin unique_bench -- --jobs 20000 --rounds 3`

use std::time::Instant;

use fairjob::prelude::*;
use fairjob::{Registry, Worker};
use fairjob_tests::jobs::NoopJob;
use fairjob_tests::slowlog::{SlowLog, summarize};
use fairjob_tests::{flag, namespace, redis};
use serde::{Deserialize, Serialize};

/// A unique job whose key is its one argument.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(queue = "default")]
#[unique(for = "1h")]
struct UniqueNoop(u64);

impl Perform for UniqueNoop {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// A unique job that replaces a waiting holder (`push.lua`).
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(queue = "default")]
#[unique(for = "1h", on_conflict = "replace")]
struct UniqueReplaceNoop(u64);

impl Perform for UniqueReplaceNoop {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// A unique job released when it starts (`unique_release.lua`).
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(queue = "default")]
#[unique(for = "1h", until = "start")]
struct UniqueStartNoop(u64);

impl Perform for UniqueStartNoop {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

const TASKS: u64 = 8;

async fn single(c: &Client, n: u64, unique: bool, base: u64) -> f64 {
    let t = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|k| {
            let c = c.clone();
            tokio::spawn(async move {
                for i in (k..n).step_by(TASKS as usize) {
                    if unique {
                        UniqueNoop(base + i).perform_async(&c).await.unwrap();
                    } else {
                        NoopJob(i).perform_async(&c).await.unwrap();
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    n as f64 / t.elapsed().as_secs_f64()
}

async fn bulk(c: &Client, n: u64, unique: bool, base: u64) -> f64 {
    let t = Instant::now();
    if unique {
        let out = c
            .push_bulk((0..n).map(|i| UniqueNoop(base + i)))
            .await
            .unwrap();
        assert!(out.iter().all(Option::is_some));
    } else {
        c.push_bulk((0..n).map(NoopJob)).await.unwrap();
    }
    n as f64 / t.elapsed().as_secs_f64()
}

#[tokio::main]
async fn main() {
    let jobs: u64 = flag("--jobs", 20_000);
    let rounds: u64 = flag("--rounds", 3);
    let server = redis();
    let ns = namespace();
    let c = Client::builder(server.url())
        .namespace(&ns)
        .build()
        .await
        .unwrap();
    let mut conn = fairjob_tests::raw(&server.url()).await;
    let flush = || redis::cmd("FLUSHALL");
    let mut rows = Vec::new();
    let mut base = 0;
    // Redis commands per job of each phase (`INFO commandstats`).
    let url = server.url();
    let per_job = |n: u64| {
        let url = url.clone();
        async move { fairjob_tests::redis_commands(&url).await as f64 / n as f64 }
    };
    let mut cmds = Vec::new();
    for round in 0..rounds {
        let _: () = flush().query_async(&mut conn).await.unwrap();
        fairjob_tests::reset_redis_stats(&url).await;
        let plain = single(&c, jobs, false, 0).await;
        let c_plain = per_job(jobs).await;
        let _: () = flush().query_async(&mut conn).await.unwrap();
        fairjob_tests::reset_redis_stats(&url).await;
        let uniq = single(&c, jobs, true, base).await;
        let c_uniq = per_job(jobs).await;
        base += jobs;
        let _: () = flush().query_async(&mut conn).await.unwrap();
        fairjob_tests::reset_redis_stats(&url).await;
        let bplain = bulk(&c, jobs * 5, false, 0).await;
        let c_bplain = per_job(jobs * 5).await;
        let _: () = flush().query_async(&mut conn).await.unwrap();
        fairjob_tests::reset_redis_stats(&url).await;
        let buniq = bulk(&c, jobs * 5, true, base).await;
        let c_buniq = per_job(jobs * 5).await;
        base += jobs * 5;
        println!(
            "round {round}: perform_async plain {plain:.0}/s unique {uniq:.0}/s; push_bulk plain {bplain:.0}/s unique {buniq:.0}/s; \
             Redis commands per job: perform_async {c_plain:.2} / {c_uniq:.2}, push_bulk {c_bplain:.3} / {c_buniq:.3}"
        );
        rows.push((plain, uniq, bplain, buniq));
        cmds.push((c_plain, c_uniq, c_bplain, c_buniq));
    }
    let median = |f: fn(&(f64, f64, f64, f64)) -> f64| {
        let mut v: Vec<f64> = rows.iter().map(f).collect();
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v[v.len() / 2]
    };
    let (p, u, bp, bu) = (
        median(|r| r.0),
        median(|r| r.1),
        median(|r| r.2),
        median(|r| r.3),
    );
    let ratio = |f: fn(&(f64, f64, f64, f64)) -> f64, g: fn(&(f64, f64, f64, f64)) -> f64| {
        let mut v: Vec<f64> = rows.iter().map(|r| f(r) / g(r)).collect();
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v[v.len() / 2]
    };
    let cmd = |f: fn(&(f64, f64, f64, f64)) -> f64| {
        let mut v: Vec<f64> = cmds.iter().map(f).collect();
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v[v.len() / 2]
    };
    println!(
        "| push | plain jobs/s | unique jobs/s | unique / plain | median of the rounds' ratios | Redis commands per job, plain / unique |"
    );
    println!("|---|---:|---:|---:|---:|---|");
    println!(
        "| `perform_async`, {TASKS} tasks | {p:.0} | {u:.0} | {:.2} | {:.2} | {:.2} / {:.2} |",
        u / p,
        ratio(|r| r.1, |r| r.0),
        cmd(|r| r.0),
        cmd(|r| r.1)
    );
    println!(
        "| `push_bulk` | {bp:.0} | {bu:.0} | {:.2} | {:.2} | {:.3} / {:.3} |",
        bu / bp,
        ratio(|r| r.3, |r| r.2),
        cmd(|r| r.2),
        cmd(|r| r.3)
    );

    // Script cost with 100,000 live locks: every call's time (SLOWLOG at
    // threshold 0) of 2,000 unique pushes, 2,000 refused duplicates, 2,000
    // pushes of replacing jobs (free keys: the general `push.lua`, side by
    // side with `unique_push.lua`), 2,000 scheduled pushes, then a worker running 2,000
    // unique jobs (`finish.lua` releases each lock) and 2,000 released at
    // their start (`unique_release.lua`).
    let _: () = flush().query_async(&mut conn).await.unwrap();
    c.push_bulk((0..100_000).map(|i| UniqueNoop(1_000_000 + i)))
        .await
        .unwrap();
    let _: () = redis::cmd("DEL")
        .arg(c.broker().keys().queue("default"))
        .query_async(&mut conn)
        .await
        .unwrap();
    let mut slow = SlowLog::start_all(&server.url(), 1_000_000).await.unwrap();
    for i in 0..2_000u64 {
        UniqueNoop(5_000_000 + i).perform_async(&c).await.unwrap();
        let dup = UniqueNoop(1_000_000 + i).perform_async(&c).await;
        assert!(matches!(dup, Err(fairjob::Error::Duplicate { .. })));
        // A free key: `push.lua`'s cost for the same lock and push as
        // `unique_push.lua`'s (plus recording where the job waits).
        UniqueReplaceNoop(i).perform_async(&c).await.unwrap();
        UniqueNoop(6_000_000 + i)
            .perform_in(&c, std::time::Duration::from_secs(3600))
            .await
            .unwrap();
        UniqueStartNoop(i).perform_async(&c).await.unwrap();
    }
    let locks: u64 = redis::cmd("DBSIZE").query_async(&mut conn).await.unwrap();
    let mut registry = Registry::new();
    registry.register::<UniqueNoop>().unwrap();
    registry.register::<UniqueReplaceNoop>().unwrap();
    registry.register::<UniqueStartNoop>().unwrap();
    let w = fairjob_tests::spawn(
        Worker::builder(server.url())
            .namespace(&ns)
            .registry(registry)
            .concurrency(20)
            .build()
            .await
            .unwrap(),
    );
    let queue = c.broker().keys().queue("default");
    loop {
        let left: u64 = redis::cmd("LLEN")
            .arg(&queue)
            .query_async(&mut conn)
            .await
            .unwrap();
        if left == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    w.stop().await;
    let times = slow.times().await.unwrap();
    println!("\nwith {locks} keys (100,000+ live locks): every call's time (SLOWLOG, µs)");
    println!("| script | calls | median µs | p99 µs | slowest µs | calls over 1 ms |");
    println!("|---|---:|---:|---:|---:|---:|");
    println!(
        "{}",
        summarize(
            &times,
            &[
                "unique_push.lua",
                "push.lua",
                "schedule.lua",
                "fetch.lua",
                "finish.lua",
                "unique_release.lua",
                "TIME",
                "LPUSH",
            ],
            1000
        )
    );
}
