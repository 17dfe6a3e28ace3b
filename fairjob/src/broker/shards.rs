//! Tenant-sharded queues' fair-share settings in Redis: a tenant's (or the
//! default) weight, floor, cap, rate and burst (`shard_policy.lua`), the
//! queue's fair-yield settings, re-checking tenants in
//! bounded batches so a change applies to the very next dispatch; and the
//! migration of a 0.1 round-robin ring into the fair-share order.

use super::RedisBroker;
use super::keys;
use super::scripts::SHARD_POLICY;
use crate::error::{Error, Result};

/// One setting of a [`ShardPolicy`] change.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Setting<T> {
    /// Leave it as it is.
    #[default]
    Keep,
    /// Remove it (the tenant falls back to the queue's default; the default
    /// falls back to weight 1, floor 0, no cap).
    Clear,
    /// Set it.
    Set(T),
}

/// A tenant's rate on a sharded queue: at most `limit` starts per `per_us`
/// microseconds, spread evenly (GCRA with no burst, on Redis's clock). Parse
/// one with `fairjob::rate::parse_tenant_rate` (`10/s`, `100/1m`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ShardRate {
    /// Starts per period (> 0).
    pub limit: u32,
    /// The period, µs (> 0).
    pub per_us: u64,
}

impl ShardRate {
    /// The stored form in the policy hash: `<limit>/<period µs>`.
    pub fn stored(&self) -> String {
        format!("{}/{}", self.limit, self.per_us)
    }

    /// Reads the stored form back (`None` when malformed).
    pub fn from_stored(text: &str) -> Option<ShardRate> {
        let (l, p) = text.split_once('/')?;
        let (limit, per_us) = (l.parse().ok()?, p.parse().ok()?);
        (limit > 0 && per_us > 0).then_some(ShardRate { limit, per_us })
    }
}

impl std::fmt::Display for ShardRate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.stored())
    }
}

/// A change of a sharded queue's fair-share settings, for one tenant or for
/// every tenant without its own (the default).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ShardPolicy {
    /// Share under contention relative to other tenants (default 1; > 0).
    pub weight: Setting<f64>,
    /// Jobs guaranteed running: a tenant under its floor with pending work is
    /// served before share order (default 0).
    pub floor: Setting<u32>,
    /// The running limit (default none; 0 pauses).
    pub cap: Setting<u32>,
    /// Starts per period (default none): a tenant whose rate is spent is
    /// skipped, its pass kept, until its rate allows its next start.
    pub rate: Setting<ShardRate>,
    /// The running limit instead of the cap while no other tenant of the
    /// queue has pending work (counts only above a cap; default none).
    pub burst: Setting<u32>,
}

impl ShardPolicy {
    /// This change with the cap set (`None`: removed).
    #[must_use]
    pub fn with_cap(mut self, cap: Option<u32>) -> Self {
        self.cap = cap.map_or(Setting::Clear, Setting::Set);
        self
    }

    fn check(&self) -> Result<()> {
        if let Setting::Set(w) = self.weight
            && !(w.is_finite() && w > 0.0 && w <= 1e6)
        {
            return Err(Error::Config(format!(
                "a weight is a number above 0 and at most 1000000, not {w}"
            )));
        }
        if let Setting::Set(r) = self.rate
            && (r.limit == 0 || r.per_us == 0 || r.per_us < u64::from(r.limit))
        {
            return Err(Error::Config(format!(
                "a tenant's rate is at least 1 start per period and at most one per µs, not {} per {} µs (a cap of 0 pauses a tenant)",
                r.limit, r.per_us
            )));
        }
        Ok(())
    }
}

fn arg<T: ToString>(s: Setting<T>) -> String {
    match s {
        Setting::Keep => "-".to_owned(),
        Setting::Clear => String::new(),
        Setting::Set(v) => v.to_string(),
    }
}

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
        let mut first = true;
        let mut cursor: u64 = 0;
        loop {
            let batch: Vec<String> = if tenant.is_some() {
                vec![field.clone()]
            } else {
                let (next, batch): (u64, Vec<String>) =
                    self.sscan(&sk.tenants, cursor, BATCH).await?;
                cursor = next;
                batch
            };
            let mut inv = SHARD_POLICY.call();
            for k in sk.state() {
                inv.key(k);
            }
            inv.key(&sk.wake);
            inv.arg(&sk.shard_prefix).arg(&field);
            if first {
                inv.arg(arg(policy.weight))
                    .arg(arg(policy.floor))
                    .arg(arg(policy.cap))
                    .arg(arg(policy.rate))
                    .arg(arg(policy.burst));
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
