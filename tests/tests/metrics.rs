//! `worker run --metrics` with real worker processes and a real Redis: every
//! series appears with the values of what happened (jobs by outcome, a
//! reroute, slot waiters, shard gauges, a fenced completion after a frozen
//! worker comes back and the recovery by the other), a thousand tenants
//! never give a metric more than K + 1 tenant series per queue, two workers
//! share one sampler of the Redis gauges, batch callbacks are counted once
//! each and open batches sampled, workflow steps held are sampled from the
//! counts the scripts keep, and `/readyz` follows Redis while
//! `/healthz` stays up (on the metrics listener and on the dashboard's).

use std::time::{Duration, Instant};

use fairjob::Job as _;
use fairjob::metrics as m;
use fairjob::{Batch, Workflow};
use fairjob_tests::jobs::{
    DropJob, FlakyJob, LedgerJob, ManyJob, OutcomeJob, RecordJob, ShardJob, SpawnJob,
};
use fairjob_tests::metrics::{MetricsWorker, Scrape};
use fairjob_tests::rate_jobs::RateJob;
use fairjob_tests::slot_jobs::SlotJob;
use fairjob_tests::web::Http;
use fairjob_tests::{Ledger, Redis, RedisServer, TestWorker, eventually, ledger_dir, namespace};

/// Every series name of the public interface.
const SERIES: &[&str] = m::ALL;

fn outcome(kind: &str, tenant: &str) -> OutcomeJob {
    OutcomeJob {
        kind: kind.to_owned(),
        tenant: tenant.to_owned(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_run_exports_every_series_with_what_happened() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    let dir = ledger_dir("metrics");
    let worker = redis
        .worker_process()
        .queues([
            "outcomes",
            "spawn",
            "conversions",
            "slots",
            "ledger",
            "rates",
        ])
        .concurrency(6)
        .ledger(&dir)
        .flag("--metrics-interval", "200ms")
        .flag("--metrics-idle-timeout", "60s");
    let a = MetricsWorker::start(&worker);

    // Outcomes: 3 successes, 1 retry, 1 dead, 1 discarded.
    for _ in 0..3 {
        outcome("ok", "acme").perform_async(&c).await.unwrap();
    }
    outcome("fail", "acme").perform_async(&c).await.unwrap();
    outcome("dead", "globex").perform_async(&c).await.unwrap();
    DropJob.perform_async(&c).await.unwrap();
    // A reroute, made by the worker's own client: the second TJob of tenant
    // `initech` within the hour goes to `whatever_supaslow` (nobody works the
    // `whatever*` queues here, so they keep a size and an age).
    SpawnJob("initech".into()).perform_async(&c).await.unwrap();
    SpawnJob("initech".into()).perform_async(&c).await.unwrap();
    // Slot waiters: 3 run (the limit), 3 wait on `SlotJob:k1` (4 s jobs: a
    // window that a loaded machine still samples).
    c.push_bulk(SlotJob::batch("k1", 6, 4000)).await.unwrap();
    // Rate waiters: 30 jobs at 20/s, most released from the limiter's list.
    c.push_bulk(RateJob::batch("m", 30, 0)).await.unwrap();
    // A sharded queue with a backlog: `big` has 30 jobs of 700 ms (pushed
    // once the slot waiters are seen).
    let mut big: Vec<ShardJob> = (0..30)
        .map(|n| ShardJob {
            tenant: "big".into(),
            n,
            ms: 700,
        })
        .collect();

    // While they run: slot waiters, the shard's running and pending jobs,
    // busy workers, each seen on some scrape.
    let (mut seen_waiting, mut shard, mut busy) = (None, None, None);
    let mut waiting_seen = std::collections::BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while seen_waiting.is_none() || shard.is_none() || busy.is_none() {
        assert!(
            Instant::now() < deadline,
            "not seen: slot waiters {} (values seen: {waiting_seen:?}), shard {}, busy {}",
            seen_waiting.is_some(),
            shard.is_some(),
            busy.is_some()
        );
        let s = a.scrape();
        waiting_seen.insert(s.value(m::SLOT_WAITING, &[("key", "SlotJob:k1")]) as i64);
        if seen_waiting.is_none() && s.value(m::SLOT_WAITING, &[("key", "SlotJob:k1")]) == 3.0 {
            seen_waiting = Some(s.clone());
            // The shard's backlog only now, so its jobs do not take the
            // worker slots the slot waiters are fetched into.
            c.push_bulk(std::mem::take(&mut big)).await.unwrap();
        }
        if s.value(
            m::SHARD_RUNNING,
            &[("queue", "conversions"), ("tenant", "big")],
        ) >= 1.0
            && s.value(
                m::SHARD_PENDING,
                &[("queue", "conversions"), ("tenant", "big")],
            ) >= 1.0
        {
            shard = Some(s.clone());
        }
        if s.value(m::BUSY, &[]) >= 1.0 {
            busy = Some(s);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (seen_waiting, shard, busy) = (seen_waiting.unwrap(), shard.unwrap(), busy.unwrap());
    let identity = redis
        .identity_of(a.process.pid())
        .await
        .expect("registered");
    assert_eq!(
        busy.find(m::BUSY, &[("process", identity.as_str())])
            .count(),
        1,
        "busy is labelled with the process: {:?}",
        busy.lines_with(m::BUSY)
    );

    // Everything done: counts by outcome.
    let done = eventually!(
        within Duration::from_secs(40),
        let s = a.scrape();
        s.value(m::JOBS_TOTAL, &[("class", "SlotJob"), ("outcome", "success")]) == 6.0
            && s.value(m::JOBS_TOTAL, &[("class", "ShardJob"), ("outcome", "success")]) == 30.0
            && s.value(m::JOBS_TOTAL, &[("class", "SpawnJob"), ("outcome", "success")]) == 2.0
            && s.value(m::SHARD_PENDING, &[("queue", "conversions"), ("tenant", "big")]) == 0.0
            && s.value(m::SHARD_RUNNING, &[("queue", "conversions"), ("tenant", "big")]) == 0.0
            && s.value(m::SLOT_WAITING, &[("key", "SlotJob:k1")]) == 0.0
            && s.value(m::JOBS_TOTAL, &[("class", "RateJob"), ("outcome", "success")]) == 30.0
            && s.value(m::RATE_WAITING, &[("key", "RateJob:m")]) == 0.0
            && s.value(m::RATE_RELEASED_TOTAL, &[("key", "RateJob:m")]) >= 10.0,
        "every job ran and the gauges went back to 0"
    );
    let jobs = |class: &str, queue: &str, outcome: &str| {
        done.value(
            m::JOBS_TOTAL,
            &[("class", class), ("queue", queue), ("outcome", outcome)],
        )
    };
    assert_eq!(jobs("OutcomeJob", "outcomes", "success"), 3.0);
    assert_eq!(jobs("OutcomeJob", "outcomes", "retry"), 1.0);
    assert_eq!(jobs("OutcomeJob", "outcomes", "dead"), 1.0);
    assert_eq!(jobs("DropJob", "outcomes", "discarded"), 1.0);
    assert_eq!(done.value(m::JOBS_TOTAL, &[("outcome", "fenced")]), 0.0);
    assert_eq!(
        done.value(
            m::REROUTES_TOTAL,
            &[("class", "TJob"), ("to_queue", "whatever_supaslow")]
        ),
        1.0,
        "{:?}",
        done.lines_with("reroute")
    );
    assert_eq!(done.value(m::REROUTES_TOTAL, &[]), 1.0);
    // Durations and waits: one observation per job that ran.
    assert_eq!(
        done.value(
            &format!("{}_count", m::JOB_DURATION),
            &[("class", "OutcomeJob"), ("queue", "outcomes")]
        ),
        5.0
    );
    assert_eq!(
        done.value(
            &format!("{}_count", m::JOB_WAIT),
            &[("queue", "outcomes"), ("tenant", "acme")]
        ),
        4.0
    );
    assert_eq!(
        done.value(
            &format!("{}_count", m::JOB_WAIT),
            &[("queue", "conversions"), ("tenant", "big")]
        ),
        30.0
    );
    // Redis gauges: the rerouted job and the plain TJob wait in queues nobody works.
    let parked = eventually!(
        let s = a.scrape();
        s.value(m::QUEUE_SIZE, &[("queue", "whatever_supaslow")]) == 1.0
            && s.value(m::QUEUE_SIZE, &[("queue", "whatever")]) == 1.0
            && s.value(m::QUEUE_LATENCY, &[("queue", "whatever_supaslow")]) > 0.0
            && s.value(m::QUEUE_SIZE, &[("queue", "outcomes")]) == 0.0,
        "queue sizes and latency from Redis"
    );
    assert_eq!(
        seen_waiting.value(m::SLOT_WAITING, &[("key", m::OTHER)]),
        0.0
    );

    // A frozen worker: its job is recovered by B, and its late completion fenced.
    let jid = LedgerJob::sleeping(4000).perform_async(&c).await.unwrap();
    eventually!(
        Ledger::read(&dir).started(&jid) == 1,
        "worker A starts the long job"
    );
    let b = MetricsWorker::start(&worker);
    a.process.signal("STOP");
    eventually!(
        within Duration::from_secs(6),
        Ledger::read(&dir).started(&jid) == 2,
        "B re-runs the frozen worker's job"
    );
    let recovered = eventually!(
        let s = b.scrape(); s.value(m::RECOVERED_TOTAL, &[]) == 1.0,
        "B counts the recovery"
    );
    let frozen_for = Duration::from_secs(4);
    std::thread::sleep(frozen_for);
    a.process.signal("CONT");
    let fenced = eventually!(
        within Duration::from_secs(10),
        let s = a.scrape();
        s.value(m::FENCED_TOTAL, &[]) == 1.0
            && s.value(m::JOBS_TOTAL, &[("class", "LedgerJob"), ("queue", "ledger"), ("outcome", "fenced")]) == 1.0,
        "A counts its fenced completion"
    );
    assert_eq!(redis.stat("fenced").await, 1);
    assert_eq!(fenced.value(m::RECOVERED_TOTAL, &[]), 0.0);

    // Every series of the public interface appeared on one of the scrapes
    // (periodic schedules' series: `tests/tests/cron.rs`; Redis's refusals,
    // which this run has none of: `tests/tests/redis_refusals.rs`).
    for name in SERIES.iter().filter(|n| {
        !n.starts_with("fairjob_cron_")
                && **n != "fairjob_redis_errors_total"
                // Counted by the client that pushes a duplicate (this test's
                // workers push none): `tests/tests/unique.rs`.
                && **n != "fairjob_unique_rejections_total"
                // No batch here: `batch_callbacks_counted_once_and_open_batches_sampled`.
                && **n != "fairjob_batch_callbacks_total"
    }) {
        let anywhere = [
            &seen_waiting,
            &shard,
            &busy,
            &done,
            &parked,
            &recovered,
            &fenced,
        ]
        .iter()
        .any(|s| s.has(name));
        assert!(anywhere, "{name} never appeared");
    }
    println!("--- an excerpt of a real scrape (worker A) ---");
    for name in SERIES {
        for line in fenced
            .lines_with(name)
            .into_iter()
            .chain(shard.lines_with(name))
            .filter(|l| !l.starts_with('#') && !l.contains("_bucket"))
            .take(3)
        {
            println!("{line}");
        }
    }
    println!("{}", recovered.lines_with(m::RECOVERED_TOTAL).join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_tenants_never_give_a_metric_more_than_k_plus_one_tenant_series() {
    const K: usize = 5;
    const TENANTS: u32 = 1000;
    let redis = Redis::start().await;
    let c = redis.client().await;
    // A short idle timeout, so label slots change hands during the run.
    let worker = redis
        .worker_process()
        .queues(["many"])
        .concurrency(20)
        .flag("--metrics-top-k", K.to_string())
        .flag("--metrics-idle-timeout", "1s")
        .flag("--metrics-interval", "100ms");
    let w = MetricsWorker::start(&worker);
    // Tenant 0 to 9 are busy (20 jobs each), the others have 2 jobs each.
    let mut jobs = Vec::new();
    for t in 0..TENANTS {
        let n = if t < 10 { 20 } else { 2 };
        for _ in 0..n {
            jobs.push(ManyJob(t, 60));
        }
    }
    let total = jobs.len() as f64;
    c.push_bulk(jobs).await.unwrap();

    let mut scrapes = 0;
    let mut most = 0;
    let mut saw_other = false;
    let mut labelled = std::collections::BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let s = w.scrape();
        scrapes += 1;
        for label in ["tenant", "key"] {
            for ((family, queue), values) in s.label_values(label) {
                assert!(
                    values.len() <= K + 1,
                    "{family} on queue {queue:?} carries {} {label} series: {values:?}",
                    values.len()
                );
                most = most.max(values.len());
                saw_other |= values.iter().any(|v| v == m::OTHER);
                labelled.extend(values.into_iter().filter(|v| v != m::OTHER));
            }
        }
        let finished = s.value(m::JOBS_TOTAL, &[("class", "ManyJob")]);
        if finished == total {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "jobs not finished: {finished} of {total}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Keep looking while quiet tenants' series expire and slots change hands.
    for _ in 0..40 {
        let s = w.scrape();
        scrapes += 1;
        for ((family, queue), values) in s.label_values("tenant") {
            assert!(values.len() <= K + 1, "{family} on {queue:?}: {values:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "cardinality: {TENANTS} tenants, K = {K}: at most {most} tenant series per metric and \
         queue over {scrapes} scrapes; {} tenants were labelled at some point",
        labelled.len()
    );
    assert!(saw_other, "no tenant was counted as __other__");
    assert!(most >= 2, "no tenant had a series of its own");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_share_one_sampler_of_the_redis_gauges() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    // Jobs in a queue nobody works: queue size and latency to sample.
    for _ in 0..3 {
        OutcomeJob {
            kind: "ok".into(),
            tenant: "acme".into(),
        }
        .perform_async(&c)
        .await
        .unwrap();
    }
    let worker = redis
        .worker_process()
        .queues(["ledger"])
        .flag("--metrics-interval", "200ms");
    let mut workers = vec![MetricsWorker::start(&worker), MetricsWorker::start(&worker)];
    let broker = c.broker();
    let holder = eventually!(
        let h = broker.sampler().await.unwrap(); h.is_some(),
        "a process takes the sampler lease"
    )
    .unwrap();
    let identity_of = |w: &MetricsWorker, s: &Scrape| {
        s.find(m::BUSY, &[])
            .next()
            .and_then(|b| b.labels.get("process").cloned())
            .unwrap_or_else(|| panic!("busy carries the process: {}", w.log()))
    };
    // For a while: only the lease holder exports the Redis gauges.
    let until = Instant::now() + Duration::from_secs(2);
    let mut looks = 0;
    while Instant::now() < until || looks < 5 {
        let scrapes: Vec<Scrape> = workers.iter().map(MetricsWorker::scrape).collect();
        let sampling: Vec<String> = workers
            .iter()
            .zip(&scrapes)
            .filter(|(_, s)| s.has(m::QUEUE_SIZE))
            .map(|(w, s)| identity_of(w, s))
            .collect();
        assert!(sampling.len() <= 1, "two samplers: {sampling:?}");
        if let Some(id) = sampling.first() {
            assert_eq!(id, &holder, "the gauges come from the lease holder");
            let s = scrapes.iter().find(|s| s.has(m::QUEUE_SIZE)).unwrap();
            assert_eq!(s.value(m::QUEUE_SIZE, &[("queue", "outcomes")]), 3.0);
        }
        looks += 1;
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    // The holder dies: the other takes over once the lease lapses.
    let (i, _) = workers
        .iter()
        .enumerate()
        .find(|(_, w)| identity_of(w, &w.scrape()) == holder)
        .expect("the holder is one of the workers");
    let mut dead = workers.remove(i);
    dead.process.signal("KILL");
    let _ = dead.process.wait_timeout(Duration::from_secs(5));
    let other = &workers[0];
    let s = eventually!(
        let s = other.scrape(); s.value(m::QUEUE_SIZE, &[("queue", "outcomes")]) == 3.0,
        "the other worker takes over the sampling"
    );
    let taken = broker.sampler().await.unwrap();
    assert_eq!(taken, Some(identity_of(other, &s)));
    println!(
        "sampler: {holder} sampled first; after it was killed, {} took over",
        taken.unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_follows_redis_and_healthz_stays_up() {
    let mut server = RedisServer::start(&[]).expect("redis-server starts");
    let url = server.url();
    let ns = namespace();
    let worker = TestWorker::new(&url, &ns)
        .queues(["ledger"])
        .flag("--web", "127.0.0.1:0");
    let w = MetricsWorker::start(&worker);
    let web = eventually!(
        let line = w.log().lines().find_map(|l| l.strip_prefix("fairjob dashboard on ").map(|u| u.split_whitespace().next().unwrap_or("").trim_end_matches('/').to_owned()));
        line.is_some(),
        "the dashboard's address"
    )
    .unwrap();
    let dashboard = |path: &str| Http::new().get(&format!("{web}{path}"), &[]).status;
    eventually!(w.status("/readyz") == 200, "ready once fetching");
    assert_eq!(w.status("/healthz"), 200);
    assert_eq!(dashboard("/readyz"), 200);
    assert_eq!(dashboard("/healthz"), 200);

    server.kill();
    eventually!(w.status("/readyz") == 503, "unready once Redis is gone");
    eventually!(dashboard("/readyz") == 503, "the dashboard is unready too");
    assert_eq!(w.status("/healthz"), 200, "alive without Redis");
    assert_eq!(dashboard("/healthz"), 200);
    assert!(w.process.is_running());

    server.restart(&[]).expect("redis-server restarts");
    eventually!(
        within Duration::from_secs(20),
        w.status("/readyz") == 200,
        "ready again once Redis is back"
    );
    eventually!(
        within Duration::from_secs(20),
        dashboard("/readyz") == 200,
        "the dashboard is ready again"
    );
    assert_eq!(w.status("/healthz"), 200);

    // Quiet on purpose (TSTP) is still ready; stopping is not.
    w.process.signal("TSTP");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(w.status("/readyz"), 200, "quiet on purpose stays ready");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_callbacks_counted_once_and_open_batches_sampled() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    let worker = redis
        .worker_process()
        .queues(["outcomes", "default"])
        .flag("--metrics-interval", "200ms");
    let w = MetricsWorker::start(&worker);
    // Two batches whose members wait in a queue nobody works: open.
    for n in 0..2 {
        Batch::new()
            .push(SpawnJob(format!("s{n}")))
            .commit(&c)
            .await
            .unwrap();
    }
    eventually!(
        w.scrape().value(m::BATCHES_OPEN, &[]) == 2.0,
        "the sampler sees two open batches"
    );
    // A batch whose members run and one dies: `death`, then `complete`,
    // whose callback fails its first run and succeeds on its retry;
    // `success` never fires.
    Batch::new()
        .on_complete(FlakyJob("complete".into()))
        .on_success(RecordJob("success".into()))
        .on_death(RecordJob("death".into()))
        .push_bulk((0..2).map(|_| outcome("ok", "acme")))
        .push(outcome("dead", "acme"))
        .commit(&c)
        .await
        .unwrap();
    // An empty batch fires `complete` and `success` at its commit.
    Batch::new()
        .on_complete(RecordJob("empty-complete".into()))
        .on_success(RecordJob("empty-success".into()))
        .commit(&c)
        .await
        .unwrap();
    let callbacks =
        |s: &Scrape, event: &str| s.value(m::BATCH_CALLBACKS_TOTAL, &[("event", event)]);
    let s = eventually!(
        let s = w.scrape();
        s.value(m::JOBS_TOTAL, &[("class", "FlakyJob"), ("outcome", "success")]) == 1.0
            && s.value(m::JOBS_TOTAL, &[("class", "RecordJob"), ("outcome", "success")]) == 3.0,
        "every callback ran, the flaky one twice"
    );
    let ran: Vec<String> = redis.records().await;
    assert_eq!(
        ran.iter()
            .filter(|l| l.starts_with("flaky complete"))
            .count(),
        2,
        "{ran:?}"
    );
    assert_eq!(
        (
            callbacks(&s, "complete"),
            callbacks(&s, "success"),
            callbacks(&s, "death")
        ),
        (2.0, 1.0, 1.0),
        "started callbacks, each counted once (a retry is not): {:?}",
        s.lines_with(m::BATCH_CALLBACKS_TOTAL)
    );
    // A sample or two later: the finished batches are not open, and nothing
    // was counted twice.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let s = w.scrape();
    assert_eq!(
        s.value(m::BATCHES_OPEN, &[]),
        2.0,
        "the finished batches are not open"
    );
    assert_eq!(
        (callbacks(&s, "complete"), callbacks(&s, "success")),
        (2.0, 1.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workflow_steps_held_sampled_from_the_counts_the_scripts_keep() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    let worker = redis
        .worker_process()
        .queues(["outcomes"])
        .flag("--metrics-interval", "200ms");
    let w = MetricsWorker::start(&worker);
    let ok = || outcome("ok", "acme");
    // Three steps wait for a root in a queue nobody works yet.
    let waiting = Workflow::new()
        .add("root", ok().queue("later"))
        .add_after("a", ok(), ["root"])
        .add_after("b", ok(), ["root"])
        .add_after("c", ok(), ["a", "root"])
        .commit(&c)
        .await
        .unwrap();
    // A root that dies: its two dependents are cancelled, held no more.
    let cancelled = Workflow::new()
        .add("root", outcome("dead", "acme"))
        .add_after("x", ok(), ["root"])
        .add_after("y", ok(), ["root"])
        .commit(&c)
        .await
        .unwrap();
    eventually!(
        c.batch_status(&cancelled)
            .await
            .unwrap()
            .unwrap()
            .complete_at
            .is_some(),
        "the workflow whose root died completes"
    );
    eventually!(
        w.scrape().value(m::WORKFLOW_STEPS_HELD, &[]) == 3.0,
        "the sampler sees the three held steps"
    );
    assert_eq!(c.batch_status(&waiting).await.unwrap().unwrap().held, 3);
    // The root runs: its dependents are released (then `c`, after `a`).
    let later = redis.worker_process().queues(["later"]).start();
    eventually!(
        c.batch_status(&waiting)
            .await
            .unwrap()
            .unwrap()
            .success_at
            .is_some(),
        "every step runs"
    );
    eventually!(
        w.scrape().value(m::WORKFLOW_STEPS_HELD, &[]) == 0.0,
        "nothing is held"
    );
    drop(later);
}
