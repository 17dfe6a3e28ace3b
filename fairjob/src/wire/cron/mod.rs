//! Periodic schedules as pure functions: a cron expression in a time zone
//! ([`CronSchedule`]), the next fire time after an instant, and what a poller
//! does with a fire time it finds due ([`decide`]: on time, late, missed and
//! caught up, or skipped). No IO, no clock: callers pass the time.
//!
//! # Time zones and DST
//!
//! Fire times are whole seconds. An expression is matched against the local
//! wall-clock time of its zone (UTC by default), with these rules where the
//! zone's offset changes (the ones Vixie cron and cronie follow):
//!
//! - a schedule whose hour field is `*` (hourly or more often) runs on real
//!   time: every instant whose local time matches fires, so an every-minute
//!   job runs every minute across both changes (twice through the repeated
//!   hour of a fall-back, as the minutes really happen twice);
//! - any other schedule (a fixed hour, such as `30 2 * * *`) runs **once** per
//!   matching wall-clock time: a time that does not exist (spring forward)
//!   runs once, shifted forward by the length of the gap (02:30 → 03:30,
//!   RFC 5545's and jiff's "compatible" choice); a time that happens twice
//!   (fall back) runs once, at its first occurrence.
//!
//! # Catch-up
//!
//! A fire time found due more than [`ON_TIME`] late was missed (no poller ran,
//! a deploy, a stall). Missed fire times never flood: of all fire times up to
//! now, only the latest runs, and only if it is within the schedule's grace
//! (`catch_up = "10m"`, the default); with `catch_up = "none"` only a fire
//! time within [`ON_TIME`] of now runs.
//!
//! # Dependencies
//!
//! The expression grammar is ours ([`expr`], the `std`-only `fairjob-cron`
//! crate, shared with the derive macro so a bad expression is a compile
//! error at its token).
//! Zones come from `jiff` with only its `std` and `tzdb-zoneinfo` features:
//! it reads the system's `/usr/share/zoneinfo` (present on Debian and every
//! usual server image) and pulls in no other crate but `jiff-core`. `cron`
//! and `croner` were passed over: both bring `chrono` (and `croner` its own
//! DST choices), and we need our exact gap/fold rules and the same parser in
//! the macro crate.

pub mod entry;
pub use fairjob_cron as expr;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use entry::{CronEntry, CronSource};
pub use expr::{CronFields, CronSyntaxError, parse_catch_up, parse_fields};
use jiff::Timestamp;
use jiff::tz::{AmbiguousOffset, Offset, TimeZone};

/// A fire time is "on time" when found due at most this late; a later one
/// counts as missed and follows the schedule's catch-up policy.
pub const ON_TIME: Duration = Duration::from_secs(2);

/// The default catch-up grace: the latest missed fire time within 10 minutes
/// runs once.
pub const DEFAULT_CATCH_UP_SECS: u64 = 600;

/// How far ahead [`CronSchedule::next_after`] looks before it concludes that
/// an expression never fires (`0 0 30 2 *`).
const HORIZON_YEARS: i64 = 8;

/// What to do with a fire time while the schedule's previous run is still
/// queued or running.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Overlap {
    /// Enqueue it anyway (the default).
    #[default]
    Allow,
    /// Skip it (and count the skip).
    Skip,
}

impl Overlap {
    /// `"allow"` or `"skip"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Overlap::Allow => "allow",
            Overlap::Skip => "skip",
        }
    }

    /// Parses `"allow"` or `"skip"`.
    pub fn parse(text: &str) -> Option<Overlap> {
        match text {
            "allow" => Some(Overlap::Allow),
            "skip" => Some(Overlap::Skip),
            _ => None,
        }
    }
}

/// Why a schedule's text is rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CronError {
    /// The expression does not parse.
    #[error("invalid cron expression `{expr}`: {reason}")]
    Expression {
        /// The text given.
        expr: String,
        /// What is wrong.
        reason: String,
    },
    /// The zone is not in the time zone database.
    #[error("unknown time zone `{0}` (expected an IANA name such as `Europe/Berlin`, or `UTC`)")]
    Zone(String),
    /// The expression never matches a date (`0 0 30 2 *`).
    #[error("cron expression `{0}` never fires")]
    Never(String),
    /// The catch-up policy does not parse.
    #[error("{0}")]
    CatchUp(String),
}

impl CronError {
    /// The library's error for schedule `name`.
    pub fn for_schedule(self, name: &str) -> crate::error::Error {
        use crate::error::Error;
        match self {
            CronError::Zone(zone) => Error::UnknownZone {
                name: name.to_owned(),
                zone,
            },
            other => Error::InvalidSchedule {
                name: name.to_owned(),
                reason: other.to_string(),
            },
        }
    }
}

/// A cron expression in a time zone.
#[derive(Clone, Debug)]
pub struct CronSchedule {
    expr: String,
    zone_name: String,
    fields: CronFields,
    zone: TimeZone,
}

impl PartialEq for CronSchedule {
    fn eq(&self, other: &Self) -> bool {
        self.fields == other.fields && self.zone_name == other.zone_name
    }
}

/// Looks a zone up by IANA name (`"UTC"` always exists).
pub fn zone(name: &str) -> Result<TimeZone, CronError> {
    if name.eq_ignore_ascii_case("utc") {
        return Ok(TimeZone::UTC);
    }
    TimeZone::get(name).map_err(|_| CronError::Zone(name.to_string()))
}

impl CronSchedule {
    /// Parses `expr` in the zone named `zone` (an IANA name; `"UTC"` for UTC).
    pub fn new(expr: &str, zone_name: &str) -> Result<CronSchedule, CronError> {
        let fields = parse_fields(expr).map_err(|e| CronError::Expression {
            expr: expr.to_string(),
            reason: e.reason,
        })?;
        let schedule = CronSchedule {
            expr: expr.trim().to_string(),
            zone_name: zone_name.to_string(),
            fields,
            zone: zone(zone_name)?,
        };
        // 2000-01-01: any expression that can match does so within the horizon.
        if schedule.next_after_secs(946_684_800).is_none() {
            return Err(CronError::Never(expr.to_string()));
        }
        Ok(schedule)
    }

    /// The expression as given (trimmed).
    pub fn expr(&self) -> &str {
        &self.expr
    }

    /// The zone's name.
    pub fn zone_name(&self) -> &str {
        &self.zone_name
    }

    /// Whether the schedule fires on real time (hour field `*`), rather than
    /// once per wall-clock time (see the module doc).
    pub fn is_real_time(&self) -> bool {
        self.fields.hours == (1 << 24) - 1
    }

    /// The first fire time strictly after `t`.
    pub fn next_after(&self, t: SystemTime) -> Option<SystemTime> {
        let secs = match t.duration_since(UNIX_EPOCH) {
            Ok(d) => d.as_secs() as i64,
            Err(e) => -(e.duration().as_secs_f64().ceil() as i64),
        };
        self.next_after_secs(secs)
            .map(|s| UNIX_EPOCH + Duration::from_secs(s.max(0) as u64))
    }

    /// The first fire time strictly after `t` (Unix seconds).
    pub fn next_after_secs(&self, t: i64) -> Option<i64> {
        let ts = Timestamp::from_second(t).ok()?;
        // Near an offset change, scan from 3 hours of wall-clock time back
        // (a fold repeats earlier wall-clock times after `t`) and until a
        // found instant can no longer be beaten.
        let near = self
            .zone
            .following(Timestamp::from_second(t - 4 * 3600).ok()?)
            .next()
            .is_some_and(|tr| tr.timestamp().as_second() <= t + 4 * 3600);
        let local_t = t + i64::from(self.offset_at(ts));
        let mut c = if near {
            local_t - 3 * 3600
        } else {
            local_t + 1
        };
        let limit = local_t + HORIZON_YEARS * 366 * 86_400;
        let mut best: Option<i64> = None;
        loop {
            c = self.next_local_ge(c, limit)?;
            if let Some(b) = best {
                let b_local = b + i64::from(self.offset_at(Timestamp::from_second(b).ok()?));
                if c > b_local + 3 * 3600 {
                    return best;
                }
            }
            for inst in self.instants(c) {
                if inst > t && best.is_none_or(|b| inst < b) {
                    best = Some(inst);
                }
            }
            if best.is_some() && !near {
                return best;
            }
            c += 1;
        }
    }

    fn offset_at(&self, ts: Timestamp) -> i32 {
        self.zone.to_offset(ts).seconds()
    }

    /// The instants a matching wall-clock time `local` (seconds, as if UTC)
    /// fires at, by the rules in the module doc.
    fn instants(&self, local: i64) -> Vec<i64> {
        let Ok(ts) = Timestamp::from_second(local) else {
            return Vec::new();
        };
        let dt = Offset::UTC.to_datetime(ts);
        let at = |o: Offset| local - i64::from(o.seconds());
        match self.zone.to_ambiguous_timestamp(dt).offset() {
            AmbiguousOffset::Unambiguous { offset } => vec![at(offset)],
            AmbiguousOffset::Gap { before, .. } => {
                if self.is_real_time() {
                    Vec::new()
                } else {
                    // Compatible: the wall-clock time read with the offset
                    // before the gap, i.e. shifted forward by the gap.
                    vec![at(before)]
                }
            }
            AmbiguousOffset::Fold { before, after } => {
                if self.is_real_time() {
                    vec![at(before), at(after)]
                } else {
                    vec![at(before)]
                }
            }
        }
    }

    /// The first wall-clock second at or after `c` (seconds, as if UTC) that
    /// matches the fields, or `None` past `limit`.
    fn next_local_ge(&self, c: i64, limit: i64) -> Option<i64> {
        let f = &self.fields;
        let mut days = c.div_euclid(86_400);
        let mut sod = c.rem_euclid(86_400);
        loop {
            if days * 86_400 > limit {
                return None;
            }
            let (y, m, d) = civil_from_days(days);
            if f.months & (1 << m) == 0 {
                // First day of the next month.
                let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
                days = days_from_civil(ny, nm, 1);
                sod = 0;
                continue;
            }
            if !self.day_matches(days, d) {
                days += 1;
                sod = 0;
                continue;
            }
            let (mut h, mut mi, mut s) = (sod / 3600, sod % 3600 / 60, sod % 60);
            match next_bit(f.hours, h) {
                None => {
                    days += 1;
                    sod = 0;
                    continue;
                }
                Some(nh) if nh != h => (h, mi, s) = (nh, 0, 0),
                _ => {}
            }
            match next_bit(f.minutes, mi) {
                None => {
                    sod = (h + 1) * 3600;
                    if sod >= 86_400 {
                        days += 1;
                        sod = 0;
                    }
                    continue;
                }
                Some(nm) if nm != mi => (mi, s) = (nm, 0),
                _ => {}
            }
            match next_bit(f.seconds, s) {
                None => {
                    sod = h * 3600 + (mi + 1) * 60;
                    if sod >= 86_400 {
                        days += 1;
                        sod = 0;
                    }
                    continue;
                }
                Some(ns) => s = ns,
            }
            let _ = y;
            return Some(days * 86_400 + h * 3600 + mi * 60 + s);
        }
    }

    fn day_matches(&self, days: i64, dom: i64) -> bool {
        let f = &self.fields;
        // 1970-01-01 was a Thursday (4).
        let dow = (days + 4).rem_euclid(7);
        let dom_ok = f.days_of_month & (1 << dom) != 0;
        let dow_ok = f.days_of_week & (1 << dow) != 0;
        match (f.dom_any, f.dow_any) {
            (false, false) => dom_ok || dow_ok,
            _ => dom_ok && dow_ok,
        }
    }
}

/// The lowest set bit of `mask` at or above `from`.
fn next_bit(mask: u64, from: i64) -> Option<i64> {
    if from >= 64 {
        return None;
    }
    let rest = mask >> from;
    (rest != 0).then(|| from + i64::from(rest.trailing_zeros()))
}

/// (year, month 1–12, day 1–31) of a day count since 1970-01-01
/// (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// The day count since 1970-01-01 of a civil date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// How a schedule handles fire times missed while no poller ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CatchUp {
    /// The latest missed fire time within this many seconds runs once.
    Latest(u64),
    /// Missed fire times are skipped.
    None,
}

impl Default for CatchUp {
    fn default() -> Self {
        CatchUp::Latest(DEFAULT_CATCH_UP_SECS)
    }
}

impl CatchUp {
    /// Parses `"none"` or a grace such as `"10m"`.
    pub fn parse(text: &str) -> Result<CatchUp, CronError> {
        match parse_catch_up(text) {
            Ok(Some(secs)) => Ok(CatchUp::Latest(secs)),
            Ok(None) => Ok(CatchUp::None),
            Err(e) => Err(CronError::CatchUp(e.reason)),
        }
    }

    /// The grace in seconds (`None` → 0).
    pub fn grace_secs(self) -> u64 {
        match self {
            CatchUp::Latest(s) => s,
            CatchUp::None => 0,
        }
    }
}

/// What a poller does with a schedule whose next fire time is `due`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The fire time to enqueue now, if any.
    pub fire: Option<i64>,
    /// Fire times before `fire` (or up to now) were missed and not run.
    pub missed: bool,
    /// The schedule's next fire time afterwards (`None`: it never fires again).
    pub next: Option<i64>,
}

/// Decides what to do at `now_ms` (Unix milliseconds) with a schedule whose
/// stored next fire time is `due` (Unix seconds). `None` when it is not due.
pub fn decide(
    schedule: &CronSchedule,
    catch_up: CatchUp,
    due: i64,
    now_ms: i64,
) -> Option<Decision> {
    if due * 1000 > now_ms {
        return None;
    }
    let on_time_ms = ON_TIME.as_millis() as i64;
    if now_ms - due * 1000 <= on_time_ms {
        return Some(Decision {
            fire: Some(due),
            missed: false,
            next: schedule.next_after_secs(due),
        });
    }
    // Missed: find the latest fire time up to now within the window.
    let now = now_ms.div_euclid(1000);
    let window_ms = (catch_up.grace_secs() as i64 * 1000).max(on_time_ms);
    let from = (now_ms - window_ms).div_euclid(1000).max(due);
    let mut latest = None;
    // Walk from the window's start (at most one fire per second of it).
    let mut c = if from > due {
        schedule.next_after_secs(from - 1)
    } else {
        Some(due)
    };
    while let Some(f) = c {
        if f > now {
            break;
        }
        if now_ms - f * 1000 <= window_ms {
            latest = Some(f);
        }
        c = schedule.next_after_secs(f);
    }
    let next = schedule.next_after_secs(latest.unwrap_or(now).max(now));
    Some(Decision {
        fire: latest,
        missed: true,
        next,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Unix seconds of a UTC date-time.
    fn utc(y: i64, mo: i64, d: i64, h: i64, mi: i64, s: i64) -> i64 {
        days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + s
    }

    fn sched(expr: &str, zone: &str) -> CronSchedule {
        CronSchedule::new(expr, zone).unwrap()
    }

    fn fires(s: &CronSchedule, from: i64, n: usize) -> Vec<i64> {
        let mut out = Vec::new();
        let mut t = from;
        for _ in 0..n {
            t = s.next_after_secs(t).unwrap();
            out.push(t);
        }
        out
    }

    #[test]
    fn civil_days_round_trip() {
        for days in [-1000, 0, 59, 10_957, 19_000, 20_000, 50_000] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(days_from_civil(2024, 2, 29), 19_782);
    }

    #[test]
    fn next_in_utc() {
        let s = sched("0 3 * * *", "UTC");
        let t = utc(2026, 11, 25, 12, 0, 0);
        assert_eq!(s.next_after_secs(t), Some(utc(2026, 11, 26, 3, 0, 0)));
        assert_eq!(
            s.next_after_secs(utc(2026, 11, 26, 3, 0, 0)),
            Some(utc(2026, 11, 27, 3, 0, 0))
        );
        let every = sched("*/10 * * * * *", "UTC");
        assert_eq!(every.next_after_secs(t + 3), Some(t + 10));
        let sec = sched("* * * * * *", "UTC");
        assert_eq!(fires(&sec, t, 3), vec![t + 1, t + 2, t + 3]);
        let monthly = sched("@monthly", "UTC");
        assert_eq!(monthly.next_after_secs(t), Some(utc(2026, 12, 1, 0, 0, 0)));
        let yearly = sched("@yearly", "UTC");
        assert_eq!(yearly.next_after_secs(t), Some(utc(2027, 1, 1, 0, 0, 0)));
        // 2026-11-29 is a Sunday.
        let weekly = sched("@weekly", "UTC");
        assert_eq!(weekly.next_after_secs(t), Some(utc(2026, 11, 29, 0, 0, 0)));
        let leap = sched("0 0 29 2 *", "UTC");
        assert_eq!(leap.next_after_secs(t), Some(utc(2028, 2, 29, 0, 0, 0)));
        // Both day fields restricted: either matches (1st, or a Monday).
        let either = sched("0 0 1 * mon", "UTC");
        assert_eq!(either.next_after_secs(t), Some(utc(2026, 11, 30, 0, 0, 0)));
        assert_eq!(
            either.next_after_secs(utc(2026, 11, 30, 0, 0, 0)),
            Some(utc(2026, 12, 1, 0, 0, 0))
        );
    }

    #[test]
    fn next_in_a_zone() {
        // Berlin is UTC+1 in November.
        let s = sched("0 3 * * *", "Europe/Berlin");
        let t = utc(2026, 11, 25, 12, 0, 0);
        assert_eq!(s.next_after_secs(t), Some(utc(2026, 11, 26, 2, 0, 0)));
        let st = s
            .next_after(UNIX_EPOCH + Duration::from_secs(t as u64))
            .unwrap();
        assert_eq!(
            st.duration_since(UNIX_EPOCH).unwrap().as_secs() as i64,
            utc(2026, 11, 26, 2, 0, 0)
        );
    }

    #[test]
    fn bad_input_is_named() {
        assert!(matches!(
            CronSchedule::new("61 * * * *", "UTC"),
            Err(CronError::Expression { .. })
        ));
        assert_eq!(
            CronSchedule::new("0 3 * * *", "Mars/Olympus"),
            Err(CronError::Zone("Mars/Olympus".into()))
        );
        assert!(matches!(
            CronSchedule::new("0 0 30 2 *", "UTC"),
            Err(CronError::Never(_))
        ));
        assert!(CatchUp::parse("latest:10m").is_err());
        assert_eq!(CatchUp::parse("none"), Ok(CatchUp::None));
        assert_eq!(CatchUp::parse("15m"), Ok(CatchUp::Latest(900)));
    }

    // Europe/Berlin: spring forward 2026-03-29 01:00 UTC (02:00 CET → 03:00
    // CEST); fall back 2026-10-25 01:00 UTC (03:00 CEST → 02:00 CET).

    #[test]
    fn dst_gap_runs_once_shifted() {
        let s = sched("30 2 * * *", "Europe/Berlin");
        let before = utc(2026, 3, 28, 12, 0, 0);
        // 2026-03-28 02:30 CET = 01:30 UTC was before; on the 29th 02:30 does
        // not exist: it runs once at 03:30 CEST = 01:30 UTC; then 02:30 CEST.
        assert_eq!(
            fires(&s, before, 3),
            vec![
                utc(2026, 3, 29, 1, 30, 0),
                utc(2026, 3, 30, 0, 30, 0),
                utc(2026, 3, 31, 0, 30, 0)
            ]
        );
        // Just before the gap, with the transition near.
        assert_eq!(
            s.next_after_secs(utc(2026, 3, 29, 0, 59, 59)),
            Some(utc(2026, 3, 29, 1, 30, 0))
        );
        // Every minute: real time, no double and no hole.
        let m = sched("* * * * *", "Europe/Berlin");
        let t = utc(2026, 3, 29, 0, 58, 0);
        assert_eq!(
            fires(&m, t, 3),
            vec![t + 60, t + 120, t + 180],
            "01:59 CET, 03:00 CEST, 03:01 CEST"
        );
    }

    #[test]
    fn dst_fold_runs_once() {
        let s = sched("30 2 * * *", "Europe/Berlin");
        let before = utc(2026, 10, 24, 12, 0, 0);
        // 02:30 happens at 00:30 UTC (CEST) and 01:30 UTC (CET): once, the first.
        assert_eq!(
            fires(&s, before, 2),
            vec![utc(2026, 10, 25, 0, 30, 0), utc(2026, 10, 26, 1, 30, 0)]
        );
        // From between the two occurrences, the second is not a fire time.
        assert_eq!(
            s.next_after_secs(utc(2026, 10, 25, 0, 45, 0)),
            Some(utc(2026, 10, 26, 1, 30, 0))
        );
        // Every 30 minutes on real time: both occurrences of 02:00 and 02:30.
        let m = sched("*/30 * * * *", "Europe/Berlin");
        let t = utc(2026, 10, 24, 23, 45, 0);
        assert_eq!(
            fires(&m, t, 5),
            vec![
                utc(2026, 10, 25, 0, 0, 0),
                utc(2026, 10, 25, 0, 30, 0),
                utc(2026, 10, 25, 1, 0, 0),
                utc(2026, 10, 25, 1, 30, 0),
                utc(2026, 10, 25, 2, 0, 0),
            ]
        );
    }

    #[test]
    fn decide_on_time_late_and_missed() {
        let s = sched("* * * * * *", "UTC");
        let t = utc(2026, 11, 25, 12, 0, 0);
        assert_eq!(decide(&s, CatchUp::default(), t, t * 1000 - 1), None);
        // Within ON_TIME: this fire time, then the next.
        assert_eq!(
            decide(&s, CatchUp::default(), t, t * 1000 + 1500),
            Some(Decision {
                fire: Some(t),
                missed: false,
                next: Some(t + 1)
            })
        );
        // 20 s with no poller: only the latest runs, once.
        assert_eq!(
            decide(&s, CatchUp::default(), t, (t + 20) * 1000 + 300),
            Some(Decision {
                fire: Some(t + 20),
                missed: true,
                next: Some(t + 21)
            })
        );
        let daily = sched("0 3 * * *", "UTC");
        let due = utc(2026, 11, 25, 3, 0, 0);
        // 5 minutes late: within the default 10 minutes' grace.
        assert_eq!(
            decide(&daily, CatchUp::default(), due, (due + 300) * 1000),
            Some(Decision {
                fire: Some(due),
                missed: true,
                next: Some(due + 86_400)
            })
        );
        // An hour late: skipped.
        assert_eq!(
            decide(&daily, CatchUp::default(), due, (due + 3600) * 1000),
            Some(Decision {
                fire: None,
                missed: true,
                next: Some(due + 86_400)
            })
        );
        // `none`: 5 minutes late is skipped.
        assert_eq!(
            decide(&daily, CatchUp::None, due, (due + 300) * 1000)
                .unwrap()
                .fire,
            None
        );
        // Days of downtime: no flood, the latest within grace at most.
        let d = decide(&s, CatchUp::Latest(60), t, (t + 3 * 86_400) * 1000).unwrap();
        assert_eq!(d.fire, Some(t + 3 * 86_400));
    }
}
