//! Failures: Sidekiq's retry fields and backoff, dead after the last retry,
//! panics and unknown classes are failures, malformed entries go to `dead` with
//! their bytes and the queue keeps moving.

use std::time::Duration;

use fairjob::Job;
use fairjob_examples::{ECHO_LIST, EchoJob};
use fairjob_tests::jobs::{FailJob, PanicJob};
use fairjob_tests::{Redis, eventually};
use redis::AsyncCommands;
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_is_scheduled_for_retry_in_sidekiqs_format() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    let jid = FailJob("x".into()).perform_async(&c).await.unwrap();
    let run = fairjob_tests::spawn(redis.worker().build().await.unwrap());
    let key = redis.keys().retry();
    eventually!(redis.zcard(&key).await == 1, "the failure waits in `retry`");
    let now = c.broker().time().await.unwrap();
    let (job, score): (String, f64) = redis
        .conn()
        .zrange_withscores::<_, Vec<_>>(&key, 0, -1)
        .await
        .unwrap()
        .remove(0);
    let job: Value = serde_json::from_str(&job).unwrap();
    assert_eq!(job["jid"], jid.as_str());
    assert_eq!(job["retry_count"], 0);
    assert_eq!(job["error_class"], "ArgumentError");
    assert_eq!(job["error_message"], "boom x");
    assert!(job["failed_at"].is_f64());
    assert!(job.get("retried_at").is_none());
    // count^4 + 15 + rand(10) * (count + 1), count = 0.
    assert!(
        score >= now + 13.0 && score <= now + 25.0,
        "score {score} now {now}"
    );
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_failure_goes_to_dead_and_keeps_unknown_fields() {
    let redis = Redis::start().await;
    // retry = 2 and already retried twice (retry_count 1): this failure is the last.
    let payload = r#"{"class":"FailJob","args":["y"],"jid":"0123456789abcdef01234567","queue":"default","retry":2,"retry_count":1,"failed_at":1.5,"custom_field":{"keep":[1,[],12345678901234567890123]}}"#;
    redis.lpush_raw("default", payload).await;
    let run = fairjob_tests::spawn(redis.worker().build().await.unwrap());
    let key = redis.keys().dead();
    eventually!(redis.zcard(&key).await == 1, "the job goes to `dead`");
    let dead = redis.zrange(&key).await;
    assert!(
        dead[0].contains(r#""custom_field":{"keep":[1,[],12345678901234567890123]}"#),
        "{}",
        dead[0]
    );
    let v: Value = serde_json::from_str(&dead[0]).unwrap();
    assert_eq!(v["retry_count"], 2);
    assert!(v["retried_at"].is_f64());
    assert_eq!(v["failed_at"], 1.5);
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn panics_and_unknown_classes_are_failures_and_the_worker_keeps_going() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    PanicJob.perform_async(&c).await.unwrap();
    let unknown = r#"{"class":"NoSuchJob","args":[],"jid":"aaaaaaaaaaaaaaaaaaaaaaaa","queue":"default","retry":true}"#;
    redis.lpush_raw("default", unknown).await;
    EchoJob("after".into()).perform_async(&c).await.unwrap();
    let run = fairjob_tests::spawn(redis.worker().build().await.unwrap());
    let key = redis.keys().retry();
    eventually!(
        redis.zcard(&key).await == 2,
        "both failures wait in `retry`"
    );
    let retries = redis.payloads(&key).await;
    let classes: Vec<&str> = retries
        .iter()
        .map(|v| v["error_class"].as_str().unwrap())
        .collect();
    assert!(
        classes.contains(&"Panic") && classes.contains(&"UnknownJobClass"),
        "{classes:?}"
    );
    let panic = retries
        .iter()
        .find(|v| v["error_class"] == "Panic")
        .unwrap();
    assert!(panic["error_message"].as_str().unwrap().contains("kaboom"));
    assert_eq!(redis.lrange(redis.key(ECHO_LIST)).await, ["after"]);
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_entries_go_to_dead_with_their_bytes_and_the_queue_moves() {
    let redis = Redis::start().await;
    let keys = redis.keys();
    let c = redis.client().await;
    let deep = format!(
        "{{\"class\":\"EchoJob\",\"jid\":\"x\",\"args\":{}{}}}",
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    let huge = vec![b'x'; 20 * 1024 * 1024];
    let bad: Vec<Vec<u8>> = vec![
        b"not json".to_vec(),
        vec![0xff, 0xfe, 0x00],
        b"[1,2,3]".to_vec(),
        br#"{"args":[],"jid":"x"}"#.to_vec(),
        br#"{"class":"EchoJob","args":{},"jid":"x"}"#.to_vec(),
        deep.into_bytes(),
        huge,
    ];
    for b in &bad {
        redis.lpush_raw("default", b.as_slice()).await;
    }
    EchoJob("behind".into()).perform_async(&c).await.unwrap();
    let run = fairjob_tests::spawn(redis.worker().build().await.unwrap());
    eventually!(
        within Duration::from_secs(20),
        let dead_echo_queue = (
            redis.zcard(keys.dead()).await,
            redis.llen(redis.key(ECHO_LIST)).await,
            redis.llen(keys.queue("default")).await,
        );
        dead_echo_queue.0 == bad.len() && dead_echo_queue.1 == 1,
        "every bad entry goes to `dead` and the job behind them runs"
    );
    let dead = redis.zrange(keys.dead()).await;
    for entry in &dead {
        let v: Value = serde_json::from_str(entry).unwrap();
        assert_eq!(v["error_class"], "MalformedPayload", "{v}");
        assert!(v["error_message"].as_str().is_some_and(|m| !m.is_empty()));
        assert!(v.get("raw_payload").is_some() || v.get("raw_payload_base64").is_some());
    }
    let texts: Vec<String> = dead
        .iter()
        .filter_map(|e| {
            serde_json::from_str::<Value>(e).unwrap()["raw_payload"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    assert!(texts.contains(&"not json".to_owned()));
    assert!(
        texts.iter().any(|t| t.len() == 20 * 1024 * 1024),
        "the 20 MiB entry keeps its bytes"
    );
    assert!(
        dead.iter()
            .any(|e| e.contains(r#""raw_payload_base64":"//4A""#)),
        "invalid UTF-8 kept as base64"
    );
    assert!(
        fairjob::worker::rss_kb() < 1024 * 1024,
        "memory stays bounded"
    );
    run.stop().await;
}
