//! The `batch_import` example runs to its end on a private redis-server: the
//! import's callback and the workflow's last step both report.

use std::process::Command;

#[test]
fn the_batch_import_example_runs_its_import_and_its_workflow() {
    let out = Command::new(env!("CARGO_BIN_EXE_batch_import"))
        .env_remove("REDIS_URL")
        .output()
        .expect("the example runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("import 7 done: 3000 rows, 0 pending, 0 failed (3000 rows ran here)"),
        "{stdout}"
    );
    assert!(stdout.contains("loaded the sum of squares 50"), "{stdout}");
    assert!(stdout.contains("3 steps, success fired: true"), "{stdout}");
}
