//! OpenTelemetry across the queue (cargo feature `otel`; without it every
//! function here does nothing). On enqueue, the `fairjob.enqueue` span is a
//! producer span `send <queue>` and its W3C context is written into the
//! payload (`traceparent`, `tracestate`: the fields the Ruby Sidekiq
//! instrumentation writes and reads); on perform, the `fairjob.perform` span
//! is a consumer span `process <queue>` continuing that context per
//! [`Propagation`]. Attributes follow the OpenTelemetry messaging semantic
//! conventions (`messaging.system` = `sidekiq`, queue as destination, jid as
//! message id) plus `fairjob.*` (tenant, declared queue, attempt, wait,
//! outcome). A malformed `traceparent` is no context: the job starts a new
//! trace and runs as usual.
//!
//! Only the OpenTelemetry API is used (through `tracing-opentelemetry`): the
//! application installs its own tracer provider and exporter.

use tracing::Span;

use crate::wire::{Payload, Propagation};

/// Names the enqueue span (`send <queue>`, producer); call it on a span not
/// yet entered.
pub(crate) fn enqueue_span(span: &Span, queue: &str) {
    imp::enqueue_span(span, queue)
}

/// Sets the enqueue span's attributes and writes its context into the
/// payload, after the client middleware and before the push.
pub(crate) fn on_enqueue(span: &Span, payload: &mut Payload) {
    imp::on_enqueue(span, payload)
}

/// The queue the job was pushed or scheduled to (the one a reroute chose),
/// on the enqueue span.
pub(crate) fn on_pushed(span: &Span, queue: &str) {
    imp::on_pushed(span, queue)
}

/// Names the perform span (`process <queue>`, consumer), continues the
/// payload's context per `propagation`, and sets its attributes. Call it on a
/// span not yet entered.
pub(crate) fn on_perform(span: &Span, queue: &str, payload: &Payload, propagation: Propagation) {
    imp::on_perform(span, queue, payload, propagation)
}

/// The perform span's end: its attempt, outcome and, on failure, an error status.
pub(crate) fn on_end(span: &Span, attempt: u32, outcome: &str, error: Option<&str>) {
    imp::on_end(span, attempt, outcome, error)
}

#[cfg(not(feature = "otel"))]
mod imp {
    use super::*;

    pub(super) fn enqueue_span(_: &Span, _: &str) {}
    pub(super) fn on_enqueue(_: &Span, _: &mut Payload) {}
    pub(super) fn on_pushed(_: &Span, _: &str) {}
    pub(super) fn on_perform(_: &Span, _: &str, _: &Payload, _: Propagation) {}
    pub(super) fn on_end(_: &Span, _: u32, _: &str, _: Option<&str>) {}
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

    fn common(span: &Span, payload: &Payload, operation: &'static str) {
        span.set_attribute("messaging.system", SYSTEM);
        span.set_attribute("messaging.operation.name", operation);
        span.set_attribute("messaging.operation.type", operation);
        span.set_attribute("messaging.message.id", payload.jid());
        span.set_attribute("messaging.sidekiq.job_class", payload.class());
        if let Some(tenant) = payload.tenant() {
            span.set_attribute("fairjob.tenant", tenant);
        }
    }

    pub(super) fn enqueue_span(span: &Span, queue: &str) {
        span.record("otel.name", format!("send {queue}"));
        span.record("otel.kind", "producer");
    }

    pub(super) fn on_enqueue(span: &Span, payload: &mut Payload) {
        common(span, payload, "send");
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
        queue: &str,
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
        common(span, payload, "process");
        span.set_attribute("messaging.destination.name", queue.to_owned());
        if let Some(declared) = payload.get_str(fields::ORIGINAL_QUEUE) {
            span.set_attribute("fairjob.declared_queue", declared);
        }
        if let Some(at) = payload.wait_started() {
            let waited = ((now_f64() - at) * 1000.0).max(0.0);
            span.set_attribute("fairjob.waited_ms", waited as i64);
        }
    }

    pub(super) fn on_end(span: &Span, attempt: u32, outcome: &str, error: Option<&str>) {
        span.set_attribute("fairjob.attempt", i64::from(attempt));
        span.set_attribute("fairjob.outcome", outcome.to_owned());
        if let Some(message) = error {
            span.set_status(Status::error(message.to_owned()));
        }
    }
}
