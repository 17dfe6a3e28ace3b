//! Times, durations and counts as the dashboard and the CLI print them
//! (UTC), and the `-`-for-nothing forms the dashboard's templates show.

/// An iterable job's progress in one line: `step 42 (cursor 41), 3 runs,
/// 2 yields, 12 s run, checkpoint 2026-… UTC`, and `cancelled` when it was;
/// empty for a job without iterable state.
pub fn iteration_text(view: Option<&fairjob::inspect::IterationView>) -> String {
    let Some(v) = view else {
        return String::new();
    };
    let mut out = format!(
        "{} steps (cursor {}), {} runs, {} yields, {} run",
        format_count(v.steps),
        shorten(v.cursor.as_deref().unwrap_or("-"), 80),
        v.executions,
        v.yields,
        format_duration(v.runtime)
    );
    if let Some(at) = v.last_checkpoint {
        out.push_str(&format!(", checkpoint {}", format_time(at)));
    }
    if v.cancelled {
        out.push_str(", cancelled");
    }
    if let Some(at) = v.yield_asked_at {
        out.push_str(&format!(
            ", asked to yield {}{}{}",
            format_time(at),
            v.yield_reason
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default(),
            if v.yield_ignored {
                " (ignored past the cool-down)"
            } else {
                ""
            }
        ));
    }
    out
}

/// `YYYY-MM-DD HH:MM:SS UTC` for epoch seconds.
pub fn format_time(epoch: f64) -> String {
    let secs = epoch.floor() as i64;
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = fairjob::wire::utc_date(secs);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// A duration for people: `850 ms`, `42 s`, `17 min`, `3 h 5 min`, `2 d 4 h`.
pub fn format_duration(secs: f64) -> String {
    let secs = secs.max(0.0);
    if secs < 1.0 {
        return format!("{} ms", (secs * 1000.0).round() as u64);
    }
    let s = secs.round() as u64;
    match s {
        0..=89 => format!("{s} s"),
        90..=5_399 => format!("{} min", (s + 30) / 60),
        5_400..=172_799 => {
            let (h, m) = (s / 3600, s % 3600 / 60);
            if m == 0 {
                format!("{h} h")
            } else {
                format!("{h} h {m} min")
            }
        }
        _ => format!("{} d {} h", s / 86_400, s % 86_400 / 3600),
    }
}

/// A count with thousands separators: `1,204`.
pub fn format_count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `1st`, `2nd`, `3rd`, `4th`, `11th`, `21st`…
pub fn ordinal(n: u64) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

// ---- the dashboard's cells (the templates get strings) ----

/// A duration in seconds (`17 min`), or `-` when unknown.
pub(crate) fn duration_or_dash(secs: Option<f64>) -> String {
    secs.map_or_else(|| "-".to_owned(), format_duration)
}

/// A duration in milliseconds, written as [`format_duration`] does, or `-`.
pub(crate) fn millis_or_dash(millis: Option<u64>) -> String {
    millis.map_or_else(|| "-".to_owned(), |m| format_duration(m as f64 / 1000.0))
}

/// `2026-11-22 12:04:05 UTC`, or `-` for 0.
pub(crate) fn time_or_dash(epoch: f64) -> String {
    if epoch <= 0.0 {
        "-".to_owned()
    } else {
        format_time(epoch)
    }
}

/// A share of 1 as a percentage: `42.0%`.
pub(crate) fn percent(share: f64) -> String {
    format!("{:.1}%", share * 100.0)
}

/// Text shortened to `max` characters, with an ellipsis when cut.
pub(crate) fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        let mut out: String = text.chars().take(max).collect();
        out.push('…');
        out
    }
}

/// A rate as the CLI takes it: `20/s`, `100/1m`, `5/250ms`.
pub(crate) fn rate(limit: u32, per_ms: u64) -> String {
    let per = match per_ms {
        1000 => "s".to_owned(),
        60_000 => "m".to_owned(),
        3_600_000 => "h".to_owned(),
        ms if ms % 3_600_000 == 0 => format!("{}h", ms / 3_600_000),
        ms if ms % 60_000 == 0 => format!("{}m", ms / 60_000),
        ms if ms % 1000 == 0 => format!("{}s", ms / 1000),
        ms => format!("{ms}ms"),
    };
    format!("{limit}/{per}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(format_time(0.0), "1970-01-01 00:00:00 UTC");
        assert_eq!(
            format_time(951_782_400.0 + 3_723.0),
            "2000-02-29 01:02:03 UTC"
        );
        assert_eq!(format_duration(0.25), "250 ms");
        assert_eq!(format_duration(42.0), "42 s");
        assert_eq!(format_duration(1_020.0), "17 min");
        assert_eq!(format_duration(3.0 * 3600.0 + 300.0), "3 h 5 min");
        assert_eq!(format_count(1_204), "1,204");
        assert_eq!(format_count(1_200_000), "1,200,000");
        assert_eq!(format_count(12), "12");
        assert_eq!(ordinal(5), "5th");
        assert_eq!(ordinal(22), "22nd");
        assert_eq!(ordinal(13), "13th");
    }

    #[test]
    fn cells() {
        assert_eq!(duration_or_dash(None), "-");
        assert_eq!(millis_or_dash(Some(1_500)), "2 s");
        assert_eq!(time_or_dash(0.0), "-");
        assert_eq!(percent(0.4207), "42.1%");
        assert_eq!(shorten("abcdé", 4), "abcd…");
        assert_eq!(shorten("abcd", 4), "abcd");
    }
}
