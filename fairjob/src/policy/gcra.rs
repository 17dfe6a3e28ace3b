//! GCRA, the rule of rate limits (`#[rate_limit(limit = N, per = "1m", burst = B)]`):
//! at most `limit` **starts** of one key per `per`, plus `burst` extra at once.
//!
//! The only state of a key is its *theoretical arrival time* `tat`. Each start
//! is spaced by the emission interval `T = ceil(per / limit)` microseconds
//! (rounded up, so `limit` intervals never fit in less than `per`), and a start
//! is allowed while `max(tat, now) - now <= burst * T`. With `burst = 0` starts
//! are spread evenly (20/s = one every 50 ms), and no sliding window of `per`
//! holds more than `limit + burst` starts. [`judge`] is the rule; its twin
//! `rate_judge` in `broker/scripts/lib/gcra.lua` runs it on Redis's clock.
//! [`Limiter`] is a key's whole state with its waiting jobs, and its methods
//! the steps of `rate_acquire.lua`, `rate_release.lua` and `rate_set.lua`.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use crate::wire::RateLimit;

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

/// [`judge`] on a limiter's raw numbers as Redis stores them: `limit`
/// starts per `per_us`, `burst` extra (`limit <= 0` pauses).
pub fn judge_raw(limit: f64, per_us: f64, burst: f64, tat: Option<u64>, now: u64) -> Verdict {
    if limit <= 0.0 {
        return Verdict::Paused;
    }
    let t = (per_us / limit).ceil() as u64;
    let tat = tat.unwrap_or(now).max(now);
    let tolerance = t * burst as u64;
    if tat - now <= tolerance {
        Verdict::Allow { tat: tat + t }
    } else {
        Verdict::Wait {
            until: tat - tolerance,
        }
    }
}

/// A job's declared rate as the worker passes it: starts, period (µs), burst.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Declared {
    /// Starts per period.
    pub limit: u32,
    /// The period, µs.
    pub per_us: u64,
    /// Extra starts at once.
    pub burst: u32,
}

/// What a limiter says to a fetched job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// It starts (its start is counted).
    Pass,
    /// It waits in the limiter's list; the key's next release (µs), `None`
    /// while the key is paused.
    Parked(Option<u64>),
}

/// One rate limiter's key as Redis holds it, with its waiting jobs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Limiter {
    /// The theoretical arrival time (µs; `tat`).
    pub tat: Option<u64>,
    /// The declaration (`dlimit`, `dper`, `dburst`), the runtime overrides
    /// (`limit`, `per`, `burst`) and `released` (`conf`).
    pub conf: BTreeMap<String, String>,
    /// Waiting jobs' entries, first out first (`waiters`).
    pub waiters: VecDeque<Vec<u8>>,
    /// Released waiters whose start was counted: jid → expiry (µs; `reserved`).
    pub reserved: BTreeMap<String, u64>,
    /// The key's next release in the release schedule (µs; `due`).
    pub due: Option<u64>,
}

fn conf_number(conf: &BTreeMap<String, String>, names: &[&str]) -> Option<f64> {
    names
        .iter()
        .find_map(|n| conf.get(*n))
        .and_then(|v| super::dispatch::settings::lua_number(v))
}

impl Limiter {
    /// The effective limit, period (µs) and burst: the override, else the
    /// declaration (given by the caller, or as stored).
    pub fn effective(&self, declared: Option<Declared>) -> (f64, f64, f64) {
        match declared {
            Some(d) => (
                conf_number(&self.conf, &["limit"]).unwrap_or(f64::from(d.limit)),
                conf_number(&self.conf, &["per"]).unwrap_or(d.per_us as f64),
                conf_number(&self.conf, &["burst"]).unwrap_or(f64::from(d.burst)),
            ),
            None => (
                conf_number(&self.conf, &["limit", "dlimit"]).unwrap_or(0.0),
                conf_number(&self.conf, &["per", "dper"]).unwrap_or(1_000_000.0),
                conf_number(&self.conf, &["burst", "dburst"]).unwrap_or(0.0),
            ),
        }
    }

    /// `rate_acquire.lua`: a fetched job `jid` asks to start at `now` (µs);
    /// `entry` is what waits in the list if it cannot (the caller takes the
    /// job out of its worker's record then). A released waiter whose start
    /// was counted passes at once; nobody jumps the line.
    pub fn acquire(&mut self, declared: Declared, jid: &str, entry: Vec<u8>, now: u64) -> Admit {
        if let Some(until) = self.reserved.remove(jid)
            && until >= now
        {
            return Admit::Pass;
        }
        let (limit, per, burst) = self.effective(Some(declared));
        let verdict = judge_raw(limit, per, burst, self.tat, now);
        if let Verdict::Allow { tat } = verdict
            && self.waiters.is_empty()
        {
            self.tat = Some(tat);
            return Admit::Pass;
        }
        self.conf
            .insert("dlimit".into(), declared.limit.to_string());
        self.conf.insert("dper".into(), declared.per_us.to_string());
        self.conf
            .insert("dburst".into(), declared.burst.to_string());
        self.reserved.retain(|_, until| *until > now);
        self.waiters.push_back(entry);
        let at = match verdict {
            Verdict::Paused => return Admit::Parked(None),
            _ if self.due.is_some() => return Admit::Parked(self.due),
            Verdict::Allow { .. } => now,
            Verdict::Wait { until } => until,
        };
        self.due = Some(at);
        Admit::Parked(Some(at))
    }

    fn count_released(&mut self, n: u64) {
        if n > 0 {
            let before = self
                .conf
                .get("released")
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
            self.conf
                .insert("released".into(), (before + n).to_string());
        }
    }

    /// `rate_release.lua`: releases the waiters the rule allows at `now`
    /// (µs), at most `max`, each with its start counted and reserved until
    /// `now + ttl`; returns their entries (their jobs go to the front of
    /// their queues) and the key's next release (`None`: nobody waits, or paused).
    pub fn release(&mut self, now: u64, ttl: u64, max: u64) -> (Vec<Vec<u8>>, Option<u64>) {
        let (limit, per, burst) = self.effective(None);
        let mut out = Vec::new();
        loop {
            if self.waiters.is_empty() {
                self.due = None;
                self.count_released(out.len() as u64);
                return (out, None);
            }
            match judge_raw(limit, per, burst, self.tat, now) {
                Verdict::Paused => {
                    self.due = None;
                    return (out, None);
                }
                Verdict::Wait { until } => {
                    self.due = Some(until);
                    self.count_released(out.len() as u64);
                    return (out, Some(until));
                }
                Verdict::Allow { tat } => {
                    if out.len() as u64 >= max {
                        self.count_released(out.len() as u64);
                        self.due = Some(now);
                        return (out, Some(now));
                    }
                    self.tat = Some(tat);
                    let e = self.waiters.pop_front().expect("a waiter");
                    let jid = super::slots::fields(&e)
                        .into_iter()
                        .next()
                        .unwrap_or_default();
                    self.reserved
                        .insert(String::from_utf8_lossy(&jid).into_owned(), now + ttl);
                    out.push(e);
                }
            }
        }
    }

    /// `rate_set.lua`: changes the runtime limit, period and burst (`-`
    /// keep, empty clear, or the value as stored) and schedules a release at
    /// `now` when jobs wait (drops it when paused). Returns how many wait.
    pub fn set(&mut self, limit: &str, per: &str, burst: &str, now: u64) -> usize {
        for (name, v) in [("limit", limit), ("per", per), ("burst", burst)] {
            match v {
                "-" => {}
                "" => {
                    self.conf.remove(name);
                }
                v => {
                    self.conf.insert(name.into(), v.into());
                }
            }
        }
        let waiting = self.waiters.len();
        let (limit, _, _) = self.effective(None);
        if waiting > 0 && limit > 0.0 {
            self.due = Some(now);
        } else if limit <= 0.0 {
            self.due = None;
        }
        waiting
    }
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
}
