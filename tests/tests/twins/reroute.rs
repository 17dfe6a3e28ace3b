//! The fake's reroute windows choose the queues that `push.lua` chooses on a
//! real Redis: random sequences of pushes (two job types, tenants, no tenant,
//! explicit queues, re-pushes of earlier jids) and clock moves go through a
//! `Fake` and through a client on a private redis-server, and every push must
//! land in the same queue on both. Before each new job of a tenant, the
//! tenant view (`fairjob::inspect`) says which queue the tenant's next job
//! gets; the push must land there too: the view, the fake and `push.lua`
//! state one rule.
//!
//! Clock moves are 1000 s and the windows 1500 s and 10500 s, so no entry is
//! ever within 500 s of a window's edge: the few real seconds the test takes
//! cannot decide a count.

use std::time::Duration;

use fairjob::prelude::*;
use fairjob::testing::Fake;
use fairjob::{IntoPush, Payload, PushJob};
use fairjob_tests::{namespace, redis};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde::{Deserialize, Serialize};

/// Two rules: more than 2 in 2h55m → `pa_long`; more than 4 in 25m →
/// `pa_short`, which wins when both match (the last matching rule).
#[allow(clippy::duplicated_attributes)] // rust-clippy#13238
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "PropA", queue = "pa")]
#[throttle(queue = "pa_long", threshold = 2, per = "2h 55m")]
#[throttle(queue = "pa_short", threshold = 4, per = "25m")]
struct PropA(u32);

impl Perform for PropA {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// Its own window per tenant: more than 1 in 25m → `pb_slow`.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "PropB", queue = "pb")]
#[throttle(queue = "pb_slow", threshold = 1, per = "25m")]
struct PropB(u32);

impl Perform for PropB {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

const QUEUES: &[&str] = &["pa", "pa_long", "pa_short", "pb", "pb_slow", "pinned"];
const STEP: u64 = 1000;

#[derive(Debug, Clone)]
enum Op {
    /// A new job: PropB or PropA, tenant `t0`..`t2` or none, to its own
    /// queue or pinned to `pinned`.
    Push {
        b: bool,
        tenant: Option<u8>,
        pinned: bool,
    },
    /// The payload of an earlier push, pushed again (its jid uses no new quota).
    Repush(usize),
    /// The clock moves 1000 s.
    Advance,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (any::<bool>(), proptest::option::weighted(0.85, 0u8..3), proptest::bool::weighted(0.15))
            .prop_map(|(b, tenant, pinned)| Op::Push { b, tenant, pinned }),
        2 => any::<usize>().prop_map(Op::Repush),
        1 => Just(Op::Advance),
    ]
}

fn payload_of(b: bool, n: u32, tenant: Option<u8>, pinned: bool) -> Payload {
    fn build<J: Job>(job: J, tenant: Option<u8>, pinned: bool) -> Payload {
        let mut e = job.enqueue();
        if let Some(t) = tenant {
            e = e.set_tenant(format!("t{t}"));
        }
        if pinned {
            e = e.queue("pinned");
        }
        e.into_push().unwrap().payload().clone()
    }
    if b {
        build(PropB(n), tenant, pinned)
    } else {
        build(PropA(n), tenant, pinned)
    }
}

/// The queue the fake recorded its newest job of `class` in.
fn fake_choice(fake: &Fake, class: &str) -> String {
    let last = if class == "PropB" {
        fake.enqueued::<PropB>().pop().map(|e| e.queue)
    } else {
        fake.enqueued::<PropA>().pop().map(|e| e.queue)
    };
    last.expect("the fake recorded the push")
}

async fn lengths(conn: &mut redis::aio::MultiplexedConnection, ns: &str) -> Vec<u64> {
    let mut pipe = redis::pipe();
    for q in QUEUES {
        pipe.llen(format!("{ns}:queue:{q}"));
    }
    pipe.query_async(conn).await.unwrap()
}

async fn check(url: &str, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let ns = namespace();
    // A 1 s configured window: each job type's longest rule is its window,
    // so the trim runs on both sides.
    let window = Duration::from_secs(1);
    let real = Client::builder(url)
        .namespace(&ns)
        .max_throttling_window(window)
        .build()
        .await
        .unwrap();
    let fake = Fake::builder()
        .client(Client::builder("redis://unused.invalid").max_throttling_window(window))
        .build()
        .unwrap();
    let mut conn = fairjob_tests::raw(url).await;
    let mut before = lengths(&mut conn, &ns).await;
    let mut pushed: Vec<Payload> = Vec::new();
    let mut offset = 0;
    for (i, op) in ops.iter().enumerate() {
        let payload = match op {
            Op::Advance => {
                offset += STEP;
                fake.advance(Duration::from_secs(STEP));
                real.set_clock_offset(offset as i64);
                continue;
            }
            Op::Push { b, tenant, pinned } => {
                let p = payload_of(*b, i as u32, *tenant, *pinned);
                pushed.push(p.clone());
                p
            }
            Op::Repush(k) if !pushed.is_empty() => pushed[k % pushed.len()].clone(),
            Op::Repush(_) => continue,
        };
        let class = payload.class();
        let rules = fairjob::fair::rules_of(&payload);
        let predicted = match (op, payload.tenant()) {
            (Op::Push { pinned: false, .. }, Some(tenant)) if !rules.is_empty() => Some(
                real.inspector()
                    .reroute_state(&class, &payload.queue(), &rules, &tenant)
                    .await
                    .unwrap()
                    .next_queue,
            ),
            _ => None,
        };
        real.push(PushJob::new(payload.clone())).await.unwrap();
        fake.client().push(PushJob::new(payload)).await.unwrap();
        let after = lengths(&mut conn, &ns).await;
        let grew: Vec<&str> = QUEUES
            .iter()
            .zip(before.iter().zip(&after))
            .filter(|(_, (b, a))| a > b)
            .map(|(q, _)| *q)
            .collect();
        before = after;
        prop_assert_eq!(grew.len(), 1, "op {}: Redis pushed to {:?}", i, grew);
        let in_fake = fake_choice(&fake, &class);
        prop_assert_eq!(
            in_fake.as_str(),
            grew[0],
            "op {} ({:?}) went to {} in the fake and {} in Redis; ops {:?}",
            i,
            op,
            in_fake,
            grew[0],
            ops
        );
        if let Some(predicted) = predicted {
            prop_assert_eq!(
                predicted.as_str(),
                grew[0],
                "op {} ({:?}): the tenant view said {} and Redis pushed to {}; ops {:?}",
                i,
                op,
                predicted,
                grew[0],
                ops
            );
        }
    }
    Ok(())
}

#[test]
fn the_fake_chooses_the_queues_that_redis_chooses() {
    fairjob::testing::ScriptClock::install();
    let server = redis();
    let url = server.url();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut runner = TestRunner::new(Config {
        cases: 48,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&proptest::collection::vec(op(), 1..48), |ops| {
        rt.block_on(check(&url, ops))
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}
