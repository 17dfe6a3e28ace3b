//! The fake's unique locks decide what `push.lua` and `schedule.lua` decide on
//! a real Redis: random sequences of pushes of two unique job types (one
//! rejecting, one replacing, sharing a queue), now or in an hour, over a few
//! keys, go through a `Fake` and through a client on a private redis-server. Every push must come out the same on
//! both (pushed, a duplicate of the same jid, or replaced into the same jid),
//! and the jobs left waiting must be the same.

use std::collections::BTreeSet;
use std::time::Duration;

use fairjob::prelude::*;
use fairjob::testing::Fake;
use fairjob::{Error, IntoPush, Payload, PushJob};
use fairjob_tests::{namespace, redis};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde::{Deserialize, Serialize};

/// Rejects a second job of its key.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "PropReject", queue = "pu")]
#[unique(for = "1h", by(0))]
struct PropReject(u8, u32);

/// Replaces a waiting job of its key.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "PropReplace", queue = "pu")]
#[unique(for = "1h", by(0), on_conflict = "replace")]
struct PropReplace(u8, u32);

macro_rules! noop {
    ($($t:ty),*) => {$(
        impl Perform for $t {
            async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
                Ok(())
            }
        }
    )*};
}
noop!(PropReject, PropReplace);

#[derive(Debug, Clone)]
enum Op {
    /// A new job of key `key` (0..3): replacing or rejecting, now or in an hour.
    Push { replace: bool, key: u8, later: bool },
}

fn op() -> impl Strategy<Value = Op> {
    (any::<bool>(), 0u8..3, proptest::bool::weighted(0.3)).prop_map(|(replace, key, later)| {
        Op::Push {
            replace,
            key,
            later,
        }
    })
}

#[derive(Debug, PartialEq, Eq)]
enum Got {
    Pushed,
    Replaced(String),
    Duplicate(String),
}

fn got(own: &str, r: fairjob::Result<String>) -> Result<Got, TestCaseError> {
    match r {
        Ok(jid) if jid == own => Ok(Got::Pushed),
        Ok(jid) => Ok(Got::Replaced(jid)),
        Err(Error::Duplicate { jid }) => Ok(Got::Duplicate(jid)),
        Err(e) => Err(TestCaseError::fail(format!("push failed: {e}"))),
    }
}

async fn push(c: &Client, p: &Payload, later: bool) -> fairjob::Result<String> {
    if later {
        c.push_in(PushJob::new(p.clone()), Duration::from_secs(3600))
            .await
    } else {
        c.push(PushJob::new(p.clone())).await
    }
}

/// Every waiting payload's (jid, args) in Redis: queue and schedule.
async fn waiting_in_redis(
    conn: &mut redis::aio::MultiplexedConnection,
    ns: &str,
) -> BTreeSet<String> {
    let queued: Vec<String> = redis::cmd("LRANGE")
        .arg(format!("{ns}:queue:pu"))
        .arg(0)
        .arg(-1)
        .query_async(conn)
        .await
        .unwrap();
    let scheduled: Vec<String> = redis::cmd("ZRANGE")
        .arg(format!("{ns}:schedule"))
        .arg(0)
        .arg(-1)
        .query_async(conn)
        .await
        .unwrap();
    queued
        .iter()
        .chain(&scheduled)
        .map(|p| {
            let p = Payload::parse(p.clone().into_bytes()).unwrap();
            format!("{} {}", p.jid(), p.args().get())
        })
        .collect()
}

fn waiting_in_fake(fake: &Fake) -> BTreeSet<String> {
    let a = fake.enqueued::<PropReject>().into_iter().map(|e| e.payload);
    let b = fake
        .enqueued::<PropReplace>()
        .into_iter()
        .map(|e| e.payload);
    a.chain(b)
        .map(|p| format!("{} {}", p.jid(), p.args().get()))
        .collect()
}

async fn check(url: &str, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let ns = namespace();
    let real = Client::builder(url).namespace(&ns).build().await.unwrap();
    let fake = Fake::new();
    let mut conn = fairjob_tests::raw(url).await;
    for (i, op) in ops.iter().enumerate() {
        let Op::Push {
            replace,
            key,
            later,
        } = op;
        let payload = if *replace {
            PropReplace(*key, i as u32).into_push()
        } else {
            PropReject(*key, i as u32).into_push()
        }
        .unwrap()
        .payload()
        .clone();
        let own = payload.jid();
        let in_redis = got(&own, push(&real, &payload, *later).await)?;
        let in_fake = got(&own, push(&fake.client(), &payload, *later).await)?;
        prop_assert_eq!(&in_fake, &in_redis, "op {} ({:?}); ops {:?}", i, op, ops);
    }
    prop_assert_eq!(
        waiting_in_fake(&fake),
        waiting_in_redis(&mut conn, &ns).await
    );
    Ok(())
}

#[test]
fn the_fake_decides_unique_pushes_as_redis_does() {
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
    let result = runner.run(&proptest::collection::vec(op(), 1..32), |ops| {
        rt.block_on(check(&url, ops))
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}
