//! The tenant-shard dispatch order, the rule fairjob exists for: which
//! tenants a fetch of k jobs serves, and in which order.
//!
//! Dispatch order is start-time fair queueing (stride scheduling). Every
//! runnable tenant (pending jobs, under its running limit, not waiting for
//! its rate) has a *pass* and sits in `ready`, ordered by pass; a dispatch
//! serves the smallest pass and advances the served tenant's pass by
//! `1 / weight` ([`order`]). A tenant that becomes runnable (new, returning,
//! released from its cap) starts at `max(its last pass, vt)`, where vt is the
//! pass of the last tenant served in share order: idle time earns no credit.
//! Tenants under their floor (running < floor) are also in `floorq`, served
//! before anyone else. Ties at one pass go in a fixed order: each entry's
//! member is a 15-digit sequence number taken when the tenant entered the
//! order, followed by the tenant, and it keeps that member while it stays in
//! the order. So equal weights are exactly round robin, a tenant that arrives
//! (or returns) joins the back of the round, and a tenant's name never decides.
//!
//! A tenant's running limit ([`limit`]) is its cap (0 pauses), or its burst
//! while no other tenant is in the order, and while another is, at most fair
//! yield's share hold. A tenant with a rate ([`pace`]) is judged by GCRA
//! (burst 0: starts spaced by `T = ceil(period / limit)` µs); a start the
//! dispatch made late is counted from its due time, up to `T/2` late (the
//! catch-up credit), so the rate is held and not undershot by the fetches'
//! cadence; the credit never puts more than `limit` starts in a window of
//! `period`: its last `H` starts are kept (`H` the largest divisor of limit not
//! above 64) and a start waits until the `H`-th latest is `H * T` old. Found
//! at the head of the order with its rate spent, it leaves the order without
//! advancing its pass: pass and member are kept, and it waits in `rwait` while
//! the others are served; the next dispatch at or after its time puts it back
//! with the same member and pass (raised to vt if the others moved past it, so
//! the turns it could not take are never made up in a burst). A tenant
//! waiting for its rate is not in the order, so it does not stop another
//! tenant's burst. `lastpass` keeps a tenant's pass while it is out of the
//! order and ahead of vt; entries at or below vt can never matter and are
//! trimmed. State is O(active tenants).
//!
//! Pure: callers pass the state ([`ShardState`]) and the time; a [`Call`] is
//! one script call (one atomic step on Redis), with what the Lua keeps for the
//! length of a call. Its twin is `broker/scripts/lib/dispatch/*.lua`, file for
//! file and function for function (the Lua's per-call cache, `lib/cache.lua`,
//! has no twin); `tests/tests/twins.rs` runs random operations against both
//! and compares the states after every step.

pub mod limit;
pub mod order;
pub mod pace;
pub mod reserve;
pub mod settings;
pub mod state;

pub use reserve::{Fetched, inbox_tenant};
pub use settings::{Setting, ShardPolicy, ShardRate, TenantSettings, settings_of};
pub use state::{Pace, ShardState, ZSet};

/// One script call on a sharded queue's state: every rule reads the time
/// `now` (µs), fixed for the call; the call's end ([`Call::end`]) does what
/// the Lua does once per call.
#[derive(Debug)]
pub struct Call<'a, J> {
    /// The queue's state.
    pub state: &'a mut ShardState<J>,
    /// The time of the call (µs).
    pub now: u64,
    /// vt moved in this call (the call's end trims `lastpass`).
    vt_moved: bool,
}

impl<'a, J> Call<'a, J> {
    /// A call at `now` (µs).
    pub fn new(state: &'a mut ShardState<J>, now: u64) -> Self {
        Call {
            state,
            now,
            vt_moved: false,
        }
    }

    /// `t`'s settings now.
    pub fn settings(&self, t: &str) -> TenantSettings {
        settings_of(&self.state.policy, t, self.now)
    }

    /// The end of a call that dispatched: the passes vt overtook are dropped.
    pub fn end(self) {
        if self.vt_moved {
            let vt = self.state.vt;
            self.state.lastpass.remove_up_to(vt);
        }
    }
}
