//! Tenant-sharded queues' fair-share settings in Redis: a tenant's (or the
//! default) weight, floor, cap, rate and burst (`shard_policy.lua`), the
//! queue's fair-yield settings, re-checking tenants in
//! bounded batches so a change applies to the very next dispatch; and the
//! migration of a 0.1 round-robin ring into the fair-share order.

use super::RedisBroker;
use super::keys;
use super::scripts::SHARD_POLICY;
use crate::error::{Error, Result};

pub use crate::policy::dispatch::{Setting, ShardPolicy, ShardRate};

/// Tenants a 0.1 ring entry-batch or a re-check handles per script call.
const BATCH: usize = 200;

impl RedisBroker {
    /// Changes a sharded queue's settings for `tenant` (`None`: the default for
    /// tenants without their own), and re-checks the tenants it may concern, in
    /// bounded batches; runnable tenants wake an idle worker.
    pub async fn set_shard_policy(
        &self,
        queue: &str,
        tenant: Option<&str>,
        policy: ShardPolicy,
    ) -> Result<()> {
        policy.check()?;
        self.keys.check_shardable(queue).map_err(Error::Config)?;
        let sk = self.keys.shard(queue);
        let field = tenant.map(keys::encode).unwrap_or_else(|| "*".to_owned());
        #[cfg(feature = "testing")]
        if let Some(store) = self.memory() {
            store.set_shard_policy(queue, &field, &policy);
            return Ok(());
        }
        let mut first = true;
        let mut cursor: u64 = 0;
        loop {
            let batch: Vec<String> = if tenant.is_some() {
                vec![field.clone()]
            } else {
                let (next, mut batch): (u64, Vec<String>) =
                    self.sscan(&sk.tenants, cursor, BATCH).await?;
                cursor = next;
                // In a fixed order (the order tenants enter the dispatch
                // order in decides their ties), not the set's.
                batch.sort_unstable();
                batch
            };
            let mut inv = SHARD_POLICY.call();
            for k in sk.state() {
                inv.key(k);
            }
            inv.key(&sk.wake);
            inv.arg(&sk.shard_prefix).arg(&field);
            if first {
                for (_, value) in policy.stored() {
                    inv.arg(value);
                }
            } else {
                inv.arg("-").arg("-").arg("-").arg("-").arg("-");
            }
            inv.arg(BATCH);
            for t in &batch {
                inv.arg(t);
            }
            let _: i64 = self.invoke(&inv).await?;
            first = false;
            if tenant.is_some() || cursor == 0 {
                return Ok(());
            }
        }
    }

    /// Sets a sharded queue's running limit (its cap) for a tenant (`None` =
    /// the default); `limit` `None` removes it.
    pub async fn set_shard_limit(
        &self,
        queue: &str,
        tenant: Option<&str>,
        limit: Option<u32>,
    ) -> Result<()> {
        let cap = match limit {
            Some(l) => Setting::Set(l),
            None => Setting::Clear,
        };
        self.set_shard_policy(
            queue,
            tenant,
            ShardPolicy {
                cap,
                ..ShardPolicy::default()
            },
        )
        .await
    }

    /// Moves a fairjob 0.1 sharded queue's structures into the fair-share
    /// ones: every tenant of its round-robin ring into the dispatch order, its
    /// running limits into the caps (a worker does this for its sharded queues
    /// at start; the reaper's passes do it again, for 0.1 producers still
    /// running during a rolling upgrade). Returns the tenants moved.
    pub(crate) async fn migrate_shard_ring(&self, queue: &str) -> Result<u64> {
        let sk = self.keys.shard(queue);
        let mut moved = 0;
        loop {
            let (left, limits): (u64, bool) = redis::pipe()
                .zcard(&sk.ring)
                .exists(&sk.limits)
                .query_async(&mut self.connection())
                .await
                .map_err(Error::from_redis)?;
            if left == 0 && !limits {
                return Ok(moved);
            }
            let mut inv = SHARD_POLICY.call();
            for k in sk.state() {
                inv.key(k);
            }
            inv.key(&sk.wake);
            inv.arg(&sk.shard_prefix)
                .arg("*")
                .arg("-")
                .arg("-")
                .arg("-")
                .arg("-")
                .arg("-")
                .arg(BATCH);
            let _: i64 = self.invoke(&inv).await?;
            moved += left.min(BATCH as u64);
        }
    }
}
