//! Poison pills and interruption counting (reliability.md §3 T5, T21): a job that
//! aborts its worker process runs exactly `max_interruptions` (3) times, then
//! lies in `dead` with `dead_reason: "interrupted"`, while the jobs around it
//! all complete; a job recovered from a killed worker sees its attempt number
//! and that it was interrupted.

use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use fairjob::Job;
use fairjob_tests::jobs::{LedgerJob, ProbeJob};
use fairjob_tests::{Ledger, Redis, TestWorker, eventually, ledger_dir};
use serde_json::Value;

/// A worker process of the queue `ledger`, one job at a time, that dead-letters
/// a job after 3 interruptions, writing to `dir`.
fn worker(redis: &Redis, dir: &std::path::Path) -> TestWorker {
    redis
        .ledger_worker(dir)
        .concurrency(1)
        .flag("--max-interruptions", "3")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_pill_runs_three_times_then_is_dead_and_the_rest_completes() {
    let redis = Redis::start().await;
    let dir = ledger_dir("poison");
    let c = redis.client().await;

    let mut normal = Vec::new();
    let mut poison = String::new();
    for i in 0..51 {
        let job = if i == 10 {
            LedgerJob::poison()
        } else {
            LedgerJob::sleeping(20)
        };
        let abort = job.abort;
        let jid = job.perform_async(&c).await.unwrap();
        if abort {
            poison = jid;
        } else {
            normal.push(jid);
        }
    }

    let mut deaths = Vec::new();
    let started = Instant::now();
    let mut finished = false;
    // A supervisor: restart the worker each time it dies (bounded).
    for _ in 0..10 {
        let mut w = worker(&redis, &dir).start();
        loop {
            if let Ok(Some(status)) = w.child.try_wait() {
                deaths.push(status);
                break;
            }
            let l = Ledger::read(&dir);
            if redis.zcard(redis.keys().dead()).await >= 1 && normal.iter().all(|j| l.ended(j) == 1)
            {
                finished = true;
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(90),
                "the queue did not drain in 90 s; deaths {deaths:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if finished {
            let status = w.stop();
            assert!(status.is_some_and(|s| s.success()), "{status:?}");
            break;
        }
    }
    assert!(finished, "the queue did not drain; deaths {deaths:?}");

    let l = Ledger::read(&dir);
    println!(
        "poison: {} starts of the poison jid, {} worker deaths ({:?}), drained in {:?}",
        l.started(&poison),
        deaths.len(),
        deaths,
        started.elapsed()
    );
    assert_eq!(
        l.started(&poison),
        3,
        "the poison pill must start exactly 3 times"
    );
    assert_eq!(l.ended(&poison), 0);
    assert_eq!(deaths.len(), 3, "exactly 3 worker deaths: {deaths:?}");
    for d in &deaths {
        assert_eq!(d.signal(), Some(6), "each death is the job's abort: {d:?}");
    }
    for j in &normal {
        assert_eq!(
            (l.started(j), l.ended(j)),
            (1, 1),
            "normal job {j} must run exactly once"
        );
    }

    let dead = redis.payloads(&redis.keys().dead()).await;
    assert_eq!(dead.len(), 1, "{dead:?}");
    let v = &dead[0];
    assert_eq!(v["jid"], poison.as_str());
    assert_eq!(v["class"], "LedgerJob");
    assert_eq!(v["dead_reason"], "interrupted", "{v}");
    assert_eq!(v["error_class"], "Interrupted", "{v}");
    assert_eq!(v["interrupted_count"], 3, "{v}");
    assert!(v["error_message"].as_str().is_some_and(|m| !m.is_empty()));
    assert!(v["failed_at"].is_f64(), "{v}");
    let queued = redis.llen(redis.keys().queue("ledger")).await;
    assert_eq!((queued, redis.zcard(redis.keys().retry()).await), (0, 0));
    let left = redis.inflight_keys().await;
    assert!(left.is_empty(), "{left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recovered_job_sees_its_attempt_and_that_it_was_interrupted() {
    let redis = Redis::start().await;
    let dir = ledger_dir("probe");
    let c = redis.client().await;

    let mut a = worker(&redis, &dir).start();
    let jid = ProbeJob {
        tag: "probe".into(),
        ms: 3000,
    }
    .perform_async(&c)
    .await
    .unwrap();
    // Started (ledger) and recorded itself (Redis, just after) before the kill.
    eventually!(
        Ledger::read(&dir).started(&jid) == 1 && redis.json_records().await.len() == 1,
        "the probe starts"
    );
    a.signal("KILL");
    let _ = a.wait_timeout(Duration::from_secs(5));
    let b = worker(&redis, &dir).start();
    eventually!(
        within Duration::from_secs(15),
        Ledger::read(&dir).ended(&jid) == 1,
        "the recovered probe ends"
    );
    let runs = redis.json_records().await;
    println!("poison: probe runs {runs:?}");
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_eq!(runs[0]["jid"], jid.as_str());
    assert_eq!(runs[0]["attempt"], 1);
    assert_eq!(runs[0]["interrupted_count"], 0);
    assert_eq!(runs[0]["was_interrupted"], false);
    assert_eq!(runs[0]["pid"], a.pid());
    assert_eq!(runs[1]["jid"], jid.as_str());
    assert_eq!(runs[1]["attempt"], 2);
    assert_eq!(runs[1]["interrupted_count"], 1);
    assert_eq!(runs[1]["was_interrupted"], true);
    assert_eq!(runs[1]["retry_count"], Value::Null);
    assert_eq!(runs[1]["pid"], b.pid());
}
