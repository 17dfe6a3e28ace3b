//! The scheduler: promotes due `schedule` and `retry` entries through the
//! client middleware without losing or duplicating one.
//!
//! `promote.lua` claims due entries of `schedule`, then `retry`, into that set's
//! promoting record under a lease; each is re-pushed by `push.lua`, which
//! removes it from the record in the same step (for a tenant-sharded queue,
//! whose keys live in another cluster slot, right after the push), so a poller
//! that dies between the two leaves the entry claimed, and it is claimed again
//! when the lease expires. Several workers may poll at once.

use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio_util::sync::CancellationToken;

use super::{Shared, backoff_sleep};
use crate::broker::{Due, Src};
use crate::wire::{Payload, malformed_entry};

const BATCH: usize = 100;
const PROMOTE_LEASE: Duration = Duration::from_secs(30);

pub(crate) async fn run(shared: Arc<Shared>, stop: CancellationToken) {
    let avg = shared.config.scheduled_poll_interval;
    let mut failures = 0;
    loop {
        let wait = avg.mul_f64(rand::rng().random_range(0.5..1.5));
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.cancelled() => return,
        }
        if shared.control.is_quiet() {
            continue;
        }
        match promote_due(&shared).await {
            Ok(_) => failures = 0,
            Err(e) => {
                failures += 1;
                shared.redis_trouble("scheduler", &e);
                backoff_sleep(failures).await;
            }
        }
    }
}

/// Promotes every due entry; returns how many were pushed.
pub(crate) async fn promote_due(shared: &Shared) -> crate::Result<usize> {
    let mut pushed = 0;
    for set in [Due::Scheduled, Due::Retry] {
        pushed += promote_from(shared, set).await?;
    }
    Ok(pushed)
}

async fn promote_from(shared: &Shared, set: Due) -> crate::Result<usize> {
    let client = &shared.client;
    let broker = client.broker();
    let record = broker.promoting_record(set);
    let offset = client.clock_offset();
    let mut pushed = 0;
    loop {
        let claimed = broker.promote(set, BATCH, PROMOTE_LEASE, offset).await?;
        let n = claimed.len();
        for member in claimed {
            let payload = match Payload::parse_slice(&member) {
                Ok(p) => p,
                Err(m) => {
                    tracing::error!(reason = %m, "malformed entry in schedule/retry moved to dead");
                    let entry = malformed_entry(&member, "", &m.0);
                    broker
                        .bury_claimed(&record, &member, &entry, offset)
                        .await?;
                    continue;
                }
            };
            let src = Src {
                record: record.clone(),
                member: String::from_utf8(member).expect("parsed payloads are UTF-8"),
                once: None,
            };
            match client.repush(payload, Some(src.clone())).await {
                Ok(Some(_)) => pushed += 1,
                Ok(None) => {
                    // A middleware stopped it (or another poller pushed it): drop the claim.
                    broker.drop_claim(&record, src.member.as_bytes()).await?;
                }
                Err(e) if e.is_transient() => return Err(e),
                Err(e) => {
                    tracing::error!(error = %e, "cannot re-push a scheduled job; moved to dead");
                    let entry = malformed_entry(src.member.as_bytes(), "", &e.to_string());
                    broker
                        .bury_claimed(&record, src.member.as_bytes(), &entry, offset)
                        .await?;
                }
            }
        }
        if n < BATCH {
            return Ok(pushed);
        }
    }
}
