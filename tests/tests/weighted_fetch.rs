//! Weighted fetch: with every queue of a tier backlogged, each queue's share of
//! fetches matches weight / total (Sidekiq's BasicFetch), and strict tiers drain
//! the first tier before the next; the same when a tenant-sharded queue (served
//! by its own script, in its own cluster slot) is among plain ones.

use std::time::Duration;

use fairjob::QueueSpec;
use fairjob_tests::{namespace, raw, redis, wait_until, worker};
use redis::AsyncCommands;

async fn fill(url: &str, ns: &str, queue: &str, n: usize) {
    let mut r = raw(url).await;
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
        let _: () = r.lpush(format!("{ns}:queue:{queue}"), items).await.unwrap();
    }
}

async fn records(url: &str, ns: &str) -> Vec<String> {
    raw(url)
        .await
        .lrange(format!("{ns}:record"), 0, -1)
        .await
        .unwrap()
}

/// Backlogs `a`, `b`/`s` and `c` with `total` jobs each, runs one worker over them
/// at weights 4:2:1 (the middle queue tenant-sharded when `sharded`), and checks
/// each queue's share of the first `total` jobs run is within two points.
async fn shares_follow_weights(middle: &str, sharded: bool, total: usize) {
    let server = redis();
    let url = server.url();
    let ns = namespace();
    let queues = ["a", middle, "c"];
    for q in queues {
        fill(&url, &ns, q, total).await;
    }
    let mut w = worker(&url, &ns)
        .concurrency(25)
        .queues(QueueSpec::parse(&["a,4".into(), format!("{middle},2"), "c,1".into()]).unwrap());
    if sharded {
        // What Sidekiq producers push to its inbox goes to shards.
        w = w.sharded_queue(middle);
    }
    let run = fairjob_tests::spawn(w.build().await.unwrap());
    assert!(
        wait_until(Duration::from_secs(120), || async {
            raw(&url)
                .await
                .llen::<_, usize>(format!("{ns}:record"))
                .await
                .unwrap()
                >= total
        })
        .await
    );
    run.stop().await;
    let recs = records(&url, &ns).await;
    let first = &recs[..total];
    for (q, weight) in queues.into_iter().zip([4.0, 2.0, 1.0]) {
        let n = first
            .iter()
            .filter(|r| r.split(' ').next() == Some(q))
            .count();
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
    let server = redis();
    let url = server.url();
    let ns = namespace();
    fill(&url, &ns, "critical", 300).await;
    fill(&url, &ns, "default", 300).await;
    fill(&url, &ns, "slow", 300).await;
    let w = worker(&url, &ns)
        .concurrency(1)
        .queues(
            QueueSpec::parse_tiers(&[
                vec!["critical".into()],
                vec!["default,4".into(), "slow,1".into()],
            ])
            .unwrap(),
        )
        .build()
        .await
        .unwrap();
    let run = fairjob_tests::spawn(w);
    assert!(
        wait_until(Duration::from_secs(60), || async {
            raw(&url)
                .await
                .llen::<_, usize>(format!("{ns}:record"))
                .await
                .unwrap()
                >= 600
        })
        .await
    );
    run.stop().await;
    let recs = records(&url, &ns).await;
    assert!(
        recs[..300].iter().all(|r| r.starts_with("critical ")),
        "the critical tier goes first"
    );
    let next = &recs[300..600];
    let defaults = next.iter().filter(|r| r.starts_with("default ")).count();
    assert!(
        next.iter().any(|r| r.starts_with("slow ")),
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
    let server = redis();
    let url = server.url();
    let ns = namespace();
    for q in ["critical", "s", "slow"] {
        fill(&url, &ns, q, 200).await;
    }
    let w = worker(&url, &ns)
        .concurrency(4)
        .sharded_queue("s")
        .queues(
            QueueSpec::parse_tiers(&[
                vec!["critical".into()],
                vec!["s".into()],
                vec!["slow".into()],
            ])
            .unwrap(),
        )
        .build()
        .await
        .unwrap();
    let run = fairjob_tests::spawn(w);
    assert!(
        wait_until(Duration::from_secs(60), || async {
            raw(&url)
                .await
                .llen::<_, usize>(format!("{ns}:record"))
                .await
                .unwrap()
                >= 600
        })
        .await
    );
    run.stop().await;
    let recs = records(&url, &ns).await;
    let tiers: Vec<&str> = recs.iter().map(|r| r.split(' ').next().unwrap()).collect();
    // With 4 jobs fetched at a time, a tier's last jobs and the next tier's first
    // may share a batch, but never does a later tier start before an earlier
    // one is drained.
    let last = |q: &str| tiers.iter().rposition(|t| *t == q).unwrap();
    let first = |q: &str| tiers.iter().position(|t| *t == q).unwrap();
    assert!(
        first("s") >= last("critical").saturating_sub(3),
        "{tiers:?}"
    );
    assert!(first("slow") >= last("s").saturating_sub(3), "{tiers:?}");
    assert_eq!(tiers.len(), 600);
}
