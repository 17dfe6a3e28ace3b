//! Batches and workflows committed in the application's transaction
//! (`fairjob_postgres::BatchTx`), against a private PostgreSQL, a private
//! Redis and a real worker: a rollback leaves no trace, a commit runs every
//! member and fires each callback once, a workflow runs in order, a pump
//! stopped mid-staging, or killed after the flip, and two pumps at once
//! publish a batch once, a batch the pumping client refuses is kept as
//! failed until fixed, batch rows past a quarter of the lease are handed
//! back, on a Redis Cluster a repeated commit pushes the callbacks a crash
//! left due once, and the schema upgrade from version 2.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use fairjob::batch::Event;
use fairjob::prelude::*;
use fairjob::wire::encoding::encode;
use fairjob_postgres::testing::PostgresServer;
use fairjob_postgres::{
    BatchTx, EnqueueTx, Error, HANG_AFTER_PUSH_ENV, Pump, SCHEMA_VERSION, migrate,
};
use fairjob_tests::{Redis, eventually, queues, spawn};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

/// Per test (a tag), what ran: (member or step, the bid it saw), and the
/// callbacks by event.
#[derive(Default)]
struct Seen {
    runs: Vec<(String, String)>,
    callbacks: Vec<Event>,
}

static SEEN: Mutex<BTreeMap<String, Seen>> = Mutex::new(BTreeMap::new());

fn seen<T>(tag: &str, f: impl FnOnce(&mut Seen) -> T) -> T {
    f(SEEN.lock().unwrap().entry(tag.to_owned()).or_default())
}

fn runs(tag: &str) -> Vec<(String, String)> {
    seen(tag, |s| s.runs.clone())
}

fn callbacks(tag: &str) -> Vec<Event> {
    seen(tag, |s| s.callbacks.clone())
}

#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "PgBatchRow", queue = "pgb_rows")]
struct Row {
    tag: String,
    n: u32,
}

impl Perform for Row {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        let bid = cx.batch().map(|b| b.bid().to_owned()).unwrap_or_default();
        seen(&self.tag, |s| s.runs.push((self.n.to_string(), bid)));
        Ok(())
    }
}

#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "PgBatchStep", queue = "pgb_steps")]
struct Step {
    tag: String,
}

impl Perform for Step {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        let name = cx.workflow_step().expect("a step knows its name");
        let bid = cx.batch().map(|b| b.bid().to_owned()).unwrap_or_default();
        // A step that ran too early would be overtaken by a later one.
        tokio::time::sleep(Duration::from_millis(20)).await;
        seen(&self.tag, |s| s.runs.push((name, bid)));
        Ok(())
    }
}

#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "PgBatchCallback", queue = "pgb_callbacks")]
struct Callback {
    tag: String,
}

impl Perform for Callback {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        let event = cx.batch_event().expect("a callback knows its event");
        seen(&self.tag, |s| s.callbacks.push(event));
        Ok(())
    }
}

#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "PgBatchUnique", queue = "pgb_rows")]
#[unique(for = "1h")]
struct UniqueRow(u32);

impl Perform for UniqueRow {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

async fn setup() -> (PostgresServer, PgPool, Redis) {
    let pg = PostgresServer::start().expect("start a private PostgreSQL (initdb, pg_ctl)");
    let pool = PgPoolOptions::new()
        .max_connections(8)
        .connect(&pg.url())
        .await
        .unwrap();
    migrate(&pool).await.unwrap();
    sqlx::query("CREATE TABLE imports (id bigint PRIMARY KEY, bid text NOT NULL)")
        .execute(&pool)
        .await
        .unwrap();
    (pg, pool, Redis::start().await)
}

fn batch_of(tag: &str, rows: u32) -> Batch {
    Batch::new()
        .description(format!("import {tag}"))
        .on_complete(Callback { tag: tag.into() })
        .on_success(Callback { tag: tag.into() })
        .push_bulk((0..rows).map(|n| Row { tag: tag.into(), n }))
}

async fn outbox_rows(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM fairjob.outbox")
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn batch_state(redis: &Redis, bid: &str) -> Option<String> {
    redis
        .query(redis::cmd("HGET").arg(redis.keys().batch(bid)).arg("state"))
        .await
}

/// The jids waiting in a queue, each with how many times it is there.
async fn queued_jids(redis: &Redis, queue: &str) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for p in redis.payloads(&redis.keys().queue(queue)).await {
        *out.entry(p["jid"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    out
}

/// Runs a worker on the test's queues until `done` holds, then a little
/// longer (a callback fired twice would show), and stops it.
async fn run_until(redis: &Redis, what: &str, mut done: impl FnMut() -> bool) {
    let worker = redis
        .worker()
        .queues(queues(&["pgb_rows", "pgb_steps", "pgb_callbacks"]))
        .concurrency(8)
        .build()
        .await
        .unwrap();
    let running = spawn(worker);
    eventually!(within Duration::from_secs(60), done(), "{what}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    running.stop().await;
}

/// Every row of the batch ran once, in batch `bid`, and each callback fired once.
fn assert_ran_once(tag: &str, bid: &str, rows: u32) {
    let runs = runs(tag);
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for (n, seen_bid) in &runs {
        assert_eq!(seen_bid, bid, "member {n} ran in its batch");
        *counts.entry(n.clone()).or_default() += 1;
    }
    assert_eq!(counts.len(), rows as usize, "every member ran");
    assert!(
        counts.values().all(|c| *c == 1),
        "no member ran twice: {:?}",
        counts.iter().filter(|(_, c)| **c > 1).collect::<Vec<_>>()
    );
    let mut fired = callbacks(tag);
    fired.sort();
    assert_eq!(
        fired,
        [Event::Complete, Event::Success],
        "each callback fired once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committed_batch_runs_every_member_and_each_callback_once() {
    let (_pg, pool, redis) = setup().await;
    let client = redis.client().await;
    let pump = Pump::new(pool.clone(), client.clone());

    let mut tx = pool.begin().await.unwrap();
    let bid = batch_of("commit", 250)
        .set_tenant("acme")
        .commit_tx(&mut *tx)
        .await
        .unwrap();
    assert_eq!(bid.len(), 24, "the bid is known before the commit");
    sqlx::query("INSERT INTO imports (id, bid) VALUES (1, $1)")
        .bind(&bid)
        .execute(&mut *tx)
        .await
        .unwrap();
    // Before the commit, the pump sees nothing.
    assert_eq!(pump.pump_once().await.unwrap().claimed, 0);
    tx.commit().await.unwrap();
    let (kind, tenant): (String, String) =
        sqlx::query_as("SELECT kind, tenant FROM fairjob.outbox WHERE jid = $1")
            .bind(&bid)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(
        (kind.as_str(), tenant.as_str()),
        ("batch", "acme"),
        "one row, ordered by the batch's tenant"
    );

    let stats = pump.pump_once().await.unwrap();
    assert_eq!((stats.claimed, stats.batches, stats.failed), (1, 1, 0));
    assert_eq!(
        outbox_rows(&pool).await,
        0,
        "the row goes once Redis has the batch"
    );
    let status = client.batch_status(&bid).await.unwrap().expect("the batch");
    assert!(status.committed, "{status:?}");
    assert_eq!((status.total, status.staged), (250, 0), "{status:?}");
    assert_eq!(status.description, "import commit");
    assert_eq!(status.tenant, "acme");
    assert_eq!(queued_jids(&redis, "pgb_rows").await.len(), 250);

    run_until(&redis, "the members and both callbacks run", || {
        runs("commit").len() >= 250 && callbacks("commit").len() >= 2
    })
    .await;
    assert_ran_once("commit", &bid, 250);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolled_back_batch_never_runs_and_leaves_nothing_in_redis() {
    let (_pg, pool, redis) = setup().await;
    let client = redis.client().await;
    let mut tx = pool.begin().await.unwrap();
    let bid = batch_of("rollback", 20).commit_tx(&mut *tx).await.unwrap();
    let wid = Workflow::new()
        .add(
            "a",
            Step {
                tag: "rollback".into(),
            },
        )
        .add_after(
            "b",
            Step {
                tag: "rollback".into(),
            },
            ["a"],
        )
        .on_success(Callback {
            tag: "rollback".into(),
        })
        .commit_tx(&mut *tx)
        .await
        .unwrap();
    tx.rollback().await.unwrap();

    let stats = Pump::new(pool.clone(), client.clone())
        .pump_once()
        .await
        .unwrap();
    assert_eq!(stats.claimed, 0);
    assert_eq!(outbox_rows(&pool).await, 0);
    for id in [&bid, &wid] {
        assert!(client.batch_status(id).await.unwrap().is_none(), "{id}");
        assert_eq!(batch_state(&redis, id).await, None);
    }
    assert!(
        redis.scan_keys("*{b:*").await.is_empty(),
        "nothing of either batch is staged in Redis"
    );
    assert_eq!(redis.zcard(redis.keys().batches()).await, 0, "nor listed");
    assert_eq!(redis.zcard(redis.keys().batches_releasing()).await, 0);
    // A worker finds nothing to run.
    let worker = redis
        .worker()
        .queues(queues(&["pgb_rows", "pgb_steps", "pgb_callbacks"]))
        .build()
        .await
        .unwrap();
    let running = spawn(worker);
    tokio::time::sleep(Duration::from_secs(1)).await;
    running.stop().await;
    assert!(runs("rollback").is_empty() && callbacks("rollback").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_committed_in_a_transaction_runs_in_order() {
    let (_pg, pool, redis) = setup().await;
    let client = redis.client().await;
    let step = || Step { tag: "wf".into() };
    let mut tx = pool.begin().await.unwrap();
    let wid = Workflow::new()
        .description("nightly")
        .add("extract", step())
        .add_after("transform", step(), ["extract"])
        .add_after("audit", step(), ["extract"])
        .add_after("load", step(), ["transform", "audit"])
        .on_complete(Callback { tag: "wf".into() })
        .on_success(Callback { tag: "wf".into() })
        .set_tenant("acme")
        .commit_tx(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();

    let stats = Pump::new(pool.clone(), client.clone())
        .pump_once()
        .await
        .unwrap();
    assert_eq!(stats.batches, 1);
    // Only the root is runnable; the others are held.
    let q = redis.payloads(&redis.keys().queue("pgb_steps")).await;
    assert_eq!(q.len(), 1, "{q:?}");
    assert_eq!(
        q[0][fairjob::wire::fields::WORKFLOW_STEP],
        "extract",
        "{q:?}"
    );

    run_until(&redis, "the four steps and both callbacks run", || {
        runs("wf").len() >= 4 && callbacks("wf").len() >= 2
    })
    .await;
    let order: Vec<String> = runs("wf").into_iter().map(|(s, _)| s).collect();
    assert_eq!(order.len(), 4, "each step once: {order:?}");
    let at = |s: &str| order.iter().position(|o| o == s).unwrap();
    assert_eq!(at("extract"), 0, "{order:?}");
    assert!(
        at("transform") < at("load") && at("audit") < at("load"),
        "{order:?}"
    );
    assert!(runs("wf").iter().all(|(_, bid)| *bid == wid));
    let mut fired = callbacks("wf");
    fired.sort();
    assert_eq!(fired, [Event::Complete, Event::Success]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_batch_is_refused_inside_the_transaction_which_goes_on() {
    let (_pg, pool, _redis) = setup().await;
    let mut tx = pool.begin().await.unwrap();
    let step = || Step {
        tag: "refused".into(),
    };

    let cycle = Workflow::new()
        .add_after("a", step(), ["b"])
        .add_after("b", step(), ["a"])
        .commit_tx(&mut *tx)
        .await
        .unwrap_err();
    assert!(
        matches!(&cycle, Error::Fairjob(fairjob::Error::Workflow(m)) if m.contains("cycle")),
        "{cycle}"
    );
    let unknown = Workflow::new()
        .add_after("a", step(), ["nowhere"])
        .commit_tx(&mut *tx)
        .await
        .unwrap_err();
    assert!(unknown.to_string().contains("`nowhere`"), "{unknown}");
    let policy = Workflow::new()
        .add("a", step())
        .on_dependency_failure("ghost", fairjob::batch::OnDependencyFailure::Continue)
        .commit_tx(&mut *tx)
        .await
        .unwrap_err();
    assert!(policy.to_string().contains("`ghost`"), "{policy}");
    let unique = Batch::new()
        .push(Row {
            tag: "refused".into(),
            n: 0,
        })
        .push(UniqueRow(1))
        .commit_tx(&mut *tx)
        .await
        .unwrap_err();
    assert!(
        unique
            .to_string()
            .contains("`PgBatchUnique` is a unique job"),
        "{unique}"
    );
    let big = Batch::new()
        .push(Row {
            tag: "x".repeat(2 * 1024 * 1024),
            n: 0,
        })
        .commit_tx(&mut *tx)
        .await
        .unwrap_err();
    assert!(
        matches!(
            big,
            Error::Fairjob(fairjob::Error::PayloadTooLarge { ref class, .. }) if class == "PgBatchRow"
        ),
        "{big}"
    );

    // The caller's transaction is intact: its own writes and a good batch
    // commit with it, and only the good batch is in the outbox.
    sqlx::query("INSERT INTO imports (id, bid) VALUES (1, 'x')")
        .execute(&mut *tx)
        .await
        .unwrap();
    let good = batch_of("refused", 3).commit_tx(&mut *tx).await.unwrap();
    tx.commit().await.unwrap();
    let jids: Vec<String> = sqlx::query_scalar("SELECT jid FROM fairjob.outbox")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(jids, [good]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pump_stopped_mid_staging_leaves_its_successor_to_publish_the_batch_once() {
    let (_pg, pool, redis) = setup().await;
    let client = redis.client().await;
    const ROWS: u32 = 10_000;
    let mut tx = pool.begin().await.unwrap();
    let bid = batch_of("mid", ROWS).commit_tx(&mut *tx).await.unwrap();
    tx.commit().await.unwrap();

    stop_mid_staging(&pool, &redis, &client, &bid).await;
    assert!(
        queued_jids(&redis, "pgb_rows").await.is_empty(),
        "nothing is runnable before the flip"
    );
    let status = client.batch_status(&bid).await.unwrap().unwrap();
    assert!(
        !status.committed && status.total < ROWS as u64,
        "{status:?}"
    );

    // Its successor (the claim lapsed) repeats the commit with the same bid.
    let stats = Pump::new(pool.clone(), client.clone())
        .pump_once()
        .await
        .unwrap();
    assert_eq!((stats.batches, stats.failed), (1, 0));
    assert_eq!(outbox_rows(&pool).await, 0);
    let status = client.batch_status(&bid).await.unwrap().unwrap();
    assert!(status.committed, "{status:?}");
    assert_eq!(
        (status.total, status.pending, status.staged),
        (ROWS as u64, ROWS as u64, 0),
        "each member counted once, none left staged"
    );
    let queued = queued_jids(&redis, "pgb_rows").await;
    assert_eq!(queued.len(), ROWS as usize);
    assert!(queued.values().all(|n| *n == 1), "each member pushed once");

    run_until(&redis, "the members and both callbacks run", || {
        runs("mid").len() >= ROWS as usize && callbacks("mid").len() >= 2
    })
    .await;
    assert_ran_once("mid", &bid, ROWS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_staged_again_after_a_stopped_pump_lists_each_dependent_once() {
    let (_pg, pool, redis) = setup().await;
    let client = redis.client().await;
    // A fan: `root` and 3,000 steps after it (about 120 staging calls).
    const FAN: usize = 3000;
    let step = || Step { tag: "fan".into() };
    let mut wf = Workflow::new().add("root", step());
    for i in 0..FAN {
        wf = wf.add_after(format!("s{i:04}"), step(), ["root"]);
    }
    let mut tx = pool.begin().await.unwrap();
    let wid = wf
        .on_success(Callback { tag: "fan".into() })
        .commit_tx(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();

    stop_mid_staging(&pool, &redis, &client, &wid).await;
    let stats = Pump::new(pool.clone(), client.clone())
        .pump_once()
        .await
        .unwrap();
    assert_eq!(stats.batches, 1);
    let wf_key = format!("{}:wf", redis.keys().batch(&wid));
    let dependents: Option<usize> = redis
        .query(
            redis::cmd("HGET")
                .arg(&wf_key)
                .arg(format!("an:{}", encode("root"))),
        )
        .await;
    assert_eq!(
        dependents,
        Some(FAN),
        "root's dependents are listed once each, though a prefix was staged twice"
    );
    let status = client.batch_status(&wid).await.unwrap().unwrap();
    assert_eq!((status.total, status.staged), (FAN as u64 + 1, 0));

    run_until(&redis, "every step and the callback run", || {
        runs("fan").len() > FAN && !callbacks("fan").is_empty()
    })
    .await;
    let order: Vec<String> = runs("fan").into_iter().map(|(s, _)| s).collect();
    assert_eq!(order.len(), FAN + 1, "each step once");
    assert_eq!(order[0], "root");
    assert_eq!(callbacks("fan"), [Event::Success]);
}

/// Runs a pump's batch until batch `bid` is partly staged in Redis, stops it
/// there (as a kill would: no further command is sent) and ends its claim,
/// as time would. Asserts that it stopped before the flip.
async fn stop_mid_staging(pool: &PgPool, redis: &Redis, client: &fairjob::Client, bid: &str) {
    let pump = Pump::new(pool.clone(), client.clone());
    let running = tokio::spawn(async move { pump.pump_once().await });
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while batch_state(redis, bid).await.is_none() {
        assert!(std::time::Instant::now() < deadline, "staging never began");
        if running.is_finished() {
            panic!("the pump ended before staging: {:?}", running.await);
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    running.abort();
    assert!(running.await.unwrap_err().is_cancelled());
    assert_eq!(
        batch_state(redis, bid).await.as_deref(),
        Some("staging"),
        "the pump stopped mid-staging"
    );
    sqlx::query("UPDATE fairjob.outbox SET claimed_until = NULL")
        .execute(pool)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pump_killed_after_the_flip_and_its_successor_publish_the_batch_once() {
    let (pg, pool, redis) = setup().await;
    const ROWS: u32 = 400;
    let mut tx = pool.begin().await.unwrap();
    let bid = batch_of("killed", ROWS).commit_tx(&mut *tx).await.unwrap();
    tx.commit().await.unwrap();

    // A pump process that hangs between the batch's commit in Redis and its
    // DELETE, killed there.
    let mut first = std::process::Command::new(fairjob_tests::bin("test-worker"))
        .args(["-r", redis.url(), "--namespace", redis.ns()])
        .args(["pump", "--postgres", &pg.url()])
        .env(HANG_AFTER_PUSH_ENV, "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    eventually!(
        queued_jids(&redis, "pgb_rows").await.len() == ROWS as usize,
        "the first pump commits the batch"
    );
    first.kill().unwrap();
    first.wait().unwrap();
    assert_eq!(outbox_rows(&pool).await, 1, "killed before its DELETE");
    sqlx::query("UPDATE fairjob.outbox SET claimed_until = NULL")
        .execute(&pool)
        .await
        .unwrap();

    let client = redis.client().await;
    let stats = Pump::new(pool.clone(), client.clone())
        .pump_once()
        .await
        .unwrap();
    assert_eq!(
        (stats.batches, stats.failed),
        (1, 0),
        "the commit is repeated"
    );
    assert_eq!(outbox_rows(&pool).await, 0);
    let queued = queued_jids(&redis, "pgb_rows").await;
    assert_eq!(queued.len(), ROWS as usize);
    assert!(queued.values().all(|n| *n == 1), "each member pushed once");
    let status = client.batch_status(&bid).await.unwrap().unwrap();
    assert_eq!((status.total, status.staged), (ROWS as u64, 0));

    run_until(&redis, "the members and both callbacks run", || {
        runs("killed").len() >= ROWS as usize && callbacks("killed").len() >= 2
    })
    .await;
    assert_ran_once("killed", &bid, ROWS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_pumps_publish_every_batch_once_among_jobs() {
    let (_pg, pool, redis) = setup().await;
    let tags: Vec<String> = (0..6).map(|i| format!("two{i}")).collect();
    let mut bids = Vec::new();
    for (i, tag) in tags.iter().enumerate() {
        let mut tx = pool.begin().await.unwrap();
        bids.push(
            batch_of(tag, 150)
                .set_tenant(format!("t{}", i % 3))
                .commit_tx(&mut *tx)
                .await
                .unwrap(),
        );
        for n in 0..40 {
            Row {
                tag: format!("loose{i}"),
                n,
            }
            .set_tenant(format!("t{}", i % 3))
            .perform_async_tx(&mut *tx)
            .await
            .unwrap();
        }
        tx.commit().await.unwrap();
    }

    let mut handles = Vec::new();
    for _ in 0..2 {
        let pump = Pump::new(pool.clone(), redis.client().await).batch(25);
        handles.push(tokio::spawn(async move {
            let (mut batches, mut pushed) = (0, 0);
            loop {
                let s = pump.pump_once().await.unwrap();
                if s.claimed == 0 {
                    return (batches, pushed);
                }
                batches += s.batches;
                pushed += s.pushed;
            }
        }));
    }
    let (mut batches, mut pushed) = (0, 0);
    for h in handles {
        let (b, p) = h.await.unwrap();
        batches += b;
        pushed += p;
    }
    assert_eq!((batches, pushed), (6, 240), "each batch and job once");
    assert_eq!(outbox_rows(&pool).await, 0);
    let queued = queued_jids(&redis, "pgb_rows").await;
    assert_eq!(queued.len(), 6 * 150 + 240);
    assert!(queued.values().all(|n| *n == 1), "each member pushed once");

    run_until(&redis, "every batch's members and callbacks run", || {
        tags.iter()
            .all(|t| runs(t).len() >= 150 && callbacks(t).len() >= 2)
    })
    .await;
    for (tag, bid) in tags.iter().zip(&bids) {
        assert_ran_once(tag, bid, 150);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_the_pumping_client_refuses_is_kept_as_failed_until_fixed() {
    let (_pg, pool, redis) = setup().await;
    let strict = fairjob::Client::builder(redis.url())
        .namespace(redis.ns())
        .max_payload_bytes(1000)
        .build()
        .await
        .unwrap();
    let mut tx = pool.begin().await.unwrap();
    // Under commit_tx's 1 MiB, over this client's 1000 bytes.
    let bid = batch_of("refused_later", 2)
        .push(Row {
            tag: "x".repeat(2000),
            n: 2,
        })
        .commit_tx(&mut *tx)
        .await
        .unwrap();
    let other = batch_of("goes_on", 2).commit_tx(&mut *tx).await.unwrap();
    tx.commit().await.unwrap();

    let pump = Pump::new(pool.clone(), strict);
    let stats = pump.pump_once().await.unwrap();
    assert_eq!((stats.batches, stats.failed), (1, 1), "{stats:?}");
    assert!(
        redis
            .client()
            .await
            .batch_status(&other)
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(
        batch_state(&redis, &bid).await,
        None,
        "nothing of it is written: its members are prepared before anything is"
    );
    let error: String = sqlx::query_scalar(
        "SELECT error FROM fairjob.outbox WHERE jid = $1 AND failed_at IS NOT NULL",
    )
    .bind(&bid)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(error.contains("maximum of 1000 bytes"), "{error}");
    assert_eq!(
        pump.pump_once().await.unwrap().claimed,
        0,
        "a failed row is not retried by itself"
    );

    // The statement the error names hands it back; a client that allows it
    // commits it.
    let fix = error
        .split('`')
        .find(|part| part.starts_with("UPDATE fairjob.outbox"))
        .unwrap_or_else(|| panic!("the error names the statement: {error}"))
        .to_owned();
    sqlx::query(sqlx::AssertSqlSafe(fix))
        .execute(&pool)
        .await
        .unwrap();
    let stats = Pump::new(pool.clone(), redis.client().await)
        .pump_once()
        .await
        .unwrap();
    assert_eq!((stats.batches, stats.failed), (1, 0));
    let status = redis.client().await.batch_status(&bid).await.unwrap();
    assert_eq!(status.map(|s| s.total), Some(3));
    assert_eq!(outbox_rows(&pool).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_rows_not_started_within_a_quarter_of_the_lease_are_handed_back() {
    let (_pg, pool, redis) = setup().await;
    let mut tx = pool.begin().await.unwrap();
    for i in 0..3 {
        batch_of(&format!("lease{i}"), 50)
            .commit_tx(&mut *tx)
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
    // A lease so short that every step is past its quarter after one batch.
    let pump = Pump::new(pool.clone(), redis.client().await).lease(Duration::from_millis(1));
    for left in [2, 1, 0] {
        let stats = pump.pump_once().await.unwrap();
        assert_eq!(
            (stats.claimed, stats.batches),
            (left + 1, 1),
            "one batch per step, the first always"
        );
        assert_eq!(outbox_rows(&pool).await, left as i64);
        let claimed: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM fairjob.outbox WHERE claimed_until IS NOT NULL",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(claimed, 0, "the others' claims are ended at once");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_repeated_commit_pushes_the_callbacks_a_crash_left_due_once() {
    let pg = PostgresServer::start().expect("start a private PostgreSQL (initdb, pg_ctl)");
    let pool = PgPool::connect(&pg.url()).await.unwrap();
    migrate(&pool).await.unwrap();
    let cluster = fairjob::testing::RedisCluster::start(3, 0, &[]).expect("cluster starts");
    let c = fairjob::Client::builder(cluster.url())
        .namespace(fairjob_tests::namespace())
        .build()
        .await
        .unwrap();
    assert!(c.broker().is_cluster());
    // An empty batch fires `complete` and `success` at its flip; on a
    // cluster they wait in its due set for the committer to push them.
    let mut tx = pool.begin().await.unwrap();
    let bid = Batch::new()
        .on_complete(Callback { tag: "due".into() })
        .on_success(Callback { tag: "due".into() })
        .commit_tx(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    // The row as it is before the pump: what a pump killed before its
    // DELETE leaves.
    sqlx::query("CREATE TABLE kept AS SELECT * FROM fairjob.outbox")
        .execute(&pool)
        .await
        .unwrap();
    let pump = Pump::new(pool.clone(), c.clone());
    assert_eq!(pump.pump_once().await.unwrap().batches, 1);
    let queue = c.broker().keys().queue("pgb_callbacks");
    let queued = || async {
        let list: Vec<String> =
            fairjob_tests::query(c.broker(), redis::cmd("LRANGE").arg(&queue).arg(0).arg(-1))
                .await
                .unwrap();
        let mut events: Vec<String> = list
            .iter()
            .map(|p| {
                let v: serde_json::Value = serde_json::from_str(p).unwrap();
                v[fairjob::wire::fields::BATCH_EVENT]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        events.sort();
        events
    };
    assert_eq!(queued().await, ["complete", "success"]);

    // The state of a committer killed after the flip and before its push:
    // the callbacks due, not queued. The repeated commit pushes them.
    let due = c.broker().batch_due_record(&bid);
    let _: i64 = fairjob_tests::query(c.broker(), redis::cmd("DEL").arg(&queue))
        .await
        .unwrap();
    let _: i64 = fairjob_tests::query(
        c.broker(),
        redis::cmd("ZADD")
            .arg(&due)
            .arg(1)
            .arg("complete")
            .arg(1)
            .arg("success"),
    )
    .await
    .unwrap();
    for _ in 0..2 {
        sqlx::query("INSERT INTO fairjob.outbox SELECT * FROM kept")
            .execute(&pool)
            .await
            .unwrap();
        assert_eq!(pump.pump_once().await.unwrap().batches, 1);
        assert_eq!(
            queued().await,
            ["complete", "success"],
            "each callback pushed once, however often the commit repeats"
        );
    }
    let left: usize = fairjob_tests::query(c.broker(), redis::cmd("ZCARD").arg(&due))
        .await
        .unwrap();
    assert_eq!(left, 0, "nothing left due");
}

/// Takes a migrated database back to schema version 2, keeping its rows.
async fn downgrade_to_v2(pool: &PgPool) {
    sqlx::raw_sql(
        "ALTER TABLE fairjob.outbox DROP COLUMN kind;
         DELETE FROM fairjob.migrations WHERE version = 3;",
    )
    .execute(pool)
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schema_upgrade_from_version_2_keeps_rows_and_enables_batches() {
    let (_pg, pool, redis) = setup().await;
    downgrade_to_v2(&pool).await;
    let mut tx = pool.begin().await.unwrap();
    let before = Row {
        tag: "upgrade".into(),
        n: 0,
    }
    .perform_async_tx(&mut *tx)
    .await
    .unwrap();
    tx.commit().await.unwrap();

    // On version 2 a batch cannot be written: the caller's transaction
    // fails with the fix named, and nothing is half-written.
    let mut tx = pool.begin().await.unwrap();
    let err = batch_of("upgrade", 2)
        .commit_tx(&mut *tx)
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::SchemaNotReady { wanted: 3, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("postgres migrate"), "{err}");
    tx.rollback().await.unwrap();
    let err = Pump::new(pool.clone(), redis.client().await)
        .run(async {})
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::SchemaOutdated {
                found: 2,
                wanted: SCHEMA_VERSION
            }
        ),
        "{err:?}"
    );

    migrate(&pool).await.unwrap();
    fairjob_postgres::check_schema(&pool).await.unwrap();
    let kind: String = sqlx::query_scalar("SELECT kind FROM fairjob.outbox WHERE jid = $1")
        .bind(&before)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(kind, "job", "a row from before the upgrade is a job");
    let mut tx = pool.begin().await.unwrap();
    let bid = batch_of("upgrade", 2).commit_tx(&mut *tx).await.unwrap();
    tx.commit().await.unwrap();
    let stats = Pump::new(pool.clone(), redis.client().await)
        .pump_once()
        .await
        .unwrap();
    assert_eq!((stats.pushed, stats.batches), (1, 1));
    let queued = queued_jids(&redis, "pgb_rows").await;
    assert!(
        queued.contains_key(&before),
        "the job from before is pushed"
    );
    assert_eq!(queued.len(), 3);
    let status = redis.client().await.batch_status(&bid).await.unwrap();
    assert_eq!(status.map(|s| s.total), Some(2));
}
