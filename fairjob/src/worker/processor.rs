//! Running one fetched job: parse, look up its type, run the server chain around
//! `perform`, then leave the in-progress record exactly once: ack, retry with
//! Sidekiq's backoff, or `dead`. Panics are failures, not dead workers.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use rand::Rng;
use tracing::Instrument;

use super::context::{Inner, JobContext};
use super::middleware::{ServerMiddleware, ServerNext, Terminal};
use super::{Shared, backoff_sleep};
use crate::broker::{Finish, SlotHold, Token};
use crate::error::{Error, JobError, JobErrorKind};
use crate::job::{Perform, Registry};
use crate::limit::Acquired;
use crate::payload::{self, Payload};

/// How a registered type runs a job.
pub(crate) type RunFn = fn(JobContext) -> BoxFuture<'static, Result<(), JobError>>;

/// Decodes `T` from the payload's args and performs it.
pub(crate) fn run_job<T: Perform>(cx: JobContext) -> BoxFuture<'static, Result<(), JobError>> {
    Box::pin(async move {
        let job = T::from_args(cx.payload().args()).map_err(|e| match e {
            Error::Decode { reason, .. } => JobError::retry(reason).with_class("ArgumentError"),
            other => JobError::retry(other).with_class("ArgumentError"),
        })?;
        if let (Some(limit), Some(key)) = (T::OPTIONS.concurrency, job.concurrency_key()) {
            let full = crate::limit::full_key(T::CLASS, &limit, &key);
            let inner = &cx.inner;
            match crate::limit::acquire(
                inner.client.broker(),
                &inner.identity,
                &inner.token,
                &inner.payload,
                &full,
                limit.limit,
            )
            .await
            {
                Ok(Acquired::Slot(hold)) => *inner.slot.lock().expect("slot lock") = Some(hold),
                Ok(Acquired::Parked) | Ok(Acquired::Lost) => {
                    tracing::debug!(key = %full, "no free slot: parked in the lock-wait list");
                    inner
                        .parked
                        .store(true, std::sync::atomic::Ordering::Relaxed);
                    return Ok(());
                }
                Err(e) => {
                    return Err(
                        JobError::retry(format!("cannot take a slot of `{full}`: {e}"))
                            .with_class("SlotError"),
                    );
                }
            }
        }
        job.perform(&cx).await
    })
}

/// The end of the server chain, built once per worker: the registered type's
/// `perform` (a panic is a failure), or an `UnknownJobClass` failure.
pub(crate) fn terminal(registry: &Registry) -> Terminal {
    let registry = registry.clone();
    Arc::new(
        move |cx: JobContext| -> BoxFuture<'static, Result<(), JobError>> {
            match registry.get(cx.class()).map(|r| r.run) {
                Some(run) => Box::pin(async move {
                    match AssertUnwindSafe(run(cx)).catch_unwind().await {
                        Ok(result) => result,
                        Err(panic) => {
                            let msg = panic
                                .downcast_ref::<&str>()
                                .map(|s| (*s).to_owned())
                                .or_else(|| panic.downcast_ref::<String>().cloned())
                                .unwrap_or_else(|| "panic".to_owned());
                            Err(JobError::retry(format!("job panicked: {msg}")).with_class("Panic"))
                        }
                    }
                }),
                None => {
                    let class = cx.class().to_owned();
                    Box::pin(async move {
                        Err(JobError::retry(format!(
                            "no job type is registered for class `{class}` in this worker \
                         (Ruby-only and Rust-only classes need their own queues)"
                        ))
                        .with_class("UnknownJobClass"))
                    })
                }
            }
        },
    )
}

/// A job as fetched: where it came from and its bytes.
#[derive(Debug)]
pub(crate) struct Fetched {
    pub token: Token,
    pub raw: Vec<u8>,
}

/// Processes one fetched job to its end (the in-progress entry is gone, or its
/// removal was fenced, or shutdown gave up on Redis).
pub(crate) async fn process(shared: Arc<Shared>, fetched: Fetched) {
    let Fetched { token, raw } = fetched;
    if raw.len() > shared.config.max_payload_bytes {
        let reason = format!(
            "payload is {} bytes, above the worker's maximum of {} bytes",
            raw.len(),
            shared.config.max_payload_bytes
        );
        bury_malformed(&shared, &token, &raw, &reason).await;
        return;
    }
    let payload = match Payload::parse_slice(&raw) {
        Ok(p) => p,
        Err(m) => {
            bury_malformed(&shared, &token, &raw, &m.0).await;
            return;
        }
    };
    drop(raw);
    let class = payload.class();
    let cx = JobContext {
        inner: Arc::new(Inner {
            class: class.clone(),
            jid: payload.jid(),
            queue: token.queue.clone(),
            tenant: payload.tenant(),
            payload,
            token,
            cancel: shared.job_cancel.clone(),
            client: shared.client.clone(),
            started: Instant::now(),
            identity: shared.identity.clone(),
            slot: std::sync::Mutex::new(None),
            parked: std::sync::atomic::AtomicBool::new(false),
        }),
    };
    let span = tracing::info_span!(
        "fairjob.perform",
        job.class = %class,
        job.jid = %cx.jid(),
        job.queue = %cx.queue(),
        tenant = cx.tenant().unwrap_or(""),
        attempt = cx.attempt(),
        outcome = tracing::field::Empty,
        elapsed_ms = tracing::field::Empty,
    );
    shared
        .running
        .lock()
        .expect("running lock")
        .insert(cx.token().raw.clone(), cx.clone());
    let _ = ServerNext::new(shared.chain.clone(), shared.terminal.clone())
        .run(cx.clone())
        .instrument(span)
        .await;
    shared
        .running
        .lock()
        .expect("running lock")
        .remove(&cx.token().raw);
}

/// The outermost built-in link: the tracing span's outcome fields.
pub(crate) struct TraceLink;

impl ServerMiddleware for TraceLink {
    fn call(&self, cx: JobContext, next: ServerNext) -> BoxFuture<'static, Result<(), JobError>> {
        Box::pin(async move {
            tracing::debug!("start");
            let started = cx.inner.started;
            let span_cx = cx.clone();
            let result = next.run(cx).await;
            let span = tracing::Span::current();
            span.record("elapsed_ms", started.elapsed().as_millis() as u64);
            match &result {
                Ok(()) if cx_parked(&span_cx) => {
                    span.record("outcome", "parked");
                }
                Ok(()) => {
                    span.record("outcome", "ok");
                    tracing::debug!("done");
                }
                Err(e) => {
                    span.record("outcome", "failed");
                    tracing::warn!(error_class = e.class(), error = e.message(), "job failed");
                }
            }
            result
        })
    }
}

fn cx_parked(cx: &JobContext) -> bool {
    cx.inner.parked.load(std::sync::atomic::Ordering::Relaxed)
}

/// The built-in link that ends the job's stay in progress: ack on success,
/// retry or `dead` on failure (Sidekiq's retry semantics).
pub(crate) struct FinishLink(pub(crate) std::sync::Weak<Shared>);

impl ServerMiddleware for FinishLink {
    fn call(&self, cx: JobContext, next: ServerNext) -> BoxFuture<'static, Result<(), JobError>> {
        let shared = self.0.upgrade();
        Box::pin(async move {
            let result = next.run(cx.clone()).await;
            // Jobs run only while their worker's state is alive.
            let Some(shared) = shared else { return result };
            if cx_parked(&cx) {
                // Parked in a lock-wait list: it already left the in-progress record.
                return result;
            }
            shared
                .stats
                .processed
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let outcome = match &result {
                Ok(()) => Outcome::Ack,
                Err(e) => {
                    shared
                        .stats
                        .failed
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    failure(cx.payload(), e)
                }
            };
            let slot = cx.inner.slot.lock().expect("slot lock").take();
            finish(&shared, cx.token(), outcome, slot.as_ref()).await;
            result
        })
    }
}

/// What to do with a job after it ran.
#[derive(Debug)]
pub(crate) enum Outcome {
    Ack,
    Retry(String, Duration),
    Dead(String),
}

/// Sidekiq's retry handling of a failure: the edited payload and where it goes.
pub(crate) fn failure(original: &Payload, e: &JobError) -> Outcome {
    let mut p = original.clone();
    let now = payload::now_f64();
    let count = match p.retry_count() {
        Some(c) => {
            p.set("retried_at", now);
            c + 1
        }
        None => {
            p.set("failed_at", now);
            0
        }
    };
    p.set("retry_count", count);
    p.set("error_class", e.class());
    let mut message = e.message().to_owned();
    if message.len() > 10_000 {
        let mut cut = 10_000;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
    }
    p.set("error_message", message);
    if let Some(q) = p.get_str("retry_queue") {
        p.set("queue", q);
    }
    if p.retry_disabled() {
        // Sidekiq: `retry: false` fails once and is not kept in `dead`.
        return Outcome::Ack;
    }
    let dead_allowed = p.get::<bool>("dead") != Some(false);
    if e.is_discard() || count >= p.max_retries() {
        return if dead_allowed {
            Outcome::Dead(p.to_json())
        } else {
            Outcome::Ack
        };
    }
    let delay = match e.kind() {
        JobErrorKind::RetryIn(d) => d,
        _ => backoff(count),
    };
    Outcome::Retry(p.to_json(), delay)
}

/// Sidekiq 6/7's delay before retry `count` (0-based): `count^4 + 15 + rand(10) * (count + 1)` seconds.
pub fn backoff(count: u32) -> Duration {
    let c = count as u64;
    let jitter = rand::rng().random_range(0..10u64) * (c + 1);
    Duration::from_secs(
        c.saturating_pow(4)
            .saturating_add(15)
            .saturating_add(jitter),
    )
}

/// Leaves the in-progress record, retrying Redis errors with backoff until done
/// or the worker stops (then the entry stays and the reaper recovers it later).
pub(crate) async fn finish(
    shared: &Shared,
    token: &Token,
    outcome: Outcome,
    slot: Option<&SlotHold>,
) {
    let mut attempt = 0u32;
    loop {
        let action = match &outcome {
            Outcome::Ack => Finish::Ack,
            Outcome::Retry(p, d) => Finish::Retry {
                payload: p,
                delay: *d,
            },
            Outcome::Dead(p) => Finish::Dead { payload: p },
        };
        match shared
            .client
            .broker()
            .finish(
                &shared.identity,
                token,
                action,
                shared.client.clock_offset(),
                slot,
            )
            .await
        {
            Ok(true) => return,
            Ok(false) => {
                tracing::warn!(token = %token.raw, "stale completion fenced: the job was recovered from this worker after its lease expired");
                return;
            }
            Err(e) => {
                attempt += 1;
                shared.redis_trouble("finish", &e);
                if shared.abandon.is_cancelled() {
                    return;
                }
                tokio::select! {
                    _ = backoff_sleep(attempt) => {}
                    _ = shared.abandon.cancelled() => return,
                }
            }
        }
    }
}

async fn bury_malformed(shared: &Shared, token: &Token, raw: &[u8], reason: &str) {
    tracing::error!(queue = %token.queue, reason, "malformed payload moved to dead");
    shared
        .stats
        .failed
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let entry = payload::malformed_entry(raw, &token.queue, reason);
    finish(shared, token, Outcome::Dead(entry), None).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(extra: &str) -> Payload {
        Payload::parse(
            format!(r#"{{"class":"A","args":[],"jid":"j","queue":"q"{extra}}}"#).into_bytes(),
        )
        .unwrap()
    }

    #[test]
    fn first_failure_is_retry_count_zero_with_sidekiq_backoff() {
        match failure(&p(r#","retry":true"#), &JobError::retry("boom")) {
            Outcome::Retry(json, delay) => {
                let out = Payload::parse(json.into_bytes()).unwrap();
                assert_eq!(out.retry_count(), Some(0));
                assert!(out.has("failed_at"));
                assert_eq!(out.get_str("error_message").as_deref(), Some("boom"));
                assert!((15..=24).contains(&delay.as_secs()), "{delay:?}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn exhausted_goes_dead_and_retry_false_is_dropped() {
        assert!(matches!(
            failure(&p(r#","retry":2,"retry_count":1"#), &JobError::retry("x")),
            Outcome::Dead(_)
        ));
        assert!(matches!(
            failure(&p(r#","retry":false"#), &JobError::retry("x")),
            Outcome::Ack
        ));
        assert!(matches!(
            failure(&p(r#","retry":true"#), &JobError::discard("x")),
            Outcome::Dead(_)
        ));
        assert!(matches!(
            failure(&p(r#","retry":0"#), &JobError::retry("x")),
            Outcome::Dead(_)
        ));
    }

    #[test]
    fn backoff_matches_sidekiq_6_and_7() {
        for count in [0u32, 1, 5, 24] {
            let d = backoff(count).as_secs();
            let base = (count as u64).pow(4) + 15;
            assert!(
                d >= base && d <= base + 9 * (count as u64 + 1),
                "{count}: {d}"
            );
        }
    }
}
