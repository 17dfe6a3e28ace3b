//! Periodic schedules from the client: [`CronSpec`] (a schedule to declare
//! or set) and [`Crons`] (`client.cron()`: set, remove, pause, resume, run
//! now). The poller that enqueues fire times is the worker's (`worker/cron.rs`).

use std::fmt;

use super::{Client, IntoPush};
use crate::error::{Error, Result};
use crate::wire::cron::{CatchUp, CronEntry, CronSource, Overlap};
use crate::wire::now_f64;

/// A periodic schedule: a name, a cron expression, the job it enqueues, and
/// its zone (UTC by default), catch-up (`"10m"` by default) and overlap
/// (`allow` by default) policies.
#[must_use]
pub struct CronSpec {
    name: String,
    expr: String,
    tz: String,
    catch_up: String,
    overlap: Overlap,
    job: Result<crate::client::PushJob>,
}

impl fmt::Debug for CronSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CronSpec")
            .field("name", &self.name)
            .field("expr", &self.expr)
            .field("tz", &self.tz)
            .field("catch_up", &self.catch_up)
            .field("overlap", &self.overlap)
            .finish_non_exhaustive()
    }
}

impl CronSpec {
    /// `job` enqueued at every fire time of `expr` (5 fields, or 6 with
    /// seconds first, or `@hourly`…).
    pub fn new(name: impl Into<String>, expr: impl Into<String>, job: impl IntoPush) -> CronSpec {
        CronSpec {
            name: name.into(),
            expr: expr.into(),
            tz: "UTC".into(),
            catch_up: "10m".into(),
            overlap: Overlap::Allow,
            job: job.into_push(),
        }
    }

    /// The IANA time zone the expression is read in.
    pub fn tz(mut self, zone: impl Into<String>) -> Self {
        self.tz = zone.into();
        self
    }

    /// `"none"`, or the grace within which the latest missed fire time runs once.
    pub fn catch_up(mut self, policy: impl Into<String>) -> Self {
        self.catch_up = policy.into();
        self
    }

    /// Skip a fire time while the previous run is still queued or running.
    pub fn overlap(mut self, overlap: Overlap) -> Self {
        self.overlap = overlap;
        self
    }

    /// The schedule's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The checked, storable entry.
    pub(crate) fn into_entry(self, source: CronSource) -> Result<CronEntry> {
        let name = self.name;
        if name.is_empty() {
            return Err(Error::InvalidSchedule {
                name,
                reason: "the name is empty".into(),
            });
        }
        let catch_up = CatchUp::parse(&self.catch_up).map_err(|e| e.for_schedule(&name))?;
        let job = self.job?.into_template();
        CronEntry::new(
            name.clone(),
            &self.expr,
            &self.tz,
            catch_up,
            self.overlap,
            source,
            &job,
        )
        .map_err(|e| e.for_schedule(&name))
    }
}

/// Periodic schedules at run time: `client.cron()`.
#[derive(Debug, Clone, Copy)]
pub struct Crons<'a> {
    client: &'a Client,
}

impl Client {
    /// Periodic schedules: set, remove, pause, resume, run now.
    pub fn cron(&self) -> Crons<'_> {
        Crons { client: self }
    }
}

impl Crons<'_> {
    async fn now(&self) -> Result<i64> {
        Ok(self.client.broker().time().await? as i64 + self.client.clock_offset())
    }

    async fn entry(&self, name: &str) -> Result<CronEntry> {
        self.client
            .broker()
            .cron_entry(name)
            .await?
            .and_then(|j| CronEntry::from_json(&j))
            .ok_or_else(|| Error::NoSchedule(name.to_owned()))
    }

    /// Creates or replaces a schedule set at run time (kept across the
    /// workers' start-up reconciliation). A changed expression or zone takes
    /// effect from its next fire time after now.
    pub async fn set(&self, spec: CronSpec) -> Result<()> {
        let entry = spec.into_entry(CronSource::Dynamic)?;
        self.store(&entry, false).await
    }

    pub(crate) async fn store(&self, entry: &CronEntry, code: bool) -> Result<()> {
        let schedule = entry.schedule().map_err(|e| e.for_schedule(&entry.name))?;
        let next = schedule.next_after_secs(self.now().await?);
        self.client
            .broker()
            .cron_set(&entry.name, &entry.to_json(), next, code)
            .await?;
        Ok(())
    }

    /// Removes a schedule; false when there was none. (A schedule declared in
    /// code comes back when a worker with that code starts.)
    pub async fn remove(&self, name: &str) -> Result<bool> {
        self.client.broker().cron_remove(name).await
    }

    /// Pauses a schedule: no fire time is enqueued until it is resumed (the
    /// pause survives restarts and reconciliation).
    pub async fn pause(&self, name: &str) -> Result<()> {
        self.entry(name).await?;
        self.client.broker().cron_pause(name).await
    }

    /// Resumes a paused schedule from its next fire time after now (fire
    /// times during the pause are not caught up).
    pub async fn resume(&self, name: &str) -> Result<()> {
        let entry = self.entry(name).await?;
        let schedule = entry.schedule().map_err(|e| e.for_schedule(name))?;
        let next = schedule.next_after_secs(self.now().await?);
        self.client.broker().cron_resume(name, next).await
    }

    /// Enqueues the schedule's job now, outside its fire times (its
    /// `fire_time` is now); returns the jid.
    pub async fn run_now(&self, name: &str) -> Result<String> {
        let entry = self.entry(name).await?;
        let now = self.now().await?;
        let job = entry
            .job_for(now, now_f64())
            .ok_or_else(|| Error::InvalidSchedule {
                name: name.to_owned(),
                reason: "its job template is unreadable".into(),
            })?;
        let jid = self.client.push(crate::client::PushJob::new(job)).await?;
        self.client
            .broker()
            .cron_ran_now(name, &jid, now_f64(), entry.overlap() == Overlap::Skip)
            .await?;
        Ok(jid)
    }
}
