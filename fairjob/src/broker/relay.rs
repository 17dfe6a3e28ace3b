//! A relay's bookkeeping in Redis (fairjob-postgres' pump): its epoch, the
//! epoch-fenced staging of a batch, and the completion list workers fill for
//! jobs the relay keeps until they end.

use super::RedisBroker;
use super::scripts::RELAY_TRIM;
use crate::error::Result;

impl RedisBroker {
    /// The relay's epoch: writes `candidate` when there is none (`SET NX`),
    /// then returns the one Redis holds.
    pub(crate) async fn relay_epoch(&self, candidate: &str) -> Result<String> {
        let key = self.keys.relay_epoch();
        let mut pipe = redis::pipe();
        pipe.cmd("SET").arg(&key).arg(candidate).arg("NX").ignore();
        pipe.cmd("GET").arg(&key);
        let (held,): (Option<String>,) = self.pipe(&pipe).await?;
        Ok(held.unwrap_or_default())
    }

    /// The relay's epoch as Redis holds it, without writing one.
    pub(crate) async fn relay_epoch_read(&self) -> Result<Option<String>> {
        self.query(redis::cmd("GET").arg(self.keys.relay_epoch()))
            .await
    }

    /// Appends completions (`<state> <jid>`) to the relay's completion list
    /// and removes their jids from the live set, in one `MULTI`.
    pub(crate) async fn relay_completed(&self, entries: &[String], jids: &[String]) -> Result<()> {
        if entries.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        pipe.atomic();
        pipe.cmd("RPUSH").arg(self.keys.relay_done());
        for e in entries {
            pipe.arg(e.as_bytes());
        }
        pipe.ignore();
        pipe.cmd("SREM").arg(self.keys.relay_live());
        for j in jids {
            pipe.arg(j.as_bytes());
        }
        pipe.ignore();
        let () = self.pipe(&pipe).await?;
        Ok(())
    }

    /// Adds kept jobs' jids to the live set (after their push).
    pub(crate) async fn relay_mark_live(&self, jids: &[String]) -> Result<()> {
        if jids.is_empty() {
            return Ok(());
        }
        let mut cmd = redis::cmd("SADD");
        cmd.arg(self.keys.relay_live());
        for j in jids {
            cmd.arg(j.as_bytes());
        }
        let _: i64 = self.query(&cmd).await?;
        Ok(())
    }

    /// Whether each jid is in the live set (`SMISMEMBER`).
    pub(crate) async fn relay_live_members(&self, jids: &[String]) -> Result<Vec<bool>> {
        if jids.is_empty() {
            return Ok(Vec::new());
        }
        let mut cmd = redis::cmd("SMISMEMBER");
        cmd.arg(self.keys.relay_live());
        for j in jids {
            cmd.arg(j.as_bytes());
        }
        let found: Vec<i64> = self.query(&cmd).await?;
        Ok(found.into_iter().map(|f| f == 1).collect())
    }

    /// Reads up to `n` completions from the head of the list, taking none
    /// (see [`RedisBroker::relay_trim_completed`]).
    pub(crate) async fn relay_peek_completed(&self, n: usize) -> Result<Vec<String>> {
        self.query(
            redis::cmd("LRANGE")
                .arg(self.keys.relay_done())
                .arg(0)
                .arg(n.max(1) - 1),
        )
        .await
    }

    /// Removes `read` (a [`RedisBroker::relay_peek_completed`]) from the
    /// head of the list if the head still holds exactly it; returns how many
    /// entries went (0: another reader drained them first).
    pub(crate) async fn relay_trim_completed(&self, read: &[String]) -> Result<usize> {
        if read.is_empty() {
            return Ok(0);
        }
        let mut inv = RELAY_TRIM.call();
        inv.key(self.keys.relay_done());
        for e in read {
            inv.arg(e.as_bytes());
        }
        let removed: i64 = self.invoke(&inv).await?;
        Ok(removed.max(0) as usize)
    }

    /// Completions waiting to be drained.
    pub(crate) async fn relay_completed_len(&self) -> Result<u64> {
        self.query(redis::cmd("LLEN").arg(self.keys.relay_done()))
            .await
    }
}
