//! Reroute windows as Redis holds them: per window key, the entries counted
//! from a given time on, the entry at a given rank, and a scan step over the
//! keyspace for a class's windows. Which rule matches is decided above, by
//! [`crate::policy::reroute::reroute_target`].

use crate::broker::RedisBroker;
use crate::broker::keys::glob_escape;
use crate::error::Result;

impl RedisBroker {
    /// For each window key of `keys` and each start time of `from` (epoch
    /// seconds), the entries scored from then on (`ZCOUNT key from +inf`),
    /// key-major, in one pipeline.
    pub async fn window_counts(&self, keys: &[String], from: &[i64]) -> Result<Vec<u64>> {
        if keys.is_empty() || from.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for key in keys {
            for f in from {
                pipe.zcount(key, *f, "+inf");
            }
        }
        self.pipe(&pipe).await
    }

    /// For each `(from, skip)`: the score of the entry `skip` places after the
    /// first entry scored from `from` on in window `key` (`None` if none).
    pub async fn window_scores_at(&self, key: &str, at: &[(i64, u64)]) -> Result<Vec<Option<f64>>> {
        if at.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for (from, skip) in at {
            pipe.cmd("ZRANGE")
                .arg(key)
                .arg(*from)
                .arg("+inf")
                .arg("BYSCORE")
                .arg("LIMIT")
                .arg(*skip)
                .arg(1)
                .arg("WITHSCORES");
        }
        let found: Vec<Vec<(String, f64)>> = self.pipe(&pipe).await?;
        Ok(found
            .into_iter()
            .map(|f| f.first().map(|(_, s)| *s))
            .collect())
    }

    /// One step of a scan of the keyspace for the reroute windows of `class`
    /// declared for `base_queue`: the next cursor (0 when done) and the
    /// tenants found, each with its window key (the tenant raw, as the gem
    /// writes it). Looks at about `count` keys.
    pub async fn window_keys_step(
        &self,
        class: &str,
        base_queue: &str,
        cursor: u64,
        count: usize,
    ) -> Result<(u64, Vec<(String, String)>)> {
        let k = &self.keys;
        let pattern = k.fair_window(&glob_escape(class), "*", base_queue);
        let prefix = k.fair_window(class, "", base_queue);
        let (next, found) = self.scan_step(&pattern, cursor, count).await?;
        Ok((
            next,
            found
                .into_iter()
                .map(|key| {
                    let tenant = key.strip_prefix(&prefix).unwrap_or(&key).to_owned();
                    (tenant, key)
                })
                .collect(),
        ))
    }
}
