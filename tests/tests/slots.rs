//! Slot limits: at most N jobs of a key at once across worker processes, waiting
//! jobs hold no worker, limits change live (0 pauses), dead holders' slots come
//! back, waiters survive restarts.

use std::time::{Duration, Instant};

use fairjob::Job;
use fairjob_tests::slot_jobs::SlotJob;
use fairjob_tests::{RedisServer, WorkerProcess, client, namespace, raw, redis, wait_until};
use redis::AsyncCommands;

const ARGS: &[&str] = &[
    "-q",
    "slots",
    "-c",
    "20",
    "--lease",
    "1500ms",
    "--heartbeat",
    "300ms",
    "--reaper-interval",
    "300ms",
    "--poll-interval",
    "100ms",
    "-t",
    "5s",
];

async fn count(url: &str, key: &str) -> u64 {
    raw(url).await.llen(key).await.unwrap()
}

async fn get(url: &str, key: &str) -> i64 {
    raw(url)
        .await
        .get::<_, Option<i64>>(key)
        .await
        .unwrap()
        .unwrap_or(0)
}

async fn done_of(url: &str, ns: &str, key: &str) -> usize {
    let items: Vec<String> = raw(url)
        .await
        .lrange(format!("{ns}:done"), 0, -1)
        .await
        .unwrap();
    items
        .iter()
        .filter(|i| i.rsplit_once(' ').map(|(k, _)| k) == Some(key))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_never_runs_more_than_its_limit_and_waiters_hold_no_worker() {
    let server = redis();
    let url = server.url();
    let ns = namespace();
    let c = client(&url, &ns).await;
    c.push_bulk((0..200).map(|_| SlotJob {
        key: "hot".into(),
        ms: 25,
    }))
    .await
    .unwrap();
    c.push_bulk((0..20).map(|i| SlotJob {
        key: format!("other{i}"),
        ms: 5,
    }))
    .await
    .unwrap();
    let _w1 = WorkerProcess::start(&url, &ns, None, ARGS);
    let _w2 = WorkerProcess::start(&url, &ns, None, ARGS);
    // Every other key's job completes while `hot` still has waiters.
    let others_done = wait_until(Duration::from_secs(20), || async {
        let mut n = 0;
        for i in 0..20 {
            n += done_of(&url, &ns, &format!("other{i}")).await;
        }
        n == 20
    })
    .await;
    assert!(others_done, "jobs of other keys complete");
    let hot_done = done_of(&url, &ns, "hot").await;
    let waiting = count(&url, &format!("{ns}:fairjob:{{lk:SlotJob%3Ahot}}:waiters")).await;
    assert!(
        hot_done < 200 && waiting > 0,
        "others finished while `hot` still waited (done {hot_done}, waiting {waiting})"
    );
    assert!(
        wait_until(Duration::from_secs(60), || async {
            done_of(&url, &ns, "hot").await == 200
        })
        .await,
        "all complete"
    );
    assert!(
        get(&url, &format!("{ns}:gauge-max:hot")).await <= 3,
        "never more than 3 at once"
    );
    assert_eq!(
        get(&url, &format!("{ns}:gauge-max:hot")).await,
        3,
        "and the limit is used"
    );
    let holders: u64 = raw(&url)
        .await
        .zcard(format!("{ns}:fairjob:{{lk:SlotJob%3Ahot}}:holders"))
        .await
        .unwrap();
    assert_eq!(holders, 0, "no slot leaks");
    assert_eq!(
        get(&url, &format!("{ns}:fairjob:stat:fenced")).await,
        0,
        "parking is not a stale completion"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_change_live_zero_pauses_and_raising_releases_waiters_at_once() {
    let server = redis();
    let url = server.url();
    let ns = namespace();
    let c = client(&url, &ns).await;
    c.push_bulk((0..40).map(|_| SlotJob {
        key: "k".into(),
        ms: 200,
    }))
    .await
    .unwrap();
    let _w = WorkerProcess::start(&url, &ns, None, ARGS);
    assert!(
        wait_until(Duration::from_secs(10), || async {
            done_of(&url, &ns, "k").await >= 3
        })
        .await
    );
    // 3 → 0: no new starts of `k`, while other keys keep running.
    fairjob::limit::set_limit(c.broker(), "SlotJob:k", Some(0), 3)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let paused_at = done_of(&url, &ns, "k").await;
    c.push_bulk((0..5).map(|_| SlotJob {
        key: "free".into(),
        ms: 10,
    }))
    .await
    .unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || async {
            done_of(&url, &ns, "free").await == 5
        })
        .await
    );
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        done_of(&url, &ns, "k").await,
        paused_at,
        "no `k` job started while paused"
    );
    assert_eq!(get(&url, &format!("{ns}:gauge:k")).await, 0);
    // 0 → 5: five waiters released at once.
    let released = fairjob::limit::set_limit(c.broker(), "SlotJob:k", Some(5), 3)
        .await
        .unwrap();
    assert_eq!(released, 5);
    assert!(
        wait_until(Duration::from_secs(5), || async {
            get(&url, &format!("{ns}:gauge:k")).await == 5
        })
        .await
    );
    assert!(
        wait_until(Duration::from_secs(30), || async {
            done_of(&url, &ns, "k").await == 40
        })
        .await
    );
    assert!(get(&url, &format!("{ns}:gauge-max:k")).await <= 5);
    let listed = fairjob::limit::list(c.broker()).await.unwrap();
    let k = listed.iter().find(|l| l.key == "SlotJob:k").unwrap();
    assert_eq!((k.limit, k.running, k.waiting), (Some(5), 0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_holders_slot_is_reclaimed_and_the_waiter_runs() {
    let server = redis();
    let url = server.url();
    let ns = namespace();
    let c = client(&url, &ns).await;
    fairjob::limit::set_limit(c.broker(), "SlotJob:solo", Some(1), 3)
        .await
        .unwrap();
    let mut holder = WorkerProcess::start(&url, &ns, None, ARGS);
    SlotJob {
        key: "solo".into(),
        ms: 4000,
    }
    .perform_async(&c)
    .await
    .unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || async {
            get(&url, &format!("{ns}:gauge:solo")).await == 1
        })
        .await
    );
    SlotJob {
        key: "solo".into(),
        ms: 10,
    }
    .perform_async(&c)
    .await
    .unwrap();
    let waiters = format!("{ns}:fairjob:{{lk:SlotJob%3Asolo}}:waiters");
    assert!(
        wait_until(Duration::from_secs(5), || async {
            count(&url, &waiters).await == 1
        })
        .await,
        "the second job waits"
    );
    let _other = WorkerProcess::start(&url, &ns, None, ARGS);
    holder.signal("KILL");
    let killed = Instant::now();
    let _ = holder.wait_timeout(Duration::from_secs(2));
    assert!(
        wait_until(Duration::from_secs(20), || async {
            done_of(&url, &ns, "solo").await == 2
        })
        .await,
        "the waiter and the recovered job both complete"
    );
    println!(
        "slot reclaimed and both jobs done {:?} after kill -9",
        killed.elapsed()
    );
    let holders: u64 = raw(&url)
        .await
        .zcard(format!("{ns}:fairjob:{{lk:SlotJob%3Asolo}}:holders"))
        .await
        .unwrap();
    assert_eq!(holders, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_survive_a_worker_restart_and_a_redis_restart() {
    let server = RedisServer::start(&["--appendonly", "yes", "--appendfsync", "always"]).unwrap();
    let url = server.url();
    let ns = namespace();
    let c = client(&url, &ns).await;
    fairjob::limit::set_limit(c.broker(), "SlotJob:held", Some(0), 3)
        .await
        .unwrap();
    c.push_bulk((0..6).map(|_| SlotJob {
        key: "held".into(),
        ms: 10,
    }))
    .await
    .unwrap();
    let waiters = format!("{ns}:fairjob:{{lk:SlotJob%3Aheld}}:waiters");
    {
        let mut w = WorkerProcess::start(&url, &ns, None, ARGS);
        assert!(
            wait_until(Duration::from_secs(10), || async {
                count(&url, &waiters).await == 6
            })
            .await
        );
        w.signal("TERM");
        assert!(
            w.wait_timeout(Duration::from_secs(10))
                .is_some_and(|s| s.success())
        );
    }
    drop(c);
    let mut server = server;
    let _: () = redis::cmd("SHUTDOWN")
        .query_async(&mut raw(&url).await)
        .await
        .unwrap_or(());
    server.restart(&["--appendonly", "yes"]).unwrap();
    assert_eq!(count(&url, &waiters).await, 6, "waiters are state in Redis");
    let c = client(&server.url(), &ns).await;
    let _w = WorkerProcess::start(&url, &ns, None, ARGS);
    fairjob::limit::set_limit(c.broker(), "SlotJob:held", Some(2), 3)
        .await
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(20), || async {
            done_of(&url, &ns, "held").await == 6
        })
        .await
    );
    assert!(get(&url, &format!("{ns}:gauge-max:held")).await <= 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_can_be_tenant_sharded_and_slot_limited() {
    let server = redis();
    let url = server.url();
    let ns = namespace();
    let c = client(&url, &ns).await;
    let odd = "a b:{c}/é";
    c.push_bulk((0..6).map(|_| fairjob_tests::slot_jobs::ShardSlotJob {
        tenant: odd.into(),
        ms: 30,
    }))
    .await
    .unwrap();
    c.push_bulk((0..3).map(|_| fairjob_tests::slot_jobs::ShardSlotJob {
        tenant: "c".into(),
        ms: 30,
    }))
    .await
    .unwrap();
    let w = fairjob_tests::worker(&url, &ns)
        .concurrency(10)
        .queues(fairjob::QueueSpec::parse(&["conv_slots".into()]).unwrap())
        .build()
        .await
        .unwrap();
    let run = fairjob_tests::spawn(w);
    assert!(
        wait_until(Duration::from_secs(20), || async {
            done_of(&url, &ns, odd).await == 6 && done_of(&url, &ns, "c").await == 3
        })
        .await,
        "released waiters reach their tenant's shard again: {:?} fenced {}",
        {
            let mut r = raw(&url).await;
            let keys: Vec<String> = r.keys(format!("{ns}:*")).await.unwrap();
            let mut out = Vec::new();
            for k in keys {
                let t: String = redis::cmd("TYPE")
                    .arg(&k)
                    .query_async(&mut r)
                    .await
                    .unwrap();
                let n: i64 = match t.as_str() {
                    "list" => r.llen(&k).await.unwrap(),
                    "hash" => r.hlen(&k).await.unwrap(),
                    "zset" => r.zcard(&k).await.unwrap(),
                    "set" => r.scard(&k).await.unwrap(),
                    _ => -1,
                };
                out.push(format!("{k} {t} {n}"));
            }
            out.sort();
            out
        },
        get(&url, &format!("{ns}:fairjob:stat:fenced")).await
    );
    assert_eq!(
        get(&url, &format!("{ns}:fairjob:stat:fenced")).await,
        0,
        "no stale completion"
    );
    run.stop().await;
    assert_eq!(get(&url, &format!("{ns}:gauge-max:{odd}")).await, 1);
    assert_eq!(get(&url, &format!("{ns}:gauge-max:c")).await, 1);
    let running: std::collections::HashMap<String, i64> = raw(&url)
        .await
        .hgetall(
            fairjob::broker::Keys::new(Some(&ns))
                .shard("conv_slots")
                .running,
        )
        .await
        .unwrap();
    assert!(
        running.is_empty(),
        "tenant running counts released: {running:?}"
    );
}
