//! The reaper: returns the jobs of dead workers to their queues.
//!
//! A worker is dead when its lease key has expired (Redis's clock). At most one
//! reaper pass runs per interval across the fleet (a lock with that expiry).
//! Each recovered job goes back to the front of its queue (or tenant shard) with
//! `interrupted_count` + 1, or to `dead` with reason `interrupted` once it has
//! killed its workers `max_interruptions` times. Each move is fenced by the
//! job's token (finish.lua, or shard_finish.lua for a sharded queue's job, whose
//! record lives in the queue's cluster slot), so concurrent reapers can't
//! recover a job twice.
//!
//! A process whose own lease renewals failed (a Redis-wide stall) recovers
//! nobody until one lease after they succeed again: the rule is in `stall.rs`.

use std::sync::Arc;
use std::time::Instant;

use tokio_util::sync::CancellationToken;

use super::Shared;
use super::exit::{self, Exit};
use crate::broker::{FinishReply, Holds, SlotHold, Token, UniqueHold};
use crate::limit;
use crate::wire::{Payload, fields, malformed_entry, now_f64};

pub(crate) async fn run(shared: Arc<Shared>, stop: CancellationToken) {
    // A first pass at start-up recovers what a crashed predecessor left.
    let mut first = true;
    loop {
        if !first {
            tokio::select! {
                _ = tokio::time::sleep(shared.config.reaper_interval) => {}
                _ = stop.cancelled() => return,
            }
        }
        first = false;
        if let Err(e) = pass(&shared).await {
            shared.redis_trouble("reaper", &e);
        }
    }
}

/// One reaper pass, if this worker gets the lock; returns jobs recovered.
pub(crate) async fn pass(shared: &Shared) -> crate::Result<usize> {
    if !shared
        .control
        .stalls()
        .may_recover(Instant::now(), shared.config.lease)
    {
        // A Redis-wide stall expired every lease: live peers renew within
        // a lease of its end (see `stall.rs`).
        return Ok(0);
    }
    let broker = shared.client.broker();
    match broker
        .try_reaper_lock(&shared.identity, shared.config.reaper_interval)
        .await
    {
        Ok(true) => {}
        Ok(false) => return Ok(0),
        // Out of memory, the lock can't be written; recovery itself is fenced per
        // job (and frees memory), so it runs without the lock.
        Err(crate::Error::OutOfMemory(_)) => {}
        Err(e) => return Err(e),
    }
    let mut recovered = 0;
    for (identity, alive) in broker.workers_alive().await? {
        if !alive && identity != shared.identity {
            recovered += recover(shared, &identity).await?;
        }
    }
    heal(shared).await?;
    super::batch::sweep(shared).await;
    Ok(recovered)
}

/// Repairs bookkeeping that disagrees with the in-progress records (after a
/// Redis lost recent writes): running counts and the dispatch order of every
/// sharded queue, and slot holders whose job is gone; a bounded part per pass.
async fn heal(shared: &Shared) -> crate::Result<()> {
    let broker = shared.client.broker();
    let workers = broker.worker_identities().await?;
    let mut healed = Vec::new();
    for queue in broker.sharded_queues().await? {
        // 0.1 producers still running during a rolling upgrade write its ring.
        broker.migrate_shard_ring(&queue).await?;
        let h = broker.reconcile_shard(&queue, &workers).await?;
        if !h.is_empty() {
            healed.push((queue, h));
        }
    }
    let limits: Vec<(&str, &crate::wire::ConcurrencyLimit)> = shared
        .registry
        .iter()
        .filter_map(|r| r.options.concurrency.as_ref().map(|c| (r.class, c)))
        .collect();
    let default_of = |full: &str| limit::declared_limit(limits.iter().copied(), full).unwrap_or(0);
    let h = broker.reconcile_slots(&default_of).await?;
    if !h.is_empty() {
        healed.push(("(slot limits)".to_owned(), h));
    }
    let again = broker.reconcile_rates().await?;
    if again > 0 {
        tracing::warn!(
            waiters = again,
            "delivered released rate-limit waiters again (their deliverer stopped before finishing)"
        );
    }
    for (queue, h) in healed {
        tracing::warn!(
            job.queue = %queue,
            running_counts = h.running_counts,
            tenants = h.tenants,
            slot_holders = h.slot_holders,
            "repaired bookkeeping that disagreed with the in-progress records (Redis lost recent writes?)"
        );
    }
    Ok(())
}

/// Where a recovered job goes, with its payload: back to the front of its
/// queue, or to `dead` once it has been interrupted too often (or is not a job).
fn interrupted(shared: &Shared, token: &Token, raw: &[u8]) -> Exit {
    let mut p = match Payload::parse_slice(raw) {
        Ok(p) => p,
        Err(m) => return Exit::Dead(malformed_entry(raw, &token.queue, &m.0)),
    };
    let n = p.get::<u32>(fields::INTERRUPTED_COUNT).unwrap_or(0) + 1;
    p.set(fields::INTERRUPTED_COUNT, n);
    if n < shared.config.max_interruptions.max(1) {
        return Exit::Front(p.to_json());
    }
    p.set("error_class", "Interrupted");
    p.set(
        "error_message",
        format!("interrupted {n} times: its worker died or lost its lease while running it"),
    );
    p.set("dead_reason", "interrupted");
    p.set("failed_at", now_f64());
    tracing::error!(job.class = %p.class(), job.jid = %p.jid(), job.queue = %token.queue, n, "job keeps killing its workers: moved to dead (interrupted)");
    Exit::Dead(p.to_json())
}

async fn recover(shared: &Shared, identity: &str) -> crate::Result<usize> {
    let broker = shared.client.broker();
    let entries = broker.inflight_entries(identity).await?;
    let slots = broker.slot_records(identity).await?;
    let mut recovered = 0;
    for (field, raw) in entries {
        let Some(token) = Token::parse(&field) else {
            tracing::warn!(
                identity,
                field,
                "unknown entry in an in-progress record left alone"
            );
            continue;
        };
        let exit = interrupted(shared, &token, &raw);
        let slot = slots
            .get(&token.raw)
            .and_then(|v| SlotHold::from_record(identity, &token.raw, v));
        let parsed = Payload::parse_slice(&raw).ok();
        let unique = parsed.as_ref().and_then(UniqueHold::of);
        // A kept job's burial records its end in the same call.
        let kept = parsed.as_ref().and_then(super::relay::kept);
        // A batch member buried as interrupted leaves its batch's sets.
        let member = parsed.as_ref().and_then(|p| {
            let mut m = super::batch::member(p, None)?;
            m.failure = Some("interrupted: its worker died while running it".to_owned());
            Some(m)
        });
        let holds = Holds {
            slot: slot.as_ref(),
            unique: unique.as_ref(),
            kept: kept.as_deref(),
            batch: member.as_ref(),
        };
        let done = exit::recover(shared, identity, &token, &exit, holds).await?;
        if done == FinishReply::Done
            && let Some(m) = &member
            && let Some(outcome) = exit.member_outcome(m)
        {
            super::batch::run_ended(shared, m, outcome).await;
        }
        if done == FinishReply::Done {
            if let Exit::Dead(payload) = &exit
                && let Ok(p) = Payload::parse_slice(payload.as_bytes())
            {
                // A periodic job gone to dead frees its schedule (overlap = skip).
                super::cron::run_ended(shared, &p).await;
                if let Some(jid) = super::relay::kept(&p) {
                    super::relay::run_ended(shared, jid, &p.class(), true).await;
                }
            }
            recovered += 1;
            ::metrics::counter!(crate::metrics::RECOVERED_TOTAL).increment(1);
            tracing::warn!(dead_worker = identity, job.queue = %token.queue, "recovered a job from a dead worker");
        }
    }
    broker.count("recovered", recovered as u64).await?;
    if broker.in_progress(identity).await? == 0 {
        broker.forget_worker(identity, false).await?;
    }
    Ok(recovered)
}
