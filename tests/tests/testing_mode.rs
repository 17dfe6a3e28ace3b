//! fairjob's testing mode, as a user's test suite sees it: `Fake` records
//! pushes per instance (parallel tests never meet), runs the client
//! middleware and reroute rules, drains through the server middleware with
//! nested enqueues and retries on a virtual clock, reports failures; inline
//! mode performs at push time; `perform(job)` runs one job's `perform`.
//!
//! No Redis here: that is the point. The reroute choices are compared with a
//! real Redis in `testing_reroute_prop.rs`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, SystemTime};

use fairjob::prelude::*;
use fairjob::testing::{AfterFailure, Fake, perform};
use fairjob::{Client, Error, client_middleware_fn, server_middleware_fn};
use serde::{Deserialize, Serialize};

/// One run: `(queue, tenant, attempt)`.
type Run = (String, Option<String>, u32);

/// What jobs of this file did, by the test's own key (tests run in parallel
/// in one process).
static RUNS: Mutex<Vec<(String, Run)>> = Mutex::new(Vec::new());

fn runs_of(key: &str) -> Vec<Run> {
    RUNS.lock()
        .unwrap()
        .iter()
        .filter(|r| r.0 == key)
        .map(|r| r.1.clone())
        .collect()
}

fn record(key: &str, cx: &JobContext) {
    RUNS.lock().unwrap().push((
        key.to_owned(),
        (
            cx.queue().to_owned(),
            cx.tenant().map(str::to_owned),
            cx.attempt(),
        ),
    ));
}

/// A mail to an account: tenant from the account, one reroute rule.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "TmMail", queue = "mailers", retry = 5)]
#[fair_tenant(account)]
#[throttle(queue = "mailers_bulk", threshold = 2, per = "1h")]
struct Mail {
    account: String,
    key: String,
}

impl Perform for Mail {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        record(&self.key, cx);
        Ok(())
    }
}

/// Enqueues a chain of `depth` more of itself, each from inside `perform`.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "TmChain", queue = "chain")]
struct Chain {
    key: String,
    depth: u32,
}

impl Perform for Chain {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        record(&self.key, cx);
        if self.depth > 0 {
            Chain {
                key: self.key.clone(),
                depth: self.depth - 1,
            }
            .perform_async(cx.client())
            .await?;
            Mail {
                account: format!("from-chain-{}", self.depth),
                key: self.key,
            }
            .perform_async(cx.client())
            .await?;
        }
        Ok(())
    }
}

/// Fails its first `fails` runs.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "TmFlaky", queue = "flaky", retry = 2)]
struct Flaky {
    key: String,
    fails: u32,
}

impl Perform for Flaky {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        record(&self.key, cx);
        if cx.attempt() <= self.fails {
            return Err(JobError::retry(format!("flaky run {}", cx.attempt())));
        }
        Ok(())
    }
}

/// Fails once and is not retried (`retry: false`).
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "TmOnce", queue = "flaky", retry = false)]
struct Once(String);

impl Perform for Once {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        record(&self.0, cx);
        Err(JobError::retry("no second chance"))
    }
}

/// Uses the Redis connection for its own command.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "TmRedisUser")]
struct RedisUser;

impl Perform for RedisUser {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        let mut conn = cx.client().broker().connection();
        redis::cmd("INCR")
            .arg("counter")
            .query_async::<i64>(&mut conn)
            .await?;
        Ok(())
    }
}

/// Counts its runs on the fake it ran on (through the fake's own server
/// middleware), so parallel fakes can check they performed only their own.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "TmCounted", queue = "counted")]
#[throttle(queue = "counted_slow", threshold = 2, per = "1h")]
struct Counted {
    fake: usize,
    n: usize,
}

impl Perform for Counted {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

fn key(name: &str) -> String {
    format!("{name}-{}", &fairjob::payload::new_jid()[..8])
}

#[test]
fn parallel_fakes_never_see_each_others_jobs_windows_or_clocks() {
    const THREADS: usize = 16;
    const JOBS: usize = 40;
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(async move {
                    let performed = Arc::new(Mutex::new(Vec::new()));
                    let seen = performed.clone();
                    let fake = Fake::builder()
                        .server_middleware(server_middleware_fn(move |cx, next| {
                            let seen = seen.clone();
                            async move {
                                seen.lock().unwrap().push(cx.jid().to_owned());
                                next.run(cx).await
                            }
                        }))
                        .build()
                        .unwrap();
                    let client = fake.client();
                    fake.advance(Duration::from_secs(3600 * t as u64));
                    barrier.wait();
                    let mut jids = Vec::new();
                    for n in 0..JOBS {
                        // One tenant name for every thread: each fake's window
                        // must count only its own pushes.
                        let jid = Counted { fake: t, n }
                            .set_tenant("shared")
                            .perform_async(&client)
                            .await
                            .unwrap();
                        jids.push(jid);
                        tokio::task::yield_now().await;
                    }
                    let mine = fake.enqueued::<Counted>();
                    assert_eq!(mine.len(), JOBS, "fake {t} sees exactly its own jobs");
                    assert!(mine.iter().all(|e| e.job.fake == t));
                    let queues: Vec<&str> = mine.iter().map(|e| e.queue.as_str()).collect();
                    assert_eq!(queues[..2], ["counted", "counted"], "fake {t}");
                    assert!(queues[2..].iter().all(|q| *q == "counted_slow"), "fake {t}");
                    // Its own clock.
                    let ahead = fake
                        .now()
                        .duration_since(SystemTime::now())
                        .unwrap_or_default();
                    assert!(
                        ahead.as_secs() + 60 >= 3600 * t as u64
                            && ahead.as_secs() <= 3600 * t as u64,
                        "fake {t} is {ahead:?} ahead"
                    );
                    barrier.wait();
                    assert_eq!(fake.drain().await.unwrap(), JOBS);
                    let ran = performed.lock().unwrap().clone();
                    assert_eq!(ran, jids, "fake {t} performed exactly its own, in order");
                    assert!(fake.enqueued::<Counted>().is_empty());
                });
            })
        })
        .collect();
    for h in handles {
        h.join().expect("a fake's thread panicked");
    }
}

#[tokio::test]
async fn client_middleware_tenants_and_reroute_rules_run_as_in_production() {
    let k = key("mw");
    let fake = Fake::builder()
        // The application's own client builder: its Redis URL is not used.
        .client(
            Client::builder("redis://unused.invalid").middleware(client_middleware_fn(
                |mut job, next| async move {
                    job.payload_mut().set("request_id", "r-1");
                    next.run(job).await
                },
            )),
        )
        .build()
        .unwrap();
    let client = fake.client();
    let mail = |account: &str| Mail {
        account: account.into(),
        key: k.clone(),
    };
    // Tenant from #[fair_tenant]: the third push in the hour is rerouted.
    for _ in 0..3 {
        mail("acme").perform_async(&client).await.unwrap();
    }
    // An explicit tenant wins; an explicit queue is neither rerouted nor counted.
    mail("acme")
        .set_tenant("globex")
        .perform_async(&client)
        .await
        .unwrap();
    mail("acme")
        .queue("vip")
        .perform_async(&client)
        .await
        .unwrap();
    mail("acme")
        .queue("vip")
        .perform_async(&client)
        .await
        .unwrap();
    let got: Vec<(String, Option<String>)> = fake
        .enqueued::<Mail>()
        .into_iter()
        .map(|e| (e.queue, e.tenant))
        .collect();
    let acme = Some("acme".to_owned());
    assert_eq!(
        got,
        vec![
            ("mailers".into(), acme.clone()),
            ("mailers".into(), acme.clone()),
            ("mailers_bulk".into(), acme.clone()),
            ("mailers".into(), Some("globex".into())),
            ("vip".into(), acme.clone()),
            ("vip".into(), acme.clone()),
        ]
    );
    let first = &fake.enqueued::<Mail>()[0];
    assert_eq!(first.payload.get_str("request_id").as_deref(), Some("r-1"));
    assert_eq!(first.payload.get::<u32>("retry"), Some(5));
    // The pinned pushes were not counted: acme's window still holds 3.
    mail("acme").perform_async(&client).await.unwrap();
    assert_eq!(
        fake.enqueued::<Mail>().last().unwrap().queue,
        "mailers_bulk"
    );
    // The window ages on the virtual clock.
    fake.advance(Duration::from_secs(3601));
    mail("acme").perform_async(&client).await.unwrap();
    assert_eq!(fake.enqueued::<Mail>().last().unwrap().queue, "mailers");
    // A re-push of a jid uses no new quota (as a retry's promotion does).
    let repushed = fake.enqueued::<Mail>().last().unwrap().payload.clone();
    for _ in 0..3 {
        client
            .push(fairjob::PushJob::new(repushed.clone()))
            .await
            .unwrap();
    }
    assert!(
        fake.enqueued::<Mail>()[8..]
            .iter()
            .all(|e| e.queue == "mailers")
    );
    // Drained jobs ran from the queue they were pushed to, with their tenant.
    assert_eq!(fake.drain().await.unwrap(), 11);
    let runs = runs_of(&k);
    assert_eq!(runs.len(), 11);
    assert_eq!(runs[2], ("mailers_bulk".into(), acme.clone(), 1));
    assert_eq!(runs[3], ("mailers".into(), Some("globex".into()), 1));
}

#[tokio::test]
async fn drain_performs_nested_enqueues_through_the_server_chain_until_none_is_left() {
    let k = key("chain");
    let order = Arc::new(Mutex::new(Vec::new()));
    let (o1, o2) = (order.clone(), order.clone());
    let fake = Fake::builder()
        .server_middleware(server_middleware_fn(move |cx, next| {
            let o = o1.clone();
            async move {
                o.lock().unwrap().push(format!("outer {}", cx.class()));
                next.run(cx).await
            }
        }))
        .server_middleware(server_middleware_fn(move |cx, next| {
            let o = o2.clone();
            async move {
                o.lock().unwrap().push(format!("inner {}", cx.class()));
                next.run(cx).await
            }
        }))
        .build()
        .unwrap();
    Chain {
        key: k.clone(),
        depth: 3,
    }
    .perform_async(&fake.client())
    .await
    .unwrap();
    // 4 chain links, and a Mail from each of the 3 links that go on.
    assert_eq!(fake.drain().await.unwrap(), 7);
    assert!(fake.enqueued::<Chain>().is_empty() && fake.enqueued::<Mail>().is_empty());
    let queues: Vec<String> = runs_of(&k).into_iter().map(|r| r.0).collect();
    assert_eq!(
        queues,
        [
            "chain", "chain", "mailers", "chain", "mailers", "chain", "mailers"
        ]
    );
    let order = order.lock().unwrap().clone();
    assert_eq!(order.len(), 14);
    assert_eq!(order[..2], ["outer TmChain", "inner TmChain"]);
    // Tenants of jobs enqueued by jobs are resolved as usual.
    assert_eq!(runs_of(&k)[2].1.as_deref(), Some("from-chain-3"));
}

#[tokio::test]
async fn drain_queue_and_perform_one_give_finer_control() {
    let k = key("fine");
    let fake = Fake::new();
    let client = fake.client();
    Chain {
        key: k.clone(),
        depth: 1,
    }
    .perform_async(&client)
    .await
    .unwrap();
    Mail {
        account: "a".into(),
        key: k.clone(),
    }
    .perform_async(&client)
    .await
    .unwrap();
    // Only `chain`, including the link the first one pushes there.
    assert_eq!(fake.drain_queue("chain").await.unwrap(), 2);
    assert_eq!(fake.enqueued::<Mail>().len(), 2);
    assert_eq!(fake.drain_queue("nothing-here").await.unwrap(), 0);
    fake.perform_one::<Mail>().await.unwrap();
    assert_eq!(fake.enqueued::<Mail>().len(), 1);
    assert_eq!(
        fake.enqueued::<Mail>()[0].job.account,
        "from-chain-1",
        "the oldest ran first"
    );
    fake.perform_one::<Mail>().await.unwrap();
    let err = fake.perform_one::<Mail>().await.unwrap_err();
    assert!(matches!(err, Error::Fake(_)), "{err}");
    assert!(err.to_string().contains("TmMail"), "{err}");
}

#[tokio::test]
async fn failures_follow_the_retry_option_on_the_virtual_clock() {
    let k = key("flaky");
    let fake = Fake::new();
    let client = fake.client();
    let jid = Flaky {
        key: k.clone(),
        fails: 1,
    }
    .perform_async(&client)
    .await
    .unwrap();
    let doomed = Flaky {
        key: k.clone(),
        fails: 99,
    }
    .perform_async(&client)
    .await
    .unwrap();
    Once(k.clone()).perform_async(&client).await.unwrap();

    // First runs: all three fail; the drain reports it after running them all.
    let err = fake.drain().await.unwrap_err();
    match &err {
        Error::JobFailed {
            jid: failed,
            error_class,
            message,
            ..
        } => {
            assert_eq!(failed, &jid);
            assert_eq!(error_class, "JobError");
            assert_eq!(message, "flaky run 1");
        }
        other => panic!("{other}"),
    }
    assert_eq!(runs_of(&k).len(), 3);
    let failures = fake.failures();
    assert_eq!(failures.len(), 3);
    let before = fake.now();
    let AfterFailure::Retry { at } = failures[0].next.clone() else {
        panic!("{:?}", failures[0].next)
    };
    // Sidekiq's first backoff: 15 to 24 s.
    let wait = at.duration_since(before).unwrap();
    assert!(wait <= Duration::from_secs(24), "{wait:?}");
    assert_eq!(failures[0].attempt, 1);
    assert_eq!(failures[0].queue, "flaky");
    assert_eq!(failures[2].next, AfterFailure::Dropped, "retry: false");
    // Both retries wait, with their time and Sidekiq's fields.
    let waiting = fake.enqueued::<Flaky>();
    assert_eq!(waiting.len(), 2);
    assert!(waiting.iter().all(|e| e.at.is_some_and(|t| t > before)));
    assert_eq!(waiting[0].payload.get::<u32>("retry_count"), Some(0));
    assert_eq!(
        waiting[0].payload.get_str("error_message").as_deref(),
        Some("flaky run 1")
    );
    // Not due yet: nothing runs.
    assert_eq!(fake.drain().await.unwrap(), 0);
    // Due: the flaky one succeeds on its second run, the doomed one fails again.
    fake.advance(Duration::from_secs(30));
    let err = fake.drain().await.unwrap_err();
    assert!(
        matches!(&err, Error::JobFailed { jid, .. } if *jid == doomed),
        "{err}"
    );
    assert_eq!(fake.enqueued::<Flaky>().len(), 1);
    // Its last retry (retry = 2) is due after the second backoff; then it is dead.
    fake.advance(Duration::from_secs(60));
    fake.drain().await.unwrap_err();
    let failures = fake.failures();
    assert_eq!(failures.len(), 5);
    assert_eq!(failures[4].attempt, 3);
    assert_eq!(failures[4].next, AfterFailure::Dead);
    assert!(fake.enqueued::<Flaky>().is_empty());
    let attempts: Vec<u32> = runs_of(&k).into_iter().map(|r| r.2).collect();
    assert_eq!(attempts, [1, 1, 1, 2, 2, 3]);
}

#[tokio::test]
async fn scheduled_jobs_wait_for_the_virtual_clock() {
    let k = key("sched");
    let fake = Fake::new();
    let client = fake.client();
    let mail = |account: &str| Mail {
        account: account.into(),
        key: k.clone(),
    };
    let hour = Duration::from_secs(3600);
    mail("a").perform_in(&client, hour).await.unwrap();
    mail("b")
        .perform_at(&client, SystemTime::now() + 2 * hour)
        .await
        .unwrap();
    let waiting = fake.enqueued::<Mail>();
    assert_eq!(waiting.len(), 2);
    let in_an_hour = waiting[0].at.unwrap().duration_since(fake.now()).unwrap();
    assert!(in_an_hour <= hour && in_an_hour > hour - Duration::from_secs(60));
    assert_eq!(fake.drain().await.unwrap(), 0);
    fake.advance(hour - Duration::from_secs(60));
    assert_eq!(fake.drain().await.unwrap(), 0);
    fake.advance(Duration::from_secs(61));
    assert_eq!(fake.drain().await.unwrap(), 1);
    assert_eq!(runs_of(&k), [("mailers".into(), Some("a".into()), 1)]);
    fake.advance(hour);
    assert_eq!(fake.drain().await.unwrap(), 1);
    assert_eq!(runs_of(&k).len(), 2);
}

#[tokio::test]
async fn inline_mode_performs_before_the_push_returns() {
    let k = key("inline");
    let fake = Fake::inline();
    let client = fake.client();
    Chain {
        key: k.clone(),
        depth: 2,
    }
    .perform_async(&client)
    .await
    .unwrap();
    // The whole chain ran inside that one push, depth first.
    let queues: Vec<String> = runs_of(&k).into_iter().map(|r| r.0).collect();
    assert_eq!(queues, ["chain", "chain", "chain", "mailers", "mailers"]);
    assert!(fake.enqueued::<Chain>().is_empty());
    // A failure comes back from the push, and is not retried.
    let err = Flaky {
        key: k.clone(),
        fails: 1,
    }
    .perform_async(&client)
    .await
    .unwrap_err();
    assert!(matches!(err, Error::JobFailed { .. }), "{err}");
    assert_eq!(fake.failures()[0].next, AfterFailure::Returned);
    assert!(fake.enqueued::<Flaky>().is_empty());
    // Scheduled jobs wait for the clock, then the drain.
    Mail {
        account: "x".into(),
        key: k.clone(),
    }
    .perform_in(&client, Duration::from_secs(60))
    .await
    .unwrap();
    assert_eq!(runs_of(&k).len(), 6);
    fake.advance(Duration::from_secs(61));
    fake.drain().await.unwrap();
    assert_eq!(runs_of(&k).len(), 7);
}

#[tokio::test]
async fn what_needs_redis_fails_with_a_clear_error_and_never_panics() {
    let fake = Fake::new();
    let err = fake.client().broker().ping().await.unwrap_err();
    assert!(matches!(err, Error::NotInTestingMode(_)), "{err}");
    assert!(
        err.to_string()
            .contains("is not available in fairjob's testing mode"),
        "{err}"
    );
    RedisUser.perform_async(&fake.client()).await.unwrap();
    fake.drain().await.unwrap_err();
    let f = &fake.failures()[0];
    assert!(
        f.message.contains("INCR")
            && f.message
                .contains("not available in fairjob's testing mode"),
        "{}",
        f.message
    );
}

#[tokio::test]
async fn perform_runs_one_job_with_a_chosen_tenant_attempt_and_jid() {
    let k = key("perform");
    perform(Mail {
        account: "acme".into(),
        key: k.clone(),
    })
    .await
    .unwrap();
    perform(Mail {
        account: "acme".into(),
        key: k.clone(),
    })
    .tenant("globex")
    .attempt(3)
    .jid("0123456789abcdef01234567")
    .await
    .unwrap();
    assert_eq!(
        runs_of(&k),
        [
            ("mailers".into(), Some("acme".into()), 1),
            ("mailers".into(), Some("globex".into()), 3)
        ]
    );
    let err = perform(Flaky {
        key: k.clone(),
        fails: 2,
    })
    .attempt(2)
    .await
    .unwrap_err();
    assert_eq!(err.message(), "flaky run 2");
    // What the job enqueues can be looked at on a fake.
    let fake = Fake::new();
    perform(Chain {
        key: k.clone(),
        depth: 1,
    })
    .on(&fake)
    .await
    .unwrap();
    assert_eq!(fake.enqueued::<Chain>()[0].job.depth, 0);
    assert_eq!(
        fake.enqueued::<Mail>()[0].tenant.as_deref(),
        Some("from-chain-1")
    );
}

#[tokio::test]
async fn a_job_that_does_not_survive_its_json_round_trip_fails_the_test() {
    /// Serializes `n` as a string but reads it back as a number.
    #[derive(Debug, Serialize, Job)]
    #[job(class = "TmLopsided")]
    struct Lopsided {
        #[serde(serialize_with = "as_text")]
        n: u32,
    }
    fn as_text<S: serde::Serializer>(n: &u32, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&n.to_string())
    }
    impl<'de> Deserialize<'de> for Lopsided {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            #[derive(Deserialize)]
            struct Raw {
                n: u32,
            }
            Raw::deserialize(d).map(|r| Lopsided { n: r.n })
        }
    }
    impl Perform for Lopsided {
        async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
            Ok(())
        }
    }
    let fake = Fake::new();
    Lopsided { n: 1 }
        .perform_async(&fake.client())
        .await
        .unwrap();
    let looked =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fake.enqueued::<Lopsided>()));
    let msg = looked.unwrap_err();
    let msg = msg.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("does not decode"), "{msg}");
    let err = perform(Lopsided { n: 1 }).await.unwrap_err();
    assert_eq!(err.class(), "ArgumentError");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_fakes_in_one_runtime_stay_apart() {
    let fakes: Vec<Fake> = (0..8).map(|_| Fake::new()).collect();
    let counts = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for (i, fake) in fakes.iter().enumerate() {
        let fake = fake.clone();
        let counts = counts.clone();
        tasks.push(tokio::spawn(async move {
            for n in 0..=i {
                Counted { fake: i, n }
                    .perform_async(&fake.client())
                    .await
                    .unwrap();
                tokio::task::yield_now().await;
            }
            let mine = fake.enqueued::<Counted>();
            assert_eq!(mine.len(), i + 1);
            assert!(mine.iter().all(|e| e.job.fake == i));
            counts.fetch_add(fake.drain().await.unwrap(), Ordering::SeqCst);
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(counts.load(Ordering::SeqCst), (1..=8).sum::<usize>());
}

/// A job of a tenant-sharded queue.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "TmShard", queue = "tm_conversions", shard_by_tenant)]
struct Sharded(String);

impl Perform for Sharded {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        assert!(
            cx.token().is_sharded(),
            "performed as from its tenant's shard"
        );
        record(&self.0, cx);
        Ok(())
    }
}

#[tokio::test]
async fn a_sharded_queue_is_recorded_under_its_queue_with_the_tenant() {
    let k = key("shard");
    let fake = Fake::new();
    for tenant in ["acme", "globex"] {
        Sharded(k.clone())
            .set_tenant(tenant)
            .perform_async(&fake.client())
            .await
            .unwrap();
    }
    let got: Vec<(String, Option<String>)> = fake
        .enqueued::<Sharded>()
        .into_iter()
        .map(|e| (e.queue, e.tenant))
        .collect();
    assert_eq!(
        got,
        [
            ("tm_conversions".into(), Some("acme".into())),
            ("tm_conversions".into(), Some("globex".into()))
        ]
    );
    assert_eq!(fake.drain().await.unwrap(), 2);
    assert_eq!(
        runs_of(&k),
        [
            ("tm_conversions".into(), Some("acme".into()), 1),
            ("tm_conversions".into(), Some("globex".into()), 1)
        ]
    );
}
