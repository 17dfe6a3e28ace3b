//! Slot limits: at most N jobs of a key at once across worker processes, waiting
//! jobs hold no worker, limits change live (0 pauses), dead holders' slots come
//! back, waiters survive restarts.

use std::time::{Duration, Instant};

use fairjob::Job;
use fairjob::broker::LimitKeys;
use fairjob_tests::slot_jobs::{ShardSlotJob, SlotJob};
use fairjob_tests::{Redis, RedisServer, TestWorker, eventually, namespace, queues};
use redis::AsyncCommands;

/// A worker process of the queue `slots` at concurrency 20.
fn worker(url: &str, ns: &str) -> TestWorker {
    TestWorker::new(url, ns)
        .queues(["slots"])
        .concurrency(20)
        .flag("-t", "5s")
}

/// The keys of `SlotJob`'s limit for `key`.
fn limit(redis: &Redis, key: &str) -> LimitKeys {
    redis.keys().limit(&format!("SlotJob:{key}"))
}

/// Jobs of `key` that completed (the list `done`: `<key> <jid>`).
async fn done_of(redis: &Redis, key: &str) -> usize {
    redis
        .lrange(redis.key("done"))
        .await
        .iter()
        .filter(|i| i.rsplit_once(' ').map(|(k, _)| k) == Some(key))
        .count()
}

/// The most jobs of `key` that ran at once, by the jobs' own gauge.
async fn gauge_max(redis: &Redis, key: &str) -> i64 {
    redis.counter(redis.key(&format!("gauge-max:{key}"))).await
}

/// How many jobs of `key` run now, by the jobs' own gauge.
async fn gauge(redis: &Redis, key: &str) -> i64 {
    redis.counter(redis.key(&format!("gauge:{key}"))).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_never_runs_more_than_its_limit_and_waiters_hold_no_worker() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    c.push_bulk(SlotJob::batch("hot", 200, 25)).await.unwrap();
    let others = (0..20).flat_map(|i| SlotJob::batch(&format!("other{i}"), 1, 5));
    c.push_bulk(others).await.unwrap();
    let _w1 = worker(redis.url(), redis.ns()).start();
    let _w2 = worker(redis.url(), redis.ns()).start();
    // Every other key's job completes while `hot` still has waiters.
    eventually!(
        within Duration::from_secs(20),
        let others = {
            let mut n = 0;
            for i in 0..20 {
                n += done_of(&redis, &format!("other{i}")).await;
            }
            n
        };
        others == 20,
        "jobs of other keys complete"
    );
    let hot_done = done_of(&redis, "hot").await;
    let waiting = redis.llen(limit(&redis, "hot").waiters).await;
    assert!(
        hot_done < 200 && waiting > 0,
        "others finished while `hot` still waited (done {hot_done}, waiting {waiting})"
    );
    eventually!(
        within Duration::from_secs(60),
        let done = done_of(&redis, "hot").await; done == 200,
        "all complete"
    );
    assert!(
        gauge_max(&redis, "hot").await <= 3,
        "never more than 3 at once"
    );
    assert_eq!(gauge_max(&redis, "hot").await, 3, "and the limit is used");
    let holders = redis.zcard(limit(&redis, "hot").holders).await;
    assert_eq!(holders, 0, "no slot leaks");
    assert_eq!(
        redis.stat("fenced").await,
        0,
        "parking is not a stale completion"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_change_live_zero_pauses_and_raising_releases_waiters_at_once() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    c.push_bulk(SlotJob::batch("k", 40, 200)).await.unwrap();
    let _w = worker(redis.url(), redis.ns()).start();
    eventually!(
        let done = done_of(&redis, "k").await; done >= 3,
        "`k` runs"
    );
    // 3 → 0: no new starts of `k`, while other keys keep running.
    fairjob::limit::set_limit(c.broker(), "SlotJob:k", Some(0), 3)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let paused_at = done_of(&redis, "k").await;
    c.push_bulk(SlotJob::batch("free", 5, 10)).await.unwrap();
    eventually!(
        let done = done_of(&redis, "free").await; done == 5,
        "another key runs while `k` is paused"
    );
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        done_of(&redis, "k").await,
        paused_at,
        "no `k` job started while paused"
    );
    assert_eq!(gauge(&redis, "k").await, 0);
    // 0 → 5: five waiters released at once.
    let released = fairjob::limit::set_limit(c.broker(), "SlotJob:k", Some(5), 3)
        .await
        .unwrap();
    assert_eq!(released, 5);
    eventually!(
        within Duration::from_secs(5),
        let running = gauge(&redis, "k").await; running == 5,
        "five `k` jobs run at once"
    );
    eventually!(
        within Duration::from_secs(30),
        let done = done_of(&redis, "k").await; done == 40,
        "every `k` job completes"
    );
    assert!(gauge_max(&redis, "k").await <= 5);
    let listed = c
        .broker()
        .limits(fairjob::inspect::Page::first(100))
        .await
        .unwrap();
    let k = listed.rows.iter().find(|l| l.key == "SlotJob:k").unwrap();
    assert_eq!((k.limit, k.running, k.waiting), (Some(5), 0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_holders_slot_is_reclaimed_and_the_waiter_runs() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    fairjob::limit::set_limit(c.broker(), "SlotJob:solo", Some(1), 3)
        .await
        .unwrap();
    let mut holder = worker(redis.url(), redis.ns()).start();
    let solo = |ms| SlotJob {
        key: "solo".into(),
        ms,
    };
    solo(4000).perform_async(&c).await.unwrap();
    eventually!(gauge(&redis, "solo").await == 1, "the first job runs");
    solo(10).perform_async(&c).await.unwrap();
    eventually!(
        within Duration::from_secs(5),
        redis.llen(limit(&redis, "solo").waiters).await == 1,
        "the second job waits"
    );
    let _other = worker(redis.url(), redis.ns()).start();
    holder.signal("KILL");
    let killed = Instant::now();
    let _ = holder.wait_timeout(Duration::from_secs(2));
    eventually!(
        within Duration::from_secs(20),
        let done = done_of(&redis, "solo").await; done == 2,
        "the waiter and the recovered job both complete"
    );
    println!(
        "slot reclaimed and both jobs done {:?} after kill -9",
        killed.elapsed()
    );
    // A job records its end before its finish releases the slot.
    eventually!(
        redis.zcard(limit(&redis, "solo").holders).await == 0,
        "no holder is left once both have finished"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_survive_a_worker_restart_and_a_redis_restart() {
    let mut server =
        RedisServer::start(&["--appendonly", "yes", "--appendfsync", "always"]).unwrap();
    let url = server.url();
    let ns = namespace();
    let redis = Redis::connect(&url, &ns).await;
    let c = redis.client().await;
    fairjob::limit::set_limit(c.broker(), "SlotJob:held", Some(0), 3)
        .await
        .unwrap();
    c.push_bulk(SlotJob::batch("held", 6, 10)).await.unwrap();
    let waiters = limit(&redis, "held").waiters;
    {
        let mut w = worker(&url, &ns).start();
        eventually!(
            let waiting = redis.llen(&waiters).await; waiting == 6,
            "every job waits"
        );
        assert!(w.stop().is_some_and(|s| s.success()));
    }
    drop(c);
    let _: () = redis::cmd("SHUTDOWN")
        .query_async(&mut redis.conn())
        .await
        .unwrap_or(());
    server.restart(&["--appendonly", "yes"]).unwrap();
    let redis = Redis::connect(&url, &ns).await;
    assert_eq!(redis.llen(&waiters).await, 6, "waiters are state in Redis");
    let c = redis.client().await;
    let _w = worker(&url, &ns).start();
    fairjob::limit::set_limit(c.broker(), "SlotJob:held", Some(2), 3)
        .await
        .unwrap();
    eventually!(
        within Duration::from_secs(20),
        let done = done_of(&redis, "held").await; done == 6,
        "the waiters run after the restart"
    );
    assert!(gauge_max(&redis, "held").await <= 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_can_be_tenant_sharded_and_slot_limited() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    let odd = "a b:{c}/é";
    let job = |tenant: &str| ShardSlotJob {
        tenant: tenant.into(),
        ms: 30,
    };
    c.push_bulk((0..6).map(|_| job(odd))).await.unwrap();
    c.push_bulk((0..3).map(|_| job("c"))).await.unwrap();
    let w = redis
        .worker()
        .concurrency(10)
        .queues(queues(&["conv_slots"]));
    let run = fairjob_tests::spawn(w.build().await.unwrap());
    eventually!(
        within Duration::from_secs(20),
        done_of(&redis, odd).await == 6 && done_of(&redis, "c").await == 3,
        "released waiters reach their tenant's shard again: {:?} fenced {}",
        key_sizes(&redis).await,
        redis.stat("fenced").await
    );
    assert_eq!(redis.stat("fenced").await, 0, "no stale completion");
    run.stop().await;
    assert_eq!(gauge_max(&redis, odd).await, 1);
    assert_eq!(gauge_max(&redis, "c").await, 1);
    let running: std::collections::HashMap<String, i64> = redis
        .conn()
        .hgetall(redis.keys().shard("conv_slots").running)
        .await
        .unwrap();
    assert!(
        running.is_empty(),
        "tenant running counts released: {running:?}"
    );
}

/// Every key of the namespace with its type and size, sorted.
async fn key_sizes(redis: &Redis) -> Vec<String> {
    let mut out = Vec::new();
    for k in redis.scan_keys(&redis.key("*")).await {
        let t: String = redis.query(redis::cmd("TYPE").arg(&k)).await;
        let n = match t.as_str() {
            "list" => redis.llen(&k).await,
            "hash" => redis.hlen(&k).await,
            "zset" => redis.zcard(&k).await,
            "set" => redis.scard(&k).await,
            _ => 0,
        };
        out.push(format!("{k} {t} {n}"));
    }
    out
}
