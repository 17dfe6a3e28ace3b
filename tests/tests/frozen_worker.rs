//! Leases with real worker processes (reliability.md §3 T3, T4): a worker frozen
//! with SIGSTOP past its lease loses its job to another worker, and when it
//! thaws its late ack is fenced (counted, removing nothing of the new owner's)
//! and it keeps working; a long job on a healthy worker whose heartbeat renews
//! the lease is never recovered.

use std::time::{Duration, Instant};

use fairjob::Job;
use fairjob_tests::jobs::LedgerJob;
use fairjob_tests::{Ledger, Redis, eventually, ledger_dir};

/// Jobs in the in-progress record of the worker process `pid`.
async fn inflight_len_of(redis: &Redis, pid: u32) -> usize {
    match redis.identity_of(pid).await {
        Some(id) => redis.hlen(redis.keys().inflight(&id)).await,
        None => 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_worker_loses_its_job_and_its_late_ack_is_fenced() {
    let redis = Redis::start().await;
    let keys = redis.keys();
    let dir = ledger_dir("frozen");
    let c = redis.client().await;
    let worker = redis.ledger_worker(&dir).concurrency(2);

    let mut a = worker.start();
    let jid = LedgerJob::sleeping(4000).perform_async(&c).await.unwrap();
    eventually!(
        Ledger::read(&dir).started(&jid) == 1,
        "worker A starts the job"
    );
    assert_eq!(Ledger::read(&dir).starts[&jid], vec![a.pid()]);
    let mut b = worker.start();

    a.signal("STOP");
    let frozen_at = Instant::now();
    // B recovers the job once A's lease (1.5 s) has expired and runs it.
    let starts = eventually!(
        within Duration::from_secs(4),
        let starts = Ledger::read(&dir).starts[&jid].clone(); starts.len() == 2,
        "the frozen worker's job is re-run within 4 s"
    );
    let rerun_after = frozen_at.elapsed();
    let remaining = Duration::from_secs(4).saturating_sub(frozen_at.elapsed());
    std::thread::sleep(remaining);
    a.signal("CONT");
    let thawed_at = Instant::now();
    let mut by = starts.clone();
    by.sort_unstable();
    let mut expected = vec![a.pid(), b.pid()];
    expected.sort_unstable();
    assert_eq!(by, expected, "one start on A, one on B");

    // A finishes its copy (its 4 s sleep is over) and acks: fenced.
    let ended_on = |pid: u32| {
        let l = Ledger::read(&dir);
        l.ends.get(&jid).is_some_and(|p| p.contains(&pid))
    };
    eventually!(
        within Duration::from_secs(5),
        ended_on(a.pid()),
        "the thawed worker finishes its copy"
    );
    let fenced = eventually!(
        within Duration::from_secs(5),
        let fenced = redis.stat("fenced").await; fenced >= 1,
        "the stale ack is fenced"
    );
    let b_still_running = !ended_on(b.pid());
    let b_inflight = inflight_len_of(&redis, b.pid()).await;
    println!(
        "frozen_worker: re-run by B {rerun_after:?} after SIGSTOP; fenced = {fenced} \
         {:?} after SIGCONT; B's in-progress record held {b_inflight} job(s) then",
        thawed_at.elapsed()
    );
    if b_still_running {
        assert_eq!(
            b_inflight, 1,
            "the stale ack removed the new owner's in-progress entry"
        );
    }

    // B's run is the owned one: it ends and acks; the job is done once.
    eventually!(ended_on(b.pid()), "B finishes the job");
    eventually!(
        within Duration::from_secs(5),
        let left = redis.inflight_keys().await; left.is_empty(),
        "in-progress records empty"
    );
    let retry = redis.zcard(keys.retry()).await;
    let dead = redis.zcard(keys.dead()).await;
    let queued = redis.llen(keys.queue("ledger")).await;
    assert_eq!((retry, dead, queued), (0, 0, 0));
    assert_eq!(Ledger::read(&dir).started(&jid), 2);

    // The thawed worker is alive and still works: with B gone, A runs new jobs.
    assert!(a.is_running(), "the thawed worker died");
    assert!(b.stop().is_some());
    let mut later = Vec::new();
    for _ in 0..5 {
        later.push(LedgerJob::sleeping(10).perform_async(&c).await.unwrap());
    }
    eventually!(
        {
            let l = Ledger::read(&dir);
            later
                .iter()
                .all(|j| l.ends.get(j).is_some_and(|p| p == &vec![a.pid()]))
        },
        "the thawed worker processes later jobs"
    );
    assert!(a.child.try_wait().unwrap().is_none(), "worker A exited");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_job_on_a_healthy_worker_is_never_recovered() {
    let redis = Redis::start().await;
    let dir = ledger_dir("long");
    let c = redis.client().await;
    let worker = redis.ledger_worker(&dir).concurrency(2);

    let a = worker.start();
    // 5 × the 1.5 s lease.
    let jid = LedgerJob::sleeping(7500).perform_async(&c).await.unwrap();
    eventually!(Ledger::read(&dir).started(&jid) == 1, "the job starts");
    // A second worker whose reaper runs every 300 ms all along.
    let b = worker.start();
    eventually!(
        within Duration::from_secs(15),
        Ledger::read(&dir).ended(&jid) == 1,
        "the long job ends"
    );
    let l = Ledger::read(&dir);
    assert_eq!(
        l.starts[&jid],
        vec![a.pid()],
        "the job started more than once"
    );
    assert_eq!(l.ends[&jid], vec![a.pid()]);
    eventually!(
        within Duration::from_secs(5),
        let left = redis.inflight_keys().await; left.is_empty(),
        "in-progress records empty"
    );
    assert_eq!(redis.stat("recovered").await, 0);
    assert_eq!(redis.stat("fenced").await, 0);
    assert!(a.is_running() && b.is_running());
}
