//! `fairness`: tenant fairness of plain FIFO, fair-tenant rerouting, tenant
//! shards with equal weights (round robin) and tenant shards with the
//! scenario's weights, side by side, in eight scenarios (issue 11).
//!
//! ```text
//! cargo run --release -p fairjob-tests --bin fairness -- [--scale 1] [--only weighted,floor] …
//! ```
//!
//! Scenarios (`scenario.rs`): greedy + small (the greedy tenant's `push_bulk`
//! runs in a separate process: this binary re-executed with `--push-greedy`),
//! balanced, skew, weighted 3:1:1, trickle, sybil, heavy-idle and floor. Every
//! job sleeps `--job-ms`; one in-process worker at `--concurrency`; each
//! scenario × mode on its own private redis-server, with
//! `slowlog-log-slower-than 1000`. Writes `fairness.md`, `fairness.json` and
//! `fairness-<scenario>.svg` to `--out-dir` and copies the charts to
//! `--docs-dir` (unless `--no-docs`). Metric definitions: `metrics.rs`.

mod chart;
mod jobs;
mod metrics;
mod report;
mod run;
mod scenario;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Parser;

use crate::metrics::Metrics;
use crate::scenario::Scenario;

/// Tenant fairness: FIFO vs rerouting vs tenant shards (equal and weighted), eight scenarios.
#[derive(Debug, Clone, Parser)]
#[command(name = "fairness")]
pub(crate) struct Args {
    /// Multiplies every backlog size (greedy 12,000; balanced 10 × 400; skew
    /// 4,000 + 9 × 40; weighted 3 × 1,500; trickle 5 × 800; sybil 2,000 + 9 ×
    /// 200; heavy-idle 3,000; floor 1,000 + 50 × 150)
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Only these scenarios (comma-separated: greedy, balanced, skew, weighted,
    /// trickle, sybil, heavy-idle, floor)
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Greedy + small: number of small tenants
    #[arg(long, default_value_t = 20)]
    small_tenants: u64,
    /// Greedy + small: jobs per small tenant
    #[arg(long, default_value_t = 10)]
    small_jobs: u64,
    /// Greedy + small: seconds over which the small tenants' jobs are spread
    #[arg(long, default_value_t = 3.0)]
    small_spread: f64,
    /// Trickle: ms between the light tenant's jobs
    #[arg(long, default_value_t = 20.0)]
    trickle_ms: f64,
    /// Each job sleeps this long (ms; fractions allowed)
    #[arg(long, default_value_t = 2.0)]
    job_ms: f64,
    /// Each job's length varies by up to this fraction either way (0.5: from
    /// half to one and a half `--job-ms`, uniform, from the job's enqueue time).
    /// With 0, equal sleeps end on the same tick of tokio's 1 ms timer, so a
    /// worker's slots free in bursts, which real jobs of varying length don't
    #[arg(long, default_value_t = 0.0)]
    job_jitter: f64,
    /// Runs of every scenario × mode; the report gives medians
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Worker concurrency (one in-process worker)
    #[arg(long, default_value_t = 10)]
    concurrency: usize,
    /// Where fairness.md, fairness.json and the charts go
    #[arg(long, default_value = "target/bench")]
    out_dir: PathBuf,
    /// Copies of the charts for docs/benchmarks-history.md
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs"))]
    docs_dir: PathBuf,
    /// Don't copy the charts to --docs-dir
    #[arg(long)]
    no_docs: bool,
    /// Give up on a run after this many seconds
    #[arg(long, default_value_t = 120)]
    timeout_secs: u64,
    /// (internal) push the greedy backlog to this Redis URL and exit
    #[arg(long, hide = true)]
    push_greedy: Option<String>,
    #[arg(long, hide = true, default_value = "plain")]
    push_kind: String,
    #[arg(long, hide = true, default_value_t = 0)]
    push_jobs: u64,
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
    if let Some(url) = args.push_greedy.clone() {
        let Some(kind) = jobs::Kind::parse(&args.push_kind) else {
            eprintln!("fairness: unknown --push-kind {}", args.push_kind);
            return ExitCode::FAILURE;
        };
        return fairjob_tests::run_main(
            "fairness --push-greedy",
            run::push_greedy(&url, kind, args.push_jobs),
        );
    }
    fairjob_tests::run_main("fairness", run_all(args))
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

async fn run_all(a: Args) -> Result<()> {
    anyhow::ensure!(a.concurrency >= 1, "--concurrency must be at least 1");
    anyhow::ensure!(a.scale > 0.0, "--scale must be positive");
    anyhow::ensure!(a.reps >= 1, "--reps must be at least 1");
    for o in &a.only {
        anyhow::ensure!(
            scenario::ALL_KEYS.contains(&o.as_str()),
            "unknown scenario {o}"
        );
    }
    anyhow::ensure!(
        (0.0..1.0).contains(&a.job_jitter),
        "--job-jitter must be at least 0 and below 1"
    );
    jobs::set_job_micros((a.job_ms * 1000.0).round().max(0.0) as u64, a.job_jitter);
    std::fs::create_dir_all(&a.out_dir)?;
    let load_before = loadavg();
    let started = Instant::now();
    let mut all: Vec<(Scenario, Vec<Metrics>)> = Vec::new();
    for s in scenario::all(&a) {
        // Repetitions one after the other, the modes' order rotated each time.
        let modes = s.modes();
        let mut reps: Vec<Vec<Metrics>> = vec![Vec::new(); modes.len()];
        for rep in 0..a.reps {
            for k in 0..modes.len() {
                let i = (k + rep) % modes.len();
                eprintln!(
                    "[fairness] {} / {} (rep {})",
                    s.title,
                    modes[i].label(),
                    rep + 1
                );
                let r = run::run(&s, modes[i], &a).await?;
                reps[i].push(metrics::measure(&s, &r, a.concurrency));
            }
        }
        let fifo = modes
            .iter()
            .position(|m| *m == scenario::Mode::Fifo)
            .map(|i| reps[i].clone())
            .unwrap_or_default();
        let ms: Vec<Metrics> = reps
            .into_iter()
            .map(|r| metrics::aggregate(r, &fifo))
            .collect();
        let svg = a.out_dir.join(format!("fairness-{}.svg", s.key));
        chart::draw(&svg, &s, &ms)?;
        if !a.no_docs {
            std::fs::create_dir_all(&a.docs_dir)?;
            let to = a.docs_dir.join(format!("fairness-{}.svg", s.key));
            std::fs::copy(&svg, &to).with_context(|| format!("copying to {}", to.display()))?;
        }
        all.push((s, ms));
    }
    let took = started.elapsed();

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
    let mut md = String::from("# fairjob fairness report\n\n");
    let _ = writeln!(
        md,
        "- every job sleeps {} ms{}; one in-process worker at concurrency {}; scale {}; each scenario × mode run {} times on its own redis-server (`slowlog-log-slower-than 1000`), modes rotated; every figure is the median of the runs",
        a.job_ms,
        if a.job_jitter > 0.0 {
            format!(" ± {:.0}%", a.job_jitter * 100.0)
        } else {
            String::new()
        },
        a.concurrency,
        a.scale,
        a.reps
    );
    let _ = writeln!(
        md,
        "- machine: {cores} cores, {cpu}; load average {load_before} before, {} after; run took {:.0} s\n",
        loadavg(),
        took.as_secs_f64()
    );
    for (s, ms) in &all {
        md.push_str(&report::scenario_table(
            s,
            ms,
            &format!("docs/fairness-{}.svg", s.key),
            a.concurrency,
        ));
    }
    md.push_str(&report::goals(&all, a.concurrency));
    print!("{md}");
    let md_path = a.out_dir.join("fairness.md");
    std::fs::write(&md_path, &md)?;
    let json: serde_json::Map<String, serde_json::Value> = all
        .iter()
        .map(|(s, ms)| Ok((s.key.to_owned(), serde_json::to_value(ms)?)))
        .collect::<Result<_>>()?;
    std::fs::write(
        a.out_dir.join("fairness.json"),
        serde_json::to_string_pretty(&json)?,
    )?;
    eprintln!("[fairness] wrote {}", md_path.display());
    let short: Vec<String> = all
        .iter()
        .flat_map(|(s, ms)| {
            ms.iter()
                .filter(|m| m.ran < m.expected)
                .map(|m| format!("{} / {}", s.key, m.label))
        })
        .collect();
    if !short.is_empty() {
        bail!("some jobs never ran in: {}", short.join(", "));
    }
    Ok(())
}
