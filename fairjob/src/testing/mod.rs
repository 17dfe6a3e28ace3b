//! Testing code that uses fairjob (feature `testing`, off by default: turn it
//! on in `[dev-dependencies]`):
//!
//! ```toml
//! [dev-dependencies]
//! fairjob = { version = "0.1", features = ["testing"] }
//! ```
//!
//! - [`Fake`]: fairjob without Redis. `fake.client()` is an ordinary
//!   [`Client`](crate::Client) whose pushes (after client middleware, tenant
//!   resolution and reroute rules, as in production) are recorded in memory;
//!   [`Fake::enqueued`] shows them typed, [`Fake::drain`] performs them through
//!   the server middleware chain, [`Fake::advance`] moves its virtual clock.
//!   [`Fake::inline`] performs each job at push time. Batches and workflows
//!   run on it too (callbacks, child batches, held steps). Per instance:
//!   tests on parallel threads never see each other's jobs.
//! - [`perform`]: one job's `perform` with a chosen tenant, attempt and jid.
//! - [`RedisServer`]: a private `redis-server` on a free loopback port, for
//!   integration tests against a real Redis: what the fake does not simulate
//!   (slot limits, tenant-shard limits and weights, a job's own Redis
//!   commands, the worker itself).
//! - [`RedisCluster`]: a private Redis Cluster (primaries with replicas) on
//!   loopback, for tests of cluster mode, failover and resharding.
//! - [`ScriptClock`]: the scripts' clock frozen by the test (a differential
//!   test compares the scripts with the pure rules of [`crate::policy`] at
//!   the same instant).
//! - [`TestCa`]: a throwaway CA with server and client certificates, for
//!   [`RedisServer::start_tls`] and [`RedisCluster::start_tls`].
//!
//! Layer 7: it may use everything below it.

mod clock;
mod fake;
mod perform;
mod redis_cluster;
mod redis_server;
mod tls;

pub use clock::ScriptClock;
pub use fake::{AfterFailure, Enqueued, Failure, Fake, FakeBuilder};
pub use perform::{Performing, perform};
pub use redis_cluster::{ClusterPrimary, RedisCluster};
pub use redis_server::{RedisServer, free_port};
pub use tls::TestCa;

#[cfg(test)]
mod shard_tests;
