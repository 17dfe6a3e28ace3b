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
//!   is counted as ignored; the job is not killed and yields after its step;
//!   explain (library and CLI) shows the pending request and its reason.
//! - Weighted 3:1, both tenants with backlogs of long iterable jobs (B's
//!   longer than A's, B's first holding every slot) → slot-time within ±10%
//!   of 3:1 (the scheduler's running counts, sampled over 40 s).
//! - A plain job that polls `cx.should_yield()` is asked like an iterable one.
//! - A bursting tenant and another whose bursts come and go: no job is asked
//!   twice within the cool-down, so its yields per minute stay under the bound.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use fairjob::Job;
use fairjob::inspect::{Page, Reason};
use fairjob_tests::jobs::{ThronPlainJob, ThronStepJob};
use fairjob_tests::long_jobs::{running_of, slot_time, steps_of, thron_backlog};
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
    // Explain shows the request while the job still runs its 5 s step.
    let e = c
        .inspector()
        .explain(&a, None, None, None, &[])
        .await
        .unwrap();
    let asked = e.reasons.iter().find_map(|r| match r {
        Reason::YieldRequested { why, ignored, .. } => Some((why.clone(), *ignored)),
        _ => None,
    });
    // (Unhonoured past the cool-down, it may have been asked again since.)
    assert_eq!(
        asked.map(|(why, _)| why),
        Some(Some("share".to_owned())),
        "{:?}",
        e.reasons
    );
    let it = e.iteration.expect("progress");
    assert_eq!(it.yield_reason.as_deref(), Some("share"), "{it:?}");
    assert!(it.yield_asked_at.is_some(), "{it:?}");
    // So does the busy view's progress of the running job.
    let busy = c.inspector().processes(Page::first(10)).await.unwrap();
    let it = busy
        .rows
        .iter()
        .flat_map(|r| r.jobs.iter())
        .find(|j| j.jid == a)
        .and_then(|j| j.iteration.clone())
        .expect("the busy view shows A's job with its progress");
    assert_eq!(it.yield_reason.as_deref(), Some("share"), "{it:?}");
    assert!(it.yield_asked_at.is_some() && it.executions == 1, "{it:?}");
    let said = redis.cli(&["explain", &a]);
    assert!(
        said.contains("asked to yield at") && said.contains("reason share"),
        "{said}"
    );
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weighted_three_to_one_holds_slot_time_with_both_tenants_long_backlogs() {
    const WINDOW: Duration = Duration::from_secs(40);
    let redis = Redis::start().await;
    let dir = ledger_dir("fy-weighted");
    let c = redis.client().await;
    c.shard_policy("thron")
        .tenant("a")
        .weight(3.0)
        .apply()
        .await
        .unwrap();
    // B's jobs run longer than A's (400 and 150 steps of 20 ms): stride order
    // counts starts, so alone it would give B more than its quarter of
    // slot-time; B's backlog comes first and holds every slot.
    let mut jobs: BTreeMap<String, Vec<String>> = BTreeMap::new();
    jobs.insert("b".into(), thron_backlog(&c, "b", 12, 400, 20).await);
    let w = MetricsWorker::start(
        &redis
            .worker_process()
            .queues(["thron"])
            .concurrency(4)
            .ledger(&dir),
    );
    eventually!(
        running_of(&redis, "thron", &["b"]).await == [4],
        "B's backlog holds every slot"
    );
    jobs.insert("a".into(), thron_backlog(&c, "a", 60, 150, 20).await);
    eventually!(
        within Duration::from_secs(10),
        running_of(&redis, "thron", &["a", "b"]).await == [3, 1],
        "A (weight 3) takes three slots from B"
    );
    let before = steps_of(&dir, &jobs);
    let t = slot_time(&redis, "thron", &["a", "b"], WINDOW).await;
    let after = steps_of(&dir, &jobs);
    let ratio = t["a"] / t["b"];
    let steps = |t: &str| (after[t] - before[t]) as f64;
    println!(
        "weighted 3:1 over {} s: slot-time A {:.1} s, B {:.1} s (A:B {ratio:.2}:1); steps A:B {:.2}:1",
        WINDOW.as_secs(),
        t["a"],
        t["b"],
        steps("a") / steps("b")
    );
    assert!(
        (2.7..=3.3).contains(&ratio),
        "slot-time A:B {ratio:.2}:1 is not within 10% of 3:1 ({t:?})"
    );
    // Work conserving: the four slots were busy.
    let busy = t["a"] + t["b"];
    assert!(
        busy > 3.6 * WINDOW.as_secs_f64(),
        "slots idle: {busy:.1} slot-s"
    );
    let mut w = w.process;
    assert!(w.stop().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_job_that_polls_should_yield_is_asked_like_an_iterable_one() {
    const STEPS: u64 = 300;
    let redis = Redis::start().await;
    let dir = ledger_dir("fy-plain");
    let c = redis.client().await;
    let mut a = Vec::new();
    for _ in 0..2 {
        let jid = ThronPlainJob {
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
            .concurrency(2)
            .ledger(&dir),
    );
    eventually!(
        let n = a.iter().filter(|j| step_count(&dir, j) >= 5).count(); n == 2,
        "tenant A's plain jobs hold both slots"
    );
    let enqueued = Instant::now();
    let b = ThronPlainJob {
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
        "tenant B's job starts while A's plain jobs still run"
    );
    let a_left = a
        .iter()
        .filter(|j| step_count(&dir, j) < STEPS as usize)
        .count();
    println!(
        "fair yield (plain jobs polling should_yield): tenant B started {:.2} s after its enqueue ({a_left} of A's 2 jobs unfinished then)",
        enqueued.elapsed().as_secs_f64()
    );
    assert!(a_left > 0, "B started before A's jobs ended on their own");
    eventually!(
        within Duration::from_secs(60),
        let done = a.iter().filter(|j| step_count(&dir, j) >= STEPS as usize).count()
            + usize::from(step_count(&dir, &b) >= 5);
        done == 3,
        "A's jobs and B's job all finish"
    );
    let all = step_ledger(&dir);
    for jid in &a {
        exactly_once_in_order(&all[jid], STEPS);
    }
    let runs: BTreeSet<&String> = a
        .iter()
        .flat_map(|j| all[j].iter().map(|(_, r)| r))
        .collect();
    assert!(
        runs.len() > 2,
        "one of A's jobs yielded and resumed: {runs:?}"
    );
    let scrape = w.scrape();
    assert!(scrape.value("fairjob_yield_requests_total", &[("reason", "share")]) >= 1.0);
    // A plain job's own yield (`JobError::yield_now()`).
    assert!(scrape.value("fairjob_yields_total", &[("reason", "job")]) >= 1.0);
    eventually!(
        let counts = yield_counts(&redis).await;
        counts.iter().any(|(k, v)| k == "h:a" && v != "0"),
        "the request to A's plain job is counted as honoured"
    );
    let mut w = w.process;
    assert!(w.stop().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alternating_bursts_ask_no_job_twice_within_the_cool_down() {
    const COOLDOWN: Duration = Duration::from_secs(10);
    const BURSTS: u32 = 12;
    const EVERY: Duration = Duration::from_secs(3);
    let redis = Redis::start().await;
    let dir = ledger_dir("fy-bursts");
    let c = redis.client().await;
    // Both tenants may burst to 4 while alone, and are held at 2 when the
    // other waits; A has four long jobs (past the test), B's work comes in
    // bursts of two 1 s jobs every 3 s: A bursts in between.
    for t in ["a", "b"] {
        c.shard_policy("thron")
            .tenant(t)
            .cap(2)
            .burst(4)
            .apply()
            .await
            .unwrap();
    }
    let a = thron_backlog(&c, "a", 4, 5000, 20).await;
    let w = MetricsWorker::start(
        &redis
            .worker_process()
            .queues(["thron"])
            .concurrency(4)
            .ledger(&dir),
    );
    eventually!(
        running_of(&redis, "thron", &["a"]).await == [4],
        "alone, A bursts to 4"
    );
    let start = Instant::now();
    let mut b = Vec::new();
    for i in 0..BURSTS {
        tokio::time::sleep_until((start + EVERY * i).into()).await;
        b.extend(thron_backlog(&c, "b", 2, 50, 20).await);
    }
    tokio::time::sleep(EVERY).await;
    let window = start.elapsed();
    let all = step_ledger(&dir);
    let runs = |jid: &str| {
        all.get(jid).map_or(0, |s| {
            s.iter().map(|(_, r)| r).collect::<BTreeSet<_>>().len()
        })
    };
    // Yields of A's jobs (slice 1 h, no shutdown: each yield was asked).
    let yields: Vec<usize> = a.iter().map(|j| runs(j).saturating_sub(1)).collect();
    let b_done = b.iter().filter(|j| step_count(&dir, j) >= 50).count();
    let minutes = window.as_secs_f64() / 60.0;
    let bound = (window.as_secs_f64() / COOLDOWN.as_secs_f64()).floor() as usize + 1;
    println!(
        "alternating bursts over {:.0} s: yields of A's jobs {yields:?} ({:.1} per job per minute at most; the cool-down allows {bound} in this window, {:.1} per minute); B's jobs done {b_done} of {}",
        window.as_secs_f64(),
        *yields.iter().max().unwrap() as f64 / minutes,
        60.0 / COOLDOWN.as_secs_f64() + 1.0,
        b.len()
    );
    assert!(
        yields.iter().sum::<usize>() >= 2,
        "A's burst was asked back: {yields:?}"
    );
    assert!(
        yields.iter().all(|&y| y <= bound),
        "a job of A yielded more often than its cool-down allows: {yields:?} > {bound}"
    );
    assert!(b_done >= 2, "B's bursts ran: {b_done}");
    let mut w = w.process;
    assert!(w.stop().is_some());
}
