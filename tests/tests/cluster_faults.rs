//! fairjob on a real Redis Cluster under faults, with real worker processes
//! (`test-worker`) writing a ledger outside Redis:
//!
//! - a worker killed with `kill -9`: its jobs run again on the others, and
//!   only jobs its in-progress records held when it died run twice (those it
//!   had started and not ended, and those it had ended whose ack was still
//!   in its batch: at-least-once);
//! - resharding under load: the slots of live queues move between primaries
//!   (`CLUSTER SETSLOT … IMPORTING/MIGRATING`, `MIGRATE`, `SETSLOT … NODE`)
//!   while workers drain and a client pushes; nothing is lost, no worker exits;
//! - failover under load: a primary gets `kill -9`, its replica takes over;
//!   jobs enqueued well before the kill all run; with `wait_replicas(1, …)`
//!   every acknowledged push runs even when made right up to the kill; without
//!   it the test reports what the last window lost (asynchronous replication
//!   may lose acknowledged writes: that is what `wait_replicas` is for).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use fairjob::testing::RedisCluster;
use fairjob::{Client, Job};
use fairjob_tests::jobs::LedgerJob;
use fairjob_tests::{Ledger, TestWorker, WorkerProcess, eventually, ledger_dir, namespace};

const QUEUES: [&str; 4] = ["l0", "l1", "l2", "l3"];

/// The slot of `key` and the port of the live primary serving it.
fn owner(cluster: &RedisCluster, key: &str) -> (u16, u16) {
    cluster
        .slot_owner(key)
        .expect("a live primary serves the slot")
}

/// Moves one slot, with its keys, from the primary on `from` to the one on `to`.
fn migrate_slot(cluster: &RedisCluster, slot: u16, from: u16, to: u16) {
    let id = |p: u16| {
        cluster
            .primary_slots()
            .into_iter()
            .find(|c| c.port == p)
            .map(|c| c.id)
            .expect("a primary")
    };
    let (from_id, to_id) = (id(from), id(to));
    let s = slot.to_string();
    let ok = |out: String| assert!(out.contains("OK"), "{out}");
    ok(cluster
        .cli(to, &["CLUSTER", "SETSLOT", &s, "IMPORTING", &from_id])
        .unwrap());
    ok(cluster
        .cli(from, &["CLUSTER", "SETSLOT", &s, "MIGRATING", &to_id])
        .unwrap());
    loop {
        let keys = cluster
            .cli(from, &["CLUSTER", "GETKEYSINSLOT", &s, "50"])
            .unwrap();
        let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
        if keys.is_empty() {
            break;
        }
        let port = to.to_string();
        let mut args = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
        args.extend(keys.iter().copied());
        let out = cluster.cli(from, &args).unwrap();
        assert!(
            out.contains("OK") || out.contains("NOKEY"),
            "MIGRATE: {out}"
        );
        // Let the workers run against the half-moved slot (ASK redirects).
        std::thread::sleep(Duration::from_millis(30));
    }
    // As `redis-cli --cluster reshard` does: the target first, then the
    // source, then the others (the source answering MOVED before the target
    // owns the slot would send clients back and forth).
    let mut order = vec![to, from];
    order.extend(
        cluster
            .primaries()
            .into_iter()
            .filter(|p| *p != to && *p != from),
    );
    for p in order {
        ok(cluster
            .cli(p, &["CLUSTER", "SETSLOT", &s, "NODE", &to_id])
            .unwrap());
    }
}

fn jobs(n: usize, ms: u64) -> Vec<fairjob::Enqueue<LedgerJob>> {
    (0..n)
        .map(|i| LedgerJob::sleeping(ms).queue(QUEUES[i % QUEUES.len()]))
        .collect()
}

async fn push_all(c: &Client, jobs: Vec<fairjob::Enqueue<LedgerJob>>) -> Vec<String> {
    c.push_bulk(jobs)
        .await
        .unwrap()
        .into_iter()
        .map(|j| j.expect("no middleware stops these"))
        .collect()
}

fn worker(url: &str, ns: &str, dir: &std::path::Path) -> TestWorker {
    TestWorker::new(url, ns).queues(QUEUES).ledger(dir)
}

/// Waits until every jid in `jids` has ended at least once.
async fn all_end(dir: &std::path::Path, jids: &[String], within: Duration, what: &str) -> Ledger {
    eventually!(
        within within,
        let ledger = Ledger::read(dir);
        jids.iter().all(|j| ledger.ended(j) > 0),
        "{what}: {} of {} ended",
        jids.iter().filter(|j| ledger.ended(j) > 0).count(),
        jids.len()
    )
}

/// The jids in the in-progress records (one per queue, in the queue's slot)
/// of the worker process `pid`.
async fn held_by(c: &Client, pid: u32) -> BTreeSet<String> {
    let b = c.broker();
    let ids: Vec<String> = fairjob_tests::query(b, redis::cmd("HKEYS").arg(b.keys().workers()))
        .await
        .expect("HKEYS");
    let needle = format!(":{pid}:");
    let id = ids
        .into_iter()
        .find(|id| id.contains(&needle))
        .expect("a running worker is registered");
    let mut held = BTreeSet::new();
    for q in QUEUES {
        let payloads: Vec<String> =
            fairjob_tests::query(b, redis::cmd("HVALS").arg(b.keys().shard(q).inflight(&id)))
                .await
                .expect("HVALS");
        for p in payloads {
            let v: serde_json::Value = serde_json::from_str(&p).expect("a JSON payload");
            held.insert(v["jid"].as_str().expect("a jid").to_owned());
        }
    }
    held
}

fn assert_running(ws: &mut [&mut WorkerProcess]) {
    for w in ws {
        assert!(w.is_running(), "worker {} exited:\n{}", w.pid(), w.log());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_workers_jobs_run_again_and_only_those_run_twice() {
    let cluster = RedisCluster::start(3, 0, &[]).expect("cluster starts");
    let url = cluster.url();
    let ns = namespace();
    let c = Client::builder(&url).namespace(&ns).build().await.unwrap();
    let dir = ledger_dir("cluster-kill");
    let jids = push_all(&c, jobs(300, 40)).await;

    // A lease long enough that a live worker starved of CPU on a loaded
    // machine keeps its jobs: only the killed worker's may run twice.
    let w = worker(&url, &ns, &dir).flag("--lease", "5s");
    let victim = w.start();
    let mut other = w.start();
    eventually!(
        within Duration::from_secs(20),
        Ledger::read(&dir).jobs_ended() >= 60,
        "the workers get going"
    );
    // Frozen first, so the snapshot of what its records hold is exact.
    victim.signal("STOP");
    let victim_pid = victim.pid();
    let held = held_by(&c, victim_pid).await;
    victim.signal("KILL");
    let mut fresh = w.start();
    let ledger = all_end(&dir, &jids, Duration::from_secs(40), "every job ends").await;
    for jid in &jids {
        let starts = ledger.starts.get(jid).cloned().unwrap_or_default();
        if starts.len() > 1 {
            assert!(
                // The ledger is read file by file, so `starts` is not in
                // time order: one start was the killed worker's, and its
                // record still held the job (unfinished, or ended with its
                // ack still in the worker's batch).
                starts.len() == 2 && starts.contains(&victim_pid) && held.contains(jid),
                "{jid} ran twice though the killed worker ({victim_pid}) did not hold it when it died: {starts:?}"
            );
        }
    }
    assert_running(&mut [&mut other, &mut fresh]);
    other.stop();
    fresh.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slots_of_live_queues_move_between_primaries_under_load() {
    let cluster = RedisCluster::start(3, 0, &[]).expect("cluster starts");
    let url = cluster.url();
    let ns = namespace();
    let c = Client::builder(&url).namespace(&ns).build().await.unwrap();
    let dir = ledger_dir("cluster-reshard");
    let mut jids = push_all(&c, jobs(600, 15)).await;

    let w = worker(&url, &ns, &dir);
    let mut a = w.start();
    let mut b = w.start();
    eventually!(
        within Duration::from_secs(20),
        Ledger::read(&dir).jobs_ended() >= 50,
        "the workers get going"
    );
    // A client keeps pushing while the slots move.
    let producer = {
        let c = c.clone();
        tokio::spawn(async move {
            let mut pushed = Vec::new();
            for i in 0..150 {
                let j = LedgerJob::sleeping(5).queue(QUEUES[i % QUEUES.len()]);
                pushed.push(j.perform_async(&c).await.expect("a push during resharding"));
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            pushed
        })
    };
    // Every key of the first two queues (their lists and wake-up lists) moves
    // to another primary.
    let keys = c.broker().keys().clone();
    let mut moved = BTreeSet::new();
    for q in &QUEUES[..2] {
        for key in [keys.queue(q), c.broker().wake_key(q, false)] {
            let (slot, from) = owner(&cluster, &key);
            if !moved.insert(slot) {
                continue;
            }
            let to = cluster
                .primaries()
                .into_iter()
                .find(|p| *p != from)
                .unwrap();
            tokio::task::block_in_place(|| migrate_slot(&cluster, slot, from, to));
            assert_eq!(owner(&cluster, &key).1, to, "slot {slot} moved");
        }
    }
    assert!(!moved.is_empty());
    jids.extend(producer.await.unwrap());
    all_end(&dir, &jids, Duration::from_secs(60), "every job ends").await;
    let ledger = Ledger::read(&dir);
    let twice: Vec<&String> = jids.iter().filter(|j| ledger.started(j) > 1).collect();
    assert!(
        twice.is_empty(),
        "no worker failed, yet these ran twice: {twice:?}"
    );
    assert_running(&mut [&mut a, &mut b]);
    a.stop();
    b.stop();
}

/// Kills the primary that serves `key` and waits for its replica to serve
/// the slot; returns the killed port.
async fn fail_over(cluster: &mut RedisCluster, key: &str) -> u16 {
    let (_, victim) = owner(cluster, key);
    cluster.node(victim).unwrap().kill();
    let started = Instant::now();
    eventually!(
        within Duration::from_secs(20),
        tokio::task::block_in_place(|| cluster.slot_owner(key)).is_some_and(|(_, p)| p != victim
            && cluster.cli(p, &["CLUSTER", "INFO"]).is_ok_and(|i| i.contains("cluster_state:ok"))),
        "a replica takes over from {victim}"
    );
    eprintln!("failover of {victim} took {:?}", started.elapsed());
    victim
}

/// Pushes jobs one by one until `stop`, keeping the jids of the pushes that
/// were acknowledged and counting those that failed.
async fn produce(c: Client, stop: tokio::sync::watch::Receiver<bool>) -> (Vec<String>, usize) {
    let (mut acked, mut failed) = (Vec::new(), 0);
    let mut i = 0;
    while !*stop.borrow() {
        let j = LedgerJob::sleeping(1).queue(QUEUES[i % QUEUES.len()]);
        i += 1;
        match j.perform_async(&c).await {
            Ok(jid) => acked.push(jid),
            Err(_) => failed += 1,
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    (acked, failed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_fails_over_under_load_and_acknowledged_jobs_run() {
    let mut cluster = RedisCluster::start(3, 1, &[]).expect("cluster starts");
    let url = cluster.url();
    let ns = namespace();
    let c = Client::builder(&url).namespace(&ns).build().await.unwrap();
    let dir = ledger_dir("cluster-failover");
    // Enqueued well before the kill (longer ago than the replication lag).
    let early = push_all(&c, jobs(400, 20)).await;
    tokio::time::sleep(Duration::from_secs(1)).await;

    let w = worker(&url, &ns, &dir);
    let mut a = w.start();
    let mut b = w.start();
    eventually!(
        within Duration::from_secs(20),
        Ledger::read(&dir).jobs_ended() >= 40,
        "the workers get going"
    );

    // With wait_replicas(1, …), pushes run right up to the kill of the
    // primary that serves the first queue.
    let durable = Client::builder(&url)
        .namespace(&ns)
        .wait_replicas(1, Duration::from_millis(500))
        .build()
        .await
        .unwrap();
    let (stop, rx) = tokio::sync::watch::channel(false);
    let producer = tokio::spawn(produce(durable, rx));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let queue_key = c.broker().keys().queue(QUEUES[0]);
    fail_over(&mut cluster, &queue_key).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.send(true).unwrap();
    let (acked, refused) = producer.await.unwrap();
    eprintln!(
        "wait_replicas(1): {} pushes acknowledged, {refused} refused during the failover",
        acked.len()
    );
    assert!(!acked.is_empty());

    all_end(
        &dir,
        &early,
        Duration::from_secs(60),
        "jobs enqueued before the kill",
    )
    .await;
    all_end(
        &dir,
        &acked,
        Duration::from_secs(60),
        "jobs acknowledged with wait_replicas(1)",
    )
    .await;
    assert_running(&mut [&mut a, &mut b]);

    // Without wait_replicas the last window before a kill may be lost:
    // measured and reported, not asserted.
    let (stop, rx) = tokio::sync::watch::channel(false);
    let producer = tokio::spawn(produce(c.clone(), rx));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let second = c.broker().keys().queue(QUEUES[1]);
    let (_, owner_now) = owner(&cluster, &second);
    let has_replica = cluster
        .cli(owner_now, &["INFO", "replication"])
        .unwrap()
        .contains("connected_slaves:1");
    if has_replica {
        fail_over(&mut cluster, &second).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.send(true).unwrap();
    let (acked, refused) = producer.await.unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let ledger = Ledger::read(&dir);
    let lost = acked.iter().filter(|j| ledger.ended(j) == 0).count();
    eprintln!(
        "without wait_replicas{}: {} pushes acknowledged, {refused} refused, {lost} acknowledged but not run 5 s later",
        if has_replica {
            ""
        } else {
            " (no failover: the owner had no replica)"
        },
        acked.len()
    );
    assert_running(&mut [&mut a, &mut b]);
    a.stop();
    b.stop();
}
