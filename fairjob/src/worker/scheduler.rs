//! The scheduler: promotes due `schedule` and `retry` entries through the
//! client middleware without losing or duplicating one.
//!
//! `promote.lua` claims due entries into a promoting record under a lease; each
//! is re-pushed by `push.lua`, which removes it from that record in the same
//! step (so a poller that dies between the two leaves the entry claimed, and it
//! is claimed again when the lease expires). Several workers may poll at once.

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
    let client = &shared.client;
    let broker = client.broker();
    let keys = broker.keys();
    let mut pushed = 0;
    loop {
        let mut inv = broker::PROMOTE.prepare_invoke();
        inv.key(keys.schedule())
            .key(keys.retry())
            .key(keys.promoting());
        inv.arg(BATCH)
            .arg(PROMOTE_LEASE.as_millis() as u64)
            .arg(client.clock_offset());
        let claimed: Vec<Vec<u8>> = broker.invoke(&inv).await?;
        let n = claimed.len();
        for member in claimed {
            match Payload::parse_slice(&member) {
                Ok(p) => {
                    let member = String::from_utf8(member).expect("parsed payloads are UTF-8");
                    match client.repush(p, Some(member.clone())).await {
                        Ok(Some(_)) => pushed += 1,
                        Ok(None) => {
                            // A middleware stopped it (or another poller pushed it): drop the claim.
                            let _: i64 = broker
                                .query(redis::cmd("ZREM").arg(keys.promoting()).arg(&member))
                                .await?;
                        }
                        Err(e) if e.is_transient() => return Err(e),
                        Err(e) => {
                            tracing::error!(error = %e, "cannot re-push a scheduled job; moved to dead");
                            let entry =
                                payload::malformed_entry(member.as_bytes(), "", &e.to_string());
                            bury(shared, &member, &entry).await?;
                        }
                    }
                }
                Err(m) => {
                    tracing::error!(reason = %m, "malformed entry in schedule/retry moved to dead");
                    let entry = payload::malformed_entry(&member, "", &m.0);
                    let member = String::from_utf8_lossy(&member).into_owned();
                    bury(shared, &member, &entry).await?;
                }
            }
        }
        if n < BATCH {
            return Ok(pushed);
        }
    }
}

async fn bury(shared: &Shared, member: &str, entry: &str) -> crate::Result<()> {
    let broker = shared.client.broker();
    let mut inv = broker::BURY.prepare_invoke();
    inv.key(broker.keys().promoting()).key(broker.keys().dead());
    inv.arg(member.as_bytes())
        .arg(entry)
        .arg(shared.client.clock_offset());
    let _: i64 = broker.invoke(&inv).await?;
    Ok(())
}
