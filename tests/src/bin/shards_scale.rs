//! `shards_scale`: tenant-sharded queues at full size, and what sharding costs.
//! Each part runs against its own private `redis-server`.
//!
//! ```text
//! cargo run --release -p fairjob-tests --bin shards_scale -- \
//!     [--tenants 100000] [--big 1000000] [--workers 2] [--concurrency 100] \
//!     [--compare-jobs 200000] [--compare-tenants 1000] [--reps 3] \
//!     [--fetches 50000] [--only scale|compare|latency]
//! ```
//!
//! - scale: `--tenants` tenants with one job each plus one tenant with `--big`
//!   jobs, pushed with `push_bulk`, drained by `--workers` in-process workers at
//!   `--concurrency`; checks every job ran exactly once and the shard state is
//!   empty at the end. Also times `test-worker shards scale` on the full
//!   backlog when that binary is built next to this one.
//! - compare: the same no-op job (`ScaleJob` on the sharded queue `scale`,
//!   `PlainScaleJob` on the plain queue `plain_scale`), same workers: jobs/s from
//!   the first fetch to the last perform, and Redis CPU per job (`INFO cpu`),
//!   median [min–max] of `--reps`, sharded and plain interleaved.
//! - latency: the worker's own fetch script (`shard_fetch.lua` with its includes, as
//!   `fairjob::broker::SCRIPT_SOURCES` holds them) called directly, one call at a
//!   time, at 10 and at 100,000 tenants with the same 200,000 pending jobs:
//!   client-side p50/p99 per call and Redis's own `usec_per_call`, for batches
//!   of 1 and of 100 jobs.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use fairjob::Client;
use fairjob::broker::keys::Keys;
use fairjob_tests::jobs::{
    PlainScaleJob, SCALE_DONE, ScaleJob, scale_not_once, scale_reset, scale_wait,
};
use fairjob_tests::slowlog::SlowLog;
use fairjob_tests::{RunningWorker, flag};
use redis::aio::MultiplexedConnection;

struct Settings {
    workers: usize,
    concurrency: usize,
}

/// Starts `s.workers` in-process workers of `queue` (the tests' worker, with a
/// lease long enough for a loaded machine).
async fn start_workers(
    url: &str,
    ns: &str,
    queue: &str,
    s: &Settings,
) -> Result<Vec<RunningWorker>> {
    let mut running = Vec::new();
    for _ in 0..s.workers {
        // FAIRJOB_BENCH_BATCH_ACKS=off: one ack call per job (to price batching).
        let batch_acks = std::env::var("FAIRJOB_BENCH_BATCH_ACKS").as_deref() != Ok("off");
        // FAIRJOB_BENCH_FOLD_ACKS=off: acks go in calls of their own (the
        // default folds them into the next fetch).
        let fold_acks = std::env::var("FAIRJOB_BENCH_FOLD_ACKS").as_deref() != Ok("off");
        let worker = fairjob_tests::worker(url, ns)
            .concurrency(s.concurrency)
            .batch_acks(batch_acks)
            .fold_acks(fold_acks)
            .queues(fairjob_tests::queues(&[queue]))
            .lease(Duration::from_secs(60))
            .heartbeat(Duration::from_secs(10))
            .reaper_interval(Duration::from_secs(30))
            .scheduled_poll_interval(Duration::from_secs(5))
            .shutdown_timeout(Duration::from_secs(5))
            .build()
            .await?;
        running.push(fairjob_tests::spawn(worker));
    }
    Ok(running)
}

/// Stops every worker at once (graceful; panics if one failed).
async fn stop(running: Vec<RunningWorker>) {
    let stops: Vec<_> = running
        .into_iter()
        .map(|w| tokio::spawn(w.stop()))
        .collect();
    for s in stops {
        s.await.expect("a worker stops");
    }
}

/// Waits until `total` scale jobs ran; fails after 60 s without progress.
async fn wait_done(total: usize) -> Result<()> {
    scale_wait(total, Duration::from_secs(60))
        .await
        .map_err(anyhow::Error::msg)
}

/// Every id run exactly once.
fn check_exactly_once(total: usize) -> Result<()> {
    let wrong = scale_not_once();
    ensure!(wrong.is_empty(), "jobs not run exactly once: {wrong:?}");
    ensure!(
        SCALE_DONE.load(Ordering::SeqCst) == total,
        "performed {} for {total} jobs",
        SCALE_DONE.load(Ordering::SeqCst)
    );
    Ok(())
}

async fn info_field(r: &mut MultiplexedConnection, section: &str, field: &str) -> Result<String> {
    let text: String = redis::cmd("INFO").arg(section).query_async(r).await?;
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .map(|v| v.trim().to_owned())
        .with_context(|| format!("INFO {section} has no {field}"))
}

async fn redis_cpu(r: &mut MultiplexedConnection) -> Result<f64> {
    let user: f64 = info_field(r, "cpu", "used_cpu_user").await?.parse()?;
    let sys: f64 = info_field(r, "cpu", "used_cpu_sys").await?.parse()?;
    Ok(user + sys)
}

/// `(calls, usec_per_call)` of script calls (EVALSHA and FCALL) since the
/// last `CONFIG RESETSTAT`.
async fn evalsha_stats(r: &mut MultiplexedConnection) -> Result<(u64, f64)> {
    let (mut calls, mut usec) = (0u64, 0f64);
    for name in ["cmdstat_evalsha", "cmdstat_fcall"] {
        let Ok(line) = info_field(r, "commandstats", name).await else {
            continue;
        };
        let get = |k: &str| {
            line.split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{k}=")))
                .map(str::to_owned)
                .with_context(|| format!("no {k} in {line}"))
        };
        calls += get("calls")?.parse::<u64>()?;
        usec += get("usec")?.parse::<f64>()?;
    }
    if calls == 0 {
        anyhow::bail!("no script calls (EVALSHA or FCALL) in INFO commandstats");
    }
    Ok((calls, usec / calls as f64))
}

/// Commands Redis ran since the last `CONFIG RESETSTAT`, scripts' own
/// commands included and the script calls themselves not (what a job costs in
/// Redis work, whatever the machine's load).
async fn commands_run(r: &mut MultiplexedConnection) -> Result<u64> {
    let text: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(r)
        .await?;
    if std::env::var_os("FAIRJOB_BENCH_STATS").is_some() {
        eprintln!("{text}");
    }
    Ok(fairjob_tests::commandstats_calls(&text)
        .into_iter()
        .filter(|(name, _)| !matches!(name.as_str(), "evalsha" | "eval" | "fcall"))
        .map(|(_, calls)| calls)
        .sum())
}

fn median_range(v: &[f64]) -> String {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    format!("{:.0} [{:.0}–{:.0}]", s[s.len() / 2], s[0], s[s.len() - 1])
}

// ---------------------------------------------------------------------------

async fn scale(s: &Settings) -> Result<()> {
    let tenants: u64 = flag("--tenants", 100_000);
    let big: u64 = flag("--big", 1_000_000);
    let total = (tenants + big) as usize;
    let server = fairjob_tests::redis();
    let url = server.url();
    let ns = "scale";
    let client = Client::builder(&url).namespace(ns).build().await?;
    let mut r = fairjob_tests::raw(&url).await;
    let mut slow = SlowLog::start(&url, 1000).await?;
    scale_reset(total);
    println!("## scale: {tenants} tenants × 1 job + 1 tenant × {big} jobs");
    let t = Instant::now();
    client
        .push_bulk(
            (0..big / 2)
                .map(|id| ScaleJob(u32::MAX, tenants + id))
                .chain((0..tenants).map(|id| ScaleJob(id as u32, id)))
                .chain((big / 2..big).map(|id| ScaleJob(u32::MAX, tenants + id))),
        )
        .await?;
    let pushed = t.elapsed();
    let sk = Keys::new(Some(ns)).shard("scale");
    let n_tenants: u64 = redis::cmd("SCARD")
        .arg(&sk.tenants)
        .query_async(&mut r)
        .await?;
    ensure!(n_tenants == tenants + 1, "{n_tenants} tenants");
    println!(
        "push_bulk: {total} jobs in {:.2} s ({:.0} jobs/s); Redis memory {}",
        pushed.as_secs_f64(),
        total as f64 / pushed.as_secs_f64(),
        info_field(&mut r, "memory", "used_memory_human").await?
    );
    let mut inspect = std::env::current_exe()?;
    inspect.set_file_name("test-worker");
    if inspect.exists() {
        let t = Instant::now();
        let out = std::process::Command::new(&inspect)
            .args(["-r", &url, "--namespace", ns, "shards", "scale"])
            .env("FAIRJOB_LOG", "warn")
            .output()?;
        ensure!(out.status.success(), "shards command failed");
        println!(
            "`test-worker shards scale` on this backlog: {} lines in {:.2} s",
            out.stdout.iter().filter(|b| **b == b'\n').count(),
            t.elapsed().as_secs_f64()
        );
    }
    let cpu0 = redis_cpu(&mut r).await?;
    let t = Instant::now();
    let running = start_workers(&url, ns, "scale", s).await?;
    wait_done(total).await?;
    let drained = t.elapsed();
    stop(running).await;
    let cpu = redis_cpu(&mut r).await? - cpu0;
    check_exactly_once(total)?;
    let left: (u64, u64, u64) = redis::pipe()
        .zcard(&sk.ready)
        .hlen(&sk.running)
        .scard(&sk.tenants)
        .query_async(&mut r)
        .await?;
    ensure!(left == (0, 0, 0), "shard state left: {left:?}");
    println!(
        "drain: {total} jobs in {:.2} s ({:.0} jobs/s) by {} worker(s) × concurrency {}; \
         Redis CPU {:.1} µs/job; every job exactly once; dispatch order, running, tenants empty",
        drained.as_secs_f64(),
        total as f64 / drained.as_secs_f64(),
        s.workers,
        s.concurrency,
        cpu * 1e6 / total as f64
    );
    println!("scripts over 1 ms (SLOWLOG): {}", slow.report().await?);
    Ok(())
}

async fn compare(s: &Settings) -> Result<()> {
    let n: u64 = flag("--compare-jobs", 200_000);
    let tenants: u64 = flag("--compare-tenants", 1_000);
    let reps: usize = flag("--reps", 3);
    let server = fairjob_tests::redis();
    let url = server.url();
    let mut r = fairjob_tests::raw(&url).await;
    println!(
        "## sharded vs plain: {n} no-op jobs over {tenants} tenants, {} worker(s) × concurrency {}, {reps} reps",
        s.workers, s.concurrency
    );
    let mut rate = [Vec::new(), Vec::new()];
    let mut cpu_per_job = [Vec::new(), Vec::new()];
    let mut worker_cpu_per_job = [Vec::new(), Vec::new()];
    let mut calls_per_job = [Vec::new(), Vec::new()];
    let mut commands_per_job = [Vec::new(), Vec::new()];
    let mut slow = SlowLog::start(&url, 1000).await?;
    for rep in 0..reps {
        for (k, sharded) in [true, false].into_iter().enumerate() {
            let _: () = redis::cmd("FLUSHALL").query_async(&mut r).await?;
            let ns = format!("cmp{rep}{k}");
            let client = Client::builder(&url).namespace(&ns).build().await?;
            scale_reset(n as usize);
            let queue = if sharded {
                client
                    .push_bulk((0..n).map(|id| ScaleJob((id % tenants) as u32, id)))
                    .await?;
                "scale"
            } else {
                client
                    .push_bulk((0..n).map(|id| PlainScaleJob((id % tenants) as u32, id)))
                    .await?;
                "plain_scale"
            };
            let _: () = redis::cmd("CONFIG")
                .arg("RESETSTAT")
                .query_async(&mut r)
                .await?;
            let cpu0 = redis_cpu(&mut r).await?;
            let own0 = fairjob_tests::process_cpu_ns("self");
            let t = Instant::now();
            let running = start_workers(&url, &ns, queue, s).await?;
            wait_done(n as usize).await?;
            let took = t.elapsed();
            let own = fairjob_tests::process_cpu_ns("self").saturating_sub(own0);
            let cpu = redis_cpu(&mut r).await? - cpu0;
            let (calls, _) = evalsha_stats(&mut r).await?;
            let commands = commands_run(&mut r).await?;
            stop(running).await;
            check_exactly_once(n as usize)?;
            rate[k].push(n as f64 / took.as_secs_f64());
            cpu_per_job[k].push(cpu * 1e6 / n as f64);
            worker_cpu_per_job[k].push(own as f64 / 1e3 / n as f64);
            calls_per_job[k].push(calls as f64 / n as f64);
            commands_per_job[k].push(commands as f64 / n as f64);
        }
    }
    println!(
        "| queue | jobs/s | Redis CPU µs/job | script calls/job | Redis commands/job | workers' CPU µs/job |"
    );
    println!("|---|---|---|---|---|---|");
    for (k, name) in ["sharded (`scale`)", "plain (`plain_scale`)"]
        .iter()
        .enumerate()
    {
        let mut c = calls_per_job[k].clone();
        c.sort_by(f64::total_cmp);
        let mut m = commands_per_job[k].clone();
        m.sort_by(f64::total_cmp);
        println!(
            "| {name} | {} | {} | {:.2} | {:.1} | {} |",
            median_range(&rate[k]),
            median_range(&cpu_per_job[k]),
            c[c.len() / 2],
            m[m.len() / 2],
            median_range(&worker_cpu_per_job[k])
        );
    }
    println!(
        "\nscripts over 1 ms (SLOWLOG, all reps, push and drain): {}",
        slow.report().await?
    );
    Ok(())
}

async fn latency() -> Result<()> {
    let fetches: usize = flag("--fetches", 50_000);
    let pending: u64 = 200_000;
    println!(
        "## fetch script latency ({pending} pending jobs; {fetches} jobs fetched per case, one call at a time)"
    );
    println!(
        "| tenants | jobs per call | calls | client p50 µs | client p99 µs | Redis usec_per_call |"
    );
    println!("|---|---|---|---|---|---|");
    for tenants in [10u64, 100_000] {
        for batch in [1usize, 100] {
            let server = fairjob_tests::redis();
            let url = server.url();
            let ns = "lat";
            let client = Client::builder(&url).namespace(ns).build().await?;
            client
                .push_bulk((0..pending).map(|id| ScaleJob((id % tenants) as u32, id)))
                .await?;
            let keys = Keys::new(Some(ns));
            let sk = keys.shard("scale");
            let queue = client.broker().shard_queue("scale", "bench");
            let mut r = fairjob_tests::raw(&url).await;
            let ready: u64 = redis::cmd("ZCOUNT")
                .arg(&sk.ready)
                .arg("-inf")
                .arg("(+inf")
                .query_async(&mut r)
                .await?;
            ensure!(ready == tenants, "ready {ready}");
            let _: () = redis::cmd("CONFIG")
                .arg("RESETSTAT")
                .query_async(&mut r)
                .await?;
            let calls = fetches / batch;
            let mut times = Vec::with_capacity(calls);
            let mut seq = 0u64;
            for _ in 0..calls {
                let t = Instant::now();
                let out = client.broker().fetch_shard(&queue, batch, seq).await?;
                times.push(t.elapsed());
                ensure!(out.len() == batch, "fetched {}", out.len());
                seq += batch as u64;
            }
            let (n, per_call) = evalsha_stats(&mut r).await?;
            times.sort();
            let p = |q: f64| times[((times.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e6;
            println!(
                "| {tenants} | {batch} | {n} | {:.0} | {:.0} | {per_call:.2} |",
                p(0.5),
                p(0.99)
            );
        }
    }
    Ok(())
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> Result<()> {
    let s = Settings {
        workers: flag("--workers", 2),
        concurrency: flag("--concurrency", 100),
    };
    let only: String = flag("--only", String::new());
    if only.is_empty() || only == "latency" {
        latency().await?;
    }
    if only.is_empty() || only == "compare" {
        compare(&s).await?;
    }
    if only.is_empty() || only == "scale" {
        scale(&s).await?;
    }
    Ok(())
}
