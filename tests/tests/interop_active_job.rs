//! Interop with Rails' ActiveJob on Sidekiq (Debian's `ruby-activejob` 6.1
//! with `ruby-sidekiq` 6.4.1, whose adapter writes the wrapper
//! `ActiveJob::QueueAdapters::SidekiqAdapter::JobWrapper`): jobs enqueued
//! with `perform_later` are performed by a fairjob worker, with their
//! arguments decoded from ActiveJob's serialization; a class fairjob does not
//! know, or arguments that do not fit, fail into `retry` and after their last
//! retry into `dead`, named, with their bytes; and `#[job(active_job)]` jobs
//! pushed by fairjob (positional, keyword, hash and time arguments, scheduled,
//! to a chosen queue) are performed by a real Sidekiq server running ActiveJob. The Ruby side is `tests/ruby/active_job.rb`.
//! No namespace (Sidekiq 6.4.1 has none); each test has its own redis-server.

use std::collections::BTreeMap;
use std::time::Duration;

use fairjob::prelude::*;
use fairjob::{Payload, Registry};
use fairjob_tests::ruby::{SidekiqProcess, ruby_json};
use fairjob_tests::{Redis, RedisServer, RunningWorker, eventually};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Where the Rust jobs record what they were given.
const RUST_RESULTS: &str = "fairjob-tests:active_job:rust";
/// Where the Ruby jobs record what they were given (see `active_job.rb`).
const RUBY_RESULTS: &str = "fairjob-tests:active_job";

/// Appends what the job got, and what `cx` says about it, to [`RUST_RESULTS`].
async fn record(cx: &JobContext, value: Value) -> Result<(), JobError> {
    let line = json!({
        "class": cx.class(),
        "value": value,
        "job_id": cx.job_id(),
        "executions": cx.executions(),
        "locale": cx.locale(),
        "enqueued_at": cx.enqueued_at().is_some(),
        "queue": cx.queue(),
        "jid": cx.jid(),
    });
    fairjob_tests::query::<i64>(
        cx.client().broker(),
        redis::cmd("RPUSH").arg(RUST_RESULTS).arg(line.to_string()),
    )
    .await
    .map_err(JobError::retry)?;
    Ok(())
}

/// `AjPositionalJob.perform_later(7, "pdf")`.
#[derive(Serialize, Deserialize, fairjob::Job)]
#[job(active_job, class = "AjPositionalJob")]
struct AjPositional(u64, String);

impl Perform for AjPositional {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        record(cx, json!([self.0, self.1])).await
    }
}

/// `AjKeywordJob.perform_later(report_id: 8, format: :csv)`.
#[derive(Serialize, Deserialize, fairjob::Job)]
#[job(active_job, class = "AjKeywordJob")]
struct AjKeyword {
    report_id: u64,
    format: String,
}

impl Perform for AjKeyword {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        record(
            cx,
            json!({"report_id": self.report_id, "format": self.format}),
        )
        .await
    }
}

/// `AjHashJob.perform_later({a: 1, b: [1, 2]}, {"c" => "d"}, HashWithIndifferentAccess)`.
#[derive(Serialize, Deserialize, fairjob::Job)]
#[job(active_job, class = "AjHashJob")]
struct AjHash(
    BTreeMap<String, Value>,
    BTreeMap<String, String>,
    BTreeMap<String, u64>,
);

impl Perform for AjHash {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        record(cx, json!([self.0, self.1, self.2])).await
    }
}

/// `AjTimeJob.perform_later(Time, TimeWithZone, Date, DateTime, 2.hours, :weekly, user)`.
#[derive(Serialize, Deserialize, fairjob::Job)]
#[job(active_job, class = "AjTimeJob")]
struct AjTime(String, String, String, String, u64, String, String);

impl Perform for AjTime {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        let at = humantime::parse_rfc3339_weak(&self.0).map_err(JobError::discard)?;
        let secs = at
            .duration_since(std::time::UNIX_EPOCH)
            .map_err(JobError::discard)?;
        record(
            cx,
            json!([
                self.0,
                self.1,
                self.2,
                self.3,
                self.4,
                self.5,
                self.6,
                secs.as_secs()
            ]),
        )
        .await
    }
}

/// Performed by Ruby: `perform(name:, count:, tags:)`.
#[derive(Serialize, Deserialize, fairjob::Job)]
#[job(active_job, class = "AjRubyKeywordJob")]
struct AjRubyKeyword {
    name: String,
    count: u64,
    tags: Vec<String>,
}

impl Perform for AjRubyKeyword {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// Performed by Ruby: `perform(id, opts)`.
#[derive(Serialize, Deserialize, fairjob::Job)]
#[job(active_job, class = "AjRubyPositionalJob")]
struct AjRubyPositional(u64, Opts);

#[derive(Serialize, Deserialize)]
struct Opts {
    a: u64,
    b: String,
}

impl Perform for AjRubyPositional {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// Performed by Ruby: `perform(at, on, every)`, with a time, a date and a
/// duration as a Rust job writes them (ISO 8601 strings, seconds).
#[derive(Serialize, Deserialize, fairjob::Job)]
#[job(active_job, class = "AjRubyTimeJob")]
struct AjRubyTime(String, String, u64);

impl Perform for AjRubyTime {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// A private redis-server and a handle on it with no namespace.
async fn unprefixed() -> (RedisServer, Redis) {
    let server = fairjob_tests::redis();
    let redis = Redis::connect(&server.url(), "").await;
    (server, redis)
}

/// What the Rust jobs recorded, by class.
async fn rust_results(redis: &Redis) -> BTreeMap<String, Vec<Value>> {
    let mut out: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for line in redis.lrange(RUST_RESULTS).await {
        let v: Value = serde_json::from_str(&line).expect("a JSON line");
        out.entry(v["class"].as_str().unwrap_or("").to_owned())
            .or_default()
            .push(v);
    }
    out
}

/// `perform_later` in Ruby (positional, keyword, hash and time arguments,
/// `set(wait:)`, `set(queue:)`) → a fairjob worker performs every one; an
/// unknown class and arguments that do not fit go to `retry`, then after
/// their last retry to `dead`, named, with their bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn perform_later_in_rails_is_performed_by_fairjob() {
    let (_server, redis) = unprefixed().await;
    let url = redis.url().to_owned();
    let jids = ruby_json("active_job.rb", vec![url, "enqueue".into()]).await;
    // What Rails wrote, before any worker touched it.
    let mut originals: BTreeMap<String, String> = BTreeMap::new();
    for raw in redis.lrange("queue:default").await {
        let p = Payload::parse(raw.clone().into_bytes()).expect("a Sidekiq payload");
        assert_eq!(
            p.wire_class(),
            "ActiveJob::QueueAdapters::SidekiqAdapter::JobWrapper",
            "Sidekiq 6.4's adapter writes the JobWrapper: {raw}"
        );
        originals.insert(p.jid(), raw);
    }
    assert_eq!(redis.zcard("schedule").await, 1, "set(wait:) schedules");
    assert_eq!(
        redis.llen("queue:reports").await,
        1,
        "set(queue:) picks the queue"
    );

    let mut registry = Registry::new();
    registry.register::<AjPositional>().unwrap();
    registry.register::<AjKeyword>().unwrap();
    registry.register::<AjHash>().unwrap();
    registry.register::<AjTime>().unwrap();
    let worker = redis
        .worker()
        .queues(fairjob_tests::queues(&["default", "reports"]))
        .registry(registry)
        .build()
        .await
        .expect("fairjob worker builds");
    let worker: RunningWorker = fairjob_tests::spawn(worker);

    let results = eventually!(
        within Duration::from_secs(20),
        let results = rust_results(&redis).await;
        results.values().map(Vec::len).sum::<usize>() == 6 && redis.zcard("retry").await == 2,
        "fairjob performs the six ActiveJob jobs and fails two; retry = {:?}",
        redis.zrange("retry").await
    );
    tokio::time::timeout(Duration::from_secs(15), worker.stop())
        .await
        .expect("fairjob worker shuts down");

    assert_eq!(results["AjPositionalJob"][0]["value"], json!([7, "pdf"]));
    let mut keyword: Vec<&Value> = results["AjKeywordJob"].iter().collect();
    keyword.sort_by_key(|v| v["value"]["report_id"].as_u64());
    assert_eq!(
        keyword.iter().map(|v| &v["value"]).collect::<Vec<_>>(),
        [
            &json!({"report_id": 8, "format": "csv"}),
            &json!({"report_id": 9, "format": "later"}),
            &json!({"report_id": 10, "format": "queued"}),
        ]
    );
    assert_eq!(
        keyword[1]["queue"], "default",
        "set(wait:) ran after its promotion"
    );
    assert_eq!(
        keyword[2]["queue"], "reports",
        "set(queue:) ran from its queue"
    );
    assert_eq!(
        results["AjHashJob"][0]["value"],
        json!([{"a": 1, "b": [1, 2]}, {"c": "d"}, {"e": 5}])
    );
    assert_eq!(
        results["AjTimeJob"][0]["value"],
        json!([
            "2026-11-25T12:30:15.123456000Z",
            "2026-11-25T13:30:15.123456000+01:00",
            "2026-11-25",
            "2026-11-25T01:02:03.000000000+00:00",
            7200,
            "weekly",
            "gid://app/User/42",
            1795609815u64,
        ])
    );
    for v in results.values().flatten() {
        let job_id = v["job_id"]
            .as_str()
            .expect("cx.job_id() of an ActiveJob job");
        assert_eq!(job_id.len(), 36, "ActiveJob's UUID: {v}");
        assert_eq!(v["executions"], 1, "the first execution: {v}");
        assert_eq!(v["locale"], "en", "{v}");
        assert_eq!(v["enqueued_at"], true, "{v}");
        assert_eq!(v["jid"].as_str().map(str::len), Some(24), "{v}");
    }

    // The two failures: named after the Ruby class and the argument, bytes kept.
    let mut failed = BTreeMap::new();
    for raw in redis.zrange("retry").await {
        let p = Payload::parse(raw.into_bytes()).expect("a retry entry");
        failed.insert(p.jid(), p);
    }
    let unknown = &failed[jids["unknown"].as_str().unwrap()];
    let message = unknown.get_str("error_message").unwrap_or_default();
    assert!(
        message.contains("`AjUnknownJob`"),
        "the unknown class is named: {message}"
    );
    let bad = &failed[jids["bad"].as_str().unwrap()];
    let message = bad.get_str("error_message").unwrap_or_default();
    assert!(
        message.contains("`AjPositionalJob`")
            && message.contains("argument [0] does not fit")
            && message.contains("\"seven\""),
        "the class and the argument are named: {message}"
    );
    assert_eq!(bad.get_str("error_class").as_deref(), Some("ArgumentError"));
    for p in [unknown, bad] {
        let original = Payload::parse(originals[&p.jid()].clone().into_bytes()).unwrap();
        for field in [
            "class",
            "wrapped",
            "args",
            "queue",
            "jid",
            "created_at",
            "retry",
        ] {
            assert_eq!(
                p.field(field).map(|v| v.get()),
                original.field(field).map(|v| v.get()),
                "`{field}` is kept byte for byte"
            );
        }
        assert_eq!(p.retry_count(), Some(0));
    }

    // Their last retry: as after 24 failures, back in `retry` and due now. The
    // next failure sends each to `dead`, still named, still byte for byte.
    for p in [unknown, bad] {
        let mut last = p.clone();
        last.set("retry_count", 24);
        let _: i64 = redis
            .query(redis::cmd("ZREM").arg("retry").arg(p.to_json()))
            .await;
        let _: i64 = redis
            .query(redis::cmd("ZADD").arg("retry").arg(0).arg(last.to_json()))
            .await;
    }
    let mut registry = Registry::new();
    registry.register::<AjPositional>().unwrap();
    let worker = redis
        .worker()
        .registry(registry)
        .build()
        .await
        .expect("fairjob worker builds");
    let worker: RunningWorker = fairjob_tests::spawn(worker);
    eventually!(
        within Duration::from_secs(20),
        redis.zcard("dead").await == 2,
        "after their last retry both are dead; retry = {:?}",
        redis.zrange("retry").await
    );
    tokio::time::timeout(Duration::from_secs(15), worker.stop())
        .await
        .expect("fairjob worker shuts down");
    assert_eq!(redis.zcard("retry").await, 0);
    for raw in redis.zrange("dead").await {
        let p = Payload::parse(raw.into_bytes()).expect("a dead entry");
        let original = Payload::parse(originals[&p.jid()].clone().into_bytes()).unwrap();
        let named = if p.jid() == jids["unknown"].as_str().unwrap() {
            "`AjUnknownJob`"
        } else {
            "`AjPositionalJob`: ActiveJob argument [0] does not fit"
        };
        let message = p.get_str("error_message").unwrap_or_default();
        assert!(message.contains(named), "{named} in: {message}");
        for field in [
            "class",
            "wrapped",
            "args",
            "queue",
            "jid",
            "created_at",
            "retry",
        ] {
            assert_eq!(
                p.field(field).map(|v| v.get()),
                original.field(field).map(|v| v.get()),
                "dead: `{field}` is kept byte for byte"
            );
        }
        assert_eq!(p.retry_count(), Some(25));
    }
}

/// `#[job(active_job)]` jobs pushed by fairjob are performed by a real Sidekiq
/// server running ActiveJob: keyword arguments from a struct with named
/// fields, a symbol-keyed Hash from a nested struct, and a time, a date and a
/// duration pushed with `perform_in` (Sidekiq's `schedule`, as `set(wait:)`)
/// to the queue `reports` (as `set(queue:)`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fairjob_pushed_active_jobs_are_performed_by_rails() {
    let (_server, redis) = unprefixed().await;
    let client = redis.client().await;
    let kw_jid = AjRubyKeyword {
        name: "acme".into(),
        count: 3,
        tags: vec!["a".into(), "b".into()],
    }
    .perform_async(&client)
    .await
    .expect("push AjRubyKeyword");
    let pos_jid = AjRubyPositional(
        5,
        Opts {
            a: 1,
            b: "x".into(),
        },
    )
    .perform_async(&client)
    .await
    .expect("push AjRubyPositional");
    // set(wait:) and set(queue:) from Rust: `schedule`, then the `reports` queue.
    let time_jid = AjRubyTime(
        "2026-11-25T12:30:15.123456Z".into(),
        "2026-11-25".into(),
        7200,
    )
    .queue("reports")
    .perform_in(&client, Duration::from_secs(1))
    .await
    .expect("push AjRubyTime");
    assert_eq!(redis.zcard("schedule").await, 1, "perform_in schedules");

    let mut sidekiq = SidekiqProcess::start(redis.url(), "active_job.rb", &["default", "reports"]);
    let lines = eventually!(
        within Duration::from_secs(30),
        let lines = {
            sidekiq.assert_running();
            redis.lrange(RUBY_RESULTS).await
        };
        lines.len() == 3,
        "Ruby ActiveJob performs all three; queue:default = {:?}, retry = {:?}\nsidekiq log:\n{}",
        redis.lrange("queue:default").await,
        redis.zrange("retry").await,
        sidekiq.log()
    );
    drop(sidekiq);
    let by_job: BTreeMap<String, Value> = lines
        .iter()
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("a JSON line");
            (v["job"].as_str().unwrap_or("").to_owned(), v)
        })
        .collect();
    let kw = &by_job["AjRubyKeywordJob"];
    assert_eq!(
        kw["value"],
        json!({"name": "acme", "count": 3, "tags": ["a", "b"]})
    );
    assert_eq!(kw["provider_job_id"], kw_jid.as_str(), "{kw}");
    assert_eq!(kw["executions"], 1, "{kw}");
    assert_eq!(kw["locale"], "en", "{kw}");
    assert_eq!(kw["queue_name"], "default", "{kw}");
    assert_eq!(kw["job_id"].as_str().map(str::len), Some(36), "{kw}");
    let pos = &by_job["AjRubyPositionalJob"];
    assert_eq!(pos["value"]["id"], 5, "{pos}");
    assert_eq!(pos["value"]["opts_keys"], json!([":a", ":b"]), "{pos}");
    assert_eq!(pos["value"]["opts"], json!({"a": 1, "b": "x"}), "{pos}");
    assert_eq!(pos["provider_job_id"], pos_jid.as_str(), "{pos}");
    let time = &by_job["AjRubyTimeJob"];
    assert_eq!(time["value"]["at"], "2026-11-25T12:30:15.123456Z", "{time}");
    assert_eq!(time["value"]["on"], "2026-11-25", "{time}");
    assert_eq!(time["value"]["every"], "7200 seconds", "{time}");
    assert!(
        time["value"]["late_s"].as_f64().unwrap() >= 0.9,
        "ran after its delay: {time}"
    );
    assert_eq!(time["queue_name"], "reports", "{time}");
    assert_eq!(time["provider_job_id"], time_jid.as_str(), "{time}");
}
