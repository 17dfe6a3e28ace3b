//! What two capabilities add to job processing, each against the same run
//! without it, on a fresh private redis-server per run, the sides alternating
//! within each of `--reps` repetitions (medians), one in-process worker at
//! `--concurrency` (default 20) on the queue `costs`:
//!
//! 1. `cron`, the cron poller: `--jobs` no-op jobs (default 20,000) with no
//!    schedules, and with `--schedules` stored schedules (default 10,000,
//!    daily at 03:00, stored one by one with `client.cron().set`) plus `--due`
//!    schedules firing every second (default 5; their no-op jobs run on the
//!    same queue and are not counted): jobs/s, Redis CPU µs and commands per
//!    job, Redis's SLOWLOG over 1 ms during the run.
//! 2. `iterable`, an iterable job's steps against plain jobs doing the same
//!    no-op work, `--iter-jobs` jobs at a time (default 20): a plain job
//!    looping over `--steps` no-op iterations (default 100,000 per job)
//!    against an iterable job of as many no-op steps with the default
//!    checkpoint (5 s); then, with `--slow-steps` per job (default 5,000), an
//!    iterable job saving its cursor after every step (`checkpoint = "1ns"`)
//!    against one plain no-op job per step (`push_bulk`), and the
//!    default-checkpoint iterable job at that size. Steps/s (from the first
//!    step to the last), Redis commands and CPU µs per step.
//!
//! Redis commands are `INFO commandstats` (commands inside scripts counted)
//! and Redis CPU is `used_cpu_user + used_cpu_sys`, both from the worker's
//! start to its stop (its start-up and shutdown included).
//!
//! `cargo build --release -p fairjob-tests --bin costs_bench && target/release/costs_bench
//!   [--only cron|iterable] [--reps 3] [--concurrency 20] [--jobs 20000] [--schedules 10000]
//!   [--due 5] [--iter-jobs 20] [--steps 100000] [--slow-steps 5000]`

use std::hint::black_box;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use fairjob::prelude::*;
use fairjob::{CronSpec, Registry};
use fairjob_tests::flag;
use fairjob_tests::slowlog::{SlowLog, SlowReport};
use serde::{Deserialize, Serialize};

/// Steps (or jobs) done in the current run.
static DONE: AtomicU64 = AtomicU64::new(0);
/// When the current run's first step (or job) began.
static FIRST: Mutex<Option<Instant>> = Mutex::new(None);

fn begin() {
    FIRST.lock().unwrap().get_or_insert_with(Instant::now);
}

/// A no-op job: one unit of work.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "CostNoop", queue = "costs")]
struct CostNoop(u64);

impl Perform for CostNoop {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        begin();
        black_box(self.0);
        DONE.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// The every-second schedules' job: not counted.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "CostTick", queue = "costs")]
struct CostTick(u64);

impl Perform for CostTick {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// A plain job doing `.0` no-op iterations in a loop.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "CostLoop", queue = "costs")]
struct CostLoop(u64);

impl Perform for CostLoop {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        begin();
        for i in 0..self.0 {
            black_box(i);
        }
        DONE.fetch_add(self.0, Ordering::SeqCst);
        Ok(())
    }
}

/// One step of an iterable job: `None` when all `steps` are done.
fn step(steps: u64, cursor: Option<u64>) -> Option<u64> {
    let n = cursor.map_or(0, |c| c + 1);
    if n == 0 {
        begin();
    }
    if n >= steps {
        DONE.fetch_add(steps, Ordering::SeqCst);
        return None;
    }
    black_box(n);
    Some(n)
}

/// An iterable job of `.0` no-op steps, default checkpoint (5 s).
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "CostIter", queue = "costs")]
#[iterable]
struct CostIter(u64);

impl Iterate for CostIter {
    type Cursor = u64;

    async fn step(&self, cursor: Option<u64>, _cx: &JobContext) -> Result<Step<u64>, JobError> {
        Ok(step(self.0, cursor).map_or(Step::Done, Step::Next))
    }
}

/// An iterable job of `.0` no-op steps saving its cursor after every step.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "CostIterEach", queue = "costs")]
#[iterable(checkpoint = "1ns")]
struct CostIterEach(u64);

impl Iterate for CostIterEach {
    type Cursor = u64;

    async fn step(&self, cursor: Option<u64>, _cx: &JobContext) -> Result<Step<u64>, JobError> {
        Ok(step(self.0, cursor).map_or(Step::Done, Step::Next))
    }
}

/// Redis's CPU time so far, µs.
async fn redis_cpu(url: &str) -> f64 {
    let info: String = redis::cmd("INFO")
        .arg("cpu")
        .query_async(&mut fairjob_tests::raw(url).await)
        .await
        .unwrap();
    info.lines()
        .filter(|l| l.starts_with("used_cpu_user:") || l.starts_with("used_cpu_sys:"))
        .filter_map(|l| l.split(':').nth(1)?.trim().parse::<f64>().ok())
        .sum::<f64>()
        * 1e6
}

/// One run's figures per unit (job or step).
#[derive(Debug, Clone)]
struct Figures {
    per_s: f64,
    cmds: f64,
    cpu_us: f64,
    slow: SlowReport,
}

/// Runs a worker on `url` until `units` units are done (the jobs already
/// pushed): units/s from the first unit's start, and per unit Redis's
/// commands and CPU from the worker's start to its stop.
async fn work(url: &str, units: u64, concurrency: usize) -> Figures {
    let mut registry = Registry::new();
    registry.register::<CostNoop>().unwrap();
    registry.register::<CostTick>().unwrap();
    registry.register::<CostLoop>().unwrap();
    registry.register_iterable::<CostIter>().unwrap();
    registry.register_iterable::<CostIterEach>().unwrap();
    let worker = fairjob::Worker::builder(url)
        .registry(registry)
        .queues(fairjob_tests::queues(&["costs"]))
        .concurrency(concurrency)
        .build()
        .await
        .unwrap();
    fairjob_tests::reset_redis_stats(url).await;
    let cpu0 = redis_cpu(url).await;
    let mut slow = SlowLog::start(url, 1000).await.unwrap();
    DONE.store(0, Ordering::SeqCst);
    *FIRST.lock().unwrap() = None;
    let task = tokio::spawn(worker.run_until(async move {
        while DONE.load(Ordering::SeqCst) < units {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }));
    while DONE.load(Ordering::SeqCst) < units {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let wall = FIRST.lock().unwrap().expect("a unit ran").elapsed();
    task.await.unwrap().unwrap();
    let slow = slow.report().await.unwrap();
    let cpu = redis_cpu(url).await - cpu0;
    let cmds = fairjob_tests::redis_commands(url).await;
    Figures {
        per_s: units as f64 / wall.as_secs_f64(),
        cmds: cmds as f64 / units as f64,
        cpu_us: cpu / units as f64,
        slow,
    }
}

/// The no-op run, with `schedules` stored daily schedules and `due`
/// every-second ones (or none).
async fn cron_run(jobs: u64, concurrency: usize, schedules: usize, due: usize) -> Figures {
    let server = fairjob_tests::redis();
    let url = server.url();
    let client = fairjob::Client::connect(&url).await.unwrap();
    let tasks: Vec<_> = (0..8)
        .map(|k| {
            let client = client.clone();
            tokio::spawn(async move {
                for i in (k..schedules).step_by(8) {
                    client
                        .cron()
                        .set(CronSpec::new(
                            format!("daily-{i}"),
                            "0 3 * * *",
                            CostTick(0),
                        ))
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    for i in 0..due {
        client
            .cron()
            .set(CronSpec::new(
                format!("tick-{i}"),
                "* * * * * *",
                CostTick(0),
            ))
            .await
            .unwrap();
    }
    for chunk in (0..jobs).collect::<Vec<_>>().chunks(10_000) {
        client
            .push_bulk(chunk.iter().map(|&i| CostNoop(i)))
            .await
            .unwrap();
    }
    work(&url, jobs, concurrency).await
}

#[derive(Clone, Copy, Debug)]
enum Path {
    Loop,
    Iter,
    IterEach,
    JobPerStep,
}

async fn iter_run(path: Path, jobs: u64, steps: u64, concurrency: usize) -> Figures {
    let server = fairjob_tests::redis();
    let url = server.url();
    let client = fairjob::Client::connect(&url).await.unwrap();
    match path {
        Path::Loop => client.push_bulk((0..jobs).map(|_| CostLoop(steps))).await,
        Path::Iter => client.push_bulk((0..jobs).map(|_| CostIter(steps))).await,
        Path::IterEach => {
            client
                .push_bulk((0..jobs).map(|_| CostIterEach(steps)))
                .await
        }
        Path::JobPerStep => {
            for chunk in (0..jobs * steps).collect::<Vec<_>>().chunks(10_000) {
                client
                    .push_bulk(chunk.iter().map(|&i| CostNoop(i)))
                    .await
                    .unwrap();
            }
            Ok(vec![])
        }
    }
    .unwrap();
    work(&url, jobs * steps, concurrency).await
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn row(what: &str, runs: &[Figures]) -> (f64, f64, f64) {
    let per_s = median(runs.iter().map(|f| f.per_s).collect());
    let cmds = median(runs.iter().map(|f| f.cmds).collect());
    let cpu = median(runs.iter().map(|f| f.cpu_us).collect());
    let all: Vec<String> = runs.iter().map(|f| format!("{:.0}", f.per_s)).collect();
    let cpus: Vec<String> = runs.iter().map(|f| format!("{:.2}", f.cpu_us)).collect();
    let slow: Vec<String> = runs.iter().map(|f| f.slow.to_string()).collect();
    println!(
        "| {what} | {per_s:.0} ({}) | {cmds:.3} | {cpu:.2} ({}) | {} |",
        all.join(" · "),
        cpus.join(" · "),
        slow.join("; ")
    );
    (per_s, cmds, cpu)
}

fn ratios(what: &str, with: &[Figures], without: &[Figures]) {
    let r: Vec<f64> = with
        .iter()
        .zip(without)
        .map(|(w, o)| w.per_s / o.per_s)
        .collect();
    let shown: Vec<String> = r.iter().map(|x| format!("{x:.2}")).collect();
    println!(
        "{what}: median of the reps' ratios {:.2} ({})",
        median(r.clone()),
        shown.join(" · ")
    );
}

const HEADER: &str = "| path | per s, median (reps) | Redis commands per unit | Redis CPU µs per unit (reps) | SLOWLOG over 1 ms per rep |\n|---|---|---:|---:|---|";

#[tokio::main]
async fn main() {
    let only: String = flag("--only", String::new());
    let reps: usize = flag("--reps", 3);
    let concurrency: usize = flag("--concurrency", 20);
    if only.is_empty() || only == "cron" {
        let jobs: u64 = flag("--jobs", 20_000);
        let schedules: usize = flag("--schedules", 10_000);
        let due: usize = flag("--due", 5);
        let (mut off, mut on) = (vec![], vec![]);
        for rep in 0..reps {
            // The side that goes first alternates rep by rep.
            if rep % 2 == 0 {
                off.push(cron_run(jobs, concurrency, 0, 0).await);
                on.push(cron_run(jobs, concurrency, schedules, due).await);
            } else {
                on.push(cron_run(jobs, concurrency, schedules, due).await);
                off.push(cron_run(jobs, concurrency, 0, 0).await);
            }
        }
        println!(
            "\ncron poller: {jobs} no-op jobs, concurrency {concurrency}, {reps} reps (units: jobs)\n{HEADER}"
        );
        row("no schedules", &off);
        row(
            &format!("{schedules} daily schedules + {due} every second"),
            &on,
        );
        ratios("with ÷ without, jobs/s", &on, &off);
    }
    if only.is_empty() || only == "iterable" {
        let jobs: u64 = flag("--iter-jobs", 20);
        let steps: u64 = flag("--steps", 100_000);
        let slow_steps: u64 = flag("--slow-steps", 5_000);
        let (mut lp, mut it) = (vec![], vec![]);
        let (mut each, mut per_job, mut it_small) = (vec![], vec![], vec![]);
        for rep in 0..reps {
            let fast = [Path::Loop, Path::Iter];
            let slow = [Path::IterEach, Path::JobPerStep, Path::Iter];
            for k in 0..fast.len() {
                let p = fast[(k + rep) % fast.len()];
                let f = iter_run(p, jobs, steps, concurrency).await;
                match p {
                    Path::Loop => lp.push(f),
                    _ => it.push(f),
                }
            }
            for k in 0..slow.len() {
                let p = slow[(k + rep) % slow.len()];
                let f = iter_run(p, jobs, slow_steps, concurrency).await;
                match p {
                    Path::IterEach => each.push(f),
                    Path::JobPerStep => per_job.push(f),
                    _ => it_small.push(f),
                }
            }
        }
        println!(
            "\niterable: {jobs} jobs at a time, concurrency {concurrency}, {reps} reps (units: no-op steps)\n{HEADER}"
        );
        row(&format!("plain job, loop of {steps} no-op iterations"), &lp);
        row(
            &format!("iterable job, {steps} no-op steps, checkpoint 5 s"),
            &it,
        );
        row(
            &format!("iterable job, {slow_steps} no-op steps, checkpoint 5 s"),
            &it_small,
        );
        row(
            &format!("iterable job, {slow_steps} no-op steps, checkpoint every step"),
            &each,
        );
        row(
            &format!("{slow_steps} plain no-op jobs per iterable job (one job per step)"),
            &per_job,
        );
        ratios("iterable (5 s) ÷ plain loop, steps/s", &it, &lp);
        ratios(
            "iterable (every step) ÷ one job per step, steps/s",
            &each,
            &per_job,
        );
        ratios(
            "iterable (every step) ÷ iterable (5 s), steps/s",
            &each,
            &it_small,
        );
    }
}
