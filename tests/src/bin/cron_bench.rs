//! Periodic schedules at scale: every cron script's time, read from Redis's
//! SLOWLOG at threshold 0 (each call; those over `--slower-than` µs counted, default 1,000),
//! while storing `--schedules` schedules (default 10,000), while `--busy` more
//! fire every second (default 20) for `--secs` seconds (default 5) under two
//! workers, and during start-up reconciliations of `--declared` code
//! schedules (default 10,000): a first start, then two workers with changed
//! code starting at once.
//!
//! `cargo run -p fairjob-tests --bin cron_bench -- [--schedules 10000] [--busy 20] [--secs 5] [--declared 10000] [--slower-than 1000]`

use std::time::{Duration, Instant};

use fairjob::{Client, CronSpec, Registry, Worker};
use fairjob_tests::jobs::CronRecordJob;
use fairjob_tests::slowlog::{SlowLog, summarize};
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
    let schedules: usize = flag("--schedules", 10_000);
    let busy: usize = flag("--busy", 20);
    let secs: u64 = flag("--secs", 5);
    let declared: usize = flag("--declared", 10_000);
    let slower_than: u64 = flag("--slower-than", 1000);
    let server = redis();
    let url = server.url();
    let ns = namespace();
    let client = Client::builder(&url).namespace(&ns).build().await.unwrap();

    // Every command's time, phase by phase (TIME, a constant-time command,
    // shows what the machine adds).
    let mut slow = SlowLog::start_all(&url, 1_000_000).await.unwrap();
    let header = "| script | calls | median µs | p99 µs | slowest µs | calls over the threshold |\n|---|---:|---:|---:|---:|---:|";
    let table = |t: &std::collections::BTreeMap<String, Vec<u64>>, names: &[&str]| {
        format!("{header}\n{}", summarize(t, names, slower_than))
    };
    // `cron_set.lua`: storing the schedules one by one.
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
        "stored {schedules} schedules in {:.1} s\n{}\n",
        started.elapsed().as_secs_f64(),
        table(&slow.times().await.unwrap(), &["cron_set.lua", "TIME"])
    );

    // `cron_claim.lua`, `cron_redrive.lua`, `cron_release.lua`, the push:
    // firing among them.
    let _ = slow.times().await.unwrap();
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
    println!(
        "{}\n",
        table(
            &slow.times().await.unwrap(),
            &[
                "cron_claim.lua",
                "cron_redrive.lua",
                "cron_release.lua",
                "push.lua",
                "ZRANGE",
                "TIME"
            ]
        )
    );

    // `cron_reconcile.lua`: a first start declaring `declared` schedules,
    // then two workers with different code starting at once (half of the
    // names dropped, half changed, as many new ones).
    let code = |from: usize, n: usize, expr: &'static str| {
        let mut builder = worker(&url, &ns);
        for i in from..from + n {
            builder = builder.cron(format!("code-{i}"), expr, CronRecordJob(0));
        }
        builder
    };
    let _ = slow.times().await.unwrap();
    let t = Instant::now();
    let c = fairjob_tests::spawn(code(0, declared, "*/5 * * * *").build().await.unwrap());
    let code_set = || async {
        fairjob_tests::query::<usize>(
            client.broker(),
            redis::cmd("SCARD").arg(client.broker().keys().cron_code()),
        )
        .await
        .unwrap()
    };
    let reconciler = || async {
        fairjob_tests::query::<bool>(
            client.broker(),
            redis::cmd("EXISTS").arg(client.broker().keys().cron_reconciler()),
        )
        .await
        .unwrap()
    };
    while code_set().await < declared || reconciler().await {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!(
        "a start-up reconciling {declared} declared schedules: done within {:.2} s\n{}\n",
        t.elapsed().as_secs_f64(),
        table(
            &slow.times().await.unwrap(),
            &["cron_reconcile.lua", "TIME"]
        )
    );
    c.stop().await;
    let _ = slow.times().await.unwrap();
    let d = fairjob_tests::spawn(
        code(declared / 2, declared, "*/7 * * * *")
            .build()
            .await
            .unwrap(),
    );
    let e = fairjob_tests::spawn(
        code(declared / 2, declared, "*/7 * * * *")
            .build()
            .await
            .unwrap(),
    );
    let t = Instant::now();
    tokio::time::sleep(Duration::from_millis(200)).await;
    while reconciler().await {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = t.elapsed().as_secs_f64();
    d.stop().await;
    e.stop().await;
    let code_names = code_set().await;
    println!(
        "two workers with new code starting at once: {code_names} code schedules stored (declared {declared}), done within {took:.2} s\n{}",
        table(
            &slow.times().await.unwrap(),
            &["cron_reconcile.lua", "TIME"]
        )
    );
}
