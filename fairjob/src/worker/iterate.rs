//! The runner of `#[iterable]` jobs: each step from the cursor the one
//! before it returned, until [`Step::Done`].

use crate::error::JobError;
use crate::job::{ErasedIterate, JobContext, Step};
use crate::wire::IterableOptions;

/// Runs an iterable job's steps until it is done; a failing step fails the run.
pub(crate) async fn run(
    job: Box<dyn ErasedIterate>,
    _options: IterableOptions,
    cx: JobContext,
) -> Result<(), JobError> {
    let mut cursor = None;
    loop {
        match job.step(cursor.as_deref(), &cx).await? {
            Step::Done => return Ok(()),
            Step::Next(next) => cursor = Some(next),
        }
    }
}
