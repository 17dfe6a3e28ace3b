//! What batches and workflows cost, on one private redis-server:
//!
//! 1. A batch member's end against a plain job's: `--jobs` no-op jobs
//!    (default 20,000) pushed with `push_bulk`, against as many no-op members
//!    of one batch (the same job type on the same queue), run by one
//!    in-process worker built as the tests build theirs at `--concurrency`
//!    (default 25), plain and batch alternating, `--reps` times each (default
//!    3); the same on a tenant-sharded queue (3 tenants). Jobs/s from the
//!    first job's start to the last one's end; per job, Redis commands (`INFO
//!    commandstats`, commands inside scripts counted), their `usec` summed,
//!    the scripts' `usec` alone and Redis CPU, from the worker's start to its
//!    stop (its start-up and shutdown included, both sides alike).
//! 2. A `--members` commit (default 100,000 small members): `Batch::commit`'s
//!    wall time with SLOWLOG at 1 ms (entries over it during the commit, and
//!    during the batch's completion by a worker); then a second batch
//!    committed and completed with SLOWLOG at `--slow-us` (default 100 µs;
//!    at 0 Redis logs every command inside a script too, which slows the
//!    scripts down): the calls over it and the slowest, per script.
//! 3. Memory per pending member: `used_memory` before and after a commit of
//!    `--members` (no worker running, no SLOWLOG kept), against as many plain
//!    jobs of the same type pushed with `push_bulk`; and every key's `MEMORY
//!    USAGE`.
//! 4. A workflow of 1 root and `--steps` steps depending on it (default
//!    10,000): commit time, memory per held step (measured as in 3, on a
//!    first commit), and the scripts' times
//!    (SLOWLOG at `--slow-us` for the commit and while a worker runs it: the
//!    root's exit releases every step in one script call).
//!
//! `CARGO_TARGET_DIR=/work/tgt-bench cargo build --release -p fairjob-tests --bin batch_bench
//!   && /work/tgt-bench/release/batch_bench [--reps 3] [--jobs 20000] [--concurrency 25]
//!   [--members 100000] [--steps 10000] [--slow-us 100]`

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use fairjob::prelude::*;
use fairjob_tests::slowlog::{SlowLog, summarize};
use fairjob_tests::{flag, queues, raw};
use serde::{Deserialize, Serialize};

/// Jobs done in the current run.
static DONE: AtomicU64 = AtomicU64::new(0);
/// When the current run's first job began.
static FIRST: Mutex<Option<Instant>> = Mutex::new(None);

fn ran() {
    FIRST.lock().unwrap().get_or_insert_with(Instant::now);
    DONE.fetch_add(1, Ordering::SeqCst);
}

/// A no-op job on a plain queue.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "BatchBenchNoop", queue = "bb_plain")]
struct Noop(u64);

impl Perform for Noop {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        std::hint::black_box(self.0);
        ran();
        Ok(())
    }
}

/// A no-op job on a tenant-sharded queue.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "BatchBenchShardNoop", queue = "bb_shard", shard_by_tenant)]
#[fair_tenant(tenant)]
struct ShardNoop {
    n: u64,
    tenant: String,
}

impl Perform for ShardNoop {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        std::hint::black_box(self.n);
        ran();
        Ok(())
    }
}

const TENANTS: [&str; 3] = ["acme", "globex", "initech"];

fn shard_jobs(n: u64) -> impl Iterator<Item = ShardNoop> {
    (0..n).map(|i| ShardNoop {
        n: i,
        tenant: TENANTS[(i % 3) as usize].to_owned(),
    })
}

/// `INFO commandstats`: per command, (calls, usec); the bench's own
/// commands left out.
async fn commandstats(url: &str) -> BTreeMap<String, (u64, u64)> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut raw(url).await)
        .await
        .unwrap();
    let mut out = BTreeMap::new();
    for l in info.lines() {
        let Some((name, rest)) = l.strip_prefix("cmdstat_").and_then(|l| l.split_once(':')) else {
            continue;
        };
        if ["info", "config", "slowlog", "memory", "flushall", "scan"]
            .iter()
            .any(|p| name.starts_with(p))
        {
            continue;
        }
        let field = |k: &str| -> u64 {
            rest.split(',')
                .find_map(|f| f.strip_prefix(k)?.parse().ok())
                .unwrap_or(0)
        };
        out.insert(name.to_owned(), (field("calls="), field("usec=")));
    }
    out
}

/// A field of `INFO <section>` as a number.
async fn info_num(url: &str, section: &str, field: &str) -> f64 {
    let info: String = redis::cmd("INFO")
        .arg(section)
        .query_async(&mut raw(url).await)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| {
            l.strip_prefix(field)?
                .strip_prefix(':')?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0.0)
}

/// Redis's CPU time so far, µs.
async fn redis_cpu(url: &str) -> f64 {
    (info_num(url, "cpu", "used_cpu_user").await + info_num(url, "cpu", "used_cpu_sys").await) * 1e6
}

async fn used_memory(url: &str) -> f64 {
    // Let lazy frees and the allocator's stats settle.
    tokio::time::sleep(Duration::from_millis(300)).await;
    info_num(url, "memory", "used_memory").await
}

/// No SLOWLOG entries from now on, and none kept.
async fn slowlog_off(url: &str) {
    let mut conn = raw(url).await;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-log-slower-than")
        .arg(-1)
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("SLOWLOG")
        .arg("RESET")
        .query_async(&mut conn)
        .await
        .unwrap();
}

async fn flush(url: &str) {
    let _: () = redis::cmd("FLUSHALL")
        .arg("SYNC")
        .query_async(&mut raw(url).await)
        .await
        .unwrap();
}

/// Every key's `MEMORY USAGE` (exact), largest first, its namespace cut.
async fn key_sizes(url: &str, prefix: &str) -> Vec<(String, u64)> {
    let mut conn = raw(url).await;
    let mut keys: Vec<String> = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await
            .unwrap();
        keys.extend(batch);
        cursor = next;
        if cursor == 0 {
            break;
        }
    }
    let mut out = Vec::new();
    for k in keys {
        let bytes: Option<u64> = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(&k)
            .arg("SAMPLES")
            .arg(0)
            .query_async(&mut conn)
            .await
            .unwrap();
        out.push((
            k.strip_prefix(prefix).unwrap_or(&k).to_owned(),
            bytes.unwrap_or(0),
        ));
    }
    out.sort_by_key(|k| std::cmp::Reverse(k.1));
    out
}

/// One processing run's figures.
#[derive(Debug, Clone, Default)]
struct Run {
    per_s: f64,
    jobs: u64,
    stats: BTreeMap<String, (u64, u64)>,
    cpu_us: f64,
}

/// Runs a worker on `queue` until `jobs` jobs (already pushed) are done,
/// then stops it (its shutdown writes the last acks).
async fn work(url: &str, ns: &str, queue: &str, jobs: u64, concurrency: usize) -> Run {
    let worker = fairjob_tests::worker(url, ns)
        .concurrency(concurrency)
        .queues(queues(&[queue]))
        .build()
        .await
        .unwrap();
    DONE.store(0, Ordering::SeqCst);
    *FIRST.lock().unwrap() = None;
    fairjob_tests::reset_redis_stats(url).await;
    let cpu0 = redis_cpu(url).await;
    let w = fairjob_tests::spawn(worker);
    while DONE.load(Ordering::SeqCst) < jobs {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let wall = FIRST.lock().unwrap().expect("a job ran").elapsed();
    w.stop().await;
    let cpu_us = redis_cpu(url).await - cpu0;
    Run {
        per_s: jobs as f64 / wall.as_secs_f64(),
        jobs,
        stats: commandstats(url).await,
        cpu_us,
    }
}

/// The SLOWLOG's calls over `slow_us` during each phase, as one table.
fn print_slow_calls(slow_us: u64, phases: &[(&str, &BTreeMap<String, Vec<u64>>)]) {
    println!(
        "| during | script or command | calls logged | median µs | p99 µs | slowest µs | over 1 ms |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|");
    for (during, times) in phases {
        let names: Vec<&str> = times.keys().map(String::as_str).collect();
        for l in summarize(times, &names, 1000).lines() {
            println!("| {during} (calls over {slow_us} µs only) {l}");
        }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// The reps' Redis figures per job: commands, usec of all commands summed,
/// the scripts' usec, CPU µs, and calls per job by command.
fn per_job(runs: &[Run]) -> (f64, f64, f64, f64, String) {
    let jobs: u64 = runs.iter().map(|r| r.jobs).sum();
    let mut sum: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for r in runs {
        for (name, (c, u)) in &r.stats {
            let s = sum.entry(name.as_str()).or_default();
            s.0 += c;
            s.1 += u;
        }
    }
    let j = jobs as f64;
    let calls = sum.values().map(|s| s.0).sum::<u64>() as f64 / j;
    let usec = sum.values().map(|s| s.1).sum::<u64>() as f64 / j;
    let scripts = sum
        .iter()
        .filter(|(n, _)| n.starts_with("evalsha") || n.starts_with("fcall"))
        .map(|(_, s)| s.1)
        .sum::<u64>() as f64
        / j;
    let cpu = runs.iter().map(|r| r.cpu_us).sum::<f64>() / j;
    let mut by: Vec<(&str, f64)> = sum
        .iter()
        .map(|(n, s)| (*n, s.0 as f64 / j))
        .filter(|(_, c)| *c >= 0.05)
        .collect();
    by.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap());
    let by = by
        .iter()
        .map(|(n, c)| format!("{n} {c:.2}"))
        .collect::<Vec<_>>()
        .join(", ");
    (calls, usec, scripts, cpu, by)
}

/// Waits until batch `bid` fired `complete` (at most `secs`).
async fn completed(c: &Client, bid: &str, secs: u64) -> bool {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(secs) {
        if let Some(s) = c.batch_status(bid).await.unwrap()
            && s.complete_at.is_some()
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

#[tokio::main]
async fn main() {
    let reps: usize = flag("--reps", 3);
    let jobs: u64 = flag("--jobs", 20_000);
    let concurrency: usize = flag("--concurrency", 25);
    let members: u64 = flag("--members", 100_000);
    let steps: u64 = flag("--steps", 10_000);
    let slow_us: u64 = flag("--slow-us", 100);
    let server = fairjob_tests::redis();
    let url = server.url();
    let ns = fairjob_tests::namespace();
    let c = fairjob_tests::client(&url, &ns).await;
    let prefix = c.broker().keys().prefix().to_owned();

    // 1. A member's end against a plain job's, alternating.
    let mut runs: BTreeMap<(&str, &str), Vec<Run>> = BTreeMap::new();
    for rep in 0..reps {
        for (queue, sharded) in [("bb_plain", false), ("bb_shard", true)] {
            for batch in [false, true] {
                flush(&url).await;
                let mut bid = None;
                match (sharded, batch) {
                    (false, false) => {
                        c.push_bulk((0..jobs).map(Noop)).await.unwrap();
                    }
                    (true, false) => {
                        c.push_bulk(shard_jobs(jobs)).await.unwrap();
                    }
                    (false, true) => {
                        bid = Some(
                            Batch::new()
                                .push_bulk((0..jobs).map(Noop))
                                .commit(&c)
                                .await
                                .unwrap(),
                        );
                    }
                    (true, true) => {
                        bid = Some(
                            Batch::new()
                                .push_bulk(shard_jobs(jobs))
                                .commit(&c)
                                .await
                                .unwrap(),
                        );
                    }
                }
                let run = work(&url, &ns, queue, jobs, concurrency).await;
                let mut note = String::new();
                if let Some(bid) = bid {
                    let s = c.batch_status(&bid).await.unwrap().unwrap();
                    assert_eq!(s.pending, 0, "every member ended");
                    note = format!(
                        " (batch: pending {}, complete fired {})",
                        s.pending,
                        s.complete_at.is_some()
                    );
                }
                let (calls, usec, scripts, cpu, _) = per_job(std::slice::from_ref(&run));
                println!(
                    "rep {rep} {queue} {}: {:.0} jobs/s, {calls:.2} commands, {usec:.1} usec (scripts {scripts:.1}), {cpu:.1} µs Redis CPU per job{note}",
                    if batch { "batch" } else { "plain" },
                    run.per_s
                );
                runs.entry((queue, if batch { "batch" } else { "plain" }))
                    .or_default()
                    .push(run);
            }
        }
    }
    println!(
        "\n| queue | jobs | jobs/s, median of {reps} | batch ÷ plain (median of the reps' ratios [min–max]) | Redis commands per job | usec per job, all commands summed | of which scripts | Redis CPU µs per job | calls per job by command (≥ 0.05) |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---|");
    for queue in ["bb_plain", "bb_shard"] {
        let plain = &runs[&(queue, "plain")];
        let batch = &runs[&(queue, "batch")];
        let mut ratios: Vec<f64> = plain
            .iter()
            .zip(batch)
            .map(|(p, b)| b.per_s / p.per_s)
            .collect();
        ratios.sort_by(|a, b| a.partial_cmp(b).unwrap());
        for (kind, rs) in [("plain", plain), ("batch members", batch)] {
            let (calls, usec, scripts, cpu, by) = per_job(rs);
            let ratio = if kind == "plain" {
                String::new()
            } else {
                format!(
                    "{:.2} [{:.2}–{:.2}]",
                    median(ratios.clone()),
                    ratios[0],
                    ratios[ratios.len() - 1]
                )
            };
            println!(
                "| {} | {kind} | {:.0} | {ratio} | {calls:.2} | {usec:.1} | {scripts:.1} | {cpu:.1} | {by} |",
                if queue == "bb_plain" {
                    "plain"
                } else {
                    "sharded, 3 tenants"
                },
                median(rs.iter().map(|r| r.per_s).collect()),
            );
        }
    }

    // 3. Memory per pending member, against plain jobs; no SLOWLOG kept
    // meanwhile (its entries would count).
    slowlog_off(&url).await;
    flush(&url).await;
    let mem0 = used_memory(&url).await;
    let t = Instant::now();
    Batch::new()
        .push_bulk((0..members).map(Noop))
        .commit(&c)
        .await
        .unwrap();
    let commit_0 = t.elapsed();
    let mem1 = used_memory(&url).await;
    let sizes = key_sizes(&url, &prefix).await;
    flush(&url).await;
    let pmem0 = used_memory(&url).await;
    c.push_bulk((0..members).map(Noop)).await.unwrap();
    let pmem1 = used_memory(&url).await;
    let psizes = key_sizes(&url, &prefix).await;
    let per_member = (mem1 - mem0) / members as f64;
    let per_plain = (pmem1 - pmem0) / members as f64;
    let keys_member = sizes.iter().map(|k| k.1).sum::<u64>() as f64 / members as f64;
    let keys_plain = psizes.iter().map(|k| k.1).sum::<u64>() as f64 / members as f64;
    println!(
        "\nmemory (commit {:.2} s, no SLOWLOG): {members} batch members {per_member:.0} bytes each (keys' MEMORY USAGE {keys_member:.0}), \
         {members} plain jobs {per_plain:.0} bytes each ({keys_plain:.0}): the batch's own {:.0} bytes per member ({:.0})",
        commit_0.as_secs_f64(),
        per_member - per_plain,
        keys_member - keys_plain
    );
    println!("keys after the batch's commit (MEMORY USAGE, bytes): {sizes:?}");
    println!("keys after the plain push: {psizes:?}");

    // 2. A large commit with SLOWLOG at 1 ms, and its completion.
    flush(&url).await;
    let mut slow = SlowLog::start_keeping(&url, 1000, 100_000).await.unwrap();
    let t = Instant::now();
    let bid = Batch::new()
        .push_bulk((0..members).map(Noop))
        .commit(&c)
        .await
        .unwrap();
    let commit_1 = t.elapsed();
    let commit_slow = slow.report().await.unwrap();
    let _: () = redis::cmd("SLOWLOG")
        .arg("RESET")
        .query_async(&mut raw(&url).await)
        .await
        .unwrap();
    let run = work(&url, &ns, "bb_plain", members, concurrency).await;
    let done_1 = completed(&c, &bid, 30).await;
    let end_slow = slow.report().await.unwrap();
    println!(
        "\ncommit of {members} members: {:.2} s; SLOWLOG over 1 ms during it: {commit_slow}; \
         during its completion ({:.0} jobs/s, complete fired: {done_1}): {end_slow}",
        commit_1.as_secs_f64(),
        run.per_s
    );

    // The same commit with the time of every call over `slow_us` (at 0 Redis
    // would log every command inside a script too, which slows the scripts
    // down), and its completion.
    flush(&url).await;
    let mut all = SlowLog::start_keeping(&url, slow_us, 100_000)
        .await
        .unwrap();
    let t = Instant::now();
    let bid = Batch::new()
        .push_bulk((0..members).map(Noop))
        .commit(&c)
        .await
        .unwrap();
    let commit_2 = t.elapsed();
    let commit_times = all.times().await.unwrap();
    let mut tail = SlowLog::start_keeping(&url, slow_us, 100_000)
        .await
        .unwrap();
    let run2 = work(&url, &ns, "bb_plain", members, concurrency).await;
    let done_2 = completed(&c, &bid, 30).await;
    let end_times = tail.times().await.unwrap();
    println!(
        "\nsecond commit of {members} members: {:.2} s (calls over {slow_us} µs logged); completion {:.0} jobs/s, complete fired: {done_2}",
        commit_2.as_secs_f64(),
        run2.per_s
    );
    print_slow_calls(
        slow_us,
        &[
            ("the commit", &commit_times),
            ("its completion", &end_times),
        ],
    );

    // 4. A workflow: a root and `steps` steps held on it; its memory
    // without SLOWLOG, then a second one committed and run with it.
    let workflow = || {
        let mut wf = Workflow::new().add("root", Noop(0));
        for i in 0..steps {
            wf = wf.add_after(format!("s{i:05}"), Noop(i + 1), ["root"]);
        }
        wf
    };
    slowlog_off(&url).await;
    flush(&url).await;
    let wmem0 = used_memory(&url).await;
    let t = Instant::now();
    workflow().commit(&c).await.unwrap();
    let wcommit_0 = t.elapsed();
    let wmem1 = used_memory(&url).await;
    let wsizes = key_sizes(&url, &prefix).await;
    flush(&url).await;
    let wf = workflow();
    let mut all = SlowLog::start_keeping(&url, slow_us, 100_000)
        .await
        .unwrap();
    let t = Instant::now();
    let wid = wf.commit(&c).await.unwrap();
    let wcommit = t.elapsed();
    let wcommit_times = all.times().await.unwrap();
    let mut tail = SlowLog::start_keeping(&url, slow_us, 100_000)
        .await
        .unwrap();
    let wrun = work(&url, &ns, "bb_plain", steps + 1, concurrency).await;
    let wdone = completed(&c, &wid, 30).await;
    let wend_times = tail.times().await.unwrap();
    let per_step = (wmem1 - wmem0) / steps as f64;
    let keys_step = wsizes.iter().map(|k| k.1).sum::<u64>() as f64 / steps as f64;
    println!(
        "\nworkflow of 1 root + {steps} steps on it: commit {:.3} s (no SLOWLOG), {:.3} s (SLOWLOG at {slow_us} µs); \
         memory {per_step:.0} bytes per held step (keys' MEMORY USAGE {keys_step:.0}; {:.0} over a plain pending job's {per_plain:.0}); \
         ran at {:.0} jobs/s, complete fired: {wdone}",
        wcommit_0.as_secs_f64(),
        wcommit.as_secs_f64(),
        per_step - per_plain,
        wrun.per_s
    );
    println!("keys after the workflow's commit (MEMORY USAGE, bytes): {wsizes:?}");
    print_slow_calls(
        slow_us,
        &[("the commit", &wcommit_times), ("its run", &wend_times)],
    );
}
