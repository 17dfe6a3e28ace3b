//! Rate-limit overhead and precision, on private redis-servers.
//!
//! 1. Overhead: `--jobs` jobs with a rate limit far above what they reach
//!    (1,000,000/s per key, `--keys` keys) against the same jobs with none,
//!    alternating, median of `--reps`: jobs/s and Redis commands per job.
//! 2. Precision: `--paced` jobs of one key held at 50/s: the achieved rate
//!    and the most starts in any 1-second window.
//! 3. Many keys: `--many` keys at 1/s with 3 jobs each (2 of them wait):
//!    how long until all ran, and Redis's SLOWLOG of commands over 1 ms.
//!
//! `cargo run --release -p fairjob-tests --bin rates_bench -- [--jobs 2000] [--keys 10] [--concurrency 20] [--reps 3] [--paced 250] [--many 10000]`

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use fairjob::Registry;
use fairjob_tests::flag;
use fairjob_tests::rate_jobs::{
    BenchKeyedJob, BenchPacedJob, BenchRateJob, BenchUnratedJob, RATE_BENCH_DONE, RATE_BENCH_STARTS,
};
use fairjob_tests::slowlog::SlowLog;

#[derive(Clone, Copy)]
enum Kind {
    Limited,
    Free,
    Paced,
    Many,
}

async fn commands(url: &str) -> u64 {
    let mut c = fairjob_tests::raw(url).await;
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut c)
        .await
        .unwrap();
    info.lines()
        .filter(|l| {
            l.starts_with("cmdstat_")
                && !l.starts_with("cmdstat_info")
                && !l.starts_with("cmdstat_config")
        })
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

async fn run(kind: Kind, jobs: u64, keys: u64, concurrency: usize) -> (Duration, f64) {
    let server = fairjob_tests::redis();
    let url = server.url();
    let client = fairjob::Client::connect(&url).await.unwrap();
    let limited = (0..jobs).map(|i| BenchRateJob {
        key: format!("k{}", i % keys),
    });
    match kind {
        Kind::Limited => {
            client.push_bulk(limited).await.unwrap();
        }
        Kind::Free => {
            client
                .push_bulk(limited.map(BenchUnratedJob))
                .await
                .unwrap();
        }
        Kind::Paced => {
            client
                .push_bulk((0..jobs).map(|_| BenchPacedJob))
                .await
                .unwrap();
        }
        Kind::Many => {
            for chunk in (0..jobs as u32).collect::<Vec<_>>().chunks(1000) {
                client
                    .push_bulk(chunk.iter().map(|&i| BenchKeyedJob { key: i / 3 }))
                    .await
                    .unwrap();
            }
        }
    };
    let mut registry = Registry::new();
    registry.register::<BenchRateJob>().unwrap();
    registry.register::<BenchUnratedJob>().unwrap();
    registry.register::<BenchPacedJob>().unwrap();
    registry.register::<BenchKeyedJob>().unwrap();
    let worker = fairjob::Worker::builder(&url)
        .registry(registry)
        .queues(fairjob_tests::queues(&["bench_rates"]))
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
    let mut slow = SlowLog::start(&url, 1000).await.unwrap();
    RATE_BENCH_DONE.store(0, Ordering::SeqCst);
    RATE_BENCH_STARTS.lock().unwrap().clear();
    let started = Instant::now();
    let target = jobs as usize;
    let task = tokio::spawn(worker.run_until(async move {
        while RATE_BENCH_DONE.load(Ordering::SeqCst) < target {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }));
    while RATE_BENCH_DONE.load(Ordering::SeqCst) < target {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let wall = started.elapsed();
    let cmds = commands(&url).await;
    let report = slow.report().await.unwrap();
    if report.count > 0 {
        println!(
            "slowlog: {} command(s) over 1 ms, longest {} µs: {:?}",
            report.count, report.max_us, report.by_name
        );
    }
    task.await.unwrap().unwrap();
    (wall, cmds as f64 / jobs as f64)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

#[tokio::main]
async fn main() {
    let (jobs, keys) = (flag("--jobs", 2000), flag("--keys", 10));
    let concurrency = flag("--concurrency", 20) as usize;
    let reps = flag("--reps", 3);
    let paced = flag("--paced", 250);
    let many = flag("--many", 10_000);
    let (mut lim, mut free, mut lim_c, mut free_c) = (vec![], vec![], vec![], vec![]);
    for _ in 0..reps {
        let (w, c) = run(Kind::Limited, jobs, keys, concurrency).await;
        lim.push(jobs as f64 / w.as_secs_f64());
        lim_c.push(c);
        let (w, c) = run(Kind::Free, jobs, keys, concurrency).await;
        free.push(jobs as f64 / w.as_secs_f64());
        free_c.push(c);
    }
    let (l, f) = (median(lim), median(free));
    println!(
        "overhead: {jobs} jobs, {keys} keys, concurrency {concurrency}, median of {reps}: \
         limit far above the rate {l:.0} jobs/s ({:.1} commands/job), no limit {f:.0} jobs/s \
         ({:.1} commands/job): {:+.1}%",
        median(lim_c),
        median(free_c),
        (l / f - 1.0) * 100.0
    );
    run(Kind::Paced, paced, 1, concurrency).await;
    let starts = RATE_BENCH_STARTS.lock().unwrap().clone();
    let span = starts.last().unwrap().duration_since(starts[0]);
    let ideal = Duration::from_millis(20 * (paced - 1));
    let most = starts
        .iter()
        .map(|a| {
            starts
                .iter()
                .filter(|t| **t >= *a && t.duration_since(*a) < Duration::from_secs(1))
                .count()
        })
        .max()
        .unwrap_or(0);
    println!(
        "precision: {paced} jobs at 50/s: span {span:.2?} (ideal {ideal:.2?}, {:+.1}%), \
         achieved {:.1}/s, at most {most} starts in any 1 s window",
        (span.as_secs_f64() / ideal.as_secs_f64() - 1.0) * 100.0,
        (paced - 1) as f64 / span.as_secs_f64()
    );
    let (wall, _) = run(Kind::Many, many * 3, many, concurrency).await;
    println!(
        "many keys: {many} keys at 1/s, 3 jobs each (2 wait): all {} ran in {wall:.2?} (ideal just over 2 s); \
         no slowlog line above means no command over 1 ms",
        many * 3
    );
}
