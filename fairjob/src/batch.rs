//! Batches: jobs committed together, with callbacks that fire exactly once
//! when every member has run (`complete`), when every member has succeeded
//! (`success`) and when the first member dies (`death`), as Sidekiq Pro's
//! batches do.
//!
//! ```no_run
//! use fairjob::prelude::*;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize, Job)]
//! struct ImportRow { row: u32 }
//! #[derive(Serialize, Deserialize, Job)]
//! struct ImportDone { import_id: u64 }
//! # impl Perform for ImportRow { async fn perform(self, _: &JobContext) -> Result<(), JobError> { Ok(()) } }
//! # impl Perform for ImportDone { async fn perform(self, _: &JobContext) -> Result<(), JobError> { Ok(()) } }
//!
//! # async fn run(client: &Client) -> fairjob::Result<()> {
//! let bid = Batch::new()
//!     .description("Import 2026-11-28")
//!     .on_success(ImportDone { import_id: 7 })
//!     .push_bulk((0..50_000).map(|row| ImportRow { row }))
//!     .commit(client)
//!     .await?;
//! # let _ = bid; Ok(()) }
//! ```
//!
//! # What is guaranteed
//!
//! - **All or none.** Members are staged in chunks (no Redis script over
//!   about 1 ms, whatever the batch's size) and become runnable only when the
//!   commit's last step flips the batch open. A creator that fails or dies
//!   before that leaves nothing runnable: the staged members expire after an
//!   hour. After the flip, every member is pushed: by the committer, or, if it
//!   died meanwhile, by a worker's sweep (the reaper's pass), each once.
//! - **Each callback once.** A batch's membership is two sets of jids (not
//!   yet run; not yet succeeded), changed in the same Redis script as the
//!   member's own end (its ack, retry or burial, fenced by its token), and an
//!   event fires only when its set becomes empty, behind a fired mark: a
//!   duplicate ack, a member run twice after a kill -9, the reaper's recovery
//!   or a fenced late completion change nothing and fire nothing. A callback
//!   is an ordinary job (at-least-once, retried, in the batch's tenant) with a
//!   jid derived from (bid, event). On a Redis Cluster the batch's keys are in
//!   another slot than the member's queue, so the member's end reaches its
//!   batch in a second step right after the exit: a worker killed between
//!   the two leaves that member pending, and the batch does not complete.
//! - **Events, as in Sidekiq Pro.** `complete`: every member has run once
//!   (succeeded, failed and waits in `retry`, died, or failed and was
//!   discarded); `success`: every member has succeeded (after `complete`; it
//!   may come later, when a failed member succeeds on a retry, or a dead one
//!   is retried by hand); `death`: the first member that dies. An empty batch
//!   fires `complete` and `success` at its commit.
//! - **Lifetimes.** An open batch's data lives 30 days (180 once a member
//!   died, as the dead set keeps jobs), and `batch_retention` (client
//!   setting, default 1 day) after `success`.
//! - A unique job cannot be a member (a refused duplicate would leave its
//!   batch pending forever): the commit says so.
//!
//! A running member adds jobs to its own batch with [`JobContext::batch`]
//! (before its own end, so the batch cannot complete in between); a batch
//! that fired `complete` takes no more ([`Error::BatchFinished`]). A callback
//! (or a member) reads its batch with [`JobContext::batch_status`].
//!
//! The rules are [`crate::policy::batch`]; their Lua twin is
//! `broker/scripts/lib/batch.lua`.

pub use crate::client::batch::{
    Batch, BatchHandle, BatchStatus, PreparedBatch, Workflow, callback_jid,
};
use crate::error::{Error, Result};
use crate::job::JobContext;
pub use crate::policy::batch::Event;
pub use crate::policy::workflow::{OnDependencyFailure, StepState};
use crate::wire::fields;

impl JobContext {
    /// The batch this job is a member of, to add jobs to it.
    pub fn batch(&self) -> Option<BatchHandle> {
        self.payload().get_str(fields::BID).map(|bid| BatchHandle {
            client: self.client().clone(),
            bid,
        })
    }

    /// The status of this job's batch: the one it is a member of, or, for a
    /// batch's callback, the batch that fired it. `None` for other jobs.
    pub async fn batch_status(&self) -> Result<Option<BatchStatus>> {
        let p = self.payload();
        let Some(bid) = p
            .get_str(fields::BATCH_CALLBACK)
            .or_else(|| p.get_str(fields::BID))
        else {
            return Ok(None);
        };
        self.client().batch_status(&bid).await
    }

    /// For a workflow's step: its name.
    pub fn workflow_step(&self) -> Option<String> {
        self.payload().get_str(fields::WORKFLOW_STEP)
    }

    /// Records this step's result (a small JSON value, at most the client's
    /// `max_result_bytes`, 64 KiB by default) for the steps that depend on
    /// it ([`JobContext::upstream`]). A job that is not a workflow's step
    /// is an [`Error::Workflow`]. Recorded at once: a step that records and
    /// then fails keeps its record (the next run overwrites it).
    pub async fn record<T: serde::Serialize>(&self, value: &T) -> Result<()> {
        let (bid, step) = self.step_of("record a result")?;
        let json = serde_json::to_string(value)
            .map_err(|e| Error::Workflow(format!("step `{step}`: its result is not JSON: {e}")))?;
        let max = self.client().config().max_result_bytes;
        if json.len() > max {
            return Err(Error::Workflow(format!(
                "step `{step}`: its result is {} bytes, above max_result_bytes ({max})",
                json.len()
            )));
        }
        self.client()
            .broker()
            .workflow_record(&bid, &step, &json)
            .await
    }

    /// The result step `name` of this step's workflow recorded (`None` if
    /// it recorded none).
    pub async fn upstream<T: serde::de::DeserializeOwned>(&self, name: &str) -> Result<Option<T>> {
        let (bid, _) = self.step_of("read an upstream result")?;
        let Some(json) = self.client().broker().workflow_result(&bid, name).await? else {
            return Ok(None);
        };
        serde_json::from_str(&json)
            .map(Some)
            .map_err(|e| Error::Workflow(format!("the result of step `{name}`: {e}")))
    }

    /// The dependencies of this step that failed for good and that it
    /// continued past (`on_dependency_failure = continue`).
    pub async fn failed_dependencies(&self) -> Result<Vec<String>> {
        let (bid, step) = self.step_of("read its failed dependencies")?;
        self.client()
            .broker()
            .workflow_failed_deps(&bid, &step)
            .await
    }

    fn step_of(&self, what: &str) -> Result<(String, String)> {
        let p = self.payload();
        match (p.get_str(fields::BID), p.get_str(fields::WORKFLOW_STEP)) {
            (Some(bid), Some(step)) => Ok((bid, step)),
            _ => Err(Error::Workflow(format!(
                "job {} is not a workflow's step: it cannot {what}",
                self.jid()
            ))),
        }
    }

    /// For a batch's callback: the event that fired it.
    pub fn batch_event(&self) -> Option<Event> {
        Event::parse(&self.payload().get_str(fields::BATCH_EVENT)?)
    }
}
