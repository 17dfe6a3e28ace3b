//! The demo: several tenants enqueue reports, one of them greedily; fairjob
//! reroutes the greedy tenant's excess to slower queues and the worker (running
//! in this process) drains all of them by weight, so the small tenants' reports
//! are not stuck behind the greedy backlog.
//!
//! Uses `REDIS_URL` when set; otherwise starts (and stops) a private redis-server.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context;
use fairjob::{Client, Job, Worker};
use fairjob_examples::redis_server::RedisServer;
use fairjob_examples::{EchoJob, REPORTS_DONE, ReportJob};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("FAIRJOB_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .init();
    let (url, _server) = match std::env::var("REDIS_URL") {
        Ok(url) => (url, None),
        Err(_) => {
            let server = RedisServer::start(&[]).context("starting a private redis-server")?;
            println!("started a private redis-server on port {}", server.port());
            (server.url(), Some(server))
        }
    };
    let namespace = format!("demo-{}", std::process::id());
    let client = Client::builder(&url).namespace(&namespace).build().await?;

    println!(
        "\n1. enqueue: tenant `greedy` sends 40 reports, then alice, bob and carol send 3 each"
    );
    let mut queues: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut total = 0;
    for n in 1..=40 {
        ReportJob {
            account: "greedy".into(),
            number: n,
        }
        .perform_async(&client)
        .await?;
        total += 1;
    }
    for n in 1..=3 {
        for account in ["alice", "bob", "carol"] {
            ReportJob {
                account: account.into(),
                number: n,
            }
            .perform_async(&client)
            .await?;
            total += 1;
        }
    }
    let broker = client.broker();
    for q in ["reports", "reports_throttled", "reports_slowest"] {
        let jobs: Vec<String> = broker
            .query(
                redis::cmd("LRANGE")
                    .arg(broker.keys().queue(q))
                    .arg(0)
                    .arg(-1),
            )
            .await?;
        for j in jobs {
            let v: serde_json::Value = serde_json::from_str(&j)?;
            queues
                .entry(q.into())
                .or_default()
                .push(v["fair_tenant"].as_str().unwrap_or("?").to_owned());
        }
    }
    for (q, tenants) in &queues {
        let mut per: BTreeMap<&str, usize> = BTreeMap::new();
        for t in tenants {
            *per.entry(t).or_default() += 1;
        }
        println!("   queue {q:<18} {:>3} jobs {per:?}", tenants.len());
    }
    EchoJob("hello from the demo".into())
        .perform_async(&client)
        .await?;

    println!(
        "\n2. run a worker (concurrency 4); queues and weights come from the job declarations"
    );
    let worker = Worker::builder(&url)
        .namespace(&namespace)
        .concurrency(4)
        .poll_intervals(Duration::from_millis(100), Duration::from_millis(500))
        .build()
        .await?;
    println!(
        "   worker {} fetching {}",
        worker.identity(),
        worker.queues()
    );
    let started = Instant::now();
    let done = async move {
        while REPORTS_DONE.load(Ordering::SeqCst) < total {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let runner = tokio::spawn(worker.run_until(done));
    runner.await??;
    let echoed: Vec<String> = broker
        .query(
            redis::cmd("LRANGE")
                .arg(format!(
                    "{}{}",
                    broker.keys().prefix(),
                    fairjob_examples::ECHO_LIST
                ))
                .arg(0)
                .arg(-1),
        )
        .await?;
    println!(
        "\n3. done: {total} reports in {:.1}s; EchoJob wrote {:?}. alice, bob and carol never waited behind greedy's backlog.",
        started.elapsed().as_secs_f64(),
        echoed
    );
    let mut pipe = redis::pipe();
    let keys: Vec<String> = broker
        .query(redis::cmd("KEYS").arg(format!("{namespace}:*")))
        .await?;
    if !keys.is_empty() {
        pipe.del(keys).ignore();
        broker.pipe::<()>(&pipe).await?;
    }
    Ok(())
}
