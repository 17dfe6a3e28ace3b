//! # fairjob
//!
//! Background jobs for multi-tenant Rust applications on Redis, wire-compatible
//! with Sidekiq: Ruby and Rust clients and workers share one Redis.
//!
//! ```no_run
//! use fairjob::{Client, Job, JobContext, JobError, Perform};
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
//! Modules, in the order data flows: [`job`] (declare) → [`client`] (enqueue,
//! client middleware) → [`broker`] (Redis keys and Lua scripts) → [`worker`]
//! (fetch, server middleware, perform, ack / retry / dead). [`fair`] holds tenant
//! detection and reroute rules, [`config`] the worker's settings.

pub mod broker;
pub mod client;
pub mod config;
pub mod error;
pub mod fair;
pub mod job;
pub mod limit;
pub mod payload;
pub mod worker;

pub use client::{
    Client, ClientBuilder, ClientMiddleware, ClientNext, Enqueue, PushJob, client_middleware_fn,
};
pub use error::{Error, JobError, Result};
pub use fairjob_macros::Job;
pub use job::{
    ArgsShape, ConcurrencyLimit, Job, JobOptions, JobRegistration, Perform, Registry, Retry,
    ThrottleRule,
};
pub use payload::Payload;
pub use worker::{
    JobContext, QueueSpec, ServerMiddleware, ServerNext, Worker, WorkerBuilder, WorkerHandle,
    server_middleware_fn,
};

/// Support for the derive macro's generated code. Not a public API.
#[doc(hidden)]
pub mod __private {
    pub use inventory;

    pub use crate::job::{
        ArgsShape, ConcurrencyLimit, JobOptions, JobRegistration, Perform, Retry, ThrottleRule,
    };

    /// Compile-time check that a derived job also implements `Perform`.
    pub const fn assert_perform<T: Perform>() {}

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
