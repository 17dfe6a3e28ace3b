//! Batched acks (worker/acks.rs): jobs that end together have their acks
//! written in one call, and fencing stays per job — in a batch where half the
//! jobs were taken from the worker's record (as a reaper's recovery does),
//! exactly those half are counted and reported as fenced, the others as done,
//! and nothing is left in the record. On a tenant-sharded queue the same
//! holds, and every tenant's running count goes back to zero (the acks that
//! count release their job's count; a recovery released the others'). The
//! same runs with batching off give the same results, one ack at a time.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use fairjob::prelude::*;
use fairjob_tests::{Redis, eventually, logs, queues, spawn};
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;

const JOBS: usize = 40;

/// Held until the test opens the gate.
static GATE: Semaphore = Semaphore::const_new(0);
static STARTED: AtomicUsize = AtomicUsize::new(0);

#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "GatedJob", queue = "gated")]
struct GatedJob(usize);

impl Perform for GatedJob {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        STARTED.fetch_add(1, Ordering::SeqCst);
        GATE.acquire().await.expect("gate open").forget();
        Ok(())
    }
}

/// The same on a tenant-sharded queue, for tenants `t0`…`t4` (with `:`, `{`
/// and a space, as tenant ids may have).
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "GatedShardJob", queue = "gated_shards", shard_by_tenant)]
#[fair_tenant(tenant)]
struct GatedShardJob {
    tenant: String,
    n: usize,
}

impl Perform for GatedShardJob {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        STARTED.fetch_add(1, Ordering::SeqCst);
        GATE.acquire().await.expect("gate open").forget();
        Ok(())
    }
}

fn tenant(i: usize) -> String {
    format!("t:{{{}}} x", i % 5)
}

/// The tokens the worker logged as fenced since `from` (a byte offset of the log).
fn fenced_tokens_logged(from: usize) -> BTreeSet<String> {
    logs::since(from)
        .lines()
        .filter(|l| l.contains("stale completion fenced"))
        .filter_map(|l| {
            let rest = l.split("token=").nth(1)?;
            Some(rest.split_whitespace().next()?.to_owned())
        })
        .collect()
}

/// Runs `JOBS` gated jobs on one worker (of a tenant-sharded queue with
/// `sharded`), takes every other job out of its record while they run (as a
/// recovery does: for a sharded queue also releasing the tenant's count),
/// opens the gate, and checks the outcome. Returns, for a sharded queue,
/// whether Redis ever ran its batch script. `fold_acks`: the next fetch may
/// carry the acks (the default) instead of the ack task's batches.
async fn half_fenced(batch_acks: bool, fold_acks: bool, sharded: bool) -> Option<bool> {
    logs::capture();
    let redis = Redis::start().await;
    let c = redis.client().await;
    STARTED.store(0, Ordering::SeqCst);
    let queue = if sharded { "gated_shards" } else { "gated" };
    for i in 0..JOBS {
        if sharded {
            GatedShardJob {
                tenant: tenant(i),
                n: i,
            }
            .perform_async(&c)
            .await
            .unwrap();
        } else {
            GatedJob(i).perform_async(&c).await.unwrap();
        }
    }
    let worker = spawn(
        redis
            .worker()
            .concurrency(JOBS)
            .batch_acks(batch_acks)
            .fold_acks(fold_acks)
            .queues(queues(&[queue]))
            .build()
            .await
            .unwrap(),
    );
    let keys = redis.keys();
    let record = if sharded {
        keys.shard(queue).inflight(worker.identity())
    } else {
        keys.inflight(worker.identity())
    };
    eventually!(
        STARTED.load(Ordering::SeqCst) == JOBS && redis.hlen(&record).await == JOBS,
        "every job is running and in the worker's record"
    );
    // Take every other job out of the record, as a reaper's recovery would.
    let mut tokens: Vec<String> = redis.query(redis::cmd("HKEYS").arg(&record)).await;
    tokens.sort();
    let taken: BTreeSet<String> = tokens.iter().step_by(2).cloned().collect();
    for t in &taken {
        let removed: i64 = redis.query(redis::cmd("HDEL").arg(&record).arg(t)).await;
        assert_eq!(removed, 1);
        if sharded {
            let tenant = t.rsplit('|').next().unwrap();
            let _: i64 = redis
                .query(
                    redis::cmd("HINCRBY")
                        .arg(keys.shard(queue).running)
                        .arg(tenant)
                        .arg(-1),
                )
                .await;
        }
    }
    let log_from = logs::len();
    GATE.add_permits(JOBS);

    eventually!(
        within Duration::from_secs(10),
        redis.hlen(&record).await == 0 && redis.stat("fenced").await == taken.len() as i64,
        "every ack is written and the taken jobs' acks are fenced"
    );
    let logged = eventually!(
        let logged = fenced_tokens_logged(log_from); logged.len() == taken.len(),
        "the worker reports each fenced completion"
    );
    assert_eq!(
        logged, taken,
        "exactly the taken jobs are reported as fenced"
    );
    worker.stop().await;
    assert_eq!(redis.stat("fenced").await, taken.len() as i64);
    assert_eq!(redis.llen(keys.queue(queue)).await, 0);
    if sharded {
        let running: Vec<(String, i64)> = redis
            .query(redis::cmd("HGETALL").arg(keys.shard(queue).running))
            .await;
        assert!(
            running.iter().all(|(_, n)| *n == 0),
            "every tenant's running count is released: {running:?}"
        );
    }

    if !sharded {
        // Plain acks are pipelined HDELs: nothing in Redis tells a batch.
        return None;
    }
    let sha = fairjob::broker::script_hashes()
        .into_iter()
        .find(|(n, _)| *n == "shard_ack_many")
        .expect("the batch script")
        .1;
    // Loaded as a function library (FCALL), or as a script (EVALSHA).
    let library: Vec<redis::Value> = redis
        .query(
            redis::cmd("FUNCTION")
                .arg("LIST")
                .arg("LIBRARYNAME")
                .arg(format!("fairjob_{sha}")),
        )
        .await;
    let exists: Vec<i64> = redis
        .query(redis::cmd("SCRIPT").arg("EXISTS").arg(&sha))
        .await;
    Some(library.len() == 1 || exists == [1])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_stays_per_job_inside_a_batch_and_without_batches() {
    // One test: the gate and the counter are this binary's statics.
    // The checks of a plain queue are inside (no script to look for).
    for batch_acks in [true, false] {
        half_fenced(batch_acks, false, false).await;
    }
    // Folded into the next fetch (the default): fenced per job all the same.
    half_fenced(true, true, true).await;
    assert_eq!(
        half_fenced(true, false, true).await,
        Some(true),
        "sharded jobs that ended together were acked in batches"
    );
    assert_eq!(
        half_fenced(false, false, true).await,
        Some(false),
        "with batching off every sharded ack is its own shard_finish.lua call"
    );
}

/// Runs `n` no-op jobs of the tenant-sharded queue `scale` over 7 tenants on
/// one worker of concurrency 4; checks every job ran once, the in-progress
/// record is empty and every tenant's running count is back to zero; returns
/// the script calls Redis ran (FCALL and EVALSHA) for them.
async fn sharded_run(fold_acks: bool, n: usize) -> u64 {
    use fairjob_tests::jobs::{ScaleJob, scale_not_once, scale_reset, scale_wait};
    let redis = Redis::start().await;
    let c = redis.client().await;
    scale_reset(n);
    c.push_bulk((0..n as u64).map(|id| ScaleJob((id % 7) as u32, id)))
        .await
        .unwrap();
    let _: () = redis.query(redis::cmd("CONFIG").arg("RESETSTAT")).await;
    let worker = spawn(
        redis
            .worker()
            .concurrency(4)
            .fold_acks(fold_acks)
            .queues(queues(&["scale"]))
            .build()
            .await
            .unwrap(),
    );
    scale_wait(n, Duration::from_secs(20)).await.unwrap();
    let keys = redis.keys();
    let record = keys.shard("scale").inflight(worker.identity());
    eventually!(redis.hlen(&record).await == 0, "every ack is written");
    let info: String = redis.query(redis::cmd("INFO").arg("commandstats")).await;
    worker.stop().await;
    assert!(scale_not_once().is_empty(), "every job ran exactly once");
    let running: Vec<(String, i64)> = redis
        .query(redis::cmd("HGETALL").arg(keys.shard("scale").running))
        .await;
    assert!(
        running.iter().all(|(_, n)| *n == 0),
        "every tenant's running count is released: {running:?}"
    );
    info.lines()
        .filter(|l| l.starts_with("cmdstat_fcall:") || l.starts_with("cmdstat_evalsha:"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_fold_acks_the_next_fetch_carries_the_acks() {
    let n = 600;
    let separate = sharded_run(false, n).await;
    let folded = sharded_run(true, n).await;
    eprintln!("script calls for {n} jobs: {folded} folded, {separate} separate");
    // Separate: a fetch and an ack call per batch; folded: mostly one call
    // (a batch no fetch carries, at the end, goes alone).
    assert!(
        (folded as f64) < 0.8 * separate as f64,
        "script calls for {n} jobs: {folded} folded against {separate} separate"
    );
}
