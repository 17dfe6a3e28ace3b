//! Slot-limit overhead: 1,000 jobs on 10 keys with limit 2 against the same jobs
//! with no limit, side by side on private redis-servers, and Redis commands per job.
//!
//! `cargo run --release -p fairjob-tests --bin slots_bench -- [--jobs 1000] [--keys 10] [--ms 5] [--concurrency 20] [--reps 3]`

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use fairjob::Registry;
use fairjob_tests::flag;
use fairjob_tests::slot_jobs::{BENCH_DONE, BenchFreeJob, BenchSlotJob};

/// (all commands, script calls) from `INFO commandstats`.
async fn commands(url: &str) -> (u64, u64) {
    let all = fairjob_tests::redis_commands(url).await;
    let scripts = fairjob_tests::redis_command_calls(url)
        .await
        .into_iter()
        .filter(|(name, _)| matches!(name.as_str(), "evalsha" | "eval" | "fcall"))
        .map(|(_, calls)| calls)
        .sum();
    (all, scripts)
}

async fn run(
    limited: bool,
    jobs: u64,
    keys: u64,
    ms: u64,
    concurrency: usize,
) -> (Duration, f64, f64) {
    let server = fairjob_tests::redis();
    let url = server.url();
    let client = fairjob::Client::connect(&url).await.unwrap();
    let limited_jobs = (0..jobs).map(|i| BenchSlotJob {
        key: format!("k{}", i % keys),
        ms,
    });
    if limited {
        client.push_bulk(limited_jobs).await.unwrap();
    } else {
        client
            .push_bulk(limited_jobs.map(BenchFreeJob))
            .await
            .unwrap();
    }
    let mut registry = Registry::new();
    registry.register::<BenchSlotJob>().unwrap();
    registry.register::<BenchFreeJob>().unwrap();
    let worker = fairjob::Worker::builder(&url)
        .registry(registry)
        .queues(fairjob_tests::queues(&["bench_slots"]))
        .concurrency(concurrency)
        .poll_interval(Duration::from_millis(50))
        .scheduled_poll_interval(Duration::from_secs(5))
        .build()
        .await
        .unwrap();
    let mut c = fairjob_tests::raw(&url).await;
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut c)
        .await
        .unwrap();
    BENCH_DONE.store(0, Ordering::SeqCst);
    let started = Instant::now();
    let target = jobs as usize;
    let task = tokio::spawn(worker.run_until(async move {
        while BENCH_DONE.load(Ordering::SeqCst) < target {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }));
    while BENCH_DONE.load(Ordering::SeqCst) < target {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let wall = started.elapsed();
    let (all, scripts) = commands(&url).await;
    task.await.unwrap().unwrap();
    (wall, all as f64 / jobs as f64, scripts as f64 / jobs as f64)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

#[tokio::main]
async fn main() {
    let (jobs, keys, ms) = (flag("--jobs", 1000), flag("--keys", 10), flag("--ms", 5));
    let concurrency = flag("--concurrency", 20) as usize;
    let reps = flag("--reps", 3);
    let (mut lim, mut free, mut lim_cmds, mut free_cmds) = (vec![], vec![], vec![], vec![]);
    let (mut lim_scripts, mut free_scripts) = (vec![], vec![]);
    for _ in 0..reps {
        let (w, c, s) = run(true, jobs, keys, ms, concurrency).await;
        lim.push(w.as_secs_f64());
        lim_cmds.push(c);
        lim_scripts.push(s);
        let (w, c, s) = run(false, jobs, keys, ms, concurrency).await;
        free.push(w.as_secs_f64());
        free_cmds.push(c);
        free_scripts.push(s);
    }
    let (l, f) = (median(lim), median(free));
    println!(
        "{jobs} jobs of {ms} ms on {keys} keys, one worker at concurrency {concurrency}, median of {reps}:"
    );
    println!("| | wall s | script calls per job | Redis commands per job (incl. inside scripts) |");
    println!("|---|---|---|---|");
    println!(
        "| limit 2 per key | {l:.3} | {:.2} | {:.2} |",
        median(lim_scripts),
        median(lim_cmds)
    );
    println!(
        "| no limit | {f:.3} | {:.2} | {:.2} |",
        median(free_scripts),
        median(free_cmds)
    );
    println!("| ratio | {:.2} | | |", l / f);
}
