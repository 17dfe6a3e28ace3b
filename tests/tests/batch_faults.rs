//! A batch under faults, with real worker processes (batches-workflows.md
//! §A4): 10,000 members across 3 tenants on a tenant-sharded queue, two
//! workers, one killed -9 twice mid-batch (a fresh one started each time),
//! and Redis killed -9 and restarted from its AOF. Every member runs, and the
//! batch's `complete` and `success` callbacks are each enqueued once (their
//! derived jids started exactly once, no other callback job exists) and run
//! once, after every member.

use std::collections::BTreeSet;
use std::time::Duration;

use fairjob::batch::{Event, OnDependencyFailure, callback_jid};
use fairjob::testing::RedisServer;
use fairjob::{Batch, IntoPush, PushJob, Workflow};
use fairjob_tests::jobs::{LedgerJob, ShardLedgerJob, WfLedgerJob};
use fairjob_tests::{Ledger, TestWorker, eventually, ledger_dir, namespace, timed_ledger};
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

/// Steps of the workflows in [`a_workflow_under_kill_9_releases_each_step_once`].
const TRANSFORMS: usize = 100;

/// extract → [`TRANSFORMS`] transforms (t000…, 100–300 ms each) → merge →
/// notify, with `complete` and `success` callbacks; transform `die` (if any)
/// is discarded, and merge follows `policy` on its failure.
fn fan(die: Option<usize>, policy: OnDependencyFailure) -> Workflow {
    let mut rng = rand::rng();
    let mut w = Workflow::new()
        .on_complete(LedgerJob::sleeping(0))
        .on_success(LedgerJob::sleeping(0))
        .add("extract", WfLedgerJob { ms: 0, die: false });
    let names: Vec<String> = (0..TRANSFORMS).map(|i| format!("t{i:03}")).collect();
    for (i, name) in names.iter().enumerate() {
        let step = WfLedgerJob {
            ms: rng.random_range(100..=300),
            die: die == Some(i),
        };
        w = w.add_after(name, step, ["extract"]);
    }
    w.add_after("merge", after_fan(), &names)
        .add_after("notify", after_fan(), ["merge"])
        .on_dependency_failure("merge", policy)
}

/// A step after the fan-in, on its own queue ([`AFTER_FAN`], fetched first):
/// its start measures when it was released, not how long it queued behind
/// the other workflows' transforms.
fn after_fan() -> PushJob {
    let mut job = WfLedgerJob { ms: 0, die: false }.into_push().unwrap();
    job.set_queue(AFTER_FAN);
    job
}

/// The queue of [`after_fan`]'s steps.
const AFTER_FAN: &str = "ledger_after_fan";

/// Issue 35's workflow proof: four workflows (one clean, and one whose
/// transform t050 dies under each `on_dependency_failure` policy), two
/// worker processes, one killed -9 during the transforms. While transforms
/// run, merge and notify hold nothing (held, in no queue); each step is
/// released once (a step runs twice only when it was in flight on the killed
/// worker); merge starts within a second of its last transform's end; the
/// callbacks run once each, `success` only for the clean workflow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_under_kill_9_releases_each_step_once() {
    let server = RedisServer::start(&[]).expect("redis-server starts");
    let url = server.url();
    let ns = namespace();
    let dir = ledger_dir("workflow-faults");
    let c = fairjob::Client::builder(&url)
        .namespace(&ns)
        .build()
        .await
        .unwrap();
    let kinds = [
        ("clean", None, OnDependencyFailure::Cancel),
        ("cancel", Some(50), OnDependencyFailure::Cancel),
        ("continue", Some(50), OnDependencyFailure::Continue),
        ("ignore", Some(50), OnDependencyFailure::Ignore),
    ];
    let mut wids = Vec::new();
    for (kind, die, policy) in kinds {
        wids.push((kind, fan(die, policy).commit(&c).await.unwrap()));
    }
    let held = |steps: &[(String, String, Vec<String>)], name: &str| {
        steps
            .iter()
            .find(|s| s.0 == name)
            .map(|s| s.1.clone())
            .unwrap_or_default()
    };
    let queue = c.broker().keys().queue("ledger");
    let queued = || async {
        fairjob_tests::query::<Vec<String>>(
            c.broker(),
            redis::cmd("LRANGE").arg(&queue).arg(0).arg(-1),
        )
        .await
        .unwrap()
    };
    assert_eq!(queued().await.len(), 4, "only the four extracts are queued");

    let worker = TestWorker::new(&url, &ns)
        .queues([AFTER_FAN, "ledger"])
        .concurrency(10)
        .flag("--lease", "1500ms")
        .flag("--heartbeat", "300ms")
        .flag("--reaper-interval", "300ms")
        .ledger(&dir);
    let _steady = worker.start();
    let mut victim = worker.start();
    let transforms_ended = |l: &Ledger| {
        l.ends
            .keys()
            .filter(|id| id.rsplit('/').next().is_some_and(|s| s.starts_with('t')))
            .count()
    };
    eventually!(
        within Duration::from_secs(60),
        transforms_ended(&Ledger::read(&dir)) >= TRANSFORMS,
        "a quarter of the transforms end"
    );
    // Mid-transforms: merge and notify are held, in no queue.
    for (kind, wid) in &wids {
        let steps = c.broker().workflow_steps(wid, 1000).await.unwrap();
        for name in ["merge", "notify"] {
            assert_eq!(held(&steps, name), "held", "{kind}: {name} is held");
        }
    }
    let in_queue = queued().await;
    assert!(
        in_queue
            .iter()
            .all(|p| !p.contains("\"merge\"") && !p.contains("\"notify\"")),
        "no held step sits in the queue"
    );
    let victim_pid = victim.pid();
    victim.signal("KILL");
    let in_flight = Ledger::read(&dir).in_flight_on(&[victim_pid]);
    assert!(!in_flight.is_empty(), "the victim was running transforms");
    victim = worker.start();

    for (kind, wid) in &wids {
        let complete = callback_jid(wid, Event::Complete);
        eventually!(
            within Duration::from_secs(120),
            Ledger::read(&dir).ended(&complete) >= 1,
            "{kind}: complete runs"
        );
    }
    // Give a duplicate every chance to show up.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let l = Ledger::read(&dir);
    let timed = timed_ledger(&dir);
    let at = |kind: &str, id: &str| {
        timed
            .iter()
            .filter(|t| t.0 == kind && t.1 == id)
            .map(|t| t.3)
            .collect::<Vec<_>>()
    };
    for (kind, wid) in &wids {
        let id = |name: &str| format!("{wid}/{name}");
        let clean = *kind == "clean";
        // Each step released once: more than one start only after the kill.
        for name in
            std::iter::once("extract".to_owned()).chain((0..TRANSFORMS).map(|i| format!("t{i:03}")))
        {
            let starts = l.started(&id(&name));
            assert!(starts >= 1, "{kind}: {name} ran");
            assert!(
                starts == 1 || in_flight.contains(&id(&name)),
                "{kind}: {name} started {starts} times without being killed"
            );
        }
        let (merge, notify) = (l.started(&id("merge")), l.started(&id("notify")));
        if *kind == "cancel" {
            assert_eq!(
                (merge, notify),
                (0, 0),
                "cancel: merge and notify never run"
            );
            let steps = c.broker().workflow_steps(wid, 1000).await.unwrap();
            assert_eq!(held(&steps, "merge"), "cancelled");
            assert_eq!(held(&steps, "notify"), "cancelled");
        } else {
            assert_eq!((merge, notify), (1, 1), "{kind}: merge and notify run once");
            // Released by the last transform's end: it starts within a second.
            let last_end = (0..TRANSFORMS)
                .flat_map(|i| at("end", &id(&format!("t{i:03}"))))
                .max()
                .unwrap();
            let merge_start = at("start", &id("merge"))[0];
            assert!(
                merge_start >= last_end && merge_start - last_end < 1000,
                "{kind}: merge started {} ms after its last transform ended",
                merge_start as i128 - last_end as i128
            );
            assert!(at("start", &id("notify"))[0] >= at("end", &id("merge"))[0]);
            println!(
                "workflow_faults: {kind}: merge started {} ms after its last transform's end",
                merge_start - last_end
            );
        }
        let (complete, success) = (
            callback_jid(wid, Event::Complete),
            callback_jid(wid, Event::Success),
        );
        assert_eq!(l.started(&complete), 1, "{kind}: complete ran once");
        assert_eq!(
            l.started(&success),
            usize::from(clean),
            "{kind}: success ran once if nothing failed, else never"
        );
        let status = c.batch_status(wid).await.unwrap().unwrap();
        assert_eq!(status.pending, 0, "{kind}: nothing left waiting");
        assert_eq!(status.total, TRANSFORMS as u64 + 3);
    }
    println!(
        "workflow_faults: {} steps were in flight on the killed worker",
        in_flight.len()
    );
    drop(victim);
}
