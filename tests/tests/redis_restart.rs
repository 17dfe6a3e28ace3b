//! Redis restarts under load (reliability.md §3 T7, T8): worker processes run a
//! stream of enqueues from a producer that retries on errors; Redis (AOF,
//! `appendfsync always`) is (a) shut down gracefully and (b) killed with
//! `kill -9`, then restarted on the same port and data directory. The workers
//! must keep running and resume, and every enqueue that returned Ok must end in
//! the ledger.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fairjob::{Client, Job};
use fairjob_tests::jobs::LedgerJob;
use fairjob_tests::{
    Ledger, Redis, RedisServer, TestWorker, eventually, ledger_dir, namespace, process_alive,
    redis_cli,
};

const REDIS_ARGS: &[&str] = &["--appendonly", "yes", "--appendfsync", "always"];

#[derive(Debug, Clone, Copy)]
enum Fault {
    /// `redis-cli shutdown` (AOF flushed), then start again.
    Graceful,
    /// `kill -9`, then start again from the AOF.
    Kill9,
}

#[derive(Debug, Default)]
struct Produced {
    ok: Vec<String>,
    errors: u64,
    gave_up: u64,
}

/// Enqueues a 20 ms LedgerJob every ~10 ms for `run_for`, retrying each failed
/// enqueue (a new attempt every 50 ms, up to 200 times).
async fn produce(client: Client, run_for: Duration, out: Arc<Mutex<Produced>>) {
    let until = Instant::now() + run_for;
    while Instant::now() < until {
        let mut attempts = 0;
        loop {
            attempts += 1;
            match LedgerJob::sleeping(20).perform_async(&client).await {
                Ok(jid) => {
                    out.lock().unwrap().ok.push(jid);
                    break;
                }
                Err(_) => {
                    out.lock().unwrap().errors += 1;
                    if attempts >= 200 {
                        out.lock().unwrap().gave_up += 1;
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// For each of `jids`: how often it started, and the keys whose entries name it.
async fn whereabouts(url: &str, ns: &str, dir: &std::path::Path, jids: &[&String]) -> Vec<String> {
    let redis = Redis::connect(url, ns).await;
    let ledger = Ledger::read(dir);
    let mut out = Vec::new();
    for jid in jids.iter().take(5) {
        let mut at = Vec::new();
        for key in redis.scan_keys(&redis.key("*")).await {
            let kind: String = redis.query(redis::cmd("TYPE").arg(&key)).await;
            let entries: Vec<String> = match kind.as_str() {
                "list" => redis.lrange(&key).await,
                "zset" => redis.zrange(&key).await,
                "hash" => redis.query(redis::cmd("HVALS").arg(&key)).await,
                _ => Vec::new(),
            };
            if entries.iter().any(|e| e.contains(jid.as_str())) {
                at.push(key);
            }
        }
        out.push(format!(
            "{jid}: started {} time(s), in {at:?}",
            ledger.started(jid)
        ));
    }
    out
}

async fn restart_under_load(fault: Fault) {
    let mut server = RedisServer::start(REDIS_ARGS).expect("redis-server starts");
    let port = server.port();
    let url = server.url();
    let appendonly = redis_cli(port, &["config", "get", "appendonly"]);
    assert!(appendonly.contains("yes"), "AOF is on: {appendonly}");
    let ns = namespace();
    let dir = ledger_dir("restart");
    let producer_client = Client::builder(&url)
        .namespace(&ns)
        .response_timeout(Duration::from_secs(1))
        .connect_timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    // A lease (3 s) twice as long as Redis is away.
    let worker = TestWorker::new(&url, &ns)
        .queues(["ledger"])
        .flag("--lease", "3s")
        .flag("--heartbeat", "500ms")
        .flag("--reaper-interval", "500ms")
        .ledger(&dir);
    let workers = [worker.start(), worker.start()];
    let produced = Arc::new(Mutex::new(Produced::default()));
    let producer = tokio::spawn(produce(
        producer_client,
        Duration::from_secs(7),
        produced.clone(),
    ));

    // Let work flow, then take Redis away for ~1.5 s (half the lease).
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        Ledger::read(&dir).jobs_ended() > 20,
        "jobs flow before the fault"
    );
    match fault {
        Fault::Graceful => {
            let reply = redis_cli(port, &["shutdown"]);
            eventually!(!process_alive(server.pid()), "redis shuts down: {reply}");
        }
        Fault::Kill9 => server.kill(),
    }
    let down_at = Instant::now();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let before: BTreeSet<String> = Ledger::read(&dir).starts.keys().cloned().collect();
    server.restart(REDIS_ARGS).expect("redis-server restarts");
    let up_at = Instant::now();
    eventually!(
        within Duration::from_secs(20),
        Ledger::read(&dir)
            .starts
            .keys()
            .any(|j| !before.contains(j)),
        "processing resumes after the restart"
    );
    let resumed = up_at.elapsed();

    producer.await.unwrap();
    let (ok, errors, gave_up) = {
        let p = produced.lock().unwrap();
        (p.ok.clone(), p.errors, p.gave_up)
    };
    eventually!(
        within Duration::from_secs(30),
        let lost = Ledger::read(&dir).not_ended(&ok); lost.is_empty(),
        "every enqueue that returned Ok runs ({fault:?}); where the lost ones are: {:?}",
        whereabouts(&url, &ns, &dir, &Ledger::read(&dir).not_ended(&ok)).await
    );
    let dups = Ledger::read(&dir).started_more_than_once();
    println!(
        "redis_restart ({fault:?}): Redis down {:?}; processing resumed {resumed:?} after Redis \
         came back; {} enqueues returned Ok, {errors} failed attempts were retried, {gave_up} \
         given up; none lost; {} jobs started more than once",
        up_at - down_at,
        ok.len(),
        dups.len()
    );
    for w in &workers {
        assert!(
            w.is_running(),
            "worker {} died with Redis ({fault:?})",
            w.pid()
        );
    }
    assert_eq!(gave_up, 0, "the producer gave up on some enqueues");
    assert!(
        resumed <= Duration::from_secs(5),
        "processing resumed only {resumed:?} after Redis came back"
    );
    assert!(ok.len() > 300, "the producer ran: {} enqueues", ok.len());
    drop(workers);
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_redis_restart_under_load_loses_no_acknowledged_enqueue() {
    restart_under_load(Fault::Graceful).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_redis_under_load_loses_no_acknowledged_enqueue() {
    restart_under_load(Fault::Kill9).await;
}

/// Redis loses its data under a running worker (`FLUSHALL`: what a restart
/// without persistence or a failover to an empty replica leaves): the worker
/// says so once, at `warn`, naming the cause, and the fenced completions of
/// the jobs it was running add no warning of their own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_says_once_that_redis_lost_its_data() {
    let redis = Redis::start().await;
    let dir = fairjob_tests::temp_dir("redis-lost");
    let log = dir.join("worker.log");
    let c = redis.client().await;
    for _ in 0..4 {
        LedgerJob::sleeping(2000).perform_async(&c).await.unwrap();
    }
    let ledger = ledger_dir("redis-lost");
    let worker = redis
        .worker_process()
        .queues(["ledger"])
        .ledger(&ledger)
        .log_to(&log)
        .start();
    eventually!(Ledger::read(&ledger).starts.len() == 4, "the four jobs run");
    let _: () = redis.query(&redis::cmd("FLUSHALL")).await;
    eventually!(Ledger::read(&ledger).jobs_ended() == 4, "the four jobs end");
    // Their completions reach Redis and are fenced (counted anew after the flush).
    eventually!(redis.stat("fenced").await == 4, "four completions fenced");
    let text = worker.log();
    assert_eq!(
        text.matches("Redis lost its data").count(),
        1,
        "said once: {text}"
    );
    assert!(text.contains("published again by its pump"), "{text}");
    assert_eq!(
        text.matches("stale completion fenced").count(),
        0,
        "no warning per job: {text}"
    );
    assert!(!text.contains("lease had expired"), "{text}");
}
