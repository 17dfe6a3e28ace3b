//! The demo: several tenants enqueue reports, one of them greedily; fairjob
//! reroutes the greedy tenant's excess to slower queues and the worker (running
//! in this process) drains all of them by weight, so the small tenants' reports
//! are not stuck behind the greedy backlog.
//!
//! Uses `REDIS_URL` when set; otherwise starts (and stops) a private redis-server.
//! What it prints at the end is measured from the order the reports started in.
//!
//! With `--web` (`cargo xtask demo --web`) it keeps going instead: the tenants
//! keep enqueueing (greedy in bursts of 40 every 5 s, the others now and
//! then), reports take 300 ms, and the worker and
//! the dashboard run on <http://127.0.0.1:7433> until Ctrl-C, so the greedy
//! tenant's throttling and the small tenants' waits can be watched.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context;
use fairjob::Worker;
use fairjob::prelude::*;
use fairjob_examples::{EchoJob, REPORTS_DONE, ReportJob, STARTED};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (url, _server) = fairjob_examples::example_redis()?;
    if let Some(server) = &_server {
        println!("started a private redis-server on port {}", server.port());
    }
    let namespace = format!("demo-{}", std::process::id());
    let client = Client::builder(&url).namespace(&namespace).build().await?;
    if std::env::args().skip(1).any(|a| a == "--web") {
        let result = web_demo(&url, &namespace, &client).await;
        clean_up(&client, &namespace).await?;
        return result;
    }

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
    let mut conn = broker.connection();
    for q in ["reports", "reports_throttled", "reports_slowest"] {
        let jobs: Vec<String> = redis::cmd("LRANGE")
            .arg(broker.keys().queue(q))
            .arg(0)
            .arg(-1)
            .query_async(&mut conn)
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
        .poll_interval(Duration::from_millis(100))
        .scheduled_poll_interval(Duration::from_millis(500))
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
    let echoed: Vec<String> = redis::cmd("LRANGE")
        .arg(format!(
            "{}{}",
            broker.keys().prefix(),
            fairjob_examples::ECHO_LIST
        ))
        .arg(0)
        .arg(-1)
        .query_async(&mut conn)
        .await?;
    println!(
        "\n3. done: {total} reports in {:.1}s; EchoJob wrote {:?}.",
        started.elapsed().as_secs_f64(),
        echoed
    );
    println!(
        "{}",
        fairness_summary(&STARTED.lock().expect("started lock"))
    );
    clean_up(&client, &namespace).await
}

/// Removes the demo's keys (a SCAN, not KEYS, in case REDIS_URL is a shared server).
async fn clean_up(client: &Client, namespace: &str) -> anyhow::Result<()> {
    let mut conn = client.broker().connection();
    let mut cursor: u64 = 0;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{namespace}:*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await?;
        if !keys.is_empty() {
            redis::cmd("DEL")
                .arg(keys)
                .query_async::<()>(&mut conn)
                .await?;
        }
        cursor = next;
        if cursor == 0 {
            break;
        }
    }
    Ok(())
}

/// `--web`: tenants keep enqueueing, and the worker and the dashboard run on
/// 127.0.0.1:7433 until Ctrl-C.
async fn web_demo(url: &str, namespace: &str, client: &Client) -> anyhow::Result<()> {
    use std::sync::atomic::AtomicBool;
    fairjob_examples::REPORT_MS.store(300, Ordering::Relaxed);
    fairjob_examples::REPORT_LINES.store(false, Ordering::Relaxed);
    let addr = "127.0.0.1:7433";
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} (is another demo running?)"))?;
    let worker = Worker::builder(url)
        .namespace(namespace)
        .concurrency(3)
        .poll_interval(Duration::from_millis(100))
        .scheduled_poll_interval(Duration::from_millis(500))
        .build()
        .await?;
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    // The tenants: greedy sends bursts of 40 reports every 5 s; alice, bob and
    // carol one each every 15 s.
    let producer = {
        let client = client.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut number = 0;
            let mut round = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..40 {
                    number += 1;
                    let _ = ReportJob {
                        account: "greedy".into(),
                        number,
                    }
                    .perform_async(&client)
                    .await;
                }
                // The small tenants stay under the rules' 5 a minute.
                if round.is_multiple_of(3) {
                    for account in ["alice", "bob", "carol"] {
                        number += 1;
                        let _ = ReportJob {
                            account: account.into(),
                            number,
                        }
                        .perform_async(&client)
                        .await;
                    }
                }
                round += 1;
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
        })
    };
    let config = fairjob_web::WebConfig::default().actions(true);
    let dashboard = tokio::spawn(fairjob_web::serve(
        client.clone(),
        config,
        listener,
        async {
            let _ = tokio::signal::ctrl_c().await;
        },
    ));
    println!(
        "\nthe worker ({} fetching {}) and the dashboard run on http://{addr}/ (actions enabled, \
         loopback only);\ngreedy enqueues 40 reports every 5 s, alice, bob and carol one each every 15 s. \
         Ctrl-C stops the demo.",
        worker.identity(),
        worker.queues()
    );
    worker
        .run_until(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    stop.store(true, Ordering::Relaxed);
    producer.abort();
    let _ = dashboard.await;
    println!("stopped");
    Ok(())
}

/// What the start order shows: when the small tenants' last report started,
/// how many of greedy's reports (enqueued before theirs) had started by then,
/// and how many would have in first-in-first-out order.
fn fairness_summary(started: &[fairjob_examples::Started]) -> String {
    let Some(t0) = started.first().map(|s| s.at) else {
        return "   no report started".into();
    };
    let greedy_total = started.iter().filter(|s| s.account == "greedy").count();
    let Some(last_small) = started.iter().rposition(|s| s.account != "greedy") else {
        return "   no small tenant's report started".into();
    };
    let greedy_before = started[..last_small]
        .iter()
        .filter(|s| s.account == "greedy")
        .count();
    let mut out = format!(
        "   measured: the small tenants' last report started {:.0} ms after the first start, when {greedy_before} of \
         greedy's {greedy_total} reports had started (in FIFO order all {greedy_total} would have: they were enqueued first)",
        started[last_small].at.duration_since(t0).as_secs_f64() * 1000.0
    );
    let mut per_queue: BTreeMap<&str, usize> = BTreeMap::new();
    for s in started.iter().filter(|s| s.account == "greedy") {
        *per_queue.entry(s.queue.as_str()).or_default() += 1;
    }
    out.push_str(&format!("\n   greedy's reports ran from {per_queue:?}"));
    out.push_str(if greedy_before < greedy_total {
        "\n   → alice, bob and carol did not wait behind greedy's whole backlog."
    } else {
        "\n   → alice, bob and carol waited behind greedy's whole backlog this time."
    });
    out
}
