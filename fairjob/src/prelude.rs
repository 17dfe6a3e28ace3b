//! `use fairjob::prelude::*;` brings what declaring a job and enqueueing it
//! needs into scope: [`Job`] (the derive and the trait with `perform_async`),
//! [`Perform`] (or, for an `#[iterable]` job, [`Iterate`] and its [`Step`]), [`JobContext`], [`JobError`] and [`Client`].
//!
//! ```no_run
//! use fairjob::prelude::*;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize, Job)]
//! struct Hello(String);
//!
//! impl Perform for Hello {
//!     async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
//!         Ok(())
//!     }
//! }
//!
//! # async fn enqueue() -> fairjob::Result<()> {
//! let client = Client::connect("redis://127.0.0.1/").await?;
//! Hello("world".into()).perform_async(&client).await?;
//! # Ok(()) }
//! ```

pub use crate::Job;
pub use crate::batch::{Batch, Workflow};
pub use crate::client::Client;
pub use crate::error::JobError;
pub use crate::job::{Iterate, JobContext, Perform, Step};
