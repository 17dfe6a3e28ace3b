//! Rate limits (`#[rate_limit(limit = N, per = "1m", burst = B, key = ..., group = ...)]`):
//! at most `limit` **starts** of one key per `per`, plus `burst` extra at once.
//!
//! The rule is GCRA (the generic cell rate algorithm, as redis-cell uses it),
//! written once in [`crate::policy::gcra`] ([`judge`] is re-exported here);
//! its Lua twin runs it on Redis's clock, so every host agrees.
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
//! Layer 3: the naming, parsing and the calls; the rule is `policy`'s, the
//! scripts are the broker's.

use std::time::Duration;

use crate::broker::{RateAcquired, RateRequest, RedisBroker, Setting, ShardRate, Token};
use crate::error::Result;
use crate::wire::{Payload, RateLimit};

pub use crate::policy::gcra::{Rate, Verdict, judge};

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
