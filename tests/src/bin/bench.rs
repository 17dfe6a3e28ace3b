//! `bench`: fairjob's throughput and cost, side by side with Debian's Ruby
//! Sidekiq 6.4.1, each against its own private `redis-server`, in one run.
//!
//! ```text
//! cargo run --release -p fairjob-tests --bin bench -- [--jobs 100000] [--reps 3] [--out target/bench/bench.md]
//! ```
//!
//! Measures (median [min–max] of `--reps` repetitions, fairjob and Sidekiq
//! interleaved rep by rep): enqueue jobs/s (single `perform_async` in a loop and
//! `push_bulk` in batches of 1,000, with and without two reroute rules),
//! processing jobs/s of no-op jobs through one worker process at each
//! `--concurrency` from a pre-filled queue (first job start → N-th perform, timed
//! by the job itself), enqueue → perform-start latency at a steady rate, Redis
//! commands per job (`CONFIG RESETSTAT` + `INFO commandstats`, plus a `MONITOR`
//! census of what clients send), the worker's peak RSS (`VmHWM`), and raw Redis
//! ceilings from `redis-benchmark`. With `--metrics-cost`, processing also runs
//! with metrics on (as `worker run --metrics`), interleaved with off, and the
//! report gives the ratio. Prints a Markdown report and writes it to `--out`.
//!
//! `--peers rusty-sidekiq,bullmq` adds two more queues to the same run, each
//! through its own client and worker against its own private `redis-server`:
//! bulk enqueue in batches of 1,000 and no-op processing at each `--concurrency`,
//! reported in a table of their own ("Peers"). rusty-sidekiq's side is the crate
//! in `tests/peers/` (its own workspace), built in release on demand into
//! `$FAIRJOB_PEERS_TARGET` (default: `<temp dir>/fairjob-peers-target`, kept
//! between runs, never under `target/`); BullMQ's is `tests/peers/bullmq/bench.mjs`,
//! run by `node` after an `npm install` into a temporary directory removed at
//! the end. A peer whose toolchain is missing is reported as skipped.
//!
//! The fairjob worker is this same binary re-executed with the hidden
//! `--worker-url` flag: a separate process that builds `fairjob::Worker` exactly
//! as `fairjob_worker::main!` does (multi-threaded Tokio runtime, registered jobs,
//! explicit queue), logging at warn.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Parser;
use fairjob::payload::now_f64;
use fairjob::{Client, Job, JobContext, JobError, Perform, QueueSpec, Registry, Worker};
use fairjob_tests::{RedisServer, percentile};
use redis::aio::MultiplexedConnection;
use serde::{Deserialize, Serialize};

// ---------------------------------------------------------------------------
// Jobs (the Ruby twins are in tests/ruby/bench/jobs.rb)

/// Marker keys written by the no-op job on call 1 and call N.
const FIRST_KEY: &str = "bench:first";
const LAST_KEY: &str = "bench:last";
/// List of enqueue → start latencies (µs) written by the latency job.
const LAT_KEY: &str = "bench:lat";

/// Processing: a no-op that stamps call 1 and call `FAIRJOB_BENCH_N`.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "BenchNoopJob", queue = "bench")]
struct BenchNoop(u64);

static PERFORMED: AtomicU64 = AtomicU64::new(0);

fn target_n() -> u64 {
    static N: OnceLock<u64> = OnceLock::new();
    *N.get_or_init(|| {
        std::env::var("FAIRJOB_BENCH_N")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    })
}

impl Perform for BenchNoop {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        let count = PERFORMED.fetch_add(1, Ordering::Relaxed) + 1;
        let broker = cx.client().broker();
        if count == 1 {
            fairjob_tests::query::<()>(
                broker,
                redis::cmd("SET").arg(FIRST_KEY).arg(now_f64().to_string()),
            )
            .await?;
        }
        if count == target_n() {
            fairjob_tests::query::<()>(
                broker,
                redis::cmd("SET").arg(LAST_KEY).arg(now_f64().to_string()),
            )
            .await?;
        }
        Ok(())
    }
}

/// Latency: its argument is the enqueue time; records start − enqueue in µs.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "BenchLatencyJob", queue = "bench_lat")]
struct BenchLatency(f64);

impl Perform for BenchLatency {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        let micros = ((now_f64() - self.0) * 1e6).round() as i64;
        fairjob_tests::query::<()>(
            cx.client().broker(),
            redis::cmd("RPUSH").arg(LAT_KEY).arg(micros),
        )
        .await?;
        Ok(())
    }
}

/// Enqueue without rules: a tenant on the payload, nothing counted.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "BenchTenantJob", queue = "bench_enq")]
#[fair_tenant(0)]
struct BenchTenant(String, u64);

impl Perform for BenchTenant {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// Enqueue with two reroute rules (each push counts in the tenant's window).
// Two `#[throttle]` rules repeat key names, which clippy mistakes for duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "BenchRulesJob", queue = "bench_enq")]
#[fair_tenant(0)]
#[throttle(queue = "bench_enq_throttled", threshold = 100, per = "1h")]
#[throttle(queue = "bench_enq_slowest", threshold = 1000, per = "1h")]
struct BenchRules(String, u64);

impl Perform for BenchRules {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// Tenants the enqueue jobs cycle through.
const ENQ_TENANTS: u64 = 100;

fn tenant(i: u64) -> String {
    format!("t{}", i % ENQ_TENANTS)
}

// ---------------------------------------------------------------------------
// Command line

/// fairjob vs Sidekiq 6.4.1: enqueue, processing, latency, Redis commands, RSS.
#[derive(Debug, Parser)]
#[command(name = "bench")]
struct Args {
    /// Jobs per bulk enqueue and per processing run (the pre-filled queue)
    #[arg(long, default_value_t = 100_000)]
    jobs: u64,
    /// Jobs per single-`perform_async` loop (round-trip bound, so fewer)
    #[arg(long, default_value_t = 20_000)]
    single_jobs: u64,
    /// Repetitions; every figure is the median of these
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Worker concurrencies to measure processing at
    #[arg(long, value_delimiter = ',', default_value = "10,25")]
    concurrency: Vec<usize>,
    /// Latency run: jobs pushed at a steady rate (jobs/s) …
    #[arg(long, default_value_t = 1000.0)]
    latency_rate: f64,
    /// … this many of them, to a worker at the first concurrency
    #[arg(long, default_value_t = 5000)]
    latency_jobs: u64,
    /// Jobs per path in the MONITOR census of client commands (run once)
    #[arg(long, default_value_t = 2000)]
    census_jobs: u64,
    /// Requests per redis-benchmark run
    #[arg(long, default_value_t = 100_000)]
    redis_benchmark_n: u64,
    /// Skip the Ruby Sidekiq side (no Ruby needed)
    #[arg(long)]
    skip_sidekiq: bool,
    /// Skip the redis-benchmark ceilings
    #[arg(long)]
    skip_redis_benchmark: bool,
    /// Processing also with metrics on (the Prometheus recorder and the
    /// `/metrics` listener, as `worker run --metrics`), interleaved with off
    /// in each repetition, and the cost as the median of the per-rep ratios
    #[arg(long)]
    metrics_cost: bool,
    /// Other queues to measure in the same run, when their toolchains are present: rusty-sidekiq (cargo), bullmq (node + npm)
    #[arg(long, value_delimiter = ',')]
    peers: Vec<String>,
    /// Run only these sections (enqueue, enqueue-plain, processing, latency, ceilings, census), e.g. to profile one
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Markdown report
    #[arg(long, default_value = "target/bench/bench.md")]
    out: PathBuf,
    /// Internal: run as the fairjob worker process against this Redis URL
    #[arg(long, hide = true)]
    worker_url: Option<String>,
    /// Internal: the worker's concurrency
    #[arg(long, hide = true, default_value_t = 10)]
    worker_concurrency: usize,
    /// Internal: the worker's queue
    #[arg(long, hide = true, default_value = "bench")]
    worker_queue: String,
}

impl Args {
    /// Whether the section runs (all of them unless `--only` names some).
    fn runs(&self, section: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|o| o == section)
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(url) = args.worker_url.clone() {
        return match run_worker(&url, args.worker_concurrency, &args.worker_queue) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("bench worker: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    fairjob_tests::run_main("bench", run(args))
}

/// The worker process: what `fairjob_worker::main!` runs, with the bench jobs.
fn run_worker(url: &str, concurrency: usize, queue: &str) -> Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_from_env("FAIRJOB_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let mut registry = Registry::new();
        registry
            .register::<BenchNoop>()?
            .register::<BenchLatency>()?;
        // FAIRJOB_BENCH_WAIT_STATS=off measures the worker without its
        // per-tenant wait statistics (to price them).
        let wait_stats = std::env::var("FAIRJOB_BENCH_WAIT_STATS").as_deref() != Ok("off");
        // FAIRJOB_BENCH_BATCH_ACKS=off: one ack call per job (to price batching).
        let batch_acks = std::env::var("FAIRJOB_BENCH_BATCH_ACKS").as_deref() != Ok("off");
        // FAIRJOB_BENCH_METRICS=on: what `worker run --metrics` adds (the
        // recorder, and the listener with its once-a-second upkeep).
        let metrics = std::env::var("FAIRJOB_BENCH_METRICS").as_deref() == Ok("on");
        let config = fairjob::config::MetricsConfig::default();
        let recorder = if metrics {
            Some(fairjob_worker::install_metrics(&config)?)
        } else {
            None
        };
        let worker = Worker::builder(url)
            .registry(registry)
            .queues(QueueSpec::parse(&[queue.to_owned()])?)
            .concurrency(concurrency)
            .wait_stats(wait_stats)
            .batch_acks(batch_acks)
            .metrics(config)
            .build()
            .await?;
        let handle = fairjob::WorkerHandle::new();
        let listener = match recorder {
            Some(r) => Some(
                fairjob_worker::serve_metrics(
                    "127.0.0.1:0".parse()?,
                    r,
                    handle.clone(),
                    worker.client().clone(),
                )
                .await?,
            ),
            None => None,
        };
        worker.run_with_signals(handle).await?;
        if let Some(l) = listener {
            l.stop().await;
        }
        Ok(())
    })
}

// ---------------------------------------------------------------------------
// Statistics and formatting

/// Median, min, max.
#[derive(Debug, Clone, Copy)]
struct Summary {
    med: f64,
    min: f64,
    max: f64,
}

fn summarize(v: &[f64]) -> Option<Summary> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    let med = if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    };
    Some(Summary {
        med,
        min: s[0],
        max: s[n - 1],
    })
}

/// The stdout of a finished command, or its stderr as the error.
fn stdout_of(out: std::process::Output, what: &str) -> Result<String> {
    if !out.status.success() {
        bail!("{what} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The enqueue paths of the report's tables: (label, sample key).
fn enqueue_paths() -> Vec<(String, String)> {
    [
        ("enqueue `perform_async`, no rules", "single_plain"),
        ("enqueue `perform_async`, 2 rules", "single_rules"),
        ("enqueue `push_bulk`, no rules", "bulk_plain"),
        ("enqueue `push_bulk`, 2 rules", "bulk_rules"),
    ]
    .into_iter()
    .map(|(label, key)| (label.to_owned(), key.to_owned()))
    .collect()
}

/// `12.3k`, `850`, `1.23M`.
fn si(x: f64) -> String {
    if !x.is_finite() {
        "–".into()
    } else if x >= 999_500.0 {
        format!("{:.2}M", x / 1e6)
    } else if x >= 9_995.0 {
        format!("{:.1}k", x / 1e3)
    } else if x >= 1_000.0 {
        format!("{:.2}k", x / 1e3)
    } else if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

fn cell(s: Option<Summary>, fmt: fn(f64) -> String) -> String {
    match s {
        Some(s) if s.min != s.max => format!("{} [{}–{}]", fmt(s.med), fmt(s.min), fmt(s.max)),
        Some(s) => fmt(s.med),
        None => "–".into(),
    }
}

fn ratio(a: Option<Summary>, b: Option<Summary>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b.med > 0.0 => format!("{:.2}", a.med / b.med),
        _ => "–".into(),
    }
}

// ---------------------------------------------------------------------------
// Redis helpers

async fn connect(url: &str) -> Result<MultiplexedConnection> {
    Ok(redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?)
}

async fn flushall(con: &mut MultiplexedConnection) -> Result<()> {
    redis::cmd("FLUSHALL").query_async::<()>(con).await?;
    Ok(())
}

async fn reset_stats(con: &mut MultiplexedConnection) -> Result<()> {
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async::<()>(con)
        .await?;
    Ok(())
}

/// Commands the harness itself sends, left out of the per-job counts.
fn harness_command(name: &str) -> bool {
    name.starts_with("config") || name.starts_with("info") || name == "flushall" || name == "strlen"
}

/// `INFO commandstats` → (commands, script calls), without the harness's own.
async fn command_counts(con: &mut MultiplexedConnection) -> Result<(u64, u64)> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(con)
        .await?;
    if std::env::var_os("FAIRJOB_BENCH_STATS").is_some() {
        eprintln!("{info}"); // for profiling: per-command calls and Redis µs
    }
    let (mut total, mut scripts) = (0, 0);
    for (name, calls) in fairjob_tests::commandstats_calls(&info) {
        if harness_command(&name) {
            continue;
        }
        total += calls;
        if matches!(
            name.as_str(),
            "eval" | "evalsha" | "fcall" | "eval_ro" | "evalsha_ro"
        ) {
            scripts += calls;
        }
    }
    Ok((total, scripts))
}

async fn get_f64(con: &mut MultiplexedConnection, key: &str) -> Result<f64> {
    let v: Option<String> = redis::cmd("GET").arg(key).query_async(con).await?;
    v.with_context(|| format!("{key} is not set"))?
        .parse::<f64>()
        .with_context(|| format!("{key} is not a number"))
}

/// Waits until `key` exists (polled with STRLEN, which the jobs never use),
/// failing early if the worker process dies.
async fn wait_key(
    con: &mut MultiplexedConnection,
    key: &str,
    child: &mut Child,
    timeout: Duration,
) -> Result<()> {
    wait_key_every(con, key, child, timeout, Duration::from_millis(50)).await
}

async fn wait_key_every(
    con: &mut MultiplexedConnection,
    key: &str,
    child: &mut Child,
    timeout: Duration,
    poll: Duration,
) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let len: i64 = redis::cmd("STRLEN").arg(key).query_async(con).await?;
        if len > 0 {
            return Ok(());
        }
        if let Some(status) = child.try_wait()? {
            bail!("the worker exited ({status}) before {key} was set");
        }
        if Instant::now() > deadline {
            bail!("{key} not set within {timeout:?}");
        }
        tokio::time::sleep(poll).await;
    }
}

/// Waits until a worker has announced itself in `processes` (both Sidekiq and fairjob do).
async fn wait_ready(
    con: &mut MultiplexedConnection,
    child: &mut Child,
    timeout: Duration,
) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let n: i64 = redis::cmd("SCARD")
            .arg("processes")
            .query_async(con)
            .await?;
        if n > 0 {
            tokio::time::sleep(Duration::from_millis(300)).await;
            return Ok(());
        }
        if let Some(status) = child.try_wait()? {
            bail!("the worker exited ({status}) during start-up");
        }
        if Instant::now() > deadline {
            bail!("the worker did not register within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Peak resident set (`VmHWM`) of a process, in KiB.
fn vm_hwm_kb(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// CPU time process `pid` has used so far, in ns.
fn cpu_ns(pid: u32) -> u64 {
    fairjob_tests::process_cpu_ns(&pid.to_string())
}

/// CPU µs per job from two `cpu_ns` readings.
fn cpu_us_per_job(before: u64, after: u64, jobs: f64) -> f64 {
    after.saturating_sub(before) as f64 / 1e3 / jobs.max(1.0)
}

/// Waits for a drain from the first job's marker to the N-th's; records the
/// rate, peak RSS, CPU per job of the worker and of Redis, and commands per job.
async fn measure_drain(
    side: &mut Side,
    child: &mut Child,
    c: usize,
    n: u64,
    s: &mut Samples,
    tag: &str,
) -> Result<()> {
    let con = &mut side.con;
    wait_key_every(
        con,
        FIRST_KEY,
        child,
        Duration::from_secs(120),
        Duration::from_millis(2),
    )
    .await?;
    let (w0, r0, t0) = (
        cpu_ns(child.id()),
        cpu_ns(side.server.pid()),
        Instant::now(),
    );
    wait_key_every(
        con,
        LAST_KEY,
        child,
        drain_timeout(n),
        Duration::from_millis(20),
    )
    .await?;
    let (w1, r1, wall) = (
        cpu_ns(child.id()),
        cpu_ns(side.server.pid()),
        t0.elapsed().as_secs_f64(),
    );
    let first = get_f64(con, FIRST_KEY).await?;
    let last = get_f64(con, LAST_KEY).await?;
    let rate = n as f64 / (last - first).max(1e-6);
    s.add(format!("proc_{tag}c{c}"), rate);
    // CPU over the observed window, per job at the measured rate.
    let jobs_in_window = wall * rate;
    s.add(
        format!("cpu_client_proc_{tag}c{c}"),
        cpu_us_per_job(w0, w1, jobs_in_window),
    );
    s.add(
        format!("cpu_redis_proc_{tag}c{c}"),
        cpu_us_per_job(r0, r1, jobs_in_window),
    );
    if let Some(kb) = vm_hwm_kb(child.id()) {
        s.add(format!("rss_{tag}c{c}"), kb as f64 / 1024.0);
    }
    let (cmds, scripts) = command_counts(con).await?;
    s.add(format!("cmds_proc_{tag}c{c}"), cmds as f64 / n as f64);
    s.add(format!("scripts_proc_{tag}c{c}"), scripts as f64 / n as f64);
    Ok(())
}

/// SIGTERM, then SIGKILL if it lingers.
fn stop(child: &mut Child) {
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

// ---------------------------------------------------------------------------
// MONITOR census: what clients send, apart from what scripts run inside Redis

/// A running `MONITOR` connection counting client commands and in-script ones.
#[derive(Debug)]
struct Census {
    stream: TcpStream,
    reader: std::thread::JoinHandle<(u64, u64)>,
}

impl Census {
    fn start(port: u16) -> Result<Census> {
        let mut stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.write_all(b"MONITOR\r\n")?;
        let mut reader = BufReader::new(stream.try_clone()?);
        let mut ok = Vec::new();
        reader.read_until(b'\n', &mut ok)?;
        if !ok.starts_with(b"+OK") {
            bail!("MONITOR refused: {}", String::from_utf8_lossy(&ok));
        }
        let reader = std::thread::spawn(move || {
            let (mut client, mut lua) = (0u64, 0u64);
            let mut line = Vec::new();
            loop {
                line.clear();
                match reader.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                // +1712345678.123456 [0 127.0.0.1:43210] "EVALSHA" "…"   or   [0 lua] "RPOP" …
                let text = String::from_utf8_lossy(&line);
                let Some(close) = text.find("] \"") else {
                    continue;
                };
                let source = &text[..close];
                let cmd = text[close + 3..]
                    .split('"')
                    .next()
                    .unwrap_or("")
                    .to_ascii_lowercase();
                if source.ends_with(" lua") {
                    lua += 1;
                } else if !harness_command(&cmd) && (cmd != "get" || !text.contains("\"bench:")) {
                    client += 1;
                }
            }
            (client, lua)
        });
        Ok(Census { stream, reader })
    }

    /// Stops; returns (client commands, commands run inside scripts).
    fn finish(self) -> (u64, u64) {
        std::thread::sleep(Duration::from_millis(300));
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
        self.reader.join().unwrap_or((0, 0))
    }
}

// ---------------------------------------------------------------------------
// The two sides

/// Everything one side measured, by measure name.
#[derive(Debug, Default)]
struct Samples(BTreeMap<String, Vec<f64>>);

impl Samples {
    fn add(&mut self, key: impl Into<String>, v: f64) {
        self.0.entry(key.into()).or_default().push(v);
    }

    fn get(&self, key: &str) -> Option<Summary> {
        self.0.get(key).and_then(|v| summarize(v))
    }
}

/// One private redis-server with a harness connection.
struct Side {
    server: RedisServer,
    con: MultiplexedConnection,
}

impl std::fmt::Debug for Side {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Side")
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

impl Side {
    async fn start() -> Result<Side> {
        let server = RedisServer::start(&[]).context("starting a private redis-server")?;
        let con = connect(&server.url()).await?;
        Ok(Side { server, con })
    }

    fn url(&self) -> String {
        self.server.url()
    }
}

fn spawn_fairjob_worker(
    url: &str,
    concurrency: usize,
    queue: &str,
    n: u64,
    metrics: bool,
) -> Result<Child> {
    let exe = std::env::current_exe()?;
    Command::new(exe)
        .env("FAIRJOB_BENCH_METRICS", if metrics { "on" } else { "off" })
        .arg("--worker-url")
        .arg(url)
        .arg("--worker-concurrency")
        .arg(concurrency.to_string())
        .arg("--worker-queue")
        .arg(queue)
        .env("FAIRJOB_BENCH_N", n.to_string())
        .env(
            "FAIRJOB_LOG",
            std::env::var("FAIRJOB_BENCH_WORKER_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .context("starting the fairjob worker process")
}

fn ruby_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("ruby")
        .join("bench")
}

fn spawn_sidekiq(url: &str, concurrency: usize, queue: &str, n: u64, log: &Path) -> Result<Child> {
    let log = std::fs::File::create(log)?;
    Command::new("sidekiq")
        .arg("-r")
        .arg(ruby_dir().join("jobs.rb"))
        .arg("-c")
        .arg(concurrency.to_string())
        .arg("-q")
        .arg(queue)
        .env("REDIS_URL", url)
        .env("BENCH_N", n.to_string())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("starting sidekiq (apt-get install ruby-sidekiq?)")
}

/// Runs tests/ruby/bench/enqueue.rb; returns the wall and CPU seconds it reports.
fn ruby_enqueue(url: &str, mode: &str, n: u64) -> Result<(f64, f64)> {
    let out = Command::new("ruby")
        .arg(ruby_dir().join("enqueue.rb"))
        .arg(mode)
        .arg(n.to_string())
        .env("REDIS_URL", url)
        .output()
        .context("running ruby")?;
    let what = format!("enqueue.rb {mode}");
    wall_and_cpu(&stdout_of(out, &what)?, &what)
}

/// The `<wall seconds> <cpu seconds>` an enqueuer prints on its last line.
fn wall_and_cpu(text: &str, what: &str) -> Result<(f64, f64)> {
    let nums: Vec<f64> = text
        .lines()
        .last()
        .unwrap_or("")
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    match nums[..] {
        [wall, cpu] if wall > 0.0 => Ok((wall, cpu)),
        _ => bail!("{what} printed {text:?}, expected `<wall seconds> <cpu seconds>`"),
    }
}

fn drain_timeout(n: u64) -> Duration {
    Duration::from_secs(60 + n / 1000)
}

/// fairjob: the four enqueue paths.
async fn fairjob_enqueue(
    side: &mut Side,
    client: &Client,
    a: &Args,
    s: &mut Samples,
) -> Result<()> {
    for rules in [false, true] {
        if rules && !a.runs("enqueue") {
            continue; // --only enqueue-plain
        }
        let tag = if rules { "rules" } else { "plain" };
        // Single perform_async in a loop.
        flushall(&mut side.con).await?;
        reset_stats(&mut side.con).await?;
        let (c0, r0) = (cpu_ns(std::process::id()), cpu_ns(side.server.pid()));
        let t = Instant::now();
        for i in 0..a.single_jobs {
            if rules {
                BenchRules(tenant(i), i).perform_async(client).await?;
            } else {
                BenchTenant(tenant(i), i).perform_async(client).await?;
            }
        }
        s.add(
            format!("enq_single_{tag}"),
            a.single_jobs as f64 / t.elapsed().as_secs_f64(),
        );
        let (c1, r1) = (cpu_ns(std::process::id()), cpu_ns(side.server.pid()));
        let n = a.single_jobs as f64;
        s.add(
            format!("cpu_client_single_{tag}"),
            cpu_us_per_job(c0, c1, n),
        );
        s.add(format!("cpu_redis_single_{tag}"), cpu_us_per_job(r0, r1, n));
        let (cmds, scripts) = command_counts(&mut side.con).await?;
        s.add(
            format!("cmds_single_{tag}"),
            cmds as f64 / a.single_jobs as f64,
        );
        s.add(
            format!("scripts_single_{tag}"),
            scripts as f64 / a.single_jobs as f64,
        );

        // push_bulk (batches of 1,000 inside).
        flushall(&mut side.con).await?;
        reset_stats(&mut side.con).await?;
        let (c0, r0) = (cpu_ns(std::process::id()), cpu_ns(side.server.pid()));
        let (secs, pushed) = if rules {
            let jobs: Vec<_> = (0..a.jobs).map(|i| BenchRules(tenant(i), i)).collect();
            let t = Instant::now();
            let r = client.push_bulk(jobs).await?;
            (t.elapsed().as_secs_f64(), r.len())
        } else {
            let jobs: Vec<_> = (0..a.jobs).map(|i| BenchTenant(tenant(i), i)).collect();
            let t = Instant::now();
            let r = client.push_bulk(jobs).await?;
            (t.elapsed().as_secs_f64(), r.len())
        };
        anyhow::ensure!(
            pushed as u64 == a.jobs,
            "push_bulk returned {pushed} jids for {} jobs",
            a.jobs
        );
        s.add(format!("enq_bulk_{tag}"), a.jobs as f64 / secs);
        let (c1, r1) = (cpu_ns(std::process::id()), cpu_ns(side.server.pid()));
        let n = a.jobs as f64;
        s.add(format!("cpu_client_bulk_{tag}"), cpu_us_per_job(c0, c1, n));
        s.add(format!("cpu_redis_bulk_{tag}"), cpu_us_per_job(r0, r1, n));
        let (cmds, scripts) = command_counts(&mut side.con).await?;
        s.add(format!("cmds_bulk_{tag}"), cmds as f64 / a.jobs as f64);
        s.add(
            format!("scripts_bulk_{tag}"),
            scripts as f64 / a.jobs as f64,
        );
    }
    Ok(())
}

/// Pre-fills `bench` with n no-op jobs through the fairjob client.
async fn fairjob_prefill(client: &Client, n: u64) -> Result<()> {
    client.push_bulk((0..n).map(BenchNoop)).await?;
    Ok(())
}

/// fairjob: drain a pre-filled queue at concurrency c.
async fn fairjob_process(
    side: &mut Side,
    client: &Client,
    c: usize,
    n: u64,
    s: &mut Samples,
    metrics: bool,
) -> Result<()> {
    flushall(&mut side.con).await?;
    fairjob_prefill(client, n).await?;
    reset_stats(&mut side.con).await?;
    let mut child = spawn_fairjob_worker(&side.url(), c, "bench", n, metrics)?;
    let tag = if metrics { "metrics_" } else { "" };
    let result = measure_drain(side, &mut child, c, n, s, tag).await;
    stop(&mut child);
    result
}

/// Pushes `n` latency jobs at `rate` through the fairjob client.
async fn paced_latency_pushes(client: &Client, n: u64, rate: f64) -> Result<()> {
    let t0 = tokio::time::Instant::now();
    for i in 0..n {
        tokio::time::sleep_until(t0 + Duration::from_secs_f64(i as f64 / rate)).await;
        BenchLatency(now_f64()).perform_async(client).await?;
    }
    Ok(())
}

/// Collects the latency list; returns (p50, p99) in ms.
async fn latency_result(
    con: &mut MultiplexedConnection,
    n: u64,
    child: &mut Child,
) -> Result<(f64, f64)> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let len: u64 = redis::cmd("LLEN").arg(LAT_KEY).query_async(con).await?;
        if len >= n {
            break;
        }
        if let Some(status) = child.try_wait()? {
            bail!("the worker exited ({status}) during the latency run");
        }
        if Instant::now() > deadline {
            bail!("only {len} of {n} latency jobs ran within 30 s of the last push");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let raw: Vec<i64> = redis::cmd("LRANGE")
        .arg(LAT_KEY)
        .arg(0)
        .arg(-1)
        .query_async(con)
        .await?;
    let mut ms: Vec<f64> = raw.into_iter().map(|us| us as f64 / 1000.0).collect();
    ms.sort_by(f64::total_cmp);
    Ok((percentile(&ms, 50.0), percentile(&ms, 99.0)))
}

async fn fairjob_latency(
    side: &mut Side,
    client: &Client,
    a: &Args,
    s: &mut Samples,
) -> Result<()> {
    flushall(&mut side.con).await?;
    let c = a.concurrency.first().copied().unwrap_or(10);
    let mut child = spawn_fairjob_worker(&side.url(), c, "bench_lat", 0, false)?;
    let result = async {
        wait_ready(&mut side.con, &mut child, Duration::from_secs(30)).await?;
        paced_latency_pushes(client, a.latency_jobs, a.latency_rate).await?;
        let (p50, p99) = latency_result(&mut side.con, a.latency_jobs, &mut child).await?;
        s.add("lat_p50", p50);
        s.add("lat_p99", p99);
        Ok::<_, anyhow::Error>(())
    }
    .await;
    stop(&mut child);
    result
}

async fn sidekiq_enqueue(side: &mut Side, a: &Args, s: &mut Samples) -> Result<()> {
    for (mode, n) in [("single", a.single_jobs), ("bulk", a.jobs)] {
        flushall(&mut side.con).await?;
        reset_stats(&mut side.con).await?;
        let r0 = cpu_ns(side.server.pid());
        let (secs, cpu) = ruby_enqueue(&side.url(), mode, n)?;
        let r1 = cpu_ns(side.server.pid());
        s.add(format!("enq_{mode}_plain"), n as f64 / secs);
        s.add(format!("cpu_client_{mode}_plain"), cpu * 1e6 / n as f64);
        s.add(
            format!("cpu_redis_{mode}_plain"),
            cpu_us_per_job(r0, r1, n as f64),
        );
        let (cmds, _) = command_counts(&mut side.con).await?;
        s.add(format!("cmds_{mode}_plain"), cmds as f64 / n as f64);
    }
    Ok(())
}

async fn sidekiq_process(
    side: &mut Side,
    c: usize,
    n: u64,
    log: &Path,
    s: &mut Samples,
) -> Result<()> {
    flushall(&mut side.con).await?;
    ruby_enqueue(&side.url(), "bulk", n)?;
    reset_stats(&mut side.con).await?;
    let mut child = spawn_sidekiq(&side.url(), c, "bench", n, log)?;
    let result = measure_drain(side, &mut child, c, n, s, "").await;
    stop(&mut child);
    result
}

async fn sidekiq_latency(side: &mut Side, a: &Args, log: &Path, s: &mut Samples) -> Result<()> {
    flushall(&mut side.con).await?;
    let c = a.concurrency.first().copied().unwrap_or(10);
    // The pusher is a fairjob client: its payloads are Sidekiq's format.
    let client = Client::builder(side.url()).build().await?;
    let mut child = spawn_sidekiq(&side.url(), c, "bench_lat", 0, log)?;
    let result = async {
        wait_ready(&mut side.con, &mut child, Duration::from_secs(60)).await?;
        paced_latency_pushes(&client, a.latency_jobs, a.latency_rate).await?;
        let (p50, p99) = latency_result(&mut side.con, a.latency_jobs, &mut child).await?;
        s.add("lat_p50", p50);
        s.add("lat_p99", p99);
        Ok::<_, anyhow::Error>(())
    }
    .await;
    stop(&mut child);
    result
}

// ---------------------------------------------------------------------------
// Peers: rusty-sidekiq and BullMQ through their own clients and workers

/// A queue library measured beside fairjob and Sidekiq (`--peers`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PeerKind {
    RustySidekiq,
    Bullmq,
}

impl PeerKind {
    const ALL: [PeerKind; 2] = [PeerKind::RustySidekiq, PeerKind::Bullmq];

    fn flag(self) -> &'static str {
        match self {
            PeerKind::RustySidekiq => "rusty-sidekiq",
            PeerKind::Bullmq => "bullmq",
        }
    }

    fn title(self) -> &'static str {
        match self {
            PeerKind::RustySidekiq => "rusty-sidekiq",
            PeerKind::Bullmq => "BullMQ",
        }
    }
}

/// How to run one peer's `enqueue` and `process` commands.
#[derive(Debug)]
struct PeerTool {
    program: PathBuf,
    leading: Vec<String>,
    version: String,
    /// A scratch directory (BullMQ's npm install) removed with the tool.
    _scratch: Option<fairjob_tests::TempDir>,
}

impl PeerTool {
    fn command(&self, sub: &str, url: &str, jobs: u64) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.leading)
            .arg(sub)
            .args(["--url", url, "--jobs", &jobs.to_string()]);
        cmd
    }
}

/// One requested peer: ready with its own redis-server, or skipped and why.
#[derive(Debug)]
struct Peer {
    kind: PeerKind,
    state: std::result::Result<(PeerTool, Side), String>,
    samples: Samples,
}

fn peers_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("peers")
}

/// `<program> --version` works: the first line it prints, or why not.
fn tool_version(program: &str) -> std::result::Result<String, String> {
    match Command::new(program).arg("--version").output() {
        Ok(o) if o.status.success() => Ok(String::from_utf8_lossy(&o.stdout)
            .lines()
            .next()
            .unwrap_or("")
            .trim()
            .to_owned()),
        Ok(o) => Err(format!("`{program} --version` exited with {}", o.status)),
        Err(e) => Err(format!("`{program}` not found ({e})")),
    }
}

/// Why a command failed, on one line: its first two lines naming an error, or
/// else the last three lines of its stderr.
fn stderr_tail(out: &std::process::Output) -> String {
    let text = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let errors: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.to_ascii_lowercase().contains("error"))
        .take(2)
        .collect();
    if errors.is_empty() {
        lines[lines.len().saturating_sub(3)..].join(" / ")
    } else {
        errors.join(" / ")
    }
}

/// Builds tests/peers in release into `$FAIRJOB_PEERS_TARGET` (default
/// `<temp dir>/fairjob-peers-target`), outside this workspace's `target/`.
fn prepare_rusty_sidekiq() -> std::result::Result<PeerTool, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    tool_version(&cargo)?;
    let target = std::env::var_os("FAIRJOB_PEERS_TARGET")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("fairjob-peers-target"));
    eprintln!(
        "[bench] building the rusty-sidekiq peer (tests/peers, release) in {}",
        target.display()
    );
    let out = Command::new(&cargo)
        .args(["build", "--release", "--quiet", "--manifest-path"])
        .arg(peers_dir().join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target)
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .map_err(|e| format!("running cargo: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "building tests/peers failed: {}",
            stderr_tail(&out)
        ));
    }
    let lock = std::fs::read_to_string(peers_dir().join("Cargo.lock")).unwrap_or_default();
    let version = lock
        .split("[[package]]")
        .find(|p| p.contains("name = \"rusty-sidekiq\""))
        .and_then(|p| p.lines().find_map(|l| l.strip_prefix("version = ")))
        .map(|v| v.trim_matches('"').to_owned())
        .unwrap_or_default();
    Ok(PeerTool {
        program: target.join("release").join("rusty-sidekiq-bench"),
        leading: Vec::new(),
        version,
        _scratch: None,
    })
}

/// Installs tests/peers/bullmq with npm into a temporary directory.
fn prepare_bullmq() -> std::result::Result<PeerTool, String> {
    let node = tool_version("node")?;
    tool_version("npm")?;
    let dir = fairjob_tests::temp_dir("bullmq");
    for file in ["bench.mjs", "package.json"] {
        std::fs::copy(peers_dir().join("bullmq").join(file), dir.join(file))
            .map_err(|e| format!("copying {file}: {e}"))?;
    }
    eprintln!(
        "[bench] npm install of the BullMQ peer in {}",
        dir.display()
    );
    let out = Command::new("npm")
        .args(["install", "--no-audit", "--no-fund", "--loglevel=error"])
        .current_dir(&*dir)
        .output()
        .map_err(|e| format!("running npm: {e}"))?;
    if !out.status.success() {
        return Err(format!("npm install failed: {}", stderr_tail(&out)));
    }
    let version = std::fs::read_to_string(dir.join("node_modules/bullmq/package.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v["version"].as_str().map(str::to_owned))
        .unwrap_or_default();
    Ok(PeerTool {
        program: PathBuf::from("node"),
        leading: vec![dir.join("bench.mjs").display().to_string()],
        version: format!("{version}, node {node}"),
        _scratch: Some(dir),
    })
}

/// The peers `--peers` names, once each, in order.
fn peer_kinds(a: &Args) -> Result<Vec<PeerKind>> {
    let mut kinds = Vec::new();
    for name in &a.peers {
        let kind = PeerKind::ALL
            .into_iter()
            .find(|k| k.flag() == name.as_str())
            .with_context(|| format!("unknown peer {name:?} (rusty-sidekiq, bullmq)"))?;
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
    }
    Ok(kinds)
}

/// Prepares the given peers (each with its own redis-server).
async fn prepare_peers(kinds: &[PeerKind]) -> Result<Vec<Peer>> {
    let mut peers = Vec::new();
    for &kind in kinds {
        let tool = match kind {
            PeerKind::RustySidekiq => prepare_rusty_sidekiq(),
            PeerKind::Bullmq => prepare_bullmq(),
        };
        let state = match tool {
            Ok(tool) => {
                let side = Side::start().await?;
                eprintln!(
                    "[bench] {}'s redis-server: pid {}",
                    kind.title(),
                    side.server.pid()
                );
                Ok((tool, side))
            }
            Err(why) => {
                eprintln!("[bench] {} skipped: {why}", kind.title());
                Err(why)
            }
        };
        peers.push(Peer {
            kind,
            state,
            samples: Samples::default(),
        });
    }
    Ok(peers)
}

/// Runs a peer's `enqueue` of n jobs (batches of 1,000); returns (wall, CPU) s.
fn peer_enqueue_run(tool: &PeerTool, url: &str, n: u64) -> Result<(f64, f64)> {
    let out = tool
        .command("enqueue", url, n)
        .args(["--batch", "1000"])
        .output()
        .with_context(|| format!("running {}", tool.program.display()))?;
    wall_and_cpu(&stdout_of(out, "peer enqueue")?, "peer enqueue")
}

/// A peer's bulk enqueue, recorded under the same keys as fairjob's.
async fn peer_enqueue(tool: &PeerTool, side: &mut Side, n: u64, s: &mut Samples) -> Result<()> {
    flushall(&mut side.con).await?;
    reset_stats(&mut side.con).await?;
    let r0 = cpu_ns(side.server.pid());
    let (secs, cpu) = peer_enqueue_run(tool, &side.url(), n)?;
    let r1 = cpu_ns(side.server.pid());
    s.add("enq_bulk_plain", n as f64 / secs);
    s.add("cpu_client_bulk_plain", cpu * 1e6 / n as f64);
    s.add("cpu_redis_bulk_plain", cpu_us_per_job(r0, r1, n as f64));
    let (cmds, _) = command_counts(&mut side.con).await?;
    s.add("cmds_bulk_plain", cmds as f64 / n as f64);
    Ok(())
}

/// A peer's worker draining a queue pre-filled by its own client.
async fn peer_process(
    tool: &PeerTool,
    side: &mut Side,
    c: usize,
    n: u64,
    s: &mut Samples,
) -> Result<()> {
    flushall(&mut side.con).await?;
    peer_enqueue_run(tool, &side.url(), n)?;
    reset_stats(&mut side.con).await?;
    let mut child = tool
        .command("process", &side.url(), n)
        .args(["--concurrency", &c.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("starting {}", tool.program.display()))?;
    let result = measure_drain(side, &mut child, c, n, s, "").await;
    stop(&mut child);
    result
}

/// One repetition of every ready peer.
async fn run_peers(peers: &mut [Peer], a: &Args, rep: usize) -> Result<()> {
    for peer in peers {
        let Ok((tool, side)) = &mut peer.state else {
            continue;
        };
        let name = peer.kind.title();
        if a.runs("enqueue") || a.runs("enqueue-plain") {
            eprintln!("[bench] rep {rep}/{}: {name} enqueue", a.reps);
            peer_enqueue(tool, side, a.jobs, &mut peer.samples)
                .await
                .with_context(|| format!("{name} enqueue"))?;
        }
        if a.runs("processing") {
            for &c in &a.concurrency {
                eprintln!("[bench] rep {rep}/{}: {name} processing c={c}", a.reps);
                peer_process(tool, side, c, a.jobs, &mut peer.samples)
                    .await
                    .with_context(|| format!("{name} processing c={c}"))?;
            }
        }
    }
    Ok(())
}

/// How a figure is printed.
type Fmt = fn(f64) -> String;

/// The "Peers" section: fairjob, Sidekiq and the peers side by side.
fn peers_report(o: &mut String, a: &Args, f: &Samples, k: &Samples, peers: &[Peer]) {
    let sidekiq = !a.skip_sidekiq;
    let _ = writeln!(o, "\n## Peers\n");
    let _ = writeln!(
        o,
        "The same workloads through each library's own client and worker, each against its own private redis-server: \
         bulk enqueue of {} jobs in batches of 1,000, and a pre-filled queue of {} no-op jobs drained by one worker process \
         (first job start → N-th job performed, stamped by the job itself).\n",
        a.jobs, a.jobs
    );
    let mut header = String::from("| measure | fairjob | Sidekiq 6.4.1 |");
    let mut rule = String::from("|---|---|---|");
    for p in peers {
        let version = match &p.state {
            Ok((tool, _)) if !tool.version.is_empty() => {
                format!(" {}", tool.version.split(',').next().unwrap_or(""))
            }
            _ => String::new(),
        };
        let _ = write!(header, " {}{version} |", p.kind.title());
        rule.push_str("---|");
    }
    header.push_str(" fairjob / Sidekiq |");
    rule.push_str("---|");
    for p in peers {
        let _ = write!(header, " fairjob / {} |", p.kind.title());
        rule.push_str("---|");
    }
    let _ = writeln!(o, "{header}\n{rule}");
    let mut rows: Vec<(String, String, Fmt)> = Vec::new();
    let one = |x: f64| format!("{x:.1}");
    let three = |x: f64| format!("{x:.3}");
    if a.runs("enqueue") || a.runs("enqueue-plain") {
        rows.push((
            "bulk enqueue jobs/s, batches of 1,000".into(),
            "enq_bulk_plain".into(),
            si,
        ));
    }
    if a.runs("processing") {
        for &c in &a.concurrency {
            rows.push((
                format!("processing jobs/s, no-op, 1 process, c={c}"),
                format!("proc_c{c}"),
                si,
            ));
        }
        for &c in &a.concurrency {
            rows.push((
                format!("worker peak RSS MiB (VmHWM), c={c}"),
                format!("rss_c{c}"),
                one,
            ));
            rows.push((
                format!("worker CPU µs/job, c={c}"),
                format!("cpu_client_proc_c{c}"),
                one,
            ));
            rows.push((
                format!("Redis CPU µs/job, processing c={c}"),
                format!("cpu_redis_proc_c{c}"),
                one,
            ));
            rows.push((
                format!("Redis commands/job, processing c={c}"),
                format!("cmds_proc_c{c}"),
                three,
            ));
        }
    }
    if a.runs("enqueue") || a.runs("enqueue-plain") {
        rows.push((
            "Redis commands/job, bulk enqueue".into(),
            "cmds_bulk_plain".into(),
            three,
        ));
    }
    for (label, key, fmt) in rows {
        let fs = f.get(&key);
        let ks = if sidekiq { k.get(&key) } else { None };
        let ps: Vec<Option<Summary>> = peers.iter().map(|p| p.samples.get(&key)).collect();
        let mut line = format!("| {label} | {} | {} |", cell(fs, fmt), cell(ks, fmt));
        for (p, s) in peers.iter().zip(&ps) {
            match &p.state {
                Ok(_) => {
                    let _ = write!(line, " {} |", cell(*s, fmt));
                }
                Err(_) => line.push_str(" skipped |"),
            }
        }
        let _ = write!(line, " {} |", ratio(fs, ks));
        for s in &ps {
            let _ = write!(line, " {} |", ratio(fs, *s));
        }
        let _ = writeln!(o, "{line}");
    }
    let _ = writeln!(
        o,
        "\nRates: higher is better (ratio > 1 = fairjob faster); RSS, CPU and commands: lower is better (ratio < 1 = fairjob cheaper).\n"
    );
    for p in peers {
        let how = match p.kind {
            PeerKind::RustySidekiq => {
                "tests/peers (release). It has no bulk push: a batch is 1,000 `perform_async` calls in flight at once over its \
                 bb8 pool of 10 connections (SADD + LPUSH each, plus the pool's PING on checkout). Its worker (`Processor`, `num_workers` = c) has a pool of c + 5 \
                 connections (one BRPOP per worker) and no log subscriber"
            }
            PeerKind::Bullmq => {
                "tests/peers/bullmq/bench.mjs: `Queue.addBulk` per batch; one `Worker` with `concurrency` = c that drops completed \
                 jobs (`removeOnComplete: { count: 0 }`, as Sidekiq keeps none; BullMQ's default keeps them all)"
            }
        };
        match &p.state {
            Ok((tool, _)) => {
                let _ = writeln!(o, "- {} {}: {how}.", p.kind.title(), tool.version);
            }
            Err(why) => {
                let _ = writeln!(o, "- {}: skipped: {why}", p.kind.title());
            }
        }
    }
}

/// MONITOR census of the fairjob paths (once, small): client commands and
/// in-script commands per job.
async fn fairjob_census(
    side: &mut Side,
    client: &Client,
    a: &Args,
) -> Result<BTreeMap<String, (f64, f64)>> {
    let n = a.census_jobs.max(1);
    let port = side.server.port();
    let mut out = BTreeMap::new();
    for rules in [false, true] {
        let tag = if rules { "rules" } else { "plain" };
        flushall(&mut side.con).await?;
        let census = Census::start(port)?;
        for i in 0..n {
            if rules {
                BenchRules(tenant(i), i).perform_async(client).await?;
            } else {
                BenchTenant(tenant(i), i).perform_async(client).await?;
            }
        }
        let (c, l) = census.finish();
        out.insert(
            format!("single_{tag}"),
            (c as f64 / n as f64, l as f64 / n as f64),
        );

        flushall(&mut side.con).await?;
        let census = Census::start(port)?;
        if rules {
            client
                .push_bulk((0..n).map(|i| BenchRules(tenant(i), i)))
                .await?;
        } else {
            client
                .push_bulk((0..n).map(|i| BenchTenant(tenant(i), i)))
                .await?;
        }
        let (c, l) = census.finish();
        out.insert(
            format!("bulk_{tag}"),
            (c as f64 / n as f64, l as f64 / n as f64),
        );
    }
    for &c in &a.concurrency {
        flushall(&mut side.con).await?;
        fairjob_prefill(client, n).await?;
        let census = Census::start(port)?;
        let mut child = spawn_fairjob_worker(&side.url(), c, "bench", n, false)?;
        let r = wait_key(&mut side.con, LAST_KEY, &mut child, drain_timeout(n)).await;
        let (cl, l) = census.finish();
        stop(&mut child);
        r?;
        out.insert(
            format!("proc_c{c}"),
            (cl as f64 / n as f64, l as f64 / n as f64),
        );
    }
    Ok(out)
}

// ---------------------------------------------------------------------------
// redis-benchmark ceilings

/// A script like push.lua for one job on a plain queue, no rules.
const PUSH_PLAIN_LUA: &str = "redis.call('SADD', KEYS[1], 'bench') \
     redis.call('LPUSH', KEYS[2], ARGV[1]) \
     redis.call('LPUSH', KEYS[3], '1') redis.call('LTRIM', KEYS[3], 0, 0) return 1";

/// A script like push.lua for one job with two rules (the tenant's window).
const PUSH_RULES_LUA: &str = "local t = redis.call('TIME') local now = tonumber(t[1]) \
     redis.call('ZADD', KEYS[4], now, ARGV[2]) \
     redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', '(' .. (now - 3600)) \
     redis.call('EXPIRE', KEYS[4], 3600) \
     local q = KEYS[2] \
     if redis.call('ZCOUNT', KEYS[4], now - 3600, '+inf') > 100 then q = KEYS[2] .. '_throttled' end \
     if redis.call('ZCOUNT', KEYS[4], now - 3600, '+inf') > 1000 then q = KEYS[2] .. '_slowest' end \
     redis.call('SADD', KEYS[1], 'bench') \
     redis.call('LPUSH', q, ARGV[1]) \
     redis.call('LPUSH', KEYS[3], '1') redis.call('LTRIM', KEYS[3], 0, 0) return 1";

/// A Sidekiq-sized payload for the scripts.
const SAMPLE_PAYLOAD: &str = r#"{"class":"BenchNoopJob","args":[1],"retry":true,"queue":"bench","jid":"0123456789abcdef01234567","created_at":1712345678.1234,"enqueued_at":1712345678.1234}"#;

/// Runs redis-benchmark (50 clients) and returns requests/s per test line.
fn redis_benchmark(port: u16, n: u64, pipeline: u32, args: &[&str]) -> Result<Vec<(String, f64)>> {
    let out = Command::new("redis-benchmark")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-c",
            "50",
            "-n",
            &n.to_string(),
        ])
        .args(["-P", &pipeline.to_string(), "-r", "1000000", "--csv"])
        .args(args)
        .output()
        .context("running redis-benchmark")?;
    let text = stdout_of(out, "redis-benchmark")?;
    let mut rates = Vec::new();
    for line in text.lines().skip(1) {
        // "test name (may hold commas)","rps","avg",...,"max": rps is 7th from the right.
        let fields: Vec<&str> = line.rsplitn(8, ',').collect();
        let rate = fields
            .get(6)
            .and_then(|f| f.trim_matches('"').parse::<f64>().ok());
        if let (Some(r), Some(name)) = (rate.filter(|r| r.is_finite()), fields.get(7)) {
            let name = name.trim_matches('"').split(' ').next().unwrap_or("");
            rates.push((name.to_ascii_lowercase(), r));
        }
    }
    Ok(rates)
}

async fn ceilings(side: &mut Side, n: u64, s: &mut Samples) -> Result<()> {
    let port = side.server.port();
    for pipeline in [1u32, 16] {
        flushall(&mut side.con).await?;
        for (test, rate) in redis_benchmark(port, n, pipeline, &["-t", "lpush,rpop"])? {
            s.add(format!("rb_{test}_p{pipeline}"), rate);
        }
        for (name, script) in [("plain", PUSH_PLAIN_LUA), ("rules", PUSH_RULES_LUA)] {
            flushall(&mut side.con).await?;
            let sha: String = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(script)
                .query_async(&mut side.con)
                .await?;
            let r = redis_benchmark(
                port,
                n,
                pipeline,
                &[
                    "EVALSHA",
                    &sha,
                    "4",
                    "queues",
                    "queue:bench",
                    "wake:bench",
                    "window:t1",
                    SAMPLE_PAYLOAD,
                    "jid:__rand_int__",
                ],
            )?;
            if let Some((_, rate)) = r.first() {
                s.add(format!("rb_push_{name}_p{pipeline}"), *rate);
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// The run and the report

fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .and_then(|r| r.split_once(':'))
                .map(|(_, m)| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        })
        .map(|kb| format!("{:.0} GiB", kb as f64 / 1024.0 / 1024.0))
        .unwrap_or_default();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let redis = Command::new("redis-server")
        .arg("--version")
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .nth(2)
                .unwrap_or("")
                .trim_start_matches("v=")
                .to_owned()
        })
        .unwrap_or_default();
    format!(
        "{cores} cores, {model}, {mem} RAM, Linux {}, redis-server {redis}",
        kernel.trim()
    )
}

/// The workspace's git revision, and whether the tree had local changes.
fn revision() -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(dir)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    match git(&["rev-parse", "--short", "HEAD"]) {
        Some(rev) => {
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            format!(
                "git {rev}{}",
                if dirty {
                    " with uncommitted changes"
                } else {
                    ""
                }
            )
        }
        None => "unknown revision".into(),
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

async fn run(a: Args) -> Result<()> {
    anyhow::ensure!(
        a.reps >= 1 && a.jobs >= 1 && a.single_jobs >= 1,
        "--reps, --jobs and --single-jobs must be at least 1"
    );
    anyhow::ensure!(
        !a.concurrency.is_empty(),
        "--concurrency needs at least one value"
    );
    let peer_kinds = peer_kinds(&a)?;
    let started = Instant::now();
    let load_before = loadavg();
    let out_dir = a.out.parent().map(Path::to_path_buf).unwrap_or_default();
    if !out_dir.as_os_str().is_empty() {
        std::fs::create_dir_all(&out_dir)?;
    }
    let sidekiq_log = out_dir.join("sidekiq.log");

    let mut fj = Side::start().await?;
    let client = Client::builder(fj.url()).build().await?;
    // Every command over 1 ms on fairjob's server, for the whole run.
    let mut slow = fairjob_tests::slowlog::SlowLog::start(&fj.url(), 1000).await?;
    eprintln!("[bench] fairjob's redis-server: pid {}", fj.server.pid());
    let mut sq = if a.skip_sidekiq {
        None
    } else {
        let side = Side::start().await?;
        eprintln!("[bench] Sidekiq's redis-server: pid {}", side.server.pid());
        Some(side)
    };
    let mut peers = prepare_peers(&peer_kinds).await?;
    let mut f = Samples::default();
    let mut k = Samples::default();
    let mut rb = Samples::default();

    for rep in 1..=a.reps {
        let r = a.reps;
        if a.runs("enqueue") || a.runs("enqueue-plain") {
            eprintln!("[bench] rep {rep}/{r}: fairjob enqueue");
            fairjob_enqueue(&mut fj, &client, &a, &mut f).await?;
        }
        if a.runs("processing") {
            for &c in &a.concurrency {
                eprintln!("[bench] rep {rep}/{r}: fairjob processing c={c}");
                fairjob_process(&mut fj, &client, c, a.jobs, &mut f, false).await?;
                if a.metrics_cost {
                    eprintln!("[bench] rep {rep}/{r}: fairjob processing c={c}, metrics on");
                    fairjob_process(&mut fj, &client, c, a.jobs, &mut f, true).await?;
                }
            }
        }
        if a.runs("latency") {
            eprintln!("[bench] rep {rep}/{r}: fairjob latency");
            fairjob_latency(&mut fj, &client, &a, &mut f).await?;
        }
        if let Some(sq) = sq.as_mut() {
            if a.runs("enqueue") || a.runs("enqueue-plain") {
                eprintln!("[bench] rep {rep}/{r}: Sidekiq enqueue");
                sidekiq_enqueue(sq, &a, &mut k).await?;
            }
            if a.runs("processing") {
                for &c in &a.concurrency {
                    eprintln!("[bench] rep {rep}/{r}: Sidekiq processing c={c}");
                    sidekiq_process(sq, c, a.jobs, &sidekiq_log, &mut k).await?;
                }
            }
            if a.runs("latency") {
                eprintln!("[bench] rep {rep}/{r}: Sidekiq latency");
                sidekiq_latency(sq, &a, &sidekiq_log, &mut k).await?;
            }
        }
        run_peers(&mut peers, &a, rep).await?;
        if !a.skip_redis_benchmark && a.runs("ceilings") {
            eprintln!("[bench] rep {rep}/{r}: redis-benchmark");
            ceilings(&mut fj, a.redis_benchmark_n, &mut rb).await?;
        }
    }
    let census = if a.runs("census") {
        eprintln!("[bench] MONITOR census");
        fairjob_census(&mut fj, &client, &a).await?
    } else {
        BTreeMap::new()
    };

    let slow = slow.report().await?;
    let mut report = report(&a, &f, &k, &rb, &census, &load_before, started.elapsed());
    slow_report(&mut report, &slow);
    if !peers.is_empty() {
        peers_report(&mut report, &a, &f, &k, &peers);
    }
    print!("{report}");
    std::fs::write(&a.out, &report).with_context(|| format!("writing {}", a.out.display()))?;
    eprintln!(
        "[bench] wrote {} in {:.0} s",
        a.out.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The scripts (and other commands) over 1 ms on fairjob's server.
fn slow_report(o: &mut String, slow: &fairjob_tests::slowlog::SlowReport) {
    let (mut scripts, mut script_max, mut names, mut other) = (0, 0, Vec::new(), Vec::new());
    for (name, (count, max_us)) in &slow.by_name {
        if name.ends_with(".lua") || name.starts_with("script ") {
            scripts += count;
            script_max = script_max.max(*max_us);
            names.push(format!(
                "`{name}` ×{count} (max {:.1} ms)",
                *max_us as f64 / 1000.0
            ));
        } else {
            other.push(format!("{name} ×{count}"));
        }
    }
    let _ = writeln!(o, "\n## Redis scripts over 1 ms\n");
    let _ = writeln!(
        o,
        "`SLOWLOG` (threshold 1 ms) on fairjob's redis-server over the whole run: \
         **{scripts} script calls over 1 ms**{}; other commands over 1 ms: {} \
         (the harness's `FLUSHALL` between runs and redis-benchmark's are expected here).",
        if scripts > 0 {
            format!(
                " (slowest {:.1} ms: {})",
                script_max as f64 / 1000.0,
                names.join(", ")
            )
        } else {
            String::new()
        },
        if other.is_empty() {
            "none".to_owned()
        } else {
            other.join(", ")
        }
    );
    if slow.count >= 1024 {
        let _ = writeln!(
            o,
            "\n(The slow log keeps the last 1,024 entries: the counts are a floor.)"
        );
    }
}

fn report(
    a: &Args,
    f: &Samples,
    k: &Samples,
    rb: &Samples,
    census: &BTreeMap<String, (f64, f64)>,
    load_before: &str,
    took: Duration,
) -> String {
    let sidekiq = !a.skip_sidekiq;
    let mut o = String::new();
    let _ = writeln!(o, "# fairjob benchmark\n");
    let _ = writeln!(o, "- machine: {}", machine());
    let _ = writeln!(o, "- fairjob: {}", revision());
    let _ = writeln!(
        o,
        "- sizes: {} jobs per bulk enqueue and per processing run, {} per single-enqueue loop, latency {} jobs at {}/s; {} repetitions, figures are median [min–max]",
        a.jobs, a.single_jobs, a.latency_jobs, a.latency_rate, a.reps
    );
    let _ = writeln!(
        o,
        "- load average before / after: {load_before} / {}; run took {:.0} s",
        loadavg(),
        took.as_secs_f64()
    );
    let _ = writeln!(
        o,
        "- each side has its own private redis-server (no persistence); Sidekiq {}",
        if sidekiq {
            "6.4.1 (Debian, Ruby 3.1), log level ERROR"
        } else {
            "skipped (--skip-sidekiq)"
        }
    );
    if a.metrics_cost {
        let _ = writeln!(o, "\n## Metrics cost\n");
        let _ = writeln!(
            o,
            "Processing with `worker run --metrics` (Prometheus recorder, `/metrics` listener) \
             against without, interleaved in each repetition; the cost is the median of the \
             per-repetition ratios on / off.\n"
        );
        let _ = writeln!(
            o,
            "| concurrency | off jobs/s | on jobs/s | on / off (median of reps) | CPU µs/job off → on |"
        );
        let _ = writeln!(o, "|---|---|---|---|---|");
        for &c in &a.concurrency {
            let off = f.0.get(&format!("proc_c{c}")).cloned().unwrap_or_default();
            let on =
                f.0.get(&format!("proc_metrics_c{c}"))
                    .cloned()
                    .unwrap_or_default();
            let ratios: Vec<f64> = off.iter().zip(&on).map(|(a, b)| b / a).collect();
            let med = summarize(&ratios);
            let _ = writeln!(
                o,
                "| c={c} | {} | {} | {} | {} → {} |",
                cell(f.get(&format!("proc_c{c}")), si),
                cell(f.get(&format!("proc_metrics_c{c}")), si),
                med.map_or("–".into(), |m| format!(
                    "{:.3} [{:.3}–{:.3}] ({:+.1}%)",
                    m.med,
                    m.min,
                    m.max,
                    (m.med - 1.0) * 100.0
                )),
                cell(f.get(&format!("cpu_client_proc_c{c}")), |x| format!(
                    "{x:.1}"
                )),
                cell(
                    f.get(&format!("cpu_client_proc_metrics_c{c}")),
                    |x| format!("{x:.1}")
                ),
            );
        }
    }
    let _ = writeln!(o, "\n## Throughput, latency, memory\n");
    let _ = writeln!(
        o,
        "| measure | fairjob | Sidekiq 6.4.1 | fairjob / Sidekiq |"
    );
    let _ = writeln!(o, "|---|---|---|---|");
    let mut row = |label: &str, key: &str, fmt: fn(f64) -> String| {
        let fs = f.get(key);
        let ks = if sidekiq { k.get(key) } else { None };
        let _ = writeln!(
            o,
            "| {label} | {} | {} | {} |",
            cell(fs, fmt),
            cell(ks, fmt),
            ratio(fs, ks)
        );
    };
    row(
        "enqueue jobs/s, `perform_async` loop, no rules",
        "enq_single_plain",
        si,
    );
    row(
        "enqueue jobs/s, `perform_async` loop, 2 rules",
        "enq_single_rules",
        si,
    );
    row(
        "enqueue jobs/s, `push_bulk` ×1,000, no rules",
        "enq_bulk_plain",
        si,
    );
    row(
        "enqueue jobs/s, `push_bulk` ×1,000, 2 rules",
        "enq_bulk_rules",
        si,
    );
    for &c in &a.concurrency {
        row(
            &format!("processing jobs/s, no-op, 1 process, c={c}"),
            &format!("proc_c{c}"),
            si,
        );
    }
    let c0 = a.concurrency.first().copied().unwrap_or(10);
    row(
        &format!(
            "latency enqueue→start p50 ms ({}/s, c={c0})",
            a.latency_rate
        ),
        "lat_p50",
        |x| format!("{x:.2}"),
    );
    row(
        &format!(
            "latency enqueue→start p99 ms ({}/s, c={c0})",
            a.latency_rate
        ),
        "lat_p99",
        |x| format!("{x:.2}"),
    );
    for &c in &a.concurrency {
        row(
            &format!("worker peak RSS MiB (VmHWM), c={c}"),
            &format!("rss_c{c}"),
            |x| format!("{x:.1}"),
        );
    }
    let _ = writeln!(
        o,
        "\nRates: higher is better (ratio > 1 = fairjob faster). Latency and RSS: lower is better (ratio < 1 = fairjob better). \
         Sidekiq has no reroute rules (the sidekiq-fair_tenant gem is not installed), so the rule rows have no Sidekiq figure."
    );

    let _ = writeln!(o, "\n## Redis commands per job\n");
    let _ = writeln!(
        o,
        "Commands from `CONFIG RESETSTAT` + `INFO commandstats` during the measured runs (commands run inside Lua scripts count under their own names); \
         script calls are EVALSHA/EVAL; client commands are what clients sent, from a `MONITOR` census of {} jobs per path (pipelined commands count one each). \
         Sidekiq runs no scripts, so its commands are its client commands.\n",
        a.census_jobs
    );
    let _ = writeln!(
        o,
        "| path | fairjob commands/job | fairjob script calls/job | fairjob client commands/job | fairjob in-script commands/job | Sidekiq commands/job |"
    );
    let _ = writeln!(o, "|---|---|---|---|---|---|");
    let fmt3 = |x: f64| format!("{x:.3}");
    let mut paths = enqueue_paths();
    for &c in &a.concurrency {
        paths.push((
            format!("processing (fetch + ack), c={c}"),
            format!("proc_c{c}"),
        ));
    }
    for (label, key) in paths {
        let cmds = f
            .get(&format!("cmds_{key}"))
            .map(|s| fmt3(s.med))
            .unwrap_or("–".into());
        let scripts = f
            .get(&format!("scripts_{key}"))
            .map(|s| fmt3(s.med))
            .unwrap_or("–".into());
        let (cl, lua) = census
            .get(&key)
            .map(|(c, l)| (fmt3(*c), fmt3(*l)))
            .unwrap_or(("–".into(), "–".into()));
        let sk = if sidekiq {
            k.get(&format!("cmds_{key}")).map(|s| fmt3(s.med))
        } else {
            None
        }
        .unwrap_or("–".into());
        let _ = writeln!(o, "| {label} | {cmds} | {scripts} | {cl} | {lua} | {sk} |");
    }

    let _ = writeln!(o, "\n## CPU per job: where the time goes\n");
    let _ = writeln!(
        o,
        "CPU µs per job (all threads' run time from /proc/<pid>/task/*/schedstat) of the enqueuing or working process and of redis-server, \
         over the measured window. On 2 shared cores, jobs/s is bounded by about 2 s ÷ (process + Redis CPU per job), and a single \
         enqueuer or one Redis thread by 1 s ÷ its own share. The enqueuer for fairjob is the bench process (Rust client), for Sidekiq \
         a `ruby` process (its own CPU clock, start-up excluded).\n"
    );
    let _ = writeln!(
        o,
        "| path | fairjob process µs/job | fairjob Redis µs/job | Sidekiq process µs/job | Sidekiq Redis µs/job |"
    );
    let _ = writeln!(o, "|---|---|---|---|---|");
    let mut cpu_paths = enqueue_paths();
    for &c in &a.concurrency {
        cpu_paths.push((format!("processing, c={c}"), format!("proc_c{c}")));
    }
    let us = |x: f64| format!("{x:.1}");
    for (label, key) in cpu_paths {
        let get = |side: &Samples, what: &str| cell(side.get(&format!("cpu_{what}_{key}")), us);
        let (kc, kr) = if sidekiq {
            (get(k, "client"), get(k, "redis"))
        } else {
            ("–".into(), "–".into())
        };
        let _ = writeln!(
            o,
            "| {label} | {} | {} | {kc} | {kr} |",
            get(f, "client"),
            get(f, "redis")
        );
    }

    if !a.skip_redis_benchmark {
        let _ = writeln!(o, "\n## Raw Redis ceilings on this machine\n");
        let _ = writeln!(
            o,
            "`redis-benchmark`, 50 clients, {} requests, against a private server.\n",
            a.redis_benchmark_n
        );
        let _ = writeln!(
            o,
            "| operation | ops/s, not pipelined | ops/s, pipelined 16 deep |"
        );
        let _ = writeln!(o, "|---|---|---|");
        for (label, key) in [
            ("LPUSH", "rb_lpush"),
            ("RPOP", "rb_rpop"),
            (
                "EVALSHA of a push-like script (SADD, LPUSH, LPUSH + LTRIM wake)",
                "rb_push_plain",
            ),
            (
                "EVALSHA of a fair push (TIME, ZADD, ZREMRANGEBYSCORE, EXPIRE, 2×ZCOUNT, SADD, LPUSH, wake)",
                "rb_push_rules",
            ),
        ] {
            let _ = writeln!(
                o,
                "| {label} | {} | {} |",
                cell(rb.get(&format!("{key}_p1")), si),
                cell(rb.get(&format!("{key}_p16")), si)
            );
        }
    }
    o
}
