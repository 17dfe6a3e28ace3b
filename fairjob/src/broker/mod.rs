//! Redis: connections, key names ([`keys`]) and the Lua scripts that make every
//! state change of a job one atomic step.
//!
//! Scripts are `.lua` files next to this module, loaded once with `include_str!`
//! into `redis::Script` (EVALSHA with automatic EVAL fallback). Data reaches them
//! only through ARGV; payloads are prepared in Rust and never re-encoded in Lua.
//! This module knows nothing of job types, middleware or tenants' rules: callers
//! hand it prepared strings.

pub mod keys;

use std::fmt;
use std::sync::LazyLock;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::{AsyncConnectionConfig, Script, Value};

pub use keys::{Keys, LimitKeys, ShardKeys};

use crate::error::{Error, Result};

macro_rules! script {
    ($name:ident, $file:literal) => {
        pub(crate) static $name: LazyLock<Script> = LazyLock::new(|| {
            Script::new(concat!(
                include_str!("scripts/lib_shard.lua"),
                "\n",
                include_str!("scripts/lib_slot.lua"),
                "\n",
                include_str!(concat!("scripts/", $file))
            ))
        });
    };
}

script!(PUSH, "push.lua");
script!(FETCH, "fetch.lua");
script!(SHARD_FETCH, "shard_fetch.lua");
script!(FINISH, "finish.lua");
script!(SHARD_FINISH, "shard_finish.lua");
script!(SLOT_RELEASE, "slot_release.lua");
script!(SCHEDULE, "schedule.lua");
script!(PROMOTE, "promote.lua");
script!(LEASE, "lease.lua");
script!(SHARD_LIMIT, "shard_limit.lua");
script!(SLOT_ACQUIRE, "slot_acquire.lua");
script!(SLOT_SET, "slot_set.lua");

/// All script sources, for the static check that none is built from runtime data.
pub const SCRIPT_SOURCES: &[(&str, &str)] = &[
    ("lib_shard.lua", include_str!("scripts/lib_shard.lua")),
    ("push.lua", include_str!("scripts/push.lua")),
    ("fetch.lua", include_str!("scripts/fetch.lua")),
    ("shard_fetch.lua", include_str!("scripts/shard_fetch.lua")),
    ("finish.lua", include_str!("scripts/finish.lua")),
    ("shard_finish.lua", include_str!("scripts/shard_finish.lua")),
    ("slot_release.lua", include_str!("scripts/slot_release.lua")),
    ("schedule.lua", include_str!("scripts/schedule.lua")),
    ("promote.lua", include_str!("scripts/promote.lua")),
    ("lease.lua", include_str!("scripts/lease.lua")),
    ("shard_limit.lua", include_str!("scripts/shard_limit.lua")),
    ("lib_slot.lua", include_str!("scripts/lib_slot.lua")),
    ("slot_acquire.lua", include_str!("scripts/slot_acquire.lua")),
    ("slot_set.lua", include_str!("scripts/slot_set.lua")),
];

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
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            namespace: None,
            response_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
            fair_key_format: None,
        }
    }
}

impl fmt::Debug for ConnectOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectOptions")
            .field("namespace", &self.namespace)
            .field("response_timeout", &self.response_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .finish()
    }
}

/// A connection to one Redis (multiplexed, reconnecting) and its key names.
#[derive(Clone)]
pub struct RedisBroker {
    conn: ConnectionManager,
    client: redis::Client,
    keys: Keys,
    display: String,
    options: ConnectOptions,
}

impl fmt::Debug for RedisBroker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisBroker")
            .field("redis", &self.display)
            .field("namespace", &self.options.namespace)
            .finish()
    }
}

/// `host:port/db` of a URL, with no user or password, for logs.
pub fn redacted(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    let scheme = url.split_once("://").map_or("redis", |(s, _)| s);
    format!("{scheme}://{rest}")
}

impl RedisBroker {
    /// Connects, failing fast with a clear error on a bad URL, refused connection
    /// or wrong credentials; later connection losses are retried in the background.
    pub async fn connect(url: &str, options: ConnectOptions) -> Result<RedisBroker> {
        #[cfg(feature = "tls")]
        install_tls_provider();
        let display = redacted(url);
        let client = redis::Client::open(url).map_err(|e| {
            Error::Config(format!(
                "invalid redis URL {display}: {}",
                scrub(&e.to_string(), url)
            ))
        })?;
        let cfg = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(options.connect_timeout))
            .set_response_timeout(Some(options.response_timeout));
        // One direct attempt first: a wrong password or an unreachable server is
        // reported at once instead of being retried by the reconnecting manager.
        let mut probe = client
            .get_multiplexed_async_connection_with_config(&cfg)
            .await
            .map_err(|e| connect_error(e, url, &display))?;
        let _: String = redis::cmd("PING")
            .query_async(&mut probe)
            .await
            .map_err(|e| connect_error(e, url, &display))?;
        drop(probe);
        let manager_cfg = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(options.connect_timeout))
            .set_response_timeout(Some(options.response_timeout))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_secs(2));
        let conn = ConnectionManager::new_with_config(client.clone(), manager_cfg)
            .await
            .map_err(|e| connect_error(e, url, &display))?;
        let mut keys = Keys::new(options.namespace.as_deref());
        if let Some(f) = &options.fair_key_format {
            keys = keys.with_fair_key_format(f.clone());
        }
        Ok(RedisBroker {
            conn,
            client,
            keys,
            display,
            options,
        })
    }

    /// Key names.
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// The server, without credentials.
    pub fn redis_display(&self) -> &str {
        &self.display
    }

    /// A handle to the shared multiplexed connection.
    pub fn conn(&self) -> ConnectionManager {
        self.conn.clone()
    }

    /// A separate connection for blocking commands (BLPOP), whose response
    /// timeout leaves room for the block.
    pub async fn blocking_conn(&self, block: Duration) -> Result<MultiplexedConnection> {
        let cfg = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.options.connect_timeout))
            .set_response_timeout(Some(block + self.options.response_timeout));
        self.client
            .get_multiplexed_async_connection_with_config(&cfg)
            .await
            .map_err(Error::from_redis)
    }

    /// Runs one command on the shared connection.
    pub async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T> {
        let mut c = self.conn.clone();
        cmd.query_async(&mut c).await.map_err(Error::from_redis)
    }

    /// Runs a pipeline on the shared connection.
    pub async fn pipe<T: redis::FromRedisValue>(&self, pipe: &redis::Pipeline) -> Result<T> {
        let mut c = self.conn.clone();
        pipe.query_async(&mut c).await.map_err(Error::from_redis)
    }

    pub(crate) async fn invoke<T: redis::FromRedisValue>(
        &self,
        inv: &redis::ScriptInvocation<'_>,
    ) -> Result<T> {
        let mut c = self.conn.clone();
        inv.invoke_async(&mut c).await.map_err(Error::from_redis)
    }

    /// Pushes a batch of prepared jobs in one script call; returns, per job, the
    /// index of the queue candidate chosen (0 = its source entry was gone).
    pub(crate) async fn push(&self, jobs: &[PushSpec], clock_offset: i64) -> Result<Vec<usize>> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        if jobs
            .iter()
            .any(|j| j.src.is_some() && j.candidates.iter().any(|c| c.sharded))
        {
            return self.push_promoted_to_shards(jobs, clock_offset).await;
        }
        let mut inv = PUSH.prepare_invoke();
        let has_plain = jobs.iter().any(|j| j.candidates.iter().any(|c| !c.sharded));
        if has_plain {
            inv.key(self.keys.queues());
        }
        inv.arg(clock_offset)
            .arg(jobs.len())
            .arg(if has_plain { "1" } else { "0" });
        for job in jobs {
            match &job.src {
                Some(src) => {
                    inv.arg(src.member.as_bytes()).key(&src.record);
                }
                None => {
                    inv.arg("");
                }
            }
            match &job.reroute {
                Some(r) => {
                    inv.arg(&r.member).key(&r.window_key);
                    inv.arg(r.max_window_secs).arg(r.rules.len());
                    for (threshold, per) in &r.rules {
                        inv.arg(*threshold).arg(*per);
                    }
                }
                None => {
                    inv.arg("");
                }
            }
            inv.arg(job.before.as_bytes()).arg(job.after.as_bytes());
            inv.arg(job.candidates.len());
            for c in &job.candidates {
                let qjson = serde_json::to_string(&c.queue).expect("strings encode");
                inv.arg(&c.queue).arg(qjson);
                if c.sharded {
                    let sk = self.keys.shard(&c.queue);
                    inv.arg("s")
                        .arg(c.tenant.as_deref().map(keys::encode).unwrap_or_default());
                    inv.arg(&sk.shard_prefix);
                    for k in sk.state() {
                        inv.key(k);
                    }
                    inv.key(&sk.wake);
                } else {
                    inv.arg("p");
                    inv.key(self.keys.queue(&c.queue))
                        .key(self.keys.wake(&c.queue));
                }
            }
        }
        self.invoke(&inv).await
    }

    /// Promotes scheduled or retried jobs bound for a sharded queue. The
    /// promoting record is one of Sidekiq's global keys, outside the queue's
    /// cluster slot, so the push and the removal from the record are two steps:
    /// the push first (a crash between them re-promotes the job once its
    /// promotion lease expires: a duplicate, never a loss), and a job whose
    /// record entry is already gone (another poller took it) is not pushed.
    async fn push_promoted_to_shards(
        &self,
        jobs: &[PushSpec],
        clock_offset: i64,
    ) -> Result<Vec<usize>> {
        let mut out = Vec::with_capacity(jobs.len());
        for job in jobs {
            let Some(src) = &job.src else {
                out.extend(Box::pin(self.push(std::slice::from_ref(job), clock_offset)).await?);
                continue;
            };
            let there: Option<f64> = self
                .query(
                    redis::cmd("ZSCORE")
                        .arg(&src.record)
                        .arg(src.member.as_bytes()),
                )
                .await?;
            if there.is_none() {
                out.push(0);
                continue;
            }
            let unsourced = PushSpec {
                src: None,
                ..job.clone()
            };
            let chosen =
                Box::pin(self.push(std::slice::from_ref(&unsourced), clock_offset)).await?;
            let _: i64 = self
                .query(
                    redis::cmd("ZREM")
                        .arg(&src.record)
                        .arg(src.member.as_bytes()),
                )
                .await?;
            out.extend(chosen);
        }
        Ok(out)
    }

    /// Adds payloads to `schedule`.
    pub(crate) async fn schedule(
        &self,
        entries: &[(When, String)],
        clock_offset: i64,
    ) -> Result<()> {
        if entries.is_empty() {
            return Ok(());
        }
        let mut inv = SCHEDULE.prepare_invoke();
        inv.key(self.keys.schedule()).arg(clock_offset);
        for (when, payload) in entries {
            match when {
                When::In(secs) => inv.arg("in").arg(*secs),
                When::At(secs) => inv.arg("at").arg(*secs),
            };
            inv.arg(payload.as_bytes());
        }
        let _: Value = self.invoke(&inv).await?;
        Ok(())
    }

    /// Ends a job's stay in `identity`'s in-progress record (fenced by `token`).
    /// Returns false when the token was gone (a stale completion, counted).
    pub(crate) async fn finish(
        &self,
        identity: &str,
        token: &Token,
        action: Finish<'_>,
        clock_offset: i64,
        slot: Option<&SlotHold>,
    ) -> Result<bool> {
        self.finish_guarded(identity, token, action, clock_offset, slot, false)
            .await
    }

    /// Recovers a job of `identity` (the reaper): the same step as [`Self::finish`],
    /// done only if `identity`'s lease is still gone when the script runs, so a
    /// worker that came back since the reaper looked keeps its job.
    pub(crate) async fn recover(
        &self,
        identity: &str,
        token: &Token,
        action: Finish<'_>,
        clock_offset: i64,
        slot: Option<&SlotHold>,
    ) -> Result<bool> {
        self.finish_guarded(identity, token, action, clock_offset, slot, true)
            .await
    }

    async fn finish_guarded(
        &self,
        identity: &str,
        token: &Token,
        action: Finish<'_>,
        clock_offset: i64,
        slot: Option<&SlotHold>,
        only_if_dead: bool,
    ) -> Result<bool> {
        if token.tenant.is_some() {
            return self
                .finish_sharded(identity, token, action, clock_offset, slot, only_if_dead)
                .await;
        }
        if !only_if_dead && matches!(action, Finish::Ack) && slot.is_none() {
            // The common case needs no script: one HDEL, fenced by the token.
            let removed: i64 = self
                .query(
                    redis::cmd("HDEL")
                        .arg(self.keys.inflight(identity))
                        .arg(&token.raw),
                )
                .await?;
            if removed == 0 {
                self.count_fenced().await?;
            }
            return Ok(removed == 1);
        }
        let mut inv = FINISH.prepare_invoke();
        inv.key(self.keys.inflight(identity))
            .key(self.keys.stat("fenced"));
        let (name, payload, delay): (&str, &[u8], f64) = match &action {
            Finish::Ack => ("ack", b"", 0.0),
            Finish::Retry { payload, delay } => ("retry", payload.as_bytes(), delay.as_secs_f64()),
            Finish::Dead { payload } => ("dead", payload.as_bytes(), 0.0),
            Finish::Front { payload } => ("front", payload.as_bytes(), 0.0),
        };
        let dest = match &action {
            Finish::Retry { .. } => self.keys.retry(),
            Finish::Dead { .. } => self.keys.dead(),
            _ => self.keys.queue(&token.queue),
        };
        inv.key(dest).key(self.keys.wake(&token.queue));
        inv.arg(token.raw.as_str())
            .arg(name)
            .arg(payload)
            .arg(delay)
            .arg(clock_offset);
        match slot {
            Some(hold) => self.slot_part(&mut inv, identity, hold),
            None => {
                inv.arg("").arg("").arg("").arg("").arg("");
            }
        }
        if only_if_dead {
            inv.arg("1").key(self.keys.lease(identity));
        } else {
            inv.arg("");
        }
        let done: i64 = self.invoke(&inv).await?;
        Ok(done == 1)
    }

    /// [`Self::finish_guarded`] for a job of a tenant-sharded queue. The shard
    /// step (shard_finish.lua) touches only keys in the queue's cluster slot;
    /// Sidekiq's `retry` and `dead` sets and a held slot's keys live elsewhere,
    /// so those are separate steps, ordered so that a crash between them
    /// repeats a job rather than losing it: the retry/dead entry is written
    /// first and taken back if the shard step finds the job fenced.
    async fn finish_sharded(
        &self,
        identity: &str,
        token: &Token,
        action: Finish<'_>,
        clock_offset: i64,
        slot: Option<&SlotHold>,
        only_if_dead: bool,
    ) -> Result<bool> {
        let sk = self.keys.shard(&token.queue);
        if only_if_dead {
            // The reaper saw the lease gone; look again just before the move (a
            // worker that came back in between keeps its job).
            let alive: bool = self
                .query(redis::cmd("EXISTS").arg(self.keys.lease(identity)))
                .await?;
            if alive {
                return Ok(false);
            }
        }
        let written = match &action {
            Finish::Retry { payload, delay } => {
                let key = self.keys.retry();
                self.zset_add(&key, "in", delay.as_secs_f64(), payload, clock_offset)
                    .await?;
                Some((key, *payload))
            }
            Finish::Dead { payload } => {
                let key = self.keys.dead();
                self.zset_add(&key, "dead", 0.0, payload, clock_offset)
                    .await?;
                Some((key, *payload))
            }
            Finish::Ack | Finish::Front { .. } => None,
        };
        let (name, payload): (&str, &[u8]) = match &action {
            Finish::Front { payload } => ("front", payload.as_bytes()),
            _ => ("done", b""),
        };
        let mut inv = SHARD_FINISH.prepare_invoke();
        inv.key(sk.inflight(identity));
        for k in sk.state() {
            inv.key(k);
        }
        inv.key(&sk.wake);
        inv.arg(token.raw.as_str())
            .arg(name)
            .arg(payload)
            .arg(&sk.shard_prefix)
            .arg(token.tenant.as_deref().unwrap_or_default());
        let done: i64 = self.invoke(&inv).await?;
        if done == 0 {
            if let Some((key, payload)) = written {
                let _: i64 = self.query(redis::cmd("ZREM").arg(key).arg(payload)).await?;
            }
            self.count_fenced().await?;
            return Ok(false);
        }
        if let Some(hold) = slot {
            let mut inv = SLOT_RELEASE.prepare_invoke();
            self.slot_part(&mut inv, identity, hold);
            inv.arg(token.raw.as_str());
            let _: i64 = self.invoke(&inv).await?;
        }
        Ok(true)
    }

    /// Appends a held slot's keys and arguments (the shape `slot_release` in
    /// lib_slot.lua takes, from finish.lua and slot_release.lua).
    fn slot_part(&self, inv: &mut redis::ScriptInvocation<'_>, identity: &str, hold: &SlotHold) {
        let lk = self.keys.limit(&hold.full_key);
        inv.key(&lk.limit)
            .key(&lk.holders)
            .key(&lk.reserved)
            .key(&lk.waiters);
        inv.key(self.keys.slots(identity));
        inv.arg(&hold.holder)
            .arg(hold.default_limit)
            .arg(RESERVATION_TTL.as_millis() as u64);
        let (qp, wp) = self.keys.queue_and_wake_prefixes();
        inv.arg(qp).arg(wp);
    }

    async fn count_fenced(&self) -> Result<()> {
        let _: i64 = self
            .query(redis::cmd("INCR").arg(self.keys.stat("fenced")))
            .await?;
        Ok(())
    }

    /// Adds one payload to a Sidekiq sorted set by Redis's clock (schedule.lua).
    pub(crate) async fn zset_add(
        &self,
        key: &str,
        mode: &str,
        secs: f64,
        payload: &str,
        clock_offset: i64,
    ) -> Result<()> {
        let mut inv = SCHEDULE.prepare_invoke();
        inv.key(key)
            .arg(clock_offset)
            .arg(mode)
            .arg(secs)
            .arg(payload.as_bytes());
        let _: Value = self.invoke(&inv).await?;
        Ok(())
    }

    /// The in-progress record holding `token` for `identity`: the worker's own,
    /// or, for a job of a tenant-sharded queue, the worker's record in that
    /// queue's cluster slot.
    pub fn inflight_of(&self, identity: &str, token: &Token) -> String {
        if token.tenant.is_some() {
            self.keys.shard(&token.queue).inflight(identity)
        } else {
            self.keys.inflight(identity)
        }
    }

    /// Every in-progress record `identity` may hold: its own (plain queues) and
    /// one in each tenant-sharded queue's cluster slot.
    pub async fn inflight_records(&self, identity: &str) -> Result<Vec<String>> {
        let sharded: Vec<String> = self
            .query(redis::cmd("SMEMBERS").arg(self.keys.sharded_queues()))
            .await?;
        let mut out = vec![self.keys.inflight(identity)];
        out.extend(
            sharded
                .iter()
                .map(|q| self.keys.shard(q).inflight(identity)),
        );
        Ok(out)
    }

    /// How many jobs `identity` has in progress, over all its records.
    pub async fn in_progress(&self, identity: &str) -> Result<u64> {
        let mut pipe = redis::pipe();
        for k in self.inflight_records(identity).await? {
            pipe.hlen(k);
        }
        let lens: Vec<u64> = self.pipe(&pipe).await?;
        Ok(lens.iter().sum())
    }

    /// Renews `identity`'s lease; returns true when it had already expired.
    pub(crate) async fn renew_lease(&self, identity: &str, lease: Duration) -> Result<bool> {
        let mut inv = LEASE.prepare_invoke();
        inv.key(self.keys.lease(identity))
            .arg(lease.as_millis() as u64)
            .arg(identity);
        let lapsed: i64 = self.invoke(&inv).await?;
        Ok(lapsed == 1)
    }

    /// Sets a sharded queue's running limit for a tenant (`None` = the default)
    /// and re-checks tenants that may have become runnable, in bounded batches.
    pub async fn set_shard_limit(
        &self,
        queue: &str,
        tenant: Option<&str>,
        limit: Option<u32>,
    ) -> Result<()> {
        self.keys.check_shardable(queue).map_err(Error::Config)?;
        let sk = self.keys.shard(queue);
        let field = tenant.map(keys::encode).unwrap_or_else(|| "*".to_owned());
        let value = limit.map(|l| l.to_string()).unwrap_or_default();
        let mut first = true;
        let mut cursor: u64 = 0;
        loop {
            let batch: Vec<String> = if tenant.is_some() {
                vec![field.clone()]
            } else {
                let (next, batch): (u64, Vec<String>) = self
                    .query(
                        redis::cmd("SSCAN")
                            .arg(&sk.tenants)
                            .arg(cursor)
                            .arg("COUNT")
                            .arg(500),
                    )
                    .await?;
                cursor = next;
                batch
            };
            let mut inv = SHARD_LIMIT.prepare_invoke();
            for k in sk.state() {
                inv.key(k);
            }
            inv.arg(&sk.shard_prefix)
                .arg(&field)
                .arg(if first { value.as_str() } else { "-" });
            for t in &batch {
                inv.arg(t);
            }
            let added: i64 = self.invoke(&inv).await?;
            if added > 0 {
                // Tenants became runnable: wake an idle worker now, not at its next poll.
                let mut pipe = redis::pipe();
                pipe.lpush(&sk.wake, "1")
                    .ignore()
                    .ltrim(&sk.wake, 0, 0)
                    .ignore();
                self.pipe::<()>(&pipe).await?;
            }
            first = false;
            if tenant.is_some() || cursor == 0 {
                return Ok(());
            }
        }
    }

    /// Redis's clock, in float seconds.
    pub async fn time(&self) -> Result<f64> {
        let (s, us): (u64, u64) = self.query(&redis::cmd("TIME")).await?;
        Ok(s as f64 + us as f64 / 1e6)
    }
}

/// Appends a token's shard state keys and `(prefix, tenant)` arguments, or two
/// empty arguments for a job of a plain queue (the shape slot_acquire.lua
/// expects).
pub(crate) fn shard_part(keys: &Keys, inv: &mut redis::ScriptInvocation<'_>, token: &Token) {
    match &token.tenant {
        Some(t) => {
            let sk = keys.shard(&token.queue);
            for k in sk.state() {
                inv.key(k);
            }
            inv.arg(&sk.shard_prefix).arg(t);
        }
        None => {
            inv.arg("").arg("");
        }
    }
}

/// How long a slot stays reserved for a released waiter that has not started yet.
pub const RESERVATION_TTL: Duration = Duration::from_secs(30);

/// A slot held by a running job: released when the job leaves the in-progress record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotHold {
    /// `<Class>:<key>` or `group:<group>:<key>`.
    pub full_key: String,
    /// `<identity>|<token>`.
    pub holder: String,
    /// The declared limit, used while no runtime limit is set.
    pub default_limit: u32,
}

impl SlotHold {
    /// The value kept in the worker's slot record: `<default>|<full key>`.
    pub fn record(&self) -> String {
        format!("{}|{}", self.default_limit, self.full_key)
    }

    /// Reads a slot record value back.
    pub fn from_record(identity: &str, token: &str, value: &str) -> Option<SlotHold> {
        let (default, key) = value.split_once('|')?;
        Some(SlotHold {
            full_key: key.to_owned(),
            holder: format!("{identity}|{token}"),
            default_limit: default.parse().ok()?,
        })
    }
}

/// A promoted job's entry in a promoting record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Src {
    /// The promoting record (`Keys::promoting`).
    pub record: String,
    /// The entry (the payload as it was in `schedule` or `retry`).
    pub member: String,
}

/// When a scheduled job is due.
#[derive(Debug, Clone, Copy)]
pub(crate) enum When {
    /// Seconds after Redis's clock now.
    In(f64),
    /// Absolute epoch seconds.
    At(f64),
}

/// One job's push, prepared by the client.
#[derive(Debug, Clone)]
pub(crate) struct PushSpec {
    /// Remove this entry from its promoting record first; skip if it is gone.
    pub src: Option<Src>,
    /// Register in a reroute window and choose among the candidates.
    pub reroute: Option<RerouteSpec>,
    /// The payload up to the queue value, and after it.
    pub before: String,
    pub after: String,
    /// Candidate 1 is the job's own queue; candidate i+1 is rule i's queue.
    pub candidates: Vec<Candidate>,
}

#[derive(Debug, Clone)]
pub(crate) struct RerouteSpec {
    pub window_key: String,
    pub member: String,
    pub max_window_secs: u64,
    /// (threshold, per seconds), in declaration order.
    pub rules: Vec<(u64, u64)>,
}

#[derive(Debug, Clone)]
pub(crate) struct Candidate {
    pub queue: String,
    pub sharded: bool,
    pub tenant: Option<String>,
}

/// What happens to a fetched job when it leaves the in-progress record.
#[derive(Debug)]
pub(crate) enum Finish<'a> {
    Ack,
    Retry {
        payload: &'a str,
        delay: Duration,
    },
    Dead {
        payload: &'a str,
    },
    /// Back to the front of its queue (next to run).
    Front {
        payload: &'a str,
    },
}

/// A fetched job's token in the in-progress record: `<seq>|<queue>[|<tenant>]`,
/// each part encoded, so the record alone says where the job goes back to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    /// The field name in the in-progress hash.
    pub raw: String,
    /// The queue the job was fetched from.
    pub queue: String,
    /// For a sharded queue, the encoded tenant of its shard (`""` = no tenant).
    pub tenant: Option<String>,
}

impl Token {
    /// Parses a token; `None` for a field fairjob did not write.
    pub fn parse(raw: &str) -> Option<Token> {
        let mut parts = raw.split('|');
        let seq = parts.next()?;
        if seq.is_empty() || !seq.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let queue = keys::decode(parts.next()?)?;
        let tenant = parts.next().map(str::to_owned);
        if parts.next().is_some() {
            return None;
        }
        Some(Token {
            raw: raw.to_owned(),
            queue,
            tenant,
        })
    }
}

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
    match Error::from_redis(e) {
        Error::Auth(text) => Error::Auth(format!("{display}: {}", scrub(&text, url))),
        Error::Redis(e) if e.is_connection_refusal() || e.is_io_error() || e.is_timeout() => {
            Error::Connection(format!(
                "cannot reach {display}: {}",
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

    #[test]
    fn tokens_round_trip() {
        let t = Token::parse("12|conv%3Aersions|ac%20me").unwrap();
        assert_eq!(t.queue, "conv:ersions");
        assert_eq!(t.tenant.as_deref(), Some("ac%20me"));
        assert_eq!(Token::parse("7|default").unwrap().tenant, None);
        assert_eq!(
            Token::parse("7|default|").unwrap().tenant.as_deref(),
            Some("")
        );
        assert!(Token::parse("x|default").is_none());
        assert!(Token::parse("garbage").is_none());
    }

    #[test]
    fn scripts_are_static_files_with_data_only_in_argv() {
        for (name, src) in SCRIPT_SOURCES {
            assert!(
                !src.contains("loadstring") && !src.contains("load("),
                "{name} evaluates code"
            );
            assert!(!src.contains("{{"), "{name} looks like a format! template");
        }
    }
}
