//! Every rule the Redis scripts execute, as pure functions: no IO and no
//! clock (callers pass the time and the state). Layer 1, beside [`crate::wire`]:
//! the broker's in-memory store (testing mode), the inspect views and the
//! worker call these, and each has a Lua twin under `broker/scripts/lib/`
//! that the scripts run on Redis. `tests/tests/twins.rs` runs random
//! sequences of operations against both (on one Redis and on a Redis
//! Cluster) and fails when they disagree.
//!
//! | rule | here | its Lua twin (`broker/scripts/lib/`) | its case in `tests/tests/twins.rs` |
//! |---|---|---|---|
//! | reroute windows | [`reroute`] | `reroute.lua` | `reroute` |
//! | unique locks | [`unique`] | `unique.lua` | `unique` |
//! | rate limits (GCRA) | [`gcra`] | `gcra.lua` | `rate_limits` |
//! | slot limits | [`slots`] | `slots.lua` | `slot_limits` |
//! | fair share, fair yield's decision | [`share`] | (the decision runs in Rust; `yield.lua` is the run records' format) | unit tests |
//! | the shard's state | [`dispatch::state`] | `dispatch/state.lua` | every `shards*` case |
//! | a tenant's settings | [`dispatch::settings`] | `dispatch/settings.lua` | `shards` |
//! | the stride order | [`dispatch::order`] | `dispatch/order.lua` | `shards` |
//! | running limits: cap, burst, hold | [`dispatch::limit`] | `dispatch/limit.lua` | `shards` |
//! | a tenant's pace | [`dispatch::pace`] | `dispatch/pace.lua` | `shards` |
//! | dispatch and the shard scripts' steps | [`dispatch::reserve`] | `dispatch/reserve.lua` | `shards`, `shards_cluster` |
//! | batches' membership | [`batch`] | `batch.lua` | `tests/tests/batches.rs` (`the_lua_twin_agrees`) |
//! | workflows' steps | [`workflow`] | `batch.lua` (its workflow part) | `tests/tests/workflows.rs` (`the_lua_twin_agrees`) |
//! | (the dispatch scripts' per-call cache) | none | `cache.lua` | shown to change nothing by every `shards*` case |
//! | (a parked job's exit from its record) | `worker/exit.rs` `admit`, and [`dispatch::reserve`]'s release | `exit.lua` | `shards` (slot and rate parks) |
//!
//! `common.lua` (helpers) and `clock.lua` (Redis's clock, the one place a
//! script reads it) hold no rule.

pub mod batch;
pub mod dispatch;
pub mod gcra;
pub mod reroute;
pub mod share;
pub mod slots;
pub mod unique;
pub mod workflow;
