//! Fair-tenant rerouting: the gem's own spec scenarios, then the gem's defects
//! fixed (each would fail on the gem's behaviour), and tenant ids as data.

use std::time::Duration;

use fairjob::Job;
use fairjob_examples::EchoJob;
use fairjob_tests::jobs::{BurstJob, TJob};
use fairjob_tests::{Redis, eventually, queues};
use redis::AsyncCommands;
use serde_json::Value;

/// The queue holding job `jid`, and the job.
async fn find(redis: &Redis, jid: &str) -> (String, Value) {
    let queues: Vec<String> = redis.conn().smembers(redis.keys().queues()).await.unwrap();
    for q in queues {
        for job in redis.payloads(&redis.keys().queue(&q)).await {
            if job["jid"] == jid {
                return (q, job);
            }
        }
    }
    panic!("job {jid} is in no queue")
}

/// The queue holding job `jid`.
async fn queue_of(redis: &Redis, jid: &str) -> String {
    find(redis, jid).await.0
}

/// A `TJob` of tenant `foo`: its window is [`foo_window`].
fn foo() -> TJob {
    TJob {
        tenant: "foo".into(),
    }
}

/// `TJob`'s reroute window for tenant `foo`, in the gem's format.
fn foo_window(redis: &Redis) -> String {
    redis.keys().fair_window("TJob", "foo", "whatever")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gems_spec() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    // No rules: the default queue.
    let jid = EchoJob("x".into()).perform_async(&c).await.unwrap();
    assert_eq!(queue_of(&redis, &jid).await, "default");
    // Two rules (1/day → semislow, 1/hour → supaslow); the last matching rule wins.
    let j1 = foo().perform_async(&c).await.unwrap();
    assert_eq!(queue_of(&redis, &j1).await, "whatever");
    let j2 = foo().perform_async(&c).await.unwrap();
    assert_eq!(queue_of(&redis, &j2).await, "whatever_supaslow");
    let bar = TJob {
        tenant: "bar".into(),
    }
    .perform_async(&c)
    .await
    .unwrap();
    assert_eq!(queue_of(&redis, &bar).await, "whatever");
    // After 1 hour + 1 s only the daily rule matches.
    c.set_clock_offset(3601);
    let j3 = foo().perform_async(&c).await.unwrap();
    assert_eq!(queue_of(&redis, &j3).await, "whatever_semislow");
    // After another day + 1 s, no rule matches.
    c.set_clock_offset(3601 + 86_401);
    let j4 = foo().perform_async(&c).await.unwrap();
    assert_eq!(queue_of(&redis, &j4).await, "whatever");
    // The window key is the gem's, scored in integer seconds, with the gem's TTL.
    let mut r = redis.conn();
    let key = foo_window(&redis);
    assert!(key.ends_with(":sidekiq-fair_tenant:enqueued:TJob:tenant:foo"));
    let members: Vec<(String, f64)> = r.zrange_withscores(&key, 0, -1).await.unwrap();
    assert!(
        members
            .iter()
            .all(|(m, s)| m.starts_with("jid:") && s.fract() == 0.0),
        "{members:?}"
    );
    let ttl: i64 = r.ttl(&key).await.unwrap();
    assert!(ttl > 86_000 && ttl <= 86_400, "ttl {ttl}");
    // Rules travel in the payload, like the gem's.
    let v = find(&redis, &j1).await.1;
    assert_eq!(v["fair_tenant_queues"][0]["queue"], "whatever_semislow");
    assert_eq!(v["fair_tenant_queues"][1]["per"], 3600);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_explicit_queue_is_neither_rerouted_nor_counted() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    for _ in 0..3 {
        let jid = foo().queue("another").perform_async(&c).await.unwrap();
        assert_eq!(queue_of(&redis, &jid).await, "another");
    }
    let counted = redis.zcard(foo_window(&redis)).await;
    assert_eq!(counted, 0, "explicit-queue jobs use no quota");
    let jid = foo().perform_async(&c).await.unwrap();
    assert_eq!(queue_of(&redis, &jid).await, "whatever");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_enqueuers_cannot_slip_under_the_threshold() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    let mut tasks = Vec::new();
    for _ in 0..60 {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            BurstJob("acme".into()).perform_async(&c).await.unwrap()
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let kept = redis.llen(redis.keys().queue("burst")).await;
    let moved = redis.llen(redis.keys().queue("burst_slow")).await;
    assert_eq!(
        (kept, moved),
        (2, 58),
        "exactly `threshold` stay in the original queue"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_bulk_sends_each_job_to_its_own_final_queue() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    let jobs = (0..5)
        .map(|_| BurstJob("acme".into()))
        .chain((0..2).map(|_| BurstJob("other".into())));
    let jids = c.push_bulk(jobs).await.unwrap();
    assert_eq!(jids.iter().filter(|j| j.is_some()).count(), 7);
    let burst = redis.lrange(redis.keys().queue("burst")).await;
    let slow = redis.payloads(&redis.keys().queue("burst_slow")).await;
    assert_eq!((burst.len(), slow.len()), (4, 3));
    for v in &slow {
        assert_eq!(
            v["queue"], "burst_slow",
            "the payload's queue matches the list it is in"
        );
        assert_eq!(v["fairjob_original_queue"], "burst");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_job_is_judged_against_its_original_queue_and_uses_no_new_quota() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    foo().perform_async(&c).await.unwrap();
    let j2 = foo().perform_async(&c).await.unwrap();
    assert_eq!(queue_of(&redis, &j2).await, "whatever_supaslow");
    // Job 2 fails and sits in `retry` until well past every window.
    let keys = redis.keys();
    let mut r = redis.conn();
    let mut failed = find(&redis, &j2).await.1;
    let _: () = r.del(keys.queue("whatever_supaslow")).await.unwrap();
    failed["retry_count"] = 0.into();
    let _: () = r.zadd(keys.retry(), failed.to_string(), 0).await.unwrap();
    let later = 86_400 + 3600 + 5;
    let w = redis
        .worker()
        .clock_offset(later)
        .registry({
            let mut reg = fairjob::Registry::new();
            reg.register::<fairjob_tests::jobs::NoopJob>().unwrap();
            reg
        })
        .queues(queues(&["nothing"]))
        .build()
        .await
        .unwrap();
    let run = fairjob_tests::spawn(w);
    eventually!(
        redis.llen(keys.queue("whatever")).await == 2,
        "the retry returns to `whatever`, not to the slow queue it was rerouted to"
    );
    run.stop().await;
    let counted = redis.zcard(foo_window(&redis)).await;
    assert_eq!(
        counted, 1,
        "only the re-pushed jid remains in the window (the other aged out); no new member"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_ids_are_data() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    let long = "x".repeat(10 * 1024);
    let tenants = [
        ":",
        "a:b",
        "{",
        "}",
        "a}b",
        "*",
        "?",
        "with space",
        "new\nline",
        "nul\0byte",
        "é",
        "e\u{301}",
        long.as_str(),
    ];
    for t in tenants {
        for _ in 0..3 {
            BurstJob(t.to_owned()).perform_async(&c).await.unwrap();
        }
    }
    let keys = redis.keys();
    for t in tenants {
        let key = keys.fair_window("BurstJob", t, "burst");
        assert!(key.ends_with(&format!(
            ":sidekiq-fair_tenant:enqueued:BurstJob:tenant:{t}"
        )));
        let n = redis.zcard(&key).await;
        assert_eq!(
            n,
            3,
            "tenant {:?} has its own window",
            &t[..t.len().min(20)]
        );
    }
    let kept = redis.llen(keys.queue("burst")).await;
    assert_eq!(
        kept,
        2 * tenants.len(),
        "each tenant got exactly its own quota"
    );
    // An empty tenant is no tenant: not counted.
    BurstJob(String::new()).perform_async(&c).await.unwrap();
    let empty: Vec<String> = redis
        .conn()
        .keys(keys.fair_window("BurstJob", "", "burst"))
        .await
        .unwrap();
    assert!(empty.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_detection_order_explicit_then_middleware_then_attribute() {
    let redis = Redis::start().await;
    // A middleware that sets the tenant of the "current request" unless one is set.
    let c = fairjob::Client::builder(redis.url())
        .namespace(redis.ns())
        .middleware(fairjob::client_middleware_fn(|mut job, next| async move {
            job.set_tenant_if_absent("from-request");
            next.run(job).await
        }))
        .build()
        .await
        .unwrap();
    let tenant_of = |jid: String| {
        let redis = redis.clone();
        async move {
            let (_, job) = find(&redis, &jid).await;
            job["fair_tenant"].as_str().unwrap().to_owned()
        }
    };
    let job = || TJob {
        tenant: "from-attribute".into(),
    };
    // 1. explicit `.set_tenant()` wins over the middleware and the attribute;
    let jid = job()
        .set_tenant("explicit")
        .perform_async(&c)
        .await
        .unwrap();
    assert_eq!(tenant_of(jid).await, "explicit");
    // 2. a tenant set by an earlier middleware wins over the attribute.
    let jid = job().perform_async(&c).await.unwrap();
    assert_eq!(tenant_of(jid).await, "from-request");
    // 3. without either, the attribute.
    let plain = redis.client().await;
    let jid = job().perform_async(&plain).await.unwrap();
    assert_eq!(tenant_of(jid).await, "from-attribute");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_job_is_counted_once_when_it_becomes_due() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    let window = foo_window(&redis);
    foo()
        .perform_in(&c, Duration::from_millis(300))
        .await
        .unwrap();
    assert_eq!(
        redis.zcard(&window).await,
        0,
        "not counted while it waits in `schedule`"
    );
    let w = redis.worker().queues(queues(&["nothing"]));
    let run = fairjob_tests::spawn(w.build().await.unwrap());
    eventually!(
        redis.llen(redis.keys().queue("whatever")).await == 1,
        "the job is pushed when due"
    );
    run.stop().await;
    assert_eq!(redis.zcard(&window).await, 1, "counted once, when pushed");
}

/// Two rules of different periods (the hour's wins when both match), for
/// counts that differ per period.
#[allow(clippy::duplicated_attributes)] // rust-clippy#13238
#[derive(Debug, serde::Serialize, serde::Deserialize, fairjob::Job)]
#[job(class = "CountJob", queue = "count")]
#[fair_tenant(0)]
#[throttle(queue = "count_day", threshold = 5, per = "1d")]
#[throttle(queue = "count_hour", threshold = 3, per = "1h")]
struct CountJob(String, u32);

impl fairjob::Perform for CountJob {
    async fn perform(self, _cx: &fairjob::JobContext) -> Result<(), fairjob::JobError> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_push_judges_each_job_as_lone_pushes_would() {
    use fairjob::{IntoPush, PushJob};
    // `push.lua` keeps a window's counts between the jobs of one call; a
    // re-pushed jid (already counted, maybe in another period) must be
    // counted as a lone push counts it.
    let payload = |tenant: &str, n: u32| {
        CountJob(tenant.into(), n)
            .enqueue()
            .set_tenant(tenant)
            .into_push()
            .unwrap()
            .payload()
            .clone()
    };
    // Two hours ago: in the day's window, not in the hour's.
    let old: Vec<_> = (0..3).map(|n| payload("acme", n)).collect();
    let mut now: Vec<_> = (10..16).map(|n| payload("acme", n)).collect();
    now.insert(1, payload("other", 1));
    now.insert(3, now[0].clone()); // counted a moment ago
    now.insert(5, old[0].clone()); // counted two hours ago
    now.insert(7, payload("other", 2));
    now.push(now[2].clone());
    let (lone, bulk) = (Redis::start().await, Redis::start().await);
    let mut lists = Vec::new();
    for (redis, in_bulk) in [(&lone, false), (&bulk, true)] {
        let c = redis.client().await;
        c.set_clock_offset(-7200);
        for p in &old {
            c.push(PushJob::new(p.clone())).await.unwrap();
        }
        c.set_clock_offset(0);
        if in_bulk {
            let jids = c
                .push_bulk(now.iter().cloned().map(PushJob::new))
                .await
                .unwrap();
            assert_eq!(jids.iter().flatten().count(), now.len());
        } else {
            for p in &now {
                c.push(PushJob::new(p.clone())).await.unwrap();
            }
        }
        let mut per_queue = Vec::new();
        for q in ["count", "count_day", "count_hour"] {
            let jids: Vec<Value> = redis
                .payloads(&redis.keys().queue(q))
                .await
                .into_iter()
                .map(|p| p["jid"].clone())
                .collect();
            per_queue.push(jids);
        }
        lists.push(per_queue);
    }
    assert!(
        lists[0].iter().all(|jids| !jids.is_empty()),
        "the sequence reaches every queue: {:?}",
        lists[0]
    );
    assert_eq!(
        lists[0], lists[1],
        "one bulk call chooses the queues that lone pushes choose"
    );
}
