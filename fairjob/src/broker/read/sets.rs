//! Sidekiq's sorted sets (`retry`, `schedule`, `dead`) read as they are:
//! sizes, ranges by rank in listing order, members at given scores, and a
//! server-side `ZSCAN MATCH` step.

use crate::broker::RedisBroker;
use crate::broker::actions::JobSet;
use crate::error::Result;

/// Whether a set lists newest first (`dead`, as Sidekiq's morgue does).
fn newest_first(set: JobSet) -> bool {
    set == JobSet::Dead
}

impl RedisBroker {
    /// Entries in `set` (`ZCARD`).
    pub async fn set_size(&self, set: JobSet) -> Result<u64> {
        self.query(redis::cmd("ZCARD").arg(self.set_key(set))).await
    }

    /// Entries `[start, start + n)` of `set` by rank in listing order (next
    /// due first; `dead` newest first), with their scores as Redis writes them.
    pub async fn set_range(
        &self,
        set: JobSet,
        start: u64,
        n: usize,
    ) -> Result<Vec<(Vec<u8>, String)>> {
        let key = self.set_key(set);
        let stop = start + n.max(1) as u64 - 1;
        let mut cmd = redis::cmd("ZRANGE");
        cmd.arg(&key).arg(start).arg(stop);
        if newest_first(set) {
            cmd.arg("REV");
        }
        cmd.arg("WITHSCORES");
        self.query(&cmd).await
    }

    /// For each score, the members of `set` with exactly that score (at most
    /// 100 each; one `ZRANGE … BYSCORE` per score, in one pipeline).
    pub async fn set_members_at(&self, set: JobSet, scores: &[&str]) -> Result<Vec<Vec<Vec<u8>>>> {
        if scores.is_empty() {
            return Ok(Vec::new());
        }
        let key = self.set_key(set);
        let mut pipe = redis::pipe();
        for score in scores {
            pipe.cmd("ZRANGE")
                .arg(&key)
                .arg(*score)
                .arg(*score)
                .arg("BYSCORE")
                .arg("LIMIT")
                .arg(0)
                .arg(100);
        }
        self.pipe(&pipe).await
    }

    /// One `ZSCAN … MATCH pattern COUNT count` step of `set`: the next cursor
    /// (0 at the end) and the members found with their scores.
    pub async fn set_scan_step(
        &self,
        set: JobSet,
        cursor: u64,
        pattern: &str,
        count: u64,
    ) -> Result<(u64, Vec<(Vec<u8>, f64)>)> {
        self.query(
            redis::cmd("ZSCAN")
                .arg(self.set_key(set))
                .arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(count),
        )
        .await
    }
}
