//! The keys of one tenant-sharded queue ([`ShardKeys`]), built by
//! [`super::Keys::shard`].

use super::encode;

/// The keys of one tenant-sharded queue; all hash to the slot of the inbox.
/// The dispatch order is fair share (start-time fair queueing; see
/// `scripts/lib/dispatch/`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardKeys {
    /// `queue:<name>`: producers that know nothing of shards push here.
    pub inbox: String,
    /// Runnable tenants in dispatch order (ZSET: member `<15-digit seq><tenant>`,
    /// scored by pass).
    pub ready: String,
    /// Each tenant's member in `ready` (HASH).
    pub rmember: String,
    /// The sequence behind `ready`'s members (ties at one pass go to the lower).
    pub seq: String,
    /// Running jobs per tenant (HASH).
    pub running: String,
    /// Per-tenant settings (HASH): `c:<tenant>` the cap (running limit; 0
    /// pauses), `w:<tenant>` the weight (1 when unset), `f:<tenant>` the
    /// floor (jobs guaranteed running), `r:<tenant>` the rate
    /// (`<limit>/<period µs>`), `b:<tenant>` the burst (the running limit
    /// while no other tenant is in the order); tenant `*` holds the defaults;
    /// `y:grace`, `y:minrun`, `y:cooldown`, `y:off` the queue's fair yield.
    pub policy: String,
    /// Tenants with pending or running jobs (SET), for listing.
    pub tenants: String,
    /// Runnable tenants under their floor (ZSET like `ready`), served first.
    pub floorq: String,
    /// Passes of tenants out of the order while ahead of `vt` (ZSET tenant → pass).
    pub lastpass: String,
    /// The queue's virtual time: the pass of the last tenant served in share order.
    pub vt: String,
    /// fairjob 0.1's round-robin ring, migrated into `ready` as it is found.
    pub ring: String,
    /// fairjob 0.1's running limits (HASH tenant → limit, `*` the default),
    /// copied into `policy` as caps when found.
    pub limits: String,
    /// Tenants out of the order because their rate is spent (ZSET tenant →
    /// µs, Redis's clock, when the rate next allows a start).
    pub rwait: String,
    /// Per-tenant rate state (HASH): `t:<tenant>` the GCRA theoretical arrival
    /// time (µs); while the tenant is in `rwait`, `p:<tenant>` its kept pass
    /// and `m:<tenant>` its kept member of `ready`.
    pub rstate: String,
    /// Prefix of the per-tenant lists: `<prefix><encoded tenant>`.
    pub shard_prefix: String,
    /// Prefix of the per-worker in-progress records of this queue's jobs:
    /// `<prefix><encoded identity>` (token → payload).
    pub inflight_prefix: String,
    /// Prefix of the per-minute dispatch counts: `<prefix><epoch minute>`
    /// (HASH tenant → jobs dispatched; expires after 15 minutes).
    pub served_prefix: String,
    /// Wake-up tokens for workers idle on this queue (the shard scripts push
    /// here; [`super::Keys::wake`] is the untagged one released slot waiters use).
    pub wake: String,
    /// Workers that fetched from this queue (SET of identities): whose
    /// in-progress records of it the reconciler counts. A worker joins in the
    /// fetch that gives it its first job here and leaves when it is forgotten.
    pub fetchers: String,
    /// Running iterable jobs for fair yield (HASH jid →
    /// `tenant|worker|started|asked|ignored|seen`, see `shard_yield.lua`).
    pub runs: String,
    /// Tenants seen waiting in the dispatch order by fair yield's tick (HASH
    /// tenant → since, epoch seconds); a dispatch of the tenant takes its entry.
    pub waits: String,
    /// How long tenants waited for the slots they got (LIST of seconds, the
    /// last 256; drained by fair yield's deciding tick into the metric).
    pub slot_waits: String,
    /// Fair-yield counts per tenant (HASH `r:<t>` requested, `h:<t>`
    /// honoured, `i:<t>` ignored).
    pub yields: String,
    /// The fair-yield decision lock (one worker decides per tick).
    pub decide: String,
}

impl ShardKeys {
    /// The state keys the shard scripts take, in their order (see
    /// `shard_keys` in `lib/dispatch/state.lua`).
    pub fn state(&self) -> [&str; 13] {
        [
            &self.ready,
            &self.rmember,
            &self.seq,
            &self.running,
            &self.policy,
            &self.tenants,
            &self.floorq,
            &self.lastpass,
            &self.vt,
            &self.ring,
            &self.limits,
            &self.rwait,
            &self.rstate,
        ]
    }

    /// One worker's in-progress record of this queue's jobs.
    pub fn inflight(&self, identity: &str) -> String {
        format!("{}{}", self.inflight_prefix, encode(identity))
    }

    /// The list of one tenant (`None` = the shared shard of jobs without a tenant).
    pub fn tenant_list(&self, tenant: Option<&str>) -> String {
        format!(
            "{}{}",
            self.shard_prefix,
            tenant.map(encode).unwrap_or_default()
        )
    }

    /// The dispatch counts of epoch minute `minute`.
    pub fn served(&self, minute: u64) -> String {
        format!("{}{minute}", self.served_prefix)
    }
}
