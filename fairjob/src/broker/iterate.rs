//! Iterable jobs' state: Sidekiq's `it-{jid}` hash (`ex` executions, `c`
//! cursor JSON, `rt` runtime, `cancelled`), kept 30 days and removed on
//! completion, plus fairjob's fence `f` (the id of the run that may write
//! it: its token, unique within one worker's record, and a random part).
//! One key per call, so every call is in one cluster slot.
//!
//! In fairjob's testing mode the state lives in the broker's memory store:
//! each operation here decides, so callers make one call either way.

use std::time::Duration;

use super::RedisBroker;
use super::scripts::{ITERATE_CLAIM, ITERATE_SAVE};
use crate::error::Result;

/// How long an iterable job's state is kept after its last write (Sidekiq's
/// `STATE_TTL`).
pub const ITERATION_TTL: Duration = Duration::from_secs(30 * 86_400);

/// What a run of an iterable job starts from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IterationState {
    /// The saved cursor (JSON), if any.
    pub cursor: Option<String>,
    /// Seconds run by earlier runs.
    pub runtime: f64,
    /// The job was cancelled.
    pub cancelled: bool,
    /// Runs so far, this one included.
    pub executions: u64,
}

/// What a save adds to the views' counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SaveInfo {
    /// Steps run since the last save.
    pub steps: u64,
    /// The run yields after this save.
    pub yields: bool,
}

/// The reply of [`RedisBroker::iteration_save`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Saved {
    /// Written.
    Saved,
    /// Written, and the job is cancelled.
    Cancelled,
    /// Refused: another run holds the fence (this run's job was recovered).
    Fenced,
}

impl RedisBroker {
    /// Starts a run: takes the fence for `token` (the run's id), counts the execution and
    /// returns the saved state.
    pub async fn iteration_claim(&self, jid: &str, token: &str) -> Result<IterationState> {
        #[cfg(feature = "testing")]
        if let Some(store) = self.memory() {
            return Ok(store.iteration_claim(jid, token));
        }
        let mut inv = ITERATE_CLAIM.call();
        inv.key(self.keys.iteration(jid))
            .arg(token)
            .arg(ITERATION_TTL.as_secs());
        let (cursor, runtime, cancelled, executions): (
            Option<String>,
            Option<f64>,
            Option<String>,
            u64,
        ) = self.invoke(&inv).await?;
        Ok(IterationState {
            cursor,
            runtime: runtime.unwrap_or(0.0),
            cancelled: cancelled.is_some(),
            executions,
        })
    }

    /// Saves `cursor` (adding `runtime` seconds and `save.steps` steps,
    /// counting a yield), or with `cursor` `None` removes the state of a
    /// completed job; fenced by `token`.
    pub async fn iteration_save(
        &self,
        jid: &str,
        token: &str,
        cursor: Option<&str>,
        runtime: f64,
        save: SaveInfo,
    ) -> Result<Saved> {
        #[cfg(feature = "testing")]
        if let Some(store) = self.memory() {
            return Ok(store.iteration_save(jid, token, cursor, runtime, save));
        }
        let mut inv = ITERATE_SAVE.call();
        inv.key(self.keys.iteration(jid))
            .arg(token)
            .arg(cursor.unwrap_or_default())
            .arg(runtime)
            .arg(ITERATION_TTL.as_secs())
            .arg(if cursor.is_none() { "end" } else { "" })
            .arg(save.steps)
            .arg(if save.yields { "1" } else { "" })
            .arg(crate::wire::now_f64());
        let reply: i64 = self.invoke(&inv).await?;
        Ok(match reply {
            0 => Saved::Fenced,
            2 => Saved::Cancelled,
            _ => Saved::Saved,
        })
    }

    /// Cancels an iterable job at its next step (Sidekiq's `cancel!`:
    /// `HSETNX cancelled`, the state kept 30 days). True when newly cancelled.
    pub async fn iteration_cancel(&self, jid: &str, now: f64) -> Result<bool> {
        #[cfg(feature = "testing")]
        if let Some(store) = self.memory() {
            return Ok(store.iteration_cancel(jid));
        }
        let key = self.keys.iteration(jid);
        let mut pipe = redis::pipe();
        pipe.atomic()
            .cmd("HSETNX")
            .arg(&key)
            .arg("cancelled")
            .arg(now as i64)
            .cmd("EXPIRE")
            .arg(&key)
            .arg(ITERATION_TTL.as_secs())
            .ignore();
        let (set,): (bool,) = self.pipe(&pipe).await?;
        Ok(set)
    }

    /// The raw `it-{jid}` hash, for views.
    pub async fn iteration_read(&self, jid: &str) -> Result<Vec<(String, String)>> {
        self.query(redis::cmd("HGETALL").arg(self.keys.iteration(jid)))
            .await
    }
}
