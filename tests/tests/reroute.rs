//! Fair-tenant rerouting: the gem's own spec scenarios, then the gem's defects
//! fixed (each would fail on the gem's behaviour), and tenant ids as data.

use std::time::Duration;

use fairjob::Job;
use fairjob_examples::EchoJob;
use fairjob_tests::jobs::{BurstJob, TJob};
use fairjob_tests::{client, namespace, raw, redis, wait_until, worker};
use redis::AsyncCommands;
use serde_json::Value;

async fn queue_of(url: &str, ns: &str, jid: &str) -> String {
    let mut r = raw(url).await;
    let queues: Vec<String> = r.smembers(format!("{ns}:queues")).await.unwrap();
    for q in queues {
        let items: Vec<String> = r.lrange(format!("{ns}:queue:{q}"), 0, -1).await.unwrap();
        if items.iter().any(|i| i.contains(jid)) {
            return q;
        }
    }
    panic!("job {jid} is in no queue")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gems_spec() {
    let server = redis();
    let url = server.url();
    let ns = namespace();
    let c = client(&url, &ns).await;
    // No rules: the default queue.
    let jid = EchoJob("x".into()).perform_async(&c).await.unwrap();
    assert_eq!(queue_of(&url, &ns, &jid).await, "default");
    // Two rules (1/day → semislow, 1/hour → supaslow); the last matching rule wins.
    let foo = || TJob {
        tenant: "foo".into(),
    };
    let j1 = foo().perform_async(&c).await.unwrap();
    assert_eq!(queue_of(&url, &ns, &j1).await, "whatever");
    let j2 = foo().perform_async(&c).await.unwrap();
    assert_eq!(queue_of(&url, &ns, &j2).await, "whatever_supaslow");
    let bar = TJob {
        tenant: "bar".into(),
    }
    .perform_async(&c)
    .await
    .unwrap();
    assert_eq!(queue_of(&url, &ns, &bar).await, "whatever");
    // After 1 hour + 1 s only the daily rule matches.
    c.set_clock_offset(3601);
    let j3 = foo().perform_async(&c).await.unwrap();
    assert_eq!(queue_of(&url, &ns, &j3).await, "whatever_semislow");
    // After another day + 1 s, no rule matches.
    c.set_clock_offset(3601 + 86_401);
    let j4 = foo().perform_async(&c).await.unwrap();
    assert_eq!(queue_of(&url, &ns, &j4).await, "whatever");
    // The window key is the gem's, scored in integer seconds, with the gem's TTL.
    let mut r = raw(&url).await;
    let key = format!("{ns}:sidekiq-fair_tenant:enqueued:TJob:tenant:foo");
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
    let items: Vec<String> = r
        .lrange(format!("{ns}:queue:whatever"), 0, 0)
        .await
        .unwrap();
    let v: Value = serde_json::from_str(&items[0]).unwrap();
    assert_eq!(v["fair_tenant_queues"][0]["queue"], "whatever_semislow");
    assert_eq!(v["fair_tenant_queues"][1]["per"], 3600);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_explicit_queue_is_neither_rerouted_nor_counted() {
    let server = redis();
    let url = server.url();
    let ns = namespace();
    let c = client(&url, &ns).await;
    for _ in 0..3 {
        let jid = TJob {
            tenant: "foo".into(),
        }
        .queue("another")
        .perform_async(&c)
        .await
        .unwrap();
        assert_eq!(queue_of(&url, &ns, &jid).await, "another");
    }
    let mut r = raw(&url).await;
    let counted: u64 = r
        .zcard(format!("{ns}:sidekiq-fair_tenant:enqueued:TJob:tenant:foo"))
        .await
        .unwrap();
    assert_eq!(counted, 0, "explicit-queue jobs use no quota");
    let jid = TJob {
        tenant: "foo".into(),
    }
    .perform_async(&c)
    .await
    .unwrap();
    assert_eq!(queue_of(&url, &ns, &jid).await, "whatever");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_enqueuers_cannot_slip_under_the_threshold() {
    let server = redis();
    let url = server.url();
    let ns = namespace();
    let c = client(&url, &ns).await;
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
    let mut r = raw(&url).await;
    let kept: u64 = r.llen(format!("{ns}:queue:burst")).await.unwrap();
    let moved: u64 = r.llen(format!("{ns}:queue:burst_slow")).await.unwrap();
    assert_eq!(
        (kept, moved),
        (2, 58),
        "exactly `threshold` stay in the original queue"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_bulk_sends_each_job_to_its_own_final_queue() {
    let server = redis();
    let url = server.url();
    let ns = namespace();
    let c = client(&url, &ns).await;
    let jobs = (0..5)
        .map(|_| BurstJob("acme".into()))
        .chain((0..2).map(|_| BurstJob("other".into())));
    let jids = c.push_bulk(jobs).await.unwrap();
    assert_eq!(jids.iter().filter(|j| j.is_some()).count(), 7);
    let mut r = raw(&url).await;
    let burst: Vec<String> = r.lrange(format!("{ns}:queue:burst"), 0, -1).await.unwrap();
    let slow: Vec<String> = r
        .lrange(format!("{ns}:queue:burst_slow"), 0, -1)
        .await
        .unwrap();
    assert_eq!((burst.len(), slow.len()), (4, 3));
    for item in &slow {
        let v: Value = serde_json::from_str(item).unwrap();
        assert_eq!(
            v["queue"], "burst_slow",
            "the payload's queue matches the list it is in"
        );
        assert_eq!(v["fairjob_original_queue"], "burst");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_job_is_judged_against_its_original_queue_and_uses_no_new_quota() {
    let server = redis();
    let url = server.url();
    let ns = namespace();
    let c = client(&url, &ns).await;
    TJob {
        tenant: "foo".into(),
    }
    .perform_async(&c)
    .await
    .unwrap();
    let j2 = TJob {
        tenant: "foo".into(),
    }
    .perform_async(&c)
    .await
    .unwrap();
    assert_eq!(queue_of(&url, &ns, &j2).await, "whatever_supaslow");
    // Job 2 fails and sits in `retry` until well past every window.
    let mut r = raw(&url).await;
    let items: Vec<String> = r
        .lrange(format!("{ns}:queue:whatever_supaslow"), 0, -1)
        .await
        .unwrap();
    let _: () = r
        .del(format!("{ns}:queue:whatever_supaslow"))
        .await
        .unwrap();
    let mut failed: Value = serde_json::from_str(&items[0]).unwrap();
    failed["retry_count"] = 0.into();
    let _: () = r
        .zadd(format!("{ns}:retry"), failed.to_string(), 0)
        .await
        .unwrap();
    let later = 86_400 + 3600 + 5;
    let w = worker(&url, &ns)
        .clock_offset(later)
        .registry({
            let mut reg = fairjob::Registry::new();
            reg.register::<fairjob_tests::jobs::NoopJob>().unwrap();
            reg
        })
        .queues(fairjob::QueueSpec::parse(&["nothing".into()]).unwrap())
        .build()
        .await
        .unwrap();
    let run = fairjob_tests::spawn(w);
    assert!(
        wait_until(Duration::from_secs(10), || async {
            let mut r = raw(&url).await;
            r.llen::<_, u64>(format!("{ns}:queue:whatever"))
                .await
                .unwrap()
                == 2
        })
        .await,
        "the retry returns to `whatever`, not to the slow queue it was rerouted to"
    );
    run.stop().await;
    let counted: u64 = r
        .zcard(format!("{ns}:sidekiq-fair_tenant:enqueued:TJob:tenant:foo"))
        .await
        .unwrap();
    assert_eq!(
        counted, 1,
        "only the re-pushed jid remains in the window (the other aged out); no new member"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_ids_are_data() {
    let server = redis();
    let url = server.url();
    let ns = namespace();
    let c = client(&url, &ns).await;
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
    let mut r = raw(&url).await;
    for t in tenants {
        let key = format!("{ns}:sidekiq-fair_tenant:enqueued:BurstJob:tenant:{t}");
        let n: u64 = r.zcard(&key).await.unwrap();
        assert_eq!(
            n,
            3,
            "tenant {:?} has its own window",
            &t[..t.len().min(20)]
        );
    }
    let kept: u64 = r.llen(format!("{ns}:queue:burst")).await.unwrap();
    assert_eq!(
        kept,
        2 * tenants.len() as u64,
        "each tenant got exactly its own quota"
    );
    // An empty tenant is no tenant: not counted.
    BurstJob(String::new()).perform_async(&c).await.unwrap();
    let keys: Vec<String> = r
        .keys(format!(
            "{ns}:sidekiq-fair_tenant:enqueued:BurstJob:tenant:"
        ))
        .await
        .unwrap();
    assert!(keys.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_detection_order_explicit_then_middleware_then_attribute() {
    let server = redis();
    let url = server.url();
    let ns = namespace();
    // A middleware that sets the tenant of the "current request" unless one is set.
    let c = fairjob::Client::builder(&url)
        .namespace(&ns)
        .middleware(fairjob::client_middleware_fn(|mut job, next| async move {
            job.set_tenant_if_absent("from-request");
            next.run(job).await
        }))
        .build()
        .await
        .unwrap();
    let tenant_of = |jid: String| {
        let url = url.clone();
        let ns = ns.clone();
        async move {
            let mut r = raw(&url).await;
            for q in ["whatever", "whatever_supaslow", "whatever_semislow"] {
                let items: Vec<String> = r.lrange(format!("{ns}:queue:{q}"), 0, -1).await.unwrap();
                if let Some(i) = items.iter().find(|i| i.contains(&jid)) {
                    let v: Value = serde_json::from_str(i).unwrap();
                    return v["fair_tenant"].as_str().unwrap().to_owned();
                }
            }
            panic!("{jid} not found")
        }
    };
    // 1. explicit `.set_tenant()` wins over the middleware and the attribute;
    let jid = TJob {
        tenant: "from-attribute".into(),
    }
    .set_tenant("explicit")
    .perform_async(&c)
    .await
    .unwrap();
    assert_eq!(tenant_of(jid).await, "explicit");
    // 2. a tenant set by an earlier middleware wins over the attribute.
    let jid = TJob {
        tenant: "from-attribute".into(),
    }
    .perform_async(&c)
    .await
    .unwrap();
    assert_eq!(tenant_of(jid).await, "from-request");
    // 3. without either, the attribute.
    let plain = client(&url, &ns).await;
    let jid = TJob {
        tenant: "from-attribute".into(),
    }
    .perform_async(&plain)
    .await
    .unwrap();
    assert_eq!(tenant_of(jid).await, "from-attribute");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_job_is_counted_once_when_it_becomes_due() {
    let server = redis();
    let url = server.url();
    let ns = namespace();
    let c = client(&url, &ns).await;
    let window = format!("{ns}:sidekiq-fair_tenant:enqueued:TJob:tenant:foo");
    TJob {
        tenant: "foo".into(),
    }
    .perform_in(&c, Duration::from_millis(300))
    .await
    .unwrap();
    let mut r = raw(&url).await;
    assert_eq!(
        r.zcard::<_, u64>(&window).await.unwrap(),
        0,
        "not counted while it waits in `schedule`"
    );
    let w = worker(&url, &ns)
        .queues(fairjob::QueueSpec::parse(&["nothing".into()]).unwrap())
        .build()
        .await
        .unwrap();
    let run = fairjob_tests::spawn(w);
    assert!(
        wait_until(Duration::from_secs(10), || async {
            raw(&url)
                .await
                .llen::<_, u64>(format!("{ns}:queue:whatever"))
                .await
                .unwrap()
                == 1
        })
        .await
    );
    run.stop().await;
    assert_eq!(
        r.zcard::<_, u64>(&window).await.unwrap(),
        1,
        "counted once, when pushed"
    );
}
