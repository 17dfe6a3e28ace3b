//! The pump: moves committed outbox rows into Redis.
//!
//! # One batch
//!
//! 1. **Fair read and claim**, in one transaction per batch. Tenants with
//!    pending rows are taken in order starting after the last tenant served
//!    (a round robin; a loose index scan over `(tenant, id)`), at most
//!    `batch` of them; each gets an equal share of the batch (what tenants
//!    with fewer rows leave goes to the others, in up to three rounds), and
//!    the rows are locked per tenant with `FOR UPDATE SKIP LOCKED`: several
//!    pumps take disjoint rows and none waits on another, and a claim writes
//!    nothing (a pump that dies releases its rows with its connection). One
//!    tenant's 200,000 rows therefore delay another tenant's job by at most
//!    one batch.
//! 2. **Fence.** One call checks that Redis still holds the relay epoch (it
//!    lost no data since the last check; see below).
//! 3. **Push.** Each job goes through the client middleware chain and reroute
//!    rules as a direct push would ([`fairjob::Client::push_staged_marked`]:
//!    bounded script calls sent together, to plain and tenant-sharded queues
//!    alike); the push marks the jid in its queue's slot in the same script
//!    (one `ZADD NX`, which is also the check), and a push whose jid is
//!    marked pushes nothing.
//! 4. **Delete** the rows and commit; then forget the marks.
//!
//! A pump killed at any point loses nothing: its transaction ends with its
//! connection and another pump (or itself) takes the rows again at once.
//! Publishing is idempotent by jid: killed after 3 and before 4's commit,
//! the retry finds the jids marked and pushes nothing twice (a mark left by
//! a crash expires after a week), on one Redis and on a cluster. Rows an
//! older pump marked `staged` are pushed from Redis's staged record, as it
//! did.
//!
//! **Waking up.** Between polls the pump reads the outbox's id sequence
//! every millisecond while jobs come in ([`Pump::probe_interval`]): a new id
//! claims at once, so a job starts a few milliseconds after its commit with
//! no `NOTIFY` in the caller's transaction (a `NOTIFY` takes a lock at
//! commit that serialises every committing transaction). Idle, the probe
//! slows to 40 reads a second (a job committed after a pause waits at most
//! 25 ms), plus the idle polls (one per `max_idle_interval`). A job
//! scheduled for later (`perform_in_tx`) goes to Redis's `schedule` set,
//! where a second push of the same payload is the same entry.
//!
//! A job that cannot be pushed (too large, undecodable, a bad queue name)
//! keeps its row with `failed_at` and `error` set, and is not retried.
//!
//! # Batches and workflows
//!
//! A batch or workflow committed with [`crate::BatchTx::commit_tx`] is one
//! row of kind `batch` (its bid as `jid`, the batch's tenant as `tenant`),
//! claimed in the same fair order as jobs. 5. After the batch's jobs, each
//! claimed batch is committed into Redis by
//! [`PreparedBatch::commit`](fairjob::batch::PreparedBatch::commit), the
//! steps of `Batch::commit` with the stored bid (stage the members in
//! chunks, list, flip open, push the staged members), and its row is
//! deleted. Nothing is runnable before the flip, and everything is after
//! it. The commit is idempotent by bid, so a pump killed anywhere loses
//! nothing and doubles nothing: killed while staging, the next pump stages
//! again (a member or step staged already is not staged twice); killed
//! after the flip, the next pump's flip finds the batch open and pushes
//! only the members still staged (a worker's sweep may push them first,
//! each once); killed before the `DELETE`, the next commit changes
//! nothing. A batch that cannot be committed (see [`crate::BatchTx`]) keeps
//! its row as failed, as a job does. Once a step has run a quarter of the
//! lease, its batch rows not started are handed back to the next step (the
//! first is always started); one commit must fit in half the lease (15 s by
//! default; 100,000 members take a few seconds). Members are published as
//! outbox jobs, never kept until done.
//!
//! # Postgres stays the truth (kept jobs)
//!
//! A job enqueued with [`crate::KeepExt::keep_until_done`], or to one of
//! [`Pump::keep_queues`], is *kept*: step 4 marks its row `published_at`
//! (with the relay epoch it was staged in) instead of deleting it. The
//! worker that acks or buries it records `done`/`dead` and its jid in
//! Redis's completion list, in the script of that ack or burial (one Redis
//! server: no crash falls between a job's end and its record; on a Redis
//! Cluster, right after it); the pump drains that list into the rows
//! (`done_at`, `state`) every [`Pump::check_interval`]: it reads the list's
//! head, writes the rows, and only then removes what it read
//! (`relay_trim.lua`, if the head still holds it), so a pump killed between
//! the read and the write loses no end (the next drain reads it again; an
//! end written twice changes nothing). Finished rows are deleted after
//! [`Pump::retention`].
//!
//! **Redis losing data** is found by the relay epoch: a random token the
//! first pump writes in Redis (`SET NX`) and PostgreSQL remembers
//! (`fairjob.relay`). Every check interval each pump reads it; when Redis's
//! epoch is gone (a `FLUSHALL`, a restart without persistence, a failover
//! to a replica that never had the key) a new one is written, and the pump
//! that sees PostgreSQL's epoch differ drains the completion list, then
//! in one transaction adopts Redis's epoch and makes every kept row that is
//! published and not done pending again (`fairjob.republished` records it).
//! Rows marked done are never republished. Each batch is fenced by the
//! epoch (a `GET`, step 2): a batch after Redis lost data pushes
//! nothing and is re-checked first; a row published in an older epoch (a
//! pump that was mid-batch while another found the loss, or a loss between
//! the fence and the push) is republished at the next check.
//!
//! **A job lost without the epoch** (a failover that kept the epoch key but
//! dropped the last writes): after its push, a kept job's jid joins Redis's
//! live set; the end's record removes it. Each check takes
//! the oldest kept rows published longer than [`Pump::lost_grace`] ago and
//! not done, asks which are not live, drains the completions, and makes the
//! missing ones that are still not done pending again.
//!
//! Not covered: a job that ended in the interval between its end and the
//! drain of its completion (at most one check interval, plus the batch in
//! flight when the check is due) when Redis loses
//! data then runs again (at least once, never lost); a job an operator
//! deletes from Redis's `retry` or `schedule` set stays `published` in
//! PostgreSQL until Redis next loses data, and is then republished.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fairjob::batch::PreparedBatch;
use fairjob::{Client, Payload, PushJob, StagedPush};
use sqlx::{PgPool, Row};

use crate::batch::KIND_BATCH;
use crate::enqueue::{CHANNEL, is_kept, mark_kept};
use crate::error::Result;
use crate::metrics as m;

/// Set in a pump's environment (tests only): after pushing a batch into
/// Redis, the pump hangs before writing anything back to PostgreSQL, so a
/// test can kill it exactly there.
pub const HANG_AFTER_PUSH_ENV: &str = "FAIRJOB_PUMP_TEST_HANG_AFTER_PUSH";

/// Test hook: when this environment variable is set (to a file path), a
/// pump that has read completions from Redis writes that file and hangs
/// before writing them to PostgreSQL, so a test can kill it exactly there.
pub const HANG_AFTER_DRAIN_READ_ENV: &str = "FAIRJOB_PUMP_TEST_HANG_AFTER_DRAIN_READ";

/// Completions read from Redis's list per round trip.
const DRAIN_BATCH: usize = 1000;
/// How often a running pump records itself alive, applies the retention and
/// samples its gauges.
const HEARTBEAT: Duration = Duration::from_secs(5);

/// The pump (see the module docs).
#[derive(Debug, Clone)]
pub struct Pump {
    pool: PgPool,
    client: Client,
    batch: usize,
    poll: Duration,
    max_idle: Duration,
    probe: Duration,
    lease: Duration,
    keep_queues: Arc<HashSet<String>>,
    check_every: Duration,
    retention: Duration,
    grace: Duration,
    listen: bool,
    id: Arc<str>,
    /// The relay epoch this pump last confirmed (`None`: check first).
    epoch: Arc<Mutex<Option<String>>>,
}

/// What one check did (see [`Pump::check`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CheckStats {
    /// Completions drained from Redis into PostgreSQL.
    pub completions: usize,
    /// Kept jobs made pending again because Redis lost data (this pump's doing).
    pub republished: u64,
    /// True when this check found that Redis lost data.
    pub lost: bool,
    /// Kept jobs published longer than the grace and missing from Redis,
    /// made pending again (the epoch unchanged).
    pub missing: u64,
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
    /// Kept rows marked published (they stay until their job ends).
    pub kept: usize,
    /// Batches and workflows committed into Redis now (a commit repeated
    /// after a crash included).
    pub batches: usize,
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
            probe: Duration::from_millis(1),
            lease: Duration::from_secs(30),
            keep_queues: Arc::new(HashSet::new()),
            check_every: Duration::from_secs(1),
            retention: Duration::from_secs(7 * 24 * 3600),
            grace: Duration::from_secs(60),
            listen: false,
            id: pump_id().into(),
            epoch: Arc::new(Mutex::new(None)),
        }
    }

    /// Queues whose jobs are kept until done ("Postgres stays the truth"),
    /// besides jobs enqueued with [`crate::KeepExt::keep_until_done`]. The
    /// queue is the one the job was enqueued for (before reroute rules).
    /// Every pump of a database should be given the same list.
    pub fn keep_queues<I, S>(mut self, queues: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.keep_queues = Arc::new(queues.into_iter().map(Into::into).collect());
        self
    }

    /// How often the pump checks Redis's epoch (a loss of data) and drains
    /// kept jobs' completions into PostgreSQL (default 1 s).
    pub fn check_interval(mut self, d: Duration) -> Self {
        self.check_every = d.max(Duration::from_millis(10));
        self
    }

    /// How long a finished kept row stays before it is deleted (default 7 days).
    pub fn retention(mut self, d: Duration) -> Self {
        self.retention = d;
        self
    }

    /// How long a kept job may be published and missing from Redis's live
    /// set before it counts as lost and is published again (default 60 s).
    pub fn lost_grace(mut self, d: Duration) -> Self {
        self.grace = d;
        self
    }

    /// Also wake on `NOTIFY fairjob_outbox` ([`crate::notify_pumps`]) between
    /// polls (default off: polling only).
    pub fn listen(mut self, on: bool) -> Self {
        self.listen = on;
        self
    }

    /// This pump's id in `fairjob.pumps` (host, pid and a random part).
    pub fn id(&self) -> &str {
        &self.id
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

    /// How often the pump reads the outbox's id sequence while jobs are
    /// coming in (default 1 ms; zero turns the probe off): a new id wakes
    /// it at once, so a committed job starts within milliseconds with no
    /// `NOTIFY` in the caller's transaction. The probe reads one sequence
    /// row (no table, no index); it stays at this interval for a second
    /// after the last new id, then doubles up to 25 ms while idle: about 40
    /// reads a second per pump at idle (each ~0.05 ms round trip), on top
    /// of the idle polls. A new id
    /// whose transaction has not committed yet is claimed again at this
    /// interval for 50 ms, then at doubling waits up to the poll interval.
    /// With [`listen`](Self::listen) on, `NOTIFY` wakes the pump instead.
    pub fn probe_interval(mut self, d: Duration) -> Self {
        self.probe = d;
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
    /// polling with back-off when idle (and woken by `NOTIFY` when
    /// [`listen`](Self::listen) is on); checks the epoch and drains
    /// completions every check interval. Checks the schema first. Errors
    /// (Postgres or Redis down) are logged and retried after the idle wait.
    pub async fn run(self, stop: impl std::future::Future<Output = ()>) -> Result<()> {
        crate::schema::check_schema(&self.pool).await?;
        tokio::pin!(stop);
        let mut cursor = String::new();
        let mut wait = self.poll;
        let mut last_check: Option<Instant> = None;
        let mut last_beat: Option<Instant> = None;
        let mut listener = None;
        let mut probe = Probe::default();
        let mut stopped = false;
        loop {
            if last_check.is_none_or(|t| t.elapsed() >= self.check_every) {
                last_check = Some(Instant::now());
                if let Err(e) = self.bounded(self.check()).await {
                    tracing::warn!(error = %e, "pump check failed; retrying");
                }
            }
            if last_beat.is_none_or(|t| t.elapsed() >= HEARTBEAT) {
                last_beat = Some(Instant::now());
                if let Err(e) = self.bounded(self.heartbeat()).await {
                    tracing::warn!(error = %e, "pump heartbeat failed; retrying");
                }
                if self.listen && listener.is_none() {
                    listener = self.listener().await;
                }
            }
            let claimed = match self.bounded(self.pump_from(&mut cursor)).await {
                Ok(s) => s.claimed,
                Err(e) => {
                    tracing::warn!(error = %e, "pump batch failed; retrying");
                    0
                }
            };
            wait = next_wait(claimed, self.batch, wait, self.poll, self.max_idle);
            if claimed > 0 {
                probe.saw_work();
            } else if let Some(c) = probe.chase_wait(self.probe, self.poll) {
                // The probe saw a new id and the claim found nothing (its
                // transaction had not committed yet): claim again soon.
                wait = c;
            }
            let mut sleep_for =
                sleep_before_check(wait, last_check.map(|t| t.elapsed()), self.check_every);
            // Between polls, the probe: a new id in the outbox's sequence
            // claims at once (and keeps the probe fast for a second).
            if !self.probe.is_zero() && !self.listen && !sleep_for.is_zero() {
                let until = Instant::now() + sleep_for;
                loop {
                    let left = until.saturating_duration_since(Instant::now());
                    let step = probe.next_sleep(self.probe).min(left);
                    tokio::select! {
                        biased;
                        () = &mut stop => {
                            stopped = true;
                            break;
                        }
                        () = tokio::time::sleep(step) => {}
                    }
                    if Instant::now() >= until {
                        break;
                    }
                    match self.bounded(self.last_id()).await {
                        Ok(id) if probe.moved(id) => break,
                        Ok(_) => {}
                        Err(e) => {
                            tracing::debug!(error = %e, "pump probe failed");
                            break;
                        }
                    }
                }
                sleep_for = Duration::ZERO;
                if stopped {
                    break;
                }
            }
            let notified = async {
                match listener.as_mut() {
                    Some(l) => l.recv().await.is_ok(),
                    None => std::future::pending().await,
                }
            };
            // Checked first, also between full batches (a zero sleep).
            tokio::select! {
                biased;
                () = &mut stop => break,
                () = tokio::time::sleep(sleep_for) => {}
                ok = notified => {
                    if ok {
                        wait = self.poll;
                    } else {
                        // Reconnected at the next heartbeat.
                        listener = None;
                    }
                }
            }
        }
        let _ = sqlx::query("DELETE FROM fairjob.pumps WHERE id = $1")
            .bind(&*self.id)
            .execute(&self.pool)
            .await;
        Ok(())
    }

    /// A step of the loop, cut off after half the lease: a connection that
    /// hangs (a server that went away and came back) must not stop the pump.
    /// Every step can be cut anywhere: its rows are claimed again, its push
    /// is idempotent.
    async fn bounded<T>(&self, step: impl std::future::Future<Output = Result<T>>) -> Result<T> {
        let limit = (self.lease / 2).max(Duration::from_secs(1));
        match tokio::time::timeout(limit, step).await {
            Ok(r) => r,
            Err(_) => Err(crate::Error::Stalled(limit)),
        }
    }

    async fn listener(&self) -> Option<sqlx::postgres::PgListener> {
        let mut l = match sqlx::postgres::PgListener::connect_with(&self.pool).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "cannot LISTEN; polling only for now");
                return None;
            }
        };
        match l.listen(CHANNEL).await {
            Ok(()) => Some(l),
            Err(e) => {
                tracing::warn!(error = %e, "cannot LISTEN; polling only for now");
                None
            }
        }
    }

    /// Records this pump alive, deletes finished rows past the retention
    /// (a bounded batch) and sets the backlog gauges.
    pub async fn heartbeat(&self) -> Result<()> {
        sqlx::query(
            "INSERT INTO fairjob.pumps (id, host, pid) VALUES ($1, $2, $3)
             ON CONFLICT (id) DO UPDATE SET seen_at = now()",
        )
        .bind(&*self.id)
        .bind(gethostname::gethostname().to_string_lossy().into_owned())
        .bind(std::process::id() as i32)
        .execute(&self.pool)
        .await?;
        sqlx::query("DELETE FROM fairjob.pumps WHERE seen_at < now() - interval '1 hour'")
            .execute(&self.pool)
            .await?;
        let removed = self.retain().await?;
        if removed > 0 {
            tracing::debug!(removed, "finished rows past the retention deleted");
        }
        let (backlog, lag): (i64, Option<f64>) = sqlx::query_as(
            "SELECT count(*), extract(epoch FROM now() - min(created_at))::float8
             FROM fairjob.outbox
             WHERE failed_at IS NULL AND published_at IS NULL AND done_at IS NULL",
        )
        .fetch_one(&self.pool)
        .await?;
        let alive: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM fairjob.pumps WHERE seen_at > now() - $1::interval",
        )
        .bind(crate::status::ALIVE_SQL)
        .fetch_one(&self.pool)
        .await?;
        ::metrics::gauge!(m::BACKLOG).set(backlog as f64);
        ::metrics::gauge!(m::LAG_SECONDS).set(lag.unwrap_or(0.0).max(0.0));
        ::metrics::gauge!(m::PUMPS_ALIVE).set(alive as f64);
        Ok(())
    }

    /// Deletes up to 5,000 finished rows older than the retention; returns
    /// how many.
    pub async fn retain(&self) -> Result<u64> {
        let done = sqlx::query(
            "DELETE FROM fairjob.outbox WHERE id IN (
               SELECT id FROM fairjob.outbox
               WHERE done_at IS NOT NULL AND done_at < now() - $1 * interval '1 millisecond'
               LIMIT 5000)",
        )
        .bind(self.retention.as_millis() as i64)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }

    /// Drains kept jobs' completions from Redis into PostgreSQL, then checks
    /// the relay epoch: when Redis lost data, republishes every kept job that
    /// is published and not done (see the module docs).
    pub async fn check(&self) -> Result<CheckStats> {
        let mut stats = CheckStats {
            completions: self.drain().await?,
            ..CheckStats::default()
        };
        let (epoch, republished) = self.confirm_epoch().await?;
        if let Some(n) = republished {
            stats.lost = true;
            stats.republished = n;
        } else {
            stats.missing = self.find_missing(&epoch).await?;
        }
        *self.epoch.lock().expect("epoch lock") = Some(epoch);
        Ok(stats)
    }

    /// Moves completions from Redis's list into the rows: reads the list's
    /// head, writes PostgreSQL, and only then removes what it read (if the
    /// head still holds it: another pump may have drained it first). A pump
    /// killed or failing in between removed nothing; writing an end twice
    /// changes nothing (`done_at IS NULL`).
    async fn drain(&self) -> Result<usize> {
        let mut total = 0;
        for _ in 0..50 {
            let read = self.client.peek_relay_ends(DRAIN_BATCH).await?;
            if read.entries_read() == 0 {
                break;
            }
            if let Some(path) = std::env::var_os(HANG_AFTER_DRAIN_READ_ENV) {
                tracing::warn!(
                    "{HANG_AFTER_DRAIN_READ_ENV} is set: hanging between reading completions and writing them to PostgreSQL"
                );
                let _ = std::fs::write(path, b"hanging\n");
                std::future::pending::<()>().await;
            }
            let (jids, states): (Vec<&str>, Vec<&str>) = read
                .ends
                .iter()
                .map(|(e, jid)| (jid.as_str(), e.as_str()))
                .unzip();
            sqlx::query(
                "UPDATE fairjob.outbox o SET done_at = now(), state = e.state, claimed_until = NULL
                 FROM UNNEST($1::text[], $2::text[]) AS e(jid, state)
                 WHERE o.jid = e.jid AND o.done_at IS NULL",
            )
            .bind(&jids)
            .bind(&states)
            .execute(&self.pool)
            .await?;
            if !self.client.trim_relay_ends(&read).await? {
                break; // another pump drains the list too
            }
            for (end, _) in &read.ends {
                ::metrics::counter!(m::COMPLETIONS_TOTAL, "state" => end.as_str()).increment(1);
            }
            total += read.ends.len();
            if read.entries_read() < DRAIN_BATCH {
                break;
            }
        }
        Ok(total)
    }

    /// Reads Redis's epoch (writing one when it is gone) and makes PostgreSQL
    /// agree with it: when they differ, Redis lost data and every kept job
    /// that is published in another epoch and not done is made pending again.
    /// Returns the epoch and, when this pump made that change, how many rows
    /// it republished.
    async fn confirm_epoch(&self) -> Result<(String, Option<u64>)> {
        let redis = self.client.relay_epoch(&fairjob::wire::new_jid()).await?;
        let pg: Option<String> = sqlx::query_scalar("SELECT epoch FROM fairjob.relay WHERE id = 1")
            .fetch_optional(&self.pool)
            .await?;
        if pg.as_deref() == Some(redis.as_str()) {
            return Ok((redis, None));
        }
        let mut tx = self.pool.begin().await?;
        let locked: Option<String> =
            sqlx::query_scalar("SELECT epoch FROM fairjob.relay WHERE id = 1 FOR UPDATE")
                .fetch_optional(&mut *tx)
                .await?;
        if locked.as_deref() == Some(redis.as_str()) {
            // Another pump made them agree meanwhile.
            tx.commit().await?;
            return Ok((redis, None));
        }
        sqlx::query(
            "INSERT INTO fairjob.relay (id, epoch) VALUES (1, $1)
             ON CONFLICT (id) DO UPDATE SET epoch = excluded.epoch, changed_at = now()",
        )
        .bind(&redis)
        .execute(&mut *tx)
        .await?;
        let republished = sqlx::query(
            "UPDATE fairjob.outbox SET published_at = NULL, published_epoch = NULL,
                 staged = false, claimed_until = NULL
             WHERE published_at IS NOT NULL AND done_at IS NULL
               AND published_epoch IS DISTINCT FROM $1",
        )
        .bind(&redis)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        // A staged jid is gone with the data: stage pending rows again.
        sqlx::query(
            "UPDATE fairjob.outbox SET staged = false
             WHERE staged AND published_at IS NULL AND done_at IS NULL",
        )
        .execute(&mut *tx)
        .await?;
        if locked.is_some() {
            sqlx::query(
                "INSERT INTO fairjob.republished (old_epoch, epoch, jobs, pump) VALUES ($1, $2, $3, $4)",
            )
            .bind(&locked)
            .bind(&redis)
            .bind(republished as i64)
            .bind(&*self.id)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        if locked.is_none() {
            tracing::info!(epoch = %redis, "relay epoch recorded in PostgreSQL");
            return Ok((redis, None));
        }
        ::metrics::counter!(m::REPUBLISH_EVENTS_TOTAL).increment(1);
        ::metrics::counter!(m::REPUBLISHED_TOTAL).increment(republished);
        tracing::warn!(
            old_epoch = locked.as_deref().unwrap_or(""),
            epoch = %redis,
            republished,
            "Redis lost data (its relay epoch changed): every kept job not done is published again"
        );
        Ok((redis, Some(republished)))
    }

    /// Kept jobs published longer than the grace ago, not done, and missing
    /// from Redis's live set (the oldest 1,000): Redis lost them without
    /// losing its epoch (a failover that dropped the last writes). The
    /// completions are drained after the membership read, so a job that
    /// ended meanwhile is marked done first and stays done.
    async fn find_missing(&self, epoch: &str) -> Result<u64> {
        let jids: Vec<String> = sqlx::query_scalar(
            "SELECT jid FROM fairjob.outbox
             WHERE published_at IS NOT NULL AND done_at IS NULL
               AND published_at < now() - $1 * interval '1 millisecond'
             ORDER BY published_at LIMIT 1000",
        )
        .bind(self.grace.as_millis() as i64)
        .fetch_all(&self.pool)
        .await?;
        let missing = self.client.relay_missing(&jids).await?;
        if missing.is_empty() {
            return Ok(0);
        }
        self.drain().await?;
        let mut tx = self.pool.begin().await?;
        let n = sqlx::query(
            "UPDATE fairjob.outbox SET published_at = NULL, published_epoch = NULL,
                 staged = false, claimed_until = NULL
             WHERE jid = ANY($1) AND published_at IS NOT NULL AND done_at IS NULL",
        )
        .bind(&missing)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if n > 0 {
            sqlx::query(
                "INSERT INTO fairjob.republished (old_epoch, epoch, jobs, pump) VALUES ($1, $1, $2, $3)",
            )
            .bind(epoch)
            .bind(n as i64)
            .bind(&*self.id)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        if n > 0 {
            ::metrics::counter!(m::REPUBLISH_EVENTS_TOTAL).increment(1);
            ::metrics::counter!(m::REPUBLISHED_TOTAL).increment(n);
            tracing::warn!(
                republished = n,
                "kept jobs missing from Redis past the grace: published again"
            );
        }
        Ok(n)
    }

    /// The epoch to stage in: the one last confirmed, else a check's.
    async fn current_epoch(&self) -> Result<String> {
        if let Some(e) = self.epoch.lock().expect("epoch lock").clone() {
            return Ok(e);
        }
        self.check().await?;
        Ok(self
            .epoch
            .lock()
            .expect("epoch lock")
            .clone()
            .unwrap_or_default())
    }

    /// The outbox's id sequence as it stands (ids taken by transactions
    /// that have not committed yet included): one sequence row, no table.
    async fn last_id(&self) -> Result<i64> {
        Ok(
            sqlx::query_scalar("SELECT last_value FROM fairjob.outbox_id_seq")
                .fetch_one(&self.pool)
                .await?,
        )
    }

    /// One batch, starting the tenant round robin at the beginning.
    pub async fn pump_once(&self) -> Result<PumpStats> {
        self.pump_from(&mut String::new()).await
    }

    /// One batch; `cursor` is the last tenant served (the round robin's position).
    async fn pump_from(&self, cursor: &mut String) -> Result<PumpStats> {
        let epoch = self.current_epoch().await?;
        let started = Instant::now();
        // The batch's transaction: its row locks are the claim, and the
        // rows' fate (deleted, published, failed) commits with it.
        let mut tx = self.pool.begin().await?;
        let (rows, last_tenant) = self.claim(&mut tx, cursor).await?;
        let mut stats = PumpStats {
            claimed: rows.len(),
            ..PumpStats::default()
        };
        if rows.is_empty() {
            tx.commit().await?;
            return Ok(stats);
        }
        if let Some(last) = last_tenant {
            *cursor = last;
        }
        // Batches are committed after the jobs (step 5), past this
        // transaction: they keep a lease instead of a lock.
        let (batches, rows): (Vec<Claimed>, Vec<Claimed>) =
            rows.into_iter().partition(|r| r.kind == KIND_BATCH);
        if !batches.is_empty() {
            let ids: Vec<i64> = batches.iter().map(|r| r.id).collect();
            sqlx::query(
                "UPDATE fairjob.outbox SET claimed_until = now() + $2 * interval '1 millisecond'
                 WHERE id = ANY($1)",
            )
            .bind(&ids)
            .bind(self.lease.as_millis() as i64)
            .execute(&mut *tx)
            .await?;
        }
        // Decode, and mark the jobs of kept queues.
        let mut failed: Vec<(i64, String)> = Vec::new();
        let mut jobs: Vec<(&Claimed, PushJob, bool)> = Vec::with_capacity(rows.len());
        for row in &rows {
            match decode(row) {
                Ok(mut job) => {
                    let kept = row.keep
                        || is_kept(job.payload())
                        || self.keep_queues.contains(&job.payload().queue());
                    if kept && !is_kept(job.payload()) {
                        mark_kept(&mut job);
                    }
                    jobs.push((row, job, kept));
                }
                Err(e) => failed.push((row.id, failure(&e, &row.jid))),
            }
        }
        // 2. The fence: Redis still holds the relay epoch (it lost no data
        // since the last check). Nothing is staged: each push marks its jid.
        if !jobs.is_empty() && self.client.relay_epoch_read().await?.as_deref() != Some(&epoch) {
            // Release the batch (the rollback) and check before pushing anything.
            tx.rollback().await?;
            *self.epoch.lock().expect("epoch lock") = None;
            self.check().await?;
            return Ok(PumpStats::default());
        }
        // 3. Push: scheduled jobs one by one, the others in one marked batch.
        let mut gone = Vec::with_capacity(rows.len()); // outbox rows to delete
        let mut published = Vec::new(); // kept rows Redis has now
        let mut stopped = Vec::new(); // kept rows a middleware stopped
        let mut now_rows = Vec::new();
        let mut now_jobs = Vec::new();
        let mut legacy_rows = Vec::new();
        let mut legacy_jobs = Vec::new();
        for (row, job, kept) in jobs {
            match row.run_at {
                Some(at) => {
                    let at = std::time::UNIX_EPOCH + Duration::from_secs_f64(at.max(0.0));
                    match self.client.push_at(job, at).await {
                        Ok(_) => {
                            stats.pushed += 1;
                            if kept {
                                published.push(row.id)
                            } else {
                                gone.push(row.id)
                            }
                        }
                        Err(e) if is_bad_job(&e) => failed.push((row.id, failure(&e, &row.jid))),
                        Err(e) => return Err(e.into()),
                    }
                }
                // Staged by an older pump (its jid in the staged record, not
                // marked): pushed from the staged record, as it did.
                None if row.staged => {
                    legacy_rows.push((row, kept));
                    legacy_jobs.push(job);
                }
                None => {
                    now_rows.push((row, kept));
                    now_jobs.push(job);
                }
            }
        }
        // Each push marks its jid in its queue's slot: if this transaction
        // never commits (a crash, a lost connection), the rows are claimed
        // again and the marks stop a second push.
        let (mut results, marks) = self.client.push_staged_marked(now_jobs).await?;
        if !legacy_jobs.is_empty() {
            results.extend(self.client.push_staged_many(legacy_jobs).await?);
            now_rows.extend(legacy_rows);
        }
        for ((row, kept), result) in now_rows.into_iter().zip(results) {
            let was_stopped = match result {
                Ok(StagedPush::Pushed) => {
                    stats.pushed += 1;
                    false
                }
                Ok(StagedPush::AlreadyPushed) => {
                    stats.already += 1;
                    false
                }
                Ok(_) => {
                    stats.stopped += 1;
                    true
                }
                Err(e) if is_bad_job(&e) => {
                    failed.push((row.id, failure(&e, &row.jid)));
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            match (kept, was_stopped) {
                (false, _) => gone.push(row.id),
                (true, false) => published.push(row.id),
                (true, true) => stopped.push(row.id),
            }
        }
        if !published.is_empty() {
            let jids: Vec<String> = rows
                .iter()
                .filter(|r| published.contains(&r.id))
                .map(|r| r.jid.clone())
                .collect();
            self.client.mark_relay_live(&jids).await?;
        }
        if !rows.is_empty() && std::env::var_os(HANG_AFTER_PUSH_ENV).is_some() {
            tracing::warn!(
                "{HANG_AFTER_PUSH_ENV} is set: hanging between the Redis push and the PostgreSQL update"
            );
            std::future::pending::<()>().await;
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
        // 4. Delete (outbox) or mark published (kept).
        if !gone.is_empty() {
            sqlx::query("DELETE FROM fairjob.outbox WHERE id = ANY($1)")
                .bind(&gone)
                .execute(&mut *tx)
                .await?;
        }
        if !published.is_empty() {
            stats.kept = published.len();
            sqlx::query(
                "UPDATE fairjob.outbox SET published_at = now(), published_epoch = $2,
                     keep = true, claimed_until = NULL
                 WHERE id = ANY($1)",
            )
            .bind(&published)
            .bind(&epoch)
            .execute(&mut *tx)
            .await?;
        }
        if !stopped.is_empty() {
            sqlx::query(
                "UPDATE fairjob.outbox SET done_at = now(), state = 'stopped', keep = true,
                     claimed_until = NULL
                 WHERE id = ANY($1)",
            )
            .bind(&stopped)
            .execute(&mut *tx)
            .await?;
        }
        if !failed.is_empty() {
            stats.failed = failed.len();
            let (ids, errors): (Vec<i64>, Vec<String>) = failed.into_iter().unzip();
            sqlx::query(
                "UPDATE fairjob.outbox o SET failed_at = now(), error = f.error, claimed_until = NULL
                 FROM UNNEST($1::int8[], $2::text[]) AS f(id, error) WHERE o.id = f.id",
            )
            .bind(&ids)
            .bind(&errors)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        // Noted: the marks have done their work (one left by a failure here
        // expires with its queue's marks).
        if !marks.is_empty()
            && let Err(e) = self.client.forget_push_marks(&marks).await
        {
            tracing::warn!(error = %e, "could not forget a batch's push marks; they expire");
        }
        ::metrics::counter!(m::PUSHED_TOTAL).increment(stats.pushed as u64);
        ::metrics::counter!(m::FAILED_TOTAL).increment(stats.failed as u64);
        // 5. Batches and workflows, each committed whole.
        if !batches.is_empty() {
            self.publish_batches(batches, started, &mut stats).await?;
        }
        Ok(stats)
    }

    /// Step 5: commits each claimed batch row into Redis through the same
    /// steps as `Batch::commit`, with the bid stored in it, then deletes the
    /// row (one by one: a batch committed is never committed again by this
    /// pump). A pump killed at any point leaves the row claimed; the next
    /// pump repeats the commit, which stages, flips and pushes nothing
    /// twice. Once the step has run a quarter of the lease, the rows not
    /// started are handed back (a step is abandoned after half of it); the
    /// first is always started, so batches make progress whatever the lease.
    async fn publish_batches(
        &self,
        rows: Vec<Claimed>,
        started: Instant,
        stats: &mut PumpStats,
    ) -> Result<()> {
        let mut rows = rows.into_iter().enumerate();
        while let Some((i, row)) = rows.next() {
            if i > 0 && started.elapsed() > self.lease / 4 {
                let ids: Vec<i64> = std::iter::once(row.id)
                    .chain(rows.map(|(_, r)| r.id))
                    .collect();
                sqlx::query("UPDATE fairjob.outbox SET claimed_until = NULL WHERE id = ANY($1)")
                    .bind(&ids)
                    .execute(&self.pool)
                    .await?;
                break;
            }
            let committed = match PreparedBatch::from_json(&row.payload) {
                Ok(batch) => batch.commit(&self.client).await,
                Err(e) => Err(e),
            };
            match committed {
                Ok(bid) => {
                    tracing::debug!(bid = %bid, tenant = %row.tenant, "batch committed from the outbox");
                    if std::env::var_os(HANG_AFTER_PUSH_ENV).is_some() {
                        tracing::warn!(
                            "{HANG_AFTER_PUSH_ENV} is set: hanging between the batch's commit in Redis and the PostgreSQL update"
                        );
                        std::future::pending::<()>().await;
                    }
                    sqlx::query("DELETE FROM fairjob.outbox WHERE id = $1")
                        .bind(row.id)
                        .execute(&self.pool)
                        .await?;
                    stats.batches += 1;
                    ::metrics::counter!(m::BATCHES_TOTAL).increment(1);
                }
                Err(e) if is_bad_batch(&e) => {
                    let error = failure(&e, &row.jid);
                    tracing::error!(
                        bid = %row.jid,
                        tenant = %row.tenant,
                        %error,
                        "batch cannot be committed; kept as failed in fairjob.outbox"
                    );
                    sqlx::query(
                        "UPDATE fairjob.outbox SET failed_at = now(), error = $2, claimed_until = NULL
                         WHERE id = $1",
                    )
                    .bind(row.id)
                    .bind(&error)
                    .execute(&self.pool)
                    .await?;
                    stats.failed += 1;
                    ::metrics::counter!(m::FAILED_TOTAL).increment(1);
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Step 1, the fair claim, in the pump's transaction `tx`: locks the
    /// rows (`FOR UPDATE SKIP LOCKED` per tenant, so pumps take disjoint rows
    /// and none waits on another) and returns them with the last tenant of
    /// this round (in the database's order). Each tenant gets an equal share
    /// of the batch; what tenants with fewer rows leave goes to those that
    /// filled theirs, in up to three rounds. Nothing is written: the locks
    /// end with the transaction (a pump that dies releases its rows at once).
    async fn claim(
        &self,
        tx: &mut sqlx::PgConnection,
        cursor: &str,
    ) -> Result<(Vec<Claimed>, Option<String>)> {
        let batch = self.batch;
        let mut tenants = self.tenants_after(&mut *tx, cursor, batch as i64).await?;
        if tenants.len() < batch && !cursor.is_empty() {
            // Wrap around: the tenants up to and including the cursor.
            for t in self
                .tenants_after(&mut *tx, "", (batch - tenants.len()) as i64)
                .await?
            {
                if !tenants.contains(&t) {
                    tenants.push(t);
                }
            }
        }
        let Some(last) = tenants.last().cloned() else {
            return Ok((Vec::new(), None));
        };
        let mut out: Vec<Claimed> = Vec::new();
        let mut open = tenants;
        for _round in 0..3 {
            let left = batch.saturating_sub(out.len());
            if left == 0 || open.is_empty() {
                break;
            }
            let share = left.div_ceil(open.len());
            let taken: Vec<i64> = out.iter().map(|c| c.id).collect();
            let rows = sqlx::query(
                "SELECT c.id, c.jid, c.tenant, c.default_tenant, c.payload, c.run_at, c.staged,
                        c.keep, c.kind
                 FROM UNNEST($1::text[]) AS t(tenant)
                 CROSS JOIN LATERAL (
                   SELECT o.id, o.jid, o.tenant, o.default_tenant, o.payload, o.run_at,
                          o.staged, o.keep, o.kind
                   FROM fairjob.outbox o
                   WHERE o.tenant = t.tenant AND o.failed_at IS NULL
                     AND o.published_at IS NULL AND o.done_at IS NULL
                     AND (o.claimed_until IS NULL OR o.claimed_until < now())
                     AND NOT (o.id = ANY($3))
                   ORDER BY o.id LIMIT $2
                   FOR UPDATE SKIP LOCKED
                 ) c",
            )
            .bind(&open)
            .bind(share as i64)
            .bind(&taken)
            .fetch_all(&mut *tx)
            .await?;
            let mut per: std::collections::HashMap<String, usize> = Default::default();
            for r in rows {
                let c = Claimed {
                    id: r.try_get("id")?,
                    jid: r.try_get("jid")?,
                    tenant: r.try_get("tenant")?,
                    default_tenant: r.try_get("default_tenant")?,
                    payload: r.try_get("payload")?,
                    run_at: r.try_get("run_at")?,
                    staged: r.try_get("staged")?,
                    keep: r.try_get("keep")?,
                    kind: r.try_get("kind")?,
                };
                *per.entry(c.tenant.clone()).or_default() += 1;
                out.push(c);
            }
            // Only tenants that filled their share may have more.
            open.retain(|t| per.get(t).copied().unwrap_or(0) >= share);
        }
        // Equal shares may pass the batch size by less than a row per
        // tenant: those rows are locked, so they go too.
        out.sort_by_key(|c| c.id);
        Ok((out, Some(last)))
    }

    /// Up to `limit` tenants with pending rows after `cursor`, in order (a
    /// loose index scan: one index probe per tenant).
    async fn tenants_after(
        &self,
        tx: &mut sqlx::PgConnection,
        cursor: &str,
        limit: i64,
    ) -> Result<Vec<String>> {
        let first_excluded = cursor.is_empty();
        let tenants: Vec<String> = sqlx::query_scalar(
            "WITH RECURSIVE t(tenant) AS (
               (SELECT tenant FROM fairjob.outbox
                WHERE failed_at IS NULL AND published_at IS NULL AND done_at IS NULL
                  AND ($3 OR tenant > $1)
                ORDER BY tenant LIMIT 1)
               UNION ALL
               SELECT (SELECT o.tenant FROM fairjob.outbox o
                       WHERE o.failed_at IS NULL AND o.published_at IS NULL
                         AND o.done_at IS NULL AND o.tenant > t.tenant
                       ORDER BY o.tenant LIMIT 1)
               FROM t WHERE t.tenant IS NOT NULL
             )
             SELECT tenant FROM t WHERE tenant IS NOT NULL LIMIT $2",
        )
        .bind(cursor)
        .bind(limit)
        .bind(first_excluded)
        .fetch_all(&mut *tx)
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

/// The pump's probe of the outbox's id sequence: the last id seen, how fast
/// to look while idle, and the chase of an id not yet committed.
#[derive(Debug, Default)]
struct Probe {
    seen: Option<i64>,
    last_move: Option<Instant>,
    idle_step: Duration,
    /// Since when the claims chase a new id, and the last wait.
    chase: Option<(Instant, Duration)>,
}

/// How long the probe stays at its interval after the last new id.
const PROBE_WARM: Duration = Duration::from_secs(1);
/// The slowest the probe gets while idle.
/// A job committed after a pause waits for at most this: the first jobs of
/// a burst would otherwise wait the whole step (200 ms here once put the
/// first 24 jobs of a 200/s stream 85–121 ms late, the p99 of 2,000).
const PROBE_IDLE_MAX: Duration = Duration::from_millis(25);
/// How long claims repeat at the probe's interval after a new id whose
/// transaction has not committed yet (an id is taken at `INSERT`, seen at
/// `COMMIT`: usually a millisecond or two apart, more on a loaded server);
/// then they back off, doubling up to the poll interval.
const CHASE_FAST: Duration = Duration::from_millis(50);

impl Probe {
    /// The sleep before the next read: the interval while ids came in
    /// within [`PROBE_WARM`], else doubling up to [`PROBE_IDLE_MAX`].
    fn next_sleep(&mut self, interval: Duration) -> Duration {
        if self.last_move.is_some_and(|t| t.elapsed() < PROBE_WARM) {
            self.idle_step = interval;
            return interval;
        }
        self.idle_step = (self.idle_step * 2).clamp(interval, PROBE_IDLE_MAX.max(interval));
        self.idle_step
    }

    /// Records a read; true when the sequence moved past the last one seen
    /// (the first read only sets the mark): the claims chase the new id.
    fn moved(&mut self, id: i64) -> bool {
        let moved = self.seen.is_some_and(|s| id > s);
        if moved {
            self.last_move = Some(Instant::now());
            self.chase = Some((Instant::now(), Duration::ZERO));
        }
        if self.seen.is_none_or(|s| id > s) {
            self.seen = Some(id);
        }
        moved
    }

    /// A claim found rows: the chase is over and the probe stays fast for a
    /// while (a fresh sequence's first id does not move it; work does).
    fn saw_work(&mut self) {
        self.last_move = Some(Instant::now());
        self.chase = None;
    }

    /// After a claim that found nothing: the wait before the next claim while
    /// a chase is on (`interval` for [`CHASE_FAST`], then doubling), `None`
    /// once the waits reach the poll interval (the poll takes over).
    fn chase_wait(&mut self, interval: Duration, poll: Duration) -> Option<Duration> {
        let (since, last) = self.chase?;
        let next = if since.elapsed() < CHASE_FAST {
            interval
        } else {
            (last * 2).max(interval)
        };
        if next >= poll {
            self.chase = None;
            return None;
        }
        self.chase = Some((since, next));
        Some(next)
    }
}

/// How long the loop sleeps: the poll's `wait`, but never past the next
/// check (`since_check` after the last one), so completions are drained
/// every check interval — late by at most the batch in flight when it is due.
fn sleep_before_check(
    wait: Duration,
    since_check: Option<Duration>,
    check_every: Duration,
) -> Duration {
    let until_check = since_check.map_or(Duration::ZERO, |s| check_every.saturating_sub(s));
    wait.min(until_check)
}

/// The stored push of a row.
fn decode(row: &Claimed) -> Result<PushJob, fairjob::Error> {
    let payload = Payload::parse(row.payload.clone().into_bytes())
        .map_err(|e| fairjob::Error::Config(format!("stored payload does not decode: {e}")))?;
    let mut job = PushJob::new(payload);
    job.set_default_tenant(row.default_tenant.clone());
    Ok(job)
}

/// The error kept in a failed row: what went wrong, and what fixes it.
fn failure(e: &fairjob::Error, jid: &str) -> String {
    let fix = match e {
        fairjob::Error::PayloadTooLarge { .. } => {
            "make the job smaller or raise the pushing client's max_payload_bytes"
        }
        _ => "correct the row's payload (or the pushing client's settings)",
    };
    format!(
        "{e}. Kept in fairjob.outbox, never retried: {fix}, then run `UPDATE fairjob.outbox SET failed_at = NULL, error = NULL, staged = false WHERE jid = '{jid}'` and a pump pushes it"
    )
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

/// A batch's own fault: a member's (see [`is_bad_job`]), a stored batch
/// that does not decode, one the client refuses (a workflow or child batch
/// on a Redis Cluster, a middleware stopping a step, a unique member), or
/// a parent batch gone or finished. Not retried.
fn is_bad_batch(e: &fairjob::Error) -> bool {
    is_bad_job(e)
        || matches!(
            e,
            fairjob::Error::Malformed(_)
                | fairjob::Error::Batch(_)
                | fairjob::Error::Workflow(_)
                | fairjob::Error::NoSuchBatch { .. }
                | fairjob::Error::BatchFinished { .. }
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
    keep: bool,
    /// `job`, or `batch` (the payload is a prepared batch).
    kind: String,
}

/// `host:pid:random`.
fn pump_id() -> String {
    let host = gethostname::gethostname().to_string_lossy().into_owned();
    let jid = fairjob::wire::new_jid();
    format!("{host}:{}:{}", std::process::id(), &jid[..8])
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
    fn the_probe_claims_on_a_new_id_and_slows_down_while_idle() {
        let ms = Duration::from_millis;
        let mut p = Probe::default();
        assert!(!p.moved(10), "the first read sets the mark");
        assert!(!p.moved(10));
        // Idle: doubling from the interval up to 25 ms.
        let idle: Vec<u128> = (0..8).map(|_| p.next_sleep(ms(1)).as_millis()).collect();
        assert_eq!(idle, [1, 2, 4, 8, 16, 25, 25, 25]);
        assert!(p.moved(11), "a new id");
        assert!(!p.moved(11));
        assert_eq!(p.next_sleep(ms(1)), ms(1), "fast again after a new id");
        assert!(!p.moved(9), "a lower read never moves it back");
    }

    #[test]
    fn a_chase_claims_at_the_interval_then_backs_off_to_the_poll() {
        let ms = Duration::from_millis;
        let mut p = Probe::default();
        assert_eq!(p.chase_wait(ms(1), ms(100)), None, "no new id: no chase");
        p.moved(1);
        assert!(p.moved(2));
        for _ in 0..5 {
            assert_eq!(p.chase_wait(ms(1), ms(100)), Some(ms(1)), "fast at first");
        }
        // Past CHASE_FAST: doubling, and over when it reaches the poll.
        p.chase = Some((Instant::now() - CHASE_FAST, ms(1)));
        let late: Vec<Option<u128>> = (0..8)
            .map(|_| p.chase_wait(ms(1), ms(100)).map(|d| d.as_millis()))
            .collect();
        assert_eq!(
            late,
            [
                Some(2),
                Some(4),
                Some(8),
                Some(16),
                Some(32),
                Some(64),
                None,
                None
            ]
        );
        // Work ends a chase; a new id starts one.
        assert!(p.moved(3));
        p.saw_work();
        assert_eq!(p.chase_wait(ms(1), ms(100)), None);
    }

    #[test]
    fn the_loop_never_sleeps_past_the_next_check() {
        let s = Duration::from_millis;
        let every = s(1000);
        // Idle back-off of 2 s, 300 ms after a check: wake for the check at 1 s.
        assert_eq!(sleep_before_check(s(2000), Some(s(300)), every), s(700));
        // A batch ran past the check's time: no sleep, the check comes first.
        assert_eq!(sleep_before_check(s(100), Some(s(1200)), every), s(0));
        // A short poll wins.
        assert_eq!(sleep_before_check(s(100), Some(s(0)), every), s(100));
        assert_eq!(sleep_before_check(s(100), None, every), s(0));
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
