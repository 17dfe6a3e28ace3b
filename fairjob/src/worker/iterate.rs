//! The runner of `#[iterable]` jobs. A run claims the job's state (Sidekiq's
//! `it-{jid}` hash, fenced by the run's id: its token plus a random part),
//! steps from the saved cursor, saves the cursor at most every `checkpoint`,
//! and between steps checks whether to yield ([`yield_reason`]): the worker
//! is shutting down, the job was asked to (the hook for scheduler
//! requests), or its slice is over. A yield saves the cursor and returns a yield error, which the processor
//! turns into the `Yield` exit (the queue's or tenant shard's tail, no retry
//! used, not a failure). A cancelled job (`client.cancel(jid)`) ends at its
//! next checkpoint as complete. A failing step saves the cursor it started
//! from and fails the run (retried from there). A crash resumes from the
//! last saved cursor; a run whose job was recovered elsewhere finds its save
//! refused (fenced) and stops.
//!
//! The claim and the save are [`JobContext`]'s, shared with a plain job's
//! checkpoints; in testing mode (no Redis) the broker keeps the state in its
//! memory store, which this runner does not need to know.

use std::time::{Duration, Instant};

use serde_json::value::RawValue;

use crate::broker::{SaveInfo, Saved};
use crate::error::{Error, JobError};
use crate::job::{ErasedIterate, JobContext, Prepared, Run, Step};
use crate::wire::IterableOptions;

/// Why an iterable job gave its place back (the `reason` label of
/// `fairjob_yields_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum YieldReason {
    /// The worker is shutting down.
    Shutdown,
    /// The job was asked to yield (by the scheduler, or a test).
    Asked,
    /// The job ran for its whole slice.
    Slice,
}

impl YieldReason {
    fn as_str(self) -> &'static str {
        match self {
            YieldReason::Shutdown => "shutdown",
            YieldReason::Asked => "asked",
            YieldReason::Slice => "slice",
        }
    }
}

/// Whether a run that has gone on for `ran` should yield now, and why.
pub(crate) fn yield_reason(
    stopping: bool,
    asked: bool,
    ran: Duration,
    options: &IterableOptions,
) -> Option<YieldReason> {
    if stopping {
        Some(YieldReason::Shutdown)
    } else if asked {
        Some(YieldReason::Asked)
    } else if ran >= options.slice {
        Some(YieldReason::Slice)
    } else {
        None
    }
}

/// Runs a prepared job: `perform`, or an iterable job's steps.
pub(crate) async fn perform(job: Prepared, cx: JobContext) -> Result<(), JobError> {
    match job.into_run() {
        Run::Perform(run) => run(cx).await,
        Run::Iterate(job, options) => run(job, options, cx).await,
    }
}

/// Runs an iterable job from its saved cursor until it is done, yields,
/// is cancelled or a step fails.
pub(crate) async fn run(
    job: Box<dyn ErasedIterate>,
    options: IterableOptions,
    cx: JobContext,
) -> Result<(), JobError> {
    let state = cx.claim_iteration().await.map_err(state_error)?;
    if state.cancelled {
        tracing::info!("iterable job cancelled: not run");
        return Ok(());
    }
    let mut cursor = match state.cursor {
        Some(json) => Some(RawValue::from_string(json).map_err(|e| {
            JobError::retry(format!("the saved cursor is not JSON: {e}"))
                .with_class("ArgumentError")
        })?),
        None => None,
    };
    let started = Instant::now();
    let mut saved_at = Instant::now();
    let mut dirty = false;
    // Steps run since the last save.
    let mut steps = 0u64;
    let info = |steps: u64, yields: bool| SaveInfo { steps, yields };
    loop {
        match job.step(cursor.as_deref(), &cx).await {
            Ok(Step::Done) => {
                save(&cx, None, &mut saved_at, info(0, false))
                    .await
                    .map_err(state_error)?;
                return Ok(());
            }
            Ok(Step::Next(next)) => {
                cursor = Some(next);
                dirty = true;
                steps += 1;
            }
            Err(e) => {
                // Retried from the cursor this step started from.
                if dirty {
                    let _ = save(&cx, cursor.as_deref(), &mut saved_at, info(steps, false)).await;
                }
                return Err(e);
            }
        }
        if saved_at.elapsed() >= options.checkpoint {
            dirty = false;
            match save(&cx, cursor.as_deref(), &mut saved_at, info(steps, false)).await {
                Ok(Saved::Saved) => steps = 0,
                Ok(Saved::Cancelled) => {
                    tracing::info!("iterable job cancelled: stopped");
                    ::metrics::counter!(crate::metrics::YIELDS_TOTAL, "reason" => "cancelled")
                        .increment(1);
                    return Ok(());
                }
                Ok(Saved::Fenced) => return Err(JobError::yield_for("fenced")),
                Err(e) => {
                    dirty = true;
                    tracing::warn!(error = %e, "could not save the cursor; trying again at the next checkpoint");
                }
            }
        }
        if let Some(reason) = yield_reason(
            cx.is_stopping(),
            cx.yield_asked(),
            started.elapsed(),
            &options,
        ) {
            // Always saved: the cursor, and the yield counted for the views.
            match save(&cx, cursor.as_deref(), &mut saved_at, info(steps, true)).await {
                Ok(Saved::Fenced) => return Err(JobError::yield_for("fenced")),
                Ok(_) => {}
                Err(e) => return Err(state_error(e)),
            }
            tracing::debug!(reason = reason.as_str(), "iterable job yields");
            return Err(JobError::yield_for(reason.as_str()));
        }
    }
}

fn state_error(e: Error) -> JobError {
    JobError::retry(format!("iterable job state: {e}")).with_class("RedisError")
}

/// Saves `cursor` (or, with `None`, removes the state of a completed job).
async fn save(
    cx: &JobContext,
    cursor: Option<&RawValue>,
    saved_at: &mut Instant,
    info: SaveInfo,
) -> crate::Result<Saved> {
    let runtime = saved_at.elapsed().as_secs_f64();
    *saved_at = Instant::now();
    cx.save_iteration(cursor.map(RawValue::get), runtime, info)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_in_order() {
        let o = IterableOptions::DEFAULT;
        let long = Duration::from_secs(3600);
        assert_eq!(yield_reason(false, false, Duration::ZERO, &o), None);
        assert_eq!(
            yield_reason(false, false, long, &o),
            Some(YieldReason::Slice)
        );
        assert_eq!(
            yield_reason(false, true, long, &o),
            Some(YieldReason::Asked)
        );
        assert_eq!(
            yield_reason(true, true, long, &o),
            Some(YieldReason::Shutdown)
        );
    }
}
