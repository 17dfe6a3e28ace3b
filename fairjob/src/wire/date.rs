//! Calendar dates of epoch seconds in UTC, as Sidekiq writes them into its
//! dated stats keys (`stat:processed:YYYY-MM-DD`).

/// The UTC calendar date `(year, month, day)` of epoch second `secs`
/// (Howard Hinnant's civil-from-days).
pub fn utc_date(secs: i64) -> (i64, u32, u32) {
    let days = secs.div_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    (y, m as u32, d as u32)
}

/// `YYYY-MM-DD` of epoch second `secs`, UTC.
pub fn utc_day(secs: i64) -> String {
    let (y, m, d) = utc_date(secs);
    format!("{y:04}-{m:02}-{d:02}")
}
