//! Transactional batches and workflows: `batch.commit_tx(&mut *tx)` writes
//! the whole batch as one outbox row (kind `batch`) in the caller's
//! transaction and returns its bid at once; the pump commits it into Redis
//! once that transaction has committed, through the same steps as
//! [`fairjob::Batch::commit`] (see [`crate::Pump`]).

use std::future::Future;

use fairjob::batch::PreparedBatch;
use fairjob::config::DEFAULT_MAX_PAYLOAD;
use fairjob::{Batch, Workflow};
use sqlx::PgExecutor;

use crate::enqueue::{InTransaction, schema_not_ready};
use crate::error::Result;

/// The outbox row kind of a batch (its `payload` is the prepared batch's
/// JSON, [`PreparedBatch::to_json`]; its `jid` is the bid).
pub(crate) const KIND_BATCH: &str = "batch";

/// Commits a [`Batch`] or [`Workflow`] inside the caller's transaction:
/// pass `&mut *tx` (a pool is refused: see [`InTransaction`]). One `INSERT`; the bid is returned before the commit.
///
/// - **Rolled back:** nothing of the batch ever runs and no callback fires
///   (Redis never hears of it).
/// - **Committed:** the pump commits the batch into Redis whole, as
///   [`Batch::commit`] does (staged, then flipped open: every member and
///   callback becomes runnable together), exactly once, even if a pump is
///   killed midway (its successor repeats the commit with the same bid,
///   which stages, flips and pushes nothing twice) or several pumps run.
///
/// Refused here, so the error reaches the caller inside the transaction
/// (and nothing is written): a member that does not build, a unique job, a
/// bad queue name, a workflow's cycle, unknown or duplicate step name, and a
/// payload larger than fairjob's default `max_payload_bytes` (1 MiB; commit
/// a [`PreparedBatch`] checked against another maximum with
/// [`PreparedBatch::check_payload_size`] instead). The client middleware
/// runs when the pump commits; what the pumping client refuses then (a
/// middleware stopping a workflow's step, a smaller maximum, a workflow or
/// child batch on a Redis Cluster, a parent batch gone) keeps the row as
/// failed with its error, as for a job.
pub trait BatchTx: Sized + Send {
    /// Writes the batch into the outbox in the caller's transaction; returns
    /// its bid.
    fn commit_tx<'c>(
        self,
        conn: impl InTransaction<'c> + 'c,
    ) -> impl Future<Output = Result<String>> + Send + 'c
    where
        Self: 'c;
}

impl BatchTx for Batch {
    async fn commit_tx<'c>(self, conn: impl InTransaction<'c> + 'c) -> Result<String>
    where
        Self: 'c,
    {
        insert_checked(conn.connection(), self.prepare()?).await
    }
}

impl BatchTx for Workflow {
    async fn commit_tx<'c>(self, conn: impl InTransaction<'c> + 'c) -> Result<String>
    where
        Self: 'c,
    {
        insert_checked(conn.connection(), self.prepare()?).await
    }
}

/// A batch prepared (and checked) by the caller: written as it is.
impl BatchTx for PreparedBatch {
    async fn commit_tx<'c>(self, conn: impl InTransaction<'c> + 'c) -> Result<String>
    where
        Self: 'c,
    {
        insert(conn.connection(), self).await
    }
}

async fn insert_checked<'c>(conn: impl PgExecutor<'c>, batch: PreparedBatch) -> Result<String> {
    batch.check_payload_size(DEFAULT_MAX_PAYLOAD)?;
    insert(conn, batch).await
}

/// One row: the bid as its jid, ordered by the batch's tenant.
async fn insert<'c>(conn: impl PgExecutor<'c>, batch: PreparedBatch) -> Result<String> {
    sqlx::query("INSERT INTO fairjob.outbox (jid, tenant, payload, kind) VALUES ($1, $2, $3, $4)")
        .bind(batch.bid())
        .bind(batch.tenant().unwrap_or_default())
        .bind(batch.to_json())
        .bind(KIND_BATCH)
        .execute(conn)
        .await
        .map_err(schema_not_ready)?;
    Ok(batch.bid().to_owned())
}
