//! The `fairjob-worker` binary links no job types: asked to run jobs it explains
//! how to build a worker with `main!`, and fails.

use std::process::Command;

#[test]
fn running_jobs_explains_main() {
    let out = Command::new(env!("CARGO_BIN_EXE_fairjob-worker"))
        .args(["-r", "redis://127.0.0.1:1"])
        .output()
        .expect("fairjob-worker runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("fairjob_worker::main!(my_jobs);"), "{err}");
    assert!(err.contains("links no job types"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one paragraph: {err}");
}

#[test]
fn help_lists_the_commands() {
    let out = Command::new(env!("CARGO_BIN_EXE_fairjob-worker"))
        .arg("--help")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    for cmd in [
        "stats",
        "tenants",
        "shards",
        "limits",
        "--queue",
        "--concurrency",
        "--timeout",
        "--config",
    ] {
        assert!(text.contains(cmd), "{cmd} missing from --help: {text}");
    }
}
