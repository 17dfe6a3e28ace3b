//! The text form of a duration in settings, files and flags: humantime
//! (`"25s"`, `"1m 30s"`) or a bare number of seconds (`"0.5"`), with the serde
//! helpers that read and write it, for the connection's options (layer 2)
//! and the settings above them alike.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serializer};

use crate::error::{Error, Result};

/// Parses a humantime duration, or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration> {
    let s = s.trim();
    if let Ok(secs) = s.parse::<f64>()
        && secs >= 0.0
    {
        return Ok(Duration::from_secs_f64(secs));
    }
    humantime::parse_duration(s).map_err(|e| Error::Config(format!("invalid duration `{s}`: {e}")))
}

/// `#[serde(with = "human")]`: a [`Duration`] as humantime text.
pub(crate) mod human {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(
        d: &Duration,
        s: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(*d).to_string())
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> std::result::Result<Duration, D::Error> {
        let s = String::deserialize(d)?;
        parse_duration(&s).map_err(serde::de::Error::custom)
    }
}

/// `#[serde(with = "human_opt")]`: an optional [`Duration`] as humantime text.
pub(crate) mod human_opt {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(
        d: &Option<Duration>,
        s: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&humantime::format_duration(*d).to_string()),
            None => s.serialize_none(),
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> std::result::Result<Option<Duration>, D::Error> {
        match Option::<String>::deserialize(d)? {
            Some(s) => parse_duration(&s)
                .map(Some)
                .map_err(serde::de::Error::custom),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_accept_humantime_and_seconds() {
        assert_eq!(parse_duration("25s").unwrap(), Duration::from_secs(25));
        assert_eq!(parse_duration("1m 30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("0.5").unwrap(), Duration::from_millis(500));
        assert!(parse_duration("1 fortnight").is_err());
    }
}
