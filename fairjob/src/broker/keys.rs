//! Every Redis key name fairjob reads or writes, built in this one place.
//!
//! Sidekiq's own keys (`queues`, `queue:<name>`, `schedule`, `retry`, `dead`,
//! `processes`, `stat:*`, `<identity>`…) keep Sidekiq's layout so Ruby and Rust
//! share one Redis; the gem-compatible reroute window keeps the tenant raw, as
//! the gem writes it. fairjob's own keys start with `fairjob:` and pass every
//! piece of data (tenant, queue, identity, limit key) through [`encode`], so no
//! two tenants share a key, no key contains a hash-tag brace or a glob
//! metacharacter, and every key of one sharded queue or one slot limit shares a
//! hash tag for Redis Cluster: `{lk:<key>}` for a limit, and for a sharded queue
//! the name of its inbox (`fairjob:{queue:<name>}:…`), so the shards, the ring,
//! the per-queue in-progress records and the inbox that Sidekiq producers push to
//! all live in one slot and every shard script stays in it.

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};

/// Bytes kept as they are by [`encode`]: ASCII letters, digits and `-._~`.
const KEEP: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Encodes a piece of data (tenant id, queue name, limit key, identity) for use
/// inside one of fairjob's own keys: percent-encoding of every byte outside
/// `[A-Za-z0-9-._~]`. Injective and reversible with [`decode`]; the Lua scripts
/// that build a shard key from a tenant use the same rule (`encode` in `shard.lua`).
pub fn encode(data: &str) -> String {
    utf8_percent_encode(data, KEEP).to_string()
}

/// Reverses [`encode`].
pub fn decode(encoded: &str) -> Option<String> {
    percent_decode_str(encoded)
        .decode_utf8()
        .ok()
        .map(|s| s.into_owned())
}

/// The gem's default window key format.
pub const DEFAULT_FAIR_KEY_FORMAT: &str =
    "sidekiq-fair_tenant:enqueued:%<job_class>s:tenant:%<fair_tenant>s";

/// Key names for one namespace.
#[derive(Debug, Clone)]
pub struct Keys {
    ns: String,
    fair_format: String,
}

impl Keys {
    /// Keys under an optional namespace (`ns:` is prefixed to every key, as
    /// redis-namespace did for Sidekiq).
    pub fn new(namespace: Option<&str>) -> Keys {
        Keys {
            ns: match namespace {
                Some(ns) if !ns.is_empty() => format!("{ns}:"),
                _ => String::new(),
            },
            fair_format: DEFAULT_FAIR_KEY_FORMAT.to_owned(),
        }
    }

    /// Uses another window key format (placeholders `%<job_class>s`,
    /// `%<fair_tenant>s`, `%<queue>s`, as the gem's `enqueues_key`).
    #[must_use]
    pub fn with_fair_key_format(mut self, format: impl Into<String>) -> Keys {
        self.fair_format = format.into();
        self
    }

    /// The namespace prefix (`""` or `"ns:"`).
    pub fn prefix(&self) -> &str {
        &self.ns
    }

    fn k(&self, rest: &str) -> String {
        let mut s = String::with_capacity(self.ns.len() + rest.len());
        s.push_str(&self.ns);
        s.push_str(rest);
        s
    }

    // ---- Sidekiq's keys ----

    /// `queues`: the set of known queue names.
    pub fn queues(&self) -> String {
        self.k("queues")
    }
    /// `queue:<name>`: a queue (LPUSH in, RPOP out). For a sharded queue, its inbox.
    pub fn queue(&self, name: &str) -> String {
        self.k(&format!("queue:{name}"))
    }
    /// `schedule`: jobs waiting for their time.
    pub fn schedule(&self) -> String {
        self.k("schedule")
    }
    /// `retry`: failed jobs waiting for their next attempt.
    pub fn retry(&self) -> String {
        self.k("retry")
    }
    /// `dead`: the morgue.
    pub fn dead(&self) -> String {
        self.k("dead")
    }
    /// `stat:processed` (or the dated key when `day` is `YYYY-MM-DD`).
    pub fn stat_processed(&self, day: Option<&str>) -> String {
        match day {
            Some(d) => self.k(&format!("stat:processed:{d}")),
            None => self.k("stat:processed"),
        }
    }
    /// `stat:failed` (or the dated key).
    pub fn stat_failed(&self, day: Option<&str>) -> String {
        match day {
            Some(d) => self.k(&format!("stat:failed:{d}")),
            None => self.k("stat:failed"),
        }
    }
    /// `processes`: the set of live process identities.
    pub fn processes(&self) -> String {
        self.k("processes")
    }
    /// `<identity>`: a process's heartbeat hash.
    pub fn process(&self, identity: &str) -> String {
        self.k(identity)
    }
    /// `<identity>:work` (Sidekiq ≥ 6.4.2) and `<identity>:workers` (≤ 6.4.1).
    pub fn process_work(&self, identity: &str) -> [String; 2] {
        [
            self.k(&format!("{identity}:work")),
            self.k(&format!("{identity}:workers")),
        ]
    }

    /// `<identity>-signals`: signals sent by Sidekiq's API/Web UI (`TSTP` quiet, `TERM` stop).
    pub fn process_signals(&self, identity: &str) -> String {
        self.k(&format!("{identity}-signals"))
    }

    // ---- the fair_tenant gem's window ----

    /// The reroute window of one class and tenant, in the gem's format (tenant raw).
    pub fn fair_window(&self, class: &str, tenant: &str, queue: &str) -> String {
        let key = self
            .fair_format
            .replace("%<job_class>s", class)
            .replace("%<queue>s", queue)
            .replace("%<fair_tenant>s", tenant);
        self.k(&key)
    }

    // ---- fairjob's own keys ----

    /// Wake-up tokens for idle workers of one queue.
    pub fn wake(&self, queue: &str) -> String {
        self.k(&format!("fairjob:wake:{}", encode(queue)))
    }
    /// The in-progress record of one worker process: token → payload.
    pub fn inflight(&self, identity: &str) -> String {
        self.k(&format!("fairjob:inflight:{}", encode(identity)))
    }
    /// The prefixes of [`Keys::queue`] and [`Keys::wake`] (`<prefix><name>` and
    /// `<prefix><encoded name>`), for scripts that route released waiters.
    pub fn queue_and_wake_prefixes(&self) -> (String, String) {
        (self.k("queue:"), self.k("fairjob:wake:"))
    }
    /// A worker process's lease (expires unless the heartbeat renews it).
    pub fn lease(&self, identity: &str) -> String {
        self.k(&format!("fairjob:lease:{}", encode(identity)))
    }
    /// Registered worker processes: identity → JSON description.
    pub fn workers(&self) -> String {
        self.k("fairjob:workers")
    }
    /// Entries of `source` (`schedule` or `retry`, as [`Keys::schedule`] and
    /// [`Keys::retry`] name them) being promoted, scored by lease expiry (ms). The
    /// source's name is the hash tag, so claiming stays in one cluster slot.
    pub fn promoting(&self, source: &str) -> String {
        self.k(&format!("fairjob:{{{source}}}:promoting"))
    }
    /// The reaper's lock (one reaper pass per interval across the fleet).
    pub fn reaper_lock(&self) -> String {
        self.k("fairjob:reaper-lock")
    }
    /// A fairjob counter (`fenced`, `recovered`, `interrupted`, `rerouted`…).
    pub fn stat(&self, name: &str) -> String {
        self.k(&format!("fairjob:stat:{name}"))
    }
    /// Sharded queues announced by workers and clients.
    pub fn sharded_queues(&self) -> String {
        self.k("fairjob:sharded-queues")
    }

    /// Slot-limit keys registered so far (encoded full keys), for listing.
    pub fn limits_registry(&self) -> String {
        self.k("fairjob:limits")
    }
    /// The slots one worker process holds: token → `<default limit>|<encoded key>`.
    pub fn slots(&self, identity: &str) -> String {
        self.k(&format!("fairjob:slots:{}", encode(identity)))
    }
    /// The keys of one slot limit (`full_key` is `<Class>:<key>` or `group:<group>:<key>`).
    pub fn limit(&self, full_key: &str) -> LimitKeys {
        let tag = self.k(&format!("fairjob:{{lk:{}}}", encode(full_key)));
        LimitKeys {
            limit: format!("{tag}:limit"),
            holders: format!("{tag}:holders"),
            reserved: format!("{tag}:reserved"),
            waiters: format!("{tag}:waiters"),
        }
    }

    /// The keys of one tenant-sharded queue. Their hash tag is the inbox key
    /// itself (`{<ns>queue:<name>}`), so all of them hash to the inbox's slot;
    /// [`Keys::check_shardable`] refuses the rare names (braces) where it can't.
    pub fn shard(&self, queue: &str) -> ShardKeys {
        let inbox = self.queue(queue);
        let tag = self.k(&format!("fairjob:{{{inbox}}}"));
        ShardKeys {
            ring: format!("{tag}:ring"),
            seq: format!("{tag}:seq"),
            running: format!("{tag}:running"),
            limits: format!("{tag}:limits"),
            tenants: format!("{tag}:tenants"),
            shard_prefix: format!("{tag}:shard:"),
            inflight_prefix: format!("{tag}:inflight:"),
            wake: format!("{tag}:wake"),
            inbox,
        }
    }

    /// Whether `queue` can be sharded in this namespace: every key of the
    /// sharded queue must hash to the same Redis Cluster slot as its inbox
    /// `queue:<name>`. True unless the queue name or the namespace holds braces
    /// that are not a whole hash tag (`{app}:` as a namespace is fine).
    pub fn check_shardable(&self, queue: &str) -> std::result::Result<(), String> {
        let sk = self.shard(queue);
        let want = hash_part(&sk.inbox);
        let probe = [
            sk.ring.as_str(),
            &sk.tenant_list(Some("t")),
            &sk.inflight("w"),
            &sk.wake,
        ];
        if probe.iter().all(|k| hash_part(k) == want) {
            Ok(())
        } else {
            Err(format!(
                "queue {queue:?} can't be sharded: a sharded queue's keys share the Redis Cluster \
                 slot of its inbox {:?}, which braces in the queue name or namespace prevent; \
                 use a name without `{{` or `}}`",
                sk.inbox
            ))
        }
    }
}

/// The part of a key Redis Cluster hashes: the content of the first `{…}` when
/// it is not empty, otherwise the whole key.
pub fn hash_part(key: &str) -> &str {
    if let Some(open) = key.find('{')
        && let Some(len) = key[open + 1..].find('}')
        && len > 0
    {
        return &key[open + 1..open + 1 + len];
    }
    key
}

/// The keys of one slot limit; they share one hash tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitKeys {
    /// The runtime limit (STRING); absent = the declared default.
    pub limit: String,
    /// Holders (ZSET holder id → acquired at, ms).
    pub holders: String,
    /// Slots reserved for released waiters (HASH jid → expiry ms).
    pub reserved: String,
    /// The lock-wait list.
    pub waiters: String,
}

/// The keys of one tenant-sharded queue; all hash to the slot of the inbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardKeys {
    /// `queue:<name>`: producers that know nothing of shards push here.
    pub inbox: String,
    /// Runnable tenants in round-robin order (ZSET scored by a sequence).
    pub ring: String,
    /// The ring's sequence counter.
    pub seq: String,
    /// Running jobs per tenant (HASH).
    pub running: String,
    /// Per-tenant running limits (HASH; field `*` is the default).
    pub limits: String,
    /// Tenants with pending or running jobs (SET), for listing.
    pub tenants: String,
    /// Prefix of the per-tenant lists: `<prefix><encoded tenant>`.
    pub shard_prefix: String,
    /// Prefix of the per-worker in-progress records of this queue's jobs:
    /// `<prefix><encoded identity>` (token → payload).
    pub inflight_prefix: String,
    /// Wake-up tokens for workers idle on this queue (the shard scripts push
    /// here; [`Keys::wake`] is the untagged one released slot waiters use).
    pub wake: String,
}

impl ShardKeys {
    /// The five state keys the shard scripts take, in their order:
    /// ring, seq, running, limits, tenants.
    pub fn state(&self) -> [&str; 5] {
        [
            &self.ring,
            &self.seq,
            &self.running,
            &self.limits,
            &self.tenants,
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn sidekiq_keys_match_sidekiq() {
        let k = Keys::new(None);
        assert_eq!(k.queue("default"), "queue:default");
        assert_eq!(k.queues(), "queues");
        assert_eq!(k.process_work("h:1:abc")[0], "h:1:abc:work");
        let n = Keys::new(Some("app"));
        assert_eq!(n.queue("default"), "app:queue:default");
    }

    #[test]
    fn fair_window_is_the_gems_key_with_the_raw_tenant() {
        let k = Keys::new(None);
        assert_eq!(
            k.fair_window("IJob", "t:1 {x}", "default"),
            "sidekiq-fair_tenant:enqueued:IJob:tenant:t:1 {x}"
        );
    }

    #[test]
    fn encoded_keys_have_no_separators_braces_or_globs() {
        for t in [
            ":", "{", "}", "a}b", "*", "?", "[", "\\", " ", "\n", "\0", "é", "%", "",
        ] {
            let e = encode(t);
            assert!(
                !e.contains([':', '{', '}', '*', '?', '[', ']', '\\', ' ', '\n', '\0']),
                "{t:?} → {e}"
            );
            assert_eq!(decode(&e).as_deref(), Some(t));
        }
        let s = Keys::new(None).shard("conversions");
        assert_eq!(s.ring, "fairjob:{queue:conversions}:ring");
    }

    #[test]
    fn hash_part_follows_redis_cluster() {
        assert_eq!(hash_part("queue:a"), "queue:a");
        assert_eq!(hash_part("x{ab}y{cd}"), "ab");
        assert_eq!(hash_part("x{}y{cd}"), "x{}y{cd}");
        assert_eq!(hash_part("x{ab"), "x{ab");
        assert_eq!(hash_part("x}{ab}"), "ab");
    }

    #[test]
    fn braces_that_would_split_a_sharded_queue_are_refused() {
        for (ns, q) in [(None, "a}b"), (None, "{x}"), (Some("n}"), "q")] {
            assert!(Keys::new(ns).check_shardable(q).is_err(), "{ns:?} {q:?}");
        }
        for (ns, q) in [(None, "conv"), (None, "a{b"), (Some("{app}"), "a}b")] {
            assert!(Keys::new(ns).check_shardable(q).is_ok(), "{ns:?} {q:?}");
        }
    }

    proptest! {
        #[test]
        fn encode_is_injective_and_reversible(a in ".{0,40}", b in ".{0,40}") {
            prop_assert_eq!(decode(&encode(&a)), Some(a.clone()));
            if a != b {
                prop_assert_ne!(encode(&a), encode(&b));
            }
        }

        #[test]
        fn a_shardable_queues_keys_share_the_inbox_slot(
            q in "[^{}]{1,30}", t in ".{0,20}", w in ".{0,20}", ns in proptest::option::of("[a-z:]{0,8}"),
        ) {
            let k = Keys::new(ns.as_deref());
            prop_assert!(k.check_shardable(&q).is_ok());
            let s = k.shard(&q);
            let slot = hash_part(&s.inbox);
            for key in [&s.ring, &s.seq, &s.running, &s.limits, &s.tenants, &s.wake,
                        &s.tenant_list(Some(&t)), &s.tenant_list(None), &s.inflight(&w)] {
                prop_assert_eq!(hash_part(key), slot, "{}", key);
            }
        }

        #[test]
        fn tenants_never_share_a_shard_key(a in "\\PC{1,20}", b in "\\PC{1,20}") {
            let s = Keys::new(None).shard("q");
            if a != b {
                prop_assert_ne!(s.tenant_list(Some(&a)), s.tenant_list(Some(&b)));
            }
            prop_assert_ne!(s.tenant_list(Some(&a)), s.tenant_list(None));
        }
    }
}
