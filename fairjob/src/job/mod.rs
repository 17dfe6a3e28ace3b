//! Typed jobs: the [`Job`] and [`Perform`] traits, the per-call [`Enqueue`]
//! builder, the [`JobContext`] a running job sees, and the [`Registry`] of
//! every linked `#[derive(Job)]` with its type-erased decode-and-perform.
//!
//! Layer 5: it sits on the client (enqueueing a typed job is building a
//! [`PushJob`](crate::client::PushJob) and handing it over) and below the
//! worker, which runs what the registry prepares.

mod context;
mod enqueue;
mod registry;

use std::future::Future;
use std::time::{Duration, SystemTime};

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;

pub use context::JobContext;
pub(crate) use context::JobParts;
pub use enqueue::Enqueue;
pub use registry::{JobRegistration, Registry};
pub(crate) use registry::{Prepared, SlotRequest};

use crate::client::Client;
use crate::error::{Error, JobError, Result};
use crate::wire::{ArgsShape, JobOptions};

/// A job type: its Sidekiq class name, its options and how its fields map to
/// Sidekiq's positional `args`.
///
/// Implement it with `#[derive(Job)]`; the derive also registers the type so the
/// bundled worker finds it. The enqueue methods ([`Job::perform_async`],
/// [`Job::set_tenant`], …) are provided here.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a fairjob job",
    label = "not a `#[derive(Job)]` type",
    note = "a job type derives it: `#[derive(Serialize, Deserialize, fairjob::Job)]`, with an `impl fairjob::Perform`"
)]
pub trait Job: Serialize + DeserializeOwned + Send + Sync + Sized + 'static {
    /// The class name written to the payload (`"class"`), shared with Ruby.
    const CLASS: &'static str;
    /// Queue, retry, fair-tenant and limit options from the attributes.
    const OPTIONS: JobOptions;
    /// How the type's serde form maps to Sidekiq's positional `args`.
    const ARGS: ArgsShape;

    /// The tenant named by `#[fair_tenant]`, if any. An empty string is no tenant.
    fn fair_tenant(&self) -> Option<String> {
        None
    }

    /// The key of `#[concurrency]`, if the type declares one.
    fn concurrency_key(&self) -> Option<String> {
        None
    }

    /// The JSON of the fields named by `#[unique(by(...))]`, if the type
    /// names some; `None`: the key is all of the arguments.
    fn unique_key_json(&self) -> Option<std::result::Result<String, serde_json::Error>> {
        None
    }

    /// Sidekiq's `args` array for this job.
    fn to_args(&self) -> Result<Box<RawValue>> {
        Self::ARGS.encode(self).map_err(|source| Error::Encode {
            class: Self::CLASS.to_owned(),
            source,
        })
    }

    /// Decodes Sidekiq's `args` array, checking its arity against the type's shape.
    fn from_args(args: &RawValue) -> Result<Self> {
        Self::ARGS.decode(args).map_err(|source| Error::Decode {
            class: Self::CLASS.to_owned(),
            source,
        })
    }

    /// Starts an enqueue with per-call options (tenant, queue, retry).
    fn enqueue(self) -> Enqueue<Self> {
        Enqueue::new(self)
    }

    /// Starts an enqueue for an explicit tenant: `job.set_tenant("acme").perform_async(&client)`.
    fn set_tenant(self, tenant: impl Into<String>) -> Enqueue<Self> {
        Enqueue::new(self).set_tenant(tenant)
    }

    /// Starts an enqueue to an explicitly chosen queue, which is never rerouted.
    fn queue(self, queue: impl Into<String>) -> Enqueue<Self> {
        Enqueue::new(self).queue(queue)
    }

    /// Pushes the job to its queue now; returns the jid.
    fn perform_async(self, client: &Client) -> impl Future<Output = Result<String>> + Send {
        client.push(Enqueue::new(self))
    }

    /// Schedules the job to run after `delay` (measured by Redis's clock); returns the jid.
    fn perform_in(
        self,
        client: &Client,
        delay: Duration,
    ) -> impl Future<Output = Result<String>> + Send {
        client.push_in(Enqueue::new(self), delay)
    }

    /// Schedules the job to run at `at`; returns the jid.
    fn perform_at(
        self,
        client: &Client,
        at: SystemTime,
    ) -> impl Future<Output = Result<String>> + Send {
        client.push_at(Enqueue::new(self), at)
    }
}

/// The work of a job. Write it as an `async fn`:
///
/// ```
/// # use fairjob::prelude::*;
/// # use serde::{Deserialize, Serialize};
/// #[derive(Serialize, Deserialize, Job)]
/// struct Hello(String);
///
/// impl Perform for Hello {
///     async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
///         println!("hello {} (jid {})", self.0, cx.jid());
///         Ok(())
///     }
/// }
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` derives `Job` but does not implement `Perform`",
    label = "this job type has no `impl Perform`",
    note = "add: `impl fairjob::Perform for {Self} {{ async fn perform(self, cx: &fairjob::JobContext) -> Result<(), fairjob::JobError> {{ Ok(()) }} }}`"
)]
pub trait Perform: Job {
    /// Runs the job. An `Err` is retried with Sidekiq's backoff unless it says otherwise.
    fn perform(self, cx: &JobContext) -> impl Future<Output = Result<(), JobError>> + Send;
}
