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
    Ledger, RedisServer, WorkerProcess, ledger_dir, namespace, process_alive, redis_cli, wait_for,
    wait_process_exit,
};

const REDIS_ARGS: &[&str] = &["--appendonly", "yes", "--appendfsync", "always"];
const ARGS: &[&str] = &[
    "-q",
    "ledger",
    "-c",
    "5",
    "--lease",
    "3s",
    "--heartbeat",
    "500ms",
    "--reaper-interval",
    "500ms",
    "--poll-interval",
    "100ms",
    "--scheduled-poll-interval",
    "100ms",
    "-t",
    "3s",
];

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
            match (LedgerJob {
                ms: 20,
                abort: false,
            })
            .perform_async(&client)
            .await
            {
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
    let workers: Vec<WorkerProcess> = (0..2)
        .map(|_| WorkerProcess::start(&url, &ns, Some(&*dir), ARGS))
        .collect();
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
            assert!(
                wait_process_exit(server.pid(), Duration::from_secs(10)),
                "redis did not shut down: {reply}"
            );
        }
        Fault::Kill9 => server.kill(),
    }
    let down_at = Instant::now();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let before: BTreeSet<String> = Ledger::read(&dir).starts.keys().cloned().collect();
    server.restart(REDIS_ARGS).expect("redis-server restarts");
    let up_at = Instant::now();
    let mut resumed = None;
    while up_at.elapsed() < Duration::from_secs(20) {
        if Ledger::read(&dir)
            .starts
            .keys()
            .any(|j| !before.contains(j))
        {
            resumed = Some(up_at.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    producer.await.unwrap();
    let (ok, errors, gave_up) = {
        let p = produced.lock().unwrap();
        (p.ok.clone(), p.errors, p.gave_up)
    };
    let all = wait_for(Duration::from_secs(30), || {
        let l = Ledger::read(&dir);
        ok.iter().all(|j| l.ended(j) > 0)
    });
    let l = Ledger::read(&dir);
    let lost: Vec<&String> = ok.iter().filter(|j| l.ended(j) == 0).collect();
    let dups = l.started_more_than_once();
    println!(
        "redis_restart ({fault:?}): Redis down {:?}; processing resumed {resumed:?} after Redis \
         came back; {} enqueues returned Ok, {errors} failed attempts were retried, {gave_up} \
         given up; lost {} of the Ok ones; {} jobs started more than once",
        up_at - down_at,
        ok.len(),
        lost.len(),
        dups.len()
    );
    for w in &workers {
        assert!(
            process_alive(w.pid()),
            "worker {} died with Redis ({fault:?})",
            w.pid()
        );
    }
    assert!(
        all && lost.is_empty(),
        "{} enqueues that returned Ok never ran ({fault:?}): {:?}",
        lost.len(),
        &lost[..lost.len().min(10)]
    );
    assert_eq!(gave_up, 0, "the producer gave up on some enqueues");
    let resumed = resumed.expect("processing never resumed after the restart");
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
