//! Interop with real Ruby Sidekiq 6.4.1 (Debian's `ruby-sidekiq`): jobs cross
//! between Ruby and Rust clients and workers through one Redis, and Sidekiq's
//! API reads what fairjob writes (retry set, queues, process set).
//!
//! Sidekiq 6.4.1 has no namespace support, so fairjob runs with NO namespace
//! here (`namespace("")` means no key prefix) and every test starts its own
//! private redis-server. The Ruby scripts live in `tests/ruby/`. A test that
//! cannot start `ruby`, `sidekiq` or `redis-server` fails; none is skipped.

use std::time::Duration;

use fairjob::{Job, Registry};
use fairjob_examples::{ECHO_LIST, EchoJob};
use fairjob_tests::jobs::FailJob;
use fairjob_tests::ruby::{SidekiqProcess, ruby_json};
use fairjob_tests::{Redis, RedisServer, RunningWorker, eventually};

/// A private redis-server and a handle on it with NO namespace (Sidekiq 6.4.1 has none).
async fn unprefixed() -> (RedisServer, Redis) {
    let server = fairjob_tests::redis();
    let redis = Redis::connect(&server.url(), "").await;
    (server, redis)
}

/// A fairjob worker on `redis` with the test intervals and `registry`, running.
async fn start_worker(redis: &Redis, registry: Registry) -> RunningWorker {
    let worker = redis
        .worker()
        .registry(registry)
        .build()
        .await
        .expect("fairjob worker builds");
    fairjob_tests::spawn(worker)
}

/// Graceful shutdown; fails the test if the worker errs or hangs.
async fn stop(worker: RunningWorker) {
    tokio::time::timeout(Duration::from_secs(15), worker.stop())
        .await
        .expect("fairjob worker shuts down within 15s");
}

fn registry_of_echo() -> Registry {
    let mut r = Registry::new();
    r.register::<EchoJob>().expect("register EchoJob");
    r
}

/// Ruby's `Sidekiq::Client.push` → fairjob worker. The Ruby push carries no
/// wake-up token, so the worker finds it by its idle poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ruby_push_is_performed_by_fairjob() {
    let (_server, redis) = unprefixed().await;
    let url = redis.url().to_owned();
    let worker = start_worker(&redis, registry_of_echo()).await;

    let pushed = ruby_json("push.rb", vec![url, "from-ruby".into()]).await;
    let jid = pushed["jid"]
        .as_str()
        .expect("push.rb prints the jid")
        .to_owned();
    assert_eq!(jid.len(), 24, "a Sidekiq jid: {jid}");

    eventually!(
        let echoed = redis.lrange(ECHO_LIST).await; echoed.iter().any(|v| v == "from-ruby"),
        "fairjob performs the Ruby-pushed EchoJob; queue:default = {:?}",
        redis.lrange("queue:default").await
    );
    stop(worker).await;
    assert!(
        redis.lrange("queue:default").await.is_empty(),
        "the job left queue:default"
    );
}

/// fairjob `Client` → a real Ruby Sidekiq server process.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fairjob_push_is_performed_by_ruby_sidekiq() {
    let (_server, redis) = unprefixed().await;
    let client = redis.client().await;
    let jid = EchoJob("from-rust".into())
        .perform_async(&client)
        .await
        .expect("push EchoJob");
    assert_eq!(
        redis.llen("queue:default").await,
        1,
        "fairjob pushed to the unprefixed queue:default"
    );

    let mut sidekiq = SidekiqProcess::start(redis.url(), "jobs.rb", &["default"]);
    eventually!(
        within Duration::from_secs(30),
        let echoed = {
            sidekiq.assert_running();
            redis.lrange(ECHO_LIST).await
        };
        echoed.iter().any(|v| v == "ruby:from-rust"),
        "Ruby Sidekiq performs fairjob's EchoJob (jid {jid}); queue:default = {:?}\nsidekiq log:\n{}",
        redis.lrange("queue:default").await,
        sidekiq.log()
    );
    assert!(
        redis.lrange("queue:default").await.is_empty(),
        "Sidekiq took the job off queue:default"
    );
    drop(sidekiq);
}

/// A job failed by fairjob sits in `retry` in a form Sidekiq's `RetrySet` reads;
/// a job pushed by fairjob is read by Sidekiq's `Queue` API.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failed_fairjob_job_is_readable_by_ruby_retryset() {
    let (_server, redis) = unprefixed().await;
    let url = redis.url().to_owned();
    let client = redis.client().await;

    // Part 1: the retry set.
    let mut registry = Registry::new();
    registry.register::<FailJob>().expect("register FailJob");
    let worker = start_worker(&redis, registry).await;
    let jid = FailJob("x".into())
        .perform_async(&client)
        .await
        .expect("push FailJob");
    eventually!(
        let retries = redis.zcard("retry").await; retries == 1,
        "FailJob reaches the retry zset"
    );
    stop(worker).await;
    // The first retry is ≥ 15 s away, so the entry is still there.
    assert_eq!(redis.zcard("retry").await, 1);

    let got = ruby_json("retry_set.rb", vec![url.clone()]).await;
    assert_eq!(
        got,
        serde_json::json!([1, "FailJob", 0, "ArgumentError", "boom x", "default", jid]),
        "Sidekiq::RetrySet's view of fairjob's retry entry"
    );

    // Part 2: a queued job, read by Sidekiq::Queue (no worker running).
    let qjid = EchoJob("queued".into())
        .perform_async(&client)
        .await
        .expect("push EchoJob");
    let q = ruby_json("queue.rb", vec![url.clone(), "default".into()]).await;
    assert_eq!(q["size"], 1, "{q}");
    assert_eq!(q["klass"], "EchoJob", "{q}");
    assert_eq!(q["args"], serde_json::json!(["queued"]), "{q}");
    assert_eq!(q["jid"], qjid.as_str(), "{q}");
    assert_eq!(
        q["enqueued_at_class"], "Float",
        "enqueued_at must be a Float (Sidekiq 6/7 seconds): {q}"
    );
    let enqueued_at = q["enqueued_at"].as_f64().expect("enqueued_at is a number");
    let now = q["now"].as_f64().expect("now");
    assert!(
        (now - enqueued_at).abs() < 60.0,
        "enqueued_at must be epoch seconds close to Ruby's Time.now ({now}): {enqueued_at}"
    );
    assert_eq!(
        q["enqueued_at_time"].as_f64(),
        Some(enqueued_at),
        "Sidekiq's JobRecord#enqueued_at: {q}"
    );
    let latency = q["latency"].as_f64().expect("latency");
    assert!(
        (0.0..60.0).contains(&latency),
        "Sidekiq::Queue#latency in seconds: {latency}"
    );
}

/// Sidekiq's `ProcessSet` (the Web UI's Busy page) lists a fairjob worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sidekiq_web_api_lists_fairjob_processes() {
    let (_server, redis) = unprefixed().await;
    let url = redis.url().to_owned();
    let worker = start_worker(&redis, registry_of_echo()).await;
    let identity = worker.identity().to_owned();
    eventually!(
        within Duration::from_secs(5),
        is_listed(&redis, &identity).await,
        "fairjob worker {identity} joins the `processes` set"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;

    let procs = ruby_json("processes.rb", vec![url.clone()]).await;
    let list = procs.as_array().expect("processes.rb prints an array");
    let me = list
        .iter()
        .find(|p| p["identity"] == identity.as_str())
        .unwrap_or_else(|| {
            panic!("Sidekiq::ProcessSet does not list fairjob worker {identity}: {procs}")
        });
    assert_eq!(me["concurrency"], 5, "{me}");
    assert_eq!(me["queues"], serde_json::json!(["default"]), "{me}");
    assert_eq!(me["busy"], 0, "{me}");
    assert_eq!(me["stopping"], false, "{me}");
    assert_eq!(me["pid"], std::process::id(), "{me}");
    let beat = me["beat"].as_f64().expect("beat");
    assert!(
        (fairjob::payload::now_f64() - beat).abs() < 30.0,
        "beat is epoch seconds: {me}"
    );

    // The Web UI's Busy page renders it too (Sidekiq::Web under Rack::MockRequest).
    let page = ruby_json("web_busy.rb", vec![url.clone()]).await;
    assert_eq!(page["status"], 200, "{page}");
    assert_eq!(
        page["identities"],
        serde_json::json!([identity]),
        "the Busy page shows the fairjob worker: {page}"
    );

    stop(worker).await;
    // A clean stop leaves the process set.
    let procs = ruby_json("processes.rb", vec![url.clone()]).await;
    assert!(
        !procs
            .as_array()
            .expect("array")
            .iter()
            .any(|p| p["identity"] == identity.as_str()),
        "a stopped fairjob worker is no longer listed: {procs}"
    );
}

/// The Web UI's Quiet and Stop buttons (Sidekiq's API `quiet!`/`stop!`) reach a
/// fairjob worker: quiet stops fetching, stop shuts it down.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sidekiq_quiet_and_stop_buttons_reach_fairjob_workers() {
    let (_server, redis) = unprefixed().await;
    let url = redis.url().to_owned();
    let worker = redis
        .worker()
        .registry(registry_of_echo())
        .build()
        .await
        .unwrap();
    let identity = worker.identity().to_owned();
    let task = tokio::spawn(worker.run_until(std::future::pending()));
    eventually!(
        within Duration::from_secs(5),
        is_listed(&redis, &identity).await,
        "fairjob worker {identity} joins the `processes` set"
    );
    let sent = ruby_json(
        "signal.rb",
        vec![url.clone(), identity.clone(), "quiet".into()],
    )
    .await;
    assert_eq!(sent["sent"], "quiet");
    eventually!(
        within Duration::from_secs(5),
        let quiet = redis
            .query::<Option<String>>(redis::cmd("HGET").arg(&identity).arg("quiet"))
            .await;
        quiet.as_deref() == Some("true"),
        "the worker reports quiet after Sidekiq's quiet!"
    );
    // Quiet: a new job is not fetched.
    let client = redis.client().await;
    fairjob::Job::perform_async(fairjob_examples::EchoJob("while quiet".into()), &client)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(
        redis.lrange(ECHO_LIST).await.is_empty(),
        "a quiet worker fetches nothing"
    );
    ruby_json(
        "signal.rb",
        vec![url.clone(), identity.clone(), "stop".into()],
    )
    .await;
    let done = tokio::time::timeout(Duration::from_secs(10), task).await;
    assert!(
        matches!(done, Ok(Ok(Ok(())))),
        "stop! shuts the worker down: {done:?}"
    );
}

/// Whether `identity` is in Sidekiq's `processes` set.
async fn is_listed(redis: &Redis, identity: &str) -> bool {
    redis
        .query(redis::cmd("SISMEMBER").arg("processes").arg(identity))
        .await
}
