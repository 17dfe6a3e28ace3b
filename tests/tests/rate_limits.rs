//! Rate limits: at most N starts of a key per period, spread evenly; jobs over
//! the limit wait without holding a worker or spending a retry; other jobs run
//! meanwhile; the rate changes live (0 pauses); a killed worker loses nothing.

use std::time::Duration;

use fairjob::broker::RateKeys;
use fairjob_tests::rate_jobs::{RateFreeJob, RateJob, Start, max_in_window, parse_starts};
use fairjob_tests::{Redis, TestWorker, eventually};

/// A worker process of the queue `rates` at concurrency 10.
fn worker(url: &str, ns: &str) -> TestWorker {
    TestWorker::new(url, ns)
        .queues(["rates"])
        .concurrency(10)
        .flag("-t", "5s")
}

fn limiter(redis: &Redis, key: &str) -> RateKeys {
    redis.keys().rate(&format!("RateJob:{key}"))
}

/// The starts recorded under `key`: (Redis µs, jid), in start order.
async fn starts(redis: &Redis, key: &str) -> Vec<Start> {
    parse_starts(&redis.lrange(redis.key(&format!("started:{key}"))).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starts_are_spread_at_the_rate_and_waiting_jobs_hold_no_worker() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    c.push_bulk(RateJob::batch("hot", 100, 20)).await.unwrap();
    let _w = worker(redis.url(), redis.ns()).start();
    eventually!(
        within Duration::from_secs(10),
        redis.llen(limiter(&redis, "hot").waiters).await > 50,
        "jobs over the rate wait in the limiter's list"
    );
    // Unlimited jobs enqueued after them run at once: nobody holds the workers.
    let free: Vec<RateFreeJob> = (0..100)
        .map(|_| RateFreeJob {
            key: "free".into(),
            ms: 20,
        })
        .collect();
    c.push_bulk(free).await.unwrap();
    eventually!(
        within Duration::from_secs(3),
        starts(&redis, "free").await.len() == 100,
        "unlimited jobs run while the limited ones wait"
    );
    assert!(
        redis.llen(limiter(&redis, "hot").waiters).await > 0,
        "the unlimited jobs finished while limited ones still waited"
    );
    eventually!(
        within Duration::from_secs(15),
        starts(&redis, "hot").await.len() == 100,
        "every limited job starts"
    );
    let hot: Vec<u64> = starts(&redis, "hot").await.iter().map(|s| s.0).collect();
    let most = max_in_window(&hot, 1_000_000);
    let span = Duration::from_micros(hot.last().unwrap() - hot[0]);
    println!("rate_limits: 100 jobs at 20/s: span {span:?}, at most {most} in any 1 s window");
    // The starts are the jobs' own clocks, taken after the limiter let each
    // one go and the worker fetched it: a start the loaded machine delayed
    // lands in the next second beside one on time, so one start over is
    // dispatch jitter (the span below bounds the average rate); a limiter
    // that let 25 a second through would fail here.
    assert!(
        most <= 21,
        "at most 20 starts (+1 of dispatch jitter) in any 1-second window, saw {most}"
    );
    // 99 intervals of 50 ms: 4.95 s, never faster (minus the jitter of the
    // starts after their releases). Slower only by the releaser's lateness
    // (about +5% on a loaded machine; docs/benchmarks-history.md): bounded loosely here, as
    // speed is not asserted.
    assert!(
        span >= Duration::from_millis(4800) && span <= Duration::from_millis(9900),
        "the run lasts about 5 s, took {span:?}"
    );
    assert_eq!(redis.zcard(redis.key("retry")).await, 0, "no retry spent");
    eventually!(
        redis.zcard(redis.keys().rates_due()).await == 0,
        "the release schedule ends empty"
    );
    assert_eq!(redis.llen(limiter(&redis, "hot").waiters).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rate_changes_live_zero_pauses_and_resuming_releases_in_order() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    c.push_bulk(RateJob::batch("k", 120, 5)).await.unwrap();
    let _w = worker(redis.url(), redis.ns()).start();
    eventually!(
        within Duration::from_secs(10),
        starts(&redis, "k").await.len() >= 10,
        "`k` runs"
    );
    // 20/s → 50/s.
    let limits = c.rate_limits();
    limits
        .set("RateJob:k", 50, Duration::from_secs(1))
        .await
        .unwrap();
    let changed = starts(&redis, "k").await.len();
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let s = starts(&redis, "k").await;
    // The second after the first second following the change runs at 50/s.
    let after: Vec<u64> = s[changed..].iter().map(|s| s.0).collect();
    let from = after[0] + 1_000_000;
    let in_second = after
        .iter()
        .filter(|&&t| t >= from && t < from + 1_000_000)
        .count();
    let upto = s.last().unwrap().0;
    println!("rate_limits: {in_second} starts in the second after the change's first");
    if upto >= from + 1_000_000 {
        // Above the old 20/s (the change took effect), never above 50.
        assert!(
            (25..=50).contains(&in_second),
            "50/s within a second of the change, saw {in_second}"
        );
    }
    // 0 pauses (from the CLI).
    let said = redis.cli(&["rate-limits", "pause", "RateJob:k"]);
    assert!(said.contains("paused"), "{said}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let paused_at = starts(&redis, "k").await.len();
    let waiting: Vec<String> = redis
        .lrange(limiter(&redis, "k").waiters)
        .await
        .iter()
        .map(|e| jid_of(e))
        .collect();
    assert!(!waiting.is_empty(), "jobs wait while paused");
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(
        starts(&redis, "k").await.len(),
        paused_at,
        "no start while paused"
    );
    // Back to the declared 20/s: released in their order.
    fairjob::rate::set_rate(c.broker(), "RateJob:k", None, None, None)
        .await
        .unwrap();
    eventually!(
        within Duration::from_secs(10),
        starts(&redis, "k").await.len() == 120,
        "every job starts after resuming"
    );
    let resumed: Vec<String> = starts(&redis, "k").await[paused_at..]
        .iter()
        .map(|s| s.1.clone())
        .collect();
    assert_eq!(resumed, waiting, "released in the order they waited");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_worker_holding_released_jobs_loses_none() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    c.push_bulk(RateJob::batch("kill", 40, 300)).await.unwrap();
    let mut first = worker(redis.url(), redis.ns()).start();
    eventually!(
        within Duration::from_secs(10),
        starts(&redis, "kill").await.len() >= 12,
        "released jobs run on the first worker"
    );
    first.signal("KILL");
    let _ = first.wait_timeout(Duration::from_secs(2));
    let _second = worker(redis.url(), redis.ns()).start();
    eventually!(
        within Duration::from_secs(30),
        let ran = {
            let mut jids: Vec<String> = starts(&redis, "kill").await.into_iter().map(|s| s.1).collect();
            jids.sort();
            jids.dedup();
            jids.len()
        };
        ran == 40,
        "every job runs"
    );
    eventually!(
        redis.llen(limiter(&redis, "kill").waiters).await == 0
            && redis.zcard(redis.keys().rates_due()).await == 0,
        "waiting list and schedule end empty"
    );
}

/// The jid of a waiting entry (length-prefixed fields, the first is the jid).
fn jid_of(entry: &str) -> String {
    let (n, rest) = entry.split_once(':').unwrap();
    rest[..n.parse::<usize>().unwrap()].to_owned()
}

/// Counts its runs (the fake's test of pacing on the virtual clock).
static FAKE_RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Two starts per second per account, in the testing fake.
#[derive(Debug, serde::Serialize, serde::Deserialize, fairjob::Job)]
#[job(queue = "fake_rates")]
#[rate_limit(limit = 2, per = "1s", key = account)]
struct Paced {
    account: u32,
}

impl fairjob::Perform for Paced {
    async fn perform(self, _cx: &fairjob::JobContext) -> Result<(), fairjob::JobError> {
        FAKE_RUNS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
}

#[tokio::test]
async fn the_fake_keeps_jobs_over_the_rate_pending_until_the_clock_advances() {
    use fairjob::Job as _;
    let fake = fairjob::testing::Fake::new();
    let c = fake.client();
    for _ in 0..5 {
        Paced { account: 1 }.perform_async(&c).await.unwrap();
    }
    Paced { account: 2 }.perform_async(&c).await.unwrap();
    // One start now per key (starts are spread: one every 500 ms).
    assert_eq!(fake.drain().await.unwrap(), 2);
    assert_eq!(
        fake.enqueued::<Paced>().len(),
        4,
        "over the rate: still pending"
    );
    fake.advance(Duration::from_millis(500));
    assert_eq!(fake.drain().await.unwrap(), 1);
    fake.advance(Duration::from_secs(10));
    assert_eq!(
        fake.drain().await.unwrap(),
        1,
        "one at a time, never a herd"
    );
    fake.advance(Duration::from_millis(500));
    fake.drain().await.unwrap();
    fake.advance(Duration::from_millis(500));
    fake.drain().await.unwrap();
    assert!(fake.enqueued::<Paced>().is_empty());
    assert_eq!(FAKE_RUNS.load(std::sync::atomic::Ordering::SeqCst), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_limited_by_rate_and_slots_waits_for_each_in_turn() {
    use fairjob_tests::rate_jobs::RateSlotJob;
    let redis = Redis::start().await;
    let c = redis.client().await;
    let jobs = (0..20).map(|_| RateSlotJob {
        key: "both".into(),
        ms: 150,
    });
    c.push_bulk(jobs).await.unwrap();
    let _w = worker(redis.url(), redis.ns()).start();
    eventually!(
        within Duration::from_secs(20),
        starts(&redis, "both").await.len() == 20,
        "every job runs"
    );
    let most: i64 = redis.counter(redis.key("gauge-max:both")).await;
    assert!(most <= 2, "never more than 2 at once, saw {most}");
    let ends: Vec<u64> = starts(&redis, "both").await.iter().map(|s| s.0).collect();
    assert!(max_in_window(&ends, 1_000_000) <= 20);
    let slot = redis.keys().limit("RateSlotJob:both");
    assert_eq!(redis.zcard(slot.holders).await, 0, "no slot leaks");
    let rate = redis.keys().rate("RateSlotJob:both");
    assert_eq!(redis.llen(rate.waiters).await, 0);
    assert_eq!(redis.zcard(redis.key("retry")).await, 0, "no retry spent");
}

/// The starts of `key` on a server the test drives itself: (µs, jid).
async fn starts_at(c: &fairjob::Client, key: &str) -> Vec<Start> {
    let k = format!("{}started:{key}", c.broker().keys().prefix());
    let lines: Vec<String> =
        fairjob_tests::query(c.broker(), redis::cmd("LRANGE").arg(k).arg(0).arg(-1))
            .await
            .unwrap_or_default();
    parse_starts(&lines)
}

async fn len_of(c: &fairjob::Client, cmd: &str, key: String) -> u64 {
    fairjob_tests::query(c.broker(), redis::cmd(cmd).arg(key))
        .await
        .unwrap_or(u64::MAX)
}

/// Distinct jids started, and starts beyond one per jid.
fn ran_and_twice(s: &[Start]) -> (usize, usize) {
    let distinct: std::collections::BTreeSet<&String> = s.iter().map(|x| &x.1).collect();
    (distinct.len(), s.len() - distinct.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restart_from_the_aof_loses_no_waiting_job() {
    const ARGS: &[&str] = &["--appendonly", "yes", "--appendfsync", "always"];
    let mut server = fairjob_tests::RedisServer::start(ARGS).expect("redis-server starts");
    let url = server.url();
    let ns = fairjob_tests::namespace();
    let c = fairjob::Client::builder(&url)
        .namespace(&ns)
        .response_timeout(Duration::from_secs(1))
        .connect_timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    c.push_bulk(RateJob::batch("aof", 80, 50)).await.unwrap();
    let _w = worker(&url, &ns).flag("--lease", "3s").start();
    let waiters = c.broker().keys().rate("RateJob:aof").waiters;
    eventually!(
        within Duration::from_secs(10),
        starts_at(&c, "aof").await.len() >= 15 && len_of(&c, "LLEN", waiters.clone()).await > 20,
        "jobs run and others wait in the limiter's list"
    );
    server.kill();
    tokio::time::sleep(Duration::from_millis(800)).await;
    server.restart(ARGS).expect("redis-server restarts");
    eventually!(
        within Duration::from_secs(60),
        ran_and_twice(&starts_at(&c, "aof").await).0 == 80,
        "every job runs after the restart"
    );
    let (_, twice) = ran_and_twice(&starts_at(&c, "aof").await);
    println!("rate_limits: Redis kill -9 + AOF restart: 80 jobs ran, {twice} started twice");
    assert!(
        twice <= 10,
        "none twice beyond the 10 in flight at the fault, saw {twice}"
    );
    eventually!(
        within Duration::from_secs(10),
        len_of(&c, "LLEN", waiters.clone()).await == 0
            && len_of(&c, "ZCARD", c.broker().keys().rates_due()).await == 0,
        "the waiting list and the release schedule end empty"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_worker_holding_released_jobs_loses_none() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    c.push_bulk(RateJob::batch("frozen", 40, 400))
        .await
        .unwrap();
    let first = worker(redis.url(), redis.ns()).start();
    eventually!(
        within Duration::from_secs(10),
        starts(&redis, "frozen").await.len() >= 8,
        "released jobs run on the first worker"
    );
    // Frozen past its lease (1.5 s) while it holds jobs.
    first.signal("STOP");
    let _second = worker(redis.url(), redis.ns()).start();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let time: Vec<String> = redis.query(&redis::cmd("TIME")).await;
    let cont_us: u64 =
        time[0].parse::<u64>().unwrap() * 1_000_000 + time[1].parse::<u64>().unwrap();
    first.signal("CONT");
    let s = eventually!(
        within Duration::from_secs(30),
        let s = starts(&redis, "frozen").await;
        s.iter().map(|x| &x.1).collect::<std::collections::BTreeSet<_>>().len() == 40,
        "every job runs"
    );
    let _ = s;
    let (_, twice) = ran_and_twice(&starts(&redis, "frozen").await);
    println!("rate_limits: frozen worker: 40 jobs ran, {twice} started twice");
    assert!(
        twice <= 10,
        "none twice beyond the 10 the frozen worker held, saw {twice}"
    );
    // Every start but the frozen worker's stale runs after it woke. A job
    // released to the frozen worker but not started before it froze keeps
    // its counted start when it is recovered (counted once, never twice),
    // so a window around the recovery may hold the limit plus those jobs;
    // jobs it was running pass the limiter again.
    let frozen_pid = first.pid().to_string();
    let live: Vec<u64> = starts(&redis, "frozen")
        .await
        .into_iter()
        .filter(|(t, _, pid)| *pid != frozen_pid || *t < cont_us)
        .map(|(t, _, _)| t)
        .collect();
    let recovered = usize::try_from(redis.stat("recovered").await).unwrap_or(0);
    let most = max_in_window(&live, 1_000_000);
    println!(
        "rate_limits: frozen worker: {recovered} recovered, at most {most} starts in a 1 s window"
    );
    assert!(
        most <= 20 + recovered.min(10),
        "recovered jobs pass the limiter again or keep their one counted start: \
         at most 20 + {recovered} in any 1 s window, saw {most}"
    );
    eventually!(
        redis.llen(limiter(&redis, "frozen").waiters).await == 0
            && redis.zcard(redis.keys().rates_due()).await == 0,
        "waiting list and schedule end empty"
    );
}
