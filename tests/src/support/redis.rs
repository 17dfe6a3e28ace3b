//! [`Redis`]: one test's view of one redis-server and one namespace. Key names
//! come from [`Keys`] (fairjob's own keys) or [`Redis::key`] (the keys the test
//! jobs write: `record`, `done`, `gauge-max`…); the helpers read what a test
//! asserts on, and [`Redis::conn`] gives a raw connection for anything else.
//!
//! It may own the server it talks to ([`Redis::start`]); a test that restarts
//! or kills its server starts it itself and [`Redis::connect`]s to it.

use std::sync::Arc;

use fairjob::broker::Keys;
use fairjob::{Client, WorkerBuilder};
use redis::aio::MultiplexedConnection;
use redis::{AsyncCommands, FromRedisValue, ToRedisArgs};
use serde_json::Value;

use super::worker::TestWorker;
use crate::RedisServer;
use crate::jobs::RECORD;

/// A redis-server and a namespace on it, for assertions and raw writes.
#[derive(Debug, Clone)]
pub struct Redis {
    server: Option<Arc<RedisServer>>,
    url: String,
    ns: String,
    keys: Keys,
    conn: MultiplexedConnection,
}

impl Redis {
    /// A private redis-server (kept running while a clone of the handle lives)
    /// and a fresh namespace on it.
    pub async fn start() -> Redis {
        Redis::start_with(&[]).await
    }

    /// [`Redis::start`] with more `redis-server` arguments (`["--appendonly", "yes"]`).
    pub async fn start_with(args: &[&str]) -> Redis {
        let server = RedisServer::start(args)
            .expect("a private redis-server must start (apt-get install redis-server)");
        let mut redis = Redis::connect(&server.url(), &crate::namespace()).await;
        redis.server = Some(Arc::new(server));
        redis
    }

    /// A handle on namespace `ns` (`""`: no namespace) of the server at `url`.
    pub async fn connect(url: &str, ns: &str) -> Redis {
        Redis {
            server: None,
            url: url.to_owned(),
            ns: ns.to_owned(),
            keys: Keys::new(Some(ns)),
            conn: crate::raw(url).await,
        }
    }

    /// The server's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The namespace (`""`: none).
    pub fn ns(&self) -> &str {
        &self.ns
    }

    /// The server this handle started, if it did.
    pub fn server(&self) -> &RedisServer {
        self.server
            .as_deref()
            .expect("a handle from Redis::start owns its server")
    }

    /// fairjob's key names in this namespace.
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// A key the test jobs write (`record`, `done`, `gauge-max`, `gauge:<key>`…),
    /// inside the namespace.
    pub fn key(&self, name: &str) -> String {
        format!("{}{name}", self.keys.prefix())
    }

    /// A raw connection, for anything the helpers don't cover.
    pub fn conn(&self) -> MultiplexedConnection {
        self.conn.clone()
    }

    /// A client in this namespace.
    pub async fn client(&self) -> Client {
        crate::client(&self.url, &self.ns).await
    }

    /// An in-process worker builder with the tests' settings ([`crate::worker`]).
    pub fn worker(&self) -> WorkerBuilder {
        crate::worker(&self.url, &self.ns)
    }

    /// A `test-worker` process builder in this namespace ([`TestWorker`]).
    pub fn worker_process(&self) -> TestWorker {
        TestWorker::new(&self.url, &self.ns)
    }

    /// A `test-worker` process of the queue `ledger` (where `LedgerJob`s and
    /// `ProbeJob`s go) that writes the ledger in `dir` ([`crate::Ledger`]).
    pub fn ledger_worker(&self, dir: &std::path::Path) -> TestWorker {
        self.worker_process().queues(["ledger"]).ledger(dir)
    }

    /// Runs a `test-worker` command (`["shards", "q"]`) in this namespace to
    /// completion; panics unless it succeeds; returns its stdout.
    pub fn cli(&self, args: &[&str]) -> String {
        self.worker_process().command(args)
    }

    /// Runs `cmd` on the handle's connection; panics on an error reply.
    pub async fn query<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> T {
        cmd.query_async(&mut self.conn()).await.unwrap_or_else(|e| {
            panic!(
                "{:?}: {e}",
                String::from_utf8_lossy(&cmd.get_packed_command())
            )
        })
    }

    /// LLEN.
    pub async fn llen(&self, key: impl AsRef<str>) -> usize {
        self.conn().llen(key.as_ref()).await.expect("LLEN")
    }

    /// ZCARD.
    pub async fn zcard(&self, key: impl AsRef<str>) -> usize {
        self.conn().zcard(key.as_ref()).await.expect("ZCARD")
    }

    /// HLEN.
    pub async fn hlen(&self, key: impl AsRef<str>) -> usize {
        self.conn().hlen(key.as_ref()).await.expect("HLEN")
    }

    /// SCARD.
    pub async fn scard(&self, key: impl AsRef<str>) -> usize {
        self.conn().scard(key.as_ref()).await.expect("SCARD")
    }

    /// GET, as any type (`Option<_>` when the key may be missing).
    pub async fn get<T: FromRedisValue>(&self, key: impl AsRef<str>) -> T {
        self.conn().get(key.as_ref()).await.expect("GET")
    }

    /// GET of a number; 0 when the key is missing.
    pub async fn counter(&self, key: impl AsRef<str>) -> i64 {
        self.get::<Option<i64>>(key).await.unwrap_or(0)
    }

    /// One of fairjob's counters (`fenced`, `recovered`…, [`Keys::stat`]); 0 when unset.
    pub async fn stat(&self, name: &str) -> i64 {
        self.counter(self.keys.stat(name)).await
    }

    /// Every value of a list.
    pub async fn lrange(&self, key: impl AsRef<str>) -> Vec<String> {
        self.conn()
            .lrange(key.as_ref(), 0, -1)
            .await
            .expect("LRANGE")
    }

    /// Every member of a sorted set, lowest score first.
    pub async fn zrange(&self, key: impl AsRef<str>) -> Vec<String> {
        self.conn()
            .zrange(key.as_ref(), 0, -1)
            .await
            .expect("ZRANGE")
    }

    /// The job payloads in a list (a queue, a shard) or a sorted set (`retry`,
    /// `dead`, `schedule`), as JSON.
    pub async fn payloads(&self, key: &str) -> Vec<Value> {
        let kind: String = self.query(redis::cmd("TYPE").arg(key)).await;
        // TYPE then a read is not atomic: a key that was missing ("none")
        // may be created in between, so "none" reads as empty rather than
        // as a list.
        let entries = match kind.as_str() {
            "zset" => self.zrange(key).await,
            "list" => self.lrange(key).await,
            "none" => Vec::new(),
            other => panic!("{key} holds a {other}, not job payloads"),
        };
        entries
            .iter()
            .map(|e| serde_json::from_str(e).unwrap_or_else(|err| panic!("{err}: {e}")))
            .collect()
    }

    /// What the test jobs recorded, in order: the list [`RECORD`] that
    /// `RecordJob`, `ShardJob`, `GaugeJob`… RPUSH to.
    pub async fn records(&self) -> Vec<String> {
        self.lrange(self.key(RECORD)).await
    }

    /// How many records there are ([`Redis::records`] without reading them).
    pub async fn recorded(&self) -> usize {
        self.llen(self.key(RECORD)).await
    }

    /// [`Redis::records`] of the jobs that record JSON (`ProbeJob`, `EchoTenantJob`).
    pub async fn json_records(&self) -> Vec<Value> {
        self.payloads(&self.key(RECORD)).await
    }

    /// LPUSHes entries to queue `queue` as written, the way a Ruby producer (or a
    /// corrupt one) would: no fairjob client involved.
    pub async fn lpush_raw(&self, queue: &str, entries: impl ToRedisArgs + Send + Sync) {
        let _: () = self
            .conn()
            .lpush(self.keys.queue(queue), entries)
            .await
            .expect("LPUSH");
    }

    /// Every key matching `pattern` (SCAN, so it also works where KEYS is forbidden), sorted.
    pub async fn scan_keys(&self, pattern: &str) -> Vec<String> {
        let mut conn = self.conn();
        let mut out = Vec::new();
        let mut cursor: u64 = 0;
        loop {
            let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut conn)
                .await
                .expect("SCAN");
            out.extend(batch);
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
        out.sort();
        out.dedup();
        out
    }

    /// The in-progress records ([`Keys::inflight`]) of every worker process, dead or alive.
    pub async fn inflight_keys(&self) -> Vec<String> {
        self.scan_keys(&format!("{}*", self.keys.inflight("")))
            .await
    }

    /// The identity (`host:pid:random`) the worker process `pid` registered under.
    pub async fn identity_of(&self, pid: u32) -> Option<String> {
        let ids: Vec<String> = self.conn().hkeys(self.keys.workers()).await.expect("HKEYS");
        let needle = format!(":{pid}:");
        ids.into_iter().find(|id| id.contains(&needle))
    }

    /// The jids in the in-progress record of the running worker process `pid`.
    pub async fn inflight_jids(&self, pid: u32) -> std::collections::BTreeSet<String> {
        let id = self
            .identity_of(pid)
            .await
            .expect("a running worker is registered");
        let payloads: Vec<String> = self
            .conn()
            .hvals(self.keys.inflight(&id))
            .await
            .expect("HVALS");
        payloads
            .iter()
            .map(|p| {
                let v: serde_json::Value = serde_json::from_str(p).expect("a JSON payload");
                v["jid"].as_str().expect("a jid").to_owned()
            })
            .collect()
    }

    /// A field of `INFO <section>` (`used_memory`, `cmdstat_blpop`…).
    pub async fn info(&self, section: &str, field: &str) -> String {
        let text: String = self.query(redis::cmd("INFO").arg(section)).await;
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{field}:")))
            .unwrap_or_else(|| panic!("no {field} in INFO {section}:\n{text}"))
            .trim()
            .to_owned()
    }
}
