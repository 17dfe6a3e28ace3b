//! Weighted fetch: with every queue of a tier backlogged, each queue's share of
//! fetches matches weight / total (Sidekiq's BasicFetch), and strict tiers drain
//! the first tier before the next.

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shares_follow_weights_within_two_points() {
    let server = redis();
    let url = server.url();
    let ns = namespace();
    for q in ["a", "b", "c"] {
        fill(&url, &ns, q, 20_000).await;
    }
    let w = worker(&url, &ns)
        .concurrency(25)
        .queues(QueueSpec::parse(&["a,4".into(), "b,2".into(), "c,1".into()]).unwrap())
        .build()
        .await
        .unwrap();
    let run = fairjob_tests::spawn(w);
    let total = 20_000;
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
    for (q, weight) in [("a", 4.0), ("b", 2.0), ("c", 1.0)] {
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
