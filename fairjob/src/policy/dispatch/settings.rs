//! A tenant's settings on a sharded queue: the changes people make
//! ([`ShardPolicy`], each a [`Setting`]), their stored form in the queue's
//! `policy` hash, and what dispatch reads back ([`TenantSettings`], [`settings_of`]).
//! The twin of `broker/scripts/lib/dispatch/settings.lua`.
//!
//! The hash: `c:<tenant>` the cap (the running limit; 0 pauses), `w:<tenant>`
//! the weight (default 1), `f:<tenant>` the floor (default 0), `r:<tenant>` the
//! rate (`<limit>/<period µs>`), `b:<tenant>` the burst, `h:<tenant>` fair
//! yield's share hold (`<limit>|<until µs>`); tenant `*` holds the queue's
//! defaults, `y:grace`, `y:minrun`, `y:cooldown` and `y:off` its fair-yield
//! settings.

use std::collections::BTreeMap;

use crate::error::{Error, Result};

/// One setting of a [`ShardPolicy`] change.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Setting<T> {
    /// Leave it as it is.
    #[default]
    Keep,
    /// Remove it (the tenant falls back to the queue's default; the default
    /// falls back to weight 1, floor 0, no cap).
    Clear,
    /// Set it.
    Set(T),
}

impl<T: ToString> Setting<T> {
    /// The change as the policy script takes it: `-` keep, `` clear, or the value.
    pub fn stored(&self) -> String {
        match self {
            Setting::Keep => "-".to_owned(),
            Setting::Clear => String::new(),
            Setting::Set(v) => v.to_string(),
        }
    }
}

/// A tenant's rate on a sharded queue: at most `limit` starts per `per_us`
/// microseconds, spread evenly (GCRA with no burst, on Redis's clock). Parse
/// one with `fairjob::rate::parse_tenant_rate` (`10/s`, `100/1m`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ShardRate {
    /// Starts per period (> 0).
    pub limit: u32,
    /// The period, µs (> 0).
    pub per_us: u64,
}

impl ShardRate {
    /// The stored form in the policy hash: `<limit>/<period µs>`.
    pub fn stored(&self) -> String {
        format!("{}/{}", self.limit, self.per_us)
    }

    /// Reads the stored form back (`None` when malformed).
    pub fn from_stored(text: &str) -> Option<ShardRate> {
        let (l, p) = text.split_once('/')?;
        let (limit, per_us) = (l.parse().ok()?, p.parse().ok()?);
        (limit > 0 && per_us > 0).then_some(ShardRate { limit, per_us })
    }
}

impl std::fmt::Display for ShardRate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.stored())
    }
}

/// A change of a sharded queue's fair-share settings, for one tenant or for
/// every tenant without its own (the default).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ShardPolicy {
    /// Share under contention relative to other tenants (default 1; > 0).
    pub weight: Setting<f64>,
    /// Jobs guaranteed running: a tenant under its floor with pending work is
    /// served before share order (default 0).
    pub floor: Setting<u32>,
    /// The running limit (default none; 0 pauses).
    pub cap: Setting<u32>,
    /// Starts per period (default none): a tenant whose rate is spent is
    /// skipped, its pass kept, until its rate allows its next start.
    pub rate: Setting<ShardRate>,
    /// The running limit instead of the cap while no other tenant of the
    /// queue has pending work (counts only above a cap; default none).
    pub burst: Setting<u32>,
}

impl ShardPolicy {
    /// This change with the cap set (`None`: removed).
    #[must_use]
    pub fn with_cap(mut self, cap: Option<u32>) -> Self {
        self.cap = cap.map_or(Setting::Clear, Setting::Set);
        self
    }

    /// A clear error for a value no queue may hold.
    pub fn check(&self) -> Result<()> {
        if let Setting::Set(w) = self.weight
            && !(w.is_finite() && w > 0.0 && w <= 1e6)
        {
            return Err(Error::Config(format!(
                "a weight is a number above 0 and at most 1000000, not {w}"
            )));
        }
        if let Setting::Set(r) = self.rate
            && (r.limit == 0 || r.per_us == 0 || r.per_us < u64::from(r.limit))
        {
            return Err(Error::Config(format!(
                "a tenant's rate is at least 1 start per period and at most one per µs, not {} per {} µs (a cap of 0 pauses a tenant)",
                r.limit, r.per_us
            )));
        }
        Ok(())
    }

    /// The fields this change writes, as the policy script takes them:
    /// (field prefix, stored value: `-` keep, empty clear), in the script's order.
    pub fn stored(&self) -> [(&'static str, String); 5] {
        [
            ("w:", self.weight.stored()),
            ("f:", self.floor.stored()),
            ("c:", self.cap.stored()),
            ("r:", self.rate.stored()),
            ("b:", self.burst.stored()),
        ]
    }

    /// Applies this change to a stored policy hash for `field` (an encoded
    /// tenant, or `*` for the default), as the policy script does.
    pub fn apply(&self, policy: &mut BTreeMap<String, String>, field: &str) {
        for (prefix, value) in self.stored() {
            let key = format!("{prefix}{field}");
            match value.as_str() {
                "-" => {}
                "" => {
                    policy.remove(&key);
                }
                _ => {
                    policy.insert(key, value);
                }
            }
        }
    }
}

/// What dispatch reads of a tenant's settings at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct TenantSettings {
    /// The running limit (`None`: none).
    pub cap: Option<f64>,
    /// The weight (> 0; 1 unless set).
    pub weight: f64,
    /// The floor (0 unless set).
    pub floor: f64,
    /// The running limit while alone, when above the cap.
    pub burst: Option<f64>,
    /// The emission interval of its rate (µs) and the starts its window checks.
    pub rate: Option<(u64, u64)>,
    /// Fair yield's share hold in force.
    pub hold: Option<f64>,
    /// Fair yield's share hold as stored, in force or not.
    pub hold_raw: Option<String>,
}

/// A number as Lua's `tonumber` reads a stored string (decimal, with
/// surrounding spaces; hexadecimal integers).
pub fn lua_number(s: &str) -> Option<f64> {
    let t = s.trim_matches(|c: char| c.is_ascii_whitespace());
    if t.is_empty() {
        return None;
    }
    if let Some(hex) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        return u64::from_str_radix(hex, 16).ok().map(|v| v as f64);
    }
    if !t
        .bytes()
        .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'))
    {
        return None;
    }
    t.parse().ok()
}

/// The emission interval (µs) of a stored rate `<limit>/<period µs>` and the
/// starts its window checks (the largest divisor of `limit` not above 64);
/// `None` for none, a malformed or a zero one.
pub fn rate_interval(stored: &str) -> Option<(u64, u64)> {
    let (l, per) = stored.split_once('/')?;
    if l.is_empty() || per.is_empty() || !(l.bytes().chain(per.bytes()).all(|b| b.is_ascii_digit()))
    {
        return None;
    }
    let (l, per): (u64, u64) = (l.parse().ok()?, per.parse().ok()?);
    if l == 0 || per == 0 {
        return None;
    }
    let window = (1..=l.min(64)).rev().find(|d| l % d == 0).unwrap_or(1);
    Some((per.div_ceil(l), window))
}

/// `t`'s settings at `now` (µs) from the stored hash: its own, else the
/// queue's default (`*`).
pub fn settings_of(policy: &BTreeMap<String, String>, t: &str, now: u64) -> TenantSettings {
    let own_or_default = |prefix: &str| {
        policy
            .get(&format!("{prefix}{t}"))
            .or_else(|| policy.get(&format!("{prefix}*")))
    };
    let number = |prefix: &str| own_or_default(prefix).and_then(|v| lua_number(v));
    let weight = number("w:").filter(|w| *w > 0.0).unwrap_or(1.0);
    let hold_raw = policy.get(&format!("h:{t}")).cloned();
    let hold = hold_raw.as_deref().and_then(|h| {
        let (limit, until) = h.split_once('|')?;
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(limit) || !digits(until) {
            return None;
        }
        (until.parse::<f64>().ok()? > now as f64).then(|| limit.parse().ok())?
    });
    TenantSettings {
        cap: number("c:"),
        weight,
        floor: number("f:").unwrap_or(0.0),
        burst: number("b:"),
        rate: own_or_default("r:").and_then(|v| rate_interval(v)),
        hold,
        hold_raw,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(fields: &[(&str, &str)]) -> BTreeMap<String, String> {
        fields
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn a_tenants_own_setting_wins_over_the_default() {
        let p = policy(&[("c:*", "3"), ("c:a", "1"), ("w:*", "2"), ("f:b", "1")]);
        let a = settings_of(&p, "a", 0);
        assert_eq!((a.cap, a.weight, a.floor), (Some(1.0), 2.0, 0.0));
        let b = settings_of(&p, "b", 0);
        assert_eq!((b.cap, b.weight, b.floor), (Some(3.0), 2.0, 1.0));
    }

    #[test]
    fn a_weight_of_zero_or_junk_is_one_and_a_hold_counts_until_its_time() {
        let p = policy(&[("w:a", "0"), ("w:b", "x"), ("h:a", "2|100"), ("h:b", "2|x")]);
        assert_eq!(settings_of(&p, "a", 0).weight, 1.0);
        assert_eq!(settings_of(&p, "b", 0).weight, 1.0);
        assert_eq!(settings_of(&p, "a", 99).hold, Some(2.0));
        assert_eq!(settings_of(&p, "a", 100).hold, None);
        assert_eq!(settings_of(&p, "b", 0).hold, None);
        assert_eq!(settings_of(&p, "b", 0).hold_raw.as_deref(), Some("2|x"));
    }

    #[test]
    fn rates_read_as_an_interval_and_a_window_dividing_the_limit() {
        assert_eq!(rate_interval("5/1000000"), Some((200_000, 5)));
        assert_eq!(rate_interval("100/1000000"), Some((10_000, 50)));
        assert_eq!(rate_interval("3/1000000"), Some((333_334, 3)));
        assert_eq!(rate_interval("67/1000000"), Some((14_926, 1)));
        for bad in ["0/1000", "5/0", "5", "5/-1", "a/1", "/1"] {
            assert_eq!(rate_interval(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_change_writes_the_fields_the_script_writes() {
        let mut p = policy(&[("c:a", "4"), ("f:a", "1")]);
        ShardPolicy {
            weight: Setting::Set(2.5),
            cap: Setting::Clear,
            ..ShardPolicy::default()
        }
        .apply(&mut p, "a");
        assert_eq!(p, policy(&[("w:a", "2.5"), ("f:a", "1")]));
    }
}
