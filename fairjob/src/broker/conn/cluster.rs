//! Routing on a Redis Cluster: the primaries ([`Node`]), a command sent to
//! one node or to the owner of a key's slot, and pipelines split by slot.
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
//!
//! [`ConnectOptions::cluster`]: super::ConnectOptions::cluster

use std::fmt;

use futures_util::future::try_join_all;
use redis::aio::ConnectionLike;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, Pipeline, Value};

use super::{Backend, Conn};
use crate::broker::keys;

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
pub(super) async fn cluster_pipeline(
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
