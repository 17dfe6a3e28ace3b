//! A stored schedule ([`CronEntry`]): its expression, zone, policies and the
//! job it enqueues (a payload template), as kept in Redis (JSON) and as the
//! poller turns it into one job per fire time.

use serde::{Deserialize, Serialize};

use super::{CatchUp, CronError, CronSchedule, Overlap};
use crate::wire::{Payload, fields, new_jid};

/// Where a schedule was declared: in code (reconciled at start-up: removed
/// when the code no longer declares it) or at run time (kept).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CronSource {
    /// `#[cron]`, `WorkerBuilder::cron`, the worker's `[[cron]]` entries.
    Code,
    /// `client.cron().set(..)`.
    Dynamic,
}

/// One schedule.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CronEntry {
    /// Its unique name.
    pub name: String,
    /// The cron expression.
    pub expr: String,
    /// The IANA zone (`"UTC"` by default).
    pub tz: String,
    /// `"none"` or a grace such as `"10m"`.
    pub catch_up: String,
    /// `"allow"` or `"skip"`.
    pub overlap: String,
    /// Code or run time.
    pub source: CronSource,
    /// The job's payload, with an empty jid and no timestamps.
    pub job: String,
}

impl CronEntry {
    /// A checked entry: the expression, zone and catch-up policy parse.
    pub fn new(
        name: impl Into<String>,
        expr: &str,
        tz: &str,
        catch_up: CatchUp,
        overlap: Overlap,
        source: CronSource,
        job: &Payload,
    ) -> Result<CronEntry, CronError> {
        CronSchedule::new(expr, tz)?;
        let mut template = job.clone();
        for key in ["created_at", "enqueued_at"] {
            template.remove(key);
        }
        // Each fire time's job gets its own jid.
        template.set("jid", "");
        Ok(CronEntry {
            name: name.into(),
            expr: expr.trim().to_string(),
            tz: tz.to_string(),
            catch_up: match catch_up {
                CatchUp::None => "none".into(),
                CatchUp::Latest(s) => format!("{s}s"),
            },
            overlap: overlap.as_str().into(),
            source,
            job: template.to_json(),
        })
    }

    /// The schedule (expression in zone).
    pub fn schedule(&self) -> Result<CronSchedule, CronError> {
        CronSchedule::new(&self.expr, &self.tz)
    }

    /// The catch-up policy (the default when unreadable).
    pub fn catch_up(&self) -> CatchUp {
        CatchUp::parse(&self.catch_up).unwrap_or_default()
    }

    /// The overlap policy (`allow` when unreadable).
    pub fn overlap(&self) -> Overlap {
        Overlap::parse(&self.overlap).unwrap_or_default()
    }

    /// The job's class.
    pub fn class(&self) -> String {
        Payload::parse(self.job.clone().into_bytes())
            .map(|p| p.class())
            .unwrap_or_default()
    }

    /// The entry as stored (JSON).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a cron entry serializes")
    }

    /// Reads a stored entry.
    pub fn from_json(text: &str) -> Option<CronEntry> {
        serde_json::from_str(text).ok()
    }

    /// The job of fire time `fire` (Unix seconds), created at `now` (Unix
    /// seconds), with a fresh jid; `None` if the template is unreadable.
    pub fn job_for(&self, fire: i64, now: f64) -> Option<Payload> {
        let mut p = Payload::parse(self.job.clone().into_bytes()).ok()?;
        p.set("jid", new_jid());
        p.set("created_at", now);
        p.set(fields::CRON, &self.name);
        p.set(fields::FIRE_TIME, fire);
        Some(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::value::RawValue;

    #[test]
    fn entries_round_trip_and_make_jobs() {
        let args = RawValue::from_string("[1]".into()).unwrap();
        let job = Payload::new("Nightly", args, "default");
        let e = CronEntry::new(
            "nightly",
            "0 3 * * *",
            "Europe/Berlin",
            CatchUp::default(),
            Overlap::Skip,
            CronSource::Code,
            &job,
        )
        .unwrap();
        assert_eq!(CronEntry::from_json(&e.to_json()), Some(e.clone()));
        assert_eq!(e.catch_up(), CatchUp::Latest(600));
        assert_eq!(e.overlap(), Overlap::Skip);
        assert_eq!(e.class(), "Nightly");
        let p = e.job_for(1_800_000_000, 1_800_000_000.1).unwrap();
        assert_eq!(p.get::<i64>(fields::FIRE_TIME), Some(1_800_000_000));
        assert_eq!(p.get_str(fields::CRON).as_deref(), Some("nightly"));
        assert_ne!(p.jid(), job.jid());
        assert!(
            CronEntry::new(
                "x",
                "0 3 * *",
                "UTC",
                CatchUp::None,
                Overlap::Allow,
                CronSource::Code,
                &job
            )
            .is_err()
        );
    }
}
