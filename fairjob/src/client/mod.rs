//! Enqueueing, untyped: a [`PushJob`] (a Sidekiq payload and its tenant) in, a
//! jid out. [`Client`] and its [`ClientBuilder`] live here, the push
//! preparation in `push.rs`, the client middleware chain in `middleware.rs`.
//!
//! Typed jobs reach the client through [`IntoPush`], which the job layer
//! implements for every `#[derive(Job)]` type; this module knows no job type.
//! Layer 4: it fetches and runs nothing.

pub(crate) mod batch;
mod cron;
mod middleware;
mod policy;
mod push;
mod retry;
mod staged;

use std::collections::HashSet;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

pub use cron::{CronSpec, Crons};
pub use middleware::{ClientMiddleware, ClientNext, FnClientMiddleware, client_middleware_fn};
pub use policy::ShardPolicyChange;
pub use push::{Bulk, IntoPush, PushJob};
pub use staged::{PushMarks, RelayEnd, RelayEndsRead, StagedPush};

use crate::broker::{RedisBroker, redacted};
use crate::config::ClientConfig;
use crate::error::{Error, Result};

/// A queue that a linked `#[derive(Job)]` declares tenant-sharded
/// (`#[job(shard_by_tenant)]`): the derive submits one per such type, and every
/// client built in the binary knows them (the worker also announces its
/// sharded queues in Redis, for clients in other binaries).
#[doc(hidden)]
#[derive(Debug)]
pub struct DeclaredShardedQueue(pub &'static str);

inventory::collect!(DeclaredShardedQueue);

/// Enqueues jobs. Cheap to clone; share one per process.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    broker: RedisBroker,
    config: ClientConfig,
    chain: Arc<[Arc<dyn ClientMiddleware>]>,
    sharded: HashSet<String>,
    clock_offset: AtomicI64,
    /// `host:pid:random`: `messaging.client.id` on its spans, and the
    /// identity of the worker built on it.
    id: String,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("broker", &self.inner.broker)
            .field("middleware", &self.inner.chain.len())
            .field("max_payload", &self.inner.config.max_payload_bytes)
            .finish()
    }
}

/// Configures a [`Client`]: named setters over a [`ClientConfig`].
#[must_use]
pub struct ClientBuilder {
    config: ClientConfig,
    chain: Vec<Arc<dyn ClientMiddleware>>,
}

impl fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("redis", &redacted(self.config.redis_url()))
            .field("namespace", &self.config.connect.namespace)
            .field("middleware", &self.chain.len())
            .finish()
    }
}

impl ClientBuilder {
    /// A builder for `url` (`redis://[user:pass@]host[:port][/db]` or `rediss://…`).
    pub fn new(url: impl Into<String>) -> Self {
        Self::from_config(ClientConfig {
            redis: Some(url.into()),
            ..ClientConfig::default()
        })
    }

    /// A builder starting from `config`.
    pub fn from_config(config: ClientConfig) -> Self {
        ClientBuilder {
            config,
            chain: Vec::new(),
        }
    }

    /// Prefixes every key with `namespace:`.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        let ns = namespace.into();
        self.config.connect.namespace = (!ns.is_empty()).then_some(ns);
        self
    }

    /// Per-command timeout (default 5 s).
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.config.connect.response_timeout = timeout;
        self
    }

    /// Connect timeout (default 5 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.config.connect.connect_timeout = timeout;
        self
    }

    /// How long a push keeps retrying while Redis refuses it (busy, loading,
    /// a read-only replica, out of memory, writes stopped after a failed
    /// save) or before it could be sent (default 2 s; zero turns retries
    /// off). A push whose reply was lost is never repeated: it fails with
    /// [`Error::MaybeEnqueued`]. Connecting waits this long for a server
    /// that is loading or busy.
    pub fn retry_deadline(mut self, deadline: Duration) -> Self {
        self.config.retry_deadline = deadline;
        self
    }

    /// Appends a client middleware; links run in the order added.
    pub fn middleware(self, m: impl ClientMiddleware) -> Self {
        self.middleware_arc(Arc::new(m))
    }

    /// Appends a shared client middleware.
    pub fn middleware_arc(mut self, m: Arc<dyn ClientMiddleware>) -> Self {
        self.chain.push(m);
        self
    }

    /// Largest payload accepted, in bytes (default 1 MiB).
    pub fn max_payload_bytes(mut self, max: usize) -> Self {
        self.config.max_payload_bytes = max;
        self
    }

    /// The reroute window kept per tenant (default 1 day, as the gem); raised
    /// automatically to the longest `per` of a job's rules.
    pub fn max_throttling_window(mut self, window: Duration) -> Self {
        self.config.max_throttling_window = window;
        self
    }

    /// Connects in Redis Cluster mode even when the URL names one seed
    /// (detected otherwise from the seed's `cluster_enabled:1`; a server not in
    /// cluster mode is then an error). Several seeds:
    /// `redis://a:7000,redis://b:7001` (or `redis://:pw@a:7000,b:7001`).
    pub fn cluster(mut self, cluster: bool) -> Self {
        self.config.connect.cluster = cluster;
        self
    }

    /// Makes every push wait until `replicas` replicas have it (Redis `WAIT`
    /// on the node that took the write, after the push), for at most
    /// `timeout`; a push they don't acknowledge in time fails with
    /// [`Error::NotReplicated`] (the job may
    /// still be in Redis: retrying it may enqueue it twice). Redis replicates
    /// asynchronously, so without this a failover can lose pushes acknowledged
    /// just before it; with it, a push that succeeded survives the failover of
    /// its primary to one of those replicas. See the README's "Redis Cluster".
    pub fn wait_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.config.connect.wait_replicas = replicas;
        self.config.connect.wait_timeout = timeout;
        self
    }

    /// For a `rediss://` URL: trust the CA certificate(s) in this PEM file
    /// (the server's own CA, as managed services hand out) instead of the
    /// system's root certificates. Read at [`build`](Self::build): an
    /// unreadable file or one with no PEM certificate is
    /// [`Error::TlsFile`]; a server whose certificate
    /// it does not vouch for, or that is not valid for the URL's host name,
    /// fails the connect with [`Error::Tls`]. See the
    /// README's "TLS".
    pub fn tls_ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.config.connect.tls_ca_file = Some(path.into());
        self
    }

    /// Mutual TLS: present this PEM client certificate (chain), with its PEM
    /// private key, to a server that asks for one (`tls-auth-clients yes`).
    /// Read at [`build`](Self::build), as [`tls_ca_file`](Self::tls_ca_file).
    pub fn tls_client_cert(
        mut self,
        cert_path: impl Into<PathBuf>,
        key_path: impl Into<PathBuf>,
    ) -> Self {
        self.config.connect.tls_cert_file = Some(cert_path.into());
        self.config.connect.tls_key_file = Some(key_path.into());
        self
    }

    /// Calls scripts as Redis functions (`FCALL`) where Redis has them (the
    /// default), or always by hash (`EVALSHA`) when `false`. See
    /// [`ConnectOptions::functions`](crate::broker::ConnectOptions::functions).
    pub fn functions(mut self, on: bool) -> Self {
        self.config.connect.functions = on;
        self
    }

    /// The reroute window key format, the gem's `enqueues_key` (placeholders
    /// `%<job_class>s`, `%<fair_tenant>s`, `%<queue>s`).
    pub fn fair_key_format(mut self, format: impl Into<String>) -> Self {
        self.config.connect.fair_key_format = Some(format.into());
        self
    }

    /// Declares a queue tenant-sharded (jobs go straight to their tenant's shard).
    pub fn sharded_queue(mut self, queue: impl Into<String>) -> Self {
        self.config.sharded_queues.push(queue.into());
        self
    }

    /// Connects.
    pub async fn build(self) -> Result<Client> {
        let broker =
            RedisBroker::connect(self.config.redis_url(), self.config.connect_options()).await?;
        // Queues that workers declared sharded; best effort (an ACL may
        // forbid it), waiting up to the retry deadline for a server that is
        // loading or busy.
        let started = std::time::Instant::now();
        let mut attempt = 0;
        let announced = loop {
            match broker.sharded_queues().await {
                Ok(q) => break q,
                Err(e) => {
                    match retry::next(&e, attempt, started.elapsed(), self.config.retry_deadline) {
                        retry::Next::Retry { after, .. } => {
                            tokio::time::sleep(after).await;
                            attempt += 1;
                        }
                        retry::Next::Fail => {
                            if e.is_transient() {
                                tracing::warn!(error = %e, "cannot read the queues workers declared sharded");
                            }
                            break Vec::new();
                        }
                    }
                }
            }
        };
        self.build_on(broker, announced)
    }

    /// A client of fairjob's testing mode: its pushes go to `store`, with this
    /// builder's settings and middleware.
    #[cfg(feature = "testing")]
    pub(crate) fn build_in_memory(self, store: Arc<crate::broker::MemoryStore>) -> Result<Client> {
        let broker = RedisBroker::in_memory(store.clone(), self.config.connect_options());
        let client = self.build_on(broker, Vec::new())?;
        for q in &client.inner.sharded {
            store.shard_queue(q);
        }
        Ok(client)
    }

    /// The client on `broker`; `announced` are the queues workers declared sharded.
    fn build_on(self, broker: RedisBroker, announced: Vec<String>) -> Result<Client> {
        let mut sharded: HashSet<String> = self.config.sharded_queues.iter().cloned().collect();
        sharded.extend(
            inventory::iter::<DeclaredShardedQueue>
                .into_iter()
                .map(|d| d.0.to_owned()),
        );
        for q in &sharded {
            broker.keys().check_shardable(q).map_err(Error::Config)?;
        }
        sharded.extend(announced);
        Ok(Client {
            inner: Arc::new(Inner {
                broker,
                config: self.config,
                chain: self.chain.into(),
                sharded,
                clock_offset: AtomicI64::new(0),
                id: format!(
                    "{}:{}:{}",
                    gethostname::gethostname().to_string_lossy(),
                    std::process::id(),
                    &crate::wire::new_jid()[..12]
                ),
            }),
        })
    }
}

impl Client {
    /// Connects with default options.
    pub async fn connect(url: &str) -> Result<Client> {
        ClientBuilder::new(url).build().await
    }

    /// A builder.
    pub fn builder(url: impl Into<String>) -> ClientBuilder {
        ClientBuilder::new(url)
    }

    /// This client's identity, `host:pid:random` (a worker's identity is
    /// its client's).
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// This client as its spans name it (identity and Redis server).
    pub(crate) fn peer(&self) -> crate::otel::Peer<'_> {
        crate::otel::Peer {
            client_id: &self.inner.id,
            server: self.inner.broker.server(),
        }
    }

    /// The Redis connection and key names.
    pub fn broker(&self) -> &RedisBroker {
        &self.inner.broker
    }

    /// Cancels an iterable job: it stops at its next checkpoint (or does not
    /// start), as complete. Sidekiq's `cancel!`: sets `cancelled` in the job's
    /// `it-{jid}` hash (kept 30 days), so a Ruby `IterableJob` honours it too.
    /// True when newly cancelled. A plain job is not affected.
    pub async fn cancel(&self, jid: &str) -> Result<bool> {
        self.inner
            .broker
            .iteration_cancel(jid, crate::wire::now_f64())
            .await
    }

    /// The operator's views and actions over this client's connection (the
    /// dashboard and the CLI read through it).
    pub fn inspector(&self) -> crate::inspect::Inspector {
        crate::inspect::Inspector::new(self.inner.broker.clone(), self.clock_offset())
    }

    /// Rate limiters, live: list them, change a key's rate, pause and resume
    /// it (`#[rate_limit]`; see [`crate::rate`]).
    pub fn rate_limits(&self) -> crate::inspect::RateLimits {
        self.inspector().rate_limits()
    }

    /// The settings this client was built with.
    pub fn config(&self) -> &ClientConfig {
        &self.inner.config
    }

    /// True when `queue` is tenant-sharded for this client.
    pub fn is_sharded(&self, queue: &str) -> bool {
        self.inner.sharded.contains(queue)
    }

    /// Moves this client's view of Redis's clock (tests only: reroute windows,
    /// schedules and retries are judged by Redis `TIME` plus this offset).
    #[doc(hidden)]
    pub fn set_clock_offset(&self, secs: i64) {
        self.inner.clock_offset.store(secs, Ordering::Relaxed);
    }

    #[doc(hidden)]
    pub fn clock_offset(&self) -> i64 {
        self.inner.clock_offset.load(Ordering::Relaxed)
    }
}
