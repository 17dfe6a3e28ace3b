//! A job past its timeout is cancelled through `cx.cancelled()`, then after a
//! short grace counted as a failure (`Timeout`) and retried, so a hung job
//! cannot hold its tenant's cap forever.

use std::time::Duration;

use fairjob::prelude::*;
use fairjob_tests::fair_jobs::{HangJob, SlowJob};
use fairjob_tests::{Redis, eventually, queues, spawn};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_job_times_out_and_its_tenant_runs_on() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    for (n, honour) in [(0, false), (1, true), (2, false)] {
        HangJob {
            tenant: "acme".into(),
            n,
            honour,
        }
        .perform_async(&c)
        .await
        .unwrap();
    }
    // One at a time for acme: a job that never ended would hold the cap forever.
    c.shard_policy("hang")
        .tenant("acme")
        .cap(1)
        .apply()
        .await
        .unwrap();
    let run = spawn(
        redis
            .worker()
            .queues(queues(&["hang"]))
            .build()
            .await
            .unwrap(),
    );
    let failed = eventually!(
        within Duration::from_secs(20),
        let failed = redis.payloads(&redis.keys().retry()).await;
        failed.len() == 3,
        "every hung job times out, one after another"
    );
    run.stop().await;
    for f in &failed {
        assert_eq!(f["error_class"], "Timeout", "{f}");
        assert_eq!(f["retry_count"], 0, "{f}");
        assert!(
            f["error_message"]
                .as_str()
                .unwrap()
                .contains("timeout of 300ms"),
            "{f}"
        );
    }
    let started = redis.records().await;
    assert_eq!(started.len(), 3, "each ran once: {started:?}");
    let running: Option<u64> = redis
        .query(
            redis::cmd("HGET")
                .arg(redis.keys().shard("hang").running)
                .arg("acme"),
        )
        .await;
    assert_eq!(running, None, "acme's running count is released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_workers_default_timeout_applies_to_jobs_without_their_own() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    SlowJob(60_000).perform_async(&c).await.unwrap();
    SlowJob(10).perform_async(&c).await.unwrap();
    let w = redis
        .worker()
        .job_timeout(Duration::from_millis(300))
        .queues(queues(&["slow"]))
        .build()
        .await
        .unwrap();
    let run = spawn(w);
    let failed = eventually!(
        let failed = redis.payloads(&redis.keys().retry()).await;
        !failed.is_empty(),
        "the slow job times out"
    );
    run.stop().await;
    assert_eq!(failed.len(), 1, "the quick one succeeded: {failed:?}");
    assert_eq!(failed[0]["args"][0], 60_000);
    assert_eq!(failed[0]["error_class"], "Timeout");
}
