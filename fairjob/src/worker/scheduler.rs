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
use crate::broker;
use crate::payload::{self, Payload};

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
    let keys = shared.client.broker().keys();
    let mut pushed = 0;
    for source in [keys.schedule(), keys.retry()] {
        pushed += promote_from(shared, &source).await?;
    }
    Ok(pushed)
}

async fn promote_from(shared: &Shared, source: &str) -> crate::Result<usize> {
    let client = &shared.client;
    let broker = client.broker();
    let record = broker.keys().promoting(source);
    let mut pushed = 0;
    loop {
        let mut inv = broker::PROMOTE.prepare_invoke();
        inv.key(source).key(&record);
        inv.arg(BATCH)
            .arg(PROMOTE_LEASE.as_millis() as u64)
            .arg(client.clock_offset());
        let claimed: Vec<Vec<u8>> = broker.invoke(&inv).await?;
        let n = claimed.len();
        for member in claimed {
            match Payload::parse_slice(&member) {
                Ok(p) => {
                    let member = String::from_utf8(member).expect("parsed payloads are UTF-8");
                    let src = broker::Src {
                        record: record.clone(),
                        member: member.clone(),
                    };
                    match client.repush(p, Some(src)).await {
                        Ok(Some(_)) => pushed += 1,
                        Ok(None) => {
                            // A middleware stopped it (or another poller pushed it): drop the claim.
                            let _: i64 = broker
                                .query(redis::cmd("ZREM").arg(&record).arg(&member))
                                .await?;
                        }
                        Err(e) if e.is_transient() => return Err(e),
                        Err(e) => {
                            tracing::error!(error = %e, "cannot re-push a scheduled job; moved to dead");
                            let entry =
                                payload::malformed_entry(member.as_bytes(), "", &e.to_string());
                            bury(shared, &record, member.as_bytes(), &entry).await?;
                        }
                    }
                }
                Err(m) => {
                    tracing::error!(reason = %m, "malformed entry in schedule/retry moved to dead");
                    let entry = payload::malformed_entry(&member, "", &m.0);
                    bury(shared, &record, &member, &entry).await?;
                }
            }
        }
        if n < BATCH {
            return Ok(pushed);
        }
    }
}

/// Moves a claimed entry to `dead`: written there first, then taken out of the
/// promoting record (two keys in two cluster slots); if another poller had
/// already taken it, the dead entry is withdrawn again.
async fn bury(shared: &Shared, record: &str, member: &[u8], entry: &str) -> crate::Result<()> {
    let broker = shared.client.broker();
    let dead = broker.keys().dead();
    broker
        .zset_add(&dead, "dead", 0.0, entry, shared.client.clock_offset())
        .await?;
    let removed: i64 = broker
        .query(redis::cmd("ZREM").arg(record).arg(member))
        .await?;
    if removed == 0 {
        let _: i64 = broker
            .query(redis::cmd("ZREM").arg(&dead).arg(entry))
            .await?;
    }
    Ok(())
}
