//! Periodic schedules at scale: every cron script's time with `--schedules`
//! stored schedules (default 10,000), `--busy` of them firing every second
//! (default 20) for `--secs` seconds (default 5) under two workers, and a
//! start-up reconciliation of `--declared` code schedules (default 1,000),
//! read from Redis's SLOWLOG (every call over 100 µs is listed).
//!
//! `cargo run --release -p fairjob-tests --bin cron_bench -- [--schedules 10000] [--busy 20] [--secs 5] [--declared 1000]`

use std::time::{Duration, Instant};

use fairjob::{Client, CronSpec, Registry, Worker};
use fairjob_tests::jobs::CronRecordJob;
use fairjob_tests::slowlog::SlowLog;
use fairjob_tests::{flag, namespace, redis};

fn registry() -> Registry {
    let mut r = Registry::new();
    r.register::<CronRecordJob>().expect("register");
    r
}

fn worker(url: &str, ns: &str) -> fairjob::WorkerBuilder {
    Worker::builder(url)
        .namespace(ns)
        .registry(registry())
        .concurrency(20)
}

#[tokio::main]
async fn main() {
    let schedules: usize = flag("schedules", 10_000);
    let busy: usize = flag("busy", 20);
    let secs: u64 = flag("secs", 5);
    let declared: usize = flag("declared", 1000);
    let server = redis();
    let url = server.url();
    let ns = namespace();
    let client = Client::builder(&url).namespace(&ns).build().await.unwrap();
    let started = Instant::now();
    for i in 0..schedules {
        client
            .cron()
            .set(CronSpec::new(
                format!("daily-{i}"),
                "0 3 * * *",
                CronRecordJob(0),
            ))
            .await
            .unwrap();
    }
    println!(
        "stored {schedules} schedules in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let mut slow = SlowLog::start(&url, 100).await.unwrap();
    for i in 0..busy {
        client
            .cron()
            .set(CronSpec::new(
                format!("tick-{i}"),
                "* * * * * *",
                CronRecordJob(0),
            ))
            .await
            .unwrap();
    }
    let a = fairjob_tests::spawn(worker(&url, &ns).build().await.unwrap());
    let b = fairjob_tests::spawn(worker(&url, &ns).build().await.unwrap());
    tokio::time::sleep(Duration::from_secs(secs)).await;
    a.stop().await;
    b.stop().await;
    let fires: usize = fairjob_tests::query(
        client.broker(),
        redis::cmd("LLEN").arg(format!("{}record", client.broker().keys().prefix())),
    )
    .await
    .unwrap();
    println!(
        "{busy} every-second schedules among {}, two workers, {secs} s: {fires} fire times ran",
        schedules + busy
    );
    println!("SLOWLOG while firing: {}", slow.report().await.unwrap());

    let mut slow = SlowLog::start(&url, 100).await.unwrap();
    let mut builder = worker(&url, &ns);
    for i in 0..declared {
        builder = builder.cron(format!("code-{i}"), "*/5 * * * *", CronRecordJob(0));
    }
    let c = fairjob_tests::spawn(builder.build().await.unwrap());
    tokio::time::sleep(Duration::from_secs(2)).await;
    c.stop().await;
    println!(
        "SLOWLOG of a start-up reconciling {declared} declared schedules: {}",
        slow.report().await.unwrap()
    );
}
