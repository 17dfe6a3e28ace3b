//! A batch member's end, seen from the worker (the batch's rules:
//! `crate::batch`, `policy::batch`). On one server the member's exit script
//! takes it out of its batch's sets (`Holds::batch`, see `exit.rs`); on a
//! Redis Cluster the batch's keys are in another slot, and [`run_ended`]
//! writes it right after the exit, a second step: a worker killed between
//! the two leaves the member pending and the batch open. The reaper's pass
//! also pushes the members of a committed batch whose committer died before
//! pushing them all ([`sweep`]). A callback's first run is counted
//! ([`callback_started`]).

use std::time::Duration;

use super::Shared;
use crate::broker::MemberEnd;
use crate::error::JobError;
use crate::job::JobContext;
use crate::metrics;
use crate::policy::batch::{Event, Outcome, kid_id};
use crate::wire::{Payload, fields};

/// Batches a sweep looks at per reaper pass.
const SWEEP_BATCHES: usize = 20;

/// Oldest listed batches a reaper pass checks for expiry.
const PRUNE_BATCHES: usize = 100;

/// The batch membership of a job whose run ended with `result` (`None`: the
/// job is in no batch).
///
/// A child batch's `complete` or `success` callback is a member of the
/// parent too, under the child's member id: its end says the child ran
/// (any end of the `complete` callback) or succeeded (a successful end of
/// the `success` callback).
pub(crate) fn member(
    payload: &Payload,
    result: Option<&Result<(), JobError>>,
) -> Option<MemberEnd> {
    let failure = match result {
        Some(Err(e)) if !e.is_yield() => Some(format!("{}: {}", e.class(), e.message())),
        _ => None,
    };
    if let Some(parent) = payload
        .get_str(fields::BATCH_PARENT)
        .filter(|b| !b.is_empty())
    {
        let child = payload.get_str(fields::BATCH_CALLBACK)?;
        let event = Event::parse(&payload.get_str(fields::BATCH_EVENT)?)?;
        return Some(MemberEnd {
            bid: parent,
            jid: kid_id(&child),
            failure,
            child: Some(event),
        });
    }
    let bid = payload.get_str(fields::BID).filter(|b| !b.is_empty())?;
    Some(MemberEnd {
        bid,
        jid: payload.jid(),
        failure,
        child: None,
    })
}

/// Counts a batch callback's run starting ([`metrics::BATCH_CALLBACKS_TOTAL`],
/// by event): only its attempt 1 (no `retry_count`, no interrupted run
/// before), so retries and runs after a crash are not counted again. An
/// event name this version does not know is not a label.
pub(crate) fn callback_started(cx: &JobContext) {
    if cx.attempt() != 1 || cx.payload().get_str(fields::BATCH_CALLBACK).is_none() {
        return;
    }
    if let Some(event) = cx.batch_event() {
        ::metrics::counter!(metrics::BATCH_CALLBACKS_TOTAL, "event" => event.as_str()).increment(1);
    }
}

/// Writes member `m`'s end when its exit could not (a Redis Cluster);
/// retries a Redis error a few times, then gives up with an error in the log.
pub(crate) async fn run_ended(shared: &Shared, m: &MemberEnd, outcome: Outcome) {
    let broker = shared.client.broker();
    if broker.batch_in_script() {
        return; // written by the exit's script
    }
    let failure = m.failure.as_deref().unwrap_or_default();
    for attempt in 0..5u32 {
        match broker
            .batch_end(
                &m.bid,
                &m.jid,
                outcome,
                failure,
                shared.client.clock_offset(),
            )
            .await
        {
            Ok(fired) => {
                // Its callbacks' queues are in other slots: pushed from here.
                if let Err(e) = shared.client.push_due_callbacks(&m.bid, &fired).await {
                    shared.redis_trouble("batch callback", &e);
                    tracing::error!(bid = %m.bid, error = %e, "could not push a batch's callback; it stays due");
                }
                return;
            }
            Err(e) => {
                shared.redis_trouble("batch end", &e);
                if shared.abandon.is_cancelled() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
            }
        }
    }
    tracing::error!(bid = %m.bid, job.jid = %m.jid, "could not record a batch member's end; its batch stays open");
}

/// Pushes what committers that died left staged (see
/// `Client::release_staged_batches`), and drops expired batches among the
/// oldest listed from the batches' listing; a failure is logged.
pub(crate) async fn sweep(shared: &Shared) {
    match shared.client.release_staged_batches(SWEEP_BATCHES).await {
        Ok(0) => {}
        Ok(n) => tracing::warn!(members = n, "pushed batch members their committer left"),
        Err(e) => shared.redis_trouble("batch sweep", &e),
    }
    match shared.client.broker().batches_prune(PRUNE_BATCHES).await {
        Ok(0) => {}
        Ok(n) => tracing::debug!(batches = n, "dropped expired batches from the listing"),
        Err(e) => shared.redis_trouble("batch listing", &e),
    }
}
