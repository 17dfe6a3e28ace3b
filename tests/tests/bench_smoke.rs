//! Smoke test of the benchmark binaries (`bench`, `fairness`) at tiny sizes and
//! without Ruby or peers (nothing here builds or installs rusty-sidekiq or
//! BullMQ): they must exit 0 and write their reports. These are benchmarks,
//! not tests: nothing here looks at a timing.

use std::path::Path;
use std::process::Command;

use fairjob_tests::temp_dir;

/// Runs the benchmark binary `exe` with `args` and `out` last; panics unless it exits 0.
fn run(exe: &str, args: &[&str], out: &Path) {
    let run = Command::new(exe)
        .args(args)
        .arg(out)
        .output()
        .unwrap_or_else(|e| panic!("{exe} starts: {e}"));
    assert!(
        run.status.success(),
        "{exe} failed:\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
}

#[test]
fn bench_runs_at_tiny_sizes_without_sidekiq() {
    let dir = temp_dir("bench-smoke-bench");
    let out = dir.join("bench.md");
    let args = [
        "--jobs",
        "200",
        "--single-jobs",
        "50",
        "--reps",
        "1",
        "--skip-sidekiq",
        "--latency-jobs",
        "50",
        "--latency-rate",
        "500",
        "--census-jobs",
        "50",
        "--redis-benchmark-n",
        "1000",
        "--out",
    ];
    run(env!("CARGO_BIN_EXE_bench"), &args, &out);
    let md = std::fs::read_to_string(&out).expect("bench writes its report");
    assert!(
        md.contains("| processing jobs/s, no-op, 1 process, c=10 |"),
        "{md}"
    );
    assert!(md.contains("## Redis commands per job"), "{md}");
    assert!(md.contains("## Raw Redis ceilings"), "{md}");
    assert!(
        md.contains("## Redis scripts over 1 ms") && md.contains("script calls over 1 ms"),
        "the slow log is reported:\n{md}"
    );
    assert!(!md.contains("## Peers"), "no --peers, no peers:\n{md}");
}

/// `--peers` names are checked before anything starts or is built.
#[test]
fn bench_rejects_an_unknown_peer() {
    let run = Command::new(env!("CARGO_BIN_EXE_bench"))
        .args(["--peers", "rusty-sidekiq,celery", "--skip-sidekiq"])
        .output()
        .expect("bench starts");
    assert!(!run.status.success());
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(stderr.contains("unknown peer \"celery\""), "{stderr}");
}

#[test]
fn fairness_runs_at_tiny_sizes() {
    let dir = temp_dir("bench-smoke-fairness");
    let args = [
        "--greedy-jobs",
        "300",
        "--small-tenants",
        "3",
        "--small-jobs",
        "3",
        "--spread-secs",
        "0.3",
        "--job-ms",
        "1",
        "--no-docs",
        "--out-dir",
    ];
    run(env!("CARGO_BIN_EXE_fairness"), &args, &dir);
    let md = std::fs::read_to_string(dir.join("fairness.md")).expect("fairness writes its report");
    for mode in [
        "idle baseline",
        "plain FIFO",
        "fair-tenant rerouting",
        "tenant shards",
    ] {
        assert!(md.contains(mode), "{mode} missing from:\n{md}");
    }
    let svg = std::fs::read_to_string(dir.join("fairness.svg")).expect("fairness draws its chart");
    assert!(
        svg.starts_with("<svg") && svg.contains("</svg>"),
        "not an SVG"
    );
}
