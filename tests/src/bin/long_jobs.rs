//! The long-jobs scenario of the fairness report: time to first slot for a
//! newcomer tenant on a tenant-sharded queue whose every slot runs another
//! tenant's long iterable jobs, with fair yield off and on, side by side in
//! one run (alternating, each on a fresh redis-server, `--reps` times).
//!
//! Concurrency 4 (one `test-worker` process); tenant A enqueues 4
//! `ThronStepJob`s of `--steps` steps of 20 ms (slice 1 h); once all four run,
//! tenant B enqueues one job of 5 steps; the figure is B's enqueue → its first
//! step, read from the ledger. Prints one line per run (with Redis's SLOWLOG
//! over 1 ms for the run: fairjob's scripts must stay under it) and the medians.
//!
//! `cargo run -p fairjob-tests --bin long_jobs -- [--reps 3] [--steps 500]`

use std::time::{Duration, Instant};

use fairjob::Job;
use fairjob_tests::jobs::ThronStepJob;
use fairjob_tests::slowlog::{SlowLog, SlowReport};
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
    let mut a = Vec::new();
    for _ in 0..4 {
        let jid = ThronStepJob {
            tenant: "a".into(),
            steps,
            ms: 20,
        }
        .perform_async(&c)
        .await
        .expect("push");
        a.push(jid);
    }
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

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[tokio::main]
async fn main() {
    let reps: usize = flag("--reps", 3);
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
                "rep {rep}: fair yield {:<3}: newcomer's first slot after {w:.2} s; commands over 1 ms: {slow}",
                if fy { "on" } else { "off" }
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
