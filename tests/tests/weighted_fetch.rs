//! Weighted fetch: with every queue of a tier backlogged, each queue's share of
//! fetches matches weight / total (Sidekiq's BasicFetch), and strict tiers drain
//! the first tier before the next; the same when a tenant-sharded queue (served
//! by its own script, in its own cluster slot) is among plain ones.

use std::time::Duration;

use fairjob::{QueueSpec, WorkerBuilder};
use fairjob_tests::{Redis, eventually};

/// Backlogs each of `names` with `n` `RecordJob`s, pushed the way a Sidekiq
/// producer would (the sharded ones reach their shards through the inbox).
async fn fill(redis: &Redis, names: &[&str], n: usize) {
    for queue in names {
        for chunk in (0..n).collect::<Vec<_>>().chunks(5000) {
            let items: Vec<String> = chunk
                .iter()
                .map(|i| {
                    format!(
                        r#"{{"class":"RecordJob","args":["{i}"],"jid":"{}","queue":"{queue}","retry":true}}"#,
                        fairjob::payload::new_jid()
                    )
                })
                .collect();
            redis.lpush_raw(queue, items).await;
        }
    }
}

/// Backlogs every queue of `tiers` (strict tiers of weighted queues, most
/// urgent first) with `each` jobs, runs one worker over them at `concurrency`
/// (with `sharded` tenant-sharded) until `n` jobs have run; the queue of each,
/// in the order they ran.
async fn run_tiers(
    tiers: &[&[&str]],
    each: usize,
    concurrency: usize,
    sharded: &[&str],
    n: usize,
) -> Vec<String> {
    let redis = Redis::start().await;
    let names: Vec<&str> = tiers
        .iter()
        .flat_map(|t| t.iter())
        .map(|q| q.split(',').next().unwrap())
        .collect();
    fill(&redis, &names, each).await;
    let tiers: Vec<Vec<String>> = tiers
        .iter()
        .map(|t| t.iter().map(|q| (*q).to_owned()).collect())
        .collect();
    let mut w = redis
        .worker()
        .concurrency(concurrency)
        .queues(QueueSpec::parse_tiers(&tiers).unwrap());
    for q in sharded {
        w = w.sharded_queue(*q);
    }
    run_until(&redis, w, n, Duration::from_secs(60)).await
}

/// Runs `worker` until `n` jobs have run; the queue of each, in the order they ran.
async fn run_until(
    redis: &Redis,
    worker: WorkerBuilder,
    n: usize,
    timeout: Duration,
) -> Vec<String> {
    let run = fairjob_tests::spawn(worker.build().await.unwrap());
    eventually!(
        within timeout,
        let ran = redis.recorded().await; ran >= n,
        "{n} jobs run"
    );
    run.stop().await;
    redis
        .records()
        .await
        .iter()
        .map(|r| r.split(' ').next().unwrap().to_owned())
        .collect()
}

/// Backlogs `a`, `b`/`s` and `c` with `total` jobs each, runs one worker over them
/// at weights 4:2:1 (the middle queue tenant-sharded when `sharded`), and checks
/// each queue's share of the first `total` jobs run is within two points.
async fn shares_follow_weights(middle: &str, sharded: bool, total: usize) {
    let redis = Redis::start().await;
    let names = ["a", middle, "c"];
    fill(&redis, &names, total).await;
    let mut w = redis
        .worker()
        .concurrency(25)
        .queues(QueueSpec::parse(&["a,4".into(), format!("{middle},2"), "c,1".into()]).unwrap());
    if sharded {
        // What Sidekiq producers push to its inbox goes to shards.
        w = w.sharded_queue(middle);
    }
    let ran = run_until(&redis, w, total, Duration::from_secs(120)).await;
    let first = &ran[..total];
    for (q, weight) in names.into_iter().zip([4.0, 2.0, 1.0]) {
        let n = first.iter().filter(|r| *r == q).count();
        let share = n as f64 / total as f64;
        let want = weight / 7.0;
        assert!(
            (share - want).abs() <= 0.02,
            "queue {q}: share {share:.4}, expected {want:.4} ± 0.02"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shares_follow_weights_within_two_points() {
    shares_follow_weights("b", false, 20_000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_strict_tier_drains_before_the_next() {
    let ran = run_tiers(&[&["critical"], &["default,4", "slow,1"]], 300, 1, &[], 600).await;
    assert!(
        ran[..300].iter().all(|q| q == "critical"),
        "the critical tier goes first"
    );
    let next = &ran[300..600];
    let defaults = next.iter().filter(|q| *q == "default").count();
    assert!(
        next.iter().any(|q| q == "slow"),
        "the weighted tier mixes its queues"
    );
    assert!(
        defaults > 200,
        "default (weight 4) dominates slow (weight 1): {defaults} of 300"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sharded_queue_among_plain_ones_gets_its_weighted_share() {
    shares_follow_weights("s", true, 12_000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strict_tiers_hold_across_plain_and_sharded_queues() {
    let tiers = run_tiers(&[&["critical"], &["s"], &["slow"]], 200, 4, &["s"], 600).await;
    // With 4 jobs fetched at a time, a tier's last jobs and the next tier's first
    // may share a batch, but never does a later tier start before an earlier
    // one is drained.
    let last = |q: &str| tiers.iter().rposition(|t| t == q).unwrap();
    let first = |q: &str| tiers.iter().position(|t| t == q).unwrap();
    assert!(
        first("s") >= last("critical").saturating_sub(3),
        "{tiers:?}"
    );
    assert!(first("slow") >= last("s").saturating_sub(3), "{tiers:?}");
    assert_eq!(tiers.len(), 600);
}
