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
//! 4. Tenant rates on a sharded queue (`--shard-jobs`, `--shard-tenants`):
//!    a shard policy rate far above reach on every tenant against none,
//!    alternating, median of `--reps`; one tenant at 50/s next to a backlogged
//!    unlimited one (`--shard-paced`): its achieved rate, its most starts in
//!    any second, and what the other took meanwhile; `--shard-many` tenants
//!    at 1/s with 3 jobs each, with the SLOWLOG.
//!    With `--times 1`, every command of the two many-keys phases is logged
//!    (SLOWLOG at 0 µs): each script's calls, median, p99, slowest and calls
//!    over 1 ms, and the plain commands over 1 ms beside them (the machine's share).
//! 5. The proof (`--proof 600`): 600 jobs at 20/s on a worker at
//!    concurrency 10, 500 unlimited jobs pushed after them: the limited run's
//!    span and most starts in any second, how long the unlimited ones took.
//!
//! `cargo run --release -p fairjob-tests --bin rates_bench -- [--jobs 2000] [--keys 10] [--concurrency 20] [--reps 3] [--paced 250] [--many 10000] [--shard-jobs 4000] [--shard-tenants 10] [--shard-paced 100] [--shard-many 10000] [--proof 600] [--times 0|1]`

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use fairjob::Registry;
use fairjob_tests::flag;
use fairjob_tests::rate_jobs::{
    BenchKeyedJob, BenchPacedJob, BenchProofFreeJob, BenchProofJob, BenchRateJob, BenchShardJob,
    BenchUnratedJob, RATE_BENCH_DONE, RATE_BENCH_STARTS, SHARD_BENCH_STARTS,
};
use fairjob_tests::slowlog::{SlowLog, summarize};

#[derive(Clone, Copy)]
enum Kind {
    Limited,
    Free,
    Paced,
    Many,
}

/// `--times 1`: every command's time in the many-keys phases.
fn all_times() -> bool {
    flag("--times", 0u8) == 1
}

/// The SLOWLOG of a phase: every command (`all`) or those over 1 ms.
async fn slowlog(url: &str, all: bool) -> SlowLog {
    if all {
        SlowLog::start_all(url, 5_000_000).await.unwrap()
    } else {
        SlowLog::start(url, 1000).await.unwrap()
    }
}

/// Every script's time in a phase logged at 0 µs, and the plain commands
/// over 1 ms beside them.
async fn print_times(slow: &mut SlowLog, what: &str) {
    let times = slow.times().await.unwrap();
    let mut names: Vec<&str> = times
        .keys()
        .filter(|n| n.ends_with(".lua"))
        .map(String::as_str)
        .collect();
    names.push("TIME");
    let plain: Vec<u64> = times
        .iter()
        .filter(|(n, _)| !n.ends_with(".lua"))
        .flat_map(|(_, v)| v.iter().copied())
        .collect();
    let over: Vec<String> = times
        .iter()
        .filter(|(n, _)| !n.ends_with(".lua"))
        .filter_map(|(n, v)| {
            let c = v.iter().filter(|&&u| u > 1000).count();
            (c > 0).then(|| format!("{n} ×{c} (max {} µs)", v.iter().max().unwrap()))
        })
        .collect();
    println!(
        "every call's time ({what}, SLOWLOG at 0 µs):\n| script | calls | median µs | p99 µs | slowest µs | calls over 1 ms |\n|---|---:|---:|---:|---:|---:|\n{}\nplain commands: {} calls, {} over 1 ms: {}",
        summarize(&times, &names, 1000),
        plain.len(),
        plain.iter().filter(|&&u| u > 1000).count(),
        over.join(", ")
    );
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
    let all = matches!(kind, Kind::Many) && all_times();
    let mut slow = slowlog(&url, all).await;
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
    let cmds = fairjob_tests::redis_commands(&url).await;
    if all {
        print_times(&mut slow, "many keys").await;
        task.await.unwrap().unwrap();
        return (wall, cmds as f64 / jobs as f64);
    }
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

/// Runs a worker of every bench queue on `url` until `target` jobs are done;
/// returns the wall time and prints the SLOWLOG (commands over 1 ms).
async fn phase(url: &str, concurrency: usize, target: usize, what: &str) -> Duration {
    let mut registry = Registry::new();
    registry.register::<BenchShardJob>().unwrap();
    registry.register::<BenchProofJob>().unwrap();
    registry.register::<BenchProofFreeJob>().unwrap();
    let worker = fairjob::Worker::builder(url)
        .registry(registry)
        .queues(fairjob_tests::queues(&["bench_shard", "bench_rates"]))
        .concurrency(concurrency)
        .poll_interval(Duration::from_millis(50))
        .scheduled_poll_interval(Duration::from_secs(5))
        .build()
        .await
        .unwrap();
    let all = what == "tenants at 1/s" && all_times();
    let mut slow = slowlog(url, all).await;
    RATE_BENCH_DONE.store(0, Ordering::SeqCst);
    SHARD_BENCH_STARTS.lock().unwrap().clear();
    let started = Instant::now();
    let task = tokio::spawn(worker.run_until(async move {
        while RATE_BENCH_DONE.load(Ordering::SeqCst) < target {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }));
    while RATE_BENCH_DONE.load(Ordering::SeqCst) < target {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let wall = started.elapsed();
    if all {
        print_times(&mut slow, what).await;
    } else {
        let report = slow.report().await.unwrap();
        println!("slowlog ({what}): {report}");
    }
    task.await.unwrap().unwrap();
    wall
}

fn tenant_rate(text: &str) -> fairjob::broker::ShardRate {
    fairjob::rate::parse_tenant_rate(text).unwrap()
}

/// Tenant rates far above reach on `tenants` tenants (or none): jobs/s.
async fn shard_overhead(rated: bool, jobs: u32, tenants: u32, concurrency: usize) -> f64 {
    let server = fairjob_tests::redis();
    let url = server.url();
    let client = fairjob::Client::connect(&url).await.unwrap();
    if rated {
        client
            .shard_policy("bench_shard")
            .rate(tenant_rate("1000000/s"))
            .apply()
            .await
            .unwrap();
    }
    client
        .push_bulk((0..jobs).map(|i| BenchShardJob {
            tenant: i % tenants,
        }))
        .await
        .unwrap();
    let wall = phase(
        &url,
        concurrency,
        jobs as usize,
        if rated { "rated" } else { "unrated" },
    )
    .await;
    f64::from(jobs) / wall.as_secs_f64()
}

/// The most starts in any 1 s window.
fn most_in_second(times: &[Instant]) -> usize {
    times
        .iter()
        .map(|a| {
            times
                .iter()
                .filter(|t| **t >= *a && t.duration_since(*a) < Duration::from_secs(1))
                .count()
        })
        .max()
        .unwrap_or(0)
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
    if jobs > 0 {
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
    }
    if paced > 0 {
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
    }
    if many > 0 {
        let (wall, _) = run(Kind::Many, many * 3, many, concurrency).await;
        println!(
            "many keys: {many} keys at 1/s, 3 jobs each (2 wait): all {} ran in {wall:.2?} (ideal just over 2 s); \
             no slowlog line above means no command over 1 ms",
            many * 3
        );
    }
    shard_phases(reps, concurrency).await;
    proof().await;
}

async fn shard_phases(reps: u64, concurrency: usize) {
    let (jobs, tenants) = (
        flag("--shard-jobs", 4000) as u32,
        flag("--shard-tenants", 10) as u32,
    );
    let paced = flag("--shard-paced", 100) as u32;
    let many = flag("--shard-many", 10_000) as u32;
    if jobs > 0 {
        let (mut rated, mut free) = (vec![], vec![]);
        for _ in 0..reps {
            rated.push(shard_overhead(true, jobs, tenants, concurrency).await);
            free.push(shard_overhead(false, jobs, tenants, concurrency).await);
        }
        let (r, f) = (median(rated.clone()), median(free.clone()));
        println!(
            "shard overhead: {jobs} jobs, {tenants} tenants, concurrency {concurrency}, median of {reps}: \
             tenant rate far above reach {r:.0} jobs/s {rated:.0?}, no rate {f:.0} jobs/s {free:.0?}: {:+.1}%",
            (r / f - 1.0) * 100.0
        );
    }
    if paced > 0 {
        let server = fairjob_tests::redis();
        let url = server.url();
        let client = fairjob::Client::connect(&url).await.unwrap();
        client
            .shard_policy("bench_shard")
            .tenant("0")
            .rate(tenant_rate("50/s"))
            .apply()
            .await
            .unwrap();
        client
            .push_bulk((0..paced).map(|_| BenchShardJob { tenant: 0 }))
            .await
            .unwrap();
        // Tenant 1, unlimited, has far more than the run can take.
        let other = paced * 500;
        client
            .push_bulk((0..other).map(|_| BenchShardJob { tenant: 1 }))
            .await
            .unwrap();
        // Stops when tenant 0's jobs are done (or everything, whichever first
        // the counter reaches; tenant 1's jobs are counted too, so wait on 0's).
        SHARD_BENCH_STARTS.lock().unwrap().clear();
        let dispatched = fairjob_tests::rate_jobs::DispatchLog::start(&client, "bench_shard", "0");
        let url2 = url.clone();
        let run = tokio::spawn(async move {
            phase(
                &url2,
                concurrency,
                (paced + other) as usize,
                "tenant at 50/s",
            )
            .await
        });
        loop {
            let n = SHARD_BENCH_STARTS
                .lock()
                .unwrap()
                .iter()
                .filter(|(t, _)| *t == 0)
                .count();
            if n >= paced as usize || run.is_finished() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let starts = SHARD_BENCH_STARTS.lock().unwrap().clone();
        RATE_BENCH_DONE.store(usize::MAX / 2, Ordering::SeqCst);
        let _ = run.await;
        let a: Vec<Instant> = starts
            .iter()
            .filter(|(t, _)| *t == 0)
            .map(|x| x.1)
            .collect();
        let span = a.last().unwrap().duration_since(a[0]);
        let ideal = Duration::from_millis(20 * u64::from(paced - 1));
        let b = starts
            .iter()
            .filter(|(t, at)| *t == 1 && *at >= a[0] && *at <= *a.last().unwrap())
            .count();
        println!(
            "shard precision: tenant 0 at 50/s, {paced} jobs, next to a backlogged unlimited tenant: \
             span {span:.2?} (ideal {ideal:.2?}, {:+.1}%), achieved {:.1}/s, at most {} in any 1 s window; \
             tenant 1 started {b} jobs meanwhile ({:.0}/s)",
            (span.as_secs_f64() / ideal.as_secs_f64() - 1.0) * 100.0,
            f64::from(paced - 1) / span.as_secs_f64(),
            most_in_second(&a),
            b as f64 / span.as_secs_f64()
        );
        // Where the limit counts: the dispatches, on Redis's clock.
        let d = dispatched.times();
        if d.len() >= 2 {
            let d_span = Duration::from_micros(d[d.len() - 1] - d[0]);
            println!(
                "shard precision, judged at the dispatch: {} dispatches seen over {d_span:.2?}, \
                 achieved {:.1}/s, at most {} in any 1 s window",
                d.len(),
                (d.len() - 1) as f64 / d_span.as_secs_f64(),
                fairjob_tests::rate_jobs::max_in_window(&d, 1_000_000)
            );
            let mut gaps: Vec<u64> = d.windows(2).map(|w| (w[1] - w[0]) / 1000).collect();
            if std::env::var_os("RATES_BENCH_GAPS").is_some() {
                println!("gaps (ms, in order): {gaps:?}");
            }
            gaps.sort_unstable();
            println!(
                "dispatch gaps: median {} ms, p90 {} ms, max {} ms",
                gaps[gaps.len() / 2],
                gaps[gaps.len() * 9 / 10],
                gaps[gaps.len() - 1]
            );
        }
    }
    if many > 0 {
        let server = fairjob_tests::redis();
        let url = server.url();
        let client = fairjob::Client::connect(&url).await.unwrap();
        client
            .shard_policy("bench_shard")
            .rate(tenant_rate("1/s"))
            .apply()
            .await
            .unwrap();
        for chunk in (0..many * 3).collect::<Vec<_>>().chunks(1000) {
            client
                .push_bulk(chunk.iter().map(|&i| BenchShardJob { tenant: i / 3 }))
                .await
                .unwrap();
        }
        let wall = phase(&url, concurrency, (many * 3) as usize, "tenants at 1/s").await;
        println!(
            "shard many: {many} tenants at 1/s, 3 jobs each: all {} ran in {wall:.2?} (ideal just over 2 s)",
            many * 3
        );
    }
}

/// 600 jobs at 20/s, concurrency 10, then 500 unlimited.
async fn proof() {
    let n = flag("--proof", 600) as usize;
    if n == 0 {
        return;
    }
    let server = fairjob_tests::redis();
    let url = server.url();
    let client = fairjob::Client::connect(&url).await.unwrap();
    client
        .push_bulk((0..n).map(|_| BenchProofJob { ms: 50 }))
        .await
        .unwrap();
    SHARD_BENCH_STARTS.lock().unwrap().clear();
    // The starts as the limiter counts them (Redis's clock), beside the
    // jobs' own start times (the process's clock, after each grant).
    let granted = fairjob_tests::rate_jobs::DispatchLog::grants(&client, "BenchProofJob", 50_000);
    let url2 = url.clone();
    let run = tokio::spawn(async move { phase(&url2, 10, n + 500, "proof").await });
    // The unlimited jobs are pushed once the limited ones run.
    while SHARD_BENCH_STARTS.lock().unwrap().len() < 20 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let pushed = Instant::now();
    client
        .push_bulk((0..500).map(|_| BenchProofFreeJob { ms: 50 }))
        .await
        .unwrap();
    let wall = run.await.unwrap();
    let starts = SHARD_BENCH_STARTS.lock().unwrap().clone();
    let limited: Vec<Instant> = starts
        .iter()
        .filter(|(k, _)| *k == 1)
        .map(|x| x.1)
        .collect();
    let free: Vec<Instant> = starts
        .iter()
        .filter(|(k, _)| *k == 2)
        .map(|x| x.1)
        .collect();
    let span = limited.last().unwrap().duration_since(limited[0]);
    let free_done = free.last().unwrap().duration_since(pushed);
    let retries: u64 = redis::cmd("ZCARD")
        .arg("retry")
        .query_async(&mut fairjob_tests::raw(&url).await)
        .await
        .unwrap();
    println!(
        "proof: {n} jobs at 20/s, concurrency 10: span {span:.2?} (ideal {:.2?}, {:+.1}%), at most {} in any 1 s window; \
         500 unlimited pushed after them all started within {free_done:.2?}; retries {retries}; wall {wall:.2?}",
        Duration::from_millis(50 * (n as u64 - 1)),
        (span.as_secs_f64() / (0.05 * (n - 1) as f64) - 1.0) * 100.0,
        most_in_second(&limited)
    );
    let g = granted.times();
    println!(
        "proof, judged at the grant (Redis's clock): {} grants seen over {:.2?}, at most {} in any 1 s window",
        g.len(),
        Duration::from_micros(g.last().unwrap_or(&0) - g.first().unwrap_or(&0)),
        fairjob_tests::rate_jobs::max_in_window(&g, 1_000_000)
    );
}
