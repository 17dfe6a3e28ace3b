//! A job a relay keeps until it ends (fairjob-postgres' "Postgres stays the
//! truth" mode, payload field [`fields::PG_TRUTH`]): after the exit that ends
//! it (an ack or a burial), the worker records `done`/`dead` and its jid in
//! the relay's completion list, which the pump drains into PostgreSQL.
//!
//! This is a second write after the job's one exit (`exit.rs`), not part of
//! it: a worker killed between the two leaves the row "published" in
//! PostgreSQL; the job then runs again only if Redis later loses data and the
//! pump republishes what is not done.

use std::time::Duration;

use super::Shared;
use crate::client::RelayEnd;
use crate::wire::{Payload, fields};

/// Test hook: when this environment variable is set (to a file path), a
/// worker that ended a kept job writes that file and hangs before recording
/// the end, so a test can kill it exactly in that window.
pub const HANG_BEFORE_RELAY_END_ENV: &str = "FAIRJOB_TEST_HANG_BEFORE_RELAY_END";

/// Records the end of `payload`'s run when the relay keeps it; retries a
/// Redis error a few times, then gives up with an error in the log.
pub(crate) async fn run_ended(shared: &Shared, payload: &Payload, dead: bool) {
    if !payload.get::<bool>(fields::PG_TRUTH).unwrap_or(false) {
        return;
    }
    if let Some(path) = std::env::var_os(HANG_BEFORE_RELAY_END_ENV) {
        tracing::warn!(
            "{HANG_BEFORE_RELAY_END_ENV} is set: hanging between a kept job's exit and the record of its end"
        );
        let _ = std::fs::write(path, b"hanging\n");
        std::future::pending::<()>().await;
    }
    let end = if dead { RelayEnd::Dead } else { RelayEnd::Done };
    let ends = [(end, payload.jid())];
    for attempt in 0..5u32 {
        match shared.client.record_relay_ends(&ends).await {
            Ok(()) => return,
            Err(e) => {
                shared.redis_trouble("relay completion", &e);
                if shared.abandon.is_cancelled() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
            }
        }
    }
    tracing::error!(job.jid = %ends[0].1, job.class = %payload.class(), "could not record a kept job's end for PostgreSQL; its row stays published");
}
