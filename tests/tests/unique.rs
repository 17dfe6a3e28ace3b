//! Unique jobs on real Redis: one job per key under 1,000 concurrent pushes;
//! the lock held until success (through a retry) or released at start;
//! released when the job dies, and, after `kill -9` of its worker, once the
//! recovered job ends (not at the TTL); `on_conflict = "replace"` as a
//! debounce; duplicates inside one `push_bulk`; a huge argument's key is a
//! fixed-size digest; tenant-sharded queues.

use std::time::{Duration, Instant};

use fairjob::{Bulk, Error, Job, JobContext, JobError, Perform};
use fairjob_tests::jobs::{DebounceJob, UniqueJob, UniqueStartJob};
use fairjob_tests::{Redis, eventually, queues};
use redis::AsyncCommands;
use serde::{Deserialize, Serialize};

/// Every unique lock in the test's namespace: (key, holder jid).
async fn locks(redis: &Redis) -> Vec<(String, String)> {
    let pattern = redis.keys().unique_pattern();
    let mut out = Vec::new();
    for key in redis.scan_keys(&pattern).await {
        let jid: Option<String> = redis.conn().hget(&key, "j").await.unwrap();
        if let Some(jid) = jid {
            out.push((key, jid));
        }
    }
    out
}

fn unique(key: u64, note: &str) -> UniqueJob {
    UniqueJob {
        key,
        note: note.into(),
        sleep_ms: 0,
        fail: false,
    }
}

fn duplicate_of(r: fairjob::Result<String>) -> String {
    match r {
        Err(Error::Duplicate { jid }) => jid,
        other => panic!("expected a duplicate, got {other:?}"),
    }
}

/// The Prometheus recorder of this test process (installed once; every test
/// of this file records into it).
fn recorder() -> &'static metrics_exporter_prometheus::PrometheusHandle {
    static HANDLE: std::sync::OnceLock<metrics_exporter_prometheus::PrometheusHandle> =
        std::sync::OnceLock::new();
    HANDLE.get_or_init(|| {
        fairjob_worker::install_metrics(&fairjob::config::MetricsConfig::default())
            .expect("the recorder installs")
    })
}

/// The sum of `fairjob_unique_rejections_total` over its series for `class`.
fn rejections(class: &str) -> f64 {
    let wanted = format!("fairjob_unique_rejections_total{{class=\"{class}\"}}");
    recorder()
        .render()
        .lines()
        .filter(|l| l.starts_with(&wanted))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_pushes_of_one_key_make_exactly_one_job() {
    let before = rejections(UniqueJob::CLASS);
    let redis = Redis::start().await;
    let c = redis.client().await;
    let tasks: Vec<_> = (0..1000)
        .map(|i| {
            let c = c.clone();
            tokio::spawn(async move { unique(1, &i.to_string()).perform_async(&c).await })
        })
        .collect();
    let mut won = Vec::new();
    let mut holders = Vec::new();
    for t in tasks {
        match t.await.unwrap() {
            Ok(jid) => won.push(jid),
            Err(Error::Duplicate { jid }) => holders.push(jid),
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(won.len(), 1, "exactly one push wins");
    assert_eq!(holders.len(), 999);
    assert!(
        holders.iter().all(|h| *h == won[0]),
        "every duplicate names the winner"
    );
    assert_eq!(redis.llen(redis.keys().queue("unique")).await, 1);
    assert_eq!(locks(&redis).await.len(), 1);
    assert_eq!(locks(&redis).await[0].1, won[0]);
    // Each refusal is counted by the pushing client (other tests of this
    // file may add theirs meanwhile).
    assert!(
        rejections(UniqueJob::CLASS) - before >= 999.0,
        "fairjob_unique_rejections_total counts the 999 refusals:\n{}",
        recorder().render()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn until_success_holds_while_queued_and_running_and_releases_on_success() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    let mut job = unique(2, "first");
    job.sleep_ms = 800;
    let jid = job.perform_async(&c).await.unwrap();
    assert_eq!(
        duplicate_of(unique(2, "queued").perform_async(&c).await),
        jid
    );
    // Another key is another lock.
    unique(3, "other").perform_async(&c).await.unwrap();
    let run = fairjob_tests::spawn(
        redis
            .worker()
            .queues(queues(&["unique"]))
            .build()
            .await
            .unwrap(),
    );
    let inflight = redis.keys().inflight(run.identity());
    eventually!(redis.hlen(&inflight).await >= 1, "the job runs");
    assert_eq!(
        duplicate_of(unique(2, "running").perform_async(&c).await),
        jid,
        "held while running"
    );
    eventually!(locks(&redis).await.is_empty(), "released on success");
    let records = redis.records().await;
    assert!(records.contains(&format!("2 first {jid}")), "{records:?}");
    let again = unique(2, "again").perform_async(&c).await.unwrap();
    assert_ne!(again, jid);
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn until_start_releases_the_key_when_the_job_starts() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    let job = || UniqueStartJob {
        key: 4,
        sleep_ms: 1500,
    };
    let jid = job().perform_async(&c).await.unwrap();
    assert_eq!(duplicate_of(job().perform_async(&c).await), jid);
    let run = fairjob_tests::spawn(
        redis
            .worker()
            .queues(queues(&["unique"]))
            .build()
            .await
            .unwrap(),
    );
    eventually!(locks(&redis).await.is_empty(), "released at start");
    assert!(redis.records().await.is_empty(), "still running");
    let second = job().perform_async(&c).await.unwrap();
    assert_ne!(second, jid, "a new job while the first runs");
    eventually!(redis.recorded().await == 2, "both run");
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_keeps_the_lock_and_dying_releases_it() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    let mut retried = unique(5, "retried");
    retried.fail = true;
    let retried_jid = retried.perform_async(&c).await.unwrap();
    let mut dies = unique(6, "dies");
    dies.fail = true;
    let dies_jid = dies.enqueue().retry(0).perform_async(&c).await.unwrap();
    let run = fairjob_tests::spawn(
        redis
            .worker()
            .queues(queues(&["unique"]))
            .build()
            .await
            .unwrap(),
    );
    eventually!(
        redis.zcard(redis.keys().retry()).await == 1 && redis.zcard(redis.keys().dead()).await == 1,
        "one waits to retry, one is dead"
    );
    eventually!(
        locks(&redis).await.len() == 1,
        "the dead job's lock is released"
    );
    assert_eq!(
        locks(&redis).await[0].1,
        retried_jid,
        "the retrying job keeps its lock"
    );
    assert_eq!(
        duplicate_of(unique(5, "while retrying").perform_async(&c).await),
        retried_jid
    );
    assert_ne!(
        unique(6, "after death").perform_async(&c).await.unwrap(),
        dies_jid
    );
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_the_worker_running_a_unique_job_frees_the_lock_once_the_job_is_recovered() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    // Sleeps a minute unless interrupted before: the recovered run is quick.
    let mut job = unique(7, "long");
    job.sleep_ms = 60_000;
    let jid = job.perform_async(&c).await.unwrap();
    let mut victim = redis.worker_process().queues(["unique"]).start();
    eventually!(
        within Duration::from_secs(20),
        let id = redis.identity_of(victim.pid()).await;
        id.is_some(),
        "the victim is registered"
    );
    let id = redis.identity_of(victim.pid()).await.unwrap();
    eventually!(
        within Duration::from_secs(20),
        redis.hlen(redis.keys().inflight(&id)).await == 1,
        "the victim runs the job"
    );
    victim.signal("KILL");
    let _ = victim.wait_timeout(Duration::from_secs(5));
    let killed = Instant::now();
    assert_eq!(locks(&redis).await[0].1, jid, "the lock follows the job");
    assert_eq!(duplicate_of(unique(7, "dup").perform_async(&c).await), jid);
    // A worker with a 1.5 s lease and a 300 ms reaper recovers the job.
    let run = fairjob_tests::spawn(
        redis
            .worker()
            .queues(queues(&["unique"]))
            .build()
            .await
            .unwrap(),
    );
    eventually!(
        within Duration::from_secs(20),
        locks(&redis).await.is_empty(),
        "released once the recovered job ends"
    );
    assert!(
        killed.elapsed() < Duration::from_secs(60),
        "long before the lock's TTL (1 h)"
    );
    assert!(redis.records().await.contains(&format!("7 long {jid}")));
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replace_debounces_a_scheduled_job_and_updates_a_queued_one() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    let schedule = redis.keys().schedule();
    let job = |note: &str| DebounceJob {
        key: 8,
        note: note.into(),
    };
    let jid = job("a")
        .perform_in(&c, Duration::from_secs(2))
        .await
        .unwrap();
    let first: Vec<(String, f64)> = redis
        .conn()
        .zrange_withscores(&schedule, 0, -1)
        .await
        .unwrap();
    let again = job("b")
        .perform_in(&c, Duration::from_secs(4))
        .await
        .unwrap();
    assert_eq!(again, jid, "the waiting job takes the new arguments");
    let now: Vec<(String, f64)> = redis
        .conn()
        .zrange_withscores(&schedule, 0, -1)
        .await
        .unwrap();
    assert_eq!(now.len(), 1);
    assert!(now[0].0.contains(r#""note":"b""#), "{}", now[0].0);
    assert!(now[0].0.contains(&jid));
    assert!(
        now[0].1 > first[0].1 + 1.0,
        "its due time moved: a debounce"
    );

    // In a plain queue: replaced in place.
    let queued = DebounceJob {
        key: 9,
        note: "x".into(),
    };
    let qjid = queued.perform_async(&c).await.unwrap();
    let y = DebounceJob {
        key: 9,
        note: "y".into(),
    };
    assert_eq!(y.perform_async(&c).await.unwrap(), qjid);
    let waiting = redis.lrange(redis.keys().queue("unique")).await;
    assert_eq!(waiting.len(), 1);
    assert!(waiting[0].contains(r#""note":"y""#) && waiting[0].contains(&qjid));

    let run = fairjob_tests::spawn(
        redis
            .worker()
            .queues(queues(&["unique"]))
            .build()
            .await
            .unwrap(),
    );
    eventually!(
        within Duration::from_secs(15),
        redis.recorded().await == 2,
        "each key runs once"
    );
    let mut records = redis.records().await;
    records.sort();
    assert_eq!(
        records,
        [
            format!("debounce 8 b {jid}"),
            format!("debounce 9 y {qjid}")
        ]
    );
    eventually!(locks(&redis).await.is_empty(), "released");
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_bulk_reports_duplicates_inside_the_batch() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    let out = c
        .push_bulk_report([
            unique(10, "a"),
            unique(11, "b"),
            unique(10, "c"),
            unique(11, "d"),
            unique(12, "e"),
        ])
        .await
        .unwrap();
    let Bulk::Pushed(a) = &out[0] else {
        panic!("{out:?}")
    };
    let Bulk::Pushed(b) = &out[1] else {
        panic!("{out:?}")
    };
    assert!(
        matches!(&out[2], Bulk::Duplicate { holder, .. } if holder == a),
        "{out:?}"
    );
    assert!(
        matches!(&out[3], Bulk::Duplicate { holder, .. } if holder == b),
        "{out:?}"
    );
    assert!(matches!(&out[4], Bulk::Pushed(_)), "{out:?}");
    assert_eq!(redis.llen(redis.keys().queue("unique")).await, 3);
    // The plain form: duplicates are `None`.
    let plain = c
        .push_bulk([unique(10, "f"), unique(13, "g")])
        .await
        .unwrap();
    assert!(plain[0].is_none() && plain[1].is_some(), "{plain:?}");
}

/// A unique job whose key is all of its (possibly huge) arguments.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(queue = "unique_big")]
#[unique(for = "1m")]
struct BigKeyJob(String);

impl Perform for BigKeyJob {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_arguments_key_is_hashed_not_stored() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    let huge = "x".repeat(512 << 10);
    let jid = BigKeyJob(huge.clone()).perform_async(&c).await.unwrap();
    assert_eq!(duplicate_of(BigKeyJob(huge).perform_async(&c).await), jid);
    BigKeyJob("small".into()).perform_async(&c).await.unwrap();
    let all = locks(&redis).await;
    assert_eq!(all.len(), 2);
    for (key, _) in &all {
        assert!(key.len() < 120, "a fixed-size key: {key}");
        let fields: Vec<String> = redis.conn().hgetall::<_, Vec<String>>(key).await.unwrap();
        let size: usize = fields.iter().map(String::len).sum();
        assert!(size < 100, "the lock holds no argument: {fields:?}");
        let ttl: i64 = redis.conn().pttl(key).await.unwrap();
        assert!(
            ttl > 50_000 && ttl <= 60_000,
            "the lock's TTL is `for`: {ttl}"
        );
    }
}

/// A unique job of a tenant-sharded queue.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(queue = "unique_sharded", shard_by_tenant)]
#[fair_tenant(0)]
#[unique(for = "1m")]
struct ShardedUnique(String, u64);

impl Perform for ShardedUnique {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_sharded_queues_and_jobs_enqueued_from_jobs_are_unique_too() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    let jid = ShardedUnique("acme".into(), 1)
        .perform_async(&c)
        .await
        .unwrap();
    assert_eq!(
        duplicate_of(ShardedUnique("acme".into(), 1).perform_async(&c).await),
        jid
    );
    ShardedUnique("acme".into(), 2)
        .perform_async(&c)
        .await
        .unwrap();
    ShardedUnique("beta".into(), 1)
        .perform_async(&c)
        .await
        .unwrap();
    assert_eq!(locks(&redis).await.len(), 3);
    let run = fairjob_tests::spawn(
        redis
            .worker()
            .queues(queues(&["unique_sharded"]))
            .build()
            .await
            .unwrap(),
    );
    eventually!(
        locks(&redis).await.is_empty(),
        "every job ran and released its lock"
    );
    run.stop().await;
}

/// A replacing unique job that takes `ms` to run.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(queue = "replace_limits")]
#[unique(for = "1h", by(key), on_conflict = "replace")]
struct SlowDebounce {
    key: u64,
    note: String,
    ms: u64,
}

impl Perform for SlowDebounce {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        let b = cx.client().broker();
        let line = format!("slow {} {} start", self.key, self.note);
        let key = format!("{}record", b.keys().prefix());
        fairjob_tests::query::<i64>(b, redis::cmd("RPUSH").arg(key).arg(line)).await?;
        tokio::time::sleep(Duration::from_millis(self.ms)).await;
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replace_only_replaces_a_holder_waiting_where_the_new_push_would_wait() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    let job = |key: u64, note: &str| SlowDebounce {
        key,
        note: note.into(),
        ms: 4000,
    };
    // Waiting in `schedule`; an immediate push of the key is refused (it
    // would not wait in `schedule`), and the scheduled holder keeps its
    // arguments.
    let held = job(1, "a")
        .perform_in(&c, Duration::from_secs(3600))
        .await
        .unwrap();
    assert_eq!(duplicate_of(job(1, "b").perform_async(&c).await), held);
    let scheduled: Vec<String> = redis
        .conn()
        .zrange(redis.keys().schedule(), 0, -1)
        .await
        .unwrap();
    assert!(scheduled[0].contains(r#""note":"a""#), "{scheduled:?}");
    // Waiting in its queue; a scheduled push of the key is refused.
    let queued = job(2, "a").perform_async(&c).await.unwrap();
    assert_eq!(
        duplicate_of(job(2, "b").perform_in(&c, Duration::from_secs(60)).await),
        queued
    );
    // Running: refused, the running job keeps its arguments and the lock.
    let run = fairjob_tests::spawn(
        redis
            .worker()
            .queues(queues(&["replace_limits"]))
            .build()
            .await
            .unwrap(),
    );
    eventually!(
        redis.records().await.iter().any(|r| r == "slow 2 a start"),
        "the holder runs"
    );
    assert_eq!(duplicate_of(job(2, "c").perform_async(&c).await), queued);
    assert_eq!(
        redis
            .lrange(redis.keys().queue("replace_limits"))
            .await
            .len(),
        0
    );
    eventually!(
        within Duration::from_secs(15),
        !locks(&redis).await.iter().any(|(_, j)| *j == queued),
        "released when it succeeds"
    );
    run.stop().await;
    let records = redis.records().await;
    assert_eq!(records, ["slow 2 a start"], "only the first push ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replace_searches_only_the_newest_thousand_entries_of_a_queue() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    let job = |key: u64, note: &str| SlowDebounce {
        key,
        note: note.into(),
        ms: 1,
    };
    let queue = redis.keys().queue("replace_limits");
    // 999 newer jobs in front of the holder: found and replaced in place.
    let near = job(1, "a").perform_async(&c).await.unwrap();
    let _ = c.push_bulk((100..1099).map(|k| job(k, "x"))).await.unwrap();
    assert_eq!(
        job(1, "b").perform_async(&c).await.unwrap(),
        near,
        "replaced"
    );
    let list = redis.lrange(&queue).await;
    assert!(
        list.iter().any(|p| p.contains(r#""note":"b""#)),
        "the new arguments wait"
    );
    // 1,000 newer jobs in front: the bounded search does not reach it, and
    // the push is refused, never a second job.
    let _ = c.push_bulk([job(2000, "x")]).await.unwrap();
    assert_eq!(duplicate_of(job(1, "c").perform_async(&c).await), near);
    let list = redis.lrange(&queue).await;
    assert_eq!(list.len(), 1001);
    assert!(
        !list.iter().any(|p| p.contains(r#""note":"c""#)),
        "not replaced"
    );
}

/// A unique job with a reroute rule: a tenant's second job within an hour
/// goes to `ur_slow`.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(queue = "ur")]
#[fair_tenant(tenant)]
#[throttle(queue = "ur_slow", threshold = 1, per = "1h")]
#[unique(for = "1h")]
struct UniqueRerouted {
    tenant: String,
    n: u64,
}

impl Perform for UniqueRerouted {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_scheduled_and_rerouted_unique_jobs_hold_their_keys() {
    use fairjob::testing::RedisCluster;
    let cluster = RedisCluster::start(3, 1, &[]).expect("cluster starts");
    let url = cluster.url();
    let ns = fairjob_tests::namespace();
    let c = fairjob::Client::builder(&url)
        .namespace(&ns)
        .build()
        .await
        .unwrap();
    assert!(c.broker().is_cluster());
    // Scheduled, reject: a second push of the key is refused.
    let held = unique(1, "a")
        .perform_in(&c, Duration::from_secs(600))
        .await
        .unwrap();
    assert_eq!(
        duplicate_of(
            unique(1, "b")
                .perform_in(&c, Duration::from_secs(600))
                .await
        ),
        held
    );
    // Scheduled, replace: a debounce (new arguments and due time, same jid).
    let job = |note: &str| DebounceJob {
        key: 5,
        note: note.into(),
    };
    let jid = job("a")
        .perform_in(&c, Duration::from_secs(60))
        .await
        .unwrap();
    let again = job("b")
        .perform_in(&c, Duration::from_secs(600))
        .await
        .unwrap();
    assert_eq!(again, jid);
    let schedule = c.broker().keys().schedule();
    let entries: Vec<(String, f64)> = fairjob_tests::query(
        c.broker(),
        redis::cmd("ZRANGE")
            .arg(&schedule)
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES"),
    )
    .await
    .unwrap();
    let debounced: Vec<&(String, f64)> = entries
        .iter()
        .filter(|(p, _)| p.contains("DebounceJob"))
        .collect();
    assert_eq!(debounced.len(), 1, "{entries:?}");
    assert!(debounced[0].0.contains(r#""note":"b""#) && debounced[0].0.contains(&jid));
    let now = c.inspector().time().await.unwrap();
    assert!(debounced[0].1 > now + 300.0, "its due time moved");

    // Rerouted: the tenant's second job goes to `ur_slow` (another slot),
    // its lock still in `ur`'s; duplicates of either are refused.
    let ur = |n: u64| UniqueRerouted {
        tenant: "t".into(),
        n,
    };
    let first = ur(1).perform_async(&c).await.unwrap();
    let second = ur(2).perform_async(&c).await.unwrap();
    assert_eq!(duplicate_of(ur(2).perform_async(&c).await), second);
    assert_eq!(duplicate_of(ur(1).perform_async(&c).await), first);
    let slow: Vec<String> = fairjob_tests::query(
        c.broker(),
        redis::cmd("LRANGE")
            .arg(c.broker().keys().queue("ur_slow"))
            .arg(0)
            .arg(-1),
    )
    .await
    .unwrap();
    assert!(
        slow.len() == 1 && slow[0].contains(&second),
        "the second job was rerouted: {slow:?}"
    );
    // Both run; their keys are free again.
    let run = fairjob_tests::spawn(
        fairjob::Worker::builder(&url)
            .namespace(&ns)
            .queues(queues(&["ur", "ur_slow"]))
            .build()
            .await
            .unwrap(),
    );
    let pushed = eventually!(within Duration::from_secs(20),
        let p = ur(2).perform_async(&c).await.ok();
        p.is_some(),
        "the rerouted job's lock is released when it succeeds"
    );
    assert_ne!(pushed.unwrap(), second);
    run.stop().await;
}
