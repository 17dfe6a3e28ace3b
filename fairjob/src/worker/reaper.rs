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

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::Shared;
use std::collections::HashMap;

use crate::broker::{Finish, SlotHold, Token};
use crate::payload::{self, Payload, fields};

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
    let broker = shared.client.broker();
    let keys = broker.keys();
    let got: crate::Result<Option<String>> = broker
        .query(
            redis::cmd("SET")
                .arg(keys.reaper_lock())
                .arg(&shared.identity)
                .arg("NX")
                .arg("PX")
                .arg(shared.config.reaper_interval.as_millis().max(100) as u64),
        )
        .await;
    match got {
        Ok(Some(_)) => {}
        Ok(None) => return Ok(0),
        // Out of memory, the lock can't be written; recovery itself is fenced per
        // job (and frees memory), so it runs without the lock.
        Err(crate::Error::OutOfMemory(_)) => {}
        Err(e) => return Err(e),
    }
    let workers: Vec<String> = broker
        .query(redis::cmd("HKEYS").arg(keys.workers()))
        .await?;
    let others: Vec<String> = workers
        .into_iter()
        .filter(|w| *w != shared.identity)
        .collect();
    if others.is_empty() {
        return Ok(0);
    }
    // Every lease in one round trip.
    let mut pipe = redis::pipe();
    for identity in &others {
        pipe.exists(keys.lease(identity));
    }
    let alive: Vec<bool> = broker.pipe(&pipe).await?;
    let mut recovered = 0;
    for (identity, alive) in others.iter().zip(alive) {
        if !alive {
            recovered += recover(shared, identity).await?;
        }
    }
    Ok(recovered)
}

async fn recover(shared: &Shared, identity: &str) -> crate::Result<usize> {
    let broker = shared.client.broker();
    let keys = broker.keys();
    let mut entries: Vec<(String, Vec<u8>)> = Vec::new();
    for record in broker.inflight_records(identity).await? {
        let found: Vec<(String, Vec<u8>)> = broker.query(redis::cmd("HGETALL").arg(record)).await?;
        entries.extend(found);
    }
    let slots: HashMap<String, String> = broker
        .query(redis::cmd("HGETALL").arg(keys.slots(identity)))
        .await?;
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
        let (action_payload, dead) = match Payload::parse_slice(&raw) {
            Ok(p) => {
                let mut p = p;
                let n = p.get::<u32>(fields::INTERRUPTED_COUNT).unwrap_or(0) + 1;
                p.set(fields::INTERRUPTED_COUNT, n);
                if n >= shared.config.max_interruptions.max(1) {
                    p.set("error_class", "Interrupted");
                    p.set(
                        "error_message",
                        format!("interrupted {n} times: its worker died or lost its lease while running it"),
                    );
                    p.set("dead_reason", "interrupted");
                    p.set("failed_at", payload::now_f64());
                    tracing::error!(job.class = %p.class(), job.jid = %p.jid(), job.queue = %token.queue, n, "job keeps killing its workers: moved to dead (interrupted)");
                    (p.to_json(), true)
                } else {
                    (p.to_json(), false)
                }
            }
            Err(m) => (payload::malformed_entry(&raw, &token.queue, &m.0), true),
        };
        let action = if dead {
            Finish::Dead {
                payload: &action_payload,
            }
        } else {
            Finish::Front {
                payload: &action_payload,
            }
        };
        let slot = slots
            .get(&token.raw)
            .and_then(|v| SlotHold::from_record(identity, &token.raw, v));
        if broker
            .recover(
                identity,
                &token,
                action,
                shared.client.clock_offset(),
                slot.as_ref(),
            )
            .await?
        {
            recovered += 1;
            tracing::warn!(dead_worker = identity, queue = %token.queue, "recovered a job from a dead worker");
        }
    }
    let mut pipe = redis::pipe();
    pipe.incr(keys.stat("recovered"), recovered).ignore();
    broker.pipe::<()>(&pipe).await?;
    let left = broker.in_progress(identity).await?;
    if left == 0 {
        let mut pipe = redis::pipe();
        pipe.del(keys.slots(identity)).ignore();
        pipe.hdel(keys.workers(), identity).ignore();
        pipe.srem(keys.processes(), identity).ignore();
        broker.pipe::<()>(&pipe).await?;
    }
    Ok(recovered)
}
