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

pub use super::slot::{cluster_slot, hash_part};
pub use crate::wire::encoding::{decode, encode};
mod shard;
pub use shard::ShardKeys;

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

    /// The keys of a broker connected with `options` (namespace, window key format).
    pub(crate) fn for_options(options: &super::ConnectOptions) -> Keys {
        let keys = Keys::new(options.namespace.as_deref());
        match &options.fair_key_format {
            Some(f) => keys.with_fair_key_format(f.clone()),
            None => keys,
        }
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

    /// An iterable job's state (Sidekiq's `it-{jid}` hash; the jid is data).
    pub fn iteration(&self, jid: &str) -> String {
        self.k(&format!("it-{}", encode(jid)))
    }

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
    /// Periodic schedules, by name: the stored entry (JSON). Every cron key
    /// shares the hash tag `{cron}`, so each cron script stays in one slot.
    pub fn cron_defs(&self) -> String {
        self.k("fairjob:{cron}:defs")
    }
    /// Schedule names scored by their next fire time (Unix seconds); a paused
    /// schedule is absent.
    pub fn cron_due(&self) -> String {
        self.k("fairjob:{cron}:due")
    }
    /// The names of the schedules declared in code (reconciled at start-up).
    pub fn cron_code(&self) -> String {
        self.k("fairjob:{cron}:code")
    }
    /// The token of the worker whose start-up reconciliation is under way
    /// (STRING; the last to set it decides, see `scripts/cron_reconcile.lua`).
    pub fn cron_reconciler(&self) -> String {
        self.k("fairjob:{cron}:reconciler")
    }
    /// The names one reconciliation (`token`) declared so far (SET, expiring).
    pub fn cron_declared(&self, token: &str) -> String {
        self.k(&format!("fairjob:{{cron}}:declared:{}", encode(token)))
    }
    /// Claimed fire times' jobs not yet pushed, scored by lease expiry (ms).
    pub fn cron_firing(&self) -> String {
        self.k("fairjob:{cron}:firing")
    }
    /// One schedule's state: last fire time, outcome and jid, paused, the
    /// running job (`overlap = "skip"`), counters.
    pub fn cron_state(&self, name: &str) -> String {
        self.k(&format!("fairjob:{{cron}}:state:{}", encode(name)))
    }

    /// Jids a relay (fairjob-postgres' pump) has staged for one push, scored by
    /// the time staged (ms): a push that finds its jid gone here was already
    /// made, so a relay's retry after a crash pushes nothing twice.
    pub fn staged(&self) -> String {
        self.k("fairjob:{staged}:relay")
    }
    /// Written by every worker at start and never removed (STRING, no
    /// expiry): gone means Redis lost its data (restarted without
    /// persistence, flushed, or failed over to a replica without it).
    pub fn data_marker(&self) -> String {
        self.k("fairjob:data")
    }
    /// The relay's epoch (STRING): a token fairjob-postgres' pump writes
    /// once; gone or changed means Redis lost data. Same slot as `staged`.
    pub fn relay_epoch(&self) -> String {
        self.k("fairjob:{staged}:epoch")
    }
    /// Completions of jobs a relay keeps (LIST of `<state> <jid>`, state
    /// `done` or `dead`), pushed by workers, drained by fairjob-postgres' pump.
    pub fn relay_done(&self) -> String {
        self.k("fairjob:{staged}:done")
    }
    /// Jids of kept jobs Redis has and that have not ended (SET): added by
    /// the relay after its push, removed with the end's record. A kept job
    /// PostgreSQL thinks published but missing here was lost by Redis.
    pub fn relay_live(&self) -> String {
        self.k("fairjob:{staged}:live")
    }
    /// A batch's hash (`Batch`; its other keys are this and a suffix:
    /// `:pending`, `:jids`, `:failed`, `:staged`, `:payloads`, all tagged
    /// with the bid for Redis Cluster; see `scripts/lib/batch.lua`).
    pub fn batch(&self, bid: &str) -> String {
        self.k(&format!("fairjob:{{b:{}}}", encode(bid)))
    }
    /// Batches by creation time (ZSET bid → epoch seconds), for listing;
    /// an entry whose batch expired is dropped when it is next read.
    pub fn batches(&self) -> String {
        self.k("fairjob:batches")
    }
    /// Batches flipped open whose staged members are not all pushed yet
    /// (ZSET bid → flip time): a worker's sweep pushes what a committer that
    /// died left.
    pub fn batches_releasing(&self) -> String {
        self.k("fairjob:batches:releasing")
    }
    /// The prefix of the held workflow steps' index (`<prefix><encoded
    /// jid>` → the step's bid, a STRING): written when a step is staged
    /// held, deleted when it is released or cancelled, so explain finds a
    /// step that is in no queue. The batch's hash keeps the prefix (`ix`),
    /// as it keeps its callbacks' queue keys; `scripts/lib/batch.lua` adds
    /// the jid with the same encoding ([`encode`]).
    pub fn workflow_held_prefix(&self) -> String {
        self.k("fairjob:wfheld:")
    }
    /// Held workflow step `jid`'s index key (see [`Keys::workflow_held_prefix`]).
    pub fn workflow_held(&self, jid: &str) -> String {
        format!("{}{}", self.workflow_held_prefix(), encode(jid))
    }
    /// The reaper's lock (one reaper pass per interval across the fleet).
    pub fn reaper_lock(&self) -> String {
        self.k("fairjob:reaper-lock")
    }
    /// The metrics sampler's lease (one process at a time sets the gauges
    /// read from Redis).
    pub fn metrics_sampler(&self) -> String {
        self.k("fairjob:metrics-sampler")
    }
    /// A fairjob counter (`fenced`, `recovered`, `interrupted`, `rerouted`…).
    pub fn stat(&self, name: &str) -> String {
        self.k(&format!("fairjob:stat:{name}"))
    }
    /// Where the reaper's bookkeeping checks resume (HASH: what → scan cursor).
    pub fn reconcile_cursors(&self) -> String {
        self.k("fairjob:reconcile")
    }
    /// Sharded queues announced by workers and clients.
    pub fn sharded_queues(&self) -> String {
        self.k("fairjob:sharded-queues")
    }

    /// Paused queues (SET of queue names): workers do not fetch them.
    pub fn paused(&self) -> String {
        self.k("fairjob:paused")
    }
    /// The job classes workers run, with their options (HASH class → JSON),
    /// written when a worker starts, for the dashboard and the CLI.
    pub fn classes(&self) -> String {
        self.k("fairjob:classes")
    }
    /// One queue's wait statistics of epoch minute `minute` (HASH
    /// `<encoded tenant>|<n, s or b<bucket>>` → count; `*|…` for the whole
    /// queue), flushed by workers with their heartbeat; expires after
    /// [`super::stats::WAIT_KEEP_SECS`].
    pub fn waits(&self, queue: &str, minute: u64) -> String {
        self.k(&format!("fairjob:waits:{}:{minute}", encode(queue)))
    }
    /// One queue's longest wait per tenant in epoch minute `minute` (ZSET
    /// encoded tenant → ms), for "who waits longest" without a walk.
    pub fn wait_top(&self, queue: &str, minute: u64) -> String {
        self.k(&format!("fairjob:waittop:{}:{minute}", encode(queue)))
    }
    /// Jobs finished per queue in epoch minute `minute` (HASH
    /// `<encoded queue>|p` processed, `|f` failed).
    pub fn queue_counts(&self, minute: u64) -> String {
        self.k(&format!("fairjob:qcount:{minute}"))
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
            releasing: format!("{tag}:releasing"),
        }
    }

    /// Every rate limiter key seen (encoded full keys), for the Limits page.
    pub fn rates_registry(&self) -> String {
        self.k("fairjob:rates")
    }
    /// The release schedule of rate limiters with waiting jobs: encoded full
    /// key → when it next has room (µs, Redis's clock).
    pub fn rates_due(&self) -> String {
        self.k("fairjob:rates:due")
    }
    /// The keys of one rate limiter (`full_key` is `<Class>:<key>` or `group:<group>:<key>`).
    pub fn rate(&self, full_key: &str) -> RateKeys {
        let tag = self.k(&format!("fairjob:{{rk:{}}}", encode(full_key)));
        RateKeys {
            tat: format!("{tag}:tat"),
            conf: format!("{tag}:conf"),
            waiters: format!("{tag}:waiters"),
            reserved: format!("{tag}:reserved"),
            next: format!("{tag}:next"),
            releasing: format!("{tag}:releasing"),
        }
    }

    /// The keys of one tenant-sharded queue. Their hash tag is the inbox key
    /// itself (`{<ns>queue:<name>}`), so all of them hash to the inbox's slot;
    /// [`Keys::check_shardable`] refuses the rare names (braces) where it can't.
    pub fn shard(&self, queue: &str) -> ShardKeys {
        let inbox = self.queue(queue);
        let tag = self.k(&format!("fairjob:{{{inbox}}}"));
        ShardKeys {
            ready: format!("{tag}:ready"),
            rmember: format!("{tag}:rmember"),
            seq: format!("{tag}:seq"),
            running: format!("{tag}:running"),
            policy: format!("{tag}:policy"),
            tenants: format!("{tag}:tenants"),
            floorq: format!("{tag}:floorq"),
            lastpass: format!("{tag}:lastpass"),
            vt: format!("{tag}:vt"),
            ring: format!("{tag}:ring"),
            limits: format!("{tag}:limits"),
            rwait: format!("{tag}:rwait"),
            rstate: format!("{tag}:rstate"),
            shard_prefix: format!("{tag}:shard:"),
            inflight_prefix: format!("{tag}:inflight:"),
            served_prefix: format!("{tag}:served:"),
            wake: format!("{tag}:wake"),
            fetchers: format!("{tag}:fetchers"),
            runs: format!("{tag}:runs"),
            waits: format!("{tag}:waits"),
            slot_waits: format!("{tag}:slotwaits"),
            yields: format!("{tag}:yields"),
            decide: format!("{tag}:decide"),
            inbox,
        }
    }

    /// The prefix of a unique job's lock in `queue`'s cluster slot (the same
    /// hash tag as the queue's shard keys and its inbox): the lock is
    /// `<prefix><digest>` (HASH; see `scripts/lib/unique.lua`).
    pub fn unique_prefix(&self, queue: &str) -> String {
        let inbox = self.queue(queue);
        self.k(&format!("fairjob:{{{inbox}}}:unique:"))
    }

    /// Claimed jobs already pushed to `queue` by the two-step push of a
    /// claim (ZSET of once members scored by push time, ms; in the queue's
    /// cluster slot): a repeat of the push finds its member and pushes nothing.
    pub fn pushed(&self, queue: &str) -> String {
        let inbox = self.queue(queue);
        self.k(&format!("fairjob:{{{inbox}}}:pushed"))
    }

    /// The last unique jobs refused as duplicates (LIST of JSON, newest
    /// first, capped), for explain.
    pub fn unique_rejected(&self) -> String {
        self.k("fairjob:unique-rejected")
    }

    /// The `SCAN MATCH` pattern of every unique lock in the namespace.
    pub fn unique_pattern(&self) -> String {
        format!("{}fairjob:{{*}}:unique:*", glob_escape(&self.ns))
    }

    /// Whether `queue` can be sharded in this namespace: every key of the
    /// sharded queue must hash to the same Redis Cluster slot as its inbox
    /// `queue:<name>`. True unless the queue name or the namespace holds braces
    /// that are not a whole hash tag (`{app}:` as a namespace is fine).
    pub fn check_shardable(&self, queue: &str) -> std::result::Result<(), String> {
        let sk = self.shard(queue);
        let want = hash_part(&sk.inbox);
        let probe = [
            sk.ready.as_str(),
            &sk.tenant_list(Some("t")),
            &sk.served(0),
            &sk.inflight("w"),
            &sk.wake,
            &sk.fetchers,
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

/// Escapes glob metacharacters (`*`, `?`, `[`, `]`, `\\`) for `SCAN MATCH`.
pub fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
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
    /// Redis Cluster mode: released waiters on their way to their queues
    /// (ZSET entry → delivery lease expiry, ms).
    pub releasing: String,
}

/// The keys of one rate limiter; they share one hash tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateKeys {
    /// The theoretical arrival time (STRING, µs; expires once past).
    pub tat: String,
    /// The declared rate and the runtime overrides (HASH).
    pub conf: String,
    /// The FIFO list of parked jobs.
    pub waiters: String,
    /// Released waiters whose start is already counted (ZSET jid → expiry µs).
    pub reserved: String,
    /// Redis Cluster mode: the key's own release schedule (ZSET of one
    /// member, the encoded key → next release µs), which the scripts keep in
    /// the limiter's slot; the shared schedule `rates:due` mirrors it.
    pub next: String,
    /// Redis Cluster mode: released waiters being delivered to their queues
    /// (ZSET entry → lease expiry ms), delivered again if their deliverer died.
    pub releasing: String,
}

impl RateKeys {
    /// The four keys, in the scripts' order.
    pub fn all(&self) -> [&str; 4] {
        [&self.tat, &self.conf, &self.waiters, &self.reserved]
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
        assert_eq!(s.ready, "fairjob:{queue:conversions}:ready");
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
            let served = s.served(29_000_000);
            for key in s.state().into_iter().chain([s.wake.as_str(), &s.fetchers, &served,
                        &s.runs, &s.waits, &s.slot_waits, &s.yields, &s.decide,
                        &s.tenant_list(Some(&t)), &s.tenant_list(None), &s.inflight(&w)]) {
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
