//! PostgreSQL as the source of truth for fairjob: enqueue a job inside the
//! application's own transaction, and a fair pump that moves committed jobs
//! into Redis.
//!
//! ```no_run
//! # use fairjob::prelude::*;
//! # use serde::{Deserialize, Serialize};
//! # #[derive(Serialize, Deserialize, Job)]
//! # struct Welcome(i64);
//! # impl Perform for Welcome {
//! #     async fn perform(self, _cx: &JobContext) -> Result<(), JobError> { Ok(()) }
//! # }
//! use fairjob_postgres::EnqueueTx;
//!
//! # async fn signup(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
//! let mut tx = pool.begin().await?;
//! // … the application's own writes …
//! let jid = Welcome(42).set_tenant("acme").perform_async_tx(&mut *tx).await?;
//! tx.commit().await?; // only now can the pump see the job
//! # let _ = jid; Ok(()) }
//! ```
//!
//! - [`migrate`] creates the crate's tables in their own schema (`fairjob`)
//!   with their own migrations table (`fairjob.migrations`), apart from the
//!   application's migrations.
//! - [`EnqueueTx`] writes one row per job in the caller's transaction (the
//!   jid is known at once); it never commits, rolls back or retries that
//!   transaction and sends no `NOTIFY` from it.
//! - [`BatchTx`] commits a [`fairjob::Batch`] or [`fairjob::Workflow`] in
//!   the caller's transaction the same way (one row, the bid known at once;
//!   see below).
//! - [`Pump`] moves committed rows into Redis, fairly between tenants (see
//!   its docs for the claim protocol and the once-only publishing).
//!
//! Two modes, per job or per queue:
//!
//! - **Outbox** (the default): a row is deleted as soon as Redis has its
//!   job. What happens in Redis afterwards (a failover or `FLUSHALL` that
//!   loses the job) is not covered: Postgres no longer knows the job.
//! - **Postgres stays the truth** ([`KeepExt::keep_until_done`],
//!   [`Pump::keep_queues`]): the row stays until the job ends; workers record
//!   ends in Redis, the pump writes them back in batches, finds Redis losing
//!   data by the relay epoch and publishes every kept job that is not done
//!   again (see [`Pump`]).
//!
//! # Batches and workflows in a transaction
//!
//! [`BatchTx::commit_tx`] checks the batch (a member that does not build, a
//! unique job, a bad queue name, a member over 1 MiB, a workflow's cycle,
//! unknown or duplicate step), so its error reaches the caller inside the
//! transaction, then writes it as one row and returns its bid. A rollback
//! leaves no trace: nothing runs, no callback fires, Redis never hears of
//! it. After the commit the pump commits the batch into Redis whole, through
//! the same steps as [`fairjob::Batch::commit`]: every member and callback
//! becomes runnable together, once, even when a pump is killed midway or
//! several run (see [`Pump`]).
//!
//! ```no_run
//! # use fairjob::prelude::*;
//! # use serde::{Deserialize, Serialize};
//! # #[derive(Serialize, Deserialize, Job)]
//! # struct ImportRow(u32);
//! # #[derive(Serialize, Deserialize, Job)]
//! # struct ImportDone(u64);
//! # impl Perform for ImportRow {
//! #     async fn perform(self, _cx: &JobContext) -> Result<(), JobError> { Ok(()) }
//! # }
//! # impl Perform for ImportDone {
//! #     async fn perform(self, _cx: &JobContext) -> Result<(), JobError> { Ok(()) }
//! # }
//! use fairjob_postgres::BatchTx;
//!
//! # async fn import(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
//! let mut tx = pool.begin().await?;
//! // … the application's own writes (the import's row) …
//! let bid = Batch::new()
//!     .description("Import 7")
//!     .on_success(ImportDone(7))
//!     .push_bulk((0..1000).map(ImportRow))
//!     .commit_tx(&mut *tx)
//!     .await?;
//! tx.commit().await?; // only now can the pump see the batch
//! # let _ = bid; Ok(()) }
//! ```

mod batch;
mod enqueue;
mod error;
pub mod metrics;
mod pump;
mod schema;
mod status;
#[cfg(feature = "testing")]
pub mod testing;
mod worker;

pub use batch::BatchTx;
pub use enqueue::{
    CHANNEL, EnqueueTx, InTransaction, KeepExt, KeepUntilDone, notify_pumps, perform_bulk_tx,
};
pub use error::{Error, Result};
pub use pump::{CheckStats, HANG_AFTER_DRAIN_READ_ENV, HANG_AFTER_PUSH_ENV, Pump, PumpStats};
pub use schema::{SCHEMA_VERSION, check_schema, migrate};
pub use status::{
    JobRow, LAST_EVENTS, PumpRow, RepublishEvent, Status, TOP_TENANTS, find_job, status,
};
pub use worker::{WorkerBuilderExt, configured};
