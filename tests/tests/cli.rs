//! The worker CLI (`main!` gives every command): jobs, stats, tenants, limits,
//! batches, a workflow's steps, and a config file.

use std::process::Command;

use fairjob::{Batch, Job, Workflow};
use fairjob_tests::jobs::{OutcomeJob, RecordJob, SpawnJob, TJob};
use fairjob_tests::{Redis, bin, eventually, queues, spawn};

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_and_one_batch() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    let outcome = |kind: &str| OutcomeJob {
        kind: kind.into(),
        tenant: "acme".into(),
    };
    let done = Batch::new()
        .description("import: {rows} ünï")
        .set_tenant("ac:me")
        .on_complete(RecordJob("complete".into()))
        .on_death(RecordJob("death".into()))
        .push_bulk((0..2).map(|_| outcome("ok")))
        .push(outcome("dead"))
        .commit(&c)
        .await
        .unwrap();
    let w = spawn(
        redis
            .worker()
            .queues(queues(&["outcomes"]))
            .build()
            .await
            .unwrap(),
    );
    eventually!(
        c.batch_status(&done)
            .await
            .unwrap()
            .is_some_and(|s| s.complete_at.is_some()),
        "the batch completes"
    );
    w.stop().await;
    // Nobody works `spawn`: open.
    let open = Batch::new()
        .push(SpawnJob("x".into()))
        .commit(&c)
        .await
        .unwrap();

    let table = redis.cli(&["batches"]);
    let line = |bid: &str| {
        table
            .lines()
            .find(|l| l.starts_with(bid))
            .unwrap_or_else(|| panic!("{bid} in {table}"))
            .to_owned()
    };
    let d = line(&done);
    assert!(d.contains(" complete+d "), "complete, a member died: {d}");
    assert!(
        d.ends_with(&format!("{:<16} import: {{rows}} ünï", "ac:me")),
        "tenant and description: {d}"
    );
    let numbers: Vec<&str> = d.split_whitespace().skip(2).take(3).collect();
    assert_eq!(numbers, ["3", "0", "1"], "total, pending, failures: {d}");
    let o = line(&open);
    assert!(o.contains(" open ") && o.contains(" - "), "{o}");
    assert!(table.contains("2 batch(es)"), "{table}");

    let one = redis.cli(&["batches", &done]);
    println!("{table}\n{one}");
    assert!(
        one.contains("state:       complete (a member died)"),
        "{one}"
    );
    assert!(one.contains("description: import: {rows} ünï"), "{one}");
    assert!(one.contains("tenant:      ac:me"), "{one}");
    assert!(
        one.contains("3 total, 0 pending, 1 not succeeded, 1 failed"),
        "{one}"
    );
    assert!(one.contains("on death     -> queue default"), "{one}");
    assert!(one.contains("on complete  -> queue default"), "{one}");
    assert!(one.contains("failed members (1 of 1):"), "{one}");
    assert!(one.contains("hopeless"), "the dead member's failure: {one}");

    let out = Command::new(bin("test-worker"))
        .args(["-r", redis.url(), "--namespace", redis.ns()])
        .args(["batches", "no-such-bid"])
        .env("FAIRJOB_LOG", "error")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no batch \"no-such-bid\""),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflows_steps_a_page_at_a_time() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    let _w = spawn(
        redis
            .worker()
            .queues(queues(&["outcomes"]))
            .build()
            .await
            .unwrap(),
    );
    let ok = |kind: &str| OutcomeJob {
        kind: kind.into(),
        tenant: "ac:me {x}".into(),
    };
    // `bad` dies: `cancelled` is cancelled, `merge` continues past it;
    // `waits` waits for `parked`, which sits in a queue nobody works.
    let wid = Workflow::new()
        .description("nightly <b>export</b>")
        .add("bad", ok("dead"))
        .add_after("cancelled", ok("ok"), ["bad"])
        .add("extract", ok("ok"))
        .add_after("merge", ok("ok"), ["extract", "bad"])
        .on_dependency_failure("merge", fairjob::batch::OnDependencyFailure::Continue)
        .add("parked", RecordJob("parked".into()).queue("nobody"))
        .add_after("waits", ok("ok"), ["parked", "extract"])
        .commit(&c)
        .await
        .unwrap();
    eventually!(
        c.batch_status(&wid).await.unwrap().unwrap().pending == 2,
        "every step but `parked` and `waits` ends"
    );
    let all = redis.cli(&["workflow", &wid]);
    println!("{all}");
    assert!(all.contains(&format!("workflow {wid}")), "{all}");
    assert!(all.contains("description: nightly <b>export</b>"), "{all}");
    assert!(
        all.contains("steps:       6 total, 1 held, 2 not run yet"),
        "{all}"
    );
    let line = |name: &str| {
        all.lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name}: {all}"))
            .to_owned()
    };
    assert!(line("bad").contains(" failed "), "{all}");
    assert!(line("cancelled").contains(" cancelled "), "{all}");
    assert!(line("cancelled").ends_with("after: bad"), "{all}");
    assert!(
        line("merge").contains(" done ")
            && line("merge").ends_with("after: extract, bad; continued past failed: bad"),
        "{all}"
    );
    assert!(line("parked").contains(" queued "), "{all}");
    assert!(
        line("waits").contains(" held ")
            && line("waits").ends_with("after: parked, extract; waiting for: parked"),
        "{all}"
    );
    assert!(
        all.contains("steps 1-6 of 6") && !all.contains("more:"),
        "{all}"
    );
    // Paged: two at a time, in name order.
    let page = redis.cli(&["workflow", &wid, "--from", "2", "--limit", "2"]);
    assert!(
        page.contains("steps 3-4 of 6") && page.contains("more: --from 4"),
        "{page}"
    );
    let names: Vec<&str> = page
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| ["bad", "cancelled", "extract", "merge", "parked", "waits"].contains(w))
        .collect();
    assert_eq!(names, ["extract", "merge"], "{page}");

    let out = Command::new(bin("test-worker"))
        .args(["-r", redis.url(), "--namespace", redis.ns()])
        .args(["workflow", "no-such-wid"])
        .env("FAIRJOB_LOG", "error")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no workflow \"no-such-wid\""),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
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
