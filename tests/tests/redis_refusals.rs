//! When Redis says no (issue 27): a paced producer and two worker processes
//! through each refusal Redis can answer while it stays up — connections
//! killed, scripts flushed, a read-only replica, out of memory, writes
//! stopped after a failed save (`MISCONF`), a long script (`BUSY`), a
//! restart that stays `LOADING`. Every push succeeds or returns its typed
//! error within the retry deadline, every acknowledged job runs, and a stall
//! of Redis (even longer than a lease) runs no job twice and recovers nobody,
//! a real FAILOVER to a replica and back loses nothing, and a killed worker
//! is still recovered within its lease; while
//! Redis refuses writes, `/readyz`, the dashboard and the metrics say so.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use fairjob::testing::RedisServer;
use fairjob::{Client, Error, Job};
use fairjob_tests::jobs::LedgerJob;
use fairjob_tests::metrics::MetricsWorker;
use fairjob_tests::web::Http;
use fairjob_tests::{Ledger, Redis, TestWorker, eventually, ledger_dir};

/// The producers' retry deadline.
const DEADLINE: Duration = Duration::from_secs(2);
/// What a call may take beyond the deadline (its last attempt, scheduling).
const SLACK: Duration = Duration::from_millis(1500);

/// Two workers of the queue `ledger` with a 1 s lease: a stall of 1.6 s
/// expires every lease, and is shorter than two. Their reapers look three
/// times per heartbeat, so after a stall a reaper runs before its peer renews.
fn worker(redis: &Redis, dir: &std::path::Path) -> TestWorker {
    redis
        .ledger_worker(dir)
        .concurrency(8)
        .flag("--lease", "1s")
        .flag("--heartbeat", "300ms")
        .flag("--reaper-interval", "100ms")
}

/// What a paced producer saw.
#[derive(Debug, Default)]
struct Produced {
    acked: Vec<String>,
    errors: Vec<String>,
    slowest: Duration,
}

/// Pushes a `LedgerJob` of `job_ms` every 25 ms until `stop`, checking that
/// each call ends within the deadline and fails only with a typed error.
fn produce(
    client: Client,
    job_ms: u64,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<Produced> {
    let limit = client.config().retry_deadline + SLACK;
    tokio::spawn(async move {
        let mut out = Produced::default();
        while !stop.load(Ordering::Relaxed) {
            let started = Instant::now();
            let got = LedgerJob::sleeping(job_ms).perform_async(&client).await;
            let took = started.elapsed();
            out.slowest = out.slowest.max(took);
            assert!(took <= limit, "a push took {took:?}: {got:?}");
            match got {
                Ok(jid) => out.acked.push(jid),
                Err(e) => {
                    let text = e.to_string();
                    assert!(
                        matches!(
                            e,
                            Error::Unreachable { .. }
                                | Error::Busy(_)
                                | Error::Loading(_)
                                | Error::ReadOnly(_)
                                | Error::OutOfMemory(_)
                                | Error::WritesStopped(_)
                                | Error::NoScript(_)
                                | Error::MaybeEnqueued { .. }
                        ),
                        "an untyped error: {e:?}"
                    );
                    assert!(!text.contains("Pipeline failures"), "{text}");
                    assert!(!text.contains('\n'), "one line: {text}");
                    out.errors.push(text);
                }
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        out
    })
}

async fn client(redis: &Redis, deadline: Duration) -> Client {
    Client::builder(redis.url())
        .namespace(redis.ns())
        .retry_deadline(deadline)
        .build()
        .await
        .expect("client")
}

/// Runs `cmd` through `redis-cli` (a script that blocks Redis must not
/// block the test's own connection).
fn cli(port: u16, args: &[&str]) -> String {
    let out = std::process::Command::new("redis-cli")
        .arg("-p")
        .arg(port.to_string())
        .args(args)
        .output()
        .expect("redis-cli runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Waits until every acknowledged job has ended, then checks none ran twice.
async fn every_acked_job_ran_once(dir: &std::path::Path, acked: &[String]) {
    eventually!(
        within Duration::from_secs(20),
        let missing = Ledger::read(dir).not_ended(acked).len();
        missing == 0,
        "every acknowledged job runs"
    );
    let ledger = Ledger::read(dir);
    let twice = ledger.started_more_than_once();
    assert!(twice.is_empty(), "jobs ran twice: {twice:?}");
}

/// The issue's own figures: two workers with a 3 s lease (heartbeat 1 s,
/// reaper every 300 ms).
fn worker_3s(redis: &Redis, dir: &std::path::Path) -> TestWorker {
    redis
        .ledger_worker(dir)
        .concurrency(8)
        .flag("--lease", "3s")
        .flag("--heartbeat", "1s")
        .flag("--reaper-interval", "300ms")
}

/// Another client's script that holds Redis for `ms` milliseconds.
fn hold_redis(port: u16, ms: u64) -> tokio::task::JoinHandle<String> {
    let script = format!(
        "local t = redis.call('TIME') local s = t[1] * 1000000 + t[2] \
         while true do local n = redis.call('TIME') \
         if n[1] * 1000000 + n[2] - s > {} then break end end return 1",
        ms * 1000
    );
    tokio::task::spawn_blocking(move || cli(port, &["EVAL", &script, "0"]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_stall_longer_than_the_lease_recovers_nobody_and_a_real_death_still_is() {
    let redis = Redis::start_with(&["--busy-reply-threshold", "100"]).await;
    let port = redis.server().port();
    let dir = ledger_dir("busy-stall");
    let mut a = worker_3s(&redis, &dir).start();
    let _b = worker_3s(&redis, &dir).start();
    eventually!(
        redis.hlen(redis.keys().workers()).await == 2,
        "both workers register"
    );
    let stop = Arc::new(AtomicBool::new(false));
    // Jobs of 300 ms: some are running when the stall ends. The producer's
    // deadline outlasts the stall, so its pushes wait instead of failing.
    let producer = produce(
        client(&redis, Duration::from_secs(6)).await,
        300,
        stop.clone(),
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;

    // Another client's script holds Redis for 4.5 s, one and a half leases:
    // everyone gets BUSY, every lease expires, nobody died.
    assert_eq!(
        hold_redis(port, 4500).await.unwrap().trim(),
        "1",
        "the long script ran"
    );
    // A lease and a half for any wrong recovery to happen.
    tokio::time::sleep(Duration::from_millis(4500)).await;
    assert_eq!(redis.stat("recovered").await, 0, "nobody was recovered");

    // A real death is still recovered within the lease and the reaper's interval.
    let running_on_a = eventually!(
        let jobs = Ledger::read(&dir).in_flight_on(&[a.pid()]);
        !jobs.is_empty(),
        "the worker about to die runs jobs"
    );
    // Freeze the victim first, so the snapshot of what it holds is exact: the
    // jobs it started and not ended, and the ones it ended whose ack was still
    // in its batch (in its in-progress record). Only those may run again.
    a.signal("STOP");
    std::thread::sleep(Duration::from_millis(50));
    let at_kill = Ledger::read(&dir);
    assert!(
        at_kill.started_more_than_once().is_empty(),
        "the stall ran nothing twice: {:?}",
        at_kill.started_more_than_once()
    );
    let mut may_rerun = at_kill.in_flight_on(&[a.pid()]);
    may_rerun.extend(redis.inflight_jids(a.pid()).await);
    a.signal("KILL");
    let killed = Instant::now();
    a.wait_timeout(Duration::from_secs(5));
    eventually!(
        within Duration::from_secs(30),
        redis.stat("recovered").await > 0,
        "the killed worker's jobs are recovered"
    );
    eprintln!(
        "a 4.5 s BUSY stall with 3 s leases: 0 recovered; a kill -9 with {} jobs running \
         ({} started or ended and not yet acknowledged) was recovered after {:?} \
         (lease 3 s + reaper 300 ms)",
        running_on_a.len(),
        may_rerun.len(),
        killed.elapsed()
    );
    stop.store(true, Ordering::Relaxed);
    let produced = producer.await.unwrap();
    assert!(
        produced.errors.is_empty(),
        "a stall shorter than the retry deadline fails no push: {:?}",
        produced.errors
    );
    // Only the jobs the killed worker had in flight may have started twice.
    eventually!(
        within Duration::from_secs(30),
        let missing = Ledger::read(&dir).not_ended(&produced.acked).len();
        missing == 0,
        "every acknowledged job runs"
    );
    let twice = Ledger::read(&dir).started_more_than_once();
    assert!(
        twice.is_subset(&may_rerun),
        "only the killed worker's unacknowledged jobs ran twice: {twice:?} vs {may_rerun:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_failover_and_back_loses_no_acknowledged_job_and_runs_none_twice() {
    let redis = Redis::start().await;
    let primary = redis.server().port();
    let replica = RedisServer::start(&["--replicaof", "127.0.0.1", &primary.to_string()])
        .expect("a replica starts");
    let in_sync = |port: u16| {
        let info = cli(port, &["INFO", "replication"]);
        info.contains("role:master") && info.contains("state=online")
    };
    eventually!(in_sync(primary), "the replica is in sync");
    let dir = ledger_dir("failover");
    let _a = worker_3s(&redis, &dir).start();
    let _b = worker_3s(&redis, &dir).start();
    eventually!(
        redis.hlen(redis.keys().workers()).await == 2,
        "both workers register"
    );
    let stop = Arc::new(AtomicBool::new(false));
    let with_retry = produce(client(&redis, DEADLINE).await, 200, stop.clone());
    let without = produce(client(&redis, Duration::ZERO).await, 200, stop.clone());
    tokio::time::sleep(Duration::from_millis(1500)).await;

    // A real FAILOVER: the primary hands over to its replica and becomes a
    // read-only replica itself; everybody's URL still names it. 4 s later the
    // replica hands back.
    assert!(
        cli(primary, &["FAILOVER"]).contains("OK"),
        "FAILOVER accepted"
    );
    eventually!(
        cli(primary, &["ROLE"]).starts_with("slave"),
        "the old primary is now a replica"
    );
    tokio::time::sleep(Duration::from_secs(4)).await;
    eventually!(
        in_sync(replica.port()),
        "the old primary follows the new one"
    );
    assert!(
        cli(replica.port(), &["FAILOVER"]).contains("OK"),
        "FAILOVER back"
    );
    eventually!(
        cli(primary, &["ROLE"]).starts_with("master"),
        "the first primary is primary again"
    );
    tokio::time::sleep(Duration::from_secs(4)).await;
    stop.store(true, Ordering::Relaxed);
    let with_retry = with_retry.await.unwrap();
    let without = without.await.unwrap();
    eprintln!(
        "pushes through a 4 s FAILOVER and back: with retries {} acked, {} errors; \
         without {} acked, {} errors",
        with_retry.acked.len(),
        with_retry.errors.len(),
        without.acked.len(),
        without.errors.len()
    );
    assert!(
        !without.errors.is_empty(),
        "a push without retries meets the read-only window"
    );
    let mut acked = with_retry.acked;
    acked.extend(without.acked);
    every_acked_job_ran_once(&dir, &acked).await;
    assert_eq!(redis.stat("recovered").await, 0, "nobody was recovered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refusal_is_typed_retried_and_loses_no_acknowledged_job() {
    let redis = Redis::start_with(&["--enable-protected-configs", "yes"]).await;
    let port = redis.server().port();
    let dir = ledger_dir("refusals");
    let _a = worker(&redis, &dir).start();
    let _b = worker(&redis, &dir).start();
    eventually!(
        redis.hlen(redis.keys().workers()).await == 2,
        "both workers register"
    );
    let stop = Arc::new(AtomicBool::new(false));
    let with_retry = produce(client(&redis, DEADLINE).await, 30, stop.clone());
    let without = produce(client(&redis, Duration::ZERO).await, 30, stop.clone());
    let hold = || tokio::time::sleep(Duration::from_millis(700));
    tokio::time::sleep(Duration::from_millis(500)).await;

    // Every client connection dropped (not the test's own).
    cli(port, &["CLIENT", "KILL", "TYPE", "normal"]);
    hold().await;
    // Scripts and function libraries forgotten.
    cli(port, &["SCRIPT", "FLUSH"]);
    cli(port, &["FUNCTION", "FLUSH"]);
    hold().await;
    // Demoted to a read-only replica (of a master that isn't there), then back.
    cli(port, &["REPLICAOF", "127.0.0.1", "1"]);
    hold().await;
    cli(port, &["REPLICAOF", "NO", "ONE"]);
    hold().await;
    // Out of memory, then memory again.
    cli(port, &["CONFIG", "SET", "maxmemory", "1"]);
    hold().await;
    cli(port, &["CONFIG", "SET", "maxmemory", "0"]);
    hold().await;
    // A snapshot fails (its directory is gone): MISCONF until a save works.
    let gone = redis.server().dir().join("gone");
    std::fs::create_dir_all(&gone).unwrap();
    cli(port, &["CONFIG", "SET", "save", "3600 1"]);
    cli(port, &["CONFIG", "SET", "dir", gone.to_str().unwrap()]);
    std::fs::remove_dir_all(&gone).unwrap();
    cli(port, &["BGSAVE"]);
    eventually!(
        cli(port, &["INFO", "persistence"]).contains("rdb_last_bgsave_status:err"),
        "the snapshot fails"
    );
    hold().await;
    cli(
        port,
        &[
            "CONFIG",
            "SET",
            "dir",
            redis.server().dir().to_str().unwrap(),
        ],
    );
    cli(port, &["BGSAVE"]);
    eventually!(
        cli(port, &["INFO", "persistence"]).contains("rdb_last_bgsave_status:ok"),
        "a snapshot works again"
    );
    hold().await;
    stop.store(true, Ordering::Relaxed);
    let with_retry = with_retry.await.unwrap();
    let without = without.await.unwrap();
    eprintln!(
        "pushes through CLIENT KILL, SCRIPT FLUSH, READONLY, OOM, MISCONF: \
         with retries {} acked, {} errors (slowest {:?}); without {} acked, {} errors",
        with_retry.acked.len(),
        with_retry.errors.len(),
        with_retry.slowest,
        without.acked.len(),
        without.errors.len()
    );
    assert!(
        with_retry.errors.len() < without.errors.len(),
        "retries spare the producer errors: {:?} vs {:?}",
        with_retry.errors,
        without.errors
    );
    let mut acked = with_retry.acked;
    acked.extend(without.acked);
    every_acked_job_ran_once(&dir, &acked).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connecting_needs_no_write_and_a_refused_connection_reads_as_unreachable() {
    // A closed port: unreachable, nothing sent, no hint about settings or TLS.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let err = Client::connect(&format!("redis://127.0.0.1:{closed}"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Unreachable {
                maybe_ran: false,
                ..
            }
        ),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        !text.contains("rediss") && !text.contains("invalid"),
        "{text}"
    );

    // A restart that stays LOADING for about two seconds (a delay per key,
    // answering between keys): a client and a worker connect at once; the
    // first push waits or reports `Loading`.
    let mut server = RedisServer::start(&[]).unwrap();
    let port = server.port();
    cli(
        port,
        &[
            "EVAL",
            "for i = 1, 10000 do redis.call('SET', 'k' .. i, i) end return 1",
            "0",
        ],
    );
    cli(port, &["SAVE"]);
    server
        .restart(&[
            "--key-load-delay",
            "100",
            "--loading-process-events-interval-bytes",
            "1024",
            "--enable-protected-configs",
            "yes",
        ])
        .unwrap();
    assert!(
        cli(port, &["PING"]).contains("LOADING"),
        "the server is loading"
    );
    let started = Instant::now();
    let client = Client::builder(server.url())
        .retry_deadline(DEADLINE)
        .build()
        .await
        .expect("connecting needs no write");
    let redis = Redis::connect(&server.url(), "").await;
    redis.worker().build().await.expect("a worker starts");
    match LedgerJob::sleeping(1).perform_async(&client).await {
        Ok(_) | Err(Error::Loading(_)) => {}
        Err(e) => panic!("{e:?}"),
    }
    assert!(
        started.elapsed() <= DEADLINE * 2 + SLACK,
        "{:?}",
        started.elapsed()
    );

    // Writes stopped (MISCONF): connecting still works, the push says why.
    let gone = server.dir().join("gone");
    std::fs::create_dir_all(&gone).unwrap();
    eventually!(!cli(port, &["PING"]).contains("LOADING"), "loaded");
    cli(port, &["CONFIG", "SET", "save", "3600 1"]);
    cli(port, &["CONFIG", "SET", "dir", gone.to_str().unwrap()]);
    std::fs::remove_dir_all(&gone).unwrap();
    cli(port, &["BGSAVE"]);
    eventually!(
        cli(port, &["INFO", "persistence"]).contains("rdb_last_bgsave_status:err"),
        "the snapshot fails"
    );
    let client = Client::builder(server.url())
        .retry_deadline(Duration::from_millis(300))
        .build()
        .await
        .expect("connecting needs no write");
    let err = LedgerJob::sleeping(1)
        .perform_async(&client)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::WritesStopped(_)), "{err:?}");
    assert!(err.to_string().contains("MISCONF"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusing_redis_is_degraded_on_readyz_the_dashboard_and_the_metrics() {
    let redis = Redis::start().await;
    let port = redis.server().port();
    let worker = redis
        .worker_process()
        .queues(["ledger"])
        .flag("--web", "127.0.0.1:0");
    let w = MetricsWorker::start(&worker);
    let web = eventually!(
        let line = w.log().lines().find_map(|l| l.strip_prefix("fairjob dashboard on ").map(|u| u.split_whitespace().next().unwrap_or("").trim_end_matches('/').to_owned()));
        line.is_some(),
        "the dashboard's address"
    )
    .unwrap();
    let get = |url: String| Http::new().get(&url, &[]);
    eventually!(w.status("/readyz") == 200, "ready once fetching");

    // Demoted to a read-only replica: Redis answers but refuses writes.
    cli(port, &["REPLICAOF", "127.0.0.1", "1"]);
    let ready = eventually!(
        let r = get(format!("{}/readyz", w.url)); r.body.starts_with("degraded"),
        "the worker's /readyz says degraded"
    );
    assert_eq!(ready.status, 200, "{}", ready.body);
    assert!(ready.body.contains("read-only"), "{}", ready.body);
    let page = get(format!("{web}/"));
    assert!(
        page.body.contains("Degraded") && page.body.contains("read-only replica"),
        "the overview's banner: {}",
        page.body
    );
    let api = get(format!("{web}/api/")).json();
    assert_eq!(api["redis_refusal"]["kind"], "read_only_replica", "{api}");
    eventually!(
        w.scrape().value(
            fairjob::metrics::REDIS_ERRORS_TOTAL,
            &[("kind", "readonly")]
        ) > 0.0,
        "the worker counts the refusals"
    );

    cli(port, &["REPLICAOF", "NO", "ONE"]);
    eventually!(
        get(format!("{}/readyz", w.url)).body == "ready\n",
        "ready again once Redis takes writes"
    );
    assert!(!get(format!("{web}/")).body.contains("Degraded"));
}
