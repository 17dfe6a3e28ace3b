//! The rules in Rust and their Lua twins, run side by side. One case per
//! rule of `fairjob::policy` (its module doc has the table): `gcra` (the rate
//! rule on a table of inputs), `reroute` and `unique` (random pushes through
//! the testing fake and through the scripts), and `shards`, `shards_cluster`
//! and `shards_fake` for the dispatch order, slot limits and rate limiters:
//! random sequences
//! of operations go through the pure rules of `fairjob::policy` (the model)
//! and through the real scripts on a real redis-server (a single node, and a
//! Redis Cluster in the same run), and after every step the two must agree on
//! everything the rules decide: which jobs a fetch dispatches and in which
//! order, the whole state of the sharded queue (the dispatch order with its
//! passes and members, vt, floors, the passes kept, running and pending jobs,
//! the tenants waiting for their rate and their pace), and the fenced
//! completions. This is River's driver test (`riverdrivertest.Exercise`)
//! applied to the fairness rules: the model is what `lib/dispatch/*.lua`
//! must do, the scripts' per-call cache (`lib/cache.lua`) must change nothing
//! the model can see, and a planted change in the Lua fails here (see the
//! note in `fairjob/src/policy/mod.rs`).
//!
//! The scripts read their time through one include; here it is frozen
//! ([`ScriptClock`]) so both sides decide at the same instant, and moved by
//! the sequences' clock steps. The model keeps jobs by jid; Redis's payloads
//! are read back to their jids.
//!
//! A fixed number of cases ([`CASES`]) from a fixed seed ([`SEED`]), so the
//! file runs in about a minute in a debug build and always checks the same
//! sequences; a failure prints the shrunk sequence.

#[path = "twins/gcra.rs"]
mod gcra;
#[path = "twins/reroute.rs"]
mod reroute;
#[path = "twins/unique.rs"]
mod unique;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use fairjob::broker::{
    Acquired, Finish, FinishReply, Holds, RATE_RESERVATION_TTL, RELEASE_MAX, RESERVATION_TTL,
    RateAcquired, RateRequest, RedisBroker, ShardKeys, SlotHold, SlotRequest, Token, keys,
};
use fairjob::policy::dispatch::{
    Call, Pace, Setting, ShardPolicy, ShardRate, ShardState, ZSet, inbox_tenant,
    reserve::{INBOX_MOVE, RATE_WAKE},
};
use fairjob::policy::gcra::{Admit, Declared, Limiter};
use fairjob::policy::slots::{self, SlotState};
use fairjob::testing::{Fake, RedisCluster, RedisServer, ScriptClock};
use fairjob::{Client, Payload, PushJob};
use fairjob_tests::namespace;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use serde_json::value::RawValue;

/// Random sequences per topology (`FAIRJOB_TWINS_CASES` asks for more).
const CASES: u32 = 64;
/// The sequences are drawn from a fixed seed, so every run checks the same
/// ones and the coverage the test asserts never depends on luck
/// (`FAIRJOB_TWINS_SEED` draws others).
const SEED: u64 = 0x7a17_f00d;
/// Operations per sequence, at most.
const MAX_OPS: usize = 80;

const Q: &str = "twins";
/// Tenants, as people name them (odd characters on purpose).
const TENANTS: [&str; 6] = ["a", "b:c", "{x}", "two words", "日本", "<script>"];
/// The worker identities that fetch.
const WORKERS: [&str; 2] = ["host:1:w0", "host:2:w1"];
/// The frozen clock's start (µs).
const T0: u64 = 1_800_000_000_000_000;
/// Slot limits: full key and declared limit.
const SLOTS: [(&str, u32); 2] = [("Twin:one", 1), ("group:twins:two", 2)];
/// Rate limits: full key and declaration (a few starts in 10 s).
const RATES: [(&str, Declared); 2] = [
    (
        "Twin:r1",
        Declared {
            limit: 1,
            per_us: 10_000_000,
            burst: 0,
        },
    ),
    (
        "group:twins:r2",
        Declared {
            limit: 2,
            per_us: 10_000_000,
            burst: 1,
        },
    ),
];

#[derive(Debug, Clone)]
enum Op {
    /// `n` jobs of a tenant, pushed by a client (`push.lua`).
    Push { tenant: usize, n: u8 },
    /// `n` jobs put in the inbox by a producer that knows nothing of shards
    /// (a tenant in the payload, a numeric one, or none).
    Inbox {
        tenant: Option<usize>,
        numeric: bool,
        n: u8,
    },
    /// A worker fetches up to `n` jobs (`shard_fetch.lua`), first acking its
    /// first `acks` running jobs in the same call (a fetch carrying the acks
    /// of the jobs that ended since the last one).
    Fetch { worker: usize, n: u8, acks: u8 },
    /// One running job ends (`shard_finish.lua`): acked, retried, or put
    /// back (front: unfinished at shutdown; back: it yielded).
    End { pick: usize, how: End },
    /// A worker's batched acks of its first `k` running jobs (`shard_ack_many.lua`).
    AckMany { worker: usize, k: u8 },
    /// A worker dies: a reaper takes its jobs back (front), and its own late
    /// completions are fenced.
    Die { worker: usize },
    /// A change of a tenant's (or the default) settings (`shard_policy.lua`).
    Policy {
        tenant: Option<usize>,
        change: ShardPolicy,
    },
    /// Fair yield's share hold on a tenant (`h:<tenant>`), for a while.
    Hold {
        tenant: usize,
        limit: u8,
        for_ms: u32,
    },
    /// A running job asks a slot of a limit (`slot_acquire.lua`): it takes
    /// one, or waits in the limit's list (out of its tenant's running count).
    Slot { pick: usize, key: usize },
    /// A running job passes a rate limiter (`rate_acquire.lua`), or waits in its list.
    Rate { pick: usize, key: usize },
    /// A slot limit changes at runtime (`slot_set.lua`; `None`: back to the declared).
    SetSlot { key: usize, limit: Option<u8> },
    /// A rate limiter's runtime settings change (`rate_set.lua`).
    SetRate {
        key: usize,
        limit: Setting<u8>,
        per_s: Setting<u16>,
        burst: Setting<u8>,
    },
    /// A releaser releases a rate limiter's waiters (`rate_release.lua`),
    /// at the time the release schedule says (the clock moves there).
    Release { key: usize },
    /// The clock moves.
    Advance { ms: u32 },
}

#[derive(Debug, Clone, Copy)]
enum End {
    Ack,
    Retry,
    Front,
    Back,
}

fn setting<T: std::fmt::Debug + Clone + 'static>(
    value: impl Strategy<Value = T> + 'static,
) -> impl Strategy<Value = Setting<T>> {
    prop_oneof![
        5 => Just(Setting::Keep),
        2 => Just(Setting::Clear),
        3 => value.prop_map(Setting::Set),
    ]
}

fn change() -> impl Strategy<Value = ShardPolicy> {
    (
        setting(prop_oneof![Just(1.0), Just(2.0), Just(3.0), Just(0.5)]),
        setting(1u32..4),
        setting(0u32..4),
        setting(
            (1u32..5, prop_oneof![Just(200u64), Just(1000), Just(3000)]).prop_map(
                |(limit, per_ms)| ShardRate {
                    limit,
                    per_us: per_ms * 1000,
                },
            ),
        ),
        setting(1u32..6),
    )
        .prop_map(|(weight, floor, cap, rate, burst)| ShardPolicy {
            weight,
            floor,
            cap,
            rate,
            burst,
        })
}

fn op() -> impl Strategy<Value = Op> {
    let tenant = 0..TENANTS.len();
    prop_oneof![
        6 => (tenant.clone(), 1u8..6).prop_map(|(tenant, n)| Op::Push { tenant, n }),
        1 => (proptest::option::of(tenant.clone()), any::<bool>(), 1u8..4)
            .prop_map(|(tenant, numeric, n)| Op::Inbox { tenant, numeric, n }),
        6 => (0..WORKERS.len(), 1u8..6, prop_oneof![Just(0u8), 1u8..4])
            .prop_map(|(worker, n, acks)| Op::Fetch { worker, n, acks }),
        5 => (any::<usize>(), prop_oneof![
                6 => Just(End::Ack), 1 => Just(End::Retry), 1 => Just(End::Front), 1 => Just(End::Back)
            ]).prop_map(|(pick, how)| Op::End { pick, how }),
        2 => (0..WORKERS.len(), 1u8..5).prop_map(|(worker, k)| Op::AckMany { worker, k }),
        2 => (0..WORKERS.len()).prop_map(|worker| Op::Die { worker }),
        5 => (proptest::option::weighted(0.7, tenant.clone()), change())
            .prop_map(|(tenant, change)| Op::Policy { tenant, change }),
        1 => (tenant, 0u8..3, 1u32..3000).prop_map(|(tenant, limit, for_ms)| Op::Hold { tenant, limit, for_ms }),
        3 => prop_oneof![4 => Just(0u32), 4 => 1u32..400, 4 => 400u32..4000, 3 => 5_000u32..60_000]
            .prop_map(|ms| Op::Advance { ms }),
        3 => (any::<usize>(), 0..SLOTS.len()).prop_map(|(pick, key)| Op::Slot { pick, key }),
        3 => (any::<usize>(), 0..RATES.len()).prop_map(|(pick, key)| Op::Rate { pick, key }),
        1 => (0..SLOTS.len(), proptest::option::of(0u8..4)).prop_map(|(key, limit)| Op::SetSlot { key, limit }),
        1 => (0..RATES.len(), setting(0u8..4), setting(prop_oneof![Just(60u16), Just(600)]), setting(0u8..3))
            .prop_map(|(key, limit, per_s, burst)| Op::SetRate { key, limit, per_s, burst }),
        3 => (0..RATES.len()).prop_map(|key| Op::Release { key }),
    ]
}

/// A job a worker holds.
#[derive(Debug, Clone)]
struct Held {
    worker: usize,
    token: Token,
    payload: String,
    jid: String,
    /// A reaper took it back from its dead worker: its end is fenced.
    stale: bool,
    /// The slot it holds.
    slot: Option<(usize, SlotHold)>,
}

/// One sequence's two worlds: the scripts on Redis and the model.
struct Twin {
    /// `Some`: the testing fake stands where Redis stands.
    fake: Option<Fake>,
    client: Client,
    sk: ShardKeys,
    clock_key: String,
    now: u64,
    model: ShardState<String>,
    inbox: VecDeque<String>,
    /// The inbox entries' tenants and sides, by jid (`inbox_tenant`).
    inbox_tenants: BTreeMap<String, (String, bool)>,
    held: Vec<Held>,
    slots: Vec<SlotState>,
    limiters: Vec<Limiter>,
    /// Every encoded tenant a list may exist for.
    codes: BTreeSet<String>,
    seq: u64,
    jobs: u64,
    log: Vec<String>,
    /// What the sequence made happen (see [`COVERAGE`]).
    seen: BTreeSet<&'static str>,
}

/// What the sequences of one test made happen, so the test fails when its
/// generator stops reaching a rule (a comparison of two idle states proves
/// nothing).
static COVERAGE: std::sync::Mutex<BTreeMap<&'static str, usize>> =
    std::sync::Mutex::new(BTreeMap::new());

/// Every event the sequences of a topology must have made happen.
const MUST_SEE: &[&str] = &[
    "dispatched",
    "dispatched from the inbox",
    "a tenant under its floor",
    "a tenant waiting for its rate",
    "a pass kept out of the order",
    "a share hold in force",
    "a tenant at its cap with pending jobs",
    "a tenant running above its cap (its burst)",
    "a fenced end",
    "a fetch carrying acks",
    "a fenced ack a fetch carried",
    "a slot taken",
    "a job waiting for a slot",
    "a slot waiter released",
    "a rate limiter passed a job",
    "a job waiting for its rate limiter",
    "a rate waiter released",
];

fn broker(t: &Twin) -> &RedisBroker {
    t.client.broker()
}

async fn query<T: redis::FromRedisValue>(t: &Twin, cmd: &redis::Cmd) -> T {
    fairjob_tests::query(broker(t), cmd)
        .await
        .expect("a Redis command")
}

fn jid_of(payload: &[u8]) -> String {
    let v: serde_json::Value = serde_json::from_slice(payload).expect("a JSON payload");
    v["jid"].as_str().expect("a jid").to_owned()
}

impl Twin {
    async fn new(url: Option<&str>) -> Twin {
        let ns = namespace();
        let (fake, client) = match url {
            Some(url) => {
                let client = Client::builder(url)
                    .namespace(&ns)
                    .sharded_queue(Q)
                    .build()
                    .await
                    .expect("a client");
                (None, client)
            }
            None => {
                let fake = Fake::builder()
                    .client(Client::builder("redis://unused.invalid/").sharded_queue(Q))
                    .build()
                    .expect("a fake");
                let client = fake.client();
                (Some(fake), client)
            }
        };
        let sk = client.broker().keys().shard(Q);
        let clock_key = ScriptClock::key_for(&sk.inbox);
        let mut codes: BTreeSet<String> = TENANTS.iter().map(|t| keys::encode(t)).collect();
        codes.insert(String::new());
        codes.insert("7".to_owned());
        let t = Twin {
            fake,
            client,
            sk,
            clock_key,
            now: T0,
            model: ShardState::default(),
            inbox: VecDeque::new(),
            inbox_tenants: BTreeMap::new(),
            held: Vec::new(),
            slots: vec![SlotState::default(); SLOTS.len()],
            limiters: vec![Limiter::default(); RATES.len()],
            codes,
            seq: 0,
            jobs: 0,
            log: Vec::new(),
            seen: BTreeSet::new(),
        };
        t.set_clock().await;
        t
    }

    /// Sets the frozen clock of every hash tag the sequence's scripts use.
    async fn set_clock(&self) {
        if let Some(fake) = &self.fake {
            fake.freeze_clock(std::time::UNIX_EPOCH + std::time::Duration::from_micros(self.now));
            return;
        }
        let keys = broker(self).keys();
        let mut clocks = vec![self.clock_key.clone()];
        clocks.extend(
            SLOTS
                .iter()
                .map(|(k, _)| ScriptClock::key_for(&keys.limit(k).limit)),
        );
        clocks.extend(
            RATES
                .iter()
                .map(|(k, _)| ScriptClock::key_for(&keys.rate(k).tat)),
        );
        for c in clocks {
            let _: () = query(self, redis::cmd("SET").arg(c).arg(self.now.to_string())).await;
        }
    }

    /// Released waiters' jobs go to the front of the inbox, in order
    /// (each `RPUSH`ed: the last released is the next out).
    fn released(&mut self, entries: Vec<Vec<u8>>) {
        for e in entries {
            let f = slots::fields(&e);
            let payload = String::from_utf8(f[3].clone()).unwrap();
            let jid = String::from_utf8(f[0].clone()).unwrap();
            self.inbox_tenants
                .insert(jid.clone(), inbox_tenant(&payload));
            self.inbox.push_front(jid);
        }
    }

    /// A held job's parked payload (as the worker writes it) and waiter entry.
    fn parked(h: &Held, reason: &str) -> (String, Vec<u8>) {
        let mut p = fairjob::Payload::parse(h.payload.clone().into_bytes()).unwrap();
        p.set(fairjob::wire::fields::PARKED, reason);
        p.set(fairjob::wire::fields::SLOT_RELEASED, true);
        let parked = p.to_json();
        let entry = slots::entry(&h.jid, Q, &keys::encode(Q), &parked);
        (parked, entry)
    }

    /// Takes a worker's first `k` running jobs holding no slot (a worker
    /// batches the acks of those), in the order it holds them.
    fn pick_acks(&mut self, worker: usize, k: u8) -> Vec<Held> {
        let mine: Vec<usize> = (0..self.held.len())
            .filter(|i| self.held[*i].worker == worker && self.held[*i].slot.is_none())
            .take(usize::from(k))
            .collect();
        mine.iter()
            .rev()
            .map(|i| self.held.remove(*i))
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect()
    }

    /// Checks the acks of `picked` that Redis wrote: exactly the stale ones
    /// (recovered from their worker) were `fenced`, noted as `seen_fenced`;
    /// the others end in the model too.
    fn acked(
        &mut self,
        picked: &[Held],
        fenced: &[bool],
        seen_fenced: &'static str,
    ) -> Result<(), TestCaseError> {
        let stale: Vec<bool> = picked.iter().map(|h| h.stale).collect();
        if stale.contains(&true) {
            self.seen.insert(seen_fenced);
        }
        prop_assert_eq!(fenced, &stale[..], "the fenced acks");
        let tenants: Vec<String> = picked
            .iter()
            .filter(|h| !h.stale)
            .map(|h| h.token.tenant.clone().unwrap_or_default())
            .collect();
        self.call().ack(tenants.iter().map(String::as_str));
        Ok(())
    }

    fn call(&mut self) -> Call<'_, String> {
        Call::new(&mut self.model, self.now)
    }

    fn new_payload(&mut self, tenant: serde_json::Value) -> (String, String) {
        self.jobs += 1;
        let mut p = Payload::new(
            "TwinJob",
            RawValue::from_string(format!("[{}]", self.jobs)).unwrap(),
            Q,
        );
        if !tenant.is_null() {
            p.set(fairjob::wire::fields::FAIR_TENANT, tenant);
        }
        let jid = p.jid();
        (p.to_json(), jid)
    }

    async fn apply(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match op {
            Op::Push { tenant, n } => {
                let name = TENANTS[*tenant];
                let mut jobs = Vec::new();
                let mut jids = Vec::new();
                for _ in 0..*n {
                    self.jobs += 1;
                    let mut p = Payload::new(
                        "TwinJob",
                        RawValue::from_string(format!("[{}]", self.jobs)).unwrap(),
                        Q,
                    );
                    p.set(fairjob::wire::fields::FAIR_TENANT, name);
                    jids.push(p.jid());
                    jobs.push(PushJob::new(p));
                }
                self.client.push_bulk(jobs).await.expect("push");
                let code = keys::encode(name);
                let mut call = self.call();
                for jid in jids {
                    call.push(&code, jid, false);
                }
                call.end();
            }
            Op::Inbox { .. } | Op::Hold { .. } if self.fake.is_some() => {
                // Redis only: a producer that knows nothing of shards writes
                // the inbox, fair yield's tick writes a hold.
            }
            Op::Inbox { tenant, numeric, n } => {
                for _ in 0..*n {
                    let value = match (tenant, numeric) {
                        (None, _) => serde_json::Value::Null,
                        (Some(_), true) => serde_json::json!(7),
                        (Some(t), false) => serde_json::json!(TENANTS[*t]),
                    };
                    let (payload, jid) = self.new_payload(value);
                    let _: i64 =
                        query(self, redis::cmd("LPUSH").arg(&self.sk.inbox).arg(&payload)).await;
                    self.inbox_tenants
                        .insert(jid.clone(), inbox_tenant(&payload));
                    self.inbox.push_back(jid);
                }
            }
            Op::Fetch { worker, n, acks } => {
                let queue = broker(self).shard_queue(Q, WORKERS[*worker]);
                let picked = self.pick_acks(*worker, *acks);
                let pairs: Vec<(&str, &str)> = picked
                    .iter()
                    .map(|h| {
                        (
                            h.token.raw.as_str(),
                            h.token.tenant.as_deref().unwrap_or_default(),
                        )
                    })
                    .collect();
                let got = broker(self)
                    .fetch_shard_acking(&queue, usize::from(*n), self.seq, &pairs)
                    .await
                    .expect("fetch");
                if !picked.is_empty() {
                    self.seen.insert("a fetch carrying acks");
                    self.acked(&picked, &got.fenced, "a fenced ack a fetch carried")?;
                }
                let (got, hint) = (got.jobs, got.rate_due);
                self.seq += u64::from(*n);
                let mut redis_side = Vec::new();
                for r in &got {
                    let token = Token::parse(&r.token).expect("a token");
                    let jid = jid_of(&r.raw);
                    redis_side.push((token.tenant.clone().unwrap_or_default(), jid.clone()));
                    self.held.push(Held {
                        worker: *worker,
                        token,
                        payload: String::from_utf8(r.raw.clone()).unwrap(),
                        jid,
                        stale: false,
                        slot: None,
                    });
                }
                let mut inbox = std::mem::take(&mut self.inbox);
                let tenants = self.inbox_tenants.clone();
                let fetched = self.call().fetch(
                    usize::from(*n),
                    &mut inbox,
                    INBOX_MOVE,
                    |jid| tenants[jid].clone(),
                    RATE_WAKE,
                );
                self.inbox = inbox;
                prop_assert_eq!(&redis_side, &fetched.jobs, "the jobs dispatched, in order");
                if !fetched.jobs.is_empty() {
                    self.seen.insert("dispatched");
                }
                if fetched
                    .jobs
                    .iter()
                    .any(|(_, j)| self.inbox_tenants.contains_key(j))
                {
                    self.seen.insert("dispatched from the inbox");
                }
                let hint = hint.map(|d| d.as_micros() as u64);
                prop_assert_eq!(
                    hint,
                    fetched.next_rate_in,
                    "the wait until a rate allows a start"
                );
            }
            Op::End { pick, how } => {
                if self.held.is_empty() {
                    return Ok(());
                }
                let h = self.held.remove(pick % self.held.len());
                let finish = match how {
                    End::Ack => Finish::Ack,
                    End::Retry => Finish::Retry {
                        payload: &h.payload,
                        delay: std::time::Duration::from_secs(30),
                    },
                    End::Front => Finish::Front {
                        payload: &h.payload,
                    },
                    End::Back => Finish::Back {
                        payload: &h.payload,
                    },
                };
                let holds = Holds {
                    slot: h.slot.as_ref().map(|(_, hold)| hold),
                    ..Holds::default()
                };
                let reply = broker(self)
                    .finish(WORKERS[h.worker], &h.token, finish, 0, holds)
                    .await
                    .expect("finish");
                if h.stale {
                    prop_assert_eq!(
                        reply,
                        FinishReply::Fenced,
                        "a recovered job's end is fenced"
                    );
                    return Ok(());
                }
                prop_assert_eq!(reply, FinishReply::Done);
                let back = match how {
                    End::Ack | End::Retry => None,
                    End::Front => Some((h.jid.clone(), true)),
                    End::Back => Some((h.jid.clone(), false)),
                };
                let t = h.token.tenant.clone().unwrap_or_default();
                self.call().finish(&t, back);
                self.release_slot(&h);
            }
            Op::AckMany { worker, k } => {
                let picked = self.pick_acks(*worker, *k);
                if picked.is_empty() {
                    return Ok(());
                }
                let record = broker(self)
                    .shard_ack_record(WORKERS[*worker], &picked[0].token)
                    .expect("a sharded job's record");
                let acks: Vec<(&str, &str, Option<&str>)> = picked
                    .iter()
                    .map(|h| {
                        (
                            h.token.raw.as_str(),
                            h.token.tenant.as_deref().unwrap_or_default(),
                            None,
                        )
                    })
                    .collect();
                let fenced = broker(self).ack_many(&record, &acks).await.expect("acks");
                self.acked(&picked, &fenced, "a fenced end")?;
            }
            Op::Die { worker } => {
                let victims: Vec<usize> = (0..self.held.len())
                    .filter(|i| self.held[*i].worker == *worker && !self.held[*i].stale)
                    .collect();
                for i in victims {
                    let h = self.held[i].clone();
                    let holds = Holds {
                        slot: h.slot.as_ref().map(|(_, hold)| hold),
                        ..Holds::default()
                    };
                    let reply = broker(self)
                        .recover(
                            WORKERS[*worker],
                            &h.token,
                            Finish::Front {
                                payload: &h.payload,
                            },
                            0,
                            holds,
                        )
                        .await
                        .expect("recover");
                    prop_assert_eq!(reply, FinishReply::Done);
                    let t = h.token.tenant.clone().unwrap_or_default();
                    self.call().finish(&t, Some((h.jid.clone(), true)));
                    self.release_slot(&h);
                    self.held[i].stale = true;
                    self.held[i].slot = None;
                }
            }
            Op::Policy { tenant, change } => {
                let name = tenant.map(|t| TENANTS[t]);
                broker(self)
                    .set_shard_policy(Q, name, *change)
                    .await
                    .expect("a valid change");
                let field = name.map(keys::encode).unwrap_or_else(|| "*".to_owned());
                let recheck: Vec<String> = match name {
                    Some(_) => vec![field.clone()],
                    None => self.model.tenants.iter().cloned().collect(),
                };
                self.call()
                    .set_policy(&field, change, recheck.iter().map(String::as_str));
            }
            Op::Hold {
                tenant,
                limit,
                for_ms,
            } => {
                let code = keys::encode(TENANTS[*tenant]);
                let value = format!("{limit}|{}", self.now + u64::from(*for_ms) * 1000);
                let _: i64 = query(
                    self,
                    redis::cmd("HSET")
                        .arg(&self.sk.policy)
                        .arg(format!("h:{code}"))
                        .arg(&value),
                )
                .await;
                self.model.policy.insert(format!("h:{code}"), value);
            }
            Op::Slot { pick, key } => {
                let live: Vec<usize> = (0..self.held.len())
                    .filter(|i| !self.held[*i].stale && self.held[*i].slot.is_none())
                    .collect();
                if live.is_empty() {
                    return Ok(());
                }
                let i = live[pick % live.len()];
                let h = self.held[i].clone();
                let (full, default) = SLOTS[*key];
                let (parked, entry) = Self::parked(&h, "slot");
                let got = broker(self)
                    .slot_acquire(
                        WORKERS[h.worker],
                        &h.token,
                        SlotRequest {
                            full_key: full,
                            default_limit: default,
                            jid: &h.jid,
                            parked_payload: &parked,
                        },
                    )
                    .await
                    .expect("slot_acquire");
                let holder = format!("{}|{}", WORKERS[h.worker], h.token.raw);
                let now_ms = self.now / 1000;
                if self.slots[*key].try_take(f64::from(default), &holder, &h.jid, now_ms) {
                    let Acquired::Slot(hold) = got else {
                        return Err(TestCaseError::fail(format!(
                            "the model took a slot, Redis said {got:?}"
                        )));
                    };
                    self.held[i].slot = Some((*key, hold));
                    self.seen.insert("a slot taken");
                } else {
                    self.seen.insert("a job waiting for a slot");
                    prop_assert_eq!(&got, &Acquired::Parked, "no free slot: parked");
                    self.slots[*key].park(entry);
                    self.held.remove(i);
                    let t = h.token.tenant.clone().unwrap_or_default();
                    let mut call = self.call();
                    call.release(&t);
                    call.end();
                }
            }
            Op::Rate { pick, key } => {
                // As the worker does: a job passes its rate limiter before it
                // takes a slot.
                let live: Vec<usize> = (0..self.held.len())
                    .filter(|i| !self.held[*i].stale && self.held[*i].slot.is_none())
                    .collect();
                if live.is_empty() {
                    return Ok(());
                }
                let i = live[pick % live.len()];
                let h = self.held[i].clone();
                let (full, declared) = RATES[*key];
                let (parked, entry) = Self::parked(&h, "rate_limit");
                let got = broker(self)
                    .rate_acquire(
                        WORKERS[h.worker],
                        &h.token,
                        RateRequest {
                            full_key: full,
                            limit: declared.limit,
                            per_us: declared.per_us,
                            burst: declared.burst,
                            jid: &h.jid,
                            parked_payload: &parked,
                        },
                    )
                    .await
                    .expect("rate_acquire");
                match self.limiters[*key].acquire(declared, &h.jid, entry, self.now) {
                    Admit::Pass => {
                        self.seen.insert("a rate limiter passed a job");
                        prop_assert_eq!(got, RateAcquired::Pass)
                    }
                    Admit::Parked(at) => {
                        self.seen.insert("a job waiting for its rate limiter");
                        prop_assert_eq!(got, RateAcquired::Parked(at));
                        let h = self.held.remove(i);
                        let t = h.token.tenant.clone().unwrap_or_default();
                        let mut call = self.call();
                        call.release(&t);
                        call.end();
                    }
                }
            }
            Op::SetSlot { key, limit } => {
                let (full, default) = SLOTS[*key];
                broker(self)
                    .set_slot_limit(full, limit.map(u32::from), default)
                    .await
                    .expect("set_slot_limit");
                let out = self.slots[*key].set_limit(
                    limit.map(f64::from),
                    f64::from(default),
                    RESERVATION_TTL.as_millis() as u64,
                    self.now / 1000,
                );
                if !out.is_empty() {
                    self.seen.insert("a slot waiter released");
                }
                self.released(out);
            }
            Op::SetRate {
                key,
                limit,
                per_s,
                burst,
            } => {
                let full = RATES[*key].0;
                let widen = |v: Setting<u8>| match v {
                    Setting::Keep => Setting::Keep,
                    Setting::Clear => Setting::Clear,
                    Setting::Set(v) => Setting::Set(u32::from(v)),
                };
                let per_us = match per_s {
                    Setting::Keep => Setting::Keep,
                    Setting::Clear => Setting::Clear,
                    Setting::Set(s) => Setting::Set(u64::from(*s) * 1_000_000),
                };
                let waiting = broker(self)
                    .set_rate_limit(full, widen(*limit), per_us, widen(*burst))
                    .await
                    .expect("set_rate_limit");
                let model = self.limiters[*key].set(
                    &widen(*limit).stored(),
                    &per_us.stored(),
                    &widen(*burst).stored(),
                    self.now,
                );
                prop_assert_eq!(waiting, model as u64, "jobs waiting");
            }
            Op::Release { key } => {
                // A releaser wakes when the schedule says the key has room.
                if let Some(due) = self.limiters[*key].due.filter(|d| *d > self.now) {
                    self.now = due;
                    self.set_clock().await;
                }
                let member = keys::encode(RATES[*key].0);
                let got = broker(self)
                    .rate_release(&member)
                    .await
                    .expect("rate_release");
                let (out, next) = self.limiters[*key].release(
                    self.now,
                    RATE_RESERVATION_TTL.as_micros() as u64,
                    u64::from(RELEASE_MAX),
                );
                prop_assert_eq!(got.released, out.len() as u64, "waiters released");
                prop_assert_eq!(got.next, next, "the next release");
                prop_assert_eq!(got.now, self.now, "the scripts' clock");
                if !out.is_empty() {
                    self.seen.insert("a rate waiter released");
                }
                self.released(out);
            }
            Op::Advance { ms } => {
                self.now += u64::from(*ms) * 1000;
                self.set_clock().await;
            }
        }
        Ok(())
    }

    /// A job that held a slot gives it back (after its end), as the broker's
    /// `release_slot` does: waiters move into the freed slots.
    fn release_slot(&mut self, h: &Held) {
        if let Some((k, hold)) = &h.slot {
            let out = self.slots[*k].release(
                &hold.holder,
                f64::from(SLOTS[*k].1),
                RESERVATION_TTL.as_millis() as u64,
                self.now / 1000,
            );
            if !out.is_empty() {
                self.seen.insert("a slot waiter released");
            }
            self.released(out);
        }
    }

    /// Notes the states the model is in.
    fn note_state(&mut self) {
        let m = &self.model;
        if !m.floorq.is_empty() {
            self.seen.insert("a tenant under its floor");
        }
        if !m.rwait.is_empty() {
            self.seen.insert("a tenant waiting for its rate");
        }
        if !m.lastpass.is_empty() {
            self.seen.insert("a pass kept out of the order");
        }
        let now = self.now;
        for t in &m.tenants {
            let p = fairjob::policy::dispatch::settings_of(&m.policy, t, now);
            if p.hold.is_some() && m.running(t) > 0 {
                self.seen.insert("a share hold in force");
            }
            if p.cap.is_some_and(|c| m.running(t) as f64 >= c) && m.pending(t) > 0 {
                self.seen.insert("a tenant at its cap with pending jobs");
            }
            if p.cap.is_some_and(|c| m.running(t) as f64 > c) && p.burst.is_some() {
                self.seen
                    .insert("a tenant running above its cap (its burst)");
            }
        }
    }

    /// The slot limits and rate limiters as Redis holds them.
    async fn read_limits(&self) -> (Vec<SlotState>, Vec<Limiter>) {
        if let Some(fake) = &self.fake {
            return (
                SLOTS.iter().map(|(k, _)| fake.slot_limit(k)).collect(),
                RATES.iter().map(|(k, _)| fake.rate_limiter(k)).collect(),
            );
        }
        let keys = broker(self).keys();
        let mut slot_states = Vec::new();
        for (full, _) in SLOTS {
            let lk = keys.limit(full);
            let limit: Option<String> = query(self, redis::cmd("GET").arg(&lk.limit)).await;
            let holders: Vec<(String, u64)> = query(
                self,
                redis::cmd("ZRANGE")
                    .arg(&lk.holders)
                    .arg(0)
                    .arg(-1)
                    .arg("WITHSCORES"),
            )
            .await;
            let reserved: BTreeMap<String, u64> =
                query(self, redis::cmd("HGETALL").arg(&lk.reserved)).await;
            let waiters: Vec<Vec<u8>> =
                query(self, redis::cmd("LRANGE").arg(&lk.waiters).arg(0).arg(-1)).await;
            slot_states.push(SlotState {
                limit: limit.map(|l| l.parse().unwrap()),
                holders: holders.into_iter().collect(),
                reserved,
                waiters: waiters.into(),
            });
        }
        let mut limiters = Vec::new();
        for (full, _) in RATES {
            let rk = keys.rate(full);
            let tat: Option<String> = query(self, redis::cmd("GET").arg(&rk.tat)).await;
            let conf: BTreeMap<String, String> =
                query(self, redis::cmd("HGETALL").arg(&rk.conf)).await;
            let waiters: Vec<Vec<u8>> =
                query(self, redis::cmd("LRANGE").arg(&rk.waiters).arg(0).arg(-1)).await;
            let reserved: Vec<(String, f64)> = query(
                self,
                redis::cmd("ZRANGE")
                    .arg(&rk.reserved)
                    .arg(0)
                    .arg(-1)
                    .arg("WITHSCORES"),
            )
            .await;
            let due: Option<f64> = query(
                self,
                redis::cmd("ZSCORE")
                    .arg(keys.rates_due())
                    .arg(keys::encode(full)),
            )
            .await;
            limiters.push(Limiter {
                tat: tat.map(|t| t.parse::<f64>().unwrap() as u64),
                conf,
                waiters: waiters.into(),
                reserved: reserved.into_iter().map(|(j, v)| (j, v as u64)).collect(),
                due: due.map(|d| d as u64),
            });
        }
        (slot_states, limiters)
    }

    /// The queue's state as Redis holds it, jobs by jid.
    async fn read(&self) -> ShardState<String> {
        if let Some(fake) = &self.fake {
            return fake.shard(Q);
        }
        let sk = &self.sk;
        let zset = |v: Vec<(String, String)>| -> ZSet {
            v.into_iter()
                .map(|(m, s)| (m, s.parse::<f64>().expect("a score")))
                .collect()
        };
        let zrange = |key: &str| {
            redis::cmd("ZRANGE")
                .arg(key)
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES")
                .clone()
        };
        let mut ready: Vec<(String, String)> = query(self, &zrange(&sk.ready)).await;
        ready.retain(|(m, _)| m != fairjob::policy::dispatch::state::READY_MARK);
        let floorq: Vec<(String, String)> = query(self, &zrange(&sk.floorq)).await;
        let lastpass: Vec<(String, String)> = query(self, &zrange(&sk.lastpass)).await;
        let rwait: Vec<(String, String)> = query(self, &zrange(&sk.rwait)).await;
        let mut rmember: BTreeMap<String, String> =
            query(self, redis::cmd("HGETALL").arg(&sk.rmember)).await;
        rmember.remove(fairjob::policy::dispatch::state::RMEMBER_MARK);
        let seq: Option<u64> = query(self, redis::cmd("GET").arg(&sk.seq)).await;
        let mut running: BTreeMap<String, u64> =
            query(self, redis::cmd("HGETALL").arg(&sk.running)).await;
        running.remove(fairjob::policy::dispatch::state::RUNNING_MARK);
        let policy: BTreeMap<String, String> =
            query(self, redis::cmd("HGETALL").arg(&sk.policy)).await;
        let tenants: BTreeSet<String> = query(self, redis::cmd("SMEMBERS").arg(&sk.tenants)).await;
        let vt: Option<String> = query(self, redis::cmd("GET").arg(&sk.vt)).await;
        let rstate: BTreeMap<String, String> =
            query(self, redis::cmd("HGETALL").arg(&sk.rstate)).await;
        let mut pace: BTreeMap<String, Pace> = BTreeMap::new();
        for (field, v) in &rstate {
            let (kind, t) = field.split_at(2);
            let p = pace.entry(t.to_owned()).or_default();
            match kind {
                "t:" => p.tat = Some(v.parse::<f64>().expect("a tat") as u64),
                "s:" => {
                    p.starts = Some(
                        v.as_bytes()
                            .chunks(16)
                            .map(|c| std::str::from_utf8(c).unwrap().parse().unwrap())
                            .collect(),
                    )
                }
                "p:" => {
                    let m = rstate.get(&format!("m:{t}")).cloned().unwrap_or_default();
                    p.kept = Some((v.parse().expect("a pass"), m));
                }
                "m:" => {}
                _ => panic!("unknown rstate field {field}"),
            }
        }
        let mut lists = BTreeMap::new();
        for code in &self.codes {
            let raw: Vec<Vec<u8>> = query(
                self,
                redis::cmd("LRANGE")
                    .arg(format!("{}{code}", sk.shard_prefix))
                    .arg(0)
                    .arg(-1),
            )
            .await;
            if !raw.is_empty() {
                let jids: VecDeque<String> = raw.iter().rev().map(|p| jid_of(p)).collect();
                lists.insert(code.clone(), jids);
            }
        }
        ShardState {
            ready: zset(ready),
            rmember,
            seq: seq.unwrap_or(0),
            running,
            policy,
            tenants,
            floorq: zset(floorq),
            lastpass: zset(lastpass),
            vt: vt.map_or(0.0, |v| v.parse().expect("vt")),
            rwait: zset(rwait),
            pace,
            lists,
        }
    }

    async fn compare(&self) -> Result<(), TestCaseError> {
        let redis_side = self.read().await;
        if redis_side != self.model {
            return Err(TestCaseError::fail(format!(
                "the scripts and the model disagree\n{}\nafter:\n  {}",
                diff(&redis_side, &self.model),
                self.log.join("\n  ")
            )));
        }
        let (slot_states, limiters) = self.read_limits().await;
        if slot_states != self.slots || limiters != self.limiters {
            return Err(TestCaseError::fail(format!(
                "the limits disagree\n  redis slots: {slot_states:?}\n  model slots: {:?}\n  redis rates: {limiters:?}\n  model rates: {:?}\nafter:\n  {}",
                self.slots,
                self.limiters,
                self.log.join("\n  ")
            )));
        }
        Ok(())
    }
}

/// The fields of the two states that differ.
fn diff(redis_side: &ShardState<String>, model: &ShardState<String>) -> String {
    let mut out = Vec::new();
    macro_rules! field {
        ($f:ident) => {
            if redis_side.$f != model.$f {
                out.push(format!(
                    "{}:\n    redis: {:?}\n    model: {:?}",
                    stringify!($f),
                    redis_side.$f,
                    model.$f
                ));
            }
        };
    }
    field!(ready);
    field!(rmember);
    field!(seq);
    field!(running);
    field!(policy);
    field!(tenants);
    field!(floorq);
    field!(lastpass);
    field!(vt);
    field!(rwait);
    field!(pace);
    field!(lists);
    out.join("\n")
}

async fn check(url: Option<String>, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut twin = Twin::new(url.as_deref()).await;
    for op in &ops {
        twin.log.push(format!("{op:?}"));
        twin.apply(op).await?;
        twin.compare().await?;
        twin.note_state();
    }
    let mut coverage = COVERAGE.lock().unwrap();
    for e in &twin.seen {
        *coverage.entry(e).or_default() += 1;
    }
    Ok(())
}

fn run(url: Option<String>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let cases = std::env::var("FAIRJOB_TWINS_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CASES);
    let seed: u64 = std::env::var("FAIRJOB_TWINS_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(SEED);
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let mut runner = TestRunner::new_with_rng(
        Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        },
        TestRng::from_seed(RngAlgorithm::ChaCha, &bytes),
    );
    let result = runner.run(&proptest::collection::vec(op(), 1..MAX_OPS), |ops| {
        rt.block_on(check(url.clone(), ops))
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let coverage = std::mem::take(&mut *COVERAGE.lock().unwrap());
    println!("sequences that made each event happen: {coverage:#?}");
    // A fake has no producers that know nothing of shards, nor fair yield's tick.
    let redis_only = ["dispatched from the inbox", "a share hold in force"];
    let missing: Vec<&&str> = MUST_SEE
        .iter()
        .filter(|e| !coverage.contains_key(**e))
        .filter(|e| url.is_some() || !redis_only.contains(*e))
        .collect();
    assert!(
        missing.is_empty(),
        "no sequence made these happen (the generator no longer reaches them): {missing:?}"
    );
}

/// One topology at a time (they share [`COVERAGE`]).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn shards() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    ScriptClock::install();
    let server = RedisServer::start(&[]).expect("redis-server starts");
    run(Some(server.url()));
}

#[test]
fn shards_cluster() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    ScriptClock::install();
    let cluster = RedisCluster::start(3, 0, &[]).expect("a Redis Cluster starts");
    run(Some(cluster.url()));
}

/// The testing fake runs the same rules: the same sequences against it.
#[test]
fn shards_fake() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    run(None);
}
