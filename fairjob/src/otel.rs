//! OpenTelemetry across the queue (cargo feature `otel`; without it every
//! function here does nothing). On enqueue, the `fairjob.enqueue` span is a
//! producer span `send <queue>` and its W3C context is written into the
//! payload (`traceparent`, `tracestate`: the fields the Ruby Sidekiq
//! instrumentation writes and reads); on perform, the `fairjob.perform` span
//! is a consumer span `process <queue>` continuing that context per
//! [`Propagation`]. Attributes follow the OpenTelemetry messaging semantic
//! conventions (`messaging.system` = `sidekiq`, queue as destination, jid as
//! message id, the client's identity as `messaging.client.id`, the Redis
//! server as `server.address`/`server.port`, a failed run's `error.type`)
//! plus `fairjob.*` (tenant, declared queue, attempt, outcome,
//! and the wait before the run: `fairjob.wait_ms`, `fairjob.wait_reason` —
//! `queue`, `shard`, `slot`, `rate_limit`, `scheduled` or `retry` — and
//! `fairjob.wait.<reason>_ms` per part). A malformed `traceparent` is no context: the job starts a new
//! trace and runs as usual.
//!
//! Only the OpenTelemetry API is used (through `tracing-opentelemetry`): the
//! application installs its own tracer provider and exporter. The spans'
//! `tracing` fields are named as their attributes (`fairjob.tenant`,
//! `fairjob.attempt`, `fairjob.outcome`), so each is exported once; this
//! module sets only what has no `tracing` field.

use tracing::Span;

use crate::error::JobError;
use crate::wire::{Payload, Propagation};

/// Who sends or processes a message: the client's identity
/// (`messaging.client.id`) and the Redis server it talks to
/// (`server.address`, `server.port`). Built by the client, which sits above
/// this module.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(feature = "otel"), allow(dead_code))]
pub(crate) struct Peer<'a> {
    /// The client's identity, `host:pid:random`.
    pub client_id: &'a str,
    /// The Redis server's host and port, if it has them.
    pub server: Option<(&'a str, u16)>,
}

/// Names the enqueue span (`send <queue>`, producer); call it on a span not
/// yet entered.
pub(crate) fn enqueue_span(span: &Span, queue: &str) {
    imp::enqueue_span(span, queue)
}

/// Sets the enqueue span's attributes and writes its context into the
/// payload, after the client middleware and before the push.
pub(crate) fn on_enqueue(span: &Span, peer: Peer<'_>, payload: &mut Payload) {
    imp::on_enqueue(span, peer, payload)
}

/// Names a bulk push's span (`send`, producer: one span for the batch, as
/// the messaging conventions allow); call it on a span not yet entered.
pub(crate) fn bulk_span(span: &Span) {
    imp::bulk_span(span)
}

/// Writes the bulk push span's context into one of its payloads.
pub(crate) fn on_bulk_job(span: &Span, payload: &mut Payload) {
    imp::inject(span, payload)
}

/// The bulk push's end: how many jobs it pushed, and the queue if it was one.
pub(crate) fn on_bulk_end(span: &Span, peer: Peer<'_>, count: usize, queue: Option<&str>) {
    imp::on_bulk_end(span, peer, count, queue)
}

/// The queue the job was pushed or scheduled to (the one a reroute chose),
/// on the enqueue span.
pub(crate) fn on_pushed(span: &Span, queue: &str) {
    imp::on_pushed(span, queue)
}

/// Names the perform span (`process <queue>`, consumer), continues the
/// payload's context per `propagation`, and sets its attributes, with how
/// long the job waited and why ([`crate::wire::wait`]; `sharded`: fetched
/// from a tenant-sharded queue). Call it on a span not yet entered.
pub(crate) fn on_perform(
    span: &Span,
    peer: Peer<'_>,
    queue: &str,
    sharded: bool,
    payload: &Payload,
    propagation: Propagation,
) {
    imp::on_perform(span, peer, queue, sharded, payload, propagation)
}

/// The perform span's end: on failure, an error status and `error.type`
/// (the failure's `error_class`).
pub(crate) fn on_end(span: &Span, error: Option<&JobError>) {
    imp::on_end(span, error)
}

#[cfg(not(feature = "otel"))]
mod imp {
    use super::*;

    pub(super) fn enqueue_span(_: &Span, _: &str) {}
    pub(super) fn on_enqueue(_: &Span, _: Peer<'_>, _: &mut Payload) {}
    pub(super) fn on_pushed(_: &Span, _: &str) {}
    pub(super) fn bulk_span(_: &Span) {}
    pub(super) fn inject(_: &Span, _: &mut Payload) {}
    pub(super) fn on_bulk_end(_: &Span, _: Peer<'_>, _: usize, _: Option<&str>) {}
    pub(super) fn on_perform(_: &Span, _: Peer<'_>, _: &str, _: bool, _: &Payload, _: Propagation) {
    }
    pub(super) fn on_end(_: &Span, _: Option<&JobError>) {}
}

#[cfg(feature = "otel")]
mod imp {
    use opentelemetry::Context;
    use opentelemetry::trace::{
        SpanContext, SpanId, Status, TraceContextExt, TraceFlags, TraceId, TraceState,
    };
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    use super::*;
    use crate::wire::fields;
    use crate::wire::now_f64;
    use crate::wire::trace_context::{TRACEPARENT, TRACESTATE, TraceParent};

    /// `messaging.system`: the wire format is Sidekiq's.
    const SYSTEM: &str = "sidekiq";

    /// What every messaging span carries: the system, the operation, the
    /// client's identity and the Redis server it talks to.
    fn messaging(span: &Span, peer: Peer<'_>, operation: &'static str) {
        span.set_attribute("messaging.system", SYSTEM);
        span.set_attribute("messaging.operation.name", operation);
        span.set_attribute("messaging.operation.type", operation);
        span.set_attribute("messaging.client.id", peer.client_id.to_owned());
        if let Some((host, port)) = peer.server {
            span.set_attribute("server.address", host.to_owned());
            span.set_attribute("server.port", i64::from(port));
        }
    }

    /// A one-job span: the above and the job's id and class (its tenant is
    /// the span's `fairjob.tenant` field).
    fn common(span: &Span, peer: Peer<'_>, payload: &Payload, operation: &'static str) {
        messaging(span, peer, operation);
        span.set_attribute("messaging.message.id", payload.jid());
        span.set_attribute("messaging.sidekiq.job_class", payload.class());
    }

    pub(super) fn enqueue_span(span: &Span, queue: &str) {
        span.record("otel.name", format!("send {queue}"));
        span.record("otel.kind", "producer");
    }

    pub(super) fn on_enqueue(span: &Span, peer: Peer<'_>, payload: &mut Payload) {
        common(span, peer, payload, "send");
        inject(span, payload);
    }

    pub(super) fn bulk_span(span: &Span) {
        span.record("otel.name", "send");
        span.record("otel.kind", "producer");
    }

    pub(super) fn on_bulk_end(span: &Span, peer: Peer<'_>, count: usize, queue: Option<&str>) {
        messaging(span, peer, "send");
        span.set_attribute("messaging.batch.message_count", count as i64);
        if let Some(queue) = queue {
            // The span has started: rename it through its OpenTelemetry span.
            span.context().span().update_name(format!("send {queue}"));
            span.set_attribute("messaging.destination.name", queue.to_owned());
        }
    }

    /// Writes `span`'s context into the payload (W3C `traceparent`, `tracestate`).
    pub(super) fn inject(span: &Span, payload: &mut Payload) {
        let cx = span.context();
        let sc = cx.span().span_context().clone();
        if !sc.is_valid() {
            return;
        }
        let parent = TraceParent {
            trace_id: sc.trace_id().to_bytes(),
            span_id: sc.span_id().to_bytes(),
            flags: sc.trace_flags().to_u8(),
        };
        payload.set(TRACEPARENT, parent.to_header());
        let state = sc.trace_state().header();
        if state.is_empty() {
            payload.remove(TRACESTATE);
        } else {
            payload.set(TRACESTATE, state);
        }
    }

    pub(super) fn on_pushed(span: &Span, queue: &str) {
        span.set_attribute("messaging.destination.name", queue.to_owned());
    }

    /// The context the payload carries, if it is valid.
    fn remote(payload: &Payload) -> Option<SpanContext> {
        let parent = TraceParent::parse(&payload.get_str(TRACEPARENT)?)?;
        let state = payload
            .get_str(TRACESTATE)
            .and_then(|s| s.parse::<TraceState>().ok())
            .unwrap_or_default();
        Some(SpanContext::new(
            TraceId::from_bytes(parent.trace_id),
            SpanId::from_bytes(parent.span_id),
            TraceFlags::new(parent.flags),
            true,
            state,
        ))
    }

    pub(super) fn on_perform(
        span: &Span,
        peer: Peer<'_>,
        queue: &str,
        sharded: bool,
        payload: &Payload,
        propagation: Propagation,
    ) {
        span.record("otel.name", format!("process {queue}"));
        span.record("otel.kind", "consumer");
        // A job's trace never continues the worker's own spans.
        let _ = match (propagation, remote(payload)) {
            (Propagation::Child, Some(sc)) => {
                span.set_parent(Context::new().with_remote_span_context(sc))
            }
            (Propagation::Link, Some(sc)) => {
                let set = span.set_parent(Context::new());
                span.add_link(sc);
                set
            }
            _ => span.set_parent(Context::new()),
        };
        common(span, peer, payload, "process");
        span.set_attribute("messaging.destination.name", queue.to_owned());
        if let Some(declared) = payload.get_str(fields::ORIGINAL_QUEUE) {
            span.set_attribute("fairjob.declared_queue", declared);
        }
        if let Some(w) = crate::wire::wait::wait(payload, sharded, now_f64()) {
            span.set_attribute("fairjob.wait_ms", w.total_ms as i64);
            span.set_attribute("fairjob.wait_reason", w.reason.as_str());
            for (reason, ms) in w.parts {
                span.set_attribute(format!("fairjob.wait.{}_ms", reason.as_str()), ms as i64);
            }
        }
    }

    pub(super) fn on_end(span: &Span, error: Option<&JobError>) {
        if let Some(e) = error {
            span.set_attribute("error.type", e.class().to_owned());
            span.set_status(Status::error(e.message().to_owned()));
        }
    }
}
