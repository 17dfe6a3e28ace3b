//! The connection to Redis: one type, [`Conn`], for whatever backend the URL
//! names — one server or a Redis Cluster — plus connecting (fail-fast checks,
//! cluster detection, TLS, credentials kept out of every message) and the
//! separate connections idle workers block on ([`Waiter`]).
//!
//! # TLS
//!
//! A `rediss://` URL speaks TLS (rustls, ring). The CA file and client
//! certificate of [`ConnectOptions`] are read once at connect ([`Tls`]) and
//! given to every client made afterwards: the single node's, the cluster's
//! (which uses them for the nodes it discovers) and the [`Waiter`]s'. A failed
//! handshake is [`Error::Tls`] with what it means (untrusted certificate,
//! wrong host name, a client certificate missing or refused).
//!
//! Nothing outside `broker/` holds a Redis client type: code above sees
//! [`Conn`] only as "a connection", and the broker's typed functions.
//!
//! # Cluster mode
//!
//! A URL of several seeds (`redis://a:7000,redis://b:7001`), a seed whose
//! `INFO cluster` says `cluster_enabled:1`, or [`ConnectOptions::cluster`]
//! selects the Redis client's cluster connection, which follows `MOVED` and
//! `ASK` redirects and refreshes the slot map. A command goes to the primary of
//! its first key's slot. A pipeline is split by slot: each slot's commands go
//! to its node, slots in parallel; a slot's read-only commands go as one
//! batch, its writes one by one in order (a batch retried after a redirect in
//! the middle of a slot migration would run its first commands twice). So a
//! pipeline keeps its order within a slot but not across slots, and nothing
//! in fairjob relies on a pipeline for atomicity: multi-key steps are scripts
//! (one slot each) or ordered separate steps.

use std::fmt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use futures_util::future::{BoxFuture, FutureExt, try_join_all};
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{AsyncConnectionConfig, Cmd, IntoConnectionInfo, Pipeline, RedisFuture, Value};

use super::keys;

#[cfg(feature = "testing")]
use super::memory::MemoryStore;
use crate::error::{Error, Result};
#[cfg(feature = "testing")]
use crate::error::{NO_REDIS_IN_TESTING_MODE, not_in_testing_mode as sentence};
#[cfg(feature = "testing")]
use std::sync::Arc;

/// How to reach Redis.
#[derive(Clone)]
pub struct ConnectOptions {
    /// Key prefix (`ns:`), as redis-namespace did for Sidekiq.
    pub namespace: Option<String>,
    /// How long one command may take before it fails (default 5 s).
    pub response_timeout: Duration,
    /// How long connecting may take (default 5 s).
    pub connect_timeout: Duration,
    /// The reroute window key format (the gem's by default).
    pub fair_key_format: Option<String>,
    /// Connect in Redis Cluster mode even with one seed (it is detected
    /// otherwise: `cluster_enabled:1`); a server not in cluster mode is then an error.
    pub cluster: bool,
    /// Replicas every push waits for (Redis `WAIT`); 0 = none.
    pub wait_replicas: u32,
    /// How long a push waits for them.
    pub wait_timeout: Duration,
    /// A PEM file of the CA certificate(s) that signed the server's
    /// certificate, for a `rediss://` URL (the system's roots when unset).
    pub tls_ca_file: Option<PathBuf>,
    /// A PEM client certificate (chain) for mutual TLS; with `tls_key_file`.
    pub tls_cert_file: Option<PathBuf>,
    /// The PEM private key of `tls_cert_file`.
    pub tls_key_file: Option<PathBuf>,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            namespace: None,
            response_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
            fair_key_format: None,
            cluster: false,
            wait_replicas: 0,
            wait_timeout: Duration::from_secs(1),
            tls_ca_file: None,
            tls_cert_file: None,
            tls_key_file: None,
        }
    }
}

impl fmt::Debug for ConnectOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectOptions")
            .field("namespace", &self.namespace)
            .field("response_timeout", &self.response_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("fair_key_format", &self.fair_key_format)
            .field("cluster", &self.cluster)
            .field("wait_replicas", &self.wait_replicas)
            .field("wait_timeout", &self.wait_timeout)
            .field("tls_ca_file", &self.tls_ca_file)
            .field("tls_cert_file", &self.tls_cert_file)
            .field("tls_key_file", &self.tls_key_file)
            .finish()
    }
}

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
    Single(ConnectionManager),
    /// A Redis Cluster: a connection to every primary, following redirects.
    Cluster(ClusterConnection),
    /// fairjob's testing mode: no Redis. The broker writes pushes and
    /// schedules to the store; every command sent here fails with a clear
    /// error, so no caller needs a special case.
    #[cfg(feature = "testing")]
    Memory(Arc<MemoryStore>),
}

impl Conn {
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
            Backend::Single(c) => c.req_packed_command(cmd),
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
            Backend::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Backend::Cluster(c) => {
                if offset == 0 && count == pipeline.len() {
                    Box::pin(cluster_pipeline(c.clone(), pipeline))
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
            Backend::Single(c) => c.get_db(),
            Backend::Cluster(_) => 0,
            #[cfg(feature = "testing")]
            Backend::Memory(_) => 0,
        }
    }
}

/// An error a cluster answers while a slot moves or fails over.
fn is_redirect(e: &redis::RedisError) -> bool {
    use redis::ServerErrorKind as K;
    matches!(
        e.kind(),
        redis::ErrorKind::Server(K::Moved | K::Ask | K::TryAgain | K::ClusterDown | K::MasterDown)
    )
}

/// A primary of a cluster (or the one server): `host:port`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Node {
    /// Host name or address, as the cluster announces it.
    pub host: String,
    /// Port.
    pub port: u16,
}

impl fmt::Display for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

impl Conn {
    /// True for a Redis Cluster connection.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.backend, Backend::Cluster(_))
    }

    /// The primaries, sorted by address (`None` for one server: "this one").
    pub(crate) async fn primaries(&self) -> redis::RedisResult<Option<Vec<Node>>> {
        let Backend::Cluster(c) = &self.backend else {
            return Ok(None);
        };
        let mut c = c.clone();
        let slots = c
            .route_command(
                redis::cmd("CLUSTER").arg("SLOTS").clone(),
                RoutingInfo::SingleNode(SingleNodeRoutingInfo::RandomPrimary),
            )
            .await?;
        let mut nodes = Vec::new();
        if let Value::Array(ranges) = slots {
            for range in ranges {
                let Value::Array(parts) = range else { continue };
                // [start, end, [host, port, id, …], replicas…]
                if let Some(Value::Array(primary)) = parts.get(2)
                    && let (Some(host), Some(port)) = (primary.first(), primary.get(1))
                {
                    let host: String = redis::from_redis_value(host.clone())?;
                    let port: u16 = redis::from_redis_value(port.clone())?;
                    let node = Node { host, port };
                    if !nodes.contains(&node) {
                        nodes.push(node);
                    }
                }
            }
        }
        nodes.sort();
        Ok(Some(nodes))
    }

    /// Runs `cmd` on one node (the one server when not a cluster).
    pub(crate) async fn on_node(
        &self,
        cmd: &Cmd,
        node: Option<&Node>,
    ) -> redis::RedisResult<Value> {
        match (&self.backend, node) {
            (Backend::Cluster(c), Some(node)) => {
                c.clone()
                    .route_command(
                        cmd.clone(),
                        RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                            host: node.host.clone(),
                            port: node.port,
                        }),
                    )
                    .await
            }
            _ => {
                let mut c = self.clone();
                c.req_packed_command(cmd).await
            }
        }
    }

    /// Runs `cmd` on the node that owns `key`'s slot (for commands that name
    /// no key, such as a `SCAN` of one slot's keys).
    pub(crate) async fn on_slot_of(&self, cmd: &Cmd, key: &str) -> redis::RedisResult<Value> {
        match &self.backend {
            Backend::Cluster(c) => {
                c.clone()
                    .route_command(
                        cmd.clone(),
                        RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::new(
                            keys::cluster_slot(key),
                            SlotAddr::Master,
                        ))),
                    )
                    .await
            }
            _ => {
                let mut c = self.clone();
                c.req_packed_command(cmd).await
            }
        }
    }
}

/// The first key of a command, for routing a pipeline by slot; `None` for a
/// command without one.
fn first_key(cmd: &Cmd) -> Option<&[u8]> {
    let mut args = cmd.args_iter().map(|a| match a {
        redis::Arg::Simple(b) => b,
        _ => b"0".as_slice(),
    });
    let name = args.next()?.to_ascii_uppercase();
    match name.as_slice() {
        b"EVAL" | b"EVALSHA" | b"EVAL_RO" | b"EVALSHA_RO" | b"FCALL" | b"FCALL_RO" => {
            args.next()?;
            let n: usize = std::str::from_utf8(args.next()?).ok()?.parse().ok()?;
            if n == 0 { None } else { args.next() }
        }
        b"PING" | b"TIME" | b"INFO" | b"SCRIPT" | b"CONFIG" | b"CLUSTER" | b"CLIENT"
        | b"DBSIZE" | b"FLUSHALL" | b"FLUSHDB" | b"SCAN" | b"WAIT" | b"COMMAND" | b"MULTI"
        | b"EXEC" | b"ECHO" | b"SLOWLOG" | b"MEMORY" | b"OBJECT" | b"PUBLISH" => None,
        _ => args.next(),
    }
}

/// Commands a pipeline may send again after a redirect without harm.
fn is_read_only(cmd: &Cmd) -> bool {
    let Some(redis::Arg::Simple(name)) = cmd.args_iter().next() else {
        return false;
    };
    matches!(
        name.to_ascii_uppercase().as_slice(),
        b"GET"
            | b"MGET"
            | b"STRLEN"
            | b"EXISTS"
            | b"TYPE"
            | b"TTL"
            | b"PTTL"
            | b"HGET"
            | b"HMGET"
            | b"HGETALL"
            | b"HKEYS"
            | b"HVALS"
            | b"HLEN"
            | b"HEXISTS"
            | b"HSCAN"
            | b"LLEN"
            | b"LINDEX"
            | b"LRANGE"
            | b"SCARD"
            | b"SMEMBERS"
            | b"SISMEMBER"
            | b"SMISMEMBER"
            | b"SSCAN"
            | b"ZCARD"
            | b"ZCOUNT"
            | b"ZRANGE"
            | b"ZRANGEBYSCORE"
            | b"ZREVRANGE"
            | b"ZREVRANGEBYSCORE"
            | b"ZSCORE"
            | b"ZMSCORE"
            | b"ZRANK"
            | b"ZREVRANK"
            | b"ZSCAN"
    )
}

/// A pipeline on a cluster: split by slot (see the module doc).
async fn cluster_pipeline(
    c: ClusterConnection,
    pipeline: &Pipeline,
) -> redis::RedisResult<Vec<Value>> {
    let cmds: Vec<&Cmd> = pipeline.cmd_iter().collect();
    // Per slot (or per keyless command): the command indices, in order.
    let mut groups: Vec<(Option<u16>, Vec<usize>)> = Vec::new();
    for (i, cmd) in cmds.iter().enumerate() {
        match first_key(cmd).map(|k| keys::cluster_slot(&String::from_utf8_lossy(k))) {
            Some(slot) => match groups.iter_mut().find(|(s, _)| *s == Some(slot)) {
                Some((_, idx)) => idx.push(i),
                None => groups.push((Some(slot), vec![i])),
            },
            None => groups.push((None, vec![i])),
        }
    }
    let sends = groups.iter().map(|(slot, idx)| {
        let mut c = c.clone();
        let cmds = &cmds;
        async move {
            let Some(slot) = *slot else {
                // A keyless command: the client's own routing (random node,
                // or every node for `SCRIPT LOAD`).
                let v = c.req_packed_command(cmds[idx[0]]).await?;
                return Ok::<_, redis::RedisError>(vec![v]);
            };
            let route = || SingleNodeRoutingInfo::SpecificNode(Route::new(slot, SlotAddr::Master));
            if idx.iter().all(|&i| is_read_only(cmds[i])) {
                let mut sub = redis::pipe();
                for &i in idx {
                    sub.add_command(cmds[i].clone());
                }
                match c.route_pipeline(sub, 0, idx.len(), route()).await {
                    Ok(v) => return Ok(v),
                    // A routed pipeline does not follow redirects (a slot
                    // moving or failing over): read one command at a time
                    // below, through the client's own routing, which does.
                    Err(e) if is_redirect(&e) => {}
                    Err(e) => return Err(e),
                }
            }
            // Writes one by one, in order, each through the client's routing
            // (it follows MOVED and ASK, and retries TRYAGAIN while a slot
            // migrates).
            let mut out = Vec::with_capacity(idx.len());
            for &i in idx {
                out.push(c.req_packed_command(cmds[i]).await?);
            }
            Ok(out)
        }
    });
    let replies = try_join_all(sends).await?;
    let mut out: Vec<Option<Value>> = vec![None; cmds.len()];
    for ((_, idx), values) in groups.iter().zip(replies) {
        for (&i, v) in idx.iter().zip(values) {
            out[i] = Some(v);
        }
    }
    Ok(out.into_iter().map(|v| v.unwrap_or(Value::Nil)).collect())
}

/// The Redis client error of a command sent to a testing-mode connection;
/// [`Error::from_redis`] reads it back as [`Error::NotInTestingMode`].
#[cfg(feature = "testing")]
fn not_in_testing_mode(what: String) -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::Client,
        NO_REDIS_IN_TESTING_MODE,
        sentence(&what),
    ))
}

/// What [`connect`] returns: the shared connection and what is needed to open
/// the separate blocking ones.
pub(crate) struct Connected {
    pub conn: Conn,
    pub opener: Opener,
    pub display: String,
}

/// Opens the blocking connections of [`Waiter`]s.
#[derive(Clone)]
pub(crate) enum Opener {
    Single(Box<redis::Client>),
    Cluster(Vec<redis::ConnectionInfo>, Tls),
}

/// Splits a URL into its seeds: `redis://a:7000,redis://b:7001`, or
/// `redis://:pw@a:7000,b:7001` where a seed without a scheme takes the first
/// one's scheme and credentials.
fn seeds(url: &str) -> Vec<String> {
    let parts: Vec<&str> = url
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    let Some(first) = parts.first() else {
        return vec![url.to_owned()];
    };
    let (scheme, rest) = first.split_once("://").unwrap_or(("redis", first));
    let userinfo = rest.rsplit_once('@').map(|(u, _)| u);
    parts
        .iter()
        .map(|p| {
            if p.contains("://") {
                (*p).to_owned()
            } else {
                match userinfo {
                    Some(u) => format!("{scheme}://{u}@{p}"),
                    None => format!("{scheme}://{p}"),
                }
            }
        })
        .collect()
}

/// Connects, failing fast with a clear error on a bad URL, a refused connection
/// or wrong credentials; later connection losses are retried in the background.
pub(crate) async fn connect(url: &str, options: &ConnectOptions) -> Result<Connected> {
    #[cfg(feature = "tls")]
    install_tls_provider();
    let seeds = seeds(url);
    let display = seeds
        .iter()
        .map(|s| redacted(s))
        .collect::<Vec<_>>()
        .join(",");
    let tls = Tls::load(options)?;
    if tls.is_set()
        && let Some(plain) = seeds.iter().find(|s| !s.starts_with("rediss://"))
    {
        return Err(Error::Config(format!(
            "TLS files are given (tls_ca_file / tls_cert_file) but {} is not a rediss:// URL",
            redacted(plain)
        )));
    }
    let mut infos = Vec::with_capacity(seeds.len());
    for seed in &seeds {
        let info = seed.as_str().into_connection_info().map_err(|e| {
            Error::Config(format!(
                "invalid redis URL {}: {}",
                redacted(seed),
                scrub(&e.to_string(), seed)
            ))
        })?;
        infos.push(info);
    }
    let cfg = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(options.connect_timeout))
        .set_response_timeout(Some(options.response_timeout));
    // One direct attempt first, to the first seed that answers: a wrong
    // password or an unreachable server is reported at once instead of being
    // retried in the background; it also says whether this is a cluster.
    let mut cluster_enabled = None;
    let mut last_err = None;
    for (seed, info) in seeds.iter().zip(&infos) {
        let client = tls.client(info.clone()).map_err(|e| {
            Error::Config(format!(
                "invalid redis URL {}: {}",
                redacted(seed),
                scrub(&e.to_string(), seed)
            ))
        })?;
        match probe(&client, &cfg).await {
            Ok(enabled) => {
                cluster_enabled = Some(enabled);
                break;
            }
            Err(e) => last_err = Some(connect_error(e, seed, &redacted(seed))),
        }
    }
    let Some(cluster_enabled) = cluster_enabled else {
        return Err(last_err.expect("at least one seed"));
    };
    if !cluster_enabled && (options.cluster || seeds.len() > 1) {
        return Err(Error::Config(format!(
            "{display} is not a Redis Cluster node (its INFO says cluster_enabled:0); \
             cluster mode ({}) needs one",
            if options.cluster {
                "--cluster"
            } else {
                "several seed URLs"
            }
        )));
    }
    if cluster_enabled {
        let client = cluster_client(&infos, options, &tls, options.response_timeout)?;
        let conn = tokio::time::timeout(options.connect_timeout * 2, client.get_async_connection())
            .await
            .map_err(|_| {
                Error::Connection(format!(
                    "cannot reach the cluster at {display}: no answer within {:?}",
                    options.connect_timeout * 2
                ))
            })?
            .map_err(|e| connect_error(e, url, &display))?;
        return Ok(Connected {
            conn: Conn {
                backend: Backend::Cluster(conn),
            },
            opener: Opener::Cluster(infos, tls),
            display,
        });
    }
    let client = tls.client(infos.swap_remove(0)).map_err(|e| {
        Error::Config(format!(
            "invalid redis URL {display}: {}",
            scrub(&e.to_string(), url)
        ))
    })?;
    let manager_cfg = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(options.connect_timeout))
        .set_response_timeout(Some(options.response_timeout))
        .set_number_of_retries(2)
        .set_max_delay(Duration::from_secs(2));
    let manager = ConnectionManager::new_with_config(client.clone(), manager_cfg)
        .await
        .map_err(|e| connect_error(e, url, &display))?;
    Ok(Connected {
        conn: Conn {
            backend: Backend::Single(manager),
        },
        opener: Opener::Single(Box::new(client)),
        display,
    })
}

/// PING, then whether the server runs in cluster mode (`INFO cluster`; a
/// server that refuses INFO, as some managed services do, counts as not).
async fn probe(client: &redis::Client, cfg: &AsyncConnectionConfig) -> redis::RedisResult<bool> {
    let mut probe = client
        .get_multiplexed_async_connection_with_config(cfg)
        .await?;
    let _: String = redis::cmd("PING").query_async(&mut probe).await?;
    let info: redis::RedisResult<String> = redis::cmd("INFO")
        .arg("cluster")
        .query_async(&mut probe)
        .await;
    Ok(info.is_ok_and(|i| i.lines().any(|l| l.trim() == "cluster_enabled:1")))
}

/// A cluster client over `seeds` whose commands may take `response_timeout`.
fn cluster_client(
    seeds: &[redis::ConnectionInfo],
    options: &ConnectOptions,
    tls: &Tls,
    response_timeout: Duration,
) -> Result<ClusterClient> {
    let builder = ClusterClientBuilder::new(seeds.to_vec())
        .connection_timeout(options.connect_timeout)
        .response_timeout(response_timeout)
        .retries(8)
        .max_retry_wait(1_000)
        .min_retry_wait(50);
    tls.cluster(builder)
        .build()
        .map_err(|e| Error::Config(format!("invalid cluster settings: {e}")))
}

/// A connection of its own on which an idle worker blocks (BLPOP) on its
/// queues' wake-up lists until a job arrives or `block` passes. On a cluster,
/// the lists are grouped by hash slot and each group blocks on a connection of
/// its own (one BLPOP can't span slots); a group's BLPOP still in flight when
/// another group woke the worker is kept for the next wait, not sent again.
pub struct Waiter {
    /// `None` in testing mode: the waiter only sleeps.
    opener: Option<Opener>,
    options: ConnectOptions,
    block: Duration,
    conn: Option<redis::aio::MultiplexedConnection>,
    keys: Vec<String>,
    /// `BLPOP` on every key for up to `block` (one server).
    blpop: Cmd,
    cluster: Option<ClusterWaits>,
}

struct ClusterWaits {
    client: Option<ClusterClient>,
    groups: Vec<SlotWait>,
}

/// One slot's wake lists and the BLPOP on them in flight, if any.
struct SlotWait {
    keys: Vec<String>,
    conn: Option<ClusterConnection>,
    pending: Option<BoxFuture<'static, (ClusterConnection, bool)>>,
}

impl fmt::Debug for Waiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Waiter")
            .field("block", &self.block)
            .field("keys", &self.keys)
            .field("cluster", &self.cluster.is_some())
            .finish()
    }
}

impl Waiter {
    pub(crate) fn new(
        opener: Option<Opener>,
        options: ConnectOptions,
        block: Duration,
        keys: Vec<String>,
    ) -> Waiter {
        let cluster = match &opener {
            Some(Opener::Cluster(..)) => {
                let mut groups: Vec<(u16, Vec<String>)> = Vec::new();
                for k in &keys {
                    let slot = keys::cluster_slot(k);
                    match groups.iter_mut().find(|(s, _)| *s == slot) {
                        Some((_, g)) => g.push(k.clone()),
                        None => groups.push((slot, vec![k.clone()])),
                    }
                }
                Some(ClusterWaits {
                    client: None,
                    groups: groups
                        .into_iter()
                        .map(|(_, keys)| SlotWait {
                            keys,
                            conn: None,
                            pending: None,
                        })
                        .collect(),
                })
            }
            _ => None,
        };
        let mut blpop = redis::cmd("BLPOP");
        for k in &keys {
            blpop.arg(k);
        }
        blpop.arg(block.as_secs_f64());
        Waiter {
            opener,
            options,
            block,
            conn: None,
            keys,
            blpop,
            cluster,
        }
    }

    /// Blocks until a wake-up token arrives or the block time passes. Returns
    /// early (after at most the block time) when Redis is unreachable, so the
    /// caller's loop goes on polling.
    pub async fn wait(&mut self) {
        let started = Instant::now();
        if self.cluster.is_some() {
            if !self.wait_cluster().await {
                // Nothing to block on (no connection yet): sleep instead.
                tokio::time::sleep(self.block.saturating_sub(started.elapsed())).await;
            }
            return;
        }
        self.connect().await;
        let Some(conn) = self.conn.as_mut() else {
            tokio::time::sleep(self.block.saturating_sub(started.elapsed())).await;
            return;
        };
        if self
            .blpop
            .query_async::<Option<(String, String)>>(conn)
            .await
            .is_err()
        {
            self.conn = None;
            tokio::time::sleep(self.block.saturating_sub(started.elapsed())).await;
        }
    }

    /// As [`Self::wait`] on one server, then `then` on the same connection
    /// with no round trip in between: both go out as one pipeline, and Redis
    /// runs `then` the moment the wait ends (a wake-up token, or the block
    /// time), so an idle worker's fetch costs one round trip, as Sidekiq's
    /// `BRPOP` does. Returns `then`'s reply, or `None` when it did not run
    /// that way (a cluster, testing mode, a script Redis does not have yet,
    /// a lost connection): the caller then runs it itself.
    ///
    /// Cancelling this future may leave `then` to run in Redis unseen: a
    /// caller whose `then` moves jobs awaits it to the end (at most the block
    /// time and the response timeout).
    pub(crate) async fn wait_then(&mut self, then: &Cmd) -> Option<Value> {
        if self.cluster.is_some() || !matches!(self.opener, Some(Opener::Single(_))) {
            self.wait().await;
            return None;
        }
        let started = Instant::now();
        self.connect().await;
        let Some(conn) = self.conn.as_mut() else {
            tokio::time::sleep(self.block.saturating_sub(started.elapsed())).await;
            return None;
        };
        let mut pipe = redis::pipe();
        pipe.add_command(self.blpop.clone())
            .ignore()
            .add_command(then.clone());
        match pipe.query_async::<(Value,)>(conn).await {
            Ok((reply,)) => Some(reply),
            Err(e) if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() => {
                self.conn = None;
                tokio::time::sleep(self.block.saturating_sub(started.elapsed())).await;
                None
            }
            // An error reply (NOSCRIPT after a restart): the caller's own
            // call loads the script.
            Err(_) => None,
        }
    }

    /// Opens the waiter's connection on one server, if it has none.
    async fn connect(&mut self) {
        if self.conn.is_none()
            && let Some(Opener::Single(client)) = &self.opener
        {
            let cfg = AsyncConnectionConfig::new()
                .set_connection_timeout(Some(self.options.connect_timeout))
                .set_response_timeout(Some(self.block + self.options.response_timeout));
            self.conn = client
                .get_multiplexed_async_connection_with_config(&cfg)
                .await
                .ok();
        }
    }

    /// The cluster wait: one BLPOP per slot group, each on its own
    /// connection, until the first returns (or the block time passes).
    /// False when there was nothing to block on.
    async fn wait_cluster(&mut self) -> bool {
        let Some(Opener::Cluster(seeds, tls)) = &self.opener else {
            return false;
        };
        let waits = self.cluster.as_mut().expect("cluster waits");
        if waits.client.is_none() {
            waits.client = cluster_client(
                seeds,
                &self.options,
                tls,
                self.block + self.options.response_timeout,
            )
            .ok();
        }
        let Some(client) = &waits.client else {
            return false;
        };
        for g in &mut waits.groups {
            if g.pending.is_some() {
                continue;
            }
            if g.conn.is_none() {
                g.conn = tokio::time::timeout(
                    self.options.connect_timeout,
                    client.get_async_connection(),
                )
                .await
                .ok()
                .and_then(Result::ok);
            }
            let Some(conn) = g.conn.take() else { continue };
            let mut cmd = redis::cmd("BLPOP");
            for k in &g.keys {
                cmd.arg(k);
            }
            cmd.arg(self.block.as_secs_f64());
            g.pending = Some(
                async move {
                    let mut conn = conn;
                    let ok = cmd
                        .query_async::<Option<(String, String)>>(&mut conn)
                        .await
                        .is_ok();
                    (conn, ok)
                }
                .boxed(),
            );
        }
        let pending: Vec<(usize, &mut BoxFuture<'static, (ClusterConnection, bool)>)> = waits
            .groups
            .iter_mut()
            .enumerate()
            .filter_map(|(i, g)| g.pending.as_mut().map(|p| (i, p)))
            .collect();
        if pending.is_empty() {
            return false;
        }
        let (indices, futures): (Vec<usize>, Vec<_>) = pending.into_iter().unzip();
        let limit = self.block + self.options.response_timeout;
        let Ok(((conn, ok), which, _)) =
            tokio::time::timeout(limit, futures_util::future::select_all(futures)).await
        else {
            return true;
        };
        let g = &mut waits.groups[indices[which]];
        g.pending = None;
        if ok {
            g.conn = Some(conn);
        }
        ok
    }
}

/// The TLS files of [`ConnectOptions`], read and checked once at connect,
/// for every connection opened afterwards (the single node's, the cluster's,
/// the [`Waiter`]s').
#[derive(Clone, Default)]
pub(crate) struct Tls {
    #[cfg(feature = "tls")]
    certs: Option<redis::TlsCertificates>,
}

impl Tls {
    /// Reads the files; an unreadable file or one without the expected PEM
    /// is an [`Error::TlsFile`] naming it.
    fn load(options: &ConnectOptions) -> Result<Tls> {
        let client = match (&options.tls_cert_file, &options.tls_key_file) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            (Some(_), None) | (None, Some(_)) => {
                return Err(Error::Config(
                    "a TLS client certificate needs its key: give both \
                     tls_cert_file and tls_key_file (--tls-cert and --tls-key)"
                        .into(),
                ));
            }
        };
        if options.tls_ca_file.is_none() && client.is_none() {
            return Ok(Tls::default());
        }
        #[cfg(feature = "tls")]
        {
            use rustls::pki_types::pem::PemObject;
            use rustls::pki_types::{CertificateDer, PrivateKeyDer};

            let read = |path: &PathBuf| {
                std::fs::read(path).map_err(|e| Error::TlsFile {
                    path: path.clone(),
                    problem: format!("cannot read it: {e}"),
                })
            };
            let bad = |path: &PathBuf, problem: String| Error::TlsFile {
                path: path.clone(),
                problem,
            };
            let certificates = |path: &PathBuf, pem: &[u8]| {
                let certs = CertificateDer::pem_slice_iter(pem)
                    .collect::<std::result::Result<Vec<_>, _>>()
                    .map_err(|e| bad(path, format!("invalid PEM certificate: {e}")))?;
                if certs.is_empty() {
                    return Err(bad(
                        path,
                        "no PEM certificate in it (-----BEGIN CERTIFICATE-----)".into(),
                    ));
                }
                Ok(certs)
            };
            let root_cert = match &options.tls_ca_file {
                Some(path) => {
                    let pem = read(path)?;
                    let mut store = rustls::RootCertStore::empty();
                    for cert in certificates(path, &pem)? {
                        store
                            .add(cert)
                            .map_err(|e| bad(path, format!("not a usable CA certificate: {e}")))?;
                    }
                    Some(pem)
                }
                None => None,
            };
            let client_tls = match client {
                Some((cert, key)) => {
                    let client_cert = read(cert)?;
                    certificates(cert, &client_cert)?;
                    let client_key = read(key)?;
                    PrivateKeyDer::from_pem_slice(&client_key)
                        .map_err(|e| bad(key, format!("no usable PEM private key in it: {e}")))?;
                    Some(redis::ClientTlsConfig {
                        client_cert,
                        client_key,
                    })
                }
                None => None,
            };
            Ok(Tls {
                certs: Some(redis::TlsCertificates {
                    client_tls,
                    root_cert,
                }),
            })
        }
        #[cfg(not(feature = "tls"))]
        Err(Error::Config(
            "TLS files are given but fairjob was built without its `tls` feature".into(),
        ))
    }

    /// True when a CA or a client certificate was given.
    fn is_set(&self) -> bool {
        #[cfg(feature = "tls")]
        return self.certs.is_some();
        #[cfg(not(feature = "tls"))]
        false
    }

    /// A client for one server, with these files.
    fn client(&self, info: redis::ConnectionInfo) -> redis::RedisResult<redis::Client> {
        #[cfg(feature = "tls")]
        if let Some(certs) = &self.certs {
            return redis::Client::build_with_tls(info, certs.clone());
        }
        redis::Client::open(info)
    }

    /// A cluster client builder with these files.
    fn cluster(&self, builder: ClusterClientBuilder) -> ClusterClientBuilder {
        #[cfg(feature = "tls")]
        if let Some(certs) = &self.certs {
            return builder.certs(certs.clone());
        }
        builder
    }
}

/// The rustls error inside `e`: the Redis client keeps an I/O error in an
/// `Arc`, and an I/O error's `source` skips the error it wraps, so both are
/// opened by hand.
#[cfg(feature = "tls")]
fn find_rustls_error(e: &(dyn std::error::Error + 'static), depth: usize) -> Option<rustls::Error> {
    type Shared = std::sync::Arc<dyn std::error::Error + Send + Sync>;
    if depth > 8 {
        return None;
    }
    if let Some(t) = e.downcast_ref::<rustls::Error>() {
        return Some(t.clone());
    }
    if let Some(inner) = e
        .downcast_ref::<std::io::Error>()
        .and_then(std::io::Error::get_ref)
        && let Some(t) = find_rustls_error(inner, depth + 1)
    {
        return Some(t);
    }
    if let Some(shared) = e.downcast_ref::<Shared>()
        && let Some(t) = find_rustls_error(&**shared, depth + 1)
    {
        return Some(t);
    }
    find_rustls_error(e.source()?, depth + 1)
}

/// What a failed TLS handshake means, in words a user can act on; `None`
/// when `e` is not a TLS failure.
#[cfg(feature = "tls")]
fn tls_failure(e: &redis::RedisError, display: &str) -> Option<String> {
    use rustls::{AlertDescription as A, CertificateError as C};

    let text = e.to_string();
    let t = match find_rustls_error(e, 0) {
        Some(t) => t,
        // A handshake error that lost its type on the way: its words remain.
        None if text.contains("invalid peer certificate")
            || text.contains("received fatal alert") =>
        {
            return Some(format!("the TLS handshake with {display} failed: {text}"));
        }
        None => return None,
    };
    let ca_hint = "give the CA that signed it (tls_ca_file, --tls-ca, REDIS_TLS_CA)";
    let client_hint = "does the server require a client certificate (tls_cert_file and \
                       tls_key_file, --tls-cert and --tls-key), and does it trust this one?";
    Some(match &t {
        rustls::Error::InvalidCertificate(C::UnknownIssuer | C::BadSignature) => {
            format!("the certificate of {display} is not trusted ({t}); {ca_hint}")
        }
        rustls::Error::InvalidCertificate(
            C::NotValidForName | C::NotValidForNameContext { .. },
        ) => {
            format!(
                "the certificate of {display} is not valid for the host name in the URL ({t}); \
                 connect with a name the certificate lists"
            )
        }
        rustls::Error::InvalidCertificate(_) => {
            format!("the certificate of {display} was rejected: {t}")
        }
        rustls::Error::AlertReceived(
            A::CertificateRequired
            | A::BadCertificate
            | A::UnknownCA
            | A::HandshakeFailure
            | A::AccessDenied
            | A::UnsupportedCertificate
            | A::CertificateUnknown,
        ) => format!("{display} refused the TLS connection ({t}): {client_hint}"),
        rustls::Error::InvalidMessage(_) => {
            format!("{display} does not speak TLS ({t}): is it the server's tls-port?")
        }
        _ => format!("the TLS handshake with {display} failed: {t}"),
    })
}

/// `host:port/db` of a URL, with no user or password, for logs.
pub fn redacted(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    let scheme = url.split_once("://").map_or("redis", |(s, _)| s);
    format!("{scheme}://{rest}")
}

/// Replaces the URL's password (or whole user info) wherever it appears in `text`.
fn scrub(text: &str, url: &str) -> String {
    let mut out = text.to_owned();
    if let Some((_, rest)) = url.split_once("://")
        && let Some((userinfo, _)) = rest.rsplit_once('@')
    {
        if let Some((_, pass)) = userinfo.split_once(':')
            && !pass.is_empty()
        {
            out = out.replace(pass, "***");
        } else if !userinfo.is_empty() {
            out = out.replace(userinfo, "***");
        }
    }
    out
}

fn connect_error(e: redis::RedisError, url: &str, display: &str) -> Error {
    #[cfg(feature = "tls")]
    if let Some(why) = tls_failure(&e, display) {
        return Error::Tls(scrub(&why, url));
    }
    match Error::from_redis(e) {
        Error::Auth(text) => Error::Auth(format!("{display}: {}", scrub(&text, url))),
        Error::Redis(e) if e.is_connection_refusal() || e.is_io_error() || e.is_timeout() => {
            // A plain server reached by a `rediss://` URL waits for the rest
            // of what it takes for a command: the handshake times out.
            // A TLS-only port drops a plain connection at its first command.
            let hint = if e.is_timeout() && display.starts_with("rediss://") {
                " (no answer to the TLS handshake: is this the server's TLS port?)"
            } else if e.is_connection_dropped() && display.starts_with("redis://") {
                " (the server closed the connection: if it speaks TLS only, use a rediss:// URL)"
            } else {
                ""
            };
            Error::Connection(format!(
                "cannot reach {display}: {}{hint}",
                scrub(&e.to_string(), url)
            ))
        }
        other => other,
    }
}

#[cfg(feature = "tls")]
fn install_tls_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacted_urls_have_no_credentials() {
        assert_eq!(
            redacted("redis://user:s3cret@host:6380/2"),
            "redis://host:6380/2"
        );
        assert_eq!(redacted("rediss://:s3cret@host"), "rediss://host");
        assert_eq!(redacted("redis://127.0.0.1/"), "redis://127.0.0.1/");
        assert_eq!(
            scrub("bad s3cret here", "redis://u:s3cret@h"),
            "bad *** here"
        );
    }
}
