//! `fairness`: how long small tenants wait behind one greedy tenant, with plain
//! FIFO, fair-tenant rerouting, and tenant-sharded queues, against the small
//! tenants alone on an idle worker.
//!
//! ```text
//! cargo run --release -p fairjob-tests --bin fairness -- [--greedy-jobs 50000] [--small-tenants 20] …
//! ```
//!
//! Scenario: one greedy tenant enqueues `--greedy-jobs` at t=0 (`push_bulk`);
//! `--small-tenants` tenants each enqueue `--small-jobs` jobs spread evenly over
//! `--spread-secs` (`perform_async`); every job sleeps `--job-ms`; one in-process
//! worker at `--concurrency`. Each mode gets its own private redis-server. Writes
//! `fairness.md` and `fairness.svg` to `--out-dir` and copies the chart to
//! `docs/fairness.svg` (unless `--no-docs`), plus `fairness-small.csv` (every
//! small-tenant job's enqueue time and wait). `FAIRNESS_DEBUG=1` prints, per
//! mode, the jobs started per queue in 50 ms buckets over the first second.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Parser;
use fairjob::payload::now_f64;
use fairjob::{Client, Job, JobContext, JobError, Perform, QueueSpec, Registry, Worker};
use fairjob_tests::{RedisServer, percentile};
use plotters::prelude::*;
use serde::{Deserialize, Serialize};

/// The greedy tenant's name.
const GREEDY: &str = "greedy";

/// One performed job.
#[derive(Debug, Clone)]
struct Rec {
    tenant: String,
    queue: String,
    greedy: bool,
    enq: f64,
    start: f64,
    end: f64,
}

static RECORDS: Mutex<Vec<Rec>> = Mutex::new(Vec::new());
static JOB_MICROS: AtomicU64 = AtomicU64::new(2000);

async fn work(cx: &JobContext, tenant: &str, enq: f64) -> Result<(), JobError> {
    let start = now_f64();
    let us = JOB_MICROS.load(Ordering::Relaxed);
    if us > 0 {
        tokio::time::sleep(Duration::from_micros(us)).await;
    }
    let end = now_f64();
    RECORDS.lock().expect("records").push(Rec {
        tenant: tenant.to_owned(),
        queue: cx.queue().to_owned(),
        greedy: tenant == GREEDY,
        enq,
        start,
        end,
    });
    Ok(())
}

/// FIFO: one plain queue, no rules.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "FairPlainJob", queue = "work")]
#[fair_tenant(tenant)]
struct PlainJob {
    tenant: String,
    enq: f64,
}

impl Perform for PlainJob {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        work(cx, &self.tenant, self.enq).await
    }
}

/// Fair-tenant rerouting: a tenant past 100 jobs per hour goes to `work_throttled`,
/// past 1000 to `work_slowest`; fetch weights 4:2:1.
// Two `#[throttle]` rules repeat key names, which clippy mistakes for duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "FairRulesJob", queue = "work")]
#[fair_tenant(tenant)]
#[throttle(queue = "work_throttled", threshold = 100, per = "1h", weight = 2)]
#[throttle(queue = "work_slowest", threshold = 1000, per = "1h", weight = 1)]
struct RulesJob {
    tenant: String,
    enq: f64,
}

impl Perform for RulesJob {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        work(cx, &self.tenant, self.enq).await
    }
}

/// Tenant shards: one list per tenant, fetched round-robin.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "FairShardJob", queue = "work_shard", shard_by_tenant)]
#[fair_tenant(tenant)]
struct ShardJob {
    tenant: String,
    enq: f64,
}

impl Perform for ShardJob {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        work(cx, &self.tenant, self.enq).await
    }
}

/// Small tenants' wait behind a greedy tenant: FIFO vs fair rerouting vs tenant shards.
#[derive(Debug, Clone, Parser)]
#[command(name = "fairness")]
struct Args {
    /// Jobs the greedy tenant enqueues at t=0
    #[arg(long, default_value_t = 50_000)]
    greedy_jobs: u64,
    /// Number of small tenants
    #[arg(long, default_value_t = 20)]
    small_tenants: u64,
    /// Jobs per small tenant
    #[arg(long, default_value_t = 10)]
    small_jobs: u64,
    /// Seconds over which the small tenants' jobs are spread
    #[arg(long, default_value_t = 5.0)]
    spread_secs: f64,
    /// Each job sleeps this long (ms; fractions allowed)
    #[arg(long, default_value_t = 2.0)]
    job_ms: f64,
    /// Worker concurrency (one in-process worker)
    #[arg(long, default_value_t = 10)]
    concurrency: usize,
    /// Where fairness.md and fairness.svg go
    #[arg(long, default_value = "target/bench")]
    out_dir: PathBuf,
    /// Copy of the chart for BENCHMARKS.md
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/fairness.svg"))]
    docs_svg: PathBuf,
    /// Don't copy the chart to --docs-svg
    #[arg(long)]
    no_docs: bool,
    /// Give up on a mode after this many seconds
    #[arg(long, default_value_t = 300)]
    timeout_secs: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Idle,
    Fifo,
    Fair,
    Shard,
}

impl Mode {
    fn label(self) -> &'static str {
        match self {
            Mode::Idle => "idle baseline (small tenants alone)",
            Mode::Fifo => "plain FIFO",
            Mode::Fair => "fair-tenant rerouting (100/h → throttled, 1000/h → slowest; 4:2:1)",
            Mode::Shard => "tenant shards (round-robin)",
        }
    }

    fn short(self) -> &'static str {
        match self {
            Mode::Idle => "idle",
            Mode::Fifo => "FIFO",
            Mode::Fair => "fair rerouting",
            Mode::Shard => "tenant shards",
        }
    }

    fn color(self) -> RGBColor {
        match self {
            Mode::Idle => RGBColor(110, 110, 110),
            Mode::Fifo => RGBColor(214, 39, 40),
            Mode::Fair => RGBColor(31, 119, 180),
            Mode::Shard => RGBColor(44, 160, 44),
        }
    }
}

/// What one mode produced.
#[derive(Debug)]
struct ModeResult {
    mode: Mode,
    /// Small tenants' waits (ms), sorted.
    waits: Vec<f64>,
    /// Completion times (s after t0), sorted.
    small_ends: Vec<f64>,
    greedy_ends: Vec<f64>,
    expected: usize,
    ran: usize,
    /// Seconds from t0 to the last completion.
    makespan: f64,
    /// Seconds the greedy push_bulk took.
    greedy_push_secs: f64,
    /// Small-tenant jobs: (tenant, enqueued s after t0, wait ms), by enqueue time.
    small: Vec<(String, f64, f64)>,
}

impl ModeResult {
    fn greedy_done(&self) -> Option<f64> {
        self.greedy_ends.last().copied()
    }

    fn throughput(&self) -> f64 {
        self.ran as f64 / self.makespan.max(1e-9)
    }
}

/// `0.012×`, `0.45×`, `3.1×`, `1234×`.
fn ratio(r: f64) -> String {
    if r < 0.1 {
        format!("{r:.3}×")
    } else if r < 10.0 {
        format!("{r:.2}×")
    } else {
        format!("{r:.0}×")
    }
}

fn small_tenant(k: u64, tenants: u64) -> String {
    format!("s{:02}", k % tenants + 1)
}

async fn push_small(client: &Client, mode: Mode, tenant: String) -> Result<()> {
    let enq = now_f64();
    match mode {
        Mode::Idle | Mode::Fifo => PlainJob { tenant, enq }.perform_async(client).await?,
        Mode::Fair => RulesJob { tenant, enq }.perform_async(client).await?,
        Mode::Shard => ShardJob { tenant, enq }.perform_async(client).await?,
    };
    Ok(())
}

async fn push_greedy(client: &Client, mode: Mode, n: u64, t0: f64) -> Result<usize> {
    let t = || GREEDY.to_owned();
    let r = match mode {
        Mode::Idle => return Ok(0),
        Mode::Fifo => {
            client
                .push_bulk((0..n).map(|_| PlainJob {
                    tenant: t(),
                    enq: t0,
                }))
                .await?
        }
        Mode::Fair => {
            client
                .push_bulk((0..n).map(|_| RulesJob {
                    tenant: t(),
                    enq: t0,
                }))
                .await?
        }
        Mode::Shard => {
            client
                .push_bulk((0..n).map(|_| ShardJob {
                    tenant: t(),
                    enq: t0,
                }))
                .await?
        }
    };
    Ok(r.iter().filter(|j| j.is_some()).count())
}

async fn run_mode(mode: Mode, a: &Args) -> Result<ModeResult> {
    RECORDS.lock().expect("records").clear();
    let server = RedisServer::start(&[]).context("starting a private redis-server")?;
    let url = server.url();
    let client = Client::builder(url.clone()).build().await?;
    let mut registry = Registry::new();
    let queues: Vec<String> = match mode {
        Mode::Idle | Mode::Fifo => {
            registry.register::<PlainJob>()?;
            vec!["work".into()]
        }
        Mode::Fair => {
            registry.register::<RulesJob>()?;
            vec![
                "work,4".into(),
                "work_throttled,2".into(),
                "work_slowest,1".into(),
            ]
        }
        Mode::Shard => {
            registry.register::<ShardJob>()?;
            vec!["work_shard".into()]
        }
    };
    let worker = Worker::builder(url.clone())
        .registry(registry)
        .queues(QueueSpec::parse(&queues)?)
        .concurrency(a.concurrency)
        .build()
        .await?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let worker_task = tokio::spawn(worker.run_until(async move {
        let _ = stop_rx.await;
    }));
    // Wait until the worker is up (it announces itself in `processes`).
    let mut con = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let ready_by = Instant::now() + Duration::from_secs(10);
    while redis::cmd("SCARD")
        .arg("processes")
        .query_async::<i64>(&mut con)
        .await?
        == 0
    {
        if Instant::now() > ready_by {
            bail!("the worker did not start");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;

    let greedy_n = if mode == Mode::Idle { 0 } else { a.greedy_jobs };
    let small_n = a.small_tenants * a.small_jobs;
    let expected = (greedy_n + small_n) as usize;
    let t0 = now_f64();
    let start = tokio::time::Instant::now();

    let greedy_task = {
        let client = client.clone();
        tokio::spawn(async move {
            let t = Instant::now();
            let pushed = push_greedy(&client, mode, greedy_n, t0).await?;
            Ok::<_, anyhow::Error>((pushed, t.elapsed().as_secs_f64()))
        })
    };
    let small_task = {
        let client = client.clone();
        let (tenants, spread) = (a.small_tenants, a.spread_secs);
        tokio::spawn(async move {
            for k in 0..small_n {
                let offset = spread * (k as f64 + 0.5) / small_n as f64;
                tokio::time::sleep_until(start + Duration::from_secs_f64(offset)).await;
                push_small(&client, mode, small_tenant(k, tenants)).await?;
            }
            Ok::<_, anyhow::Error>(())
        })
    };
    let (pushed, greedy_push_secs) = greedy_task.await??;
    small_task.await??;
    anyhow::ensure!(
        pushed as u64 == greedy_n,
        "push_bulk pushed {pushed} of {greedy_n}"
    );

    let deadline = Instant::now() + Duration::from_secs(a.timeout_secs);
    let mut last_len = 0;
    let mut last_progress = Instant::now();
    loop {
        let len = RECORDS.lock().expect("records").len();
        if len >= expected {
            break;
        }
        if len != last_len {
            last_len = len;
            last_progress = Instant::now();
        }
        if Instant::now() > deadline || last_progress.elapsed() > Duration::from_secs(30) {
            eprintln!(
                "[fairness] {}: only {len} of {expected} jobs ran; giving up on the rest",
                mode.short()
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = stop_tx.send(());
    worker_task.await??;
    drop(server);

    let records = std::mem::take(&mut *RECORDS.lock().expect("records"));
    let mut waits = Vec::new();
    let mut small_ends = Vec::new();
    let mut greedy_ends = Vec::new();
    let mut makespan: f64 = 0.0;
    let mut small = Vec::new();
    for r in &records {
        makespan = makespan.max(r.end - t0);
        if r.greedy {
            greedy_ends.push(r.end - t0);
        } else {
            waits.push((r.start - r.enq) * 1000.0);
            small_ends.push(r.end - t0);
            small.push((r.tenant.clone(), r.enq - t0, (r.start - r.enq) * 1000.0));
        }
    }
    waits.sort_by(f64::total_cmp);
    small_ends.sort_by(f64::total_cmp);
    greedy_ends.sort_by(f64::total_cmp);
    if std::env::var_os("FAIRNESS_DEBUG").is_some() {
        // Starts per queue and tenant group in 50 ms buckets over the first second.
        let mut buckets = std::collections::BTreeMap::new();
        for r in records.iter().filter(|r| r.start - t0 < 1.0) {
            let b = ((r.start - t0) / 0.05) as u32;
            *buckets
                .entry((b, r.queue.clone(), r.greedy))
                .or_insert(0u32) += 1;
        }
        for ((b, q, g), n) in buckets {
            eprintln!(
                "{} {:>4}ms {q:<16} {} {n}",
                mode.short(),
                b * 50,
                if g { "greedy" } else { "small" }
            );
        }
    }
    small.sort_by(|a, b| a.1.total_cmp(&b.1));
    Ok(ModeResult {
        mode,
        waits,
        small_ends,
        greedy_ends,
        expected,
        ran: records.len(),
        makespan,
        greedy_push_secs,
        small,
    })
}

fn main() -> ExitCode {
    let args = Args::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_env("FAIRJOB_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_writer(std::io::stderr)
        .init();
    fairjob_tests::run_main("fairness", run(args))
}

async fn run(a: Args) -> Result<()> {
    anyhow::ensure!(
        a.small_tenants >= 1 && a.small_jobs >= 1,
        "need at least one small tenant and job"
    );
    anyhow::ensure!(a.concurrency >= 1, "--concurrency must be at least 1");
    JOB_MICROS.store(
        (a.job_ms * 1000.0).round().max(0.0) as u64,
        Ordering::Relaxed,
    );
    std::fs::create_dir_all(&a.out_dir)?;
    let started = Instant::now();
    let mut results = Vec::new();
    for mode in [Mode::Idle, Mode::Fifo, Mode::Fair, Mode::Shard] {
        eprintln!("[fairness] {}", mode.label());
        results.push(run_mode(mode, &a).await?);
    }
    let svg = a.out_dir.join("fairness.svg");
    draw(&svg, &results, &a)?;
    let docs = if a.no_docs {
        None
    } else {
        if let Some(dir) = a.docs_svg.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::copy(&svg, &a.docs_svg)
            .with_context(|| format!("copying the chart to {}", a.docs_svg.display()))?;
        Some(
            a.docs_svg
                .canonicalize()
                .unwrap_or_else(|_| a.docs_svg.clone()),
        )
    };
    let md = report(&results, &a, started.elapsed(), &svg, docs.as_deref());
    print!("{md}");
    let mut csv = String::from("mode,tenant,enqueued_s,wait_ms\n");
    for r in &results {
        for (t, e, w) in &r.small {
            let _ = writeln!(csv, "{},{t},{e:.4},{w:.3}", r.mode.short());
        }
    }
    std::fs::write(a.out_dir.join("fairness-small.csv"), csv)?;
    let md_path = a.out_dir.join("fairness.md");
    std::fs::write(&md_path, &md)?;
    eprintln!(
        "[fairness] wrote {} and {}",
        md_path.display(),
        svg.display()
    );
    let short: Vec<_> = results
        .iter()
        .filter(|r| r.ran < r.expected)
        .map(|r| r.mode.short())
        .collect();
    if !short.is_empty() {
        bail!("some jobs never ran in: {}", short.join(", "));
    }
    Ok(())
}

fn report(
    results: &[ModeResult],
    a: &Args,
    took: Duration,
    svg: &Path,
    docs: Option<&Path>,
) -> String {
    let mut o = String::new();
    let idle = results.iter().find(|r| r.mode == Mode::Idle);
    let fifo = results.iter().find(|r| r.mode == Mode::Fifo);
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines().find_map(|l| {
                l.strip_prefix("model name")
                    .and_then(|r| r.split_once(':'))
                    .map(|(_, m)| m.trim().to_owned())
            })
        })
        .unwrap_or_default();
    let _ = writeln!(o, "# fairjob fairness report\n");
    let _ = writeln!(
        o,
        "- scenario: 1 greedy tenant enqueues {} jobs at t=0 (`push_bulk`); {} small tenants × {} jobs spread over {} s (`perform_async`); every job sleeps {} ms; one in-process worker, concurrency {}; a private redis-server per mode",
        a.greedy_jobs, a.small_tenants, a.small_jobs, a.spread_secs, a.job_ms, a.concurrency
    );
    let _ = writeln!(
        o,
        "- machine: {cores} cores, {cpu}; run took {:.0} s",
        took.as_secs_f64()
    );
    let _ = writeln!(
        o,
        "- wait = small-tenant job's enqueue → perform start; greedy done = last greedy job finished, s after t=0\n"
    );
    let _ = writeln!(
        o,
        "| mode | small wait p50 ms | p95 | p99 | max | p99 ÷ idle p99 | p99 ÷ FIFO p99 | greedy done s | ÷ FIFO | jobs/s | ÷ FIFO | jobs ran |"
    );
    let _ = writeln!(o, "|---|---|---|---|---|---|---|---|---|---|---|---|");
    let ms = |x: f64| {
        if x.is_finite() {
            format!("{x:.1}")
        } else {
            "–".into()
        }
    };
    let div = |x: f64, y: Option<f64>| match y {
        Some(y) if y > 0.0 && x.is_finite() => ratio(x / y),
        _ => "–".into(),
    };
    for r in results {
        let p99 = percentile(&r.waits, 99.0);
        let greedy = r.greedy_done();
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.0} | {} | {}/{} |",
            r.mode.label(),
            ms(percentile(&r.waits, 50.0)),
            ms(percentile(&r.waits, 95.0)),
            ms(p99),
            ms(r.waits.last().copied().unwrap_or(f64::NAN)),
            div(p99, idle.map(|i| percentile(&i.waits, 99.0))),
            div(p99, fifo.map(|f| percentile(&f.waits, 99.0))),
            greedy.map(|g| format!("{g:.2}")).unwrap_or("–".into()),
            match (greedy, fifo.and_then(ModeResult::greedy_done)) {
                (Some(g), Some(f)) if f > 0.0 => format!("{:.2}", g / f),
                _ => "–".into(),
            },
            r.throughput(),
            fifo.map(|f| format!("{:.2}", r.throughput() / f.throughput()))
                .unwrap_or("–".into()),
            r.ran,
            r.expected,
        );
    }
    let _ = writeln!(o);
    for r in results.iter().filter(|r| r.mode != Mode::Idle) {
        let _ = writeln!(
            o,
            "- {}: the greedy `push_bulk` took {:.2} s",
            r.mode.short(),
            r.greedy_push_secs
        );
    }
    let _ = writeln!(o, "\nChart: {}", svg.display());
    if let Some(d) = docs {
        let _ = writeln!(o, "(copied to {})", d.display());
    }
    o
}

/// Thins a curve to at most `max` points (keeping the last).
fn thin(points: Vec<(f64, f64)>, max: usize) -> Vec<(f64, f64)> {
    if points.len() <= max {
        return points;
    }
    let step = points.len().div_ceil(max);
    let last = *points.last().expect("non-empty");
    let mut out: Vec<_> = points.into_iter().step_by(step).collect();
    out.push(last);
    out
}

/// Cumulative count over time, as a step curve.
fn completed_curve(ends: &[f64]) -> Vec<(f64, f64)> {
    let mut pts = vec![(0.0, 0.0)];
    for (i, e) in ends.iter().enumerate() {
        pts.push((*e, i as f64));
        pts.push((*e, (i + 1) as f64));
    }
    thin(pts, 1500)
}

/// Draws one line per mode on a chart, and the legend.
macro_rules! draw_modes {
    ($chart:expr, $series:expr) => {{
        for (mode, pts) in $series {
            let color = mode.color();
            $chart
                .draw_series(LineSeries::new(pts, color.stroke_width(2)))?
                .label(mode.short())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
        }
        $chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()?;
    }};
}

/// A panel of jobs completed over time, a curve per mode, up to `x_max` s and `y_max` jobs.
fn draw_completed(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    caption: &str,
    y_desc: &str,
    (x_max, y_max): (f64, f64),
    curves: Vec<(Mode, Vec<(f64, f64)>)>,
) -> Result<()> {
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 15))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..x_max, 0f64..y_max * 1.02)?;
    chart
        .configure_mesh()
        .x_desc("seconds after t=0")
        .y_desc(y_desc)
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()?;
    draw_modes!(chart, curves);
    Ok(())
}

fn draw(path: &Path, results: &[ModeResult], a: &Args) -> Result<()> {
    let root = SVGBackend::new(path, (1560, 520)).into_drawing_area();
    root.fill(&WHITE)?;
    let title = format!(
        "fairjob fairness: 1 greedy tenant ({} jobs at t=0) vs {} small tenants × {} jobs; {} ms jobs, concurrency {}",
        a.greedy_jobs, a.small_tenants, a.small_jobs, a.job_ms, a.concurrency
    );
    let body = root.titled(&title, ("sans-serif", 20))?;
    let panels = body.split_evenly((1, 3));

    // (a) CDF of small-tenant waits, log x.
    let max_wait = results
        .iter()
        .filter_map(|r| r.waits.last())
        .fold(1.0f64, |m, w| m.max(*w))
        * 1.5;
    let min_wait = 0.1f64;
    let mut chart = ChartBuilder::on(&panels[0])
        .caption(
            "small tenants: wait (enqueue → start), CDF",
            ("sans-serif", 15),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d((min_wait..max_wait).log_scale(), 0f64..1.0)?;
    chart
        .configure_mesh()
        .x_desc("wait, ms (log scale)")
        .y_desc("fraction of small-tenant jobs")
        .x_label_formatter(&|x| {
            if *x >= 1.0 {
                format!("{x:.0}")
            } else {
                format!("{x:.1}")
            }
        })
        .draw()?;
    let cdfs = results.iter().map(|r| {
        let n = r.waits.len().max(1) as f64;
        let mut pts = Vec::with_capacity(r.waits.len() * 2);
        for (i, w) in r.waits.iter().enumerate() {
            let w = w.max(min_wait);
            pts.push((w, i as f64 / n));
            pts.push((w, (i + 1) as f64 / n));
        }
        (r.mode, pts)
    });
    draw_modes!(chart, cdfs);

    // (b) small-tenant jobs completed over time.
    let t_small = results
        .iter()
        .filter_map(|r| r.small_ends.last())
        .fold(a.spread_secs, |m, e| m.max(*e))
        * 1.05;
    draw_completed(
        &panels[1],
        "small tenants: jobs completed over time",
        "small-tenant jobs done",
        (t_small, (a.small_tenants * a.small_jobs) as f64),
        results
            .iter()
            .map(|r| (r.mode, completed_curve(&r.small_ends)))
            .collect(),
    )?;

    // (c) greedy jobs completed over time.
    let t_greedy = results
        .iter()
        .filter_map(|r| r.greedy_ends.last())
        .fold(1.0f64, |m, e| m.max(*e))
        * 1.05;
    draw_completed(
        &panels[2],
        "greedy tenant: jobs completed over time",
        "greedy jobs done",
        (t_greedy, a.greedy_jobs.max(1) as f64),
        results
            .iter()
            .filter(|r| r.mode != Mode::Idle)
            .map(|r| (r.mode, completed_curve(&r.greedy_ends)))
            .collect(),
    )?;
    root.present()?;
    Ok(())
}
