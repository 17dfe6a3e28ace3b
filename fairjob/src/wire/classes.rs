//! The declaration of a job class as workers publish it for the dashboard and
//! the CLI (declared queue, reroute rules, slot limit, retries), and the pure
//! rules read off it. A dashboard or CLI that links no job types still knows
//! the rules.

use serde::{Deserialize, Serialize};

use super::WireRule;

/// One job class as workers publish it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassInfo {
    /// The Sidekiq class name.
    pub class: String,
    /// The declared queue.
    pub queue: String,
    /// Reroute rules, in declaration order.
    #[serde(default)]
    pub throttles: Vec<WireRule>,
    /// Whether its queue is tenant-sharded.
    #[serde(default)]
    pub sharded: bool,
    /// Its slot limit's declared default, if it has one.
    #[serde(default)]
    pub concurrency: Option<u32>,
    /// Its slot limit's key group, if shared with other classes.
    #[serde(default)]
    pub group: Option<String>,
    /// Retries before `dead` (`None`: retries off).
    #[serde(default)]
    pub retries: Option<u32>,
}

impl ClassInfo {
    /// The full slot-limit key of `key` for this class (`<Class>:<key>` or
    /// `group:<group>:<key>`), if it has a slot limit.
    pub fn limit_key(&self, key: &str) -> Option<String> {
        self.concurrency?;
        Some(match &self.group {
            Some(g) => format!("group:{g}:{key}"),
            None => format!("{}:{key}", self.class),
        })
    }

    /// The longest window of its rules, in seconds (0 without rules).
    pub fn max_window(&self) -> u64 {
        self.throttles
            .iter()
            .filter_map(|r| r.per)
            .max()
            .unwrap_or(0)
    }
}
