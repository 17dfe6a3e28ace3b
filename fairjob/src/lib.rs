//! # fairjob
//!
//! Background jobs for multi-tenant Rust applications on Redis, wire-compatible
//! with Sidekiq: Ruby and Rust clients and workers share one Redis.
//!
//! ```no_run
//! use fairjob::prelude::*;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize, Job)]
//! #[job(queue = "default", retry = 5)]
//! #[fair_tenant(account_id)]
//! #[throttle(queue = "default_throttled", threshold = 100, per = "1d")]
//! struct HeavyJob {
//!     account_id: u64,
//!     record_id: u64,
//! }
//!
//! impl Perform for HeavyJob {
//!     async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
//!         tracing::info!(record = self.record_id, jid = cx.jid(), "working");
//!         Ok(())
//!     }
//! }
//!
//! # async fn demo() -> fairjob::Result<()> {
//! let client = Client::connect("redis://127.0.0.1/").await?;
//! HeavyJob { account_id: 7, record_id: 1 }.perform_async(&client).await?;
//! # Ok(()) }
//! ```
//!
//! The crate is built in layers, each using only those below it (a test reads
//! the sources and fails on an import that points up):
//!
//! | layer | modules | owns |
//! |---|---|---|
//! | 0 | [`error`] | `Error`, `JobError` |
//! | 1 | [`wire`], [`policy`] | Sidekiq's payload, field names, job options; every rule the scripts execute, as pure functions (no IO) |
//! | 2 | [`broker`] | Redis: connection, keys, scripts and their calls, raw bounded reads (the only code naming the Redis client) |
//! | 3 | [`fair`], [`limit`], [`rate`], [`queues`], [`config`], [`metrics`] | reroute plans, slot and rate limits' calls, queue lists, settings, metric names and label bounds |
//! | 4 | [`inspect`], [`client`] | what operators see (views over the broker's reads and the policies); untyped push: payload in, jid out; client middleware; batches' commit |
//! | 5 | [`job`], [`batch`] | `Job`, `Perform`, `Enqueue`, `JobContext`, the registry; batches as a running job sees them |
//! | 6 | [`worker`] | fetch, process, one exit, retry, heartbeat, reaper, scheduler, shutdown |
//! | 7 | `testing`, [`prelude`] | test support; the common imports |

pub mod batch;
pub mod broker;
pub mod client;
pub mod config;
pub mod error;
pub mod fair;
pub mod inspect;
pub mod job;
pub mod limit;
pub mod metrics;
mod otel;
pub mod policy;
pub mod prelude;
pub mod queues;
pub mod rate;
#[cfg(feature = "testing")]
pub mod testing;
pub mod wire;
pub mod worker;

pub use batch::{Batch, BatchHandle, BatchStatus, Workflow};
pub use client::{
    Bulk, Client, ClientBuilder, ClientMiddleware, ClientNext, CronSpec, IntoPush, PushJob,
    PushMarks, RelayEnd, RelayEndsRead, StagedPush, client_middleware_fn,
};
pub use config::{ClientConfig, PostgresConfig, WorkerConfig};
pub use error::{Error, JobError, Result};
pub use fairjob_macros::Job;
pub use job::{Enqueue, Iterate, Job, JobContext, JobRegistration, Perform, Registry, Step};
pub use queues::QueueSpec;
pub use wire::{
    ArgsShape, ConcurrencyLimit, JobOptions, OnConflict, Payload, RateLimit, Retry, ThrottleRule,
    UniqueOptions, UniqueUntil, payload,
};
pub use worker::{
    ServerMiddleware, ServerNext, Worker, WorkerBuilder, WorkerHandle, server_middleware_fn,
};

/// Support for the derive macro's generated code. Not a public API.
#[doc(hidden)]
pub mod __private {
    pub use inventory;

    pub use crate::client::DeclaredShardedQueue;
    pub use crate::job::{CronDeclaration, Iterate, JobRegistration, Perform};
    pub use crate::wire::{
        ArgsShape, ConcurrencyLimit, IterableOptions, JobOptions, OnConflict, RateLimit, Retry,
        ThrottleRule, UniqueOptions, UniqueUntil,
    };

    pub use serde_json::Error as JsonError;

    /// The JSON of a `#[unique(by(...))]` key: the chosen fields, as a tuple.
    pub fn unique_key<T: serde::Serialize>(fields: &T) -> Result<String, serde_json::Error> {
        serde_json::to_string(fields)
    }

    /// A `#[fair_tenant(field)]` value; empty is no tenant.
    pub fn tenant_of<T: std::fmt::Display + ?Sized>(value: &T) -> Option<String> {
        let s = value.to_string();
        (!s.is_empty()).then_some(s)
    }

    /// A `#[fair_tenant(with = f)]` result; empty is no tenant.
    pub fn tenant_opt<T: std::fmt::Display>(value: Option<T>) -> Option<String> {
        value.and_then(|v| tenant_of(&v))
    }

    /// A `#[concurrency(key = ...)]` value from a field or a function.
    pub fn key_of<T: std::fmt::Display + ?Sized>(value: &T) -> Option<String> {
        tenant_of(value)
    }
}
