//! What an operator sees of the PostgreSQL side: the backlog per tenant, the
//! pump's lag, pumps alive, republish events, and one jid's row (for
//! explain). Bounded reads: the top tenants only, the last events only.

use std::time::Duration;

use sqlx::{PgExecutor, PgPool, Row};

use crate::error::Result;

/// A pump is alive when seen within this interval (SQL interval text).
pub(crate) const ALIVE_SQL: &str = "30 seconds";
/// Tenants listed in [`Status::tenants`].
pub const TOP_TENANTS: i64 = 20;
/// Republish events listed in [`Status::republished`].
pub const LAST_EVENTS: i64 = 10;

/// The PostgreSQL side at a glance.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct Status {
    /// Rows waiting to reach Redis.
    pub backlog: i64,
    /// Age of the oldest of them (the pump's lag).
    pub lag: Option<Duration>,
    /// The tenants with the most waiting rows (at most [`TOP_TENANTS`]), largest first.
    pub tenants: Vec<(String, i64)>,
    /// Kept jobs Redis has and that have not ended.
    pub kept_running: i64,
    /// Kept jobs that ended, still within the retention.
    pub kept_finished: i64,
    /// Rows kept as failed (cannot be pushed).
    pub failed: i64,
    /// Pumps seen recently, newest first.
    pub pumps: Vec<PumpRow>,
    /// The last republish events, newest first.
    pub republished: Vec<RepublishEvent>,
    /// The relay epoch PostgreSQL knows Redis by.
    pub epoch: Option<String>,
}

impl Status {
    /// The status as label/value rows (the dashboard's overview panel).
    pub fn rows(&self) -> Vec<(String, String)> {
        let mut rows = vec![
            (
                "backlog (not in Redis yet)".to_owned(),
                self.backlog.to_string(),
            ),
            (
                "pump lag (oldest unpublished)".to_owned(),
                self.lag
                    .map_or_else(|| "-".to_owned(), |d| format!("{:.1} s", d.as_secs_f64())),
            ),
            (
                "pumps alive".to_owned(),
                self.pumps.iter().filter(|p| p.alive).count().to_string(),
            ),
            (
                "kept jobs in Redis, not ended".to_owned(),
                self.kept_running.to_string(),
            ),
            ("kept jobs ended".to_owned(), self.kept_finished.to_string()),
            ("failed rows".to_owned(), self.failed.to_string()),
        ];
        for (t, n) in &self.tenants {
            let t = if t.is_empty() { "(no tenant)" } else { t };
            rows.push((format!("backlog of tenant {t}"), n.to_string()));
        }
        match self.republished.first() {
            Some(e) => rows.push((
                format!("republish events (last {LAST_EVENTS})"),
                format!(
                    "{}; latest: {} jobs by {}",
                    self.republished.len(),
                    e.jobs,
                    e.pump
                ),
            )),
            None => rows.push(("republish events".to_owned(), "none".to_owned())),
        }
        rows
    }
}

/// A pump's record.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct PumpRow {
    /// Its id (`host:pid:random`).
    pub id: String,
    /// Its host.
    pub host: String,
    /// Seconds since it was last seen.
    pub seen_ago: f64,
    /// Seen within the last 30 s.
    pub alive: bool,
}

/// Redis found to have lost data, and what was published again.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RepublishEvent {
    /// When (Unix seconds).
    pub at: f64,
    /// Kept jobs made pending again.
    pub jobs: i64,
    /// The pump that found it.
    pub pump: String,
}

/// A jid's row in `fairjob.outbox`, for explain.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct JobRow {
    /// The jid.
    pub jid: String,
    /// Its tenant ('' = none).
    pub tenant: String,
    /// Where it is: `pending` (not in Redis yet), `failed` (cannot be
    /// pushed), `published` (Redis has it; kept until it ends), `done`,
    /// `dead` or `stopped`.
    pub state: String,
    /// Kept until done.
    pub keep: bool,
    /// Seconds since it was committed.
    pub age: f64,
    /// Due time (Unix seconds) of a scheduled job.
    pub run_at: Option<f64>,
    /// Why it cannot be pushed.
    pub error: Option<String>,
}

impl JobRow {
    /// One line for the CLI's explain.
    pub fn describe(&self) -> String {
        let what = match self.state.as_str() {
            "pending" => {
                "committed in PostgreSQL, not in Redis yet (waiting for a pump)".to_owned()
            }
            "failed" => format!(
                "kept in PostgreSQL as failed, never pushed: {}",
                self.error.as_deref().unwrap_or("?")
            ),
            "published" => "in Redis (kept in PostgreSQL until it ends)".to_owned(),
            s => format!("ended ({s}); its row stays until the retention"),
        };
        format!(
            "PostgreSQL: {what}; tenant {:?}, committed {:.0}s ago",
            self.tenant, self.age
        )
    }

    /// The row as label/value rows (the dashboard's explain page).
    pub fn rows(&self) -> Vec<(String, String)> {
        let state = match self.state.as_str() {
            "pending" => "committed, not in Redis yet (waiting for a pump)".to_owned(),
            "failed" => "kept as failed, never pushed".to_owned(),
            "published" => "in Redis (kept in PostgreSQL until it ends)".to_owned(),
            s => format!("ended ({s}); the row stays until the retention"),
        };
        let mut rows = vec![
            ("state".to_owned(), state),
            (
                "tenant".to_owned(),
                if self.tenant.is_empty() {
                    "(no tenant)".to_owned()
                } else {
                    self.tenant.clone()
                },
            ),
            (
                "kept until done".to_owned(),
                if self.keep { "yes" } else { "no (outbox)" }.to_owned(),
            ),
            ("committed".to_owned(), format!("{:.0} s ago", self.age)),
        ];
        if let Some(at) = self.run_at {
            let wait = at - fairjob::wire::now_f64();
            rows.push((
                "scheduled".to_owned(),
                if wait > 0.0 {
                    format!("due in {wait:.0} s")
                } else {
                    format!("due {:.0} s ago", -wait)
                },
            ));
        }
        if let Some(e) = &self.error {
            rows.push(("why it cannot be pushed".to_owned(), e.clone()));
        }
        rows
    }
}

/// The status (a few bounded queries; the backlog count reads the pending
/// index).
pub async fn status(pool: &PgPool) -> Result<Status> {
    let (backlog, lag): (i64, Option<f64>) = sqlx::query_as(
        "SELECT count(*), extract(epoch FROM now() - min(created_at))::float8
         FROM fairjob.outbox
         WHERE failed_at IS NULL AND published_at IS NULL AND done_at IS NULL",
    )
    .fetch_one(pool)
    .await?;
    let tenants: Vec<(String, i64)> = sqlx::query_as(
        "SELECT tenant, count(*) AS n FROM fairjob.outbox
         WHERE failed_at IS NULL AND published_at IS NULL AND done_at IS NULL
         GROUP BY tenant ORDER BY n DESC, tenant LIMIT $1",
    )
    .bind(TOP_TENANTS)
    .fetch_all(pool)
    .await?;
    let (kept_running, kept_finished, failed): (i64, i64, i64) = sqlx::query_as(
        "SELECT
           count(*) FILTER (WHERE published_at IS NOT NULL AND done_at IS NULL),
           count(*) FILTER (WHERE done_at IS NOT NULL),
           count(*) FILTER (WHERE failed_at IS NOT NULL)
         FROM fairjob.outbox WHERE keep OR failed_at IS NOT NULL",
    )
    .fetch_one(pool)
    .await?;
    let pumps = sqlx::query(
        "SELECT id, host, extract(epoch FROM now() - seen_at)::float8 AS ago,
                seen_at > now() - $1::interval AS alive
         FROM fairjob.pumps ORDER BY seen_at DESC LIMIT 50",
    )
    .bind(ALIVE_SQL)
    .fetch_all(pool)
    .await?
    .into_iter()
    .map(|r| {
        Ok(PumpRow {
            id: r.try_get("id")?,
            host: r.try_get("host")?,
            seen_ago: r.try_get("ago")?,
            alive: r.try_get("alive")?,
        })
    })
    .collect::<std::result::Result<Vec<_>, sqlx::Error>>()?;
    let republished = sqlx::query(
        "SELECT extract(epoch FROM at)::float8 AS at, jobs, pump
         FROM fairjob.republished ORDER BY id DESC LIMIT $1",
    )
    .bind(LAST_EVENTS)
    .fetch_all(pool)
    .await?
    .into_iter()
    .map(|r| {
        Ok(RepublishEvent {
            at: r.try_get("at")?,
            jobs: r.try_get("jobs")?,
            pump: r.try_get("pump")?,
        })
    })
    .collect::<std::result::Result<Vec<_>, sqlx::Error>>()?;
    let epoch: Option<String> = sqlx::query_scalar("SELECT epoch FROM fairjob.relay WHERE id = 1")
        .fetch_optional(pool)
        .await?;
    Ok(Status {
        backlog,
        lag: lag.map(|s| Duration::from_secs_f64(s.max(0.0))),
        tenants,
        kept_running,
        kept_finished,
        failed,
        pumps,
        republished,
        epoch,
    })
}

/// The row of `jid`, if PostgreSQL still has it.
pub async fn find_job<'c>(conn: impl PgExecutor<'c>, jid: &str) -> Result<Option<JobRow>> {
    let row = sqlx::query(
        "SELECT jid, tenant, keep, run_at, error,
                extract(epoch FROM now() - created_at)::float8 AS age,
                CASE WHEN done_at IS NOT NULL THEN coalesce(state, 'done')
                     WHEN failed_at IS NOT NULL THEN 'failed'
                     WHEN published_at IS NOT NULL THEN 'published'
                     ELSE 'pending' END AS st
         FROM fairjob.outbox WHERE jid = $1",
    )
    .bind(jid)
    .fetch_optional(conn)
    .await?;
    let Some(r) = row else { return Ok(None) };
    Ok(Some(JobRow {
        jid: r.try_get("jid")?,
        tenant: r.try_get("tenant")?,
        state: r.try_get("st")?,
        keep: r.try_get("keep")?,
        age: r.try_get("age")?,
        run_at: r.try_get("run_at")?,
        error: r.try_get("error")?,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_panel_rows_name_the_backlog_lag_pumps_and_republishes() {
        let s = Status {
            backlog: 7,
            lag: Some(Duration::from_millis(2500)),
            tenants: vec![("acme".into(), 5), (String::new(), 2)],
            pumps: vec![PumpRow {
                id: "h:1:a".into(),
                host: "h".into(),
                seen_ago: 1.0,
                alive: true,
            }],
            republished: vec![RepublishEvent {
                at: 0.0,
                jobs: 12,
                pump: "h:1:a".into(),
            }],
            ..Status::default()
        };
        let rows = s.rows();
        let get = |l: &str| rows.iter().find(|(k, _)| k == l).map(|(_, v)| v.as_str());
        assert_eq!(get("backlog (not in Redis yet)"), Some("7"));
        assert_eq!(get("pump lag (oldest unpublished)"), Some("2.5 s"));
        assert_eq!(get("pumps alive"), Some("1"));
        assert_eq!(get("backlog of tenant acme"), Some("5"));
        assert_eq!(get("backlog of tenant (no tenant)"), Some("2"));
        assert_eq!(
            get("republish events (last 10)"),
            Some("1; latest: 12 jobs by h:1:a")
        );
    }
}
