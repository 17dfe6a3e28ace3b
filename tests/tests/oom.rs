//! Redis out of memory under `noeviction` (reliability.md §3 T12): once Redis is
//! full of queued jobs, enqueue fails with the typed `Error::OutOfMemory` and
//! writes nothing, while a running worker process keeps fetching and acking
//! (its lease renewal too), so the queue drains; after draining, enqueue works
//! again without restarting anything.

use std::time::Duration;

use fairjob::payload::new_jid;
use fairjob::{Error, Job};
use fairjob_tests::jobs::LedgerJob;
use fairjob_tests::{
    Ledger, Redis, TestWorker, WorkerProcess, eventually, ledger_dir, sidekiq_payload,
};
use redis::AsyncCommands;

const JOBS: usize = 600;

/// A worker process of the queue `ledger` whose lease (10 s) outlasts the
/// slowest step under memory pressure, writing to `dir`.
fn worker(redis: &Redis, dir: &std::path::Path) -> TestWorker {
    redis
        .ledger_worker(dir)
        .flag("--lease", "10s")
        .flag("--heartbeat", "1s")
        .flag("--reaper-interval", "1s")
}

async fn used_memory(redis: &Redis) -> u64 {
    redis
        .info("memory", "used_memory")
        .await
        .parse()
        .expect("used_memory in INFO")
}

/// Queues `n` LedgerJobs of ~8 KB each (padding in a field the job ignores),
/// then lowers `maxmemory` to `below` bytes under what Redis uses: Redis is
/// out of memory. Returns the jids and the new `maxmemory`.
async fn fill_to_out_of_memory(redis: &Redis, n: usize, below: u64) -> (Vec<String>, u64) {
    let pad = "p".repeat(8 * 1024);
    let mut jids = Vec::new();
    for _ in 0..n {
        let jid = new_jid();
        let mut v: serde_json::Value =
            serde_json::from_str(&sidekiq_payload(&LedgerJob::sleeping(5), &jid, "ledger"))
                .unwrap();
        v["pad"] = serde_json::Value::String(pad.clone());
        redis.lpush_raw("ledger", v.to_string()).await;
        jids.push(jid);
    }
    let max = used_memory(redis).await - below;
    let _: () = redis
        .query(redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg(max))
        .await;
    // Writes that grow memory are refused now.
    let plain: redis::RedisResult<u64> = redis.conn().lpush(redis.key("filler"), "x").await;
    assert!(
        plain.is_err_and(|e| e.to_string().contains("OOM")),
        "Redis is out of memory"
    );
    (jids, max)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_memory_refuses_enqueues_while_workers_drain_the_queue() {
    let redis = Redis::start_with(&["--maxmemory-policy", "noeviction"]).await;
    let keys = redis.keys();
    let dir = ledger_dir("oom");
    let c = redis.client().await;

    // A worker that is registered (lease, records) before Redis fills up; frozen
    // while the queue is filled so the jobs wait.
    let w = worker(&redis, &dir).start();
    eventually!(
        redis.hlen(keys.workers()).await == 1,
        "the worker registers"
    );
    w.signal("STOP");

    // ~5 MB of queued jobs.
    let (jids, max) = fill_to_out_of_memory(&redis, JOBS, 1024 * 1024).await;
    let before = redis.llen(keys.queue("ledger")).await;
    let err = LedgerJob::sleeping(5)
        .perform_async(&c)
        .await
        .expect_err("enqueue must fail while Redis is out of memory");
    assert!(
        matches!(err, Error::OutOfMemory(_)),
        "a typed error: {err:?}"
    );
    assert!(err.is_transient());
    let bulk = c
        .push_bulk((0..3).map(|_| LedgerJob::sleeping(5)))
        .await
        .expect_err("bulk enqueue fails too");
    assert!(matches!(bulk, Error::OutOfMemory(_)), "{bulk:?}");
    let sched = LedgerJob::sleeping(5)
        .perform_in(&c, Duration::from_secs(60))
        .await
        .expect_err("scheduling fails too");
    assert!(matches!(sched, Error::OutOfMemory(_)), "{sched:?}");
    let after = redis.llen(keys.queue("ledger")).await;
    let scheduled = redis.zcard(keys.schedule()).await;
    assert_eq!(
        (after, scheduled),
        (before, 0),
        "a refused enqueue writes nothing"
    );

    // The worker thaws and drains the queue while Redis is still out of memory.
    w.signal("CONT");
    eventually!(
        within Duration::from_secs(60),
        ended_once(&dir, &jids) == JOBS,
        "the worker drains the queue under OOM: {}",
        not_drained(&redis, &dir, &jids, &w).await
    );
    let used_after = used_memory(&redis).await;
    println!(
        "oom: maxmemory {max} B (1 MiB under what Redis used when full); all {JOBS} jobs ran \
         under OOM; used_memory after draining {used_after} B"
    );
    assert!(
        Ledger::read(&dir).started_more_than_once().is_empty(),
        "no job ran twice"
    );
    eventually!(
        redis.llen(keys.queue("ledger")).await == 0 && redis.inflight_keys().await.is_empty(),
        "queue and in-progress records empty after draining"
    );
    assert_eq!(
        redis.stat("recovered").await,
        0,
        "no false recovery of a live worker"
    );

    // Memory is free again: enqueue works without restarting anything.
    assert!(
        used_memory(&redis).await < max,
        "memory fell below maxmemory"
    );
    let jid = LedgerJob::sleeping(5)
        .perform_async(&c)
        .await
        .expect("enqueue works again after draining");
    eventually!(
        Ledger::read(&dir).ended(&jid) == 1,
        "the worker runs new jobs"
    );
    assert!(w.is_running(), "the worker survived");
}

/// How many of `jids` ended exactly once.
fn ended_once(dir: &std::path::Path, jids: &[String]) -> usize {
    let l = Ledger::read(dir);
    jids.iter().filter(|j| l.ended(j) == 1).count()
}

/// What stands between the queue and drained: jobs not ended once, what is in
/// progress, retried or dead.
async fn not_drained(
    redis: &Redis,
    dir: &std::path::Path,
    jids: &[String],
    w: &WorkerProcess,
) -> String {
    let keys = redis.keys();
    let l = Ledger::read(dir);
    let missing: Vec<(&String, usize, usize)> = jids
        .iter()
        .filter(|j| l.ended(j) != 1)
        .map(|j| (j, l.started(j), l.ended(j)))
        .collect();
    let mut inflight = 0;
    for k in redis.inflight_keys().await {
        inflight += redis.hlen(k).await;
    }
    let retry = redis.payloads(&keys.retry()).await;
    let dead = redis.payloads(&keys.dead()).await;
    let rw: Vec<_> = retry
        .iter()
        .chain(&dead)
        .take(3)
        .map(|v| (&v["jid"], &v["error_class"], &v["error_message"]))
        .collect();
    format!(
        "{} of {} ran once, {} still queued, worker alive: {}; not ended once (jid, starts, ends): \
         {:?}; in progress {inflight}, retry {}, dead {}: {rw:?}",
        jids.len() - missing.len(),
        jids.len(),
        redis.llen(keys.queue("ledger")).await,
        w.is_running(),
        &missing[..missing.len().min(5)],
        retry.len(),
        dead.len(),
    )
}

/// A worker started while Redis is already out of memory (a restart or a new
/// worker added to drain a backlog) must be able to register and drain the
/// queue: otherwise an OOM with no worker running can never clear.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_started_during_out_of_memory_drains_the_queue() {
    let redis = Redis::start_with(&["--maxmemory-policy", "noeviction"]).await;
    let keys = redis.keys();
    let dir = ledger_dir("oom-start");
    let (jids, _) = fill_to_out_of_memory(&redis, 200, 512 * 1024).await;

    let w = worker(&redis, &dir).log_to(&dir.join("worker.log")).start();
    eventually!(
        ended_once(&dir, &jids) == jids.len(),
        "a worker started during OOM drains the queue: {} of {} ran, {} still queued, {} \
         worker(s) registered, worker alive: {}; worker log:\n{}",
        Ledger::read(&dir).jobs_ended(),
        jids.len(),
        redis.llen(keys.queue("ledger")).await,
        redis.hlen(keys.workers()).await,
        w.is_running(),
        w.log().lines().take(5).collect::<Vec<_>>().join("\n")
    );
    assert!(w.is_running(), "the worker died");
}
