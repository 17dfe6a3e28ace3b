//! Periodic schedules' state changes: store, reconcile (in bounded steps,
//! `cron_reconcile.lua`), pause, resume, remove (`cron_set.lua`,
//! single-slot pipelines), and
//! the poller's steps: claim a fire time (`cron_claim.lua`), take over a
//! claim whose poller died (`cron_redrive.lua`), forget a finished run
//! (`cron_release.lua`). Every key has the `{cron}` hash tag: one slot. The
//! push of a claimed job goes through [`RedisBroker::push`] with the firing
//! record as its source, which removes the claim in the push's own step.

use std::time::Duration;

use super::RedisBroker;
use super::scripts::{CRON_CLAIM, CRON_RECONCILE, CRON_REDRIVE, CRON_RELEASE, CRON_SET};
use crate::error::Result;

/// What became of a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CronClaim {
    /// This caller owns the fire time: its job is in the firing record.
    Claimed,
    /// Another poller moved the schedule on first (or the fire time was
    /// already taken): nothing to do.
    Stale,
    /// The schedule was removed or paused meanwhile.
    Gone,
    /// The fire times were missed and skipped (catch-up policy).
    Missed,
    /// Skipped: the previous run is still queued or running.
    SkippedOverlap,
}

/// One claim, as the poller decided it.
#[derive(Debug, Clone)]
pub struct ClaimSpec<'a> {
    /// The schedule.
    pub name: &'a str,
    /// The next fire time the decision was made on (Unix seconds).
    pub expected: i64,
    /// The fire time to enqueue, if any, with its job's jid and payload.
    pub fire: Option<(i64, &'a str, &'a str)>,
    /// The next fire time afterwards (`None`: never).
    pub next: Option<i64>,
    /// Skip while the previous run is live.
    pub skip_overlap: bool,
    /// Fire times were missed.
    pub missed: bool,
}

/// Declared schedules per `apply` step of a start-up reconciliation (about
/// 7 µs of Redis each), and the `SSCAN` page of its `sweep` steps, so a step
/// stays well under a millisecond whatever the number of schedules
/// (`cron_bench`: docs/benchmarks-history.md).
pub(crate) const RECONCILE_CHUNK: usize = 25;
const SWEEP_BATCH: usize = 50;
/// How long an abandoned reconciliation's declared set lives (its worker died
/// midway; the next start redoes the whole reconciliation).
const DECLARED_TTL: Duration = Duration::from_secs(600);

fn opt(n: Option<i64>) -> String {
    n.map(|n| n.to_string()).unwrap_or_default()
}

impl RedisBroker {
    /// Claims a fire time (or records a miss) if the schedule is still at `expected`.
    pub(crate) async fn cron_claim(
        &self,
        c: &ClaimSpec<'_>,
        lease: Duration,
        clock_offset: i64,
    ) -> Result<CronClaim> {
        let mut inv = CRON_CLAIM.call();
        inv.key(self.keys.cron_due())
            .key(self.keys.cron_state(c.name))
            .key(self.keys.cron_firing());
        let (fire, jid, payload) = match c.fire {
            Some((f, j, p)) => (f.to_string(), j, p),
            None => (String::new(), "", ""),
        };
        inv.arg(c.name)
            .arg(c.expected)
            .arg(fire)
            .arg(opt(c.next))
            .arg(payload)
            .arg(jid)
            .arg(if c.skip_overlap { "1" } else { "0" })
            .arg(lease.as_millis() as u64)
            .arg(clock_offset)
            .arg(if c.missed { "1" } else { "0" });
        let reply: String = self.invoke(&inv).await?;
        Ok(match reply.as_str() {
            "claimed" => CronClaim::Claimed,
            "gone" => CronClaim::Gone,
            "missed" => CronClaim::Missed,
            "skipped" => CronClaim::SkippedOverlap,
            _ => CronClaim::Stale,
        })
    }

    /// Takes over up to `batch` claimed jobs whose lease expired.
    pub(crate) async fn cron_redrive(
        &self,
        batch: usize,
        lease: Duration,
        clock_offset: i64,
    ) -> Result<Vec<String>> {
        let mut inv = CRON_REDRIVE.call();
        inv.key(self.keys.cron_firing())
            .arg(batch)
            .arg(lease.as_millis() as u64)
            .arg(clock_offset);
        self.invoke(&inv).await
    }

    /// Forgets `jid` as the live run of `name` (overlap = skip).
    pub async fn cron_release(&self, name: &str, jid: &str) -> Result<bool> {
        let mut inv = CRON_RELEASE.call();
        inv.key(self.keys.cron_state(name)).arg(jid);
        let n: i64 = self.invoke(&inv).await?;
        Ok(n == 1)
    }

    /// Stores a schedule (`entry` is its JSON) with its next fire time;
    /// returns whether it changed.
    pub async fn cron_set(
        &self,
        name: &str,
        entry: &str,
        next: Option<i64>,
        code: bool,
    ) -> Result<bool> {
        let mut inv = CRON_SET.call();
        inv.key(self.keys.cron_defs())
            .key(self.keys.cron_due())
            .key(self.keys.cron_code())
            .key(self.keys.cron_state(name));
        inv.arg(name)
            .arg(entry)
            .arg(opt(next))
            .arg(if code { "1" } else { "0" });
        let n: i64 = self.invoke(&inv).await?;
        Ok(n == 1)
    }

    /// Replaces the code-declared schedules by `declared` (name, entry JSON,
    /// next fire time) in bounded steps owned by `token` (unique per start):
    /// takes ownership, applies `RECONCILE_CHUNK` schedules per call, then
    /// sweeps the code set an `SSCAN` page per call. Returns the names removed, or
    /// `None` when a worker that started later took over (it applies its own
    /// declarations from the start).
    pub async fn cron_reconcile(
        &self,
        token: &str,
        declared: &[(String, String, Option<i64>)],
    ) -> Result<Option<Vec<String>>> {
        let k = &self.keys;
        let owner = k.cron_reconciler();
        let _: () = self.query(redis::cmd("SET").arg(&owner).arg(token)).await?;
        let call = |step: &str| {
            let mut inv = CRON_RECONCILE.call();
            inv.key(k.cron_defs())
                .key(k.cron_due())
                .key(k.cron_code())
                .key(&owner)
                .key(k.cron_declared(token));
            inv.arg(step)
                .arg(token)
                .arg(k.cron_state(""))
                .arg(DECLARED_TTL.as_millis() as u64);
            inv
        };
        for chunk in declared.chunks(RECONCILE_CHUNK) {
            let mut inv = call("apply");
            inv.arg(chunk.len());
            for (name, entry, next) in chunk {
                inv.arg(name).arg(entry).arg(opt(*next));
            }
            let reply: Vec<String> = self.invoke(&inv).await?;
            if reply.first().map(String::as_str) != Some("ok") {
                return self.reconcile_superseded(token).await;
            }
        }
        let mut removed = Vec::new();
        let mut cursor = "0".to_string();
        loop {
            let mut inv = call("sweep");
            inv.arg(&cursor).arg(SWEEP_BATCH);
            let mut reply: Vec<String> = self.invoke(&inv).await?;
            if reply.is_empty() || reply[0] == "superseded" {
                return self.reconcile_superseded(token).await;
            }
            cursor = reply.remove(0);
            removed.extend(reply);
            if cursor == "0" {
                return Ok(Some(removed));
            }
        }
    }

    /// A superseded reconciliation drops its declared set (its own key).
    async fn reconcile_superseded(&self, token: &str) -> Result<Option<Vec<String>>> {
        let _: i64 = self
            .query(redis::cmd("UNLINK").arg(self.keys.cron_declared(token)))
            .await?;
        Ok(None)
    }

    /// Removes a schedule; returns whether it existed.
    pub async fn cron_remove(&self, name: &str) -> Result<bool> {
        let mut pipe = redis::pipe();
        pipe.atomic()
            .hdel(self.keys.cron_defs(), name)
            .zrem(self.keys.cron_due(), name)
            .ignore()
            .srem(self.keys.cron_code(), name)
            .ignore()
            .del(self.keys.cron_state(name))
            .ignore();
        let (n,): (i64,) = self.pipe(&pipe).await?;
        Ok(n == 1)
    }

    /// Pauses a schedule: no fire time comes due until it is resumed.
    pub async fn cron_pause(&self, name: &str) -> Result<()> {
        let mut pipe = redis::pipe();
        pipe.atomic()
            .hset(self.keys.cron_state(name), "paused", "1")
            .ignore()
            .zrem(self.keys.cron_due(), name)
            .ignore();
        self.pipe::<()>(&pipe).await
    }

    /// Resumes a schedule at its next fire time `next`.
    pub async fn cron_resume(&self, name: &str, next: Option<i64>) -> Result<()> {
        let mut pipe = redis::pipe();
        pipe.atomic()
            .hdel(self.keys.cron_state(name), "paused")
            .ignore();
        if let Some(n) = next {
            pipe.zadd(self.keys.cron_due(), name, n).ignore();
        }
        self.pipe::<()>(&pipe).await
    }

    /// Records a run started by hand (`run now`) as the schedule's last.
    pub async fn cron_ran_now(
        &self,
        name: &str,
        jid: &str,
        now: f64,
        skip_overlap: bool,
    ) -> Result<()> {
        let state = self.keys.cron_state(name);
        let mut pipe = redis::pipe();
        pipe.atomic()
            .hset_multiple(
                &state,
                &[
                    ("last_jid", jid.to_string()),
                    ("last_outcome", "run_now".to_string()),
                    ("last_at", format!("{now:.3}")),
                ],
            )
            .ignore();
        if skip_overlap {
            pipe.hset(&state, "active", jid).ignore();
        }
        self.pipe::<()>(&pipe).await
    }
}
