//! The long-jobs scenarios of the fairness report, each run on a fresh
//! redis-server with one `test-worker` process at concurrency 4 on the
//! tenant-sharded queue `thron` (`ThronStepJob`: iterable, steps of 20 ms,
//! slice 1 h, so only fair yield frees a slot).
//!
//! - `newcomer`: tenant A enqueues 4 jobs of `--steps` steps; once all four
//!   run, tenant B enqueues one job of 5 steps; the figure is B's enqueue →
//!   its first step, read from the ledger. Fair yield off and on alternate
//!   (`--reps` pairs); medians. Prints Redis's SLOWLOG over 1 ms per run.
//! - `weighted`: tenant A weight 3, tenant B weight 1, both with backlogs of
//!   long jobs (`--a-steps`, `--b-steps` steps each). B's backlog comes first
//!   and holds every slot; A's arrives; after `--settle` seconds the
//!   slot-time of each (the scheduler's running counts, sampled every 50 ms)
//!   is measured over `--secs` seconds, `--reps` runs; the A:B ratio of each
//!   and the median. Every command Redis runs is logged (SLOWLOG at 0 µs):
//!   `shard_yield.lua`'s calls, median, p99, slowest and calls over 1 ms.
//! - `lone`: tenant A alone with 16 jobs of `--lone-steps` steps of 1 ms
//!   (more jobs than slots: its own jobs wait); the figure is steps per
//!   second until all are done. Fair yield off and on alternate (`--reps`
//!   pairs); medians and the on/off ratio.
//!
//! `cargo run -p fairjob-tests --bin long_jobs -- [--only newcomer|weighted|lone]
//!   [--reps 3] [--steps 500] [--secs 180] [--settle 5] [--a-steps 150]
//!   [--b-steps 400] [--lone-steps 300]`

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use fairjob::Job;
use fairjob_tests::jobs::ThronStepJob;
use fairjob_tests::long_jobs::{running_of, slot_time, steps_of, thron_backlog};
use fairjob_tests::slowlog::{SlowLog, SlowReport, summarize};
use fairjob_tests::{Redis, flag, ledger_dir, step_ledger};

async fn first_slot(fair_yield: bool, steps: u64) -> (Duration, SlowReport) {
    let redis = Redis::start().await;
    let mut slow = SlowLog::start(redis.url(), 1000).await.expect("slowlog");
    let dir = ledger_dir("long-jobs");
    let c = redis.client().await;
    c.shard_policy("thron")
        .fair_yield(fair_yield)
        .apply()
        .await
        .expect("policy");
    let a = thron_backlog(&c, "a", 4, steps, 20).await;
    let mut w = redis
        .worker_process()
        .queues(["thron"])
        .concurrency(4)
        .ledger(&dir)
        .start();
    let count = |jid: &str| step_ledger(&dir).get(jid).map_or(0, Vec::len);
    let deadline = Instant::now() + Duration::from_secs(60);
    while a.iter().any(|j| count(j) < 5) {
        assert!(Instant::now() < deadline, "A's jobs never all ran");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let enqueued = Instant::now();
    let b = ThronStepJob {
        tenant: "b".into(),
        steps: 5,
        ms: 20,
    }
    .perform_async(&c)
    .await
    .expect("push");
    let deadline = Instant::now() + Duration::from_secs(600);
    while count(&b) == 0 {
        assert!(Instant::now() < deadline, "B never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let waited = enqueued.elapsed();
    // Two more seconds of ticks with both tenants running.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let report = slow.report().await.expect("slowlog");
    w.signal("KILL");
    w.wait_timeout(Duration::from_secs(5));
    (waited, report)
}

/// One weighted run: (A's slot-time / B's, A's steps / B's, the log of every
/// command's time).
async fn weighted(
    secs: u64,
    settle: u64,
    a_steps: u64,
    b_steps: u64,
) -> (f64, f64, BTreeMap<String, Vec<u64>>) {
    let redis = Redis::start().await;
    let dir = ledger_dir("long-jobs-weighted");
    let c = redis.client().await;
    c.shard_policy("thron")
        .tenant("a")
        .weight(3.0)
        .apply()
        .await
        .expect("policy");
    // Enough of each backlog for the whole window (4 slots).
    let per = |steps: u64| (4 * (secs + settle) * 1000 / (steps * 20)) as usize + 4;
    let mut jobs = BTreeMap::new();
    jobs.insert(
        "b".to_owned(),
        thron_backlog(&c, "b", per(b_steps), b_steps, 20).await,
    );
    let mut w = redis
        .worker_process()
        .queues(["thron"])
        .concurrency(4)
        .ledger(&dir)
        .start();
    let deadline = Instant::now() + Duration::from_secs(60);
    while running_of(&redis, "thron", &["b"]).await[0] < 4 {
        assert!(Instant::now() < deadline, "B's jobs never all ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    jobs.insert(
        "a".to_owned(),
        thron_backlog(&c, "a", per(a_steps), a_steps, 20).await,
    );
    tokio::time::sleep(Duration::from_secs(settle)).await;
    let mut slow = SlowLog::start_all(redis.url(), 200_000)
        .await
        .expect("slowlog");
    let before = steps_of(&dir, &jobs);
    let t = slot_time(&redis, "thron", &["a", "b"], Duration::from_secs(secs)).await;
    let after = steps_of(&dir, &jobs);
    let times = slow.times().await.expect("slowlog");
    let counts: Vec<(String, String)> = redis
        .query(redis::cmd("HGETALL").arg(redis.keys().shard("thron").yields))
        .await;
    let ledger = step_ledger(&dir);
    let runs = |t: &str| {
        jobs[t]
            .iter()
            .map(|j| {
                ledger.get(j).map_or(0, |s| {
                    s.iter()
                        .map(|(_, r)| r)
                        .collect::<std::collections::BTreeSet<_>>()
                        .len()
                })
            })
            .sum::<usize>()
    };
    println!(
        "  yield counts {counts:?}; runs A {} B {}",
        runs("a"),
        runs("b")
    );
    w.signal("KILL");
    w.wait_timeout(Duration::from_secs(5));
    let steps = |t: &str| (after[t] - before[t]) as f64;
    (t["a"] / t["b"], steps("a") / steps("b"), times)
}

/// One lone-tenant run: steps per second.
async fn lone(fair_yield: bool, steps: u64) -> f64 {
    let redis = Redis::start().await;
    let dir = ledger_dir("long-jobs-lone");
    let c = redis.client().await;
    c.shard_policy("thron")
        .fair_yield(fair_yield)
        .apply()
        .await
        .expect("policy");
    let a = thron_backlog(&c, "a", 16, steps, 1).await;
    let start = Instant::now();
    let mut w = redis
        .worker_process()
        .queues(["thron"])
        .concurrency(4)
        .ledger(&dir)
        .start();
    let count = || {
        let l = step_ledger(&dir);
        a.iter()
            .map(|j| l.get(j).map_or(0, Vec::len))
            .sum::<usize>()
    };
    let total = 16 * steps as usize;
    let deadline = Instant::now() + Duration::from_secs(600);
    while count() < total {
        assert!(Instant::now() < deadline, "A's jobs never finished");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let rate = total as f64 / start.elapsed().as_secs_f64();
    let asked: Vec<(String, String)> = redis
        .query(redis::cmd("HGETALL").arg(redis.keys().shard("thron").yields))
        .await;
    assert!(
        asked.is_empty(),
        "a lone tenant was asked to yield: {asked:?}"
    );
    w.signal("KILL");
    w.wait_timeout(Duration::from_secs(5));
    rate
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split(' ').take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

#[tokio::main]
async fn main() {
    let only: String = flag("--only", String::new());
    let reps: usize = flag("--reps", 3);
    let run = |phase: &str| only.is_empty() || only == phase;
    if run("newcomer") {
        let steps: u64 = flag("--steps", 500);
        let mut off = Vec::new();
        let mut on = Vec::new();
        for rep in 0..reps {
            // Alternate which mode goes first.
            let order = if rep % 2 == 0 {
                [false, true]
            } else {
                [true, false]
            };
            for fy in order {
                let (w, slow) = first_slot(fy, steps).await;
                let w = w.as_secs_f64();
                println!(
                    "rep {rep}: fair yield {:<3}: newcomer's first slot after {w:.2} s; commands over 1 ms: {slow}; load {}",
                    if fy { "on" } else { "off" },
                    load()
                );
                if fy { on.push(w) } else { off.push(w) }
            }
        }
        let (m_off, m_on) = (median(off.clone()), median(on.clone()));
        println!(
            "long jobs ({steps} steps x 20 ms each, concurrency 4, {reps} reps): time to first slot for a newcomer tenant, median: fair yield off {m_off:.2} s, on {m_on:.2} s (x{:.1} sooner); off {off:.2?}, on {on:.2?}",
            m_off / m_on
        );
    }
    if run("weighted") {
        let secs: u64 = flag("--secs", 180);
        let settle: u64 = flag("--settle", 5);
        let a_steps: u64 = flag("--a-steps", 150);
        let b_steps: u64 = flag("--b-steps", 400);
        let mut ratios = Vec::new();
        let mut step_ratios = Vec::new();
        let mut ticks: Vec<u64> = Vec::new();
        for rep in 0..reps {
            let (r, s, times) = weighted(secs, settle, a_steps, b_steps).await;
            println!(
                "rep {rep}: weighted 3:1 over {secs} s: slot-time A:B = {r:.2}:1, steps A:B = {s:.2}:1; shard_yield.lua: {}; load {}",
                times.get("shard_yield.lua").map_or(0, Vec::len),
                load()
            );
            println!(
                "{}",
                summarize(
                    &times,
                    &["shard_yield.lua", "shard_yield_ask.lua", "shard_fetch.lua"],
                    1000
                )
            );
            ticks.extend(times.get("shard_yield.lua").cloned().unwrap_or_default());
            ratios.push(r);
            step_ratios.push(s);
        }
        let mut all = BTreeMap::new();
        all.insert("shard_yield.lua".to_owned(), ticks);
        println!(
            "weighted 3:1 (A {a_steps} x 20 ms jobs, B {b_steps} x 20 ms jobs, B first; concurrency 4; {secs} s after {settle} s, {reps} reps): slot-time A:B median {:.2}:1 ({ratios:.2?}), steps A:B median {:.2}:1 ({step_ratios:.2?})",
            median(ratios.clone()),
            median(step_ratios.clone())
        );
        println!(
            "shard_yield.lua over all runs (calls, median µs, p99 µs, slowest µs, over 1 ms):\n{}",
            summarize(&all, &["shard_yield.lua"], 1000)
        );
    }
    if run("lone") {
        let steps: u64 = flag("--lone-steps", 300);
        let mut off = Vec::new();
        let mut on = Vec::new();
        for rep in 0..reps {
            let order = if rep % 2 == 0 {
                [false, true]
            } else {
                [true, false]
            };
            for fy in order {
                let r = lone(fy, steps).await;
                println!(
                    "rep {rep}: lone tenant, fair yield {:<3}: {r:.0} steps/s; load {}",
                    if fy { "on" } else { "off" },
                    load()
                );
                if fy { on.push(r) } else { off.push(r) }
            }
        }
        let (m_off, m_on) = (median(off.clone()), median(on.clone()));
        println!(
            "lone tenant (16 jobs x {steps} steps x 1 ms, concurrency 4, {reps} pairs): steps/s median: fair yield off {m_off:.0}, on {m_on:.0} (on/off {:.3}); off {off:.0?}, on {on:.0?}",
            m_on / m_off
        );
    }
}
