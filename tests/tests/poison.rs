//! Poison pills and interruption counting (reliability.md §3 T5, T21): a job that
//! aborts its worker process runs exactly `max_interruptions` (3) times, then
//! lies in `dead` with `dead_reason: "interrupted"`, while the jobs around it
//! all complete; a job recovered from a killed worker sees its attempt number
//! and that it was interrupted.

use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use fairjob::Job;
use fairjob::broker::Keys;
use fairjob_tests::jobs::{LedgerJob, ProbeJob};
use fairjob_tests::{Ledger, WorkerProcess, client, ledger_dir, namespace, raw, redis, wait_for};
use redis::AsyncCommands;
use serde_json::Value;

const ARGS: &[&str] = &[
    "-q",
    "ledger",
    "-c",
    "1",
    "--lease",
    "1500ms",
    "--heartbeat",
    "300ms",
    "--reaper-interval",
    "300ms",
    "--poll-interval",
    "100ms",
    "--scheduled-poll-interval",
    "100ms",
    "--max-interruptions",
    "3",
    "-t",
    "3s",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_pill_runs_three_times_then_is_dead_and_the_rest_completes() {
    let server = redis();
    let url = server.url();
    let ns = namespace();
    let keys = Keys::new(Some(&ns));
    let dir = ledger_dir("poison");
    let c = client(&url, &ns).await;

    let mut normal = Vec::new();
    let mut poison = String::new();
    for i in 0..51 {
        let abort = i == 10;
        let jid = LedgerJob { ms: 20, abort }.perform_async(&c).await.unwrap();
        if abort {
            poison = jid;
        } else {
            normal.push(jid);
        }
    }

    let mut r = raw(&url).await;
    let mut deaths = Vec::new();
    let started = Instant::now();
    let mut finished = false;
    // A supervisor: restart the worker each time it dies (bounded).
    for _ in 0..10 {
        let mut w = WorkerProcess::start(&url, &ns, Some(&*dir), ARGS);
        loop {
            if let Ok(Some(status)) = w.child.try_wait() {
                deaths.push(status);
                break;
            }
            let l = Ledger::read(&dir);
            let dead: u64 = r.zcard(keys.dead()).await.unwrap();
            if dead >= 1 && normal.iter().all(|j| l.ended(j) == 1) {
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
            w.signal("TERM");
            let status = w.wait_timeout(Duration::from_secs(10));
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

    let dead: Vec<String> = r.zrange(keys.dead(), 0, -1).await.unwrap();
    assert_eq!(dead.len(), 1, "{dead:?}");
    let v: Value = serde_json::from_str(&dead[0]).unwrap();
    assert_eq!(v["jid"], poison.as_str());
    assert_eq!(v["class"], "LedgerJob");
    assert_eq!(v["dead_reason"], "interrupted", "{v}");
    assert_eq!(v["error_class"], "Interrupted", "{v}");
    assert_eq!(v["interrupted_count"], 3, "{v}");
    assert!(v["error_message"].as_str().is_some_and(|m| !m.is_empty()));
    assert!(v["failed_at"].is_f64(), "{v}");
    let queued: u64 = r.llen(keys.queue("ledger")).await.unwrap();
    let retry: u64 = r.zcard(keys.retry()).await.unwrap();
    assert_eq!((queued, retry), (0, 0));
    let left: Vec<String> = r.keys(format!("{ns}:fairjob:inflight:*")).await.unwrap();
    assert!(left.is_empty(), "{left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recovered_job_sees_its_attempt_and_that_it_was_interrupted() {
    let server = redis();
    let url = server.url();
    let ns = namespace();
    let dir = ledger_dir("probe");
    let c = client(&url, &ns).await;
    let record = format!("{ns}:record");
    let mut r = raw(&url).await;

    let mut a = WorkerProcess::start(&url, &ns, Some(&*dir), ARGS);
    let jid = ProbeJob {
        tag: "probe".into(),
        ms: 3000,
    }
    .perform_async(&c)
    .await
    .unwrap();
    assert!(
        wait_for(Duration::from_secs(10), || Ledger::read(&dir).started(&jid)
            == 1),
        "the probe did not start"
    );
    a.signal("KILL");
    let _ = a.wait_timeout(Duration::from_secs(5));
    let b = WorkerProcess::start(&url, &ns, Some(&*dir), ARGS);
    assert!(
        wait_for(Duration::from_secs(15), || Ledger::read(&dir).ended(&jid)
            == 1),
        "the recovered probe did not end"
    );
    let runs: Vec<String> = r.lrange(&record, 0, -1).await.unwrap();
    let runs: Vec<Value> = runs
        .iter()
        .map(|s| serde_json::from_str(s).unwrap())
        .collect();
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
