//! Rate limiters as operators see them: each key's effective rate (the
//! runtime setting, else the declaration), jobs waiting, and the next release;
//! and the live actions (set, pause, resume), through [`RateLimits`]
//! (`client.rate_limits()`).

use std::time::Duration;

use serde::Serialize;

use crate::broker::read::{Page, RatePage, RateRow};
use crate::broker::{RedisBroker, Setting};
use crate::error::Result;
use crate::rate::{self, Rate};

/// One rate limiter.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RateLimitView {
    /// `<Class>:<key>`, `group:<group>:<key>`, `<Class>` or `group:<group>`.
    pub key: String,
    /// The rate in force, when known (a runtime setting, else the declaration).
    pub rate: Option<RateView>,
    /// Whether a runtime setting overrides the declaration.
    pub overridden: bool,
    /// Jobs waiting in the limiter's list.
    pub waiting: u64,
    /// Seconds until the next release (0 when due), when one is scheduled.
    pub next_release_in_secs: Option<f64>,
    /// Waiters released so far.
    pub released: u64,
}

/// A rate, for display.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RateView {
    /// Starts per period; 0 = paused.
    pub limit: u32,
    /// The period, ms.
    pub per_ms: u64,
    /// Extra starts at once.
    pub burst: u32,
}

impl RateView {
    /// Whether the key is paused.
    pub fn is_paused(&self) -> bool {
        self.limit == 0
    }
}

/// A page of rate limiters.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RateLimitsView {
    /// Rows, by key.
    pub rows: Vec<RateLimitView>,
    /// The cursor of the next page.
    pub next: Option<u64>,
}

/// The rate in force for a stored limiter: the runtime limit, period and
/// burst, each falling back to the declaration (the rule `lib/gcra.lua`'s
/// `rate_effective` states).
pub fn effective(row: &RateRow) -> Option<Rate> {
    let (dl, dp, db) = row.declared.unwrap_or((0, 1_000_000, 0));
    let limit = row.limit.or(row.declared.map(|_| dl))?;
    Some(Rate {
        limit,
        per: Duration::from_micros(row.per_us.unwrap_or(dp)),
        burst: row.burst.unwrap_or(db),
    })
}

/// The view of one stored limiter at Redis time `now_us`.
pub fn view_of(row: &RateRow, now_us: u64) -> RateLimitView {
    RateLimitView {
        key: row.key.clone(),
        rate: effective(row).map(|r| RateView {
            limit: r.limit,
            per_ms: r.per.as_millis() as u64,
            burst: r.burst,
        }),
        overridden: row.limit.is_some() || row.per_us.is_some() || row.burst.is_some(),
        waiting: row.waiting,
        next_release_in_secs: row
            .next_release_us
            .map(|at| at.saturating_sub(now_us) as f64 / 1e6),
        released: row.released,
    }
}

fn views(page: RatePage) -> RateLimitsView {
    RateLimitsView {
        rows: page.rows.iter().map(|r| view_of(r, page.now_us)).collect(),
        next: page.next,
    }
}

/// Rate limiters, live: list them, change a key's rate, pause and resume it.
/// A change takes effect at the key's next release (within a few ms when jobs
/// wait).
#[derive(Debug, Clone)]
pub struct RateLimits {
    broker: RedisBroker,
}

impl RateLimits {
    pub(crate) fn new(broker: RedisBroker) -> Self {
        RateLimits { broker }
    }

    /// One page of limiters.
    pub async fn list(&self, page: Page) -> Result<RateLimitsView> {
        Ok(views(self.broker.rate_limits(page).await?))
    }

    /// One limiter (a row with nothing stored when it was never used).
    pub async fn get(&self, key: &str) -> Result<RateLimitView> {
        let page = self.broker.rate_limit_rows(&[key.to_owned()]).await?;
        Ok(views(page).rows.remove(0))
    }

    /// Sets `key` to `limit` starts per `per` (the burst stays as it is).
    pub async fn set(&self, key: &str, limit: u32, per: Duration) -> Result<u64> {
        rate::change_rate(
            &self.broker,
            key,
            Setting::Set(limit),
            Setting::Set(per),
            Setting::Keep,
        )
        .await
    }

    /// Sets `key`'s burst (extra starts at once).
    pub async fn set_burst(&self, key: &str, burst: u32) -> Result<u64> {
        rate::change_rate(
            &self.broker,
            key,
            Setting::Keep,
            Setting::Keep,
            Setting::Set(burst),
        )
        .await
    }

    /// Pauses `key` (limit 0): its jobs wait, none starts.
    pub async fn pause(&self, key: &str) -> Result<u64> {
        rate::change_rate(
            &self.broker,
            key,
            Setting::Set(0),
            Setting::Keep,
            Setting::Keep,
        )
        .await
    }

    /// Back to the declared rate (clears every runtime setting of `key`);
    /// resumes a paused key.
    pub async fn reset(&self, key: &str) -> Result<u64> {
        rate::change_rate(
            &self.broker,
            key,
            Setting::Clear,
            Setting::Clear,
            Setting::Clear,
        )
        .await
    }
}
