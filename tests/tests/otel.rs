//! OpenTelemetry across the queue (feature `otel`), recorded by the SDK's
//! in-memory exporter: a request's span → enqueue → perform → a job enqueued
//! by the job is one trace with the right parents, kinds and attributes; a
//! payload carrying a `traceparent` the Ruby instrumentation's way is
//! continued (as a child, or linked); a malformed one starts a new trace and
//! never fails the job.

use std::sync::OnceLock;

use fairjob::prelude::*;
use fairjob::wire::Propagation;
use fairjob::{Payload, Registry};
use fairjob_tests::{Redis, eventually};
use opentelemetry::trace::{SpanId, SpanKind, Status, TraceId, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use serde::{Deserialize, Serialize};
use tracing::Instrument;
use tracing_subscriber::layer::SubscriberExt;

/// The process-wide exporter every test reads (one subscriber per process).
fn exporter() -> &'static InMemorySpanExporter {
    static EXPORTER: OnceLock<InMemorySpanExporter> = OnceLock::new();
    EXPORTER.get_or_init(|| {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let tracer = provider.tracer("fairjob-tests");
        // The provider lives as long as the test process.
        Box::leak(Box::new(provider));
        let subscriber =
            tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(tracer));
        tracing::subscriber::set_global_default(subscriber).expect("one global subscriber");
        exporter
    })
}

fn spans() -> Vec<SpanData> {
    exporter().get_finished_spans().expect("finished spans")
}

fn attr(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.to_string())
}

/// The finished `process` span of the job `jid`, if any.
fn process_span(jid: &str) -> Option<SpanData> {
    spans().into_iter().find(|s| {
        s.span_kind == SpanKind::Consumer && attr(s, "messaging.message.id").as_deref() == Some(jid)
    })
}

/// Enqueues an [`OtelChild`] from inside its run.
#[derive(Serialize, Deserialize, fairjob::Job)]
#[job(class = "OtelParent")]
struct OtelParent(String);

impl Perform for OtelParent {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        OtelChild(self.0)
            .set_tenant("acme")
            .perform_async(cx.client())
            .await
            .map_err(JobError::retry)?;
        Ok(())
    }
}

/// Does nothing.
#[derive(Serialize, Deserialize, fairjob::Job)]
#[job(class = "OtelChild")]
struct OtelChild(String);

impl Perform for OtelChild {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// Holds a slot of `key` (one at a time) for `ms`.
#[derive(Serialize, Deserialize, fairjob::Job)]
#[job(class = "OtelSlotJob", queue = "otel_slots")]
#[concurrency(limit = 1, key = key)]
struct OtelSlotJob {
    key: String,
    ms: u64,
}

impl Perform for OtelSlotJob {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        tokio::time::sleep(std::time::Duration::from_millis(self.ms)).await;
        Ok(())
    }
}

/// One start per second per `key`.
#[derive(Serialize, Deserialize, fairjob::Job)]
#[job(class = "OtelRateJob", queue = "otel_rates")]
#[rate_limit(limit = 1, per = "1s", key = key)]
struct OtelRateJob {
    key: String,
}

impl Perform for OtelRateJob {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// Does nothing, on a tenant-sharded queue.
#[derive(Serialize, Deserialize, fairjob::Job)]
#[job(class = "OtelShardJob", queue = "otel_shards", shard_by_tenant)]
struct OtelShardJob(String);

impl Perform for OtelShardJob {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// Fails its first attempt, to be retried a second later; then succeeds.
#[derive(Serialize, Deserialize, fairjob::Job)]
#[job(class = "OtelFlakyJob")]
struct OtelFlakyJob(String);

impl Perform for OtelFlakyJob {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        if cx.attempt() == 1 {
            return Err(JobError::retry_in(
                std::time::Duration::from_secs(1),
                "the first attempt fails",
            ));
        }
        Ok(())
    }
}

fn registry() -> Registry {
    let mut r = Registry::new();
    r.register::<OtelParent>().unwrap();
    r.register::<OtelChild>().unwrap();
    r.register::<OtelSlotJob>().unwrap();
    r.register::<OtelRateJob>().unwrap();
    r.register::<OtelShardJob>().unwrap();
    r.register::<OtelFlakyJob>().unwrap();
    r
}

async fn worker(redis: &Redis, propagation: Propagation) -> fairjob_tests::RunningWorker {
    let worker = redis
        .worker()
        .queues(fairjob_tests::queues(&[
            "default",
            "otel_slots",
            "otel_rates",
            "otel_shards",
        ]))
        .registry(registry())
        .propagation(propagation)
        .build()
        .await
        .expect("worker builds");
    fairjob_tests::spawn(worker)
}

/// A web handler's span → enqueue → perform → the job's own enqueue →
/// its perform: one trace, each span the child of the one before.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_trace_from_the_request_to_the_jobs_a_job_enqueued() {
    exporter();
    let server = fairjob_tests::redis();
    let redis = Redis::connect(&server.url(), &fairjob_tests::namespace()).await;
    let client = redis.client().await;
    let tag = fairjob::payload::new_jid();
    let request = tracing::info_span!("GET /reports", otel.kind = "server");
    let jid = OtelParent(tag.clone())
        .set_tenant("acme")
        .perform_async(&client)
        .instrument(request.clone())
        .await
        .expect("push");
    drop(request);
    let worker = worker(&redis, Propagation::Child).await;
    let parent = eventually!(
        let found = process_span(&jid); found.is_some(),
        "the parent job's process span is exported"
    )
    .unwrap();
    let all = spans();
    let trace = parent.span_context.trace_id();
    let in_trace: Vec<&SpanData> = all
        .iter()
        .filter(|s| s.span_context.trace_id() == trace)
        .collect();
    let by_id = |id: SpanId| in_trace.iter().find(|s| s.span_context.span_id() == id);
    let web = in_trace
        .iter()
        .find(|s| s.name == "GET /reports")
        .expect("the request span is in the job's trace");
    let send = by_id(parent.parent_span_id).expect("perform's parent is in the trace");
    assert_eq!(send.name, "send default");
    assert_eq!(send.span_kind, SpanKind::Producer);
    assert_eq!(send.parent_span_id, web.span_context.span_id());
    assert_eq!(
        attr(send, "messaging.message.id").as_deref(),
        Some(jid.as_str())
    );
    assert_eq!(attr(send, "fairjob.tenant").as_deref(), Some("acme"));
    // The Redis it talks to and its own identity; no stray `tracing` field.
    assert_eq!(attr(send, "server.address").as_deref(), Some("127.0.0.1"));
    assert_eq!(attr(send, "server.port"), Some(server.port().to_string()));
    assert_eq!(
        attr(send, "messaging.client.id").as_deref(),
        Some(client.id())
    );
    for stray in ["tenant", "attempt", "outcome"] {
        assert_eq!(attr(send, stray), None, "{stray}: {send:?}");
    }
    assert_eq!(
        attr(send, "messaging.destination.name").as_deref(),
        Some("default")
    );
    assert_eq!(parent.name, "process default");
    assert!(parent.parent_span_is_remote);
    for (key, want) in [
        ("messaging.system", "sidekiq"),
        ("messaging.operation.name", "process"),
        ("messaging.operation.type", "process"),
        ("messaging.destination.name", "default"),
        ("messaging.sidekiq.job_class", "OtelParent"),
        ("fairjob.tenant", "acme"),
        ("fairjob.attempt", "1"),
        ("fairjob.outcome", "success"),
    ] {
        assert_eq!(
            attr(&parent, key).as_deref(),
            Some(want),
            "{key}: {parent:?}"
        );
    }
    assert!(attr(&parent, "fairjob.wait_ms").is_some());
    assert_eq!(
        attr(&parent, "fairjob.wait_reason").as_deref(),
        Some("queue")
    );
    // The job's own enqueue, and its perform, continue the same trace.
    let child_send = eventually!(
        let found = spans().into_iter().find(|s| {
            s.span_kind == SpanKind::Producer && s.parent_span_id == parent.span_context.span_id()
        });
        found.is_some(),
        "the job's own enqueue is a child of its process span"
    )
    .unwrap();
    let child_jid = attr(&child_send, "messaging.message.id").expect("jid");
    let child = eventually!(
        let found = process_span(&child_jid); found.is_some(),
        "the child job's process span is exported"
    )
    .unwrap();
    assert_eq!(child.span_context.trace_id(), trace);
    assert_eq!(child.parent_span_id, child_send.span_context.span_id());
    assert_eq!(
        attr(&child, "messaging.sidekiq.job_class").as_deref(),
        Some("OtelChild")
    );
    worker.stop().await;
    // The trace as the exporter recorded it (shown with `--nocapture`).
    let mut trace_spans: Vec<SpanData> = spans()
        .into_iter()
        .filter(|s| s.span_context.trace_id() == trace)
        .collect();
    trace_spans.sort_by_key(|s| s.start_time);
    println!("trace {trace}:");
    for s in &trace_spans {
        println!(
            "  {:<16} {:<9} span {} parent {}{} jid {}",
            s.name,
            format!("{:?}", s.span_kind),
            s.span_context.span_id(),
            s.parent_span_id,
            if s.parent_span_is_remote {
                " (remote)"
            } else {
                ""
            },
            attr(s, "messaging.message.id").unwrap_or_else(|| "-".into()),
        );
    }
}

/// The successful run's `process` span of the job `jid`, if exported yet
/// (a job parked by a limiter, or failed, has other `process` spans).
fn succeeded(jid: &str) -> Option<SpanData> {
    spans().into_iter().find(|s| {
        s.span_kind == SpanKind::Consumer
            && attr(s, "messaging.message.id").as_deref() == Some(jid)
            && attr(s, "fairjob.outcome").as_deref() == Some("success")
    })
}

fn wait_ms(span: &SpanData, key: &str) -> u64 {
    attr(span, key)
        .unwrap_or_else(|| panic!("{key}: {span:?}"))
        .parse()
        .unwrap()
}

/// The perform span says how long the job waited and why: its queue, its
/// tenant's shard, a concurrency slot, a rate limiter, its schedule, a
/// retry's backoff (each the longest part of that job's wait, by
/// construction: a second of it against a fetch's few ms).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_perform_span_says_how_long_the_job_waited_and_why() {
    exporter();
    let server = fairjob_tests::redis();
    let redis = Redis::connect(&server.url(), &fairjob_tests::namespace()).await;
    let client = redis.client().await;
    let tag = fairjob::payload::new_jid();
    let plain = OtelChild(tag.clone()).perform_async(&client).await.unwrap();
    let sharded = OtelShardJob(tag.clone())
        .set_tenant("acme")
        .perform_async(&client)
        .await
        .unwrap();
    let slot_key = format!("slot-{tag}");
    let holder = OtelSlotJob {
        key: slot_key.clone(),
        ms: 1000,
    }
    .perform_async(&client)
    .await
    .unwrap();
    let slot = OtelSlotJob {
        key: slot_key,
        ms: 1000,
    }
    .perform_async(&client)
    .await
    .unwrap();
    let rate_key = format!("rate-{tag}");
    let first = OtelRateJob {
        key: rate_key.clone(),
    }
    .perform_async(&client)
    .await
    .unwrap();
    let rated = OtelRateJob { key: rate_key }
        .perform_async(&client)
        .await
        .unwrap();
    let scheduled = OtelChild(tag.clone())
        .perform_in(&client, std::time::Duration::from_secs(1))
        .await
        .unwrap();
    let retried = OtelFlakyJob(tag).perform_async(&client).await.unwrap();
    let worker = worker(&redis, Propagation::Child).await;
    let mut done = Vec::new();
    for jid in [
        &plain, &sharded, &holder, &slot, &first, &rated, &scheduled, &retried,
    ] {
        done.push(
            eventually!(let found = succeeded(jid); found.is_some(), "{jid} succeeds").unwrap(),
        );
    }
    worker.stop().await;
    let reason = |i: usize| attr(&done[i], "fairjob.wait_reason").unwrap();
    assert_eq!(reason(0), "queue", "{:?}", done[0]);
    assert_eq!(reason(1), "shard", "{:?}", done[1]);
    // Of two jobs of one key, the second to start waited for the first.
    let second = |a: usize, b: usize| {
        if done[a].start_time > done[b].start_time {
            a
        } else {
            b
        }
    };
    let parked = second(2, 3);
    assert_eq!(reason(parked), "slot", "{:?}", done[parked]);
    assert!(wait_ms(&done[parked], "fairjob.wait.slot_ms") > 0);
    let parked = second(4, 5);
    assert_eq!(reason(parked), "rate_limit", "{:?}", done[parked]);
    assert!(wait_ms(&done[parked], "fairjob.wait.rate_limit_ms") > 0);
    assert_eq!(reason(6), "scheduled", "{:?}", done[6]);
    assert!(wait_ms(&done[6], "fairjob.wait.scheduled_ms") >= 900);
    assert!(wait_ms(&done[6], "fairjob.wait_ms") >= 900);
    assert_eq!(reason(7), "retry", "{:?}", done[7]);
    assert!(wait_ms(&done[7], "fairjob.wait.retry_ms") >= 900);
    assert_eq!(attr(&done[7], "fairjob.attempt").as_deref(), Some("2"));
    // A retry's run is a new span in the same trace as its first run.
    let failed = spans()
        .into_iter()
        .find(|s| {
            attr(s, "messaging.message.id").as_deref() == Some(retried.as_str())
                && attr(s, "fairjob.outcome").as_deref() == Some("retry")
        })
        .expect("the failed run's span");
    assert_eq!(
        failed.span_context.trace_id(),
        done[7].span_context.trace_id()
    );
    assert_ne!(
        failed.span_context.span_id(),
        done[7].span_context.span_id()
    );
    assert_eq!(failed.status, Status::error("the first attempt fails"));
}

/// `push_bulk`: one `send` span for the batch, and every job it pushed
/// carries its context, so each job's run continues the request's trace.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn push_bulk_writes_the_trace_context_into_every_job() {
    exporter();
    let server = fairjob_tests::redis();
    let redis = Redis::connect(&server.url(), &fairjob_tests::namespace()).await;
    let client = redis.client().await;
    let tag = fairjob::payload::new_jid();
    let request = tracing::info_span!("POST /imports", otel.kind = "server");
    let jids: Vec<String> = client
        .push_bulk((0..3).map(|i| OtelChild(format!("{tag}-{i}"))))
        .instrument(request.clone())
        .await
        .expect("push_bulk")
        .into_iter()
        .map(|j| j.expect("pushed"))
        .collect();
    drop(request);
    let raw = redis.lrange(redis.keys().queue("default")).await;
    for jid in &jids {
        let entry = raw
            .iter()
            .find(|e| e.contains(jid.as_str()))
            .expect("queued");
        let p = Payload::parse(entry.clone().into_bytes()).unwrap();
        assert!(p.get_str("traceparent").is_some(), "{entry}");
    }
    let worker = worker(&redis, Propagation::Child).await;
    let mut runs = Vec::new();
    for jid in &jids {
        runs.push(eventually!(let found = succeeded(jid); found.is_some(), "{jid} runs").unwrap());
    }
    worker.stop().await;
    let all = spans();
    let web = all
        .iter()
        .find(|s| {
            s.name == "POST /imports"
                && s.span_context.trace_id() == runs[0].span_context.trace_id()
        })
        .expect("the request span");
    let send = all
        .iter()
        .find(|s| s.span_context.span_id() == runs[0].parent_span_id)
        .expect("the bulk send span");
    assert_eq!(send.name, "send default");
    assert_eq!(send.span_kind, SpanKind::Producer);
    assert_eq!(send.parent_span_id, web.span_context.span_id());
    assert_eq!(
        attr(send, "messaging.batch.message_count").as_deref(),
        Some("3")
    );
    for run in &runs {
        assert_eq!(run.parent_span_id, send.span_context.span_id(), "{run:?}");
        assert_eq!(run.span_context.trace_id(), web.span_context.trace_id());
    }
}

/// Pushes a payload as a Ruby producer with
/// `opentelemetry-instrumentation-sidekiq` writes it (a top-level
/// `traceparent`) straight onto `queue:default`; returns its jid.
async fn push_as_ruby(redis: &Redis, traceparent: &str) -> String {
    let jid = fairjob::payload::new_jid();
    let now = fairjob::payload::now_f64();
    let json = format!(
        r#"{{"retry":true,"queue":"default","class":"OtelChild","args":["ruby"],"jid":"{jid}","created_at":{now},"traceparent":"{traceparent}","enqueued_at":{now}}}"#,
    );
    Payload::parse(json.clone().into_bytes()).expect("a payload");
    redis.lpush_raw("default", json).await;
    jid
}

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const SPAN: &str = "00f067aa0ba902b7";

/// A Ruby-written context is continued as a child; a malformed one starts a
/// new trace and the job succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_ruby_context_is_continued_and_a_malformed_one_ignored() {
    exporter();
    let server = fairjob_tests::redis();
    let redis = Redis::connect(&server.url(), &fairjob_tests::namespace()).await;
    let good = push_as_ruby(&redis, &format!("00-{TRACE}-{SPAN}-01")).await;
    let bad = push_as_ruby(&redis, "00-not-a-trace-context").await;
    let worker = worker(&redis, Propagation::Child).await;
    let continued = eventually!(
        let found = process_span(&good); found.is_some(), "the job runs"
    )
    .unwrap();
    assert_eq!(
        continued.span_context.trace_id(),
        TraceId::from_hex(TRACE).unwrap()
    );
    assert_eq!(continued.parent_span_id, SpanId::from_hex(SPAN).unwrap());
    let fresh = eventually!(
        let found = process_span(&bad); found.is_some(), "the job with a malformed context runs"
    )
    .unwrap();
    assert!(fresh.span_context.is_valid());
    assert_ne!(
        fresh.span_context.trace_id(),
        TraceId::from_hex(TRACE).unwrap()
    );
    assert_eq!(fresh.parent_span_id, SpanId::INVALID, "a new trace");
    assert_eq!(attr(&fresh, "fairjob.outcome").as_deref(), Some("success"));
    assert_eq!(fresh.status, Status::Unset);
    worker.stop().await;
    assert_eq!(redis.zcard(redis.key("retry")).await, 0, "nothing failed");
}

/// `propagation = link`: the perform span starts its own trace, linked to
/// the enqueue's context.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn link_starts_a_new_trace_linked_to_the_enqueue() {
    exporter();
    let server = fairjob_tests::redis();
    let redis = Redis::connect(&server.url(), &fairjob_tests::namespace()).await;
    let jid = push_as_ruby(&redis, &format!("00-{TRACE}-{SPAN}-01")).await;
    let worker = worker(&redis, Propagation::Link).await;
    let linked = eventually!(
        let found = process_span(&jid); found.is_some(), "the job runs"
    )
    .unwrap();
    assert_ne!(
        linked.span_context.trace_id(),
        TraceId::from_hex(TRACE).unwrap()
    );
    assert_eq!(linked.parent_span_id, SpanId::INVALID);
    let links: Vec<_> = linked
        .links
        .iter()
        .map(|l| l.span_context.span_id())
        .collect();
    assert_eq!(links, [SpanId::from_hex(SPAN).unwrap()]);
    worker.stop().await;
}
