//! The job classes workers run, with the options the dashboard needs to
//! explain them (declared queue, reroute rules, slot limit), as each worker
//! publishes them when it starts: a dashboard or CLI that links no job types
//! still knows the rules.

use serde::{Deserialize, Serialize};

use crate::broker::RedisBroker;
use crate::error::Result;
use crate::wire::WireRule;

/// At most this many classes are read (classes come from code, so this is
/// far above any real application).
pub const MAX_CLASSES: usize = 2_000;

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

impl RedisBroker {
    /// Records the classes a worker runs (a worker calls this when it starts).
    pub async fn publish_classes(&self, classes: &[ClassInfo]) -> Result<()> {
        if classes.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        for c in classes {
            let json = serde_json::to_string(c).expect("class info encodes");
            pipe.hset(self.keys.classes(), &c.class, json).ignore();
        }
        self.pipe::<()>(&pipe).await
    }

    /// The classes workers published, by name (at most [`MAX_CLASSES`]).
    pub async fn classes(&self) -> Result<Vec<ClassInfo>> {
        let key = self.keys.classes();
        let mut out = Vec::new();
        let mut cursor = 0u64;
        loop {
            let (next, batch): (u64, Vec<(String, String)>) = self
                .query(
                    redis::cmd("HSCAN")
                        .arg(&key)
                        .arg(cursor)
                        .arg("COUNT")
                        .arg(500),
                )
                .await?;
            out.extend(
                batch
                    .into_iter()
                    .filter_map(|(_, json)| serde_json::from_str::<ClassInfo>(&json).ok()),
            );
            cursor = next;
            if cursor == 0 || out.len() >= MAX_CLASSES {
                break;
            }
        }
        out.sort_by(|a, b| a.class.cmp(&b.class));
        out.dedup_by(|a, b| a.class == b.class);
        Ok(out)
    }
}
