//! An import as a batch, and a three-step workflow:
//! `cargo run -p fairjob-examples --bin batch_import` (a private
//! redis-server, or Redis at `$REDIS_URL`).
//!
//! 1. `ImportRow` × 3,000 for three customers on the tenant-sharded queue
//!    `imports`, committed as one batch with an `on_success` callback,
//!    `ImportDone`, which runs once, after every row, and reads the batch's
//!    status. The customer with 2,000 rows does not hold up the others.
//! 2. A workflow: `extract` → `transform` → `load`. `transform` and `load`
//!    are held outside any queue until the step before them succeeds, and
//!    each reads the result the step before recorded.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Context;
use fairjob::Worker;
use fairjob::prelude::*;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

static ROWS: AtomicUsize = AtomicUsize::new(0);
static DONE: Notify = Notify::const_new();

/// One row of an import, in its customer's shard.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(queue = "imports", shard_by_tenant)]
#[fair_tenant(customer)]
struct ImportRow {
    customer: String,
    row: u32,
}

impl Perform for ImportRow {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        ROWS.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// The import's `success` callback: runs once, after every row succeeded.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(queue = "callbacks")]
struct ImportDone {
    import_id: u64,
}

impl Perform for ImportDone {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        let status = cx
            .batch_status()
            .await?
            .ok_or_else(|| JobError::discard("no batch"))?;
        println!(
            "   import {} done: {} rows, {} pending, {} failed ({} rows ran here)",
            self.import_id,
            status.total,
            status.pending,
            status.failures,
            ROWS.load(Ordering::Relaxed)
        );
        DONE.notify_one();
        Ok(())
    }
}

/// A step of the nightly pipeline.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(queue = "pipeline")]
struct Pipeline {
    day: String,
}

impl Perform for Pipeline {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        let step = cx.workflow_step().unwrap_or_default();
        match step.as_str() {
            "extract" => cx.record(&vec![3u32, 4, 5]).await?,
            "transform" => {
                let rows: Vec<u32> = cx.upstream("extract").await?.unwrap_or_default();
                cx.record(&rows.iter().map(|r| r * r).sum::<u32>()).await?;
            }
            _ => {
                let total: u32 = cx.upstream("transform").await?.unwrap_or_default();
                println!(
                    "   {step} for {}: loaded the sum of squares {total}",
                    self.day
                );
                DONE.notify_one();
            }
        }
        println!("   step `{step}` ran");
        Ok(())
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (url, _server) = fairjob_examples::example_redis()?;
    let namespace = format!("batch-import-{}", std::process::id());
    let client = Client::builder(&url).namespace(&namespace).build().await?;

    println!("1. an import of 3,000 rows for three customers, as one batch");
    let rows = (0..3_000u32).map(|row| ImportRow {
        customer: match row {
            0..2000 => "big-co",
            r if r % 2 == 0 => "small-co",
            _ => "tiny-co",
        }
        .into(),
        row,
    });
    let bid = Batch::new()
        .description("Import 2026-11-28")
        .on_success(ImportDone { import_id: 7 })
        .push_bulk(rows)
        .commit(&client)
        .await?;
    println!("   committed batch {bid}");

    println!("2. a workflow: extract -> transform -> load");
    let day = "2026-11-28".to_owned();
    let wid = Workflow::new()
        .add("extract", Pipeline { day: day.clone() })
        .add_after("transform", Pipeline { day: day.clone() }, ["extract"])
        .add_after("load", Pipeline { day }, ["transform"])
        .commit(&client)
        .await?;
    println!("   committed workflow {wid}");

    // Every job type declared in this binary is registered; the worker
    // fetches their queues.
    let worker = Worker::builder(&url)
        .namespace(&namespace)
        .concurrency(10)
        .poll_interval(Duration::from_millis(100))
        .build()
        .await?;
    let run = tokio::spawn(worker.run_until(async {
        // The import's callback and the workflow's last step.
        DONE.notified().await;
        DONE.notified().await;
    }));
    tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .context("the import and the workflow finish within a minute")???;
    let status = client
        .batch_status(&wid)
        .await?
        .context("the workflow's status")?;
    println!(
        "3. the workflow: {} steps, success fired: {}",
        status.total,
        status.success_at.is_some()
    );
    Ok(())
}
