//! Periodic schedules, raw: stored entries, next fire times, state hashes.
//! Bounded by the number of schedules an application declares (a page of
//! [`MAX_READ_ROWS`](super::MAX_READ_ROWS)).

use std::collections::HashMap;

use super::MAX_READ_ROWS;
use crate::broker::RedisBroker;
use crate::error::Result;

/// One schedule's stored state.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CronStateRow {
    /// The fields of its state hash (`last_fire`, `last_outcome`, `last_jid`,
    /// `last_at`, `paused`, `active`, `fires`, `skipped`, `missed`).
    pub fields: HashMap<String, String>,
    /// Its next fire time (Unix seconds); `None` when paused or never again.
    pub next: Option<i64>,
}

impl RedisBroker {
    /// Schedules whose next fire time is at or before `now` (Unix seconds),
    /// at most `limit`, earliest first.
    pub(crate) async fn cron_due_at(&self, now: i64, limit: usize) -> Result<Vec<(String, i64)>> {
        let rows: Vec<(String, f64)> = self
            .query(
                redis::cmd("ZRANGE")
                    .arg(self.keys.cron_due())
                    .arg("-inf")
                    .arg(now)
                    .arg("BYSCORE")
                    .arg("LIMIT")
                    .arg(0)
                    .arg(limit)
                    .arg("WITHSCORES"),
            )
            .await?;
        Ok(rows.into_iter().map(|(n, s)| (n, s as i64)).collect())
    }

    /// The earliest next fire time of any schedule (Unix seconds).
    pub(crate) async fn cron_earliest(&self) -> Result<Option<i64>> {
        let rows: Vec<(String, f64)> = self
            .query(
                redis::cmd("ZRANGE")
                    .arg(self.keys.cron_due())
                    .arg(0)
                    .arg(0)
                    .arg("WITHSCORES"),
            )
            .await?;
        Ok(rows.first().map(|(_, s)| *s as i64))
    }

    /// One stored entry (JSON).
    pub async fn cron_entry(&self, name: &str) -> Result<Option<String>> {
        self.query(redis::cmd("HGET").arg(self.keys.cron_defs()).arg(name))
            .await
    }

    /// Stored entries (name, JSON), at most [`MAX_READ_ROWS`], by name.
    pub async fn cron_entries(&self) -> Result<Vec<(String, String)>> {
        let (_, rows): (String, Vec<(String, String)>) = self
            .query(
                redis::cmd("HSCAN")
                    .arg(self.keys.cron_defs())
                    .arg(0)
                    .arg("COUNT")
                    .arg(MAX_READ_ROWS),
            )
            .await?;
        let mut rows = rows;
        rows.sort();
        rows.truncate(MAX_READ_ROWS);
        Ok(rows)
    }

    /// One schedule's state and next fire time.
    pub async fn cron_state_row(&self, name: &str) -> Result<CronStateRow> {
        let mut pipe = redis::pipe();
        pipe.hgetall(self.keys.cron_state(name))
            .zscore(self.keys.cron_due(), name);
        let (fields, next): (HashMap<String, String>, Option<f64>) = self.pipe(&pipe).await?;
        Ok(CronStateRow {
            fields,
            next: next.map(|n| n as i64),
        })
    }
}
