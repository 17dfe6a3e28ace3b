//! Leases with real worker processes (reliability.md §3 T3, T4): a worker frozen
//! with SIGSTOP past its lease loses its job to another worker, and when it
//! thaws its late ack is fenced (counted, removing nothing of the new owner's)
//! and it keeps working; a long job on a healthy worker whose heartbeat renews
//! the lease is never recovered.

use std::time::{Duration, Instant};

use fairjob::Job;
use fairjob::broker::Keys;
use fairjob_tests::jobs::LedgerJob;
use fairjob_tests::{
    Ledger, WorkerProcess, client, ledger_dir, namespace, process_alive, raw, redis, wait_for,
};
use redis::AsyncCommands;

const ARGS: &[&str] = &[
    "-q",
    "ledger",
    "-c",
    "2",
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
    "-t",
    "3s",
];

async fn counter(url: &str, key: &str) -> u64 {
    let mut r = raw(url).await;
    r.get::<_, Option<u64>>(key).await.unwrap().unwrap_or(0)
}

/// The in-progress record key of the worker process `pid`, if it has one.
async fn inflight_len_of(url: &str, keys: &Keys, pid: u32) -> u64 {
    let mut r = raw(url).await;
    let ids: Vec<String> = r.hkeys(keys.workers()).await.unwrap();
    let needle = format!(":{pid}:");
    let mut n = 0;
    for id in ids.iter().filter(|id| id.contains(&needle)) {
        n += r.hlen::<_, u64>(keys.inflight(id)).await.unwrap();
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_worker_loses_its_job_and_its_late_ack_is_fenced() {
    let server = redis();
    let url = server.url();
    let ns = namespace();
    let keys = Keys::new(Some(&ns));
    let dir = ledger_dir("frozen");
    let c = client(&url, &ns).await;

    let mut a = WorkerProcess::start(&url, &ns, Some(&*dir), ARGS);
    let jid = LedgerJob {
        ms: 4000,
        abort: false,
    }
    .perform_async(&c)
    .await
    .unwrap();
    assert!(
        wait_for(Duration::from_secs(10), || Ledger::read(&dir).started(&jid)
            == 1),
        "worker A did not start the job"
    );
    assert_eq!(Ledger::read(&dir).starts[&jid], vec![a.pid()]);
    let mut b = WorkerProcess::start(&url, &ns, Some(&*dir), ARGS);

    a.signal("STOP");
    let frozen_at = Instant::now();
    // B recovers the job once A's lease (1.5 s) has expired and runs it.
    let rerun = wait_for(Duration::from_secs(4), || {
        Ledger::read(&dir).started(&jid) == 2
    });
    let rerun_after = frozen_at.elapsed();
    let starts = Ledger::read(&dir).starts[&jid].clone();
    let remaining = Duration::from_secs(4).saturating_sub(frozen_at.elapsed());
    std::thread::sleep(remaining);
    a.signal("CONT");
    let thawed_at = Instant::now();
    assert!(
        rerun,
        "the frozen worker's job was not re-run within 4 s: starts {starts:?}"
    );
    let mut by = starts.clone();
    by.sort_unstable();
    let mut expected = vec![a.pid(), b.pid()];
    expected.sort_unstable();
    assert_eq!(by, expected, "one start on A, one on B");

    // A finishes its copy (its 4 s sleep is over) and acks: fenced.
    let fenced_key = keys.stat("fenced");
    assert!(
        wait_for(Duration::from_secs(5), || {
            let l = Ledger::read(&dir);
            l.ends.get(&jid).is_some_and(|p| p.contains(&a.pid()))
        }),
        "the thawed worker did not finish its copy"
    );
    let mut fenced = 0;
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        fenced = counter(&url, &fenced_key).await;
        if fenced >= 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let b_still_running = Ledger::read(&dir)
        .ends
        .get(&jid)
        .is_none_or(|p| !p.contains(&b.pid()));
    let b_inflight = inflight_len_of(&url, &keys, b.pid()).await;
    println!(
        "frozen_worker: re-run by B {rerun_after:?} after SIGSTOP; fenced = {fenced} \
         {:?} after SIGCONT; B's in-progress record held {b_inflight} job(s) then",
        thawed_at.elapsed()
    );
    assert!(
        fenced >= 1,
        "the stale ack was not fenced: fenced = {fenced}"
    );
    if b_still_running {
        assert_eq!(
            b_inflight, 1,
            "the stale ack removed the new owner's in-progress entry"
        );
    }

    // B's run is the owned one: it ends and acks; the job is done once.
    assert!(
        wait_for(Duration::from_secs(10), || {
            let l = Ledger::read(&dir);
            l.ends.get(&jid).is_some_and(|p| p.contains(&b.pid()))
        }),
        "B did not finish the job"
    );
    let mut r = raw(&url).await;
    assert!(
        wait_for(Duration::from_secs(5), || inflight_empty(&url, &keys)),
        "in-progress records not empty"
    );
    let retry: u64 = r.zcard(keys.retry()).await.unwrap();
    let dead: u64 = r.zcard(keys.dead()).await.unwrap();
    let queued: u64 = r.llen(keys.queue("ledger")).await.unwrap();
    assert_eq!((retry, dead, queued), (0, 0, 0));
    assert_eq!(Ledger::read(&dir).started(&jid), 2);

    // The thawed worker is alive and still works: with B gone, A runs new jobs.
    assert!(process_alive(a.pid()), "the thawed worker died");
    b.signal("TERM");
    assert!(b.wait_timeout(Duration::from_secs(10)).is_some());
    let mut later = Vec::new();
    for _ in 0..5 {
        later.push(
            LedgerJob {
                ms: 10,
                abort: false,
            }
            .perform_async(&c)
            .await
            .unwrap(),
        );
    }
    assert!(
        wait_for(Duration::from_secs(10), || {
            let l = Ledger::read(&dir);
            later
                .iter()
                .all(|j| l.ends.get(j).is_some_and(|p| p == &vec![a.pid()]))
        }),
        "the thawed worker did not process later jobs"
    );
    assert!(a.child.try_wait().unwrap().is_none(), "worker A exited");
}

fn inflight_empty(url: &str, keys: &Keys) -> bool {
    let url = url.to_owned();
    let pattern = format!("{}fairjob:inflight:*", keys.prefix());
    std::thread::spawn(move || {
        let client = redis::Client::open(url).unwrap();
        let mut con = client.get_connection().unwrap();
        let found: Vec<String> = redis::cmd("KEYS").arg(pattern).query(&mut con).unwrap();
        found.is_empty()
    })
    .join()
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_job_on_a_healthy_worker_is_never_recovered() {
    let server = redis();
    let url = server.url();
    let ns = namespace();
    let keys = Keys::new(Some(&ns));
    let dir = ledger_dir("long");
    let c = client(&url, &ns).await;

    let a = WorkerProcess::start(&url, &ns, Some(&*dir), ARGS);
    // 5 × the 1.5 s lease.
    let jid = LedgerJob {
        ms: 7500,
        abort: false,
    }
    .perform_async(&c)
    .await
    .unwrap();
    assert!(
        wait_for(Duration::from_secs(10), || Ledger::read(&dir).started(&jid)
            == 1),
        "the job did not start"
    );
    // A second worker whose reaper runs every 300 ms all along.
    let b = WorkerProcess::start(&url, &ns, Some(&*dir), ARGS);
    assert!(
        wait_for(Duration::from_secs(15), || Ledger::read(&dir).ended(&jid)
            == 1),
        "the long job did not end"
    );
    let l = Ledger::read(&dir);
    assert_eq!(
        l.starts[&jid],
        vec![a.pid()],
        "the job started more than once"
    );
    assert_eq!(l.ends[&jid], vec![a.pid()]);
    assert!(wait_for(Duration::from_secs(5), || inflight_empty(
        &url, &keys
    )));
    assert_eq!(counter(&url, &keys.stat("recovered")).await, 0);
    assert_eq!(counter(&url, &keys.stat("fenced")).await, 0);
    assert!(process_alive(a.pid()) && process_alive(b.pid()));
}
