//! A batch under faults, with real worker processes (batches-workflows.md
//! §A4): 10,000 members across 3 tenants on a tenant-sharded queue, two
//! workers, one killed -9 twice mid-batch (a fresh one started each time),
//! and Redis killed -9 and restarted from its AOF. Every member runs, and the
//! batch's `complete` and `success` callbacks are each enqueued once (their
//! derived jids started exactly once, no other callback job exists) and run
//! once, after every member.

use std::collections::BTreeSet;
use std::time::Duration;

use fairjob::Batch;
use fairjob::batch::{Event, callback_jid};
use fairjob::testing::RedisServer;
use fairjob_tests::jobs::{LedgerJob, ShardLedgerJob};
use fairjob_tests::{Ledger, TestWorker, eventually, ledger_dir, namespace};
use rand::Rng;

const MEMBERS: usize = 10_000;
const REDIS_ARGS: &[&str] = &["--appendonly", "yes", "--appendfsync", "always"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_workers_and_redis_fire_each_callback_once_after_every_member() {
    let mut server = RedisServer::start(REDIS_ARGS).expect("redis-server starts");
    let url = server.url();
    let ns = namespace();
    let dir = ledger_dir("batch-faults");
    let c = fairjob::Client::builder(&url)
        .namespace(&ns)
        .build()
        .await
        .unwrap();
    let tenants = ["acme", "t:{x} y", "ünï"];
    let members: Vec<ShardLedgerJob> = {
        let mut rng = rand::rng();
        (0..MEMBERS)
            .map(|i| ShardLedgerJob {
                tenant: tenants[i % 3].into(),
                ms: rng.random_range(1..=8),
            })
            .collect()
    };
    let bid = Batch::new()
        .description("faults")
        .on_complete(LedgerJob::sleeping(0))
        .on_success(LedgerJob::sleeping(0))
        .push_bulk(members)
        .commit(&c)
        .await
        .unwrap();
    let complete = callback_jid(&bid, Event::Complete);
    let success = callback_jid(&bid, Event::Success);

    let worker = TestWorker::new(&url, &ns)
        .queues(["ledger_shards", "ledger"])
        .concurrency(10)
        .flag("--lease", "1500ms")
        .flag("--heartbeat", "300ms")
        .flag("--reaper-interval", "300ms")
        .ledger(&dir);
    let steady = worker.start();
    let mut victim = worker.start();
    let members_ended = |l: &Ledger| {
        l.ends
            .keys()
            .filter(|j| **j != complete && **j != success)
            .count()
    };
    for at in [MEMBERS / 5, MEMBERS / 2] {
        eventually!(
            within Duration::from_secs(120),
            members_ended(&Ledger::read(&dir)) >= at,
            "{at} members end"
        );
        victim.signal("KILL");
        victim = worker.start();
    }
    eventually!(
        within Duration::from_secs(120),
        members_ended(&Ledger::read(&dir)) >= MEMBERS * 7 / 10,
        "70% of the members end"
    );
    server.kill();
    tokio::time::sleep(Duration::from_millis(500)).await;
    server
        .restart(REDIS_ARGS)
        .expect("redis-server restarts from its AOF");

    eventually!(
        within Duration::from_secs(180),
        let l = Ledger::read(&dir); l.ended(&success) >= 1 && l.ended(&complete) >= 1,
        "complete and success run"
    );
    // Give a duplicate every chance to show up.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let l = Ledger::read(&dir);
    assert_eq!(members_ended(&l), MEMBERS, "every member ran");
    assert_eq!(l.started(&complete), 1, "complete ran once");
    assert_eq!(l.started(&success), 1, "success ran once");
    // No other callback job: every started jid is a member or one of the two.
    let started: BTreeSet<&String> = l.starts.keys().collect();
    assert_eq!(started.len(), MEMBERS + 2, "no other job ran");
    // The client's connection broke with the restart: the first read may
    // say so (a clear error); the next one reconnects.
    let mut status = None;
    for _ in 0..20 {
        if let Ok(s) = c.batch_status(&bid).await {
            status = s;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let status = status.expect("the batch is kept");
    assert_eq!((status.pending, status.unsucceeded), (0, 0));
    assert!(status.success_at.unwrap() >= status.complete_at.unwrap());
    let dups = l.started_more_than_once().len();
    println!("batch_faults: {dups} members ran more than once (in flight on the killed workers)");
    drop(steady);
    drop(victim);
}
