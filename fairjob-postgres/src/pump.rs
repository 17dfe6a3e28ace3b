//! The pump: moves committed outbox rows into Redis.
//!
//! # One batch
//!
//! 1. **Fair read and claim.** Tenants with pending rows are taken in order
//!    starting after the last tenant served (a round robin; a loose index scan
//!    over `(tenant, id)`), at most `batch` of them; the batch takes every
//!    tenant's oldest row, then every tenant's second, … until it is full (a
//!    lone tenant fills it), and the rows are claimed for `lease` with
//!    `UPDATE … WHERE id IN (SELECT … FOR UPDATE SKIP LOCKED) RETURNING`, so
//!    several pumps take disjoint rows. One tenant's 200,000 rows therefore
//!    delay another tenant's job by at most one batch.
//! 2. **Stage.** The jids not yet staged are added to Redis's staged record
//!    (`ZADD NX`), then marked `staged` in Postgres.
//! 3. **Push.** Each job goes through the client middleware chain and reroute
//!    rules as a direct push would ([`fairjob::Client::push_staged_many`]:
//!    bounded script calls sent together); the push
//!    removes its staged jid in the same script, and a push whose staged jid
//!    is gone pushes nothing.
//! 4. **Delete** the rows.
//!
//! A pump killed at any point loses nothing: its claim lapses after `lease`
//! and another pump (or itself) takes the rows again. Publishing is
//! idempotent by jid: killed after 2, the retry pushes once; killed after 3
//! and before 4, the retry finds the staged jids gone and pushes nothing. (On
//! a Redis Cluster, or to a tenant-sharded queue, the push and the removal
//! of the staged jid are two steps, the push first: a crash between those two
//! may push a job twice.) A job scheduled for later (`perform_in_tx`) goes to
//! Redis's `schedule` set, where a second push of the same payload is the
//! same entry.
//!
//! A job that cannot be pushed (too large, undecodable, a bad queue name)
//! keeps its row with `failed_at` and `error` set, and is not retried.

use std::time::Duration;

use fairjob::{Client, Payload, PushJob, StagedPush};
use sqlx::{PgPool, Row};

use crate::error::Result;

/// The pump (see the module docs).
#[derive(Debug, Clone)]
pub struct Pump {
    pool: PgPool,
    client: Client,
    batch: usize,
    poll: Duration,
    max_idle: Duration,
    lease: Duration,
}

/// What one batch did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PumpStats {
    /// Rows claimed.
    pub claimed: usize,
    /// Jobs pushed into Redis now.
    pub pushed: usize,
    /// Jobs whose push an earlier run had made (a retry after a crash).
    pub already: usize,
    /// Jobs a client middleware stopped.
    pub stopped: usize,
    /// Rows kept as failed.
    pub failed: usize,
}

impl Pump {
    /// A pump reading `pool` and pushing through `client` (its middleware and
    /// reroute rules apply). Defaults: batches of 500, polling every 100 ms,
    /// backing off to 2 s when idle, 30 s claims.
    pub fn new(pool: PgPool, client: Client) -> Pump {
        Pump {
            pool,
            client,
            batch: 500,
            poll: Duration::from_millis(100),
            max_idle: Duration::from_secs(2),
            lease: Duration::from_secs(30),
        }
    }

    /// Rows claimed per batch (at least 1).
    pub fn batch(mut self, n: usize) -> Self {
        self.batch = n.max(1);
        self
    }

    /// The poll interval when work was found; when idle it doubles up to
    /// [`max_idle_interval`](Self::max_idle_interval).
    pub fn poll_interval(mut self, d: Duration) -> Self {
        self.poll = d;
        self
    }

    /// The longest wait between polls when idle.
    pub fn max_idle_interval(mut self, d: Duration) -> Self {
        self.max_idle = d;
        self
    }

    /// How long a claim keeps other pumps off a batch (a killed pump's rows
    /// are taken again after this).
    pub fn lease(mut self, d: Duration) -> Self {
        self.lease = d;
        self
    }

    /// Runs batches until `stop` completes: at once while there is work,
    /// polling with back-off when idle. Checks the schema first. Errors
    /// (Postgres or Redis down) are logged and retried after the idle wait.
    pub async fn run(self, stop: impl std::future::Future<Output = ()>) -> Result<()> {
        crate::schema::check_schema(&self.pool).await?;
        tokio::pin!(stop);
        let mut cursor = String::new();
        let mut wait = self.poll;
        loop {
            let claimed = match self.pump_from(&mut cursor).await {
                Ok(s) => s.claimed,
                Err(e) => {
                    tracing::warn!(error = %e, "pump batch failed; retrying");
                    0
                }
            };
            wait = next_wait(claimed, self.batch, wait, self.poll, self.max_idle);
            // Checked first, also between full batches (a zero sleep).
            tokio::select! {
                biased;
                () = &mut stop => return Ok(()),
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// One batch, starting the tenant round robin at the beginning.
    pub async fn pump_once(&self) -> Result<PumpStats> {
        self.pump_from(&mut String::new()).await
    }

    /// One batch; `cursor` is the last tenant served (the round robin's position).
    async fn pump_from(&self, cursor: &mut String) -> Result<PumpStats> {
        let (rows, last_tenant) = self.claim(cursor).await?;
        let mut stats = PumpStats {
            claimed: rows.len(),
            ..PumpStats::default()
        };
        if rows.is_empty() {
            return Ok(stats);
        }
        if let Some(last) = last_tenant {
            *cursor = last;
        }
        // 2. Stage what was not staged yet.
        let unstaged: Vec<&Claimed> = rows
            .iter()
            .filter(|r| !r.staged && r.run_at.is_none())
            .collect();
        if !unstaged.is_empty() {
            let jids: Vec<String> = unstaged.iter().map(|r| r.jid.clone()).collect();
            self.client.stage_pushes(&jids).await?;
            let ids: Vec<i64> = unstaged.iter().map(|r| r.id).collect();
            sqlx::query("UPDATE fairjob.outbox SET staged = true WHERE id = ANY($1)")
                .bind(&ids)
                .execute(&self.pool)
                .await?;
        }
        // 3. Push: scheduled jobs one by one, the others in one staged batch.
        let mut done = Vec::with_capacity(rows.len());
        let mut failed: Vec<(i64, String)> = Vec::new();
        let mut now_rows = Vec::new();
        let mut now_jobs = Vec::new();
        for row in &rows {
            let job = match decode(row) {
                Ok(job) => job,
                Err(e) => {
                    failed.push((row.id, e.to_string()));
                    continue;
                }
            };
            match row.run_at {
                Some(at) => {
                    let at = std::time::UNIX_EPOCH + Duration::from_secs_f64(at.max(0.0));
                    match self.client.push_at(job, at).await {
                        Ok(_) => {
                            stats.pushed += 1;
                            done.push(row.id);
                        }
                        Err(e) if is_bad_job(&e) => failed.push((row.id, e.to_string())),
                        Err(e) => return Err(e.into()),
                    }
                }
                None => {
                    now_rows.push(row);
                    now_jobs.push(job);
                }
            }
        }
        let results = self.client.push_staged_many(now_jobs).await?;
        for (row, result) in now_rows.into_iter().zip(results) {
            match result {
                Ok(StagedPush::Pushed) => stats.pushed += 1,
                Ok(StagedPush::AlreadyPushed) => stats.already += 1,
                Ok(_) => stats.stopped += 1,
                Err(e) if is_bad_job(&e) => {
                    failed.push((row.id, e.to_string()));
                    continue;
                }
                Err(e) => return Err(e.into()),
            }
            done.push(row.id);
        }
        for (id, error) in &failed {
            let row = rows.iter().find(|r| r.id == *id);
            tracing::error!(
                jid = row.map_or("", |r| r.jid.as_str()),
                tenant = row.map_or("", |r| r.tenant.as_str()),
                %error,
                "job cannot be pushed; kept as failed in fairjob.outbox"
            );
        }
        // 4. Delete.
        sqlx::query("DELETE FROM fairjob.outbox WHERE id = ANY($1)")
            .bind(&done)
            .execute(&self.pool)
            .await?;
        if !failed.is_empty() {
            stats.failed = failed.len();
            let (ids, errors): (Vec<i64>, Vec<String>) = failed.into_iter().unzip();
            sqlx::query(
                "UPDATE fairjob.outbox o SET failed_at = now(), error = f.error, claimed_until = NULL
                 FROM UNNEST($1::int8[], $2::text[]) AS f(id, error) WHERE o.id = f.id",
            )
            .bind(&ids)
            .bind(&errors)
            .execute(&self.pool)
            .await?;
        }
        Ok(stats)
    }

    /// Step 1, the fair claim: returns the rows and the last tenant of this
    /// round (in the database's order).
    async fn claim(&self, cursor: &str) -> Result<(Vec<Claimed>, Option<String>)> {
        let batch = self.batch as i64;
        let mut tenants = self.tenants_after(cursor, batch).await?;
        if (tenants.len() as i64) < batch && !cursor.is_empty() {
            // Wrap around: the tenants up to and including the cursor.
            for t in self.tenants_after("", batch - tenants.len() as i64).await? {
                if !tenants.contains(&t) {
                    tenants.push(t);
                }
            }
        }
        let Some(last) = tenants.last().cloned() else {
            return Ok((Vec::new(), None));
        };
        // Each tenant's oldest rows, taken round by round (every tenant's
        // first, then every tenant's second, …) until the batch is full: a
        // lone tenant fills it, many share it. Reading 4 shares per tenant
        // lets the others fill in for tenants with fewer rows.
        let per = ((batch as usize).div_ceil(tenants.len()) * 4).min(batch as usize) as i64;
        let rows = sqlx::query(
            "UPDATE fairjob.outbox o SET claimed_until = now() + $4 * interval '1 millisecond'
             WHERE o.id IN (
               SELECT id FROM fairjob.outbox WHERE id IN (
                 SELECT c.id FROM UNNEST($1::text[]) WITH ORDINALITY AS t(tenant, ord)
                 CROSS JOIN LATERAL (
                   SELECT id, row_number() OVER (ORDER BY id) AS rn FROM (
                     SELECT id FROM fairjob.outbox
                     WHERE tenant = t.tenant AND failed_at IS NULL
                       AND (claimed_until IS NULL OR claimed_until < now())
                     ORDER BY id LIMIT $2
                   ) x
                 ) c
                 ORDER BY c.rn, t.ord
                 LIMIT $3
               )
               -- Checked again on the row as locked: a row another pump
               -- claimed since this statement's snapshot is left to it.
               AND (claimed_until IS NULL OR claimed_until < now())
               FOR UPDATE SKIP LOCKED
             )
             RETURNING o.id, o.jid, o.tenant, o.default_tenant, o.payload, o.run_at, o.staged",
        )
        .bind(&tenants)
        .bind(per)
        .bind(batch)
        .bind(self.lease.as_millis() as i64)
        .fetch_all(&self.pool)
        .await?;
        let mut out = rows
            .into_iter()
            .map(|r| {
                Ok(Claimed {
                    id: r.try_get("id")?,
                    jid: r.try_get("jid")?,
                    tenant: r.try_get("tenant")?,
                    default_tenant: r.try_get("default_tenant")?,
                    payload: r.try_get("payload")?,
                    run_at: r.try_get("run_at")?,
                    staged: r.try_get("staged")?,
                })
            })
            .collect::<Result<Vec<_>, sqlx::Error>>()?;
        out.sort_by_key(|c| c.id);
        Ok((out, Some(last)))
    }

    /// Up to `limit` tenants with pending rows after `cursor`, in order (a
    /// loose index scan: one index probe per tenant).
    async fn tenants_after(&self, cursor: &str, limit: i64) -> Result<Vec<String>> {
        let first_excluded = cursor.is_empty();
        let tenants: Vec<String> = sqlx::query_scalar(
            "WITH RECURSIVE t(tenant) AS (
               (SELECT tenant FROM fairjob.outbox
                WHERE failed_at IS NULL AND ($3 OR tenant > $1)
                ORDER BY tenant LIMIT 1)
               UNION ALL
               SELECT (SELECT o.tenant FROM fairjob.outbox o
                       WHERE o.failed_at IS NULL AND o.tenant > t.tenant
                       ORDER BY o.tenant LIMIT 1)
               FROM t WHERE t.tenant IS NOT NULL
             )
             SELECT tenant FROM t WHERE tenant IS NOT NULL LIMIT $2",
        )
        .bind(cursor)
        .bind(limit)
        .bind(first_excluded)
        .fetch_all(&self.pool)
        .await?;
        Ok(tenants)
    }
}

/// The wait before the next batch: none after a full batch, the poll
/// interval after a partial one, and doubling up to `max_idle` while idle.
fn next_wait(
    claimed: usize,
    batch: usize,
    wait: Duration,
    poll: Duration,
    max_idle: Duration,
) -> Duration {
    if claimed >= batch {
        Duration::ZERO
    } else if claimed > 0 {
        poll
    } else {
        (wait * 2).clamp(poll, max_idle.max(poll))
    }
}

/// The stored push of a row.
fn decode(row: &Claimed) -> Result<PushJob, fairjob::Error> {
    let payload = Payload::parse(row.payload.clone().into_bytes())
        .map_err(|e| fairjob::Error::Config(format!("stored payload does not decode: {e}")))?;
    let mut job = PushJob::new(payload);
    job.set_default_tenant(row.default_tenant.clone());
    Ok(job)
}

/// A job's own fault (too large, bad queue name, undecodable): not retried.
fn is_bad_job(e: &fairjob::Error) -> bool {
    matches!(
        e,
        fairjob::Error::PayloadTooLarge { .. }
            | fairjob::Error::Config(_)
            | fairjob::Error::Decode { .. }
    )
}

/// A claimed row.
#[derive(Debug)]
struct Claimed {
    id: i64,
    jid: String,
    tenant: String,
    default_tenant: Option<String>,
    payload: String,
    run_at: Option<f64>,
    staged: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_poll_backs_off_when_idle_and_not_while_busy() {
        let (poll, max) = (Duration::from_millis(100), Duration::from_secs(2));
        assert_eq!(next_wait(500, 500, poll, poll, max), Duration::ZERO);
        assert_eq!(next_wait(3, 500, max, poll, max), poll);
        let mut wait = poll;
        let mut seen = Vec::new();
        for _ in 0..7 {
            wait = next_wait(0, 500, wait, poll, max);
            seen.push(wait.as_millis());
        }
        assert_eq!(seen, [200, 400, 800, 1600, 2000, 2000, 2000]);
        // A max below the poll interval means: poll at the interval.
        assert_eq!(next_wait(0, 500, poll, poll, Duration::ZERO), poll);
    }

    #[test]
    fn only_a_jobs_own_faults_keep_its_row_as_failed() {
        let too_large = fairjob::Error::PayloadTooLarge {
            class: "A".into(),
            size: 10,
            max: 1,
        };
        assert!(is_bad_job(&too_large));
        assert!(is_bad_job(&fairjob::Error::Config("bad queue".into())));
        let stopped = fairjob::Error::Stopped {
            class: "A".into(),
            jid: "j".into(),
        };
        assert!(!is_bad_job(&stopped));
    }
}
