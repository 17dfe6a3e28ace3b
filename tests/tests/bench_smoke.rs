//! Smoke test of the benchmark binaries (`bench`, `fairness`, `pump_bench`) at
//! tiny sizes and without Ruby or peers (nothing here builds or installs
//! rusty-sidekiq, BullMQ, graphile-worker or pg-boss): they must exit 0 and
//! write their reports. These are benchmarks, not tests: nothing here looks at
//! a timing.

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

/// Every scenario in every mode at tiny sizes with one worker at concurrency 1
/// and jobs that do nothing: the run completes, writes its report and charts,
/// and weighted 3:1:1 shards dispatch in exact 3:1:1 order (stride scheduling
/// with a single worker is deterministic, so the share ratio is not a timing).
#[test]
fn fairness_runs_at_tiny_sizes() {
    let dir = temp_dir("bench-smoke-fairness");
    let args = [
        "--scale",
        "0.01",
        "--concurrency",
        "1",
        "--job-ms",
        "0",
        "--small-tenants",
        "3",
        "--small-jobs",
        "3",
        "--small-spread",
        "0.3",
        "--no-docs",
        "--out-dir",
    ];
    run(env!("CARGO_BIN_EXE_fairness"), &args, &dir);
    let md = std::fs::read_to_string(dir.join("fairness.md")).expect("fairness writes its report");
    for title in [
        "### greedy + small",
        "### balanced",
        "### skew",
        "### weighted 3:1:1",
        "### trickle",
        "### sybil",
        "### heavy-idle",
        "### floor",
        "### Goals, weighted shards",
    ] {
        assert!(md.contains(title), "{title} missing from:\n{md}");
    }
    for mode in [
        "| idle baseline |",
        "| FIFO |",
        "| reroute |",
        "| shards, equal weights |",
        "| shards, weighted |",
    ] {
        assert!(md.contains(mode), "{mode} missing from:\n{md}");
    }
    for key in [
        "greedy",
        "balanced",
        "skew",
        "weighted",
        "trickle",
        "sybil",
        "heavy-idle",
        "floor",
    ] {
        let svg = std::fs::read_to_string(dir.join(format!("fairness-{key}.svg")))
            .expect("fairness draws a chart per scenario");
        assert!(
            svg.starts_with("<svg") && svg.contains("</svg>"),
            "{key}: not an SVG"
        );
    }
    let json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("fairness.json")).expect("fairness writes its JSON"),
    )
    .expect("valid JSON");
    let ratio = |mode: &str| {
        json["weighted"]
            .as_array()
            .expect("weighted runs")
            .iter()
            .find(|m| m["mode"] == mode)
            .and_then(|m| m["worst_ratio"].as_f64())
            .unwrap_or_else(|| panic!("no share ratio for {mode}: {json}"))
    };
    // 15 jobs each: a, b, c, a, a, then a, a, a, b, c per round; a drains
    // after 5 rounds, when b and c have had 5 each.
    let weighted = ratio("shards_weighted");
    assert!(weighted >= 0.95, "weighted 3:1:1 share ratio {weighted}");
    // Round robin gives a 1/3 where its fair share is 3/5.
    let rr = ratio("shards_rr");
    assert!(rr < 0.7, "round robin share ratio {rr} against 3:1:1");
    for (key, runs) in json.as_object().expect("scenarios") {
        for m in runs.as_array().expect("runs") {
            assert_eq!(m["ran"], m["expected"], "{key}: {m}");
        }
    }
}

/// `pump_bench --quick` with its peers asked for while the npm registry is
/// out of reach (an empty install directory and npm cache, the registry a
/// closed loopback port): the peers are skipped, saying why, and the run
/// still prints the whole table with fairjob's figures.
#[test]
fn pump_bench_quick_skips_unreachable_peers_and_prints_the_table() {
    let dir = temp_dir("bench-smoke-pump");
    let run = Command::new(env!("CARGO_BIN_EXE_pump_bench"))
        .args(["--quick", "--peers", "graphile-worker,pg-boss"])
        .env("FAIRJOB_PG_PEERS_DIR", dir.join("peers"))
        .env("npm_config_cache", dir.join("npm-cache"))
        .env("npm_config_registry", "http://127.0.0.1:9/")
        .env("npm_config_fetch_retries", "0")
        .output()
        .expect("pump_bench starts");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "pump_bench failed:\n{stderr}");
    assert!(
        stdout.contains("| measure | fairjob | graphile-worker | pg-boss |"),
        "{stdout}"
    );
    for row in [
        "| commit → start p50 / p99, one job per transaction, 200 jobs/s offered, default settings |",
        "| jobs/s end to end (transactional enqueue of one job per transaction by 8 concurrent producers → no-op performed) |",
        "| jobs/s through the pump from a backlog of 3,000 committed rows |",
        "| 2 and 4 pumps against 1 |",
        "| the application's own commits/s with fairjob enqueueing in them, against the same transactions without |",
    ] {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(row))
            .unwrap_or_else(|| panic!("{row} missing from:\n{stdout}"));
        assert!(line.ends_with("| skipped | skipped |"), "{line}");
        assert!(!line.contains("| — |"), "fairjob's cell is empty: {line}");
    }
    for peer in ["graphile-worker", "pg-boss"] {
        assert!(
            stdout.contains(&format!("- {peer} skipped: ")),
            "{peer} is skipped with its reason:\n{stdout}"
        );
    }
}
