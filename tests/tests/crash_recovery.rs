//! Worker crash and recovery (reliability.md §3 T1), with real worker processes:
//! 1,000 LedgerJobs of 50–300 ms on 4 workers at concurrency 5; when about half
//! have ended, two workers get `kill -9` and two get TERM, and fresh workers are
//! started. Nothing may be lost, only jobs that were in flight on the killed
//! workers may run twice, TERM'd workers finish their jobs and exit 0, the
//! in-progress records end empty, and the killed jobs restart within
//! lease + reaper interval + 2 s.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use fairjob_tests::jobs::LedgerJob;
use fairjob_tests::{Ledger, Redis, WorkerProcess, eventually, ledger_dir};
use rand::Rng;

const LEASE: Duration = Duration::from_millis(1500);
const REAPER: Duration = Duration::from_millis(300);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_and_term_lose_nothing_and_rerun_only_jobs_in_flight() {
    let redis = Redis::start().await;
    let dir = ledger_dir("crash");
    let c = redis.client().await;
    let worker = redis.ledger_worker(&dir).flag("-t", "5s");

    let jobs: Vec<LedgerJob> = {
        let mut rng = rand::rng();
        (0..1000)
            .map(|_| LedgerJob::sleeping(rng.random_range(50..=300)))
            .collect()
    };
    let jids: Vec<String> = c
        .push_bulk(jobs)
        .await
        .unwrap()
        .into_iter()
        .map(|j| j.expect("no middleware stops these"))
        .collect();
    assert_eq!(jids.len(), 1000);

    let mut first: Vec<WorkerProcess> = (0..4).map(|_| worker.start()).collect();
    eventually!(
        within Duration::from_secs(90),
        let ended = Ledger::read(&dir).jobs_ended(); ended >= 500,
        "half the jobs end"
    );

    let killed_pids: Vec<u32> = first[..2].iter().map(WorkerProcess::pid).collect();
    let termed_pids: Vec<u32> = first[2..].iter().map(WorkerProcess::pid).collect();
    // Freeze the two victims first, so the snapshot of what they hold is exact,
    // then TERM the other two and kill -9 the frozen ones.
    for w in &first[..2] {
        w.signal("STOP");
    }
    std::thread::sleep(Duration::from_millis(50));
    let at_kill = Ledger::read(&dir);
    let ledger_in_flight = at_kill.in_flight_on(&killed_pids);
    let mut redis_in_flight = BTreeSet::new();
    for pid in &killed_pids {
        redis_in_flight.extend(redis.inflight_jids(*pid).await);
    }
    // Jobs the victims finished (ledger `end`) but had not acked yet.
    let finished_unacked: BTreeSet<String> = redis_in_flight
        .iter()
        .filter(|j| at_kill.ended(j) > 0)
        .cloned()
        .collect();
    let ended_at_kill = at_kill.jobs_ended();
    for w in &first[2..] {
        w.signal("TERM");
    }
    for w in &first[..2] {
        w.signal("KILL");
    }
    let killed_at = Instant::now();
    let fresh: Vec<WorkerProcess> = (0..3).map(|_| worker.start()).collect();

    // Watch the killed jobs restart elsewhere.
    let victims: BTreeSet<String> = ledger_in_flight.union(&redis_in_flight).cloned().collect();
    let restarted_elsewhere = |l: &Ledger, jid: &str| {
        l.starts
            .get(jid)
            .is_some_and(|pids| pids.iter().any(|p| !killed_pids.contains(p)))
    };
    let mut first_restart: Option<Duration> = None;
    let mut last_restart: Option<Duration> = None;
    let mut seen = BTreeSet::new();
    let watch_until = Instant::now() + Duration::from_secs(30);
    while seen.len() < ledger_in_flight.len() && Instant::now() < watch_until {
        let l = Ledger::read(&dir);
        for jid in &ledger_in_flight {
            if !seen.contains(jid) && restarted_elsewhere(&l, jid) {
                seen.insert(jid.clone());
                let t = killed_at.elapsed();
                first_restart.get_or_insert(t);
                last_restart = Some(t);
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }

    // TERM'd workers finish their short jobs and exit 0 well within -t.
    for (w, pid) in first[2..].iter_mut().zip(&termed_pids) {
        let status = w.wait_timeout(Duration::from_secs(10));
        assert!(
            status.is_some_and(|s| s.success()),
            "TERM'd worker {pid} did not exit 0 within 10 s: {status:?}"
        );
    }
    for w in &mut first[..2] {
        let _ = w.wait_timeout(Duration::from_secs(5));
    }

    // Nothing is lost.
    eventually!(
        within Duration::from_secs(60),
        let lost = Ledger::read(&dir).not_ended(&jids); lost.is_empty(),
        "every job ends"
    );
    let done = Ledger::read(&dir);
    let dup_starts = done.started_more_than_once();
    let dup_ends = done.ended_more_than_once();
    let unexpected_dups: BTreeSet<&String> = dup_starts
        .iter()
        .filter(|j| !ledger_in_flight.contains(*j) && !finished_unacked.contains(*j))
        .collect();
    let termed_dups: Vec<(u32, String)> = termed_pids
        .iter()
        .flat_map(|pid| {
            done.started_on(*pid)
                .into_iter()
                .filter(|j| done.started(j) > 1)
                .map(move |j| (*pid, j))
        })
        .collect();

    println!(
        "crash_recovery: {} ended when 2 workers were killed and 2 TERM'd; in flight on the killed \
         workers: {} by the ledger (started, not ended), {} in their in-progress records ({} of \
         them finished but not acked); none lost; jobs started more than once {} ; jobs ended more \
         than once {}; first killed job restarted {:?} after kill -9, last {:?} ({} of {} seen)",
        ended_at_kill,
        ledger_in_flight.len(),
        redis_in_flight.len(),
        finished_unacked.len(),
        dup_starts.len(),
        dup_ends.len(),
        first_restart,
        last_restart,
        seen.len(),
        ledger_in_flight.len(),
    );

    assert!(
        ledger_in_flight.is_subset(&redis_in_flight),
        "jobs running on the killed workers were not in their in-progress records: {:?}",
        ledger_in_flight
            .difference(&redis_in_flight)
            .collect::<Vec<_>>()
    );
    assert!(
        unexpected_dups.is_empty(),
        "jobs that were not in flight on the killed workers ran twice: {unexpected_dups:?}"
    );
    assert!(
        dup_starts.len() <= ledger_in_flight.len() + finished_unacked.len(),
        "{} jobs started more than once, but only {} + {} were in flight on the killed workers",
        dup_starts.len(),
        ledger_in_flight.len(),
        finished_unacked.len()
    );
    assert!(
        termed_dups.is_empty(),
        "jobs of TERM'd workers ran twice: {termed_dups:?}"
    );
    // Every job in flight on the killed workers restarted, each within the bound.
    let bound = LEASE + REAPER + Duration::from_secs(2);
    assert_eq!(
        seen.len(),
        ledger_in_flight.len(),
        "not every killed job restarted: {:?}",
        ledger_in_flight.difference(&seen).collect::<Vec<_>>()
    );
    if let Some(last) = last_restart {
        assert!(
            last <= bound,
            "killed jobs restarted {last:?} after kill -9, above lease + reaper + 2 s = {bound:?}"
        );
    }
    // Victims are never run twice more: at most one extra start each.
    for j in &victims {
        assert!(
            done.started(j) <= 2,
            "{j} started {} times",
            done.started(j)
        );
    }

    // The in-progress records of every worker, dead or alive, end empty.
    eventually!(
        let left = redis.inflight_keys().await; left.is_empty(),
        "the in-progress records empty"
    );
    assert_eq!(redis.llen(redis.keys().queue("ledger")).await, 0);
    drop(fresh);
}
