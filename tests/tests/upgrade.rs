//! Upgrades with jobs in flight: a worker of this version, started on a Redis
//! that fairjob 0.1 wrote (shard lists, its round-robin ring, running counts,
//! caps, and the in-progress records of a 0.1 worker that died), migrates what
//! it must and runs every job. The old structures are written here the way
//! 0.1's scripts wrote them.

use std::time::Duration;

use fairjob_tests::{Redis, eventually, queues, spawn};
use redis::AsyncCommands;
use serde_json::json;

fn payload(tenant: &str, n: u32) -> String {
    json!({
        "class": "FairJob",
        "args": [{"tenant": tenant, "ms": 0}],
        "jid": format!("{:024x}", (n as u64) << 8 | tenant.len() as u64),
        "queue": "fair",
        "fair_tenant": tenant,
        "retry": true,
        "created_at": 1_795_000_000.5,
        "enqueued_at": 1_795_000_000.5,
        "n": n,
    })
    .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_written_by_0_1_is_migrated_and_every_job_runs() {
    let redis = Redis::start().await;
    let keys = redis.keys().clone();
    let sk = keys.shard("fair");
    let old = "old-host:4242:0123456789ab";
    let mut r = redis.conn();
    let mut pipe = redis::pipe();
    // Queued jobs in tenant shards, the round-robin ring of runnable tenants
    // (scored by the `seq` counter), the tenant set, a default cap of 2.
    let tenants = ["t1", "t%2F2", "t3"];
    let mut total: i64 = 0;
    for (i, t) in tenants.iter().enumerate() {
        for n in 0..5 {
            pipe.lpush(sk.tenant_list(None) + t, payload(t, n)).ignore();
            total += 1;
        }
        pipe.zadd(&sk.ring, *t, i + 1).ignore();
        pipe.sadd(&sk.tenants, *t).ignore();
    }
    pipe.set(&sk.seq, 3).ignore();
    pipe.hset(&sk.limits, "*", 2).ignore();
    // A 0.1 worker died with two jobs of t1 in flight (its record of the
    // queue, t1's running count) and one plain job; its lease is gone.
    for n in 10..12 {
        pipe.hset(sk.inflight(old), format!("{n}|fair|t1"), payload("t1", n))
            .ignore();
        total += 1;
    }
    pipe.hset(&sk.running, "t1", 2).ignore();
    pipe.hset(keys.inflight(old), "12|fair", payload("plain", 12))
        .ignore();
    total += 1;
    pipe.hset(
        keys.workers(),
        old,
        r#"{"queues":["fair"],"sharded":["fair"]}"#,
    )
    .ignore();
    pipe.sadd(keys.sharded_queues(), "fair").ignore();
    let _: () = pipe.query_async(&mut r).await.unwrap();

    let w = redis.worker().concurrency(4).queues(queues(&["fair"]));
    let run = spawn(w.build().await.unwrap());
    eventually!(
        within Duration::from_secs(30),
        let done = redis.counter(redis.key("done")).await;
        done >= total,
        "every job runs"
    );
    run.stop().await;
    assert_eq!(
        redis.counter(redis.key("done")).await,
        total,
        "each ran once"
    );
    let ring: u64 = r.zcard(&sk.ring).await.unwrap();
    assert_eq!(ring, 0, "the ring was migrated");
    for key in [&sk.ready, &sk.running, &sk.tenants] {
        let t: String = redis::cmd("TYPE")
            .arg(key)
            .query_async(&mut r)
            .await
            .unwrap();
        assert_eq!(t, "none", "{key} is empty");
    }
    let old_left: u64 = r.hlen(sk.inflight(old)).await.unwrap();
    assert_eq!(old_left, 0, "the dead 0.1 worker's jobs were recovered");
    // The 0.1 default limit became the default cap, and held.
    let cap: Option<String> = r.hget(&sk.policy, "c:*").await.unwrap();
    assert_eq!(cap.as_deref(), Some("2"));
    assert!(!r.exists::<_, bool>(&sk.limits).await.unwrap());
    for t in tenants {
        let max = redis.counter(redis.key(&format!("max:{t}"))).await;
        assert!(max <= 2, "{t} ran {max} at once, above its cap of 2");
    }
}
