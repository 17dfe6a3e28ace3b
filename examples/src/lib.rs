//! Example jobs for fairjob, and the small helpers the example binaries share.
//!
//! - [`EchoJob`]: a tuple struct of one `String`, Sidekiq class `EchoJob`, queue
//!   `default`; its perform RPUSHes the argument onto the Redis list
//!   `fairjob-examples:echo` (inside the namespace, if one is set). Push it from
//!   Ruby with `Sidekiq::Client.push('class' => 'EchoJob', 'args' => ['hi'])`.
//! - [`ReportJob`]: a tenant-aware job with two reroute rules, used by the demo.
//! - [`web`]: an axum handler that enqueues a report for the request's tenant
//!   (served by `src/bin/web.rs`, tested on a fake in `tests/testing.rs`).

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use fairjob::prelude::*;
use serde::{Deserialize, Serialize};

pub mod web;

/// What a runnable example starts with: logs (`FAIRJOB_LOG`, warnings by
/// default) and a Redis: `$REDIS_URL`, or a private `redis-server` on a free
/// port, kept running while the returned server lives.
pub fn example_redis() -> anyhow::Result<(String, Option<fairjob::testing::RedisServer>)> {
    use anyhow::Context;
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("FAIRJOB_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .init();
    Ok(match std::env::var("REDIS_URL") {
        Ok(url) => (url, None),
        Err(_) => {
            let server = fairjob::testing::RedisServer::start(&[])
                .context("starting a private redis-server")?;
            (server.url(), Some(server))
        }
    })
}

/// Pushes its argument onto `fairjob-examples:echo`, so anyone can see a job
/// cross from a client (Rust or Ruby) to a worker.
#[derive(Debug, Clone, Serialize, Deserialize, Job)]
#[job(class = "EchoJob", queue = "default")]
pub struct EchoJob(pub String);

/// The list EchoJob writes to (before the namespace prefix).
pub const ECHO_LIST: &str = "fairjob-examples:echo";

impl Perform for EchoJob {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        // The application's own command, on fairjob's connection (as Ruby code
        // uses `Sidekiq.redis`).
        let broker = cx.client().broker();
        let key = format!("{}{}", broker.keys().prefix(), ECHO_LIST);
        let mut conn = broker.connection();
        redis::cmd("RPUSH")
            .arg(key)
            .arg(&self.0)
            .query_async::<i64>(&mut conn)
            .await?;
        tracing::info!(arg = %self.0, jid = cx.jid(), "echo");
        Ok(())
    }
}

/// Reports performed by this process (the demo waits on it).
pub static REPORTS_DONE: AtomicUsize = AtomicUsize::new(0);

/// One report's start, as the demo measures fairness from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Started {
    /// The tenant.
    pub account: String,
    /// The queue it was fetched from.
    pub queue: String,
    /// When it started.
    pub at: Instant,
}

/// How long a report takes, ms (the demo's `--web` mode slows reports down
/// so that queues, waits and throttling show on the dashboard).
pub static REPORT_MS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(20);

/// Whether reports print a line when they run.
pub static REPORT_LINES: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// Every report started by this process, in start order.
pub static STARTED: Mutex<Vec<Started>> = Mutex::new(Vec::new());

/// A report for one account: a greedy account's reports are rerouted to slower
/// queues once it enqueues more than 5 within a minute (then more than 20).
// Clippy's `duplicated_attributes` misreads repeated `#[throttle]` rules as
// duplicates (rust-clippy#13238); the allow is only for that false positive.
#[allow(clippy::duplicated_attributes)]
#[derive(Debug, Clone, Serialize, Deserialize, Job)]
#[job(queue = "reports", retry = 3)]
#[fair_tenant(account)]
#[throttle(queue = "reports_throttled", threshold = 5, per = "1m")]
#[throttle(queue = "reports_slowest", threshold = 20, per = "1m")]
pub struct ReportJob {
    /// The tenant.
    pub account: String,
    /// Which report.
    pub number: u32,
}

impl Perform for ReportJob {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        STARTED.lock().expect("started lock").push(Started {
            account: self.account.clone(),
            queue: cx.queue().to_owned(),
            at: Instant::now(),
        });
        tokio::time::sleep(Duration::from_millis(REPORT_MS.load(Ordering::Relaxed))).await;
        REPORTS_DONE.fetch_add(1, Ordering::SeqCst);
        if !REPORT_LINES.load(Ordering::Relaxed) {
            return Ok(());
        }
        println!(
            "  ran report {:>3} of {:<8} from queue {:<18} (jid {})",
            self.number,
            self.account,
            cx.queue(),
            &cx.jid()[..8]
        );
        Ok(())
    }
}
