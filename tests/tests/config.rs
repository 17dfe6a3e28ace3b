//! One config: the worker's own client is built from `WorkerConfig.client`, so
//! the window format, namespace and Redis URL the application uses reach the
//! jobs a worker enqueues; the heartbeat reports what it measured.

use fairjob::config::{ClientConfig, ConnectOptions, WorkerConfig};
use fairjob::prelude::*;
use fairjob_tests::jobs::{SpawnJob, TJob};
use fairjob_tests::{Redis, eventually, namespace, queues, spawn};
use redis::AsyncCommands;

const FORMAT: &str = "custom-window:%<job_class>s:%<fair_tenant>s";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_enqueued_from_a_job_counts_in_the_custom_window() {
    let redis = Redis::start().await;
    let keys = redis.keys().clone().with_fair_key_format(FORMAT);
    let client = Client::builder(redis.url())
        .namespace(redis.ns())
        .fair_key_format(FORMAT)
        .build()
        .await
        .unwrap();
    SpawnJob("acme".into())
        .perform_async(&client)
        .await
        .unwrap();
    let w = redis
        .worker()
        .fair_key_format(FORMAT)
        .queues(queues(&["spawn"]));
    let run = spawn(w.build().await.unwrap());
    let custom = keys.fair_window("TJob", "acme", "whatever");
    let default = redis.keys().fair_window("TJob", "acme", "whatever");
    assert_eq!(custom, redis.key("custom-window:TJob:acme"));
    eventually!(
        redis.zcard(&custom).await == 1,
        "the job's push counts in {custom}"
    );
    run.stop().await;
    assert!(!redis.conn().exists::<_, bool>(&default).await.unwrap());
    // And the application's own push counts in the same window.
    TJob {
        tenant: "acme".into(),
    }
    .perform_async(&client)
    .await
    .unwrap();
    assert_eq!(redis.zcard(&custom).await, 2);
}

#[tokio::test]
async fn the_worker_connects_to_the_configs_redis() {
    let server = fairjob_tests::redis();
    let config = WorkerConfig {
        client: ClientConfig {
            redis: Some(server.url()),
            connect: ConnectOptions {
                namespace: Some(namespace()),
                ..ConnectOptions::default()
            },
            ..ClientConfig::default()
        },
        ..WorkerConfig::default()
    };
    // The builder's own URL points nowhere; the config's wins.
    let redis_of = |w: fairjob::Worker| w.client().broker().redis_display().to_string();
    let port = format!(":{}", server.port());
    let builder = fairjob::Worker::builder("redis://127.0.0.1:1").config(config);
    let display = redis_of(builder.build().await.unwrap());
    assert!(display.ends_with(&port), "{display}");
    // A config without a URL keeps the builder's.
    let builder = fairjob::Worker::builder(server.url()).config(WorkerConfig::default());
    let display = redis_of(builder.build().await.unwrap());
    assert!(display.ends_with(&port), "{display}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_heartbeat_reports_a_measured_round_trip_and_rss() {
    let redis = Redis::start().await;
    let run = spawn(redis.worker().build().await.unwrap());
    let key = redis.keys().process(run.identity());
    let mut r = redis.conn();
    eventually!(
        r.hexists::<_, _, bool>(&key, "rtt_us").await.unwrap(),
        "a heartbeat in {key}"
    );
    let rtt: u64 = r.hget(&key, "rtt_us").await.unwrap();
    let rss: u64 = r.hget(&key, "rss").await.unwrap();
    run.stop().await;
    assert!(rtt > 0, "rtt_us is measured, not a constant");
    assert!(rtt < 5_000_000, "rtt_us {rtt} is in microseconds");
    assert!(rss > 1000, "rss {rss} KB");
}
