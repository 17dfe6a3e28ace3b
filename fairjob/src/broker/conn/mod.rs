//! The connection to Redis: one type, [`Conn`], for whatever backend the URL
//! names — one server, a Redis Cluster, or no Redis at all in fairjob's
//! testing mode — and the Redis client's connection trait on it, so the
//! broker's scripts and commands run the same on each.
//!
//! The rest is split by concern, as sqlx splits establishing, TLS and the
//! listener:
//!
//! - `connect`: [`ConnectOptions`], connecting (fail-fast checks, cluster
//!   detection) and keeping credentials out of every message ([`redacted`]);
//! - `cluster`: routing on a Redis Cluster (commands to a node or a slot,
//!   pipelines split by slot) and its primaries ([`Node`]);
//! - `waiter`: the separate connections idle workers block on ([`Waiter`]);
//! - `tls`: the CA and client certificate files, and what a failed handshake
//!   means.
//!
//! Nothing outside `broker/` holds a Redis client type: code above sees
//! [`Conn`] only as "a connection", and the broker's typed functions.

mod cluster;
mod connect;
mod tls;
mod waiter;

use std::fmt;
use std::sync::{Arc, RwLock};

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

#[cfg(feature = "testing")]
use super::memory::MemoryStore;
#[cfg(feature = "testing")]
use crate::error::{NO_REDIS_IN_TESTING_MODE, not_in_testing_mode as sentence};

pub use cluster::Node;
pub use connect::{ConnectOptions, redacted};
pub(crate) use connect::{Opener, connect};
pub use waiter::Waiter;

/// A connection to Redis: multiplexed, reconnecting in the background, cheap to
/// clone. It implements the Redis client's connection trait, so the broker's
/// scripts and commands run on it whatever the backend is; use it for your own
/// commands (as Ruby code uses `Sidekiq.redis`) through
/// [`RedisBroker::connection`](super::RedisBroker::connection).
#[derive(Clone)]
pub struct Conn {
    backend: Backend,
}

#[derive(Clone)]
enum Backend {
    /// One Redis server.
    Single(Arc<Single>),
    /// A Redis Cluster: a connection to every primary, following redirects.
    Cluster(ClusterConnection),
    /// fairjob's testing mode: no Redis. The broker writes pushes and
    /// schedules to the store; every command sent here fails with a clear
    /// error, so no caller needs a special case.
    #[cfg(feature = "testing")]
    Memory(Arc<MemoryStore>),
}

/// The connection to one server, and what it takes to open a new one.
pub(crate) struct Single {
    client: redis::Client,
    config: ConnectionManagerConfig,
    current: RwLock<ConnectionManager>,
}

impl Single {
    pub(crate) fn new(
        client: redis::Client,
        config: ConnectionManagerConfig,
        manager: ConnectionManager,
    ) -> Single {
        Single {
            client,
            config,
            current: RwLock::new(manager),
        }
    }

    fn manager(&self) -> ConnectionManager {
        self.current.read().expect("connection lock").clone()
    }
}

impl Conn {
    /// Drops the connection to one server and opens a new one (lazily, at
    /// the next command): after a `READONLY` reply, the name may now lead
    /// to the new primary. Commands in flight on the old one finish there.
    /// Nothing to do on a cluster (its client follows the slot map) or in
    /// testing mode.
    pub(crate) fn reconnect(&self) {
        if let Backend::Single(single) = &self.backend {
            match ConnectionManager::new_lazy_with_config(
                single.client.clone(),
                single.config.clone(),
            ) {
                Ok(fresh) => *single.current.write().expect("connection lock") = fresh,
                Err(e) => tracing::warn!(error = %e, "cannot open a new connection to redis"),
            }
        }
    }

    /// A connection of fairjob's testing mode: no Redis behind it.
    #[cfg(feature = "testing")]
    pub(crate) fn memory(store: Arc<MemoryStore>) -> Conn {
        Conn {
            backend: Backend::Memory(store),
        }
    }

    /// The in-memory store, when this is a testing-mode connection.
    #[cfg(feature = "testing")]
    pub(crate) fn memory_store(&self) -> Option<&Arc<MemoryStore>> {
        match &self.backend {
            Backend::Memory(store) => Some(store),
            Backend::Single(_) | Backend::Cluster(_) => None,
        }
    }
}

impl fmt::Debug for Conn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.backend {
            Backend::Single(_) => f.write_str("Conn(single node)"),
            Backend::Cluster(_) => f.write_str("Conn(cluster)"),
            #[cfg(feature = "testing")]
            Backend::Memory(_) => f.write_str("Conn(testing mode, no Redis)"),
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match &mut self.backend {
            Backend::Single(s) => {
                let mut c = s.manager();
                Box::pin(async move { c.req_packed_command(cmd).await })
            }
            Backend::Cluster(c) => c.req_packed_command(cmd),
            #[cfg(feature = "testing")]
            Backend::Memory(_) => {
                let name = match cmd.args_iter().next() {
                    Some(redis::Arg::Simple(name)) => String::from_utf8_lossy(name).to_uppercase(),
                    _ => "a command".to_owned(),
                };
                Box::pin(std::future::ready(Err(not_in_testing_mode(format!(
                    "the Redis command {name}"
                )))))
            }
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match &mut self.backend {
            Backend::Single(s) => {
                let mut c = s.manager();
                Box::pin(async move { c.req_packed_commands(pipeline, offset, count).await })
            }
            Backend::Cluster(c) => {
                if offset == 0 && count == pipeline.len() {
                    Box::pin(cluster::cluster_pipeline(c.clone(), pipeline))
                } else {
                    // A transaction (MULTI … EXEC): one slot only.
                    c.req_packed_commands(pipeline, offset, count)
                }
            }
            #[cfg(feature = "testing")]
            Backend::Memory(_) => Box::pin(std::future::ready(Err(not_in_testing_mode(
                "a Redis pipeline".to_owned(),
            )))),
        }
    }

    fn get_db(&self) -> i64 {
        match &self.backend {
            Backend::Single(s) => s.manager().get_db(),
            Backend::Cluster(_) => 0,
            #[cfg(feature = "testing")]
            Backend::Memory(_) => 0,
        }
    }
}

/// The Redis client error of a command sent to a testing-mode connection;
/// [`Error::from_redis`](crate::error::Error::from_redis) reads it back as
/// [`Error::NotInTestingMode`](crate::error::Error::NotInTestingMode).
#[cfg(feature = "testing")]
fn not_in_testing_mode(what: String) -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::Client,
        NO_REDIS_IN_TESTING_MODE,
        sentence(&what),
    ))
}
