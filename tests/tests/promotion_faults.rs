//! Scheduled promotion under `kill -9` (reliability.md §3 T15): 10,000 jobs due
//! now in `schedule`, three worker processes that only promote (their queue list
//! does not include the jobs' queue) killed at random moments and restarted.
//! Every job must land in its queue exactly once, and the promoting record must
//! end empty. (A poller killed while holding claimed entries leaves them in the
//! promoting record until their 30 s promotion lease expires; another poller
//! then pushes them, so this test takes at least that long.)

use std::collections::HashMap;
use std::time::{Duration, Instant};

use fairjob::broker::Keys;
use fairjob::payload::{new_jid, now_f64};
use fairjob_tests::jobs::LedgerJob;
use fairjob_tests::{WorkerProcess, namespace, raw, redis, sidekiq_payload, wait_until};
use rand::Rng;
use redis::AsyncCommands;

const JOBS: usize = 10_000;
const ARGS: &[&str] = &[
    "-q",
    "elsewhere",
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
    "50ms",
    "-t",
    "1s",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promotion_survives_kill_9_without_loss_or_duplicates() {
    let server = redis();
    let url = server.url();
    let ns = namespace();
    let keys = Keys::new(Some(&ns));
    let mut r = raw(&url).await;

    let jids: Vec<String> = (0..JOBS).map(|_| new_jid()).collect();
    let due = now_f64() - 1.0;
    for chunk in jids.chunks(1000) {
        let mut cmd = redis::cmd("ZADD");
        cmd.arg(keys.schedule());
        for jid in chunk {
            let job = LedgerJob {
                ms: 0,
                abort: false,
            };
            cmd.arg(due).arg(sidekiq_payload(&job, jid, "ledger"));
        }
        let _: u64 = cmd.query_async(&mut r).await.unwrap();
    }
    let scheduled: u64 = r.zcard(keys.schedule()).await.unwrap();
    assert_eq!(scheduled, JOBS as u64);

    let started = Instant::now();
    let mut workers: Vec<WorkerProcess> = (0..3)
        .map(|_| WorkerProcess::start(&url, &ns, None, ARGS))
        .collect();
    // Kill -9 a random poller at random moments while promotion runs (the first
    // as soon as promotion has begun); restart it.
    let begun = wait_until(Duration::from_secs(20), || async {
        let mut r = raw(&url).await;
        r.zcard::<_, u64>(keys.schedule()).await.unwrap() < JOBS as u64
    })
    .await;
    assert!(begun, "promotion never began");
    let mut kills = 0;
    let mut kills_mid_promotion = 0;
    while kills < 12 && started.elapsed() < Duration::from_secs(60) {
        let (pause, victim) = {
            let mut rng = rand::rng();
            (
                rng.random_range(10..150),
                rng.random_range(0..workers.len()),
            )
        };
        if kills > 0 {
            tokio::time::sleep(Duration::from_millis(pause)).await;
        }
        let left: u64 = r.zcard(keys.schedule()).await.unwrap();
        if left == 0 && kills >= 3 {
            break;
        }
        workers[victim].signal("KILL");
        let _ = workers[victim].wait_timeout(Duration::from_secs(5));
        workers[victim] = WorkerProcess::start(&url, &ns, None, ARGS);
        kills += 1;
        if left > 0 {
            kills_mid_promotion += 1;
        }
    }
    let stranded_after_kills: u64 = r.zcard(keys.promoting(&keys.schedule())).await.unwrap();

    // Wait for everything to be promoted (claims of killed pollers come back
    // after the 30 s promotion lease).
    let deadline = Instant::now() + Duration::from_secs(75);
    loop {
        let left: u64 = r.zcard(keys.schedule()).await.unwrap();
        let claimed: u64 = r.zcard(keys.promoting(&keys.schedule())).await.unwrap();
        let queued: u64 = r.llen(keys.queue("ledger")).await.unwrap();
        if (left == 0 && claimed == 0 && queued >= JOBS as u64) || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let took = started.elapsed();

    let queued: Vec<String> = r.lrange(keys.queue("ledger"), 0, -1).await.unwrap();
    let mut counts: HashMap<String, usize> = HashMap::new();
    for entry in &queued {
        let v: serde_json::Value = serde_json::from_str(entry).unwrap();
        *counts
            .entry(v["jid"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    let missing: Vec<&String> = jids.iter().filter(|j| !counts.contains_key(*j)).collect();
    let doubled: Vec<(&String, &usize)> = counts.iter().filter(|(_, n)| **n > 1).collect();
    let schedule_left: u64 = r.zcard(keys.schedule()).await.unwrap();
    let promoting_left: u64 = r.zcard(keys.promoting(&keys.schedule())).await.unwrap();
    let dead: u64 = r.zcard(keys.dead()).await.unwrap();
    println!(
        "promotion_faults: {kills} kill -9 ({kills_mid_promotion} while entries were still \
         scheduled), {stranded_after_kills} claims stranded by killed pollers, all promoted after \
         {took:?}; {} queued, {} missing, {} doubled; schedule {schedule_left}, promoting \
         {promoting_left}, dead {dead}",
        queued.len(),
        missing.len(),
        doubled.len()
    );
    assert!(kills_mid_promotion >= 1, "no kill hit the promotion");
    assert!(
        missing.is_empty(),
        "{} jobs were never promoted: {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
    assert!(
        doubled.is_empty(),
        "{} jobs were promoted more than once: {:?}",
        doubled.len(),
        &doubled[..doubled.len().min(5)]
    );
    assert_eq!(queued.len(), JOBS);
    assert_eq!(schedule_left, 0);
    assert_eq!(promoting_left, 0, "the promoting record must end empty");
    assert_eq!(dead, 0);
    drop(workers);
}
