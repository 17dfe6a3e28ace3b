//! The worker as an OS process: TSTP (the platform's own signal) quiets it,
//! TERM ends it; its logs carry no colour codes when they go to a file, and
//! `--log-format json` writes one JSON object per line with the span's fields.

use std::time::Duration;

use fairjob::prelude::*;
use fairjob_tests::jobs::{FailJob, RecordJob};
use fairjob_tests::{Redis, eventually, temp_dir};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tstp_quiets_a_worker_process_and_term_ends_it() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    let dir = temp_dir("tstp");
    let mut w = redis
        .worker_process()
        .queues(["default"])
        .concurrency(2)
        .log_to(&dir.join("log"))
        .start();
    RecordJob("before".into()).perform_async(&c).await.unwrap();
    eventually!(
        redis.records().await.len() == 1,
        "the worker runs jobs before TSTP"
    );
    w.signal("TSTP");
    // The handler quiets the fetch loop at once; give the signal a moment to land.
    tokio::time::sleep(Duration::from_millis(500)).await;
    RecordJob("after".into()).perform_async(&c).await.unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(redis.records().await.len(), 1, "quiet: no new job ran");
    assert_eq!(redis.llen(redis.keys().queue("default")).await, 1);
    assert!(
        w.wait_timeout(Duration::from_millis(100)).is_none(),
        "still alive when quiet"
    );
    let status = w.stop().expect("exits on TERM");
    assert!(status.success(), "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_to_a_file_have_no_colour_and_json_logs_carry_span_fields() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    let dir = temp_dir("logs");
    let worker = redis.worker_process().queues(["default"]).concurrency(2);
    let jid = FailJob("x".into()).perform_async(&c).await.unwrap();
    let mut w = worker.clone().log_to(&dir.join("text.log")).start();
    eventually!(w.log().contains("job failed"), "the text log has a failure");
    w.stop();
    let text = w.log();
    assert!(
        !text.contains('\u{1b}'),
        "ANSI codes in a redirected log:\n{text}"
    );

    FailJob("y".into()).perform_async(&c).await.unwrap();
    let mut w = worker
        .arg("--log-format")
        .arg("json")
        .env("FAIRJOB_LOG", "info")
        .log_to(&dir.join("json.log"))
        .start();
    eventually!(w.log().contains("job failed"), "the JSON log has a failure");
    w.stop();
    let json = w.log();
    let mut failed = None;
    for line in json.lines().filter(|l| l.starts_with('{')) {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        if v["fields"]["message"] == "job failed" {
            failed = Some(v);
        }
    }
    let failed = failed.unwrap_or_else(|| panic!("no `job failed` line:\n{json}"));
    assert_eq!(failed["span"]["name"], "fairjob.perform", "{failed}");
    assert_eq!(failed["span"]["job.class"], "FailJob", "{failed}");
    assert_eq!(failed["span"]["job.queue"], "default", "{failed}");
    assert!(failed["span"]["job.jid"].is_string(), "{failed}");
    assert_ne!(
        failed["span"]["job.jid"],
        jid.as_str(),
        "the second job's line"
    );
    assert_eq!(failed["fields"]["error_class"], "ArgumentError", "{failed}");
    // The event names its job even when the filter leaves the span out.
    assert_eq!(failed["fields"]["job.class"], "FailJob", "{failed}");
    assert_eq!(
        failed["fields"]["job.jid"], failed["span"]["job.jid"],
        "{failed}"
    );
}
