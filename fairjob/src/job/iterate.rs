//! Resumable jobs: the [`Iterate`] trait an `#[iterable]` job implements
//! instead of [`Perform`](super::Perform), its [`Step`], and the type-erased
//! form the worker's runner (`worker/iterate.rs`) drives with JSON cursors.

use std::future::Future;

use futures_util::future::BoxFuture;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;

use super::{Job, JobContext};
use crate::error::JobError;

/// What one step of an iterable job came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step<C> {
    /// More to do: the next step starts from this cursor.
    Next(C),
    /// The job is complete.
    Done,
}

/// The work of an `#[iterable]` job, one step at a time.
///
/// Each step gets the cursor the previous one returned (`None` on the very
/// first step) and returns the next one, or [`Step::Done`]. Between steps the
/// worker saves the cursor at most every `checkpoint`, and lets the job go
/// back to its queue's tail (it *yields*) when the worker is shutting down,
/// the job's `slice` is over, or it was cancelled
/// ([`Client::cancel`](crate::Client::cancel)); the next run resumes from the
/// saved cursor. A failing step is retried (with Sidekiq's backoff) from the
/// last saved cursor. Keep a step short: it is never interrupted.
///
/// ```
/// # use fairjob::prelude::*;
/// # use serde::{Deserialize, Serialize};
/// #[derive(Serialize, Deserialize, Job)]
/// #[iterable(checkpoint = "5s", slice = "10m")]
/// struct Convert { rows: u64 }
///
/// impl Iterate for Convert {
///     type Cursor = u64;
///     async fn step(&self, cursor: Option<u64>, _cx: &JobContext) -> Result<Step<u64>, JobError> {
///         let next = cursor.map_or(0, |c| c + 1);
///         Ok(if next < self.rows { Step::Next(next) } else { Step::Done })
///     }
/// }
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is `#[iterable]` but does not implement `Iterate`",
    label = "this iterable job type has no `impl Iterate`",
    note = "add: `impl fairjob::Iterate for {Self} {{ type Cursor = u64; async fn step(&self, cursor: Option<u64>, cx: &fairjob::JobContext) -> Result<fairjob::Step<u64>, fairjob::JobError> {{ Ok(fairjob::Step::Done) }} }}`"
)]
pub trait Iterate: Job {
    /// Where the job is: saved as JSON in the job's `it-{jid}` hash.
    type Cursor: Serialize + DeserializeOwned + Send + Sync + 'static;

    /// Runs one step from `cursor` (`None` at the start).
    fn step(
        &self,
        cursor: Option<Self::Cursor>,
        cx: &JobContext,
    ) -> impl Future<Output = Result<Step<Self::Cursor>, JobError>> + Send;
}

/// A step's result with the cursor as JSON.
pub(crate) type RawStep = Step<Box<RawValue>>;

/// An iterable job with its cursor type erased to JSON.
pub(crate) trait ErasedIterate: Send + Sync {
    /// One step from a JSON cursor.
    fn step<'a>(
        &'a self,
        cursor: Option<&'a RawValue>,
        cx: &'a JobContext,
    ) -> BoxFuture<'a, Result<RawStep, JobError>>;
}

impl<T: Iterate> ErasedIterate for T {
    fn step<'a>(
        &'a self,
        cursor: Option<&'a RawValue>,
        cx: &'a JobContext,
    ) -> BoxFuture<'a, Result<RawStep, JobError>> {
        Box::pin(async move {
            let cursor = match cursor {
                None => None,
                Some(raw) => Some(serde_json::from_str(raw.get()).map_err(|e| {
                    JobError::retry(format!("cannot read the saved cursor {}: {e}", raw.get()))
                        .with_class("ArgumentError")
                })?),
            };
            match Iterate::step(self, cursor, cx).await? {
                Step::Done => Ok(Step::Done),
                Step::Next(c) => serde_json::value::to_raw_value(&c)
                    .map(Step::Next)
                    .map_err(|e| {
                        JobError::discard(format!("cannot encode the cursor: {e}"))
                            .with_class("ArgumentError")
                    }),
            }
        })
    }
}
