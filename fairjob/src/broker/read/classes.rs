//! The job classes workers published when they started (see
//! [`ClassInfo`]), read back by name.

use crate::broker::RedisBroker;
use crate::error::Result;
use crate::wire::ClassInfo;

/// At most this many classes are read (classes come from code, so this is
/// far above any real application).
pub const MAX_CLASSES: usize = 2_000;

impl RedisBroker {
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
