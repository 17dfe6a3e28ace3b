//! Bookkeeping heals itself: after Redis loses its last writes (as an AOF
//! `everysec` crash can), a tenant's running count, the dispatch order, the
//! tenant set or a slot's holders can disagree with the in-progress records.
//! The reaper repairs them, and a worker requeues what its own record still
//! holds after the job's end was lost; every job still runs and every count
//! returns to 0. The corruption here is what a rollback of those writes leaves.

use std::time::Duration;

use fairjob::prelude::*;
use fairjob_tests::fair_jobs::FairJob;
use fairjob_tests::slot_jobs::SlotJob;
use fairjob_tests::{Redis, eventually, queues, spawn};
use redis::AsyncCommands;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_writes_of_a_sharded_queue_are_repaired_and_every_job_runs() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    let sk = redis.keys().shard("fair");
    for t in ["stuck", "lost", "orphan", "fine"] {
        c.push_bulk((0..10).map(|_| FairJob {
            tenant: t.into(),
            ms: 0,
        }))
        .await
        .unwrap();
    }
    c.shard_policy("fair")
        .tenant("stuck")
        .cap(2)
        .apply()
        .await
        .unwrap();
    let mut r = redis.conn();
    // `stuck`: the releases of two finished jobs were lost; it looks at its cap.
    let _: () = r.hset(&sk.running, "stuck", 2).await.unwrap();
    let _: () = r.hdel(&sk.rmember, "stuck").await.unwrap();
    // `lost`: it fell out of the dispatch order with jobs pending.
    let member: String = r.hget(&sk.rmember, "lost").await.unwrap();
    let _: () = r.zrem(&sk.ready, &member).await.unwrap();
    let _: () = r.hdel(&sk.rmember, "lost").await.unwrap();
    // `orphan`: neither in the order nor in the tenant set; only its list is left.
    let member: String = r.hget(&sk.rmember, "orphan").await.unwrap();
    let _: () = r.zrem(&sk.ready, &member).await.unwrap();
    let _: () = r.hdel(&sk.rmember, "orphan").await.unwrap();
    let _: () = r.srem(&sk.tenants, "orphan").await.unwrap();
    // A tenant with nothing left lingers in the tenant set with a running count.
    let _: () = r.sadd(&sk.tenants, "ghost").await.unwrap();
    let _: () = r.hset(&sk.running, "ghost", 1).await.unwrap();

    let w = redis.worker().concurrency(4).queues(queues(&["fair"]));
    let run = spawn(w.build().await.unwrap());
    eventually!(
        within Duration::from_secs(30),
        let done = redis.counter(redis.key("done")).await;
        done == 40,
        "every job runs"
    );
    // The reaper's next pass settles the last counts.
    eventually!(
        let left = (redis.hlen(&sk.running).await, redis.scard(&sk.tenants).await, redis.zcard(&sk.ready).await);
        left == (0, 0, 0),
        "running counts, tenant set and dispatch order back to empty"
    );
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_held_by_a_lost_job_is_freed_and_its_waiters_run() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    let lk = redis.keys().limit("SlotJob:k");
    let mut r = redis.conn();
    // Three holders whose jobs no record holds: the key's 3 slots look taken.
    for i in 0..3 {
        let _: () = r
            .zadd(&lk.holders, format!("gone-worker|{i}|slots"), 1)
            .await
            .unwrap();
    }
    for _ in 0..6 {
        SlotJob {
            key: "k".into(),
            ms: 10,
        }
        .perform_async(&c)
        .await
        .unwrap();
    }
    let run = spawn(
        redis
            .worker()
            .queues(queues(&["slots"]))
            .build()
            .await
            .unwrap(),
    );
    eventually!(
        within Duration::from_secs(30),
        let done = redis.llen(redis.key("done")).await;
        done == 6,
        "the waiters run once the lost holders are dropped"
    );
    run.stop().await;
    assert_eq!(
        (
            redis.zcard(&lk.holders).await,
            redis.llen(&lk.waiters).await
        ),
        (0, 0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_end_was_lost_runs_again_and_its_tenant_is_not_stuck() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    let sk = redis.keys().shard("fair");
    c.shard_policy("fair")
        .tenant("acme")
        .cap(1)
        .apply()
        .await
        .unwrap();
    let w = redis
        .worker()
        .queues(queues(&["fair"]))
        .build()
        .await
        .unwrap();
    let identity = w.identity().to_owned();
    let run = spawn(w);
    let job = || FairJob {
        tenant: "acme".into(),
        ms: 0,
    };
    job().perform_async(&c).await.unwrap();
    eventually!(
        redis.counter(redis.key("done")).await == 1,
        "the first job runs"
    );
    // Redis rolls back the end of a job this worker finished: its token is
    // back in the worker's record and acme's running count is 1 again (its cap).
    let payload = serde_json::json!({
        "class": "FairJob", "args": [{"tenant": "acme", "ms": 0}],
        "jid": "0123456789abcdef01234567", "queue": "fair", "fair_tenant": "acme", "retry": true,
    })
    .to_string();
    let mut r = redis.conn();
    let _: () = r
        .hset(sk.inflight(&identity), "999999|fair|acme", &payload)
        .await
        .unwrap();
    let _: () = r.hset(&sk.running, "acme", 1).await.unwrap();
    job().perform_async(&c).await.unwrap();
    job().perform_async(&c).await.unwrap();
    // The worker requeues what it is not working on; it runs again, then the
    // two new jobs.
    eventually!(
        within Duration::from_secs(20),
        let done = redis.counter(redis.key("done")).await;
        done == 4,
        "the job whose end was lost runs again, and acme's new jobs after it"
    );
    eventually!(
        redis.hlen(&sk.running).await == 0,
        "acme's running count back to 0"
    );
    run.stop().await;
    assert_eq!(redis.hlen(sk.inflight(&identity)).await, 0);
}
