//! Scheduled promotion under `kill -9` (reliability.md §3 T15): 10,000 jobs due
//! now in `schedule`, three worker processes that only promote (their queue list
//! does not include the jobs' queue) killed at random moments and restarted.
//! Every job must land in its queue exactly once, and the promoting record must
//! end empty. (A poller killed while holding claimed entries leaves them in the
//! promoting record until their 30 s promotion lease expires; another poller
//! then pushes them, so this test takes at least that long.)

use std::collections::HashMap;
use std::time::{Duration, Instant};

use fairjob::payload::{new_jid, now_f64};
use fairjob_tests::jobs::LedgerJob;
use fairjob_tests::{Redis, WorkerProcess, eventually, sidekiq_payload};
use rand::Rng;

const JOBS: usize = 10_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promotion_survives_kill_9_without_loss_or_duplicates() {
    let redis = Redis::start().await;
    let keys = redis.keys();
    // Pollers only: their queue list does not include the jobs' queue.
    let poller = redis
        .worker_process()
        .queues(["elsewhere"])
        .concurrency(2)
        .flag("--scheduled-poll-interval", "50ms")
        .flag("-t", "1s");

    let jids: Vec<String> = (0..JOBS).map(|_| new_jid()).collect();
    let due = now_f64() - 1.0;
    for chunk in jids.chunks(1000) {
        let mut cmd = redis::cmd("ZADD");
        cmd.arg(keys.schedule());
        for jid in chunk {
            cmd.arg(due)
                .arg(sidekiq_payload(&LedgerJob::sleeping(0), jid, "ledger"));
        }
        let _: u64 = redis.query(&cmd).await;
    }
    assert_eq!(redis.zcard(keys.schedule()).await, JOBS);

    let started = Instant::now();
    let mut workers: Vec<WorkerProcess> = (0..3).map(|_| poller.start()).collect();
    // Kill -9 a random poller at random moments while promotion runs (the first
    // as soon as promotion has begun); restart it.
    eventually!(
        within Duration::from_secs(20),
        let scheduled = redis.zcard(keys.schedule()).await; scheduled < JOBS,
        "promotion begins"
    );
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
        let left = redis.zcard(keys.schedule()).await;
        if left == 0 && kills >= 3 {
            break;
        }
        workers[victim].signal("KILL");
        let _ = workers[victim].wait_timeout(Duration::from_secs(5));
        workers[victim] = poller.start();
        kills += 1;
        if left > 0 {
            kills_mid_promotion += 1;
        }
    }
    let promoting = keys.promoting(&keys.schedule());
    let stranded_after_kills = redis.zcard(&promoting).await;

    // Wait for everything to be promoted (claims of killed pollers come back
    // after the 30 s promotion lease).
    eventually!(
        within Duration::from_secs(75),
        let left_claimed_queued = (
            redis.zcard(keys.schedule()).await,
            redis.zcard(&promoting).await,
            redis.llen(keys.queue("ledger")).await,
        );
        matches!(left_claimed_queued, (0, 0, queued) if queued >= JOBS),
        "every scheduled job is promoted"
    );
    let took = started.elapsed();

    let queued = redis.payloads(&keys.queue("ledger")).await;
    let mut counts: HashMap<String, usize> = HashMap::new();
    for v in &queued {
        *counts
            .entry(v["jid"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    let missing: Vec<&String> = jids.iter().filter(|j| !counts.contains_key(*j)).collect();
    let doubled: Vec<(&String, &usize)> = counts.iter().filter(|(_, n)| **n > 1).collect();
    let schedule_left = redis.zcard(keys.schedule()).await;
    let promoting_left = redis.zcard(&promoting).await;
    let dead = redis.zcard(keys.dead()).await;
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
