//! Lists read as they are, for the bounded walks of "explain": a list's
//! length, a range counted from its tail (the next job to run), a step of a
//! sharded queue's tenant set, of the slot-limit registry, and a lock-wait
//! list's first entries.

use crate::broker::RedisBroker;
use crate::error::Result;

impl RedisBroker {
    /// `LLEN key`.
    pub async fn list_len(&self, key: &str) -> Result<u64> {
        self.query(redis::cmd("LLEN").arg(key)).await
    }

    /// `n` entries of the list `key` from position `pos` on, where position
    /// 0 is the tail (the next job to run); returned head-to-tail, as
    /// `LRANGE` gives them.
    pub async fn list_from_tail(&self, key: &str, pos: u64, n: u64) -> Result<Vec<Vec<u8>>> {
        let start = -((pos + n.max(1)) as i64);
        let stop = -((pos + 1) as i64);
        self.query(redis::cmd("LRANGE").arg(key).arg(start).arg(stop))
            .await
    }

    /// The sizes of `retry`, `schedule` and `dead` and of the lists of
    /// `queues`, summed: the places a walk for a jid looks at.
    pub async fn walk_total(&self, queues: &[String]) -> Result<u64> {
        let mut pipe = redis::pipe();
        pipe.zcard(self.keys.retry())
            .zcard(self.keys.schedule())
            .zcard(self.keys.dead());
        for q in queues {
            pipe.llen(self.keys.queue(q));
        }
        let sizes: Vec<u64> = self.pipe(&pipe).await?;
        Ok(sizes.iter().sum())
    }

    /// One `SSCAN` step of a sharded queue's tenant set: the next cursor and
    /// the tenants' list keys, with each tenant as the set holds it (encoded).
    pub async fn tenant_lists_step(
        &self,
        queue: &str,
        cursor: u64,
        count: usize,
    ) -> Result<(u64, Vec<(String, String)>)> {
        let sk = self.keys.shard(queue);
        let (next, batch) = self.sscan(&sk.tenants, cursor, count).await?;
        Ok((
            next,
            batch
                .into_iter()
                .map(|enc| (format!("{}{}", sk.shard_prefix, enc), enc))
                .collect(),
        ))
    }

    /// One `SSCAN` step of the slot-limit registry: the next cursor and the
    /// full keys found.
    pub async fn limit_keys_step(&self, cursor: u64, count: usize) -> Result<(u64, Vec<String>)> {
        self.registry_step(&self.keys.limits_registry(), cursor, count)
            .await
    }

    /// The first `n` entries of a slot-limited key's lock-wait list (next
    /// released first) and its length.
    pub async fn slot_waiters(&self, full_key: &str, n: u64) -> Result<(Vec<Vec<u8>>, u64)> {
        let lk = self.keys.limit(full_key);
        let mut pipe = redis::pipe();
        pipe.lrange(&lk.waiters, 0, n.max(1) as isize - 1)
            .llen(&lk.waiters);
        self.pipe(&pipe).await
    }
}
