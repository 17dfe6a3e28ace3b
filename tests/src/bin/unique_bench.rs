//! What a unique check adds to a push: jobs/s of plain and unique pushes
//! (every key distinct, so every push takes a lock), interleaved in the same
//! run on one private redis-server, one at a time (`perform_async` from 8
//! tasks) and in bulk (`push_bulk`); then, with 100,000 live locks, the
//! slowest unique script calls (`SLOWLOG`) over 2,000 pushes, 2,000
//! duplicates and 2,000 scheduled pushes.
//!
//! `cargo run --release -p fairjob-tests --bin unique_bench -- --jobs 20000 --rounds 3`

use std::time::Instant;

use fairjob::prelude::*;
use fairjob_tests::jobs::NoopJob;
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
    let c = Client::builder(server.url())
        .namespace(namespace())
        .build()
        .await
        .unwrap();
    let mut conn = fairjob_tests::raw(&server.url()).await;
    let flush = || redis::cmd("FLUSHALL");
    let mut rows = Vec::new();
    let mut base = 0;
    for round in 0..rounds {
        let _: () = flush().query_async(&mut conn).await.unwrap();
        let plain = single(&c, jobs, false, 0).await;
        let _: () = flush().query_async(&mut conn).await.unwrap();
        let uniq = single(&c, jobs, true, base).await;
        base += jobs;
        let _: () = flush().query_async(&mut conn).await.unwrap();
        let bplain = bulk(&c, jobs * 5, false, 0).await;
        let _: () = flush().query_async(&mut conn).await.unwrap();
        let buniq = bulk(&c, jobs * 5, true, base).await;
        base += jobs * 5;
        println!(
            "round {round}: perform_async plain {plain:.0}/s unique {uniq:.0}/s; push_bulk plain {bplain:.0}/s unique {buniq:.0}/s"
        );
        rows.push((plain, uniq, bplain, buniq));
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
    println!("| push | plain jobs/s | unique jobs/s | unique / plain |");
    println!("|---|---:|---:|---:|");
    println!(
        "| `perform_async`, {TASKS} tasks | {p:.0} | {u:.0} | {:.2} |",
        u / p
    );
    println!("| `push_bulk` | {bp:.0} | {bu:.0} | {:.2} |", bu / bp);

    // Script cost with 100,000 live locks.
    let _: () = flush().query_async(&mut conn).await.unwrap();
    c.push_bulk((0..100_000).map(|i| UniqueNoop(1_000_000 + i)))
        .await
        .unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-log-slower-than")
        .arg(0)
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-max-len")
        .arg(10_000)
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("SLOWLOG")
        .arg("RESET")
        .query_async(&mut conn)
        .await
        .unwrap();
    for i in 0..2_000u64 {
        UniqueNoop(5_000_000 + i).perform_async(&c).await.unwrap();
        let dup = UniqueNoop(1_000_000 + i).perform_async(&c).await;
        assert!(matches!(dup, Err(fairjob::Error::Duplicate { .. })));
        UniqueNoop(6_000_000 + i)
            .perform_in(&c, std::time::Duration::from_secs(3600))
            .await
            .unwrap();
    }
    let log: Vec<(i64, i64, i64, Vec<String>)> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(10_000)
        .query_async::<Vec<redis::Value>>(&mut conn)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|v| match v {
            redis::Value::Array(items) if items.len() >= 4 => {
                let id = redis::from_redis_value::<i64>(items[0].clone()).ok()?;
                let at = redis::from_redis_value::<i64>(items[1].clone()).ok()?;
                let us = redis::from_redis_value::<i64>(items[2].clone()).ok()?;
                let args =
                    redis::from_redis_value::<Vec<String>>(items[3].clone()).unwrap_or_default();
                Some((id, at, us, args))
            }
            _ => None,
        })
        .collect();
    let hashes = fairjob::broker::script_hashes();
    let mut worst: std::collections::BTreeMap<&str, (i64, usize)> = Default::default();
    for (_, _, us, args) in &log {
        if args.first().map(String::as_str) != Some("EVALSHA") {
            continue;
        }
        let Some((name, _)) = hashes.iter().find(|(_, h)| Some(h) == args.get(1)) else {
            continue;
        };
        let e = worst.entry(name).or_default();
        e.0 = e.0.max(*us);
        e.1 += 1;
    }
    println!("\nwith 100,000 live locks: slowest call per script (SLOWLOG, µs)");
    for (name, (us, n)) in worst {
        println!("- {name}: {n} calls, slowest {us} µs");
    }
}
