//! Steering a tenant-sharded queue from Rust: `client.shard_policy("q")
//! .tenant("acme").weight(3.0).floor(2).cap(10).apply()`, the same change as
//! `fairjob-worker shard-policy`. It applies to the very next dispatch; a
//! rate, `.rate(rate::parse_tenant_rate("10/s")?)`, from the tenant's next start.

use super::Client;
use crate::broker::{Setting, ShardPolicy, ShardRate, YieldPolicy};
use crate::error::Result;

/// A change of a sharded queue's fair-share settings (see [`Client::shard_policy`]).
#[must_use = "a policy change does nothing until `.apply()`"]
#[derive(Debug)]
pub struct ShardPolicyChange<'a> {
    client: &'a Client,
    queue: String,
    tenant: Option<String>,
    policy: ShardPolicy,
    yields: YieldPolicy,
}

impl Client {
    /// Starts a change of `queue`'s fair-share settings: for one tenant with
    /// [`ShardPolicyChange::tenant`], otherwise the defaults for tenants
    /// without their own.
    pub fn shard_policy(&self, queue: impl Into<String>) -> ShardPolicyChange<'_> {
        ShardPolicyChange {
            client: self,
            queue: queue.into(),
            tenant: None,
            policy: ShardPolicy::default(),
            yields: YieldPolicy::default(),
        }
    }
}

impl ShardPolicyChange<'_> {
    /// Changes this tenant's settings rather than the defaults.
    pub fn tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant = Some(tenant.into());
        self
    }

    /// Its share under contention, relative to other tenants' weights (> 0).
    pub fn weight(mut self, weight: f64) -> Self {
        self.policy.weight = Setting::Set(weight);
        self
    }

    /// Jobs guaranteed running: under its floor, a tenant with pending work is
    /// served before share order.
    pub fn floor(mut self, floor: u32) -> Self {
        self.policy.floor = Setting::Set(floor);
        self
    }

    /// The running limit (0 pauses).
    pub fn cap(mut self, cap: u32) -> Self {
        self.policy.cap = Setting::Set(cap);
        self
    }

    /// The most starts per period ([`crate::rate::parse_tenant_rate`] reads
    /// `10/s`, `100/1m`): a tenant whose rate is spent is skipped (its place
    /// in the share order kept) and others are served until its rate allows.
    pub fn rate(mut self, rate: ShardRate) -> Self {
        self.policy.rate = Setting::Set(rate);
        self
    }

    /// Removes the rate set here.
    pub fn no_rate(mut self) -> Self {
        self.policy.rate = Setting::Clear;
        self
    }

    /// Its running limit while no other tenant of the queue has pending work
    /// (counts only above its cap): it bursts while alone, and comes back
    /// down to its cap when others wait (fair yield asks its iterable jobs
    /// above the cap to yield).
    pub fn burst(mut self, burst: u32) -> Self {
        self.policy.burst = Setting::Set(burst);
        self
    }

    /// Removes the burst set here.
    pub fn no_burst(mut self) -> Self {
        self.policy.burst = Setting::Clear;
        self
    }

    /// The queue's fair-yield grace (queue-wide, whatever the tenant): how
    /// long a tenant waits below its share before a job of an over-share
    /// tenant is asked to yield (default 1 s).
    pub fn yield_grace(mut self, grace: std::time::Duration) -> Self {
        self.yields.grace = Setting::Set(grace);
        self
    }

    /// The queue's minimum run before a job may be asked to yield (default 1 s).
    pub fn yield_min_run(mut self, min_run: std::time::Duration) -> Self {
        self.yields.min_run = Setting::Set(min_run);
        self
    }

    /// The queue's cool-down: a job is not asked again within it, and a
    /// request unhonoured after it counts as ignored (default 10 s).
    pub fn yield_cooldown(mut self, cooldown: std::time::Duration) -> Self {
        self.yields.cooldown = Setting::Set(cooldown);
        self
    }

    /// Turns the queue's fair yield on (the default) or off.
    pub fn fair_yield(mut self, on: bool) -> Self {
        self.yields.enabled = Setting::Set(on);
        self
    }

    /// Removes the weight, floor, cap, rate and burst set here (a tenant
    /// falls back to the queue's defaults; the defaults to weight 1, floor 0,
    /// no cap, no rate, no burst).
    pub fn reset(mut self) -> Self {
        self.policy = ShardPolicy {
            weight: Setting::Clear,
            floor: Setting::Clear,
            cap: Setting::Clear,
            rate: Setting::Clear,
            burst: Setting::Clear,
        };
        self
    }

    /// Removes the cap set here.
    pub fn no_cap(mut self) -> Self {
        self.policy.cap = Setting::Clear;
        self
    }

    /// Writes the change; it applies to the next dispatch.
    pub async fn apply(self) -> Result<()> {
        let broker = self.client.broker();
        broker.set_yield_policy(&self.queue, self.yields).await?;
        broker
            .set_shard_policy(&self.queue, self.tenant.as_deref(), self.policy)
            .await
    }
}
