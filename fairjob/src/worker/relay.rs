//! A job a relay keeps until it ends (fairjob-postgres' "Postgres stays the
//! truth" mode, payload field [`fields::PG_TRUTH`]): the exit that ends its
//! run (an ack or a burial) records `done`/`dead` and its jid in the relay's
//! completion list, which the pump drains into PostgreSQL.
//!
//! On one server the record is part of the exit's one script (`exit.rs`
//! passes [`kept`]; `finish.lua`, `shard_finish.lua`, `shard_ack_many.lua`):
//! no crash falls between a job's end and its record, and a fenced exit
//! records nothing. On a Redis Cluster the completion list is in another
//! slot than the job's records, so [`run_ended`] records it right after the
//! exit, a second write: a worker killed between the two leaves the row
//! "published" in PostgreSQL, and the job runs again only if Redis later
//! loses data and the pump republishes what is not done.

use std::time::Duration;

use super::Shared;
use crate::client::RelayEnd;
use crate::wire::{Payload, fields};

/// Test hook: when this environment variable is set (to a file path), the
/// task of a kept job whose exit (ack or burial) was written appends the
/// job's jid as a line to that file and hangs, so a test can kill the worker
/// right after the exit.
pub const HANG_AFTER_KEPT_END_ENV: &str = "FAIRJOB_TEST_HANG_AFTER_KEPT_END";

/// The jid of `payload` when a relay keeps it until it ends.
pub(crate) fn kept(payload: &Payload) -> Option<String> {
    payload
        .get::<bool>(fields::PG_TRUTH)
        .unwrap_or(false)
        .then(|| payload.jid())
}

/// The test hook [`HANG_AFTER_KEPT_END_ENV`], after a kept job's exit.
pub(crate) async fn hang_if_asked(jid: &str) {
    // Read once per process: a test sets it before the worker starts.
    static HANG: std::sync::OnceLock<Option<std::ffi::OsString>> = std::sync::OnceLock::new();
    if let Some(path) = HANG.get_or_init(|| std::env::var_os(HANG_AFTER_KEPT_END_ENV)) {
        tracing::warn!(
            job.jid = %jid,
            "{HANG_AFTER_KEPT_END_ENV} is set: hanging right after a kept job's exit"
        );
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = f.write_all(format!("{jid}\n").as_bytes());
        }
        std::future::pending::<()>().await;
    }
}

/// Records the end of the run of kept job `jid` (of `class`) when its exit
/// could not (a Redis Cluster); retries a Redis error a few times, then
/// gives up with an error in the log.
pub(crate) async fn run_ended(shared: &Shared, jid: String, class: &str, dead: bool) {
    if shared.client.broker().ends_in_script() {
        return; // recorded by the exit's script
    }
    let end = if dead { RelayEnd::Dead } else { RelayEnd::Done };
    let ends = [(end, jid)];
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
    tracing::error!(job.jid = %ends[0].1, job.class = class, "could not record a kept job's end for PostgreSQL; its row stays published");
}
