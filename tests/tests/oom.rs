//! Redis out of memory under `noeviction` (reliability.md §3 T12): once Redis is
//! full of queued jobs, enqueue fails with the typed `Error::OutOfMemory` and
//! writes nothing, while a running worker process keeps fetching and acking
//! (its lease renewal too), so the queue drains; after draining, enqueue works
//! again without restarting anything.

use std::time::Duration;

use fairjob::broker::Keys;
use fairjob::payload::new_jid;
use fairjob::{Error, Job};
use fairjob_tests::jobs::LedgerJob;
use fairjob_tests::{
    Ledger, RedisServer, WorkerProcess, client, ledger_dir, namespace, process_alive, raw,
    sidekiq_payload, wait_for, wait_until,
};
use redis::AsyncCommands;

const JOBS: usize = 600;
const ARGS: &[&str] = &[
    "-q",
    "ledger",
    "-c",
    "5",
    "--lease",
    "10s",
    "--heartbeat",
    "1s",
    "--reaper-interval",
    "1s",
    "--poll-interval",
    "100ms",
    "--scheduled-poll-interval",
    "100ms",
    "-t",
    "3s",
];

async fn used_memory(url: &str) -> u64 {
    let mut r = raw(url).await;
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut r)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("used_memory in INFO")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_memory_refuses_enqueues_while_workers_drain_the_queue() {
    let server =
        RedisServer::start(&["--maxmemory-policy", "noeviction"]).expect("redis-server starts");
    let url = server.url();
    let ns = namespace();
    let keys = Keys::new(Some(&ns));
    let dir = ledger_dir("oom");
    let c = client(&url, &ns).await;
    let mut r = raw(&url).await;

    // A worker that is registered (lease, records) before Redis fills up; frozen
    // while the queue is filled so the jobs wait.
    let w = WorkerProcess::start(&url, &ns, Some(&*dir), ARGS);
    assert!(
        wait_until(Duration::from_secs(10), || async {
            let mut r = raw(&url).await;
            r.hlen::<_, u64>(keys.workers()).await.unwrap() == 1
        })
        .await,
        "the worker registers"
    );
    w.signal("STOP");

    // ~5 MB of queued jobs (8 KB of padding each, a field the job ignores).
    let pad = "p".repeat(8 * 1024);
    let mut jids = Vec::new();
    for _ in 0..JOBS {
        let jid = new_jid();
        let mut v: serde_json::Value = serde_json::from_str(&sidekiq_payload(
            &LedgerJob {
                ms: 5,
                abort: false,
            },
            &jid,
            "ledger",
        ))
        .unwrap();
        v["pad"] = serde_json::Value::String(pad.clone());
        let _: u64 = r.lpush(keys.queue("ledger"), v.to_string()).await.unwrap();
        jids.push(jid);
    }
    let used = used_memory(&url).await;
    let max = used - 1024 * 1024;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(max)
        .query_async(&mut r)
        .await
        .unwrap();

    // Writes that grow memory are refused now.
    let plain: redis::RedisResult<u64> = r.lpush(format!("{ns}:filler"), "x").await;
    assert!(
        plain.is_err_and(|e| e.to_string().contains("OOM")),
        "Redis is out of memory"
    );
    let before: u64 = r.llen(keys.queue("ledger")).await.unwrap();
    let err = LedgerJob {
        ms: 5,
        abort: false,
    }
    .perform_async(&c)
    .await
    .expect_err("enqueue must fail while Redis is out of memory");
    assert!(
        matches!(err, Error::OutOfMemory(_)),
        "a typed error: {err:?}"
    );
    assert!(err.is_transient());
    let bulk = c
        .push_bulk((0..3).map(|_| LedgerJob {
            ms: 5,
            abort: false,
        }))
        .await
        .expect_err("bulk enqueue fails too");
    assert!(matches!(bulk, Error::OutOfMemory(_)), "{bulk:?}");
    let sched = LedgerJob {
        ms: 5,
        abort: false,
    }
    .perform_in(&c, Duration::from_secs(60))
    .await
    .expect_err("scheduling fails too");
    assert!(matches!(sched, Error::OutOfMemory(_)), "{sched:?}");
    let after: u64 = r.llen(keys.queue("ledger")).await.unwrap();
    let scheduled: u64 = r.zcard(keys.schedule()).await.unwrap();
    assert_eq!(
        (after, scheduled),
        (before, 0),
        "a refused enqueue writes nothing"
    );

    // The worker thaws and drains the queue while Redis is still out of memory.
    w.signal("CONT");
    let drained = wait_for(Duration::from_secs(60), || {
        let l = Ledger::read(&dir);
        jids.iter().all(|j| l.ended(j) == 1)
    });
    let l = Ledger::read(&dir);
    let ended = jids.iter().filter(|j| l.ended(j) == 1).count();
    let left: u64 = r.llen(keys.queue("ledger")).await.unwrap();
    let used_after = used_memory(&url).await;
    println!(
        "oom: maxmemory {max} B (used {used} B when full); {ended} of {JOBS} jobs ran under OOM, \
         {left} left queued; used_memory after draining {used_after} B"
    );
    if !drained {
        let missing: Vec<(&String, usize, usize)> = jids
            .iter()
            .filter(|j| l.ended(j) != 1)
            .map(|j| (j, l.started(j), l.ended(j)))
            .collect();
        let mut inflight = 0;
        for k in r
            .keys::<_, Vec<String>>(format!("{ns}:fairjob:inflight:*"))
            .await
            .unwrap()
        {
            inflight += r.hlen::<_, u64>(k).await.unwrap();
        }
        let retry: Vec<String> = r.zrange(keys.retry(), 0, -1).await.unwrap();
        let dead: Vec<String> = r.zrange(keys.dead(), 0, -1).await.unwrap();
        let mut rw = Vec::new();
        for e in retry.iter().chain(&dead).take(3) {
            let v: serde_json::Value = serde_json::from_str(e).unwrap();
            rw.push((
                v["jid"].clone(),
                v["error_class"].clone(),
                v["error_message"].clone(),
            ));
        }
        panic!(
            "the worker must drain the queue under OOM: {ended} of {JOBS} ran once, {left} still \
             queued, worker alive: {}; not ended once (jid, starts, ends): {:?}; in progress {inflight}, \
             retry {}, dead {}: {rw:?}",
            process_alive(w.pid()),
            &missing[..missing.len().min(5)],
            retry.len(),
            dead.len(),
        );
    }
    assert!(l.started_more_than_once().is_empty(), "no job ran twice");
    assert!(
        wait_until(Duration::from_secs(10), || async {
            let mut r = raw(&url).await;
            r.llen::<_, u64>(keys.queue("ledger")).await.unwrap() == 0
                && r.keys::<_, Vec<String>>(format!("{ns}:fairjob:inflight:*"))
                    .await
                    .unwrap()
                    .is_empty()
        })
        .await,
        "queue and in-progress records empty after draining"
    );
    let recovered: Option<u64> = r.get(keys.stat("recovered")).await.unwrap();
    assert_eq!(
        recovered.unwrap_or(0),
        0,
        "no false recovery of a live worker"
    );

    // Memory is free again: enqueue works without restarting anything.
    assert!(used_memory(&url).await < max, "memory fell below maxmemory");
    let jid = LedgerJob {
        ms: 5,
        abort: false,
    }
    .perform_async(&c)
    .await
    .expect("enqueue works again after draining");
    assert!(
        wait_for(Duration::from_secs(10), || Ledger::read(&dir).ended(&jid)
            == 1),
        "the worker runs new jobs"
    );
    assert!(process_alive(w.pid()), "the worker survived");
}

/// A worker started while Redis is already out of memory (a restart or a new
/// worker added to drain a backlog) must be able to register and drain the
/// queue: otherwise an OOM with no worker running can never clear.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_started_during_out_of_memory_drains_the_queue() {
    let server =
        RedisServer::start(&["--maxmemory-policy", "noeviction"]).expect("redis-server starts");
    let url = server.url();
    let ns = namespace();
    let keys = Keys::new(Some(&ns));
    let dir = ledger_dir("oom-start");
    let mut r = raw(&url).await;
    let pad = "p".repeat(8 * 1024);
    let mut jids = Vec::new();
    for _ in 0..200 {
        let jid = new_jid();
        let mut v: serde_json::Value = serde_json::from_str(&sidekiq_payload(
            &LedgerJob {
                ms: 5,
                abort: false,
            },
            &jid,
            "ledger",
        ))
        .unwrap();
        v["pad"] = serde_json::Value::String(pad.clone());
        let _: u64 = r.lpush(keys.queue("ledger"), v.to_string()).await.unwrap();
        jids.push(jid);
    }
    let used = used_memory(&url).await;
    let max = used - 512 * 1024;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(max)
        .query_async(&mut r)
        .await
        .unwrap();
    let plain: redis::RedisResult<u64> = r.lpush(format!("{ns}:filler"), "x").await;
    assert!(plain.is_err(), "Redis is out of memory");

    let log = dir.join("worker.log");
    let w = fairjob_tests::start_worker_logged(&url, &ns, Some(&*dir), ARGS, &log);
    let drained = wait_for(Duration::from_secs(10), || {
        let l = Ledger::read(&dir);
        jids.iter().all(|j| l.ended(j) == 1)
    });
    let ended = Ledger::read(&dir).jobs_ended();
    let left: u64 = r.llen(keys.queue("ledger")).await.unwrap();
    let registered: u64 = r.hlen(keys.workers()).await.unwrap();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    println!(
        "oom (worker started during OOM): {ended} of {} jobs ran in 10 s, {left} still queued, \
         {registered} worker(s) registered; worker log:\n{}",
        jids.len(),
        text.lines().take(5).collect::<Vec<_>>().join("\n")
    );
    assert!(process_alive(w.pid()), "the worker died");
    assert!(
        drained,
        "a worker started during OOM did not drain the queue: {ended} of {} ran, {left} still \
         queued, {registered} worker(s) registered",
        jids.len()
    );
}
