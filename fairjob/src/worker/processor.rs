//! Running one fetched job, as named steps: parse → start → execute (decode
//! and look up its type, pass its gates: its rate limiter and its
//! concurrency slot, or park (`exit.rs`), the user's server middleware around
//! `perform` within its timeout) → report → an [`Outcome`] (pure, `retry.rs`)
//! → exit (`exit.rs`: the one write of ack / retry / dead). A job leaves its
//! worker's in-progress record exactly once, and always in `exit.rs`. Panics
//! are failures, not dead workers; a payload that is not a job goes to `dead`
//! with its bytes.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::exit::{self, Exit};
use super::middleware::{ServerMiddleware, ServerNext};
use super::retry::{self, Outcome};
use super::{Running, Shared};
use crate::broker::{Holds, Reserved, SlotHold, Token, UniqueHold};
use crate::error::JobError;
#[cfg(feature = "testing")]
use crate::job::Registry;
use crate::job::{JobContext, JobParts, Prepared};
use crate::metrics;
use crate::wire::{Payload, UniqueUntil, malformed_entry};

/// Processes one fetched job to its end: its in-progress entry is gone, or its
/// removal was fenced, or it was parked, or shutdown gave up on Redis.
///
/// `permit` is the job's place in the worker's concurrency. For a job of a
/// plain queue without a concurrency slot it is given back when `perform` has
/// returned, before the job's end is written, so that the fetch loop reserves
/// the next job while this one's ack is on its way (the in-progress record
/// may then hold a few more jobs than the concurrency for a round trip). A
/// job of a tenant-sharded queue, or one holding a slot, keeps it until the
/// write that ends it has released what Redis counts for it.
pub(crate) async fn process(shared: Arc<Shared>, reserved: Reserved, permit: Permit) {
    let Reserved { token, raw } = reserved;
    let Some(token) = Token::parse(&token) else {
        tracing::error!(token, "fetch returned a token fairjob cannot read");
        return;
    };
    if let Some(t) = &token.tenant {
        // The shard's per-minute dispatch counts, written with the heartbeat.
        shared
            .waits
            .lock()
            .expect("waits lock")
            .dispatched(&token.queue, t);
    }
    // The bytes move into the payload (no copy); a payload that is not a
    // job gives them back for its burial.
    let payload = match parse(&shared, raw) {
        Ok(payload) => payload,
        Err((reason, raw)) => {
            drop(permit);
            bury_malformed(&shared, &token, &raw, &reason).await;
            return;
        }
    };
    // Cancelled at shutdown (the worker's token) or when this run times out.
    let cancel = shared.job_cancel.child_token();
    let sharded = token.is_sharded();
    let cx = JobContext::new(JobParts {
        payload,
        token,
        cancel: cancel.clone(),
        stopping: shared.control.stop_token(),
        client: shared.client.clone(),
    });
    let span = span(&cx);
    crate::otel::on_perform(
        &span,
        shared.client.peer(),
        cx.queue(),
        sharded,
        cx.payload(),
        shared.config.propagation,
    );
    run(&shared, cx, cancel, permit).instrument(span).await;
}

/// The job's payload, or why it is not one (too large, or not a job) with
/// its bytes.
fn parse(shared: &Shared, raw: Vec<u8>) -> Result<Payload, (String, Vec<u8>)> {
    let max = shared.config.max_payload_bytes;
    if raw.len() > max {
        let reason = format!(
            "payload is {} bytes, above the worker's maximum of {max} bytes",
            raw.len()
        );
        return Err((reason, raw));
    }
    Payload::parse_owned(raw).map_err(|(m, raw)| (m.0, raw))
}

/// The span of the job's run, with its class, jid, queue and tenant (only
/// when it has one). Its fields are named as its OpenTelemetry attributes
/// (`fairjob.tenant`, the integer `fairjob.attempt`, `fairjob.outcome`), so
/// an exported span carries each once.
fn span(cx: &JobContext) -> tracing::Span {
    let span = tracing::info_span!(
        "fairjob.perform",
        job.class = cx.class(),
        job.jid = cx.jid(),
        job.queue = cx.queue(),
        fairjob.tenant = tracing::field::Empty,
        fairjob.attempt = tracing::field::Empty,
        fairjob.outcome = tracing::field::Empty,
        elapsed_ms = tracing::field::Empty,
        otel.name = tracing::field::Empty,
        otel.kind = tracing::field::Empty,
    );
    if let Some(tenant) = cx.tenant() {
        span.record("fairjob.tenant", tenant);
    }
    span
}

/// A permit of the worker's concurrency semaphore.
pub(crate) type Permit = tokio::sync::OwnedSemaphorePermit;

/// The job's run as named steps: start → execute (resolve, take a slot,
/// perform) → report → outcome → end (the one write, with a kept job's
/// record for PostgreSQL) → record the end.
async fn run(shared: &Shared, cx: JobContext, cancel: CancellationToken, permit: Permit) {
    start(&cx);
    let cancel = &cancel;
    let unique = UniqueHold::of(cx.payload());
    let Some(ran) = execute(shared, &cx, cancel).await else {
        return; // parked in the lock-wait list, or taken back meanwhile
    };
    report(shared, &cx, &ran.result);
    let (exit, label) = if ran.result.as_ref().is_err_and(JobError::is_yield) {
        // A yield: the same payload to the queue's tail, no retry used.
        let reason: &'static str = match ran.result.as_ref().map_err(JobError::message) {
            Err("shutdown") => "shutdown",
            Err("slice") => "slice",
            Err("asked") => "asked",
            Err("fenced") => "fenced",
            _ => "job",
        };
        ::metrics::counter!(metrics::YIELDS_TOTAL, "reason" => reason).increment(1);
        // Its next wait starts now; `enqueued_at` keeps the first enqueue.
        let mut payload = cx.payload().clone();
        payload.set(crate::wire::fields::REQUEUED_AT, crate::wire::now_f64());
        let exit = Exit::Yield(payload.to_json());
        (exit, metrics::Outcome::Yielded)
    } else {
        let outcome = retry::outcome(cx.payload(), &ran.result);
        let label = label(&ran.result, &outcome);
        (outcome.into(), label)
    };
    tracing::Span::current().record("fairjob.outcome", label.as_str());
    crate::otel::on_end(&tracing::Span::current(), ran.result.as_ref().err());
    // A retry or a yield goes on later; an ack or a burial ends the run.
    let ended = matches!(exit, Exit::Ack | Exit::Dead(_));
    let dead = matches!(exit, Exit::Dead(_));
    // A job a relay keeps: its end is recorded by the exit's call.
    let kept = super::relay::kept(cx.payload());
    // A batch member: its end leaves its batch's sets in the exit's call.
    let member = super::batch::member(cx.payload(), Some(&ran.result));
    let member_outcome = member.as_ref().and_then(|m| exit.member_outcome(m));
    let holds = Holds {
        slot: ran.slot.as_ref(),
        unique: unique.as_ref(),
        kept: kept.as_deref(),
        batch: member.as_ref(),
    };
    let label = end(shared, &cx, exit, label, permit, holds).await;
    if let (Some(m), Some(outcome)) = (&member, member_outcome)
        && label != metrics::Outcome::Fenced
    {
        // A Redis Cluster only: on one server the exit wrote it.
        super::batch::run_ended(shared, m, outcome).await;
    }
    if ended {
        super::cron::run_ended(shared, cx.payload()).await;
        if let Some(jid) = kept.filter(|_| label != metrics::Outcome::Fenced) {
            super::relay::hang_if_asked(&jid).await;
            // A Redis Cluster only: on one server the exit recorded it.
            super::relay::run_ended(shared, jid, cx.class(), dead).await;
        }
    }
    record_end(shared, &cx, label, ran.performed);
}

/// What running a job came to: its result, the slot it held, and how long
/// `perform` ran (when it did).
struct Ran {
    result: Result<(), JobError>,
    slot: Option<SlotHold>,
    performed: Option<Duration>,
}

impl Ran {
    /// A job that failed before `perform`.
    fn failed(e: JobError) -> Self {
        Ran {
            result: Err(e),
            slot: None,
            performed: None,
        }
    }
}

/// The job's start, on the span and in the log.
fn start(cx: &JobContext) {
    // An integer attribute: `tracing-opentelemetry` exports a u64 as a string.
    tracing::Span::current().record("fairjob.attempt", i64::from(cx.attempt()));
    tracing::debug!("start");
}

/// Resolves the job's type (an unknown class or bad args is a failure),
/// takes its concurrency slot and performs it. `None` when the job is no
/// longer this run's: parked for a slot, or recovered by another worker.
async fn execute(shared: &Shared, cx: &JobContext, cancel: &CancellationToken) -> Option<Ran> {
    let job = match shared.registry.prepare_class(cx.class(), cx.payload()) {
        Ok(job) => job,
        Err(e) => return Some(Ran::failed(e)),
    };
    let slot = match exit::admit(shared, cx, job.rate.as_ref(), job.slot.as_ref()).await {
        exit::Admission::Go(slot) => slot,
        exit::Admission::Parked => return None,
        exit::Admission::Failed(e) => return Some(Ran::failed(e)),
    };
    Some(perform(shared, job, cx, cancel, slot).await)
}

/// Runs the user's middleware around `perform`, within the job's timeout,
/// with the job in the running set (the heartbeat's work record).
async fn perform(
    shared: &Shared,
    job: Prepared,
    cx: &JobContext,
    cancel: &CancellationToken,
    slot: Option<SlotHold>,
) -> Ran {
    record_wait(shared, cx);
    super::batch::callback_started(cx);
    release_at_start(shared, cx).await;
    let key = &cx.token().raw;
    let running = Running {
        cx: cx.clone(),
        slot,
        iterable: job.is_iterable(),
        started: crate::wire::now_f64(),
    };
    shared
        .running
        .lock()
        .expect("running lock")
        .insert(key.clone(), running);
    let timeout = job.timeout.or(shared.config.job_timeout);
    let run = through_chain(shared.chain.clone(), job, cx.clone());
    let started = Instant::now();
    let result = match timeout {
        None => run.await,
        Some(limit) => within(limit, cancel, run).await,
    };
    let performed = Some(started.elapsed());
    let slot = shared
        .running
        .lock()
        .expect("running lock")
        .remove(key)
        .and_then(|r| r.slot);
    Ran {
        result,
        slot,
        performed,
    }
}

/// Counts the result and logs a failure, with the job's fields on the event
/// itself (the span is off when the filter is warn or above).
fn report(shared: &Shared, cx: &JobContext, result: &Result<(), JobError>) {
    let span = tracing::Span::current();
    span.record("elapsed_ms", cx.elapsed().as_millis() as i64);
    shared.stats.processed.fetch_add(1, Ordering::Relaxed);
    match result {
        Ok(()) => tracing::debug!("done"),
        Err(e) if e.is_yield() => tracing::debug!("yielded"),
        Err(e) => {
            shared.stats.failed.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                job.class = cx.class(),
                job.jid = cx.jid(),
                job.queue = cx.queue(),
                tenant = cx.tenant().unwrap_or(""),
                error_class = e.class(),
                error = e.message(),
                retry_count = cx.payload().retry_count(),
                "job failed"
            );
        }
    }
    if shared.config.wait_stats {
        shared.waits.lock().expect("waits lock").finished(
            &cx.token().queue,
            result.as_ref().is_err_and(|e| !e.is_yield()),
        );
    }
}

/// A unique job with `until = "start"` gives its key up as it starts (a
/// failure to do so leaves the lock to its TTL).
async fn release_at_start(shared: &Shared, cx: &JobContext) {
    let Some(hold) = UniqueHold::of(cx.payload()).filter(|u| u.until == UniqueUntil::Start) else {
        return;
    };
    let broker = shared.client.broker();
    if let Err(e) = broker
        .unique_release(&broker.unique_key(&hold), Some(&hold.jid))
        .await
    {
        tracing::warn!(error = %e, job.jid = %hold.jid, "could not release a unique lock at start; it expires with its TTL");
    }
}

/// Writes the job's end ([`exit::finish`], with what it releases or records:
/// its slot, its unique lock, a kept job's end for its relay) and returns its label for
/// the series. A plain queue's job without a slot gives its permit back
/// first, so the next job starts while this one's end is on its way. A job Redis
/// counts (its tenant's running jobs, a held slot) keeps its permit until
/// the write that ends it has released that count: a fetch in between would
/// see the count still taken and pass over the tenant (floors and caps would
/// be served late).
async fn end(
    shared: &Shared,
    cx: &JobContext,
    exit: Exit,
    label: metrics::Outcome,
    permit: Permit,
    holds: Holds<'_>,
) -> metrics::Outcome {
    let token = cx.token();
    let permit = if holds.slot.is_none() && !token.is_sharded() {
        drop(permit);
        None
    } else {
        Some(permit)
    };
    let fenced = exit::finish(shared, token, exit, holds, permit).await;
    if fenced {
        metrics::Outcome::Fenced
    } else {
        label
    }
}

/// Adds the job's end to this process's per-job series.
fn record_end(
    shared: &Shared,
    cx: &JobContext,
    label: metrics::Outcome,
    performed: Option<Duration>,
) {
    let class = shared.class_label(cx.class());
    shared
        .series
        .lock()
        .expect("series lock")
        .finished(class, cx.queue(), label, performed);
}

/// The series label of a run's result and outcome.
fn label(result: &Result<(), JobError>, outcome: &Outcome) -> metrics::Outcome {
    match (result, outcome) {
        (Ok(()), _) => metrics::Outcome::Success,
        (Err(_), Outcome::Retry(..)) => metrics::Outcome::Retry,
        (Err(_), Outcome::Dead(_)) => metrics::Outcome::Dead,
        (Err(_), Outcome::Ack) => metrics::Outcome::Discarded,
    }
}

/// Counts how long the job waited from its latest enqueue (or requeue by a
/// yield) to this start.
fn record_wait(shared: &Shared, cx: &JobContext) {
    let Some(enqueued) = cx.payload().wait_started() else {
        return;
    };
    let wait = (crate::wire::now_f64() - enqueued).max(0.0);
    let (queue, tenant) = (cx.queue(), cx.tenant());
    shared
        .series
        .lock()
        .expect("series lock")
        .waited(queue, tenant.unwrap_or(""), wait);
    if shared.config.wait_stats {
        shared
            .waits
            .lock()
            .expect("waits lock")
            .started(queue, tenant, (wait * 1000.0) as u64);
    }
}

/// Runs `job` for at most `limit`; past it, cancels the job's token and gives
/// it a grace (a tenth of the limit, between 100 ms and 5 s) to return, then
/// drops it as a `Timeout` failure (retried like any failure).
async fn within(
    limit: Duration,
    cancel: &CancellationToken,
    job: impl std::future::Future<Output = Result<(), JobError>>,
) -> Result<(), JobError> {
    tokio::pin!(job);
    if let Ok(result) = tokio::time::timeout(limit, &mut job).await {
        return result;
    }
    cancel.cancel();
    let grace = (limit / 10).clamp(Duration::from_millis(100), Duration::from_secs(5));
    tracing::warn!(timeout = ?limit, ?grace, "job ran past its timeout: cancelled");
    match tokio::time::timeout(grace, &mut job).await {
        Ok(Ok(())) => Err(JobError::retry(format!(
            "ran past its timeout of {limit:?} and stopped when cancelled"
        ))
        .with_class("Timeout")),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(JobError::retry(format!(
            "ran past its timeout of {limit:?} and did not stop within {grace:?} of being cancelled"
        ))
        .with_class("Timeout")),
    }
}

/// Runs a decoded job through the server middleware chain to its `perform`;
/// a panic is a failure like any other.
pub(crate) async fn through_chain(
    chain: Arc<[Arc<dyn ServerMiddleware>]>,
    job: Prepared,
    cx: JobContext,
) -> Result<(), JobError> {
    AssertUnwindSafe(ServerNext::new(chain, job).run(cx))
        .catch_unwind()
        .await
        .unwrap_or_else(|panic| Err(panicked(panic)))
}

/// Performs one job outside a worker, for fairjob's testing mode: decode it
/// with `registry`, run the server chain and `perform` (no slot is taken:
/// slot limits are not simulated), and say what Sidekiq's retry rules make of
/// the result. Nothing is written; the caller records the outcome.
#[cfg(feature = "testing")]
pub(crate) async fn perform_detached(
    registry: &Registry,
    chain: Arc<[Arc<dyn ServerMiddleware>]>,
    cx: JobContext,
) -> (Result<(), JobError>, Outcome) {
    let span = tracing::info_span!(
        "fairjob.perform",
        job.class = %cx.class(),
        job.jid = %cx.jid(),
        job.queue = %cx.queue(),
        fairjob.tenant = cx.tenant(),
        fairjob.attempt = i64::from(cx.attempt()),
        fairjob.outcome = tracing::field::Empty,
    );
    async move {
        let result = match registry.prepare(cx.payload()) {
            Ok(job) => through_chain(chain, job, cx.clone()).await,
            Err(e) => Err(e),
        };
        let outcome = retry::outcome(cx.payload(), &result);
        let label = match (&result, &outcome) {
            (Ok(()), _) => "ok",
            (Err(_), Outcome::Retry(..)) => "retry",
            (Err(_), Outcome::Dead(_)) => "dead",
            (Err(_), Outcome::Ack) => "dropped",
        };
        tracing::Span::current().record("fairjob.outcome", label);
        (result, outcome)
    }
    .instrument(span)
    .await
}

/// A panic's message as a job failure.
fn panicked(panic: Box<dyn std::any::Any + Send>) -> JobError {
    let msg = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic".to_owned());
    JobError::retry(format!("job panicked: {msg}")).with_class("Panic")
}

async fn bury_malformed(shared: &Shared, token: &Token, raw: &[u8], reason: &str) {
    tracing::error!(job.queue = %token.queue, reason, "malformed payload moved to dead");
    shared.stats.failed.fetch_add(1, Ordering::Relaxed);
    let entry = malformed_entry(raw, &token.queue, reason);
    // Not a job: whether a relay kept it cannot be read.
    let label = if exit::finish(shared, token, Exit::Dead(entry), Holds::default(), None).await {
        metrics::Outcome::Fenced
    } else {
        metrics::Outcome::Dead
    };
    shared.series.lock().expect("series lock").finished(
        metrics::UNKNOWN_CLASS,
        &token.queue,
        label,
        None,
    );
}
