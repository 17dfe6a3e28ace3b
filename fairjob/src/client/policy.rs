//! Steering a tenant-sharded queue from Rust: `client.shard_policy("q")
//! .tenant("acme").weight(3.0).floor(2).cap(10).apply()`, the same change as
//! `fairjob-worker shard-policy`. It applies to the very next dispatch.

use super::Client;
use crate::broker::{Setting, ShardPolicy};
use crate::error::Result;

/// A change of a sharded queue's fair-share settings (see [`Client::shard_policy`]).
#[must_use = "a policy change does nothing until `.apply()`"]
#[derive(Debug)]
pub struct ShardPolicyChange<'a> {
    client: &'a Client,
    queue: String,
    tenant: Option<String>,
    policy: ShardPolicy,
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

    /// Removes the weight, floor and cap set here (a tenant falls back to the
    /// queue's defaults; the defaults to weight 1, floor 0, no cap).
    pub fn reset(mut self) -> Self {
        self.policy = ShardPolicy {
            weight: Setting::Clear,
            floor: Setting::Clear,
            cap: Setting::Clear,
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
        self.client
            .broker()
            .set_shard_policy(&self.queue, self.tenant.as_deref(), self.policy)
            .await
    }
}
