//! Iterable jobs (`#[iterable]`, `Iterate`): the testing fake runs them, and
//! with real worker processes they resume after a yield (slice), after
//! SIGTERM (every one checkpoints and is requeued, then resumes), after
//! `kill -9` (from the last checkpoint), after SIGSTOP past the lease (the
//! stale run's checkpoint is refused and it abandons the run), and a cancel
//! stops one. The
//! `StepLedgerJob` writes `step <jid>:<n>:<run> <pid>` per step to the ledger.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use fairjob::Job;
use fairjob::testing::Fake;
use fairjob_tests::jobs::{
    FLAKY_STEPS, FlakyStepJob, RESUMED_ITEMS, ResumingJob, ShardStepJob, StepLedgerJob,
};
use fairjob_tests::{Redis, TestWorker, WorkerProcess, eventually, ledger_dir};

/// Per jid, the steps in ledger order as `(step, run)`.
fn steps(dir: &std::path::Path) -> BTreeMap<String, Vec<(u64, String)>> {
    let mut out: BTreeMap<String, Vec<(u64, String)>> = BTreeMap::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let text = std::fs::read_to_string(e.path()).unwrap_or_default();
        for line in text.lines() {
            let mut parts = line.split(' ');
            if parts.next() != Some("step") {
                continue;
            }
            let (Some(id), Some(pid)) = (parts.next(), parts.next()) else {
                continue;
            };
            let mut id = id.split(':');
            let (Some(jid), Some(n), Some(seq)) = (id.next(), id.next(), id.next()) else {
                continue;
            };
            // A token's sequence number is unique within one process only.
            out.entry(jid.to_owned())
                .or_default()
                .push((n.parse().unwrap(), format!("{pid}/{seq}")));
        }
    }
    out
}

fn step_count(dir: &std::path::Path, jid: &str) -> usize {
    steps(dir).get(jid).map_or(0, Vec::len)
}

/// Each of `0..n` exactly once, each run's steps consecutive (ledger files
/// are per process, so the order across processes is not kept).
fn exactly_once_in_order(seen: &[(u64, String)], n: u64) {
    let mut got: Vec<u64> = seen.iter().map(|(s, _)| *s).collect();
    got.sort_unstable();
    assert_eq!(got, (0..n).collect::<Vec<_>>(), "each step once");
    consecutive_per_run(seen);
}

/// Within each run, the steps follow each other.
fn consecutive_per_run(seen: &[(u64, String)]) {
    let mut last: BTreeMap<&str, u64> = BTreeMap::new();
    for (n, run) in seen {
        if let Some(prev) = last.insert(run, *n) {
            assert_eq!(*n, prev + 1, "run {run}: step {n} after {prev}");
        }
    }
}

#[tokio::test]
async fn the_fake_runs_steps_resumes_after_a_forced_yield_and_cancels() {
    let fake = Fake::new();
    let client = fake.client();
    let jid = StepLedgerJob { steps: 5, ms: 0 }
        .perform_async(&client)
        .await
        .unwrap();
    fake.force_yield(1);
    fake.perform_one::<StepLedgerJob>().await.unwrap();
    assert_eq!(fake.yields(), 1, "the forced yield");
    assert_eq!(fake.cursor::<u64>(&jid), Some(0), "saved after step 0");
    assert_eq!(
        fake.enqueued::<StepLedgerJob>().len(),
        1,
        "back in its queue"
    );
    assert_eq!(fake.drain().await.unwrap(), 1);
    assert_eq!(fake.cursor::<u64>(&jid), None, "removed on completion");
    assert!(fake.failures().is_empty());

    let jid = StepLedgerJob { steps: 5, ms: 0 }
        .perform_async(&client)
        .await
        .unwrap();
    assert!(fake.cancel(&jid));
    assert_eq!(fake.drain().await.unwrap(), 1, "a cancelled job ends");
    assert!(fake.failures().is_empty());

    // The client's own `cancel` reaches the fake's store through the broker.
    let jid = StepLedgerJob { steps: 5, ms: 0 }
        .perform_async(&client)
        .await
        .unwrap();
    assert!(client.cancel(&jid).await.unwrap(), "newly cancelled");
    assert!(!client.cancel(&jid).await.unwrap(), "already cancelled");
    assert_eq!(fake.drain().await.unwrap(), 1, "a cancelled job ends");
    assert_eq!(fake.cursor::<u64>(&jid), None, "it ran no step");
    assert!(fake.failures().is_empty());
}

#[tokio::test]
async fn a_failing_step_is_retried_from_the_last_cursor() {
    let fake = Fake::new();
    let jid = FlakyStepJob {
        steps: 5,
        fail_at: 3,
    }
    .perform_async(&fake.client())
    .await
    .unwrap();
    assert!(fake.drain().await.is_err(), "step 3 failed");
    assert_eq!(fake.failures().len(), 1);
    assert_eq!(
        fake.cursor::<u64>(&jid),
        Some(2),
        "saved before the failing step"
    );
    fake.advance(Duration::from_secs(120));
    fake.drain().await.unwrap();
    assert_eq!(
        *FLAKY_STEPS.lock().unwrap(),
        vec![0, 1, 2, 3, 4],
        "resumed at step 3"
    );
}

#[tokio::test]
async fn a_plain_job_checkpoints_yields_and_resumes_in_the_fake() {
    let fake = Fake::new();
    let jid = ResumingJob { items: 4 }
        .perform_async(&fake.client())
        .await
        .unwrap();
    fake.force_yield(1);
    fake.perform_one::<ResumingJob>().await.unwrap();
    assert_eq!(fake.yields(), 1);
    assert_eq!(fake.cursor::<u64>(&jid), Some(1), "saved its place");
    assert_eq!(RESUMED_ITEMS.load(std::sync::atomic::Ordering::SeqCst), 1);
    fake.drain().await.unwrap();
    assert_eq!(
        RESUMED_ITEMS.load(std::sync::atomic::Ordering::SeqCst),
        4,
        "resumed at item 1, each item once"
    );
    assert!(fake.failures().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steps_run_in_order_and_resume_after_a_slice() {
    let redis = Redis::start().await;
    let dir = ledger_dir("iter-slice");
    let c = redis.client().await;
    // 30 steps of 80 ms: 2.4 s, more than the 1 s slice.
    let jid = StepLedgerJob { steps: 30, ms: 80 }
        .perform_async(&c)
        .await
        .unwrap();
    let mut w = redis.ledger_worker(&dir).concurrency(2).start();
    eventually!(
        within Duration::from_secs(30),
        let n = step_count(&dir, &jid); n >= 30,
        "all 30 steps ran"
    );
    let seen = steps(&dir).remove(&jid).unwrap();
    exactly_once_in_order(&seen, 30);
    let runs: BTreeSet<&String> = seen.iter().map(|(_, r)| r).collect();
    assert!(
        runs.len() >= 2,
        "the job yielded at its slice: runs {runs:?}"
    );
    eventually!(
        let left = redis.query::<bool>(redis::cmd("EXISTS").arg(redis.keys().iteration(&jid))).await;
        !left,
        "it-{{jid}} removed on completion"
    );
    assert!(w.stop().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_sharded_queue_a_yield_goes_back_to_the_tenants_shard_and_resumes() {
    let redis = Redis::start().await;
    let dir = ledger_dir("iter-shard");
    let c = redis.client().await;
    // 20 steps of 60 ms: 1.2 s, more than the 500 ms slice.
    let jid = ShardStepJob {
        tenant: "acme".into(),
        steps: 20,
        ms: 60,
    }
    .perform_async(&c)
    .await
    .unwrap();
    let mut w = redis
        .worker_process()
        .queues(["iter_shard"])
        .ledger(&dir)
        .start();
    eventually!(
        within Duration::from_secs(30),
        let n = step_count(&dir, &jid); n >= 20,
        "all 20 steps ran"
    );
    let seen = steps(&dir).remove(&jid).unwrap();
    exactly_once_in_order(&seen, 20);
    let runs: BTreeSet<&String> = seen.iter().map(|(_, r)| r).collect();
    assert!(
        runs.len() >= 2,
        "the job yielded at its slice: runs {runs:?}"
    );
    assert!(w.stop().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_checkpoints_and_requeues_every_iterable_job_then_they_resume() {
    let redis = Redis::start().await;
    let dir = ledger_dir("iter-term");
    let c = redis.client().await;
    let mut jids = Vec::new();
    for _ in 0..3 {
        // 100 steps of 50 ms: 5 s each, with a slice of 1 s.
        let jid = StepLedgerJob { steps: 100, ms: 50 }
            .perform_async(&c)
            .await
            .unwrap();
        jids.push(jid);
    }
    let mut w = redis
        .ledger_worker(&dir)
        .concurrency(3)
        .flag("-t", "5s")
        .start();
    eventually!(
        let n = jids.iter().filter(|j| step_count(&dir, j) > 2).count(); n == 3,
        "all three started"
    );
    w.signal("TERM");
    let status = w
        .wait_timeout(Duration::from_secs(5))
        .expect("exits within the shutdown timeout");
    assert!(status.success(), "{status:?}");
    let queued: usize = redis
        .query(redis::cmd("LLEN").arg(redis.keys().queue("ledger")))
        .await;
    assert_eq!(queued, 3, "every iterable job is back in its queue");
    for jid in &jids {
        let cursor: Option<String> = redis
            .query(redis::cmd("HGET").arg(redis.keys().iteration(jid)).arg("c"))
            .await;
        assert!(cursor.is_some(), "{jid} checkpointed");
        // Seen: explain shows the cursor, steps done, last checkpoint, yields.
        let e = c
            .inspector()
            .explain(jid, None, None, None, &[])
            .await
            .unwrap();
        let it = e.iteration.expect("an iterable job's progress");
        assert_eq!(it.cursor, cursor);
        assert!(
            it.steps > 0 && it.yields == 1 && it.executions == 1,
            "{it:?}"
        );
        assert!(it.last_checkpoint.is_some());
    }
    let mut w = redis.ledger_worker(&dir).concurrency(3).start();
    eventually!(
        within Duration::from_secs(40),
        let n = jids.iter().filter(|j| step_count(&dir, j) >= 100).count(); n == 3,
        "all three finished"
    );
    let all = steps(&dir);
    for jid in &jids {
        exactly_once_in_order(&all[jid], 100);
    }
    assert!(w.stop().is_some());
}

/// A job of 80 steps of 40 ms (a checkpoint every 200 ms, about 5 steps) on
/// a worker with a 1.5 s lease, ten steps in: its jid, the worker's settings
/// (to start another) and the worker running it.
async fn ten_steps_in(redis: &Redis, dir: &std::path::Path) -> (String, TestWorker, WorkerProcess) {
    let c = redis.client().await;
    let jid = StepLedgerJob { steps: 80, ms: 40 }
        .perform_async(&c)
        .await
        .unwrap();
    let worker = redis
        .ledger_worker(dir)
        .flag("--lease", "1500ms")
        .flag("--reaper-interval", "300ms");
    let first = worker.start();
    eventually!(let n = step_count(dir, &jid); n >= 10, "ten steps ran");
    (jid, worker, first)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_resumes_from_the_last_checkpoint() {
    let redis = Redis::start().await;
    let dir = ledger_dir("iter-kill");
    let (jid, worker, mut first) = ten_steps_in(&redis, &dir).await;
    first.signal("KILL");
    first.wait_timeout(Duration::from_secs(5));
    let before = step_count(&dir, &jid);
    let mut second = worker.start();
    eventually!(
        within Duration::from_secs(40),
        let done = {
            let s = steps(&dir);
            let mut got: BTreeSet<u64> = BTreeSet::new();
            got.extend(s.get(&jid).into_iter().flatten().map(|(n, _)| *n));
            got.len()
        };
        done == 80,
        "every step ran"
    );
    let seen = steps(&dir).remove(&jid).unwrap();
    consecutive_per_run(&seen);
    // The killed run (the one that ran step 0) ran 0..before; the resumed
    // run starts after its last checkpoint (at most one checkpoint's worth
    // repeated, plus the step in flight) and runs the rest once.
    let killed_run = seen.iter().find(|(n, _)| *n == 0).unwrap().1.clone();
    let killed: Vec<u64> = seen
        .iter()
        .filter(|(_, r)| *r == killed_run)
        .map(|(n, _)| *n)
        .collect();
    assert_eq!(killed, (0..before as u64).collect::<Vec<_>>());
    let mut resumed: Vec<u64> = seen
        .iter()
        .filter(|(_, r)| *r != killed_run)
        .map(|(n, _)| *n)
        .collect();
    resumed.sort_unstable();
    let restart = resumed[0];
    assert!(restart > 0, "resumed from a checkpoint, not from the start");
    assert!(
        before as u64 - restart <= 8,
        "repeated at most about one checkpoint of steps: killed after step {}, resumed at {restart}",
        before - 1
    );
    assert_eq!(
        resumed,
        (restart..80).collect::<Vec<_>>(),
        "the rest once each"
    );
    assert!(second.stop().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_workers_stale_checkpoint_is_refused_and_its_run_abandoned() {
    let redis = Redis::start().await;
    let dir = ledger_dir("iter-stop");
    let (jid, worker, mut first) = ten_steps_in(&redis, &dir).await;
    // Frozen past its lease while it runs the job.
    first.signal("STOP");
    let frozen_pid = format!("{}/", first.pid());
    let frozen_steps = step_count(&dir, &jid);
    let mut second = worker.start();
    eventually!(
        within Duration::from_secs(20),
        let resumed = steps(&dir)
            .get(&jid)
            .map_or(0, |s| s.iter().filter(|(_, r)| !r.starts_with(&frozen_pid)).count());
        resumed >= 10,
        "recovered past the lease and resumed by the second worker"
    );
    // Woken: its next checkpoint is refused (the second run holds the fence)
    // and it abandons the run without requeueing or finishing the job.
    first.signal("CONT");
    eventually!(
        within Duration::from_secs(40),
        let done = {
            let got: BTreeSet<u64> = steps(&dir)
                .get(&jid)
                .into_iter()
                .flatten()
                .map(|(n, _)| *n)
                .collect();
            got.len()
        };
        done == 80,
        "every step ran"
    );
    eventually!(
        within Duration::from_secs(10),
        let left = redis.query::<bool>(redis::cmd("EXISTS").arg(redis.keys().iteration(&jid))).await;
        !left,
        "the job completed once: its iteration state is removed"
    );
    // Nothing runs after that: no third run, no requeued copy.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let seen = steps(&dir).remove(&jid).unwrap();
    consecutive_per_run(&seen);
    // The frozen run is the one that ran step 0. Every later run (on either
    // worker: once woken, the first takes jobs again, and the job's 1 s
    // slice sends it back to the queue now and then) resumes where the last
    // left off: together they run each remaining step once.
    let frozen_run = seen.iter().find(|(n, _)| *n == 0).unwrap().1.clone();
    assert!(frozen_run.starts_with(&frozen_pid), "{frozen_run}");
    let stale = seen
        .iter()
        .filter(|(_, r)| *r == frozen_run)
        .count()
        .saturating_sub(frozen_steps);
    let mut later: Vec<u64> = seen
        .iter()
        .filter(|(_, r)| *r != frozen_run)
        .map(|(n, _)| *n)
        .collect();
    later.sort_unstable();
    let restart = later[0];
    assert_eq!(
        later,
        (restart..80).collect::<Vec<_>>(),
        "the resumed runs run each remaining step once"
    );
    println!(
        "iterable: frozen worker ran {stale} steps after SIGCONT before its checkpoint was refused"
    );
    assert!(
        stale <= 7,
        "the stale run stops at its next checkpoint (200 ms, ~5 steps): it ran {stale} more"
    );
    let queued: usize = redis
        .query(redis::cmd("LLEN").arg(redis.keys().queue("ledger")))
        .await;
    assert_eq!(queued, 0, "the abandoned run did not requeue the job");
    assert_eq!(redis.zcard(redis.key("retry")).await, 0, "no retry spent");
    assert!(second.stop().is_some());
    assert!(first.stop().is_some(), "the frozen worker goes on running");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_an_iterable_job_at_its_next_checkpoint() {
    let redis = Redis::start().await;
    let dir = ledger_dir("iter-cancel");
    let c = redis.client().await;
    let jid = StepLedgerJob {
        steps: 1000,
        ms: 20,
    }
    .perform_async(&c)
    .await
    .unwrap();
    let mut w = redis.ledger_worker(&dir).start();
    eventually!(let n = step_count(&dir, &jid); n >= 5, "it runs");
    assert!(c.cancel(&jid).await.unwrap());
    eventually!(
        let stopped = {
            let a = step_count(&dir, &jid);
            tokio::time::sleep(Duration::from_millis(600)).await;
            let queued: usize = redis.query(redis::cmd("LLEN").arg(redis.keys().queue("ledger"))).await;
            queued == 0 && step_count(&dir, &jid) == a
        };
        stopped,
        "it stopped and was not requeued"
    );
    assert!(step_count(&dir, &jid) < 1000);
    assert!(w.stop().is_some());
}
