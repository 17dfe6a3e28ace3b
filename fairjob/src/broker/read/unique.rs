//! Unique jobs: the live locks, a page at a time (a bounded `SCAN` of the
//! lock pattern), and the recent rejections (a capped list), for explain's
//! "not enqueued: duplicate of …".

use serde::{Deserialize, Serialize};

use super::{MAX_READ_ROWS, Page};
use crate::broker::RedisBroker;
use crate::error::Result;

/// How many recent rejections are remembered.
pub const RECENT_REJECTIONS: usize = 1_000;

/// `SCAN` steps one page may take (each `COUNT` 1,000) before it returns what
/// it has with a cursor.
const SCAN_STEPS: usize = 20;

/// One live unique lock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UniqueLockRow {
    /// The Redis key (give it to `unlock`).
    pub key: String,
    /// The queue whose slot holds it, when the key names one.
    pub queue: Option<String>,
    /// The key's digest (SHA-1 of the class and key arguments).
    pub digest: String,
    /// The jid that holds it.
    pub jid: String,
    /// Milliseconds until it expires (`None`: gone meanwhile).
    pub ttl_ms: Option<u64>,
}

/// One page of live unique locks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UniqueLockPage {
    /// Rows, in scan order.
    pub rows: Vec<UniqueLockRow>,
    /// The cursor of the next page, or `None` after the last.
    pub next: Option<u64>,
}

/// A push refused because its unique key was held.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rejection {
    /// The jid the refused job would have had.
    pub jid: String,
    /// The jid that held the key.
    pub holder: String,
    /// The job class.
    pub class: String,
    /// When, epoch seconds (the client's clock).
    pub at: f64,
}

impl RedisBroker {
    /// One page of live unique locks (at most `page.count` rows, at most
    /// `SCAN_STEPS` `SCAN` steps).
    pub async fn unique_locks(&self, page: Page) -> Result<UniqueLockPage> {
        let pattern = self.keys.unique_pattern();
        let want = page.count.clamp(1, MAX_READ_ROWS);
        let mut cursor = page.cursor;
        let mut keys = Vec::new();
        for _ in 0..SCAN_STEPS {
            let (next, found) = self.scan_step(&pattern, cursor, 1_000).await?;
            keys.extend(found);
            cursor = next;
            if cursor == 0 || keys.len() >= want {
                break;
            }
        }
        keys.truncate(MAX_READ_ROWS);
        let mut rows = Vec::with_capacity(keys.len());
        for key in keys {
            let (jid, ttl): (Option<String>, i64) =
                self.pipe(redis::pipe().hget(&key, "j").pttl(&key)).await?;
            let Some(jid) = jid else { continue };
            let (queue, digest) = self.parse_unique_key(&key);
            rows.push(UniqueLockRow {
                key,
                queue,
                digest,
                jid,
                ttl_ms: u64::try_from(ttl).ok(),
            });
        }
        Ok(UniqueLockPage {
            rows,
            next: (cursor != 0).then_some(cursor),
        })
    }

    /// The queue and digest a lock key names.
    fn parse_unique_key(&self, key: &str) -> (Option<String>, String) {
        let digest = key.rsplit(':').next().unwrap_or_default().to_owned();
        let inbox = format!("{{{}queue:", self.keys.prefix());
        let queue = key
            .find(&inbox)
            .map(|at| &key[at + inbox.len()..])
            .and_then(|rest| rest.rsplit_once("}:unique:"))
            .map(|(q, _)| q.to_owned());
        (queue, digest)
    }

    /// The remembered rejection of `jid`, among the last [`RECENT_REJECTIONS`].
    pub async fn unique_rejection(&self, jid: &str) -> Result<Option<Rejection>> {
        let entries: Vec<String> = self
            .query(
                redis::cmd("LRANGE")
                    .arg(self.keys.unique_rejected())
                    .arg(0)
                    .arg(RECENT_REJECTIONS as i64 - 1),
            )
            .await?;
        Ok(entries
            .iter()
            .filter_map(|e| serde_json::from_str::<Rejection>(e).ok())
            .find(|r| r.jid == jid))
    }
}
