//! The batches' listing (`fairjob:batches`, bid → created at): the newest
//! for the views, and its upkeep (batches whose data expired leave it).

use super::RedisBroker;
use crate::error::Result;

impl RedisBroker {
    /// Looks at the `n` oldest listed batches and drops those whose data
    /// expired from the listing (the views drop expired ones among the
    /// newest; this keeps the listing from growing with old ones). Returns
    /// how many it dropped.
    pub async fn batches_prune(&self, n: usize) -> Result<usize> {
        let oldest: Vec<String> = self
            .query(
                redis::cmd("ZRANGE")
                    .arg(self.keys.batches())
                    .arg(0)
                    .arg(n.max(1) - 1),
            )
            .await?;
        if oldest.is_empty() {
            return Ok(0);
        }
        let exists: Vec<bool> = if self.is_cluster() {
            // One slot per batch: one command each.
            let cmds: Vec<redis::Cmd> = oldest
                .iter()
                .map(|bid| redis::cmd("EXISTS").arg(self.keys.batch(bid)).clone())
                .collect();
            futures_util::future::try_join_all(cmds.iter().map(|c| self.query::<bool>(c))).await?
        } else {
            let mut pipe = redis::pipe();
            for bid in &oldest {
                pipe.cmd("EXISTS").arg(self.keys.batch(bid));
            }
            self.pipe(&pipe).await?
        };
        let gone: Vec<String> = oldest
            .into_iter()
            .zip(exists)
            .filter(|(_, e)| !e)
            .map(|(bid, _)| bid)
            .collect();
        self.batches_unlist(&gone).await?;
        Ok(gone.len())
    }

    /// The newest batches (bid, created at), newest first, at most `n`.
    pub async fn batches_newest(&self, n: usize) -> Result<Vec<(String, f64)>> {
        self.query(
            redis::cmd("ZRANGE")
                .arg(self.keys.batches())
                .arg(0)
                .arg(n.max(1) - 1)
                .arg("REV")
                .arg("WITHSCORES"),
        )
        .await
    }

    /// Drops listed batches whose data expired.
    pub async fn batches_unlist(&self, bids: &[String]) -> Result<()> {
        if bids.is_empty() {
            return Ok(());
        }
        self.query(redis::cmd("ZREM").arg(self.keys.batches()).arg(bids))
            .await
    }
}
