//! Fair yield and bursting on a tenant-sharded queue, with real worker
//! processes. `ThronStepJob` is an `#[iterable]` job with a slice of an hour,
//! so only fair yield (or a shutdown) makes it give its slot back; it writes
//! `step <jid>:<n>:<run> <pid>` per step to the ledger.
//!
//! - THRON's scenario: concurrency 4, tenant A holds every slot with long
//!   iterable jobs; tenant B enqueues one job → B starts (the time is
//!   printed; the bound is generous, no timed assertion), A's jobs all
//!   finish, and every step of A ran exactly once.
//! - A lone tenant is never asked to yield.
//! - Bursting: A alone runs `burst` jobs; B arrives → A is back at its `cap`
//!   (and a yielded job keeps its `enqueued_at` and records its requeue).
//! - A request a job can't honour within the cool-down (its step is longer)
//!   is counted as ignored; the job is not killed and yields after its step.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use fairjob::Job;
use fairjob_tests::jobs::ThronStepJob;
use fairjob_tests::metrics::MetricsWorker;
use fairjob_tests::{Redis, eventually, ledger_dir, step_ledger};

fn step_count(dir: &std::path::Path, jid: &str) -> usize {
    step_ledger(dir).get(jid).map_or(0, Vec::len)
}

/// Each of `0..n` exactly once, each run's steps consecutive.
fn exactly_once_in_order(seen: &[(u64, String)], n: u64) {
    let mut got: Vec<u64> = seen.iter().map(|(s, _)| *s).collect();
    got.sort_unstable();
    assert_eq!(got, (0..n).collect::<Vec<_>>(), "each step once");
    let mut last: std::collections::BTreeMap<&str, u64> = Default::default();
    for (s, run) in seen {
        if let Some(prev) = last.insert(run, *s) {
            assert_eq!(*s, prev + 1, "run {run}: step {s} after {prev}");
        }
    }
}

async fn running(redis: &Redis, tenant: &str) -> u32 {
    let key = redis.keys().shard("thron").running;
    let v: Option<u32> = redis.query(redis::cmd("HGET").arg(key).arg(tenant)).await;
    v.unwrap_or(0)
}

async fn yield_counts(redis: &Redis) -> Vec<(String, String)> {
    let key = redis.keys().shard("thron").yields;
    redis.query(redis::cmd("HGETALL").arg(key)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thron_a_newcomer_tenant_starts_while_another_holds_every_slot() {
    const STEPS: u64 = 300;
    let redis = Redis::start().await;
    let dir = ledger_dir("fy-thron");
    let c = redis.client().await;
    let mut a = Vec::new();
    for _ in 0..4 {
        let jid = ThronStepJob {
            tenant: "a".into(),
            steps: STEPS,
            ms: 20,
        }
        .perform_async(&c)
        .await
        .unwrap();
        a.push(jid);
    }
    let w = MetricsWorker::start(
        &redis
            .worker_process()
            .queues(["thron"])
            .concurrency(4)
            .ledger(&dir),
    );
    eventually!(
        let n = a.iter().filter(|j| step_count(&dir, j) >= 5).count(); n == 4,
        "tenant A holds all four slots"
    );
    let enqueued = Instant::now();
    let b = ThronStepJob {
        tenant: "b".into(),
        steps: 5,
        ms: 20,
    }
    .perform_async(&c)
    .await
    .unwrap();
    eventually!(
        within Duration::from_secs(10),
        step_count(&dir, &b) >= 1,
        "tenant B's job starts while A's jobs are still running"
    );
    let waited = enqueued.elapsed();
    let a_left = a
        .iter()
        .filter(|j| step_count(&dir, j) < STEPS as usize)
        .count();
    println!(
        "fair yield (THRON): tenant B started {:.2} s after its enqueue, with every slot held by tenant A ({a_left} of A's jobs unfinished then)",
        waited.as_secs_f64()
    );
    assert!(a_left > 0, "B started before A's jobs ended on their own");
    eventually!(
        within Duration::from_secs(60),
        let done = a.iter().filter(|j| step_count(&dir, j) >= STEPS as usize).count()
            + usize::from(step_count(&dir, &b) >= 5);
        done == 5,
        "A's jobs and B's job all finish"
    );
    let all = step_ledger(&dir);
    for jid in &a {
        exactly_once_in_order(&all[jid], STEPS);
    }
    exactly_once_in_order(&all[&b], 5);
    let runs: BTreeSet<&String> = a
        .iter()
        .flat_map(|j| all[j].iter().map(|(_, r)| r))
        .collect();
    assert!(
        runs.len() > 4,
        "one of A's jobs yielded and resumed: runs {runs:?}"
    );

    let scrape = w.scrape();
    let asked = scrape.value("fairjob_yield_requests_total", &[("reason", "share")]);
    assert!(asked >= 1.0, "a share request was counted: {asked}");
    assert!(
        scrape.value("fairjob_yields_total", &[("reason", "asked")]) >= 1.0,
        "and honoured"
    );
    assert!(scrape.has("fairjob_shard_slot_wait_seconds"));
    eventually!(
        let counts = yield_counts(&redis).await;
        counts.iter().any(|(k, v)| k == "r:a" && v != "0")
            && counts.iter().any(|(k, v)| k == "h:a" && v != "0"),
        "requested and honoured are counted for tenant A"
    );
    let mut w = w.process;
    assert!(w.stop().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_tenant_is_never_asked_to_yield() {
    const STEPS: u64 = 100;
    let redis = Redis::start().await;
    let dir = ledger_dir("fy-lone");
    let c = redis.client().await;
    let mut a = Vec::new();
    for _ in 0..4 {
        let jid = ThronStepJob {
            tenant: "a".into(),
            steps: STEPS,
            ms: 20,
        }
        .perform_async(&c)
        .await
        .unwrap();
        a.push(jid);
    }
    // Two slots for four jobs: two wait the whole time, behind their own tenant.
    let w = MetricsWorker::start(
        &redis
            .worker_process()
            .queues(["thron"])
            .concurrency(2)
            .ledger(&dir),
    );
    eventually!(
        within Duration::from_secs(60),
        let done = a.iter().filter(|j| step_count(&dir, j) >= STEPS as usize).count(); done == 4,
        "every job finishes"
    );
    let all = step_ledger(&dir);
    for jid in &a {
        exactly_once_in_order(&all[jid], STEPS);
        let runs: BTreeSet<&String> = all[jid].iter().map(|(_, r)| r).collect();
        assert_eq!(runs.len(), 1, "{jid} ran in one go: {runs:?}");
    }
    let scrape = w.scrape();
    assert_eq!(scrape.value("fairjob_yield_requests_total", &[]), 0.0);
    assert_eq!(scrape.value("fairjob_yields_total", &[]), 0.0);
    assert!(yield_counts(&redis).await.is_empty(), "no requests counted");
    let mut w = w.process;
    assert!(w.stop().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bursting_tenant_comes_back_to_its_cap_when_another_arrives() {
    let redis = Redis::start().await;
    let dir = ledger_dir("fy-burst");
    let c = redis.client().await;
    c.shard_policy("thron")
        .tenant("a")
        .cap(2)
        .burst(4)
        .apply()
        .await
        .unwrap();
    for _ in 0..6 {
        ThronStepJob {
            tenant: "a".into(),
            steps: 2000,
            ms: 20,
        }
        .perform_async(&c)
        .await
        .unwrap();
    }
    let w = MetricsWorker::start(
        &redis
            .worker_process()
            .queues(["thron"])
            .concurrency(4)
            .ledger(&dir),
    );
    eventually!(
        let n = running(&redis, "a").await; n == 4,
        "alone, tenant A runs its burst of 4 (cap 2)"
    );
    // Still 4 a while later: alone, nobody asks it to yield.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(running(&redis, "a").await, 4, "a lone burst is left alone");
    let arrived = Instant::now();
    for _ in 0..4 {
        ThronStepJob {
            tenant: "b".into(),
            steps: 2000,
            ms: 20,
        }
        .perform_async(&c)
        .await
        .unwrap();
    }
    eventually!(
        within Duration::from_secs(10),
        let both = (running(&redis, "a").await, running(&redis, "b").await);
        both == (2, 2),
        "A back at its cap, B in the freed slots"
    );
    println!(
        "bursting: tenant A back from its burst (4) to its cap (2) {:.2} s after tenant B arrived",
        arrived.elapsed().as_secs_f64()
    );
    let scrape = w.scrape();
    assert!(scrape.value("fairjob_yield_requests_total", &[("reason", "burst")]) >= 2.0);
    // The shards view shows the burst and the requests.
    let view = c
        .inspector()
        .shard_tenants("thron", &[Some("a")])
        .await
        .unwrap();
    let row = &view.rows[0];
    assert_eq!(row.burst, Some(4));
    assert!(row.yields_requested >= 2, "{row:?}");

    let mut w = w.process;
    assert!(w.stop().is_some());
    // A yielded job keeps its first enqueue time and records its requeue.
    let list = redis.keys().shard("thron").tenant_list(Some("a"));
    let payloads: Vec<String> = redis
        .query(redis::cmd("LRANGE").arg(list).arg(0).arg(-1))
        .await;
    let requeued: Vec<serde_json::Value> = payloads
        .iter()
        .map(|p| serde_json::from_str::<serde_json::Value>(p).unwrap())
        .filter(|p| p.get("fairjob_requeued_at").is_some())
        .collect();
    assert!(!requeued.is_empty(), "yielded jobs are back in A's list");
    for p in requeued {
        let first = p["enqueued_at"].as_f64().unwrap();
        let again = p["fairjob_requeued_at"].as_f64().unwrap();
        assert!(again > first + 1.0, "{p}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_not_honoured_in_time_is_counted_and_the_job_is_not_killed() {
    let redis = Redis::start().await;
    let dir = ledger_dir("fy-ignored");
    let c = redis.client().await;
    c.shard_policy("thron")
        .yield_cooldown(Duration::from_millis(1000))
        .apply()
        .await
        .unwrap();
    // Steps of 5 s: the job can only yield between them.
    let a = ThronStepJob {
        tenant: "a".into(),
        steps: 2,
        ms: 5000,
    }
    .perform_async(&c)
    .await
    .unwrap();
    let w = MetricsWorker::start(
        &redis
            .worker_process()
            .queues(["thron"])
            .concurrency(1)
            .ledger(&dir),
    );
    eventually!(running(&redis, "a").await == 1, "A's job runs");
    let b = ThronStepJob {
        tenant: "b".into(),
        steps: 1,
        ms: 10,
    }
    .perform_async(&c)
    .await
    .unwrap();
    eventually!(
        within Duration::from_secs(15),
        let counts = yield_counts(&redis).await;
        counts.iter().any(|(k, v)| k == "i:a" && v != "0"),
        "the request A's job left unhonoured past the cool-down is counted"
    );
    assert!(
        w.scrape().value("fairjob_yield_ignored_total", &[]) >= 1.0,
        "and in the metric"
    );
    let view = c
        .inspector()
        .shard_tenants("thron", &[Some("a")])
        .await
        .unwrap();
    assert!(view.rows[0].yields_ignored >= 1, "{:?}", view.rows[0]);
    // Not killed: it yields after its step, B runs, then A finishes, each step once.
    eventually!(
        within Duration::from_secs(30),
        step_count(&dir, &b) == 1 && step_count(&dir, &a) == 2,
        "B ran and A finished"
    );
    let all = step_ledger(&dir);
    exactly_once_in_order(&all[&a], 2);
    let mut w = w.process;
    assert!(w.stop().is_some());
}
