//! Failures: Sidekiq's retry fields and backoff, dead after the last retry,
//! panics and unknown classes are failures, malformed entries go to `dead` with
//! their bytes and the queue keeps moving.

use std::time::Duration;

use fairjob::Job;
use fairjob_examples::EchoJob;
use fairjob_tests::jobs::{FailJob, PanicJob};
use fairjob_tests::{client, namespace, raw, redis, wait_until, worker};
use redis::AsyncCommands;
use serde_json::Value;

async fn zset(url: &str, key: &str) -> Vec<(Value, f64)> {
    let mut r = raw(url).await;
    let items: Vec<(String, f64)> = r.zrange_withscores(key, 0, -1).await.unwrap();
    items
        .into_iter()
        .map(|(s, score)| (serde_json::from_str(&s).unwrap(), score))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_is_scheduled_for_retry_in_sidekiqs_format() {
    let server = redis();
    let ns = namespace();
    let c = client(&server.url(), &ns).await;
    let jid = FailJob("x".into()).perform_async(&c).await.unwrap();
    let w = worker(&server.url(), &ns).build().await.unwrap();
    let run = fairjob_tests::spawn(w);
    let key = format!("{ns}:retry");
    assert!(
        wait_until(Duration::from_secs(10), || async {
            zset(&server.url(), &key).await.len() == 1
        })
        .await
    );
    let now = c.broker().time().await.unwrap();
    let (job, score) = zset(&server.url(), &key).await.remove(0);
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
    let server = redis();
    let ns = namespace();
    let mut r = raw(&server.url()).await;
    // retry = 2 and already retried twice (retry_count 1): this failure is the last.
    let payload = r#"{"class":"FailJob","args":["y"],"jid":"0123456789abcdef01234567","queue":"default","retry":2,"retry_count":1,"failed_at":1.5,"custom_field":{"keep":[1,[],12345678901234567890123]}}"#;
    let _: () = r
        .lpush(format!("{ns}:queue:default"), payload)
        .await
        .unwrap();
    let w = worker(&server.url(), &ns).build().await.unwrap();
    let run = fairjob_tests::spawn(w);
    let key = format!("{ns}:dead");
    assert!(
        wait_until(Duration::from_secs(10), || async {
            zset(&server.url(), &key).await.len() == 1
        })
        .await
    );
    let dead: Vec<String> = r.zrange(&key, 0, -1).await.unwrap();
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
    let server = redis();
    let ns = namespace();
    let c = client(&server.url(), &ns).await;
    let mut r = raw(&server.url()).await;
    PanicJob.perform_async(&c).await.unwrap();
    let unknown = r#"{"class":"NoSuchJob","args":[],"jid":"aaaaaaaaaaaaaaaaaaaaaaaa","queue":"default","retry":true}"#;
    let _: () = r
        .lpush(format!("{ns}:queue:default"), unknown)
        .await
        .unwrap();
    EchoJob("after".into()).perform_async(&c).await.unwrap();
    let w = worker(&server.url(), &ns).build().await.unwrap();
    let run = fairjob_tests::spawn(w);
    let key = format!("{ns}:retry");
    assert!(
        wait_until(Duration::from_secs(10), || async {
            zset(&server.url(), &key).await.len() == 2
        })
        .await
    );
    let retries = zset(&server.url(), &key).await;
    let classes: Vec<&str> = retries
        .iter()
        .map(|(v, _)| v["error_class"].as_str().unwrap())
        .collect();
    assert!(
        classes.contains(&"Panic") && classes.contains(&"UnknownJobClass"),
        "{classes:?}"
    );
    let panic = retries
        .iter()
        .find(|(v, _)| v["error_class"] == "Panic")
        .unwrap();
    assert!(
        panic.0["error_message"]
            .as_str()
            .unwrap()
            .contains("kaboom")
    );
    let echo: Vec<String> = r
        .lrange(format!("{ns}:fairjob-examples:echo"), 0, -1)
        .await
        .unwrap();
    assert_eq!(echo, vec!["after".to_owned()]);
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_entries_go_to_dead_with_their_bytes_and_the_queue_moves() {
    let server = redis();
    let ns = namespace();
    let c = client(&server.url(), &ns).await;
    let mut r = raw(&server.url()).await;
    let q = format!("{ns}:queue:default");
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
        let _: () = r.lpush(&q, b.as_slice()).await.unwrap();
    }
    EchoJob("behind".into()).perform_async(&c).await.unwrap();
    let w = worker(&server.url(), &ns).build().await.unwrap();
    let run = fairjob_tests::spawn(w);
    let echo_key = format!("{ns}:fairjob-examples:echo");
    assert!(
        wait_until(Duration::from_secs(20), || async {
            let mut r = raw(&server.url()).await;
            let n: u64 = r.zcard(format!("{ns}:dead")).await.unwrap();
            let e: u64 = r.llen(&echo_key).await.unwrap();
            n == bad.len() as u64 && e == 1
        })
        .await,
        "dead {:?} echo {:?} queue {:?}",
        r.zcard::<_, u64>(format!("{ns}:dead")).await,
        r.llen::<_, u64>(&echo_key).await,
        r.llen::<_, u64>(&q).await,
    );
    let dead: Vec<String> = r.zrange(format!("{ns}:dead"), 0, -1).await.unwrap();
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
