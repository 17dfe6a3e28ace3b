//! Worker settings: every command-line flag has a key here, so a TOML file
//! (`-C worker.toml`) can say everything the flags can. Durations are humantime
//! strings (`"25s"`, `"1m 30s"`).
//!
//! This module only describes and validates settings; [`crate::worker`] uses them.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::{Error, Result};
use crate::worker::QueueSpec;

/// The worker's settings with Sidekiq-like defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorkerConfig {
    /// Redis URL (`REDIS_URL`); `redis://127.0.0.1:6379` when unset.
    pub redis: Option<String>,
    /// Key prefix.
    pub namespace: Option<String>,
    /// One tier of queues, Sidekiq style: `"name"` or `"name,weight"`.
    pub queues: Vec<String>,
    /// Ordered tiers, each a list like `queues`: a tier is fetched only when every
    /// queue of the tiers before it is empty. Exclusive with `queues`.
    pub tiers: Vec<Vec<String>>,
    /// Jobs run at once (default 10).
    pub concurrency: usize,
    /// Shutdown timeout (default 25s).
    #[serde(with = "human")]
    pub timeout: Duration,
    /// Worker lease: a worker silent this long is dead and its jobs are offered
    /// again (default 30s).
    #[serde(with = "human")]
    pub lease: Duration,
    /// Heartbeat interval (default: a third of the lease).
    #[serde(with = "human_opt")]
    pub heartbeat: Option<Duration>,
    /// How often some worker looks for dead workers' jobs (default 15s).
    #[serde(with = "human")]
    pub reaper_interval: Duration,
    /// How often an idle worker looks at its queues without a wake-up (jobs pushed
    /// by clients that don't send wake-ups, e.g. Ruby Sidekiq) (default 1s).
    #[serde(with = "human")]
    pub poll_interval: Duration,
    /// Average interval of the scheduler (`schedule`/`retry` promotion) (default 5s, ±50%).
    #[serde(with = "human")]
    pub scheduled_poll_interval: Duration,
    /// Interruptions (worker deaths) before a job is dead-lettered (default 3).
    pub max_interruptions: u32,
    /// Largest payload a worker reads as a job; larger entries go to `dead` (default 16 MiB).
    pub max_payload_bytes: usize,
    /// Queues that are tenant-sharded (besides those declared by `#[job(shard_by_tenant)]`).
    pub sharded_queues: Vec<String>,
    /// Sidekiq's process `tag`, shown in the Web UI.
    pub tag: String,
    /// Sidekiq's process labels.
    pub labels: Vec<String>,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            redis: None,
            namespace: None,
            queues: Vec::new(),
            tiers: Vec::new(),
            concurrency: 10,
            timeout: Duration::from_secs(25),
            lease: Duration::from_secs(30),
            heartbeat: None,
            reaper_interval: Duration::from_secs(15),
            poll_interval: Duration::from_secs(1),
            scheduled_poll_interval: Duration::from_secs(5),
            max_interruptions: 3,
            max_payload_bytes: 16 * 1024 * 1024,
            sharded_queues: Vec::new(),
            tag: String::new(),
            labels: Vec::new(),
        }
    }
}

impl WorkerConfig {
    /// The queue tiers, or `None` when neither `queues` nor `tiers` is set (the
    /// worker then derives them from the registered jobs).
    pub fn queue_spec(&self) -> Result<Option<QueueSpec>> {
        match (self.queues.is_empty(), self.tiers.is_empty()) {
            (true, true) => Ok(None),
            (false, false) => Err(Error::Config(
                "set either `queues` or `tiers`, not both".into(),
            )),
            (false, true) => QueueSpec::parse_tiers(std::slice::from_ref(&self.queues)).map(Some),
            (true, false) => QueueSpec::parse_tiers(&self.tiers).map(Some),
        }
    }

    /// Checks values that serde cannot.
    pub fn validate(&self) -> Result<()> {
        if self.concurrency == 0 {
            return Err(Error::Config("`concurrency` must be at least 1".into()));
        }
        if self.lease < Duration::from_millis(300) {
            return Err(Error::Config("`lease` must be at least 300ms".into()));
        }
        if let Some(h) = self.heartbeat
            && h >= self.lease
        {
            return Err(Error::Config(
                "`heartbeat` must be shorter than `lease`".into(),
            ));
        }
        self.queue_spec()?;
        Ok(())
    }

    /// The heartbeat interval in force.
    pub fn heartbeat_interval(&self) -> Duration {
        self.heartbeat.unwrap_or(self.lease / 3)
    }
}

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

mod human {
    use super::*;

    pub(super) fn serialize<S: Serializer>(
        d: &Duration,
        s: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(*d).to_string())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> std::result::Result<Duration, D::Error> {
        let s = String::deserialize(d)?;
        parse_duration(&s).map_err(serde::de::Error::custom)
    }
}

mod human_opt {
    use super::*;

    pub(super) fn serialize<S: Serializer>(
        d: &Option<Duration>,
        s: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&humantime::format_duration(*d).to_string()),
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
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

    #[test]
    fn config_round_trips_through_serde() {
        let c = WorkerConfig {
            queues: vec!["default,4".into(), "slow,1".into()],
            ..WorkerConfig::default()
        };
        let json = serde_json::to_string(&c).unwrap();
        assert!(json.contains(r#""timeout":"25s""#), "{json}");
        let back: WorkerConfig = serde_json::from_str(&json).unwrap();
        assert_eq!(back, c);
        let err = serde_json::from_str::<WorkerConfig>(r#"{"concurency":3}"#).unwrap_err();
        assert!(err.to_string().contains("unknown field"), "{err}");
    }

    #[test]
    fn queues_and_tiers_are_exclusive() {
        let c = WorkerConfig {
            queues: vec!["a".into()],
            tiers: vec![vec!["b".into()]],
            ..WorkerConfig::default()
        };
        assert!(c.validate().is_err());
    }
}
