//! Weighted fair share on a tenant-sharded queue, with a real Redis and a real
//! worker: weighted shares of the worker's dispatch order, round robin at equal
//! weights, floors first, caps bound, and no slot left idle while a tenant
//! under its cap has work. (`fairjob/src/broker/shards.rs` checks the same on
//! the scripts step by step.)

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use fairjob::prelude::*;
use fairjob_tests::fair_jobs::FairJob;
use fairjob_tests::{Redis, eventually, queues, spawn};

struct Run {
    redis: Redis,
    client: Client,
}

async fn setup() -> Run {
    let redis = Redis::start().await;
    let client = redis.client().await;
    Run { redis, client }
}

impl Run {
    async fn push(&self, tenant: &str, n: usize, ms: u64) {
        self.client
            .push_bulk((0..n).map(|_| FairJob {
                tenant: tenant.into(),
                ms,
            }))
            .await
            .unwrap();
    }

    /// Runs one worker at `concurrency` until `n` jobs are done.
    async fn drain(&self, concurrency: usize, n: i64) {
        let w = self
            .redis
            .worker()
            .concurrency(concurrency)
            .queues(queues(&["fair"]))
            .build()
            .await
            .unwrap();
        let run = spawn(w);
        eventually!(
            within Duration::from_secs(60),
            let done = self.redis.counter(self.redis.key("done")).await;
            done >= n,
            "{n} jobs done"
        );
        run.stop().await;
    }

    /// Tenants in the worker's dispatch order.
    async fn order(&self) -> Vec<String> {
        let mut seq: Vec<(u64, String)> = self
            .redis
            .records()
            .await
            .iter()
            .map(|l| {
                let (s, t) = l.split_once(' ').unwrap();
                (s.parse().unwrap(), t.to_owned())
            })
            .collect();
        seq.sort();
        seq.into_iter().map(|(_, t)| t).collect()
    }

    async fn max(&self, gauge: &str) -> i64 {
        self.redis
            .counter(self.redis.key(&format!("max:{gauge}")))
            .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backlogged_tenants_get_their_weighted_share_of_the_workers_dispatches() {
    let run = setup().await;
    for t in ["a", "b", "c"] {
        run.push(t, 200, 0).await;
    }
    run.client
        .shard_policy("fair")
        .tenant("a")
        .weight(3.0)
        .apply()
        .await
        .unwrap();
    run.drain(5, 600).await;
    let order = run.order().await;
    assert_eq!(order.len(), 600);
    // While all three are backlogged (a has 200 jobs: 3/5 of the first 250
    // dispatches is 150), every window of D dispatches gives tenant i
    // D·wᵢ/Σw within ±2.
    let weights = BTreeMap::from([("a", 3.0), ("b", 1.0), ("c", 1.0)]);
    let backlogged = &order[..250];
    for d in [1, 2, 5, 10, 25, 50, 100, 250] {
        for start in 0..=backlogged.len() - d {
            let window = &backlogged[start..start + d];
            for (t, w) in &weights {
                let got = window.iter().filter(|x| x == t).count() as f64;
                let want = d as f64 * w / 5.0;
                assert!(
                    (got - want).abs() <= 2.0,
                    "{t}: {got} of {d} from {start} (fair {want}): {window:?}"
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn equal_weights_serve_every_other_tenant_at_most_once_between_two_turns() {
    let run = setup().await;
    for t in ["a", "b", "c", "d", "e"] {
        run.push(t, 40, 0).await;
    }
    run.drain(8, 200).await;
    let order = run.order().await;
    for (i, t) in order.iter().enumerate() {
        let Some(next) = order[i + 1..].iter().position(|x| x == t) else {
            continue;
        };
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for x in &order[i + 1..i + 1 + next] {
            *seen.entry(x).or_default() += 1;
        }
        assert!(
            seen.values().all(|n| *n <= 1),
            "between turns of {t} at {i}: {:?}",
            &order[i + 1..i + 1 + next]
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_with_a_floor_keeps_its_floor_running() {
    let run = setup().await;
    for t in 0..20 {
        run.push(&format!("t{t}"), 20, 30).await;
    }
    run.push("floored", 200, 30).await;
    run.client
        .shard_policy("fair")
        .tenant("floored")
        .floor(2)
        .apply()
        .await
        .unwrap();
    run.drain(4, 200).await;
    let order = run.order().await;
    // Two of the four slots are the floored tenant's whenever it has work: about
    // half the dispatches, against 1/21 of them by share alone.
    let first = &order[..200];
    let floored = first.iter().filter(|t| *t == "floored").count();
    assert!(
        floored >= 80,
        "floored got {floored} of the first 200 dispatches"
    );
    assert!(run.max("floored").await >= 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_slot_stays_idle_while_a_tenant_under_its_cap_has_work() {
    // Alone: every slot is used.
    let run = setup().await;
    run.push("solo", 80, 40).await;
    run.drain(8, 80).await;
    assert_eq!(
        run.max("*").await,
        8,
        "one backlogged tenant fills every slot"
    );

    // A cap binds only its tenant; the rest of the slots go to the others.
    let run = setup().await;
    run.push("capped", 60, 40).await;
    run.push("free", 60, 40).await;
    run.client
        .shard_policy("fair")
        .tenant("capped")
        .cap(3)
        .apply()
        .await
        .unwrap();
    run.drain(8, 120).await;
    assert_eq!(
        run.max("capped").await,
        3,
        "the cap is reached and never exceeded"
    );
    assert_eq!(
        run.max("*").await,
        8,
        "the free tenant takes the other slots"
    );
}
