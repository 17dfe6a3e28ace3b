//! Processing with OpenTelemetry on vs off: jobs/s of one in-process worker
//! (concurrency 10) draining `--jobs` no-op jobs pushed beforehand, each run a
//! fresh process on its own private redis-server. Three variants, alternated
//! round by round (the order rotates) so a noisy machine hits them alike:
//!
//! - `off`: this binary built without fairjob-tests' `otel` feature (so
//!   without fairjob's), no subscriber;
//! - `on`: built with it, no subscriber (the feature compiled in, unused);
//! - `on+export`: built with it, a `tracing-opentelemetry` layer and the SDK's
//!   batch processor exporting to an exporter that discards (the spans and
//!   the context in every payload, no network); the jobs are pushed inside a
//!   request span, so each carries a `traceparent` and each run continues it.
//!
//! ```text
//! cargo build --release -p fairjob-tests --bin otel_bench
//! cp target/release/otel_bench target/release/otel_bench-off
//! cargo build --release -p fairjob-tests --features otel --bin otel_bench
//! target/release/otel_bench compare --off target/release/otel_bench-off --jobs 20000 --rounds 5
//! ```

use std::process::{Command, ExitCode};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use fairjob::Registry;
use fairjob_tests::jobs::{NOOPS, NoopJob};
use fairjob_tests::{flag, namespace, redis};
use tracing::Instrument;

fn main() -> ExitCode {
    let mode = std::env::args().nth(1).unwrap_or_default();
    let result = match mode.as_str() {
        "run" => run(),
        "compare" => compare(),
        _ => Err(anyhow::anyhow!(
            "usage: otel_bench run [--jobs N] [--export] | otel_bench compare --off PATH [--jobs N] [--rounds R]"
        )),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// One measurement: prints `jobs_per_s <x>`.
fn run() -> Result<()> {
    let jobs: u64 = flag("--jobs", 20_000);
    let export = std::env::args().any(|a| a == "--export");
    let _provider = if export { install()? } else { None };
    let server = redis();
    let url = server.url();
    let ns = namespace();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let rate = runtime.block_on(async move {
        let client = fairjob_tests::client(&url, &ns).await;
        for chunk in (0..jobs).collect::<Vec<_>>().chunks(1000) {
            let request = tracing::info_span!("bench request", otel.kind = "server");
            client
                .push_bulk(chunk.iter().map(|&i| NoopJob(i)))
                .instrument(request)
                .await?;
        }
        let mut registry = Registry::new();
        registry.register::<NoopJob>()?;
        let worker = fairjob_tests::worker(&url, &ns)
            .registry(registry)
            .concurrency(10)
            .build()
            .await?;
        let t = Instant::now();
        let running = fairjob_tests::spawn(worker);
        while (NOOPS.load(Ordering::Relaxed) as u64) < jobs {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let rate = jobs as f64 / t.elapsed().as_secs_f64();
        running.stop().await;
        anyhow::Ok(rate)
    })?;
    println!("jobs_per_s {rate:.0}");
    Ok(())
}

#[cfg(not(feature = "otel"))]
fn install() -> Result<Option<()>> {
    bail!("--export needs this binary built with `--features otel`")
}

/// A tracer provider with the SDK's batch processor and an exporter that
/// discards, behind a `tracing-opentelemetry` layer.
#[cfg(feature = "otel")]
fn install() -> Result<Option<opentelemetry_sdk::trace::SdkTracerProvider>> {
    use opentelemetry::trace::TracerProvider as _;
    use tracing_subscriber::layer::SubscriberExt;

    #[derive(Debug)]
    struct Discard;
    impl opentelemetry_sdk::trace::SpanExporter for Discard {
        async fn export(
            &self,
            batch: Vec<opentelemetry_sdk::trace::SpanData>,
        ) -> opentelemetry_sdk::error::OTelSdkResult {
            std::hint::black_box(batch);
            Ok(())
        }
    }
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_batch_exporter(Discard)
        .build();
    let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("otel_bench"));
    let filtered = tracing_subscriber::Layer::with_filter(
        layer,
        tracing_subscriber::filter::LevelFilter::INFO,
    );
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(filtered))?;
    Ok(Some(provider))
}

/// One `run` of `exe`; its jobs/s.
fn measure(exe: &std::path::Path, jobs: u64, export: bool) -> Result<f64> {
    let mut cmd = Command::new(exe);
    cmd.arg("run").arg("--jobs").arg(jobs.to_string());
    if export {
        cmd.arg("--export");
    }
    let out = cmd.output().with_context(|| format!("{}", exe.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "{} run: {}{}",
            exe.display(),
            stdout,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("jobs_per_s "))
        .and_then(|v| v.trim().parse().ok())
        .context("no `jobs_per_s` line")
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Alternates the three variants `--rounds` times; prints each run and the medians.
fn compare() -> Result<()> {
    if !cfg!(feature = "otel") {
        bail!("compare runs from the build with `--features otel` (the `on` side)");
    }
    let off: String = flag("--off", String::new());
    if off.is_empty() {
        bail!("--off PATH: the otel_bench built without the feature");
    }
    let off = std::path::PathBuf::from(off);
    let on = std::env::current_exe()?;
    let jobs: u64 = flag("--jobs", 20_000);
    let rounds: usize = flag("--rounds", 5);
    let variants: [(&str, &std::path::Path, bool); 3] = [
        ("off", &off, false),
        ("on", &on, false),
        ("on+export", &on, true),
    ];
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); 3];
    for round in 0..rounds {
        for k in 0..3 {
            let i = (round + k) % 3;
            let (name, exe, export) = variants[i];
            let rate = measure(exe, jobs, export)?;
            println!("round {round} {name}: {rate:.0} jobs/s");
            samples[i].push(rate);
        }
    }
    let medians: Vec<f64> = samples.iter_mut().map(|s| median(s)).collect();
    println!();
    println!("| variant | median jobs/s ({rounds} runs of {jobs}) | vs off |");
    println!("|---|---:|---:|");
    for (i, (name, _, _)) in variants.iter().enumerate() {
        println!(
            "| {name} | {:.0} | {:.2} |",
            medians[i],
            medians[i] / medians[0]
        );
    }
    Ok(())
}
