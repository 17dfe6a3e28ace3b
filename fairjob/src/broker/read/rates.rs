//! Rate limiters: declared and runtime rate, waiting jobs and next release,
//! a page at a time; a limiter's first waiters, for explain.

use std::collections::HashMap;

use serde::Serialize;

use super::{MAX_READ_ROWS, Page};
use crate::broker::{RedisBroker, keys};
use crate::error::Result;

/// One rate limiter, as stored (the rule that reads it is `fairjob::rate`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RateRow {
    /// `<Class>:<key>`, `group:<group>:<key>`, `<Class>` or `group:<group>`.
    pub key: String,
    /// The declared starts per period, period (µs) and burst, as the job's
    /// workers last wrote them.
    pub declared: Option<(u32, u64, u32)>,
    /// The runtime limit, if set (0 = paused).
    pub limit: Option<u32>,
    /// The runtime period (µs), if set.
    pub per_us: Option<u64>,
    /// The runtime burst, if set.
    pub burst: Option<u32>,
    /// Jobs in the limiter's list.
    pub waiting: u64,
    /// The next release (µs, Redis's clock), when one is scheduled.
    pub next_release_us: Option<u64>,
    /// Waiters released so far.
    pub released: u64,
}

/// One page of rate limiters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RatePage {
    /// Rows, by key.
    pub rows: Vec<RateRow>,
    /// Redis's clock at the read (µs).
    pub now_us: u64,
    /// The cursor of the next page, or `None` after the last.
    pub next: Option<u64>,
}

fn row(key: String, conf: &HashMap<String, String>, waiting: u64, due: Option<f64>) -> RateRow {
    let num = |f: &str| conf.get(f).and_then(|v| v.parse::<u64>().ok());
    let declared = match (num("dlimit"), num("dper"), num("dburst")) {
        (Some(l), Some(p), b) => Some((l as u32, p, b.unwrap_or(0) as u32)),
        _ => None,
    };
    RateRow {
        key,
        declared,
        limit: num("limit").map(|v| v as u32),
        per_us: num("per"),
        burst: num("burst").map(|v| v as u32),
        waiting,
        next_release_us: due.map(|d| d.max(0.0) as u64),
        released: num("released").unwrap_or(0),
    }
}

impl RedisBroker {
    /// One page of rate limiters with their state.
    pub async fn rate_limits(&self, page: Page) -> Result<RatePage> {
        let (next, keys) = self
            .registry_step(
                &self.keys.rates_registry(),
                page.cursor,
                page.count.clamp(1, MAX_READ_ROWS),
            )
            .await?;
        self.rate_rows(keys, next).await
    }

    /// The given rate limiters (full keys) with their state.
    pub async fn rate_limit_rows(&self, full_keys: &[String]) -> Result<RatePage> {
        self.rate_rows(full_keys.to_vec(), 0).await
    }

    async fn rate_rows(&self, keys: Vec<String>, next: u64) -> Result<RatePage> {
        let k = &self.keys;
        let (secs, micros): (u64, u64) = self.query(&redis::cmd("TIME")).await?;
        let mut rows = Vec::with_capacity(keys.len());
        if !keys.is_empty() {
            let mut pipe = redis::pipe();
            for full in &keys {
                let rk = k.rate(full);
                pipe.hgetall(&rk.conf)
                    .llen(&rk.waiters)
                    .zscore(k.rates_due(), keys::encode(full));
            }
            let found: Vec<(HashMap<String, String>, u64, Option<f64>)> = self.pipe(&pipe).await?;
            for (key, (conf, waiting, due)) in keys.into_iter().zip(found) {
                rows.push(row(key, &conf, waiting, due));
            }
        }
        Ok(RatePage {
            rows,
            now_us: secs * 1_000_000 + micros,
            next: (next != 0).then_some(next),
        })
    }
    /// A step of the rate limiters registry (SSCAN): next cursor, full keys.
    pub async fn rate_keys_step(&self, cursor: u64, count: usize) -> Result<(u64, Vec<String>)> {
        self.registry_step(&self.keys.rates_registry(), cursor, count)
            .await
    }

    /// The first `n` entries of a rate limiter's list (next released first)
    /// and its length.
    pub async fn rate_waiters(&self, full_key: &str, n: u64) -> Result<(Vec<Vec<u8>>, u64)> {
        let rk = self.keys.rate(full_key);
        let mut pipe = redis::pipe();
        pipe.lrange(&rk.waiters, 0, n.max(1) as isize - 1)
            .llen(&rk.waiters);
        self.pipe(&pipe).await
    }
}
