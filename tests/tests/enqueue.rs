//! Enqueue: the payload written is Sidekiq's, the worker runs it, schedules,
//! bulk pushes, middleware, size limits.

use std::time::Duration;

use fairjob::{Client, Error, Job, client_middleware_fn};
use fairjob_examples::EchoJob;
use fairjob_tests::{client, namespace, raw, redis, wait_until, worker};
use redis::AsyncCommands;
use serde_json::Value;

async fn echoed(url: &str, ns: &str) -> Vec<String> {
    let mut c = raw(url).await;
    c.lrange(format!("{ns}:fairjob-examples:echo"), 0, -1)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn perform_async_writes_a_sidekiq_payload() {
    let server = redis();
    let ns = namespace();
    let c = client(&server.url(), &ns).await;
    let jid = EchoJob("hi".into()).perform_async(&c).await.unwrap();
    assert_eq!(jid.len(), 24);
    assert!(
        jid.chars()
            .all(|ch| ch.is_ascii_hexdigit() && !ch.is_ascii_uppercase())
    );
    let mut r = raw(&server.url()).await;
    let queues: Vec<String> = r.smembers(format!("{ns}:queues")).await.unwrap();
    assert_eq!(queues, vec!["default".to_owned()]);
    let items: Vec<String> = r
        .lrange(format!("{ns}:queue:default"), 0, -1)
        .await
        .unwrap();
    assert_eq!(items.len(), 1);
    let v: Value = serde_json::from_str(&items[0]).unwrap();
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
    let server = redis();
    let ns = namespace();
    let c = client(&server.url(), &ns).await;
    let w = worker(&server.url(), &ns).build().await.unwrap();
    let run = fairjob_tests::spawn(w);
    for i in 0..20 {
        EchoJob(format!("job-{i}")).perform_async(&c).await.unwrap();
    }
    assert!(
        wait_until(Duration::from_secs(10), || async {
            echoed(&server.url(), &ns).await.len() == 20
        })
        .await
    );
    run.stop().await;
    let mut r = raw(&server.url()).await;
    // A clean exit leaves no in-progress record, lease or process entry behind.
    let inflight: Vec<String> = r.keys(format!("{ns}:fairjob:inflight:*")).await.unwrap();
    assert!(inflight.is_empty(), "{inflight:?}");
    let procs: Vec<String> = r.smembers(format!("{ns}:processes")).await.unwrap();
    assert!(procs.is_empty(), "{procs:?}");
    let processed: u64 = r.get(format!("{ns}:stat:processed")).await.unwrap();
    assert_eq!(processed, 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn perform_in_waits_in_schedule_then_runs_once() {
    let server = redis();
    let ns = namespace();
    let c = client(&server.url(), &ns).await;
    let jid = EchoJob("later".into())
        .perform_in(&c, Duration::from_millis(1500))
        .await
        .unwrap();
    let mut r = raw(&server.url()).await;
    let sched: Vec<(String, f64)> = r
        .zrange_withscores(format!("{ns}:schedule"), 0, -1)
        .await
        .unwrap();
    assert_eq!(sched.len(), 1);
    let v: Value = serde_json::from_str(&sched[0].0).unwrap();
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
    let w = worker(&server.url(), &ns).build().await.unwrap();
    let run = fairjob_tests::spawn(w);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(echoed(&server.url(), &ns).await.is_empty(), "ran too early");
    assert!(
        wait_until(Duration::from_secs(10), || async {
            echoed(&server.url(), &ns).await == vec!["later".to_owned()]
        })
        .await
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        echoed(&server.url(), &ns).await,
        vec!["later".to_owned()],
        "ran exactly once"
    );
    run.stop().await;
    let promoting: u64 = r.zcard(format!("{ns}:fairjob:promoting")).await.unwrap();
    assert_eq!(promoting, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_bulk_and_middleware_that_edits_or_stops() {
    let server = redis();
    let ns = namespace();
    let c = Client::builder(server.url())
        .namespace(&ns)
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
    let mut r = raw(&server.url()).await;
    let items: Vec<String> = r
        .lrange(format!("{ns}:queue:default"), 0, -1)
        .await
        .unwrap();
    assert_eq!(items.len(), 2);
    assert!(items.iter().all(|i| i.contains(r#""mw_seen":"yes""#)));
    let err = EchoJob("skip".into()).perform_async(&c).await.unwrap_err();
    assert!(matches!(err, Error::Stopped { .. }), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payload_above_the_maximum_is_refused_before_any_write() {
    let server = redis();
    let ns = namespace();
    let c = Client::builder(server.url())
        .namespace(&ns)
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
    let mut r = raw(&server.url()).await;
    let keys: Vec<String> = r.keys(format!("{ns}:*")).await.unwrap();
    assert!(keys.is_empty(), "nothing written: {keys:?}");
    // The default maximum is 1 MiB.
    let big = Client::builder(server.url())
        .namespace(&ns)
        .build()
        .await
        .unwrap();
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
    let server = redis();
    let ns = namespace();
    let c = client(&server.url(), &ns).await;
    let w = worker(&server.url(), &ns).build().await.unwrap();
    let handle = fairjob::worker::WorkerHandle::new();
    let run = tokio::spawn(w.run_with(handle.clone()));
    EchoJob("before".into()).perform_async(&c).await.unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || async {
            echoed(&server.url(), &ns).await.len() == 1
        })
        .await
    );
    handle.quiet();
    tokio::time::sleep(Duration::from_millis(300)).await;
    EchoJob("while quiet".into())
        .perform_async(&c)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        echoed(&server.url(), &ns).await,
        vec!["before".to_owned()],
        "a quiet worker fetches nothing"
    );
    handle.stop();
    tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}
