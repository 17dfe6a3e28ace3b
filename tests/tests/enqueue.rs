//! Enqueue: the payload written is Sidekiq's, the worker runs it, schedules,
//! bulk pushes, middleware, size limits.

use std::time::Duration;

use fairjob::{Client, Error, Job, client_middleware_fn};
use fairjob_examples::{ECHO_LIST, EchoJob};
use fairjob_tests::{Redis, eventually};
use redis::AsyncCommands;

/// What `EchoJob`s echoed, in order.
async fn echoed(redis: &Redis) -> Vec<String> {
    redis.lrange(redis.key(ECHO_LIST)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn perform_async_writes_a_sidekiq_payload() {
    let redis = Redis::start().await;
    let keys = redis.keys();
    let c = redis.client().await;
    let jid = EchoJob("hi".into()).perform_async(&c).await.unwrap();
    assert_eq!(jid.len(), 24);
    assert!(
        jid.chars()
            .all(|ch| ch.is_ascii_hexdigit() && !ch.is_ascii_uppercase())
    );
    let queues: Vec<String> = redis.conn().smembers(keys.queues()).await.unwrap();
    assert_eq!(queues, vec!["default".to_owned()]);
    let items = redis.lrange(keys.queue("default")).await;
    assert_eq!(items.len(), 1);
    let v: serde_json::Value = serde_json::from_str(&items[0]).unwrap();
    assert_eq!(v["class"], "EchoJob");
    assert_eq!(v["args"], serde_json::json!(["hi"]));
    assert_eq!(v["jid"], jid.as_str());
    assert_eq!(v["queue"], "default");
    assert_eq!(v["retry"], true);
    assert!(v["created_at"].is_f64(), "{v}");
    assert!(v["enqueued_at"].is_f64(), "{v}");
    assert!(items[0].contains(r#""created_at":"#) && items[0].contains('.'));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_runs_jobs_from_the_client() {
    let redis = Redis::start().await;
    let keys = redis.keys();
    let c = redis.client().await;
    let run = fairjob_tests::spawn(redis.worker().build().await.unwrap());
    for i in 0..20 {
        EchoJob(format!("job-{i}")).perform_async(&c).await.unwrap();
    }
    eventually!(
        let echoed = echoed(&redis).await; echoed.len() == 20,
        "the worker runs every job"
    );
    run.stop().await;
    // A clean exit leaves no in-progress record, lease or process entry behind.
    let inflight = redis.inflight_keys().await;
    assert!(inflight.is_empty(), "{inflight:?}");
    let leases = redis.scan_keys(&format!("{}*", keys.lease(""))).await;
    assert!(leases.is_empty(), "{leases:?}");
    assert_eq!(redis.scard(keys.processes()).await, 0);
    let processed: u64 = redis.get(keys.stat_processed(None)).await;
    assert_eq!(processed, 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn perform_in_waits_in_schedule_then_runs_once() {
    let redis = Redis::start().await;
    let keys = redis.keys();
    let c = redis.client().await;
    let jid = EchoJob("later".into())
        .perform_in(&c, Duration::from_millis(1500))
        .await
        .unwrap();
    let sched: Vec<(String, f64)> = redis
        .conn()
        .zrange_withscores(keys.schedule(), 0, -1)
        .await
        .unwrap();
    assert_eq!(sched.len(), 1);
    let v: serde_json::Value = serde_json::from_str(&sched[0].0).unwrap();
    assert_eq!(v["jid"], jid.as_str());
    assert!(
        v.get("enqueued_at").is_none(),
        "scheduled jobs carry no enqueued_at: {v}"
    );
    let now = c.broker().time().await.unwrap();
    assert!(
        sched[0].1 > now && sched[0].1 < now + 2.0,
        "score {} now {now}",
        sched[0].1
    );
    let run = fairjob_tests::spawn(redis.worker().build().await.unwrap());
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(echoed(&redis).await.is_empty(), "ran too early");
    eventually!(
        let echoed = echoed(&redis).await; echoed == ["later"],
        "the job runs when due"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(echoed(&redis).await, ["later"], "ran exactly once");
    run.stop().await;
    assert_eq!(redis.zcard(keys.promoting(&keys.schedule())).await, 0);
    assert_eq!(redis.zcard(keys.schedule()).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_bulk_and_middleware_that_edits_or_stops() {
    let redis = Redis::start().await;
    let c = Client::builder(redis.url())
        .namespace(redis.ns())
        .middleware(client_middleware_fn(|mut job, next| async move {
            if job.payload().args().get().contains("skip") {
                return Ok(None);
            }
            job.payload_mut().set("mw_seen", "yes");
            next.run(job).await
        }))
        .build()
        .await
        .unwrap();
    let jids = c
        .push_bulk(vec![
            EchoJob("a".into()),
            EchoJob("skip".into()),
            EchoJob("c".into()),
        ])
        .await
        .unwrap();
    assert!(jids[0].is_some() && jids[1].is_none() && jids[2].is_some());
    let items = redis.lrange(redis.keys().queue("default")).await;
    assert_eq!(items.len(), 2);
    assert!(items.iter().all(|i| i.contains(r#""mw_seen":"yes""#)));
    let err = EchoJob("skip".into()).perform_async(&c).await.unwrap_err();
    assert!(matches!(err, Error::Stopped { .. }), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payload_above_the_maximum_is_refused_before_any_write() {
    let redis = Redis::start().await;
    let c = Client::builder(redis.url())
        .namespace(redis.ns())
        .max_payload_bytes(1024)
        .build()
        .await
        .unwrap();
    let err = EchoJob("x".repeat(2000))
        .perform_async(&c)
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::PayloadTooLarge { max: 1024, .. }),
        "{err}"
    );
    let err = EchoJob("x".repeat(2000))
        .perform_in(&c, Duration::from_secs(5))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::PayloadTooLarge { .. }), "{err}");
    let keys = redis.scan_keys(&redis.key("*")).await;
    assert!(keys.is_empty(), "nothing written: {keys:?}");
    // The default maximum is 1 MiB.
    let big = redis.client().await;
    assert!(
        EchoJob("y".repeat(2 << 20))
            .perform_async(&big)
            .await
            .is_err()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_password_fails_fast_and_the_password_never_shows() {
    let server = fairjob_tests::RedisServer::start(&["--requirepass", "s3cret-pw"]).unwrap();
    let url = format!("redis://:wrong-pw@127.0.0.1:{}", server.port());
    let started = std::time::Instant::now();
    let err = Client::connect(&url).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(3), "fails fast");
    assert!(matches!(err, Error::Auth(_)), "{err:?}");
    assert!(!format!("{err} {err:?}").contains("wrong-pw"));
    let ok = Client::connect(&format!("redis://:s3cret-pw@127.0.0.1:{}", server.port()))
        .await
        .unwrap();
    assert!(!format!("{ok:?}").contains("s3cret-pw"));
    EchoJob("authed".into()).perform_async(&ok).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_handle_quiets_and_stops_the_worker() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    let w = redis.worker().build().await.unwrap();
    let handle = fairjob::worker::WorkerHandle::new();
    let run = tokio::spawn(w.run_with(handle.clone()));
    EchoJob("before".into()).perform_async(&c).await.unwrap();
    eventually!(
        let echoed = echoed(&redis).await; echoed.len() == 1,
        "the worker runs a job"
    );
    handle.quiet();
    tokio::time::sleep(Duration::from_millis(300)).await;
    EchoJob("while quiet".into())
        .perform_async(&c)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        echoed(&redis).await,
        ["before"],
        "a quiet worker fetches nothing"
    );
    handle.stop();
    tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}
