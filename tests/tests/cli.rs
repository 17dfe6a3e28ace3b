//! The worker CLI (`main!` gives every command): jobs, stats, tenants, limits,
//! and a config file.

use std::process::Command;

use fairjob::Job;
use fairjob_tests::jobs::TJob;
use fairjob_tests::{Redis, bin};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_stats_tenants_and_limits() {
    let redis = Redis::start().await;
    let jobs = redis.cli(&["jobs"]);
    assert!(
        jobs.contains("TJob") && jobs.contains("throttle(whatever_semislow > 1 per 1day)"),
        "{jobs}"
    );
    assert!(
        jobs.contains("SlotJob") && jobs.contains("concurrency(limit 3)"),
        "{jobs}"
    );

    let c = redis.client().await;
    for _ in 0..2 {
        TJob {
            tenant: "foo".into(),
        }
        .perform_async(&c)
        .await
        .unwrap();
    }
    TJob {
        tenant: "bar:baz".into(),
    }
    .perform_async(&c)
    .await
    .unwrap();
    let tenants = redis.cli(&["tenants", "TJob"]);
    let foo = tenants
        .lines()
        .find(|l| l.trim_start().starts_with("foo "))
        .unwrap_or_else(|| panic!("{tenants}"));
    assert!(
        foo.contains("2/1 in 86400s") && foo.contains("2/1 in 3600s"),
        "{foo}"
    );
    assert!(foo.ends_with("next job: whatever_supaslow"), "{foo}");
    let bar = tenants
        .lines()
        .find(|l| l.contains("bar:baz"))
        .unwrap_or_else(|| panic!("{tenants}"));
    assert!(
        bar.ends_with("next job: whatever_supaslow"),
        "1 job so far: the next is the 2nd, over threshold 1: {bar}"
    );

    let stats = redis.cli(&["stats"]);
    assert!(
        stats.contains("whatever") && stats.contains("scheduled: 0"),
        "{stats}"
    );

    fairjob::limit::set_limit(c.broker(), "SlotJob:k", Some(2), 3)
        .await
        .unwrap();
    let limits = redis.cli(&["limits"]);
    assert!(
        limits
            .lines()
            .any(|l| l.starts_with("SlotJob:k") && l.contains(" 2 ")),
        "{limits}"
    );
    let set = redis.cli(&["limits", "set", "SlotJob:k", "default"]);
    assert!(set.contains("back to the declared default"), "{set}");
    let limits = redis.cli(&["limits"]);
    assert!(limits.contains("3 (default)"), "{limits}");
}

#[test]
fn a_config_file_sets_the_flags() {
    let dir = fairjob_tests::temp_dir("cli");
    let path = dir.join("bad.toml");
    std::fs::write(&path, "concurency = 5\n").unwrap();
    let out = Command::new(bin("test-worker"))
        .args(["-C", path.to_str().unwrap(), "jobs"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("unknown field"),
        "a typo in the config is an error"
    );
}
