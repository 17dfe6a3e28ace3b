//! # fairjob-cron
//!
//! The text of a cron expression, parsed into one bit set per field: no time
//! zones, no clock, nothing but `std`. Its own crate so that `fairjob` (which
//! evaluates schedules) and `fairjob-macros` (which rejects a malformed
//! `#[cron]` expression at its token) share one grammar, and both publish.
//!
//! Accepted: 5 fields (`minute hour day-of-month month day-of-week`) or 6
//! with seconds first (`second minute hour day-of-month month day-of-week`);
//! in each field `*`, `?` (as `*`, day fields only), `n`, `a-b`, `*/s`,
//! `a-b/s`, `a/s` (from `a` to the field's end) and comma lists; month names
//! `JAN`–`DEC` and weekday names `SUN`–`SAT` (any case); day-of-week 0 and 7
//! are Sunday. The named forms are `@yearly` (`@annually`), `@monthly`,
//! `@weekly`, `@daily` (`@midnight`) and `@hourly`. When both day fields are
//! restricted, a day matches if either matches (Vixie cron's rule).

use std::fmt;

/// A parsed cron expression: the allowed values of each field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CronFields {
    /// Allowed seconds (bit n = second n); `{0}` for 5-field expressions.
    pub seconds: u64,
    /// Allowed minutes.
    pub minutes: u64,
    /// Allowed hours.
    pub hours: u64,
    /// Allowed days of the month (bits 1–31).
    pub days_of_month: u64,
    /// Allowed months (bits 1–12).
    pub months: u64,
    /// Allowed weekdays (bit 0 = Sunday … bit 6 = Saturday).
    pub days_of_week: u64,
    /// The day-of-month field was `*` or `?`.
    pub dom_any: bool,
    /// The day-of-week field was `*` or `?`.
    pub dow_any: bool,
}

/// Why an expression does not parse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CronSyntaxError {
    /// What is wrong, lowercase, no full stop.
    pub reason: String,
}

impl fmt::Display for CronSyntaxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

impl std::error::Error for CronSyntaxError {}

fn err(reason: impl Into<String>) -> CronSyntaxError {
    CronSyntaxError {
        reason: reason.into(),
    }
}

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const WEEKDAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

#[derive(Clone, Copy)]
struct FieldSpec {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
    names_from: u32,
    question_ok: bool,
}

const SECOND: FieldSpec = FieldSpec {
    name: "second",
    min: 0,
    max: 59,
    names: &[],
    names_from: 0,
    question_ok: false,
};
const MINUTE: FieldSpec = FieldSpec {
    name: "minute",
    ..SECOND
};
const HOUR: FieldSpec = FieldSpec {
    name: "hour",
    max: 23,
    ..SECOND
};
const DOM: FieldSpec = FieldSpec {
    name: "day-of-month",
    min: 1,
    max: 31,
    names: &[],
    names_from: 0,
    question_ok: true,
};
const MONTH: FieldSpec = FieldSpec {
    name: "month",
    min: 1,
    max: 12,
    names: &MONTHS,
    names_from: 1,
    question_ok: false,
};
const DOW: FieldSpec = FieldSpec {
    name: "day-of-week",
    min: 0,
    max: 7,
    names: &WEEKDAYS,
    names_from: 0,
    question_ok: true,
};

/// Parses an expression (5 or 6 fields, or a named form).
pub fn parse_fields(text: &str) -> Result<CronFields, CronSyntaxError> {
    let text = text.trim();
    let expanded = match text.to_ascii_lowercase().as_str() {
        "@yearly" | "@annually" => "0 0 1 1 *",
        "@monthly" => "0 0 1 * *",
        "@weekly" => "0 0 * * 0",
        "@daily" | "@midnight" => "0 0 * * *",
        "@hourly" => "0 * * * *",
        other if other.starts_with('@') => {
            return Err(err(format!(
                "unknown form `{text}`; expected one of `@yearly`, `@annually`, `@monthly`, \
                 `@weekly`, `@daily`, `@midnight`, `@hourly`"
            )));
        }
        _ => text,
    };
    let parts: Vec<&str> = expanded.split_whitespace().collect();
    let (sec, rest) = match parts.len() {
        5 => (None, &parts[..]),
        6 => (Some(parts[0]), &parts[1..]),
        0 => return Err(err("empty cron expression")),
        n => {
            return Err(err(format!(
                "expected 5 fields (minute hour day month weekday) or 6 (with seconds first), got {n}"
            )));
        }
    };
    let seconds = match sec {
        Some(s) => field(s, SECOND)?.0,
        None => 1,
    };
    let minutes = field(rest[0], MINUTE)?.0;
    let hours = field(rest[1], HOUR)?.0;
    let (days_of_month, dom_any) = field(rest[2], DOM)?;
    let months = field(rest[3], MONTH)?.0;
    let (mut days_of_week, dow_any) = field(rest[4], DOW)?;
    if days_of_week & (1 << 7) != 0 {
        days_of_week = (days_of_week & !(1 << 7)) | 1;
    }
    Ok(CronFields {
        seconds,
        minutes,
        hours,
        days_of_month,
        months,
        days_of_week,
        dom_any,
        dow_any,
    })
}

/// One field: its bit set and whether it was a bare wildcard.
fn field(text: &str, spec: FieldSpec) -> Result<(u64, bool), CronSyntaxError> {
    if text == "*" || (text == "?" && spec.question_ok) {
        let mut all = 0u64;
        for v in spec.min..=spec.max {
            all |= 1 << v;
        }
        return Ok((all, true));
    }
    let mut bits = 0u64;
    for item in text.split(',') {
        if item.is_empty() {
            return Err(err(format!(
                "empty item in the {} field `{text}`",
                spec.name
            )));
        }
        let (range, step) = match item.split_once('/') {
            Some((r, s)) => {
                let step: u32 = s.parse().map_err(|_| {
                    err(format!(
                        "step `{s}` in the {} field is not a number",
                        spec.name
                    ))
                })?;
                if step == 0 {
                    return Err(err(format!("step 0 in the {} field", spec.name)));
                }
                (r, Some(step))
            }
            None => (item, None),
        };
        let (lo, hi) = if range == "*" {
            (spec.min, spec.max)
        } else if let Some((a, b)) = range.split_once('-') {
            (value(a, spec)?, value(b, spec)?)
        } else {
            let v = value(range, spec)?;
            (v, if step.is_some() { spec.max } else { v })
        };
        if lo > hi {
            return Err(err(format!(
                "range `{range}` in the {} field runs backwards",
                spec.name
            )));
        }
        let step = step.unwrap_or(1);
        let mut v = lo;
        while v <= hi {
            bits |= 1 << v;
            v += step;
        }
    }
    Ok((bits, false))
}

fn value(text: &str, spec: FieldSpec) -> Result<u32, CronSyntaxError> {
    let lower = text.to_ascii_lowercase();
    if let Some(i) = spec.names.iter().position(|n| *n == lower) {
        return Ok(i as u32 + spec.names_from);
    }
    let v: u32 = text.parse().map_err(|_| {
        err(format!(
            "`{text}` is not a valid {} (expected {}–{})",
            spec.name, spec.min, spec.max
        ))
    })?;
    if v < spec.min || v > spec.max {
        return Err(err(format!(
            "{} {v} is out of range {}–{}",
            spec.name, spec.min, spec.max
        )));
    }
    Ok(v)
}

/// Parses a catch-up policy: `"none"`, or a duration in humantime's short
/// form limited to whole `s`, `m`, `h`, `d` units (`"10m"`, `"1h30m"`).
/// Returns the grace in seconds (`Some(0)` never happens: `"none"` is `None`).
pub fn parse_catch_up(text: &str) -> Result<Option<u64>, CronSyntaxError> {
    let text = text.trim();
    if text.eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    let bad = || {
        err(format!(
            "catch_up `{text}` is neither `none` nor a duration such as `10m`, `1h`, `30s`"
        ))
    };
    let mut total: u64 = 0;
    let mut num = String::new();
    let mut any = false;
    for ch in text.chars() {
        if ch.is_ascii_digit() {
            num.push(ch);
            continue;
        }
        if ch == ' ' {
            continue;
        }
        let n: u64 = num.parse().map_err(|_| bad())?;
        num.clear();
        let unit = match ch {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            _ => return Err(bad()),
        };
        total = total
            .checked_add(n.checked_mul(unit).ok_or_else(bad)?)
            .ok_or_else(bad)?;
        any = true;
    }
    if !num.is_empty() || !any || total == 0 {
        return Err(bad());
    }
    Ok(Some(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn five_and_six_fields() {
        let f = parse_fields("0 3 * * *").unwrap();
        assert_eq!(f.seconds, 1);
        assert_eq!(f.minutes, 1);
        assert_eq!(f.hours, 1 << 3);
        assert!(f.dom_any && f.dow_any);
        let f = parse_fields("*/10 * * * * *").unwrap();
        assert_eq!(f.seconds, (0..6).fold(0, |a, i| a | 1 << (i * 10)));
        assert_eq!(f.minutes, (1u64 << 60) - 1);
    }

    #[test]
    fn named_forms_ranges_lists_names() {
        assert_eq!(
            parse_fields("@daily").unwrap(),
            parse_fields("0 0 * * *").unwrap()
        );
        assert_eq!(
            parse_fields("@HOURLY").unwrap(),
            parse_fields("0 * * * *").unwrap()
        );
        let f = parse_fields("0 9-17/2 1,15 jan-MAR mon-fri").unwrap();
        assert_eq!(f.hours, 1 << 9 | 1 << 11 | 1 << 13 | 1 << 15 | 1 << 17);
        assert_eq!(f.days_of_month, 1 << 1 | 1 << 15);
        assert_eq!(f.months, 0b1110);
        assert_eq!(f.days_of_week, 0b111110);
        assert!(!f.dom_any && !f.dow_any);
        assert_eq!(parse_fields("0 0 * * 7").unwrap().days_of_week, 1);
        assert_eq!(
            parse_fields("5/20 * * * *").unwrap().minutes,
            1 << 5 | 1 << 25 | 1 << 45
        );
    }

    #[test]
    fn mistakes_are_named() {
        for (bad, says) in [
            ("", "empty"),
            ("* * * *", "expected 5 fields"),
            ("60 * * * *", "minute 60 is out of range"),
            ("* 24 * * *", "hour 24"),
            ("* * 0 * *", "day-of-month 0"),
            ("* * * 13 *", "month 13"),
            ("* * * * 8", "day-of-week 8"),
            ("*/0 * * * *", "step 0"),
            ("5-1 * * * *", "backwards"),
            ("x * * * *", "not a valid minute"),
            ("@often", "unknown form"),
            ("1,,2 * * * *", "empty item"),
            ("? * * * *", "not a valid minute"),
        ] {
            let e = parse_fields(bad).unwrap_err();
            assert!(e.reason.contains(says), "{bad:?}: {e}");
        }
    }

    #[test]
    fn catch_up_forms() {
        assert_eq!(parse_catch_up("none").unwrap(), None);
        assert_eq!(parse_catch_up("10m").unwrap(), Some(600));
        assert_eq!(parse_catch_up("1h30m").unwrap(), Some(5400));
        assert_eq!(parse_catch_up("45s").unwrap(), Some(45));
        for bad in ["", "0s", "10", "10 minutes", "latest:10m", "-1m"] {
            assert!(parse_catch_up(bad).is_err(), "{bad:?}");
        }
    }
}
