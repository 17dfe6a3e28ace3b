//! The fair-share guarantees of tenant-sharded queues, checked on the real
//! scripts against a real redis-server: the test dispatches and finishes jobs
//! itself, one at a time, so the order is exact (`tests/tests/fair_share.rs`
//! checks the same with real workers).

use std::collections::{BTreeMap, HashMap, VecDeque};

use serde_json::value::RawValue;

use crate::broker::{Finish, ShardQueue, Token};
use crate::broker::{RedisBroker, Setting, ShardPolicy, keys};
use crate::client::{Client, PushJob};
use crate::testing::RedisServer;
use crate::wire::{Payload, fields};

const Q: &str = "fair";

struct Sim {
    _server: RedisServer,
    client: Client,
    queue: ShardQueue,
    seq: u64,
    /// Running jobs: token → tenant.
    running: VecDeque<(Token, String)>,
}

impl Sim {
    async fn new() -> Sim {
        let server = RedisServer::start(&[]).expect("redis-server starts");
        let client = Client::builder(server.url())
            .sharded_queue(Q)
            .build()
            .await
            .unwrap();
        let queue = client.broker().shard_queue(Q, "sim");
        Sim {
            _server: server,
            client,
            queue,
            seq: 0,
            running: VecDeque::new(),
        }
    }

    fn broker(&self) -> &RedisBroker {
        self.client.broker()
    }

    async fn push(&self, tenant: &str, n: usize) {
        let jobs: Vec<PushJob> = (0..n)
            .map(|i| {
                let mut p = Payload::new(
                    "SimJob",
                    RawValue::from_string(format!("[{i}]")).unwrap(),
                    Q,
                );
                p.set(fields::FAIR_TENANT, tenant);
                PushJob::new(p)
            })
            .collect();
        self.client.push_bulk(jobs).await.unwrap();
    }

    async fn policy(&self, tenant: Option<&str>, policy: ShardPolicy) {
        self.broker()
            .set_shard_policy(Q, tenant, policy)
            .await
            .unwrap();
    }

    /// Dispatches one job; returns its tenant (decoded).
    async fn dispatch(&mut self) -> Option<String> {
        let got = self
            .broker()
            .fetch_shard(&self.queue, 1, self.seq)
            .await
            .unwrap();
        self.seq += 1;
        let r = got.into_iter().next()?;
        let token = Token::parse(&r.token).unwrap();
        let tenant = keys::decode(token.tenant.as_deref().unwrap()).unwrap();
        self.running.push_back((token, tenant.clone()));
        Some(tenant)
    }

    /// Finishes the running job at `index` (0 = the oldest).
    async fn finish(&mut self, index: usize) {
        let (token, _) = self.running.remove(index).unwrap();
        let done = self
            .broker()
            .finish("sim", &token, Finish::Ack, 0, Default::default())
            .await
            .unwrap();
        assert_eq!(done, crate::broker::FinishReply::Done);
    }

    /// Dispatches up to `n` jobs in one fetch call; their tenants (decoded),
    /// in dispatch order.
    async fn dispatch_many(&mut self, n: usize) -> Vec<String> {
        let got = self
            .broker()
            .fetch_shard(&self.queue, n, self.seq)
            .await
            .unwrap();
        self.seq += n as u64;
        let mut out = Vec::new();
        for r in got {
            let token = Token::parse(&r.token).unwrap();
            let tenant = keys::decode(token.tenant.as_deref().unwrap()).unwrap();
            self.running.push_back((token, tenant.clone()));
            out.push(tenant);
        }
        out
    }

    fn running_of(&self, tenant: &str) -> usize {
        self.running.iter().filter(|(_, t)| t == tenant).count()
    }

    /// Dispatches and finishes `n` jobs one at a time (concurrency 1).
    async fn serial(&mut self, n: usize) -> Vec<String> {
        let mut out = Vec::new();
        for _ in 0..n {
            let Some(t) = self.dispatch().await else {
                break;
            };
            self.finish(0).await;
            out.push(t);
        }
        out
    }

    async fn card(&self, key: &str) -> u64 {
        self.broker().key_len(key).await.unwrap()
    }
}

fn weight(w: f64) -> ShardPolicy {
    ShardPolicy {
        weight: Setting::Set(w),
        ..ShardPolicy::default()
    }
}

/// Every window of `d` consecutive dispatches gives each tenant d·w/Σw ± 2.
fn assert_shares(order: &[String], weights: &BTreeMap<&str, f64>) {
    let total: f64 = weights.values().sum();
    for d in 1..=order.len().min(100) {
        for start in 0..=order.len() - d {
            let window = &order[start..start + d];
            for (t, w) in weights {
                let got = window.iter().filter(|x| x == t).count() as f64;
                let want = d as f64 * w / total;
                assert!(
                    (got - want).abs() <= 2.0,
                    "{t} got {got} of {d} dispatches from {start}, fair share {want:.2}: {window:?}"
                );
            }
        }
    }
}

#[tokio::test]
async fn backlogged_tenants_get_their_weighted_share_of_every_window() {
    let mut sim = Sim::new().await;
    for t in ["a", "b", "c"] {
        sim.push(t, 300).await;
    }
    sim.policy(Some("a"), weight(3.0)).await;
    let order = sim.serial(250).await;
    assert_eq!(order.len(), 250);
    assert_shares(
        &order,
        &BTreeMap::from([("a", 3.0), ("b", 1.0), ("c", 1.0)]),
    );
    // The first five: a gets three turns, b and c one each.
    let first: Vec<&str> = order[..5].iter().map(String::as_str).collect();
    assert_eq!(first.iter().filter(|t| **t == "a").count(), 3, "{first:?}");
}

/// A fetch of many jobs reads the head of the order ahead and writes the
/// passes back once (lib/cache.lua, shard_win_head): it must dispatch exactly
/// as that many fetches of one job each would, whatever the weights, floors,
/// caps and tenants that drain within a call.
#[tokio::test]
async fn a_fetch_of_many_dispatches_as_as_many_fetches_of_one() {
    async fn setup() -> Sim {
        let sim = Sim::new().await;
        // 40 tenants, some with a job or two (they drain inside a call),
        // weights from 0.5 to 4 (ties at equal passes), a floor, a cap.
        for t in 0..40u32 {
            let jobs = [1, 2, 7, 30, 60][(t % 5) as usize];
            sim.push(&format!("t{t}"), jobs).await;
        }
        for (t, w) in [
            ("t1", 3.0),
            ("t3", 0.5),
            ("t4", 2.5),
            ("t8", 4.0),
            ("t9", 1.5),
        ] {
            sim.policy(Some(t), weight(w)).await;
        }
        sim.policy(
            Some("t13"),
            ShardPolicy {
                floor: Setting::Set(2),
                ..ShardPolicy::default()
            },
        )
        .await;
        sim.policy(
            Some("t14"),
            ShardPolicy {
                cap: Setting::Set(5),
                ..ShardPolicy::default()
            },
        )
        .await;
        sim
    }
    let mut one = setup().await;
    let mut many = setup().await;
    let mut single = Vec::new();
    let mut batched = Vec::new();
    let sizes = [25, 7, 1, 13, 40, 3, 100];
    for (round, n) in sizes.iter().cycle().take(40).enumerate() {
        let got = many.dispatch_many(*n).await;
        for _ in 0..got.len() {
            single.push(one.dispatch().await.unwrap());
        }
        let drained = got.len() < *n;
        batched.extend(got);
        assert_eq!(batched, single, "round {round}, batch of {n}");
        // Some jobs end between calls (the oldest ones, both sides alike),
        // so capped and floored tenants come back.
        for _ in 0..(n / 2).min(one.running.len()) {
            one.finish(0).await;
            many.finish(0).await;
        }
        if drained && one.running.is_empty() {
            break;
        }
    }
    // The rest, every running job ended before each call.
    loop {
        while !one.running.is_empty() {
            one.finish(0).await;
            many.finish(0).await;
        }
        let got = many.dispatch_many(50).await;
        if got.is_empty() {
            break;
        }
        for _ in 0..got.len() {
            single.push(one.dispatch().await.unwrap());
        }
        batched.extend(got);
        assert_eq!(batched, single);
    }
    assert_eq!(one.dispatch().await, None);
    assert_eq!(batched.len(), 8 * (1 + 2 + 7 + 30 + 60), "every job once");
}

#[tokio::test]
async fn equal_weights_are_round_robin_also_for_late_tenants() {
    let mut sim = Sim::new().await;
    for t in ["a", "b", "c", "d"] {
        sim.push(t, 40).await;
    }
    let mut order = sim.serial(30).await;
    // A tenant arriving now starts at the virtual time: no credit, no penalty.
    sim.push("late", 40).await;
    order.extend(sim.serial(100).await);
    let backlogged = |i: usize, t: &str| -> bool { t != "late" || i >= 30 };
    for (i, t) in order.iter().enumerate() {
        let Some(next) = order[i + 1..].iter().position(|x| x == t) else {
            continue;
        };
        let between = &order[i + 1..i + 1 + next];
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (k, x) in between.iter().enumerate() {
            if backlogged(i + 1 + k, x) {
                *seen.entry(x.as_str()).or_default() += 1;
            }
        }
        assert!(
            seen.values().all(|n| *n <= 1),
            "between two turns of {t} at {i}: {between:?}"
        );
    }
    let late_first = order.iter().skip(30).position(|t| t == "late").unwrap();
    assert!(
        late_first <= 4,
        "the late tenant waits at most one round: {late_first}"
    );
}

#[tokio::test]
async fn a_tenant_under_its_floor_is_served_first() {
    let mut sim = Sim::new().await;
    for t in 0..10 {
        sim.push(&format!("t{t}"), 30).await;
    }
    sim.push("f", 60).await;
    sim.policy(
        Some("f"),
        ShardPolicy {
            floor: Setting::Set(2),
            ..ShardPolicy::default()
        },
    )
    .await;
    // Concurrency 4; jobs finish in a scrambled but fixed order.
    let mut rng = 7u64;
    let mut dispatched = 0;
    while dispatched < 120 {
        while sim.running.len() < 4 {
            let under = sim.running_of("f") < 2;
            let Some(t) = sim.dispatch().await else { break };
            dispatched += 1;
            if under {
                assert_eq!(t, "f", "f was under its floor at dispatch {dispatched}");
            }
        }
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let i = (rng >> 33) as usize % sim.running.len();
        sim.finish(i).await;
    }
    assert!(sim.running_of("f") >= 2);
}

#[tokio::test]
async fn caps_bind_and_free_slots_go_to_anyone_under_their_cap() {
    let mut sim = Sim::new().await;
    sim.push("capped", 50).await;
    sim.push("free", 50).await;
    sim.policy(
        Some("capped"),
        ShardPolicy {
            cap: Setting::Set(2),
            ..ShardPolicy::default()
        },
    )
    .await;
    // Concurrency 6: work-conserving, the free tenant takes what capped can't.
    for _ in 0..6 {
        assert!(sim.dispatch().await.is_some(), "a free slot stayed unused");
    }
    assert_eq!(sim.running_of("capped"), 2);
    assert_eq!(sim.running_of("free"), 4);
    // A cap of 0 pauses at the next dispatch; with everyone else at a
    // cap too, nothing is dispatched.
    sim.policy(
        Some("free"),
        ShardPolicy {
            cap: Setting::Set(0),
            ..ShardPolicy::default()
        },
    )
    .await;
    assert_eq!(sim.dispatch().await, None);
    sim.finish(0).await;
    let t = sim.dispatch().await;
    assert_eq!(
        t.as_deref(),
        Some("capped"),
        "capped is under its cap again"
    );
    // Raising the cap applies at once.
    sim.policy(Some("free"), ShardPolicy::default().with_cap(None))
        .await;
    assert_eq!(sim.dispatch().await.as_deref(), Some("free"));
}

#[tokio::test]
async fn idle_time_earns_no_credit_and_weight_changes_apply_next() {
    let mut sim = Sim::new().await;
    sim.push("a", 300).await;
    let alone = sim.serial(100).await;
    assert!(alone.iter().all(|t| t == "a"));
    sim.push("b", 300).await;
    let next = sim.serial(20).await;
    let b = next.iter().filter(|t| *t == "b").count();
    assert!(
        (9..=11).contains(&b),
        "b gets its share, not 100 turns: {next:?}"
    );
    sim.policy(Some("a"), weight(4.0)).await;
    let after = sim.serial(50).await;
    assert_shares(&after, &BTreeMap::from([("a", 4.0), ("b", 1.0)]));
}

#[tokio::test]
async fn a_drained_queue_keeps_no_dispatch_state() {
    let mut sim = Sim::new().await;
    for t in ["a", "b", "c"] {
        sim.push(t, 20).await;
    }
    sim.policy(
        Some("a"),
        ShardPolicy {
            floor: Setting::Set(1),
            weight: Setting::Set(2.0),
            ..ShardPolicy::default()
        },
    )
    .await;
    let all = sim.serial(100).await;
    assert_eq!(all.len(), 60);
    let sk = sim.broker().keys().shard(Q);
    for key in [&sk.ready, &sk.rmember, &sk.floorq, &sk.running, &sk.tenants] {
        assert_eq!(sim.card(key).await, 0, "{key} is empty");
    }
    // Passes ahead of the virtual time stay a while, and expire.
    assert!(sim.card(&sk.lastpass).await <= 3);
    let ttl = sim.broker().key_ttl(&sk.lastpass).await.unwrap();
    assert!(ttl == -2 || (0..=3600).contains(&ttl), "{ttl}");
}

#[tokio::test]
async fn the_reconciler_counts_the_jobs_of_a_worker_it_was_not_told_about() {
    // A worker that starts between the reaper's list of workers and its
    // recount: its jobs are in the queue's fetchers, so the recount keeps them
    // (a recount without them would let the tenant past its cap).
    let mut sim = Sim::new().await;
    sim.broker()
        .register_worker("other", "{}", &[Q.to_owned()])
        .await
        .unwrap();
    sim.push("a", 3).await;
    assert_eq!(sim.dispatch().await.as_deref(), Some("a"));
    assert_eq!(sim.dispatch().await.as_deref(), Some("a"));
    let healed = sim
        .broker()
        .reconcile_shard(Q, &["other".to_owned()])
        .await
        .unwrap();
    assert_eq!(healed.running_counts, 0, "nothing to repair: {healed:?}");
    let view = sim.broker().shard_tenants(Q, &[Some("a")]).await.unwrap();
    assert_eq!(view.rows[0].running, 2, "{view:?}");
    // Once the worker is forgotten (it holds nothing), it leaves the fetchers.
    sim.finish(0).await;
    sim.finish(0).await;
    let sk = sim.broker().keys().shard(Q);
    assert_eq!(sim.card(&sk.fetchers).await, 1);
    sim.broker().forget_worker("sim", false).await.unwrap();
    assert_eq!(sim.card(&sk.fetchers).await, 0);
}

#[tokio::test]
async fn the_reconciler_rechecks_a_pass_of_tenants_in_several_calls() {
    // 120 tenants with pending jobs whose place in the dispatch order was
    // lost: one pass finds them all and re-checks them 50 per script call
    // (the first call also recounts the running jobs).
    let sim = Sim::new().await;
    for t in 0..120 {
        sim.push(&format!("t{t}"), 1).await;
    }
    let sk = sim.broker().keys().shard(Q);
    assert_eq!(sim.card(&sk.ready).await, 120);
    sim.broker()
        .delete_keys(&[&sk.ready, &sk.rmember])
        .await
        .unwrap();
    let healed = sim.broker().reconcile_shard(Q, &[]).await.unwrap();
    assert_eq!(healed.tenants, 120, "{healed:?}");
    assert_eq!(
        sim.card(&sk.ready).await,
        120,
        "every tenant back in the order"
    );
    let again = sim.broker().reconcile_shard(Q, &[]).await.unwrap();
    assert_eq!(again.tenants, 0, "nothing left to repair: {again:?}");
}

#[tokio::test]
async fn a_burst_holds_while_alone_and_the_cap_binds_when_another_waits() {
    let mut sim = Sim::new().await;
    sim.push("a", 50).await;
    sim.policy(
        Some("a"),
        ShardPolicy {
            cap: Setting::Set(1),
            burst: Setting::Set(3),
            ..ShardPolicy::default()
        },
    )
    .await;
    // Alone: up to its burst, not beyond.
    for _ in 0..3 {
        assert_eq!(sim.dispatch().await.as_deref(), Some("a"));
    }
    assert_eq!(sim.dispatch().await, None, "no further than the burst");
    // Another tenant waits: the freed slots go to b, and a (above its cap
    // of 1) gets none while b has pending work.
    sim.finish(0).await;
    sim.push("b", 2).await;
    assert_eq!(sim.dispatch().await.as_deref(), Some("b"));
    sim.finish(0).await; // one of a's
    assert_eq!(sim.running_of("a"), 1);
    assert_eq!(
        sim.dispatch().await.as_deref(),
        Some("b"),
        "a is at its cap"
    );
    // b drained (its two jobs run): a may burst again once one of its jobs ends.
    sim.finish(0).await; // a's last
    for _ in 0..3 {
        assert_eq!(sim.dispatch().await.as_deref(), Some("a"));
    }
    assert_eq!(sim.running_of("a"), 3);
    assert_eq!(sim.running_of("b"), 2);
    assert_eq!(sim.dispatch().await, None, "a at its burst again");
}

fn rate(limit: u32, per_us: u64) -> ShardPolicy {
    ShardPolicy {
        rate: Setting::Set(crate::broker::ShardRate { limit, per_us }),
        ..ShardPolicy::default()
    }
}

#[tokio::test]
async fn a_tenant_whose_rate_is_spent_is_skipped_with_its_place_kept() {
    let mut sim = Sim::new().await;
    // One start an hour: after its first, `a` waits while b and c are served.
    sim.policy(Some("a"), rate(1, 3_600_000_000)).await;
    for t in ["a", "b", "c"] {
        sim.push(t, 10).await;
    }
    let order = sim.serial(7).await;
    assert_eq!(order, ["a", "b", "c", "b", "c", "b", "c"]);
    let sk = sim.broker().keys().shard(Q);
    assert_eq!(sim.card(&sk.rwait).await, 1, "a waits for its rate");
    // Out of the order, pass not advanced by the skip: it kept the pass of
    // its next turn (1 after its first start at 0).
    let view = sim.broker().shard_tenants(Q, &[Some("a")]).await.unwrap();
    assert!(view.rows[0].rate_wait_until.is_some());
    assert_eq!(view.rows[0].pass, Some(1.0));
    // Its rate removed: it is back at once, served next (its pass raised to
    // the virtual time, not below it: no burst of the turns it missed), then
    // round robin again.
    sim.policy(
        Some("a"),
        ShardPolicy {
            rate: Setting::Clear,
            ..ShardPolicy::default()
        },
    )
    .await;
    assert_eq!(sim.card(&sk.rwait).await, 0);
    let order = sim.serial(6).await;
    assert_eq!(order[0], "a", "{order:?}");
    let a_turns = order.iter().filter(|t| *t == "a").count();
    assert!(a_turns <= 3, "no burst of made-up turns: {order:?}");
    // A rate of 2 per 100 ms: a waits at most one interval (50 ms; the state
    // its hourly rate left is cut to that), b and c served meanwhile; then it
    // comes back, served first.
    sim.policy(Some("a"), rate(2, 100_000)).await;
    let order = sim.serial(3).await;
    assert!(order.iter().filter(|t| *t == "a").count() <= 1, "{order:?}");
    tokio::time::sleep(std::time::Duration::from_millis(60)).await;
    let order = sim.serial(1).await;
    assert_eq!(order, ["a"]);
}

#[tokio::test]
async fn a_tenant_waiting_for_its_rate_does_not_hold_back_a_burst() {
    let mut sim = Sim::new().await;
    sim.push("b", 5).await;
    sim.policy(Some("b"), rate(1, 3_600_000_000)).await;
    sim.push("a", 10).await;
    sim.policy(
        Some("a"),
        ShardPolicy {
            cap: Setting::Set(1),
            burst: Setting::Set(3),
            ..ShardPolicy::default()
        },
    )
    .await;
    assert_eq!(sim.dispatch().await.as_deref(), Some("b"));
    // b's rate is spent: it waits out of the order, so a is alone and bursts.
    let sk = sim.broker().keys().shard(Q);
    assert_eq!(sim.card(&sk.rwait).await, 1, "b waits for its rate");
    for _ in 0..3 {
        assert_eq!(sim.dispatch().await.as_deref(), Some("a"));
    }
    assert_eq!(sim.dispatch().await, None, "no further than a's burst");
    assert_eq!(sim.running_of("a"), 3);
    // b's rate removed: back in the order, and a (above its cap) waits.
    sim.policy(
        Some("b"),
        ShardPolicy {
            rate: Setting::Clear,
            ..ShardPolicy::default()
        },
    )
    .await;
    assert_eq!(sim.card(&sk.rwait).await, 0);
    for _ in 0..2 {
        assert_eq!(sim.dispatch().await.as_deref(), Some("b"));
    }
    assert_eq!(sim.running_of("a"), 3);
}
