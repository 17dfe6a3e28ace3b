//! Rate limits (`#[rate_limit(limit = N, per = "1m", burst = B, key = ..., group = ...)]`):
//! at most `limit` **starts** of one key per `per`, plus `burst` extra at once.
//!
//! The rule is GCRA (the generic cell rate algorithm, as redis-cell uses it):
//! the only state of a key is its *theoretical arrival time* `tat`. Each start
//! is spaced by the emission interval `T = ceil(per / limit)` microseconds
//! (rounded up, so `limit` intervals never fit in less than `per`), and a start
//! is allowed while `max(tat, now) - now <= burst * T`. With `burst = 0` starts
//! are spread evenly (20/s = one every 50 ms), and no sliding window of `per`
//! holds more than `limit + burst` starts. [`judge`] is the rule; its twin in
//! `broker/scripts/lib_rate.lua` runs it on Redis's clock, so every host agrees.
//!
//! A job whose limiter has no room is parked in the key's own FIFO list (it
//! holds no worker, spends no retry, and is not polled); a release schedule
//! (`rates:due`, key → next release time) tells every worker's releaser when
//! the key next has room, and the release script moves exactly as many waiters
//! as the rule allows back to the front of their queues, each with its start
//! already counted. `limit = 0` pauses a key. Keys are per class
//! (`<Class>:<key>`) unless the job names a group (`group:<group>:<key>`), the
//! same naming as slot limits ([`crate::limit`]), in their own key space.
//!
//! Layer 3: the rule and the naming; the scripts are the broker's.

use std::time::Duration;

use crate::broker::{RateAcquired, RateRequest, RedisBroker, Setting, ShardRate, Token};
use crate::error::Result;
use crate::wire::{Payload, RateLimit};

/// A key's effective rate: `limit` starts per `per`, `burst` extra at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// Starts per period; 0 pauses the key.
    pub limit: u32,
    /// The period.
    pub per: Duration,
    /// Extra starts allowed at once.
    pub burst: u32,
}

impl Rate {
    /// The rate a declaration gives.
    pub fn of(limit: &RateLimit) -> Self {
        Rate {
            limit: limit.limit,
            per: limit.per,
            burst: limit.burst,
        }
    }

    /// The emission interval in microseconds: `ceil(per / limit)`; `None`
    /// when paused.
    pub fn interval_us(&self) -> Option<u64> {
        if self.limit == 0 {
            return None;
        }
        let per = self.per.as_micros().max(1) as u64;
        Some(per.div_ceil(u64::from(self.limit)))
    }
}

/// What the rule says about one start at `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Allowed; the key's new `tat`.
    Allow {
        /// The theoretical arrival time to store.
        tat: u64,
    },
    /// Not yet: the earliest time (µs) a start is allowed.
    Wait {
        /// When the key next has room.
        until: u64,
    },
    /// The key is paused (`limit = 0`).
    Paused,
}

/// The GCRA rule: may one more job of a key whose state is `tat` (µs, `None`
/// for a fresh key) start at `now` (µs)?
pub fn judge(rate: Rate, tat: Option<u64>, now: u64) -> Verdict {
    let Some(t) = rate.interval_us() else {
        return Verdict::Paused;
    };
    let tat = tat.unwrap_or(now).max(now);
    let tolerance = t.saturating_mul(u64::from(rate.burst));
    if tat - now <= tolerance {
        Verdict::Allow { tat: tat + t }
    } else {
        Verdict::Wait {
            until: tat - tolerance,
        }
    }
}

/// The full key of a job's rate limiter: `<Class>:<key>` or
/// `group:<group>:<key>`, or without a key (one limiter for the class or
/// group) `<Class>` or `group:<group>`.
pub fn full_key(class: &str, limit: &RateLimit, key: Option<&str>) -> String {
    let base = match limit.group {
        Some(g) => format!("group:{g}"),
        None => class.to_owned(),
    };
    match key {
        Some(k) => format!("{base}:{k}"),
        None => base,
    }
}

/// Parses a rate as the CLI and shard policies write it: `10/s`, `100/1m`,
/// `5/250ms` (a bare unit is one of it). `0/s` pauses.
pub fn parse_rate(text: &str) -> std::result::Result<(u32, Duration), String> {
    let (n, per) = text.split_once('/').ok_or_else(|| {
        format!("invalid rate {text:?}: expected `<limit>/<period>`, like `10/s`")
    })?;
    let limit: u32 = n
        .trim()
        .parse()
        .map_err(|_| format!("invalid rate {text:?}: `{n}` is not a whole number"))?;
    let per = parse_period(per.trim())?;
    Ok((limit, per))
}

/// Parses a sharded queue tenant's rate (`shard-policy --rate`): `10/s`,
/// `100/1m`. At least one start per period (a cap of 0 pauses a tenant), at
/// most one per microsecond.
pub fn parse_tenant_rate(text: &str) -> std::result::Result<ShardRate, String> {
    let (limit, per) = parse_rate(text)?;
    if limit == 0 {
        return Err(format!(
            "invalid rate {text:?}: a tenant's rate allows at least 1 start per period (a cap of 0 pauses a tenant)"
        ));
    }
    let per_us = u64::try_from(per.as_micros())
        .map_err(|_| format!("invalid rate {text:?}: the period is too long"))?;
    if per_us < u64::from(limit) {
        return Err(format!(
            "invalid rate {text:?}: more than one start per microsecond"
        ));
    }
    Ok(ShardRate { limit, per_us })
}

/// The pace of a tenant with a rate on a tenant-sharded queue: the
/// dispatch's rule (its twin is `shard_rate_*` in
/// `broker/scripts/lib_shard.lua`, on Redis's clock).
///
/// GCRA with burst 0 (starts `T = ceil(period / limit)` apart), with one
/// difference from a job's limiter: a start the dispatch made late — a
/// waiting tenant is only taken back when some worker fetches — is counted
/// from its due time, up to `T / 2` late (the catch-up credit), so a tenant's
/// rate is held instead of undershot by the fetches' cadence. The credit
/// never puts more than `limit` starts in any window of `period`: the pace
/// also keeps its last `H` starts ([`tenant_window`]: `H` divides `limit`) and
/// a start waits until the `H`-th latest is `H * T` old.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TenantPace {
    /// The theoretical arrival time (µs), if any.
    pub tat: Option<u64>,
    /// The last starts (µs), oldest first, at most [`tenant_window`] of them.
    pub recent: Vec<u64>,
}

/// How many of a tenant's latest starts its pace checks: the largest divisor
/// of `limit` not above 64 (so `limit` starts always span a period).
pub fn tenant_window(limit: u32) -> u32 {
    (1..=limit.clamp(1, 64))
        .rev()
        .find(|d| limit % d == 0)
        .unwrap_or(1)
}

impl TenantPace {
    /// When the tenant may start next: `None` when it may start at `now`.
    pub fn due(&self, rate: ShardRate, now: u64) -> Option<u64> {
        let t = rate.per_us.div_ceil(u64::from(rate.limit.max(1)));
        let due = self.tat.max(self.window_due(rate, t));
        due.filter(|&d| d > now)
    }

    /// Counts a start at `now` (the caller checked [`Self::due`]).
    pub fn count(&mut self, rate: ShardRate, now: u64) {
        let t = rate.per_us.div_ceil(u64::from(rate.limit.max(1)));
        let credit = t / 2;
        let tat = self.tat.unwrap_or(now).max(now.saturating_sub(credit));
        self.tat = Some(tat + t);
        self.recent.push(now);
        let h = tenant_window(rate.limit) as usize;
        if self.recent.len() > h {
            self.recent.drain(..self.recent.len() - h);
        }
    }

    fn window_due(&self, rate: ShardRate, t: u64) -> Option<u64> {
        let h = tenant_window(rate.limit) as usize;
        (self.recent.len() >= h).then(|| self.recent[self.recent.len() - h] + h as u64 * t)
    }
}

/// A tenant's rate as people write it: `10/1s`, `100/1m`, `5/250ms`.
pub fn describe_tenant_rate(rate: ShardRate) -> String {
    let per = humantime::format_duration(Duration::from_micros(rate.per_us)).to_string();
    format!("{}/{}", rate.limit, per.replace(' ', ""))
}

/// A period: a humantime duration (`1m`, `250ms`) or a bare unit (`s`, `m`, `h`, `d`).
pub fn parse_period(text: &str) -> std::result::Result<Duration, String> {
    let spelled = match text {
        "s" | "sec" | "second" => "1s",
        "m" | "min" | "minute" => "1m",
        "h" | "hour" => "1h",
        "d" | "day" => "1d",
        other => other,
    };
    let d =
        humantime::parse_duration(spelled).map_err(|e| format!("invalid period {text:?}: {e}"))?;
    if d.is_zero() {
        return Err(format!("invalid period {text:?}: must be longer than zero"));
    }
    Ok(d)
}

/// Passes a fetched job through its limiter, or parks it.
pub(crate) async fn acquire(
    broker: &RedisBroker,
    identity: &str,
    token: &Token,
    payload: &Payload,
    full: &str,
    declared: Rate,
) -> Result<RateAcquired> {
    let parked = crate::limit::parked_payload(payload, token, "rate_limit");
    broker
        .rate_acquire(
            identity,
            token,
            RateRequest {
                full_key: full,
                limit: declared.limit,
                per_us: declared.per.as_micros().max(1) as u64,
                burst: declared.burst,
                jid: &payload.jid(),
                parked_payload: &parked,
            },
        )
        .await
}

/// Sets a key's rate at runtime: `limit` starts per `per` (`None` = back to
/// the declared value; `limit = 0` pauses the key), `burst` unchanged. Takes
/// effect at the key's next release. Returns how many jobs wait.
pub async fn set_rate(
    broker: &RedisBroker,
    full: &str,
    limit: Option<u32>,
    per: Option<Duration>,
    burst: Option<u32>,
) -> Result<u64> {
    let per_us = per.map(|p| p.as_micros().max(1) as u64);
    let or_clear = |v: Option<u64>| v.map_or(Setting::Clear, Setting::Set);
    let burst = burst.map_or(Setting::Keep, Setting::Set);
    let limit_s = limit.map_or(Setting::Clear, Setting::Set);
    broker
        .set_rate_limit(full, limit_s, or_clear(per_us), burst)
        .await
}

/// Changes one or more of a key's runtime settings (see [`set_rate`]).
pub async fn change_rate(
    broker: &RedisBroker,
    full: &str,
    limit: Setting<u32>,
    per: Setting<Duration>,
    burst: Setting<u32>,
) -> Result<u64> {
    let per_us = match per {
        Setting::Keep => Setting::Keep,
        Setting::Clear => Setting::Clear,
        Setting::Set(p) => Setting::Set(p.as_micros().max(1) as u64),
    };
    broker.set_rate_limit(full, limit, per_us, burst).await
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000;

    fn rate(limit: u32, per_ms: u64, burst: u32) -> Rate {
        Rate {
            limit,
            per: Duration::from_millis(per_ms),
            burst,
        }
    }

    /// Starts as many jobs as the rule allows, asking every `step` µs from
    /// `from` to `to`; returns the start times.
    fn run(rate: Rate, from: u64, to: u64, step: u64) -> Vec<u64> {
        let mut tat = None;
        let mut starts = Vec::new();
        let mut now = from;
        while now < to {
            // Several jobs may start at the same instant (burst).
            while let Verdict::Allow { tat: t } = judge(rate, tat, now) {
                tat = Some(t);
                starts.push(now);
            }
            now += step;
        }
        starts
    }

    fn max_in_window(starts: &[u64], window: u64) -> usize {
        starts
            .iter()
            .map(|&a| starts.iter().filter(|&&s| s >= a && s < a + window).count())
            .max()
            .unwrap_or(0)
    }

    #[test]
    fn burst_zero_spreads_starts_evenly() {
        let r = rate(20, 1000, 0);
        assert_eq!(r.interval_us(), Some(50_000));
        let starts = run(r, 10 * S, 13 * S, 1_000);
        let gaps: Vec<u64> = starts.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(gaps.iter().all(|&g| g == 50_000), "{gaps:?}");
        assert_eq!(starts.len(), 60);
        assert_eq!(max_in_window(&starts, S), 20);
    }

    #[test]
    fn never_more_than_limit_plus_burst_in_any_window() {
        for (limit, per_ms, burst) in [(3, 1000, 0), (7, 1000, 2), (100, 60_000, 5), (1, 250, 4)] {
            let r = rate(limit, per_ms, burst);
            let per = per_ms * 1000;
            // Asking at odd instants, including ones that don't divide `per`.
            for step in [1_000, 7_919, 33_333] {
                let starts = run(r, 5 * S, 5 * S + 4 * per, step);
                assert!(
                    max_in_window(&starts, per) <= (limit + burst) as usize,
                    "{limit}/{per_ms}ms burst {burst} step {step}"
                );
            }
        }
    }

    #[test]
    fn burst_allows_extra_starts_at_once_then_the_rate() {
        let r = rate(10, 1000, 3);
        let mut tat = None;
        let now = 100 * S;
        for _ in 0..4 {
            match judge(r, tat, now) {
                Verdict::Allow { tat: t } => tat = Some(t),
                v => panic!("{v:?}"),
            }
        }
        assert_eq!(
            judge(r, tat, now),
            Verdict::Wait {
                until: now + 100_000
            }
        );
    }

    #[test]
    fn an_idle_key_earns_no_credit_beyond_its_burst() {
        let r = rate(2, 1000, 0);
        assert!(
            matches!(judge(r, Some(1), 50 * S), Verdict::Allow { tat } if tat == 50 * S + 500_000)
        );
    }

    #[test]
    fn zero_pauses() {
        assert_eq!(judge(rate(0, 1000, 5), None, S), Verdict::Paused);
    }

    #[test]
    fn uneven_periods_round_the_interval_up() {
        // 3 per second: 333_334 µs, never 4 starts in a second.
        assert_eq!(rate(3, 1000, 0).interval_us(), Some(333_334));
    }

    /// A tenant asking at `asks` (µs, increasing) starts whenever its pace
    /// allows; returns its starts.
    fn paced(rate: ShardRate, asks: impl Iterator<Item = u64>) -> Vec<u64> {
        let mut pace = TenantPace::default();
        let mut starts = Vec::new();
        for now in asks {
            if pace.due(rate, now).is_none() {
                pace.count(rate, now);
                starts.push(now);
            }
        }
        starts
    }

    #[test]
    fn a_tenants_window_divides_its_limit() {
        assert_eq!(tenant_window(1), 1);
        assert_eq!(tenant_window(5), 5);
        assert_eq!(tenant_window(64), 64);
        assert_eq!(tenant_window(100), 50);
        assert_eq!(tenant_window(1000), 50);
        assert_eq!(tenant_window(67), 1);
    }

    #[test]
    fn a_late_dispatch_is_caught_up_without_exceeding_the_window() {
        // Fetches come every 45 ms (a worker's batches in lockstep): at 5/s
        // and 50/s the tenant is taken back up to 45 ms late each time.
        for (limit, per_us) in [(5, S), (50, S), (100, 60 * S), (7, S), (67, S), (1, S)] {
            let rate = ShardRate { limit, per_us };
            let asks = (0..)
                .map(|i| 10 * S + i * 45_000)
                .take_while(|&t| t < 10 * S + 20 * per_us);
            let starts = paced(rate, asks);
            let most = max_in_window(&starts, per_us);
            assert!(
                most <= limit as usize,
                "{limit}/{per_us}: {most} in a window"
            );
            if limit == 5 {
                // 200 ms intervals, 45 ms cadence: the credit (100 ms) absorbs
                // each start's lateness; only the window's (once per 5
                // starts) remains: at least 5 per period + one cadence (4.78),
                // where plain GCRA loses it at every start (4.49).
                let held = starts.len() as f64 / 20.0;
                assert!(held >= 4.78, "5/s held: {held} per period");
            }
        }
        // Random lateness, many rates: never over the limit in a window.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for (limit, per_us) in [(5, S), (20, S), (50, S), (64, S), (12, 250_000), (2, S)] {
            let rate = ShardRate { limit, per_us };
            let mut now = 10 * S;
            let mut asks = Vec::new();
            while now < 10 * S + 30 * per_us {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                now += 1 + x % (per_us / u64::from(limit));
                asks.push(now);
            }
            let starts = paced(rate, asks.into_iter());
            assert!(
                max_in_window(&starts, per_us) <= limit as usize,
                "{limit}/{per_us}"
            );
        }
    }

    #[test]
    fn without_lateness_the_pace_is_even() {
        let rate = ShardRate {
            limit: 20,
            per_us: S,
        };
        let starts = paced(rate, (0..3000).map(|i| 5 * S + i * 1_000));
        let gaps: Vec<u64> = starts.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(gaps.iter().all(|&g| g == 50_000), "{gaps:?}");
    }

    #[test]
    fn rates_parse_as_written() {
        assert_eq!(parse_rate("10/s"), Ok((10, Duration::from_secs(1))));
        assert_eq!(parse_rate("100/1m"), Ok((100, Duration::from_secs(60))));
        assert_eq!(parse_rate("5/250ms"), Ok((5, Duration::from_millis(250))));
        assert_eq!(parse_rate("0/h"), Ok((0, Duration::from_secs(3600))));
        assert!(parse_rate("10").is_err());
        assert!(parse_rate("-1/s").is_err());
        assert!(parse_rate("1/0s").is_err());
    }

    #[test]
    fn tenant_rates_parse_and_read_back() {
        let r = parse_tenant_rate("10/s").unwrap();
        assert_eq!(
            r,
            ShardRate {
                limit: 10,
                per_us: 1_000_000
            }
        );
        assert_eq!(r.stored(), "10/1000000");
        assert_eq!(ShardRate::from_stored(&r.stored()), Some(r));
        assert_eq!(describe_tenant_rate(r), "10/1s");
        let m = parse_tenant_rate("100/1m").unwrap();
        assert_eq!(m.per_us, 60_000_000);
        assert_eq!(describe_tenant_rate(m), "100/1m");
        assert_eq!(parse_tenant_rate(&describe_tenant_rate(m)), Ok(m));
        assert_eq!(
            describe_tenant_rate(parse_tenant_rate("5/250ms").unwrap()),
            "5/250ms"
        );
        assert_eq!(
            describe_tenant_rate(parse_tenant_rate("3/1m30s").unwrap()),
            "3/1m30s"
        );
    }

    #[test]
    fn bad_tenant_rates_are_clear_errors() {
        let zero = parse_tenant_rate("0/s").unwrap_err();
        assert!(zero.contains("cap of 0"), "{zero}");
        assert!(
            parse_tenant_rate("10")
                .unwrap_err()
                .contains("<limit>/<period>")
        );
        assert!(
            parse_tenant_rate("x/s")
                .unwrap_err()
                .contains("not a whole number")
        );
        assert!(parse_tenant_rate("-1/s").is_err());
        assert!(
            parse_tenant_rate("1/0s")
                .unwrap_err()
                .contains("longer than zero")
        );
        assert!(parse_tenant_rate("1/fortnight").is_err());
        assert!(
            parse_tenant_rate("2000/1ms")
                .unwrap_err()
                .contains("per microsecond")
        );
        assert_eq!(ShardRate::from_stored("0/100"), None);
        assert_eq!(ShardRate::from_stored("ten/100"), None);
    }

    #[test]
    fn keys_are_per_class_unless_grouped() {
        let l = RateLimit {
            limit: 1,
            per: Duration::from_secs(1),
            burst: 0,
            group: None,
            by_tenant: false,
        };
        assert_eq!(full_key("Charge", &l, Some("7")), "Charge:7");
        assert_eq!(full_key("Charge", &l, None), "Charge");
        let g = RateLimit {
            group: Some("stripe"),
            ..l
        };
        assert_eq!(full_key("Charge", &g, Some("7")), "group:stripe:7");
        assert_eq!(full_key("Charge", &g, None), "group:stripe");
    }
}
