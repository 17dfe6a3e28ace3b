//! Periodic schedules as operators see them (`worker cron`, the dashboard's
//! `/cron`): expression, zone, policies, next and last fire time, the last
//! outcome, paused; and the operator's actions (pause, resume, run now).

use serde::Serialize;

use super::Inspector;
use crate::broker::When;
use crate::error::{Error, Result};
use crate::wire::cron::{CronEntry, CronSource};

/// One schedule.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CronRow {
    /// Its name.
    pub name: String,
    /// The cron expression.
    pub expr: String,
    /// The zone.
    pub tz: String,
    /// `"none"` or the catch-up grace.
    pub catch_up: String,
    /// `"allow"` or `"skip"`.
    pub overlap: String,
    /// Declared in code or set at run time.
    pub source: CronSource,
    /// The job class it enqueues.
    pub class: String,
    /// The next fire time (Unix seconds); `None` when paused or never again.
    pub next: Option<i64>,
    /// The last fire time handled (Unix seconds).
    pub last_fire: Option<i64>,
    /// What happened to it: `enqueued`, `skipped` (overlap), `missed`, `run_now`.
    pub last_outcome: Option<String>,
    /// The last enqueued job's jid.
    pub last_jid: Option<String>,
    /// When the last outcome was recorded (Unix seconds).
    pub last_at: Option<f64>,
    /// Paused by an operator.
    pub paused: bool,
    /// The live run (`overlap = "skip"`): queued or running.
    pub running: Option<String>,
    /// Fire times enqueued.
    pub fires: u64,
    /// Fire times skipped because the previous run was live.
    pub skipped: u64,
    /// Times fire times were found missed (no poller ran).
    pub missed: u64,
    /// The expression or zone cannot be read here (`None` when fine).
    pub problem: Option<String>,
}

impl Inspector {
    /// Every schedule (at most [`super::MAX_READ_ROWS`]), by name.
    pub async fn cron(&self) -> Result<Vec<CronRow>> {
        let mut out = Vec::new();
        for (name, json) in self.broker.cron_entries().await? {
            let Some(entry) = CronEntry::from_json(&json) else {
                continue;
            };
            let state = self.broker.cron_state_row(&name).await?;
            let f = &state.fields;
            let num = |k: &str| f.get(k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
            out.push(CronRow {
                problem: entry.schedule().err().map(|e| e.to_string()),
                class: entry.class(),
                expr: entry.expr,
                tz: entry.tz,
                catch_up: entry.catch_up,
                overlap: entry.overlap,
                source: entry.source,
                name,
                next: state.next,
                last_fire: f.get("last_fire").and_then(|v| v.parse().ok()),
                last_outcome: f.get("last_outcome").cloned(),
                last_jid: f.get("last_jid").cloned(),
                last_at: f.get("last_at").and_then(|v| v.parse().ok()),
                paused: f.get("paused").is_some_and(|v| v == "1"),
                running: f.get("active").cloned(),
                fires: num("fires"),
                skipped: num("skipped"),
                missed: num("missed"),
            });
        }
        Ok(out)
    }

    async fn cron_entry(&self, name: &str) -> Result<CronEntry> {
        self.broker
            .cron_entry(name)
            .await?
            .and_then(|j| CronEntry::from_json(&j))
            .ok_or_else(|| Error::NoSchedule(name.to_owned()))
    }

    /// Pauses a schedule (no fire time comes due until resumed).
    pub async fn pause_cron(&self, name: &str) -> Result<()> {
        self.cron_entry(name).await?;
        self.broker.cron_pause(name).await
    }

    /// Resumes a schedule from its next fire time after now.
    pub async fn resume_cron(&self, name: &str) -> Result<()> {
        let entry = self.cron_entry(name).await?;
        let schedule = entry.schedule().map_err(|e| e.for_schedule(name))?;
        let now = self.time().await? as i64;
        self.broker
            .cron_resume(name, schedule.next_after_secs(now))
            .await
    }

    /// Enqueues the schedule's job now, through the scheduler (so the
    /// workers' client middleware, reroute rules and tenant shards apply);
    /// returns its jid.
    pub async fn run_cron_now(&self, name: &str) -> Result<String> {
        let entry = self.cron_entry(name).await?;
        let now = self.time().await?;
        let job = entry
            .job_for(now as i64, now)
            .ok_or_else(|| Error::InvalidSchedule {
                name: name.to_owned(),
                reason: "its job template is unreadable".into(),
            })?;
        let jid = job.jid();
        self.broker
            .schedule(&[(When::At(now), job.to_json(), None)], self.clock_offset)
            .await?;
        self.broker
            .cron_ran_now(
                name,
                &jid,
                now,
                entry.overlap() == crate::wire::cron::Overlap::Skip,
            )
            .await?;
        Ok(jid)
    }
}
