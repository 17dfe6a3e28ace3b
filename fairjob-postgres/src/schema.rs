//! The crate's schema, `fairjob`, and its migrations table
//! `fairjob.migrations` (one row per applied version), so they never collide
//! with the application's own migrations.

use sqlx::PgPool;

use crate::error::{Error, Result};

/// The schema version this crate writes and reads.
pub const SCHEMA_VERSION: i32 = 3;

/// Migrations, in order; migration `i` brings the schema to version `i + 1`.
const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE fairjob.outbox (
    id bigserial PRIMARY KEY,
    jid text NOT NULL UNIQUE,
    -- The tenant the pump orders by ('' = none): the explicit one, else the
    -- job type's #[fair_tenant]. Middleware may still change it in Redis.
    tenant text NOT NULL DEFAULT '',
    default_tenant text,
    -- The payload as a direct push builds it, before client middleware.
    payload text NOT NULL,
    -- Epoch seconds (the application's clock) for perform_in/perform_at.
    run_at double precision,
    created_at timestamptz NOT NULL DEFAULT now(),
    -- A pump's claim: until then no other pump takes the row.
    claimed_until timestamptz,
    -- The jid is staged in Redis (see Pump): a retry must not stage it again.
    staged boolean NOT NULL DEFAULT false,
    -- A job that cannot be pushed (too large, undecodable): kept, not retried.
    failed_at timestamptz,
    error text
);
CREATE INDEX outbox_tenant_id ON fairjob.outbox (tenant, id) WHERE failed_at IS NULL;
"#,
    r#"
-- "Postgres stays the truth": a kept row stays until its job ends.
ALTER TABLE fairjob.outbox
    ADD COLUMN keep boolean NOT NULL DEFAULT false,
    -- When Redis got the job, and the relay epoch it got it in.
    ADD COLUMN published_at timestamptz,
    ADD COLUMN published_epoch text,
    -- When the job ended, and how: done, dead or stopped (a middleware).
    ADD COLUMN done_at timestamptz,
    ADD COLUMN state text;
DROP INDEX fairjob.outbox_tenant_id;
-- The pump's backlog: rows waiting to reach Redis.
CREATE INDEX outbox_pending ON fairjob.outbox (tenant, id)
    WHERE failed_at IS NULL AND published_at IS NULL AND done_at IS NULL;
-- Kept jobs Redis has, oldest first (the lost-job check; republished when
-- Redis loses data).
CREATE INDEX outbox_published ON fairjob.outbox (published_at)
    WHERE published_at IS NOT NULL AND done_at IS NULL;
-- Retention of finished rows.
CREATE INDEX outbox_done ON fairjob.outbox (done_at) WHERE done_at IS NOT NULL;
-- The relay epoch PostgreSQL knows Redis by (one row).
CREATE TABLE fairjob.relay (
    id integer PRIMARY KEY CHECK (id = 1),
    epoch text NOT NULL,
    changed_at timestamptz NOT NULL DEFAULT now()
);
-- Each time Redis was found to have lost data, and what was republished.
CREATE TABLE fairjob.republished (
    id bigserial PRIMARY KEY,
    at timestamptz NOT NULL DEFAULT now(),
    old_epoch text,
    epoch text NOT NULL,
    jobs bigint NOT NULL,
    pump text NOT NULL
);
-- Pumps alive (a heartbeat every few seconds).
CREATE TABLE fairjob.pumps (
    id text PRIMARY KEY,
    host text NOT NULL,
    pid integer NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    seen_at timestamptz NOT NULL DEFAULT now()
);
"#,
    r#"
-- Batches and workflows committed in a transaction (BatchTx): one row per
-- batch, `jid` its bid, `payload` the prepared batch (fairjob's
-- PreparedBatch JSON), claimed and ordered by tenant as jobs are.
ALTER TABLE fairjob.outbox
    ADD COLUMN kind text NOT NULL DEFAULT 'job' CHECK (kind IN ('job', 'batch'));
"#,
];

/// Brings the `fairjob` schema to [`SCHEMA_VERSION`]; safe to run from
/// several processes at once (an advisory lock serialises them) and again
/// when up to date.
pub async fn migrate(pool: &PgPool) -> Result<()> {
    let mut tx = pool.begin().await?;
    // One migrator at a time ('fairjob' as a number).
    sqlx::query("SELECT pg_advisory_xact_lock(7046976582561431906)")
        .execute(&mut *tx)
        .await?;
    sqlx::raw_sql(
        "CREATE SCHEMA IF NOT EXISTS fairjob;
         CREATE TABLE IF NOT EXISTS fairjob.migrations (
             version integer PRIMARY KEY,
             applied_at timestamptz NOT NULL DEFAULT now()
         );",
    )
    .execute(&mut *tx)
    .await?;
    let found: i32 = sqlx::query_scalar("SELECT coalesce(max(version), 0) FROM fairjob.migrations")
        .fetch_one(&mut *tx)
        .await?;
    if found > SCHEMA_VERSION {
        return Err(Error::SchemaNewer {
            found,
            wanted: SCHEMA_VERSION,
        });
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        sqlx::raw_sql(sqlx::AssertSqlSafe(*sql))
            .execute(&mut *tx)
            .await?;
        sqlx::query("INSERT INTO fairjob.migrations (version) VALUES ($1)")
            .bind(i as i32 + 1)
            .execute(&mut *tx)
            .await?;
        tracing::info!(version = i + 1, "fairjob schema migrated");
    }
    tx.commit().await?;
    Ok(())
}

/// Checks that the schema is at [`SCHEMA_VERSION`]: an older (or missing)
/// one is [`Error::SchemaOutdated`], naming the fix.
pub async fn check_schema(pool: &PgPool) -> Result<()> {
    let exists: bool = sqlx::query_scalar("SELECT to_regclass('fairjob.migrations') IS NOT NULL")
        .fetch_one(pool)
        .await?;
    let found: i32 = if exists {
        sqlx::query_scalar("SELECT coalesce(max(version), 0) FROM fairjob.migrations")
            .fetch_one(pool)
            .await?
    } else {
        0
    };
    match found.cmp(&SCHEMA_VERSION) {
        std::cmp::Ordering::Less => Err(Error::SchemaOutdated {
            found,
            wanted: SCHEMA_VERSION,
        }),
        std::cmp::Ordering::Greater => Err(Error::SchemaNewer {
            found,
            wanted: SCHEMA_VERSION,
        }),
        std::cmp::Ordering::Equal => Ok(()),
    }
}
