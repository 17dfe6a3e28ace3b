//! Transactional enqueue: the same builder as a direct push
//! (`job.set_tenant("acme")`), with the application's transaction instead of
//! a client. The payload is built exactly as for a direct push; client
//! middleware and reroute rules apply when the pump pushes it into Redis
//! (with Redis's clock), as they would for a push made then.

use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fairjob::{IntoPush, PushJob};
use sqlx::{PgConnection, PgExecutor, Postgres, Transaction};

use crate::error::{Error, Result};

/// Enqueue inside the caller's transaction: pass `&mut *tx` (or `&mut tx`;
/// see [`InTransaction`]). A pool is refused at compile time: a job
/// enqueued through a pool is committed at once, outside the transaction,
/// and would run even if the transaction rolled back.
/// One `INSERT`; the jid is returned before the commit;
/// nothing is visible to a pump before the commit, nothing ever after a
/// rollback. The caller's transaction is never committed, rolled back or
/// retried here, and no `NOTIFY` is sent from it.
///
/// ```compile_fail,E0277
/// # use fairjob_postgres::EnqueueTx;
/// # async fn f(pool: sqlx::PgPool, job: fairjob::PushJob) {
/// // A pool is not a transaction: this does not compile.
/// job.perform_async_tx(&pool).await;
/// # }
/// ```
pub trait EnqueueTx: IntoPush + Send + Sized {
    /// Enqueues now (the pump pushes it once the transaction commits); returns the jid.
    fn perform_async_tx<'c>(
        self,
        conn: impl InTransaction<'c> + 'c,
    ) -> impl Future<Output = Result<String>> + Send + 'c
    where
        Self: 'c,
    {
        async move {
            Ok(insert(conn.connection(), vec![(self.into_push()?, None)])
                .await?
                .remove(0))
        }
    }

    /// Enqueues to run `delay` after now (the application's clock at enqueue);
    /// returns the jid.
    fn perform_in_tx<'c>(
        self,
        conn: impl InTransaction<'c> + 'c,
        delay: Duration,
    ) -> impl Future<Output = Result<String>> + Send + 'c
    where
        Self: 'c,
    {
        async move {
            let at = (!delay.is_zero()).then(|| epoch(SystemTime::now()) + delay.as_secs_f64());
            Ok(insert(conn.connection(), vec![(self.into_push()?, at)])
                .await?
                .remove(0))
        }
    }

    /// Enqueues to run at `at`; returns the jid.
    fn perform_at_tx<'c>(
        self,
        conn: impl InTransaction<'c> + 'c,
        at: SystemTime,
    ) -> impl Future<Output = Result<String>> + Send + 'c
    where
        Self: 'c,
    {
        async move {
            Ok(insert(
                conn.connection(),
                vec![(self.into_push()?, Some(epoch(at)))],
            )
            .await?
            .remove(0))
        }
    }
}

impl<T: IntoPush + Send> EnqueueTx for T {}

/// What the `_tx` functions write through: the caller's transaction,
/// `&mut *tx` (its `&mut PgConnection`) or `&mut tx` (the
/// `sqlx::Transaction`). A pool (`&PgPool`) is not one: each statement on a
/// pool commits on its own, so a job enqueued through it would run even
/// when the application's transaction rolls back. Sealed.
pub trait InTransaction<'c>: sealed::Sealed + Send {
    /// The connection the transaction runs on.
    fn connection(self) -> &'c mut PgConnection;
}

impl<'c> InTransaction<'c> for &'c mut PgConnection {
    fn connection(self) -> &'c mut PgConnection {
        self
    }
}

impl<'c, 't> InTransaction<'c> for &'c mut Transaction<'t, Postgres> {
    fn connection(self) -> &'c mut PgConnection {
        self
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for &mut sqlx::PgConnection {}
    impl Sealed for &mut sqlx::Transaction<'_, sqlx::Postgres> {}
}

/// A job kept in PostgreSQL until it ends ("Postgres stays the truth"):
/// `job.keep_until_done().perform_async_tx(&mut *tx)`. Its row stays after
/// Redis has the job; the worker records its end (done or dead), the pump
/// writes that back, and if Redis loses the job before it ends, the pump
/// pushes it again. See [`crate::Pump::keep_queues`] for whole queues.
#[derive(Debug, Clone)]
pub struct KeepUntilDone<T>(pub T);

impl<T: IntoPush> IntoPush for KeepUntilDone<T> {
    fn into_push(self) -> fairjob::Result<PushJob> {
        let mut push = self.0.into_push()?;
        mark_kept(&mut push);
        Ok(push)
    }
}

/// Marks a push as kept until done (the payload field the worker reads).
pub(crate) fn mark_kept(push: &mut PushJob) {
    push.payload_mut()
        .set(fairjob::wire::fields::PG_TRUTH, true);
}

/// Whether a payload is marked as kept until done.
pub(crate) fn is_kept(payload: &fairjob::Payload) -> bool {
    payload
        .get::<bool>(fairjob::wire::fields::PG_TRUTH)
        .unwrap_or(false)
}

/// `.keep_until_done()` on any job or push.
pub trait KeepExt: IntoPush + Sized {
    /// Keeps this job's row until the job ends (see [`KeepUntilDone`]).
    fn keep_until_done(self) -> KeepUntilDone<Self> {
        KeepUntilDone(self)
    }
}

impl<T: IntoPush> KeepExt for T {}

/// Enqueues many jobs in the caller's transaction (`&mut *tx`) with one
/// `INSERT`; returns their jids in order.
pub async fn perform_bulk_tx<'c, I: IntoPush>(
    conn: impl InTransaction<'c> + 'c,
    jobs: impl IntoIterator<Item = I>,
) -> Result<Vec<String>> {
    let pushes = jobs
        .into_iter()
        .map(|j| Ok((j.into_push()?, None)))
        .collect::<Result<Vec<_>>>()?;
    insert(conn.connection(), pushes).await
}

fn epoch(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

async fn insert<'c>(
    conn: impl PgExecutor<'c>,
    jobs: Vec<(PushJob, Option<f64>)>,
) -> Result<Vec<String>> {
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    let n = jobs.len();
    let mut keeps = Vec::with_capacity(n);
    let (mut jids, mut tenants, mut defaults, mut payloads, mut run_ats) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    for (push, at) in jobs {
        let payload = push.payload();
        let default = push.default_tenant().map(str::to_owned);
        jids.push(payload.jid());
        tenants.push(
            payload
                .tenant()
                .or_else(|| default.clone())
                .unwrap_or_default(),
        );
        defaults.push(default);
        keeps.push(is_kept(payload));
        payloads.push(payload.to_json());
        run_ats.push(at);
    }
    sqlx::query(
        "INSERT INTO fairjob.outbox (jid, tenant, default_tenant, payload, run_at, keep)
         SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::float8[], $6::bool[])",
    )
    .bind(&jids)
    .bind(&tenants)
    .bind(&defaults)
    .bind(&payloads)
    .bind(&run_ats)
    .bind(&keeps)
    .execute(conn)
    .await
    .map_err(schema_not_ready)?;
    Ok(jids)
}

/// An insert's error, named for what fixes it when the table, a column or
/// the schema is missing (`42P01`, `42703`, `3F000`): the schema is older
/// than this crate's.
pub(crate) fn schema_not_ready(e: sqlx::Error) -> Error {
    let missing = e
        .as_database_error()
        .and_then(|d| d.code())
        .is_some_and(|c| matches!(c.as_ref(), "42P01" | "42703" | "3F000"));
    if missing {
        let detail = e
            .as_database_error()
            .map(|d| d.message().to_owned())
            .unwrap_or_default();
        return Error::SchemaNotReady {
            detail,
            wanted: crate::schema::SCHEMA_VERSION,
        };
    }
    Error::Postgres(e)
}

/// The channel [`notify_pumps`] notifies and a listening pump
/// ([`crate::Pump::listen`]) waits on.
pub const CHANNEL: &str = "fairjob_outbox";

/// Wakes listening pumps ([`crate::Pump::listen`]): `NOTIFY fairjob_outbox`.
/// Call it **after** the commit, with the pool, not inside the transaction
/// that enqueued: a `NOTIFY` inside a transaction takes a lock at commit
/// that serialises every committing transaction of the database.
pub async fn notify_pumps<'c>(conn: impl PgExecutor<'c>) -> Result<()> {
    sqlx::query("SELECT pg_notify($1, '')")
        .bind(CHANNEL)
        .execute(conn)
        .await?;
    Ok(())
}
