//! Periodic schedules against real Redis: exactly one enqueue per fire time
//! across worker processes (one killed with `kill -9` midway), catch-up after
//! a gap with no worker (on a shifted clock, not by sleeping), `overlap =
//! "skip"`, start-up reconciliation with old and new declarations, and the
//! client's run-time API. (DST gaps and folds are tested on the pure
//! functions, `fairjob::wire::cron`.)

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use fairjob::wire::cron::Overlap;
use fairjob::{CronSpec, Error, Registry, WorkerHandle};
use fairjob_tests::jobs::CronRecordJob;
use fairjob_tests::{Redis, eventually, temp_dir};

/// `(schedule, fire time, jid, pid)` per recorded run.
async fn runs(redis: &Redis) -> Vec<(String, i64, String, u32)> {
    redis
        .records()
        .await
        .iter()
        .filter_map(|l| {
            let mut p = l.split(' ');
            Some((
                p.next()?.to_owned(),
                p.next()?.parse().ok()?,
                p.next()?.to_owned(),
                p.next()?.parse().ok()?,
            ))
        })
        .collect()
}

fn registry() -> Registry {
    let mut r = Registry::new();
    r.register::<CronRecordJob>().expect("register");
    r
}

/// Starts an in-process worker; returns its handle and task.
fn spawn(
    builder: fairjob::WorkerBuilder,
) -> (WorkerHandle, tokio::task::JoinHandle<fairjob::Result<()>>) {
    let handle = WorkerHandle::new();
    let h = handle.clone();
    let task = tokio::spawn(async move { builder.build().await?.run_with(h).await });
    (handle, task)
}

async fn stop(handle: WorkerHandle, task: tokio::task::JoinHandle<fairjob::Result<()>>) {
    handle.stop();
    task.await.expect("worker task").expect("worker ran");
}

/// `workers` worker processes with an every-second schedule for about 30 s:
/// the first is killed with `kill -9` after ~8 s, and ~8 s later restarted
/// with the schedule changed to every other second; ~10 s later the schedule
/// is paused. Every fire time of the window ran, and exactly once: one jid per
/// fire time, one run per jid (a second run of a jid only where the killed
/// process ran it first and died before its ack: a job is at least once).
async fn every_fire_time_runs_once(workers: usize) {
    let redis = Redis::start().await;
    let client = redis.client().await;
    let now = || async { client.inspector().time().await.unwrap() as i64 };
    let dir = temp_dir("cron");
    let every = |expr: &str| {
        let path = dir.join(format!("worker-{}.toml", expr.len()));
        std::fs::write(
            &path,
            format!(
                "[[cron]]\nname = \"tick\"\ncron = \"{expr}\"\nclass = \"CronRecordJob\"\nargs = [0]\n"
            ),
        )
        .unwrap();
        path.to_str().unwrap().to_owned()
    };
    let each_second = every("* * * * * *");
    let mut procs: Vec<_> = (0..workers)
        .map(|_| redis.worker_process().flag("-C", &each_second).start())
        .collect();
    eventually!(runs(&redis).await.len() >= 2, "the schedule fires");
    tokio::time::sleep(Duration::from_secs(8)).await;
    let killed = procs[0].pid();
    procs[0].signal("KILL");
    let _ = procs[0].wait_timeout(Duration::from_secs(5));
    tokio::time::sleep(Duration::from_secs(8)).await;
    // The killed worker comes back with a changed schedule (every other second).
    let before_restart = now().await;
    let every_other = every("*/2 * * * * *");
    procs.push(redis.worker_process().flag("-C", &every_other).start());
    eventually!(
        client.inspector().cron().await.unwrap()[0].expr == "*/2 * * * * *",
        "the restarted worker reconciles its schedule"
    );
    let changed = now().await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    client.cron().pause("tick").await.unwrap();
    let paused = now().await;
    // Every fire time before the pause: each second up to the restart, each
    // even second after the change.
    let expected: BTreeSet<i64> = {
        let first = runs(&redis).await.iter().map(|r| r.1).min().unwrap();
        (first..before_restart)
            .chain((changed + 2..paused).filter(|f| f % 2 == 0))
            .collect()
    };
    // (A poller killed between claim and push leaves a claim another takes
    // over after its 30 s lease: allow for it.)
    eventually!(within Duration::from_secs(60),
        let got = runs(&redis).await.iter().map(|r| r.1).collect::<BTreeSet<i64>>();
        expected.is_subset(&got),
        "every fire time ran: missing {:?}", expected.difference(&got).collect::<Vec<_>>()
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for p in procs.iter_mut().skip(1) {
        assert!(p.stop().is_some(), "a worker stops");
    }

    let runs = runs(&redis).await;
    let mut jids: BTreeMap<i64, BTreeSet<String>> = BTreeMap::new();
    let mut per_jid: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for (name, fire, jid, pid) in &runs {
        assert_eq!(name, "tick");
        jids.entry(*fire).or_default().insert(jid.clone());
        per_jid.entry(jid.clone()).or_default().push(*pid);
    }
    for (fire, set) in &jids {
        assert_eq!(set.len(), 1, "fire time {fire} enqueued as {set:?}");
    }
    for (jid, pids) in &per_jid {
        assert!(
            pids.len() == 1 || (pids.len() == 2 && pids.contains(&killed)),
            "job {jid} ran {} times, by {pids:?}",
            pids.len()
        );
    }
    let late: Vec<i64> = jids.keys().copied().filter(|f| *f > paused).collect();
    assert!(late.is_empty(), "fired while paused: {late:?}");
    let odd: Vec<i64> = jids
        .keys()
        .copied()
        .filter(|f| *f > changed + 1 && f % 2 != 0)
        .collect();
    assert!(
        odd.is_empty(),
        "the old schedule fired after the change: {odd:?}"
    );
    assert!(expected.len() >= 20, "{} fire times", expected.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_enqueue_each_fire_time_once_through_a_kill_and_a_changed_restart() {
    every_fire_time_runs_once(2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_enqueue_each_fire_time_once_through_a_kill_and_a_changed_restart() {
    every_fire_time_runs_once(3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gap_with_no_worker_runs_the_latest_missed_fire_time_once() {
    let redis = Redis::start().await;
    let client = redis.client().await;
    client
        .cron()
        .set(CronSpec::new("minutely", "* * * * *", CronRecordJob(0)))
        .await
        .unwrap();
    client
        .cron()
        .set(CronSpec::new("strict", "* * * * *", CronRecordJob(0)).catch_up("none"))
        .await
        .unwrap();
    // No worker ran for 5 minutes: a worker whose clock is 5 minutes ahead.
    // It starts well inside a minute, so the run below does not see the next
    // fire time too (that one would run, and be `enqueued`, by right).
    let offset = 300;
    let now = loop {
        let now = redis.client().await.broker().time().await.unwrap() as i64;
        if (2..45).contains(&((now + offset) % 60)) {
            break now;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let (h, t) = spawn(redis.worker().registry(registry()).clock_offset(offset));
    let got =
        eventually!(let r = runs(&redis).await; !r.is_empty(), "the latest missed fire time runs");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop(h, t).await;
    let got = if got.len() == 1 {
        got
    } else {
        runs(&redis).await
    };
    assert_eq!(got.len(), 1, "one run, no backfill: {got:?}");
    let (name, fire, _, _) = &got[0];
    assert_eq!(name, "minutely");
    let shifted_now = now + offset;
    assert!(
        *fire <= shifted_now && *fire > shifted_now - 61 && fire % 60 == 0,
        "the latest minute before the shifted now: {fire} vs {shifted_now}"
    );
    let rows = client.inspector().cron().await.unwrap();
    let strict = rows.iter().find(|r| r.name == "strict").unwrap();
    assert_eq!(strict.last_outcome.as_deref(), Some("missed"));
    assert!(strict.missed >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlap_skip_skips_while_the_previous_run_is_live() {
    let redis = Redis::start().await;
    let client = redis.client().await;
    // Each run takes 2.5 s; the schedule fires every second.
    client
        .cron()
        .set(CronSpec::new("slow", "* * * * * *", CronRecordJob(2500)).overlap(Overlap::Skip))
        .await
        .unwrap();
    let (h, t) = spawn(redis.worker().registry(registry()));
    eventually!(within Duration::from_secs(15), runs(&redis).await.len() >= 2, "two runs");
    stop(h, t).await;
    let got = runs(&redis).await;
    let fires: Vec<i64> = got.iter().map(|r| r.1).collect();
    for w in fires.windows(2) {
        assert!(w[1] - w[0] >= 2, "runs overlapped: {fires:?}");
    }
    let rows = client.inspector().cron().await.unwrap();
    let slow = rows.iter().find(|r| r.name == "slow").unwrap();
    assert!(slow.skipped >= 2, "skips counted: {slow:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn startup_reconciles_old_and_new_declarations() {
    let redis = Redis::start().await;
    let client = redis.client().await;
    client
        .cron()
        .set(CronSpec::new("dynamic", "0 * * * *", CronRecordJob(0)))
        .await
        .unwrap();
    let old = || {
        redis
            .worker()
            .registry(registry())
            .cron("report", "0 3 * * *", CronRecordJob(0))
            .cron("cleanup", "*/5 * * * *", CronRecordJob(0))
    };
    let new = || {
        redis
            .worker()
            .registry(registry())
            .cron_spec(CronSpec::new("report", "0 4 * * *", CronRecordJob(0)).tz("Europe/Berlin"))
            .cron("sync", "* * * * *", CronRecordJob(0))
    };
    // Several old workers starting at once: one entry per schedule.
    let (h1, t1) = spawn(old());
    let (h2, t2) = spawn(old());
    let names = || async {
        let mut n: Vec<String> = client
            .inspector()
            .cron()
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.name)
            .collect();
        n.sort();
        n
    };
    eventually!(
        names().await == ["cleanup", "dynamic", "report"],
        "old schedules stored once each"
    );
    // A new worker joins (a deploy): its declarations win, the dropped one
    // goes, the run-time one stays.
    let (h3, t3) = spawn(new());
    eventually!(
        names().await == ["dynamic", "report", "sync"],
        "new declarations reconciled"
    );
    let report = client
        .inspector()
        .cron()
        .await
        .unwrap()
        .into_iter()
        .find(|r| r.name == "report")
        .unwrap();
    assert_eq!(report.expr, "0 4 * * *");
    assert_eq!(report.tz, "Europe/Berlin");
    stop(h1, t1).await;
    stop(h2, t2).await;
    stop(h3, t3).await;
}

/// `n` declared schedules named `<prefix>-<i>` (a stand-in entry: no worker
/// reads them, and they are due in 2096).
fn declared(prefix: &str, n: usize, expr: &str) -> Vec<(String, String, Option<i64>)> {
    (0..n)
        .map(|i| {
            let name = format!("{prefix}-{i}");
            let entry = format!(r#"{{"name":"{name}","cron":"{expr}"}}"#);
            (name, entry, Some(4_000_000_000))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconciliation_in_many_steps_is_decided_by_the_last_to_start() {
    let redis = Redis::start().await;
    let client = redis.client().await;
    let broker = client.broker();
    client
        .cron()
        .set(CronSpec::new("dynamic", "0 * * * *", CronRecordJob(0)))
        .await
        .unwrap();
    let names = || async {
        let mut n: Vec<String> = broker
            .cron_entries()
            .await
            .unwrap()
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        n.sort();
        n
    };
    let sorted = |d: &[(String, String, Option<i64>)], extra: &str| {
        let mut n: Vec<String> = d.iter().map(|e| e.0.clone()).collect();
        n.push(extra.to_owned());
        n.sort();
        n
    };
    // Old code: 450 schedules (5 apply steps, several sweep pages).
    let old = declared("old", 450, "0 3 * * *");
    let removed = broker.cron_reconcile("w-old", &old).await.unwrap();
    assert_eq!(removed, Some(vec![]));
    assert_eq!(names().await, sorted(&old, "dynamic"));

    // New code: a third of the old names kept (changed), the rest replaced.
    let mut new = declared("old", 150, "0 4 * * *");
    new.extend(declared("new", 300, "0 5 * * *"));
    let removed = broker.cron_reconcile("w-new", &new).await.unwrap();
    let mut removed = removed.expect("not superseded");
    removed.sort();
    assert_eq!(removed.len(), 300, "the dropped old schedules removed");
    assert_eq!(names().await, sorted(&new, "dynamic"));

    // Several workers with different code starting at once, round after
    // round: the stored schedules are always exactly one of the declarations
    // (the last to start), plus the run-time one.
    for round in 0..4 {
        let a = declared("a", 250 + round, "*/5 * * * *");
        let b = declared("b", 320, "*/7 * * * *");
        let tokens = [
            format!("a{round}"),
            format!("b{round}"),
            format!("n{round}"),
        ];
        let (ra, rb, rn) = tokio::join!(
            broker.cron_reconcile(&tokens[0], &a),
            broker.cron_reconcile(&tokens[1], &b),
            broker.cron_reconcile(&tokens[2], &new),
        );
        let done = [ra.unwrap(), rb.unwrap(), rn.unwrap()];
        let got = names().await;
        let winners: Vec<usize> = (0..3).filter(|i| done[*i].is_some()).collect();
        assert!(!winners.is_empty(), "someone finished: {done:?}");
        let expected = [
            sorted(&a, "dynamic"),
            sorted(&b, "dynamic"),
            sorted(&new, "dynamic"),
        ];
        assert!(
            expected.contains(&got),
            "round {round}: stored schedules are a mix of declarations ({} names)",
            got.len()
        );
        // One entry per schedule, each due once.
        let due: usize =
            fairjob_tests::query(broker, redis::cmd("ZCARD").arg(broker.keys().cron_due()))
                .await
                .unwrap();
        assert_eq!(due, got.len(), "one due entry per schedule");
    }
    // Nothing left over from the reconciliations themselves.
    let leftovers: Vec<String> = fairjob_tests::query(
        broker,
        redis::cmd("KEYS").arg(format!(
            "{}fairjob:{{cron}}:declared:*",
            broker.keys().prefix()
        )),
    )
    .await
    .unwrap();
    assert!(leftovers.is_empty(), "declared sets left: {leftovers:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_api_pauses_resumes_runs_now_and_rejects_bad_input() {
    let redis = Redis::start().await;
    let client = redis.client().await;
    let crons = client.cron();
    let bad = crons
        .set(CronSpec::new("x", "61 * * * *", CronRecordJob(0)))
        .await;
    assert!(matches!(bad, Err(Error::InvalidSchedule { .. })), "{bad:?}");
    let bad = crons
        .set(CronSpec::new("x", "0 3 * * *", CronRecordJob(0)).tz("Mars/Olympus"))
        .await;
    assert!(
        matches!(&bad, Err(Error::UnknownZone { zone, .. }) if zone == "Mars/Olympus"),
        "{bad:?}"
    );
    assert!(matches!(
        crons.pause("nope").await,
        Err(Error::NoSchedule(_))
    ));

    crons
        .set(CronSpec::new("tick", "* * * * * *", CronRecordJob(0)))
        .await
        .unwrap();
    crons.pause("tick").await.unwrap();
    let (h, t) = spawn(redis.worker().registry(registry()));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(runs(&redis).await.is_empty(), "paused: nothing fires");
    let jid = crons.run_now("tick").await.unwrap();
    eventually!(
        runs(&redis).await.iter().any(|r| r.2 == jid),
        "run now enqueues the job"
    );
    crons.resume("tick").await.unwrap();
    eventually!(runs(&redis).await.len() >= 3, "resumed: it fires again");
    stop(h, t).await;
    assert!(crons.remove("tick").await.unwrap());
    assert!(!crons.remove("tick").await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seen_and_steered_from_the_dashboard_and_the_cli() {
    use fairjob_tests::web::{Dashboard, Http, input_value};
    let redis = Redis::start().await;
    let client = redis.client().await;
    let name = "<script>alert(1)</script> nightly";
    client
        .cron()
        .set(CronSpec::new(name, "0 3 * * *", CronRecordJob(0)).tz("Europe/Berlin"))
        .await
        .unwrap();
    let dash = Dashboard::start(
        redis.url(),
        redis.ns(),
        &["web", "--bind", "127.0.0.1:0", "--web-actions"],
        &[],
    );
    let base = dash.url.clone();
    let mut http = Http::new();
    let page = http.get(&format!("{base}/cron"), &[]);
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(!page.body.contains("<script>alert(1)"), "escaped");
    assert!(page.body.contains("0 3 * * *") && page.body.contains("Europe/Berlin"));
    let api = http.get(&format!("{base}/api/cron"), &[]).json();
    assert_eq!(api[0]["name"], name);
    assert_eq!(api[0]["paused"], false);
    assert!(api[0]["next"].as_i64().is_some());

    let csrf = input_value(&page.body, "csrf").expect("a CSRF token");
    let r = http.post(
        &format!("{base}/cron"),
        &[("origin", &base)],
        &[("name", name), ("action", "pause"), ("csrf", &csrf)],
    );
    assert_eq!(r.status, 303, "{}", r.body);
    let api = http.get(&format!("{base}/api/cron"), &[]).json();
    assert_eq!(api[0]["paused"], true);
    assert!(api[0]["next"].is_null());

    // The CLI lists it and steers it.
    let out = redis.cli(&["cron"]);
    assert!(
        out.contains("paused") && out.contains("1 schedule(s)"),
        "{out}"
    );
    let out = redis.cli(&["cron", "resume", name]);
    assert!(out.contains("resumed"), "{out}");
    let out = redis.cli(&["cron", "run-now", name]);
    assert!(out.contains("enqueued"), "{out}");
    let rows = client.inspector().cron().await.unwrap();
    assert!(!rows[0].paused);
    assert_eq!(rows[0].last_outcome.as_deref(), Some("run_now"));
    assert_eq!(
        redis.zcard(redis.keys().schedule()).await,
        1,
        "run now goes through the scheduler"
    );
    drop(dash);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_fires_skips_and_lateness() {
    use fairjob::metrics as m;
    use fairjob_tests::metrics::MetricsWorker;
    let redis = Redis::start().await;
    let dir = temp_dir("cron-metrics");
    let config = dir.join("worker.toml");
    std::fs::write(
        &config,
        "[[cron]]\nname = \"slow\"\ncron = \"* * * * * *\"\nclass = \"CronRecordJob\"\nargs = [2500]\noverlap = \"skip\"\n",
    )
    .unwrap();
    let worker = redis
        .worker_process()
        .flag("-C", config.to_str().unwrap())
        .flag("--metrics-interval", "200ms");
    let w = MetricsWorker::start(&worker);
    let s = eventually!(
        within Duration::from_secs(15),
        let s = w.scrape();
        s.value(m::CRON_FIRES_TOTAL, &[("schedule", "slow")]) >= 2.0
            && s.value(m::CRON_SKIPPED_TOTAL, &[("schedule", "slow"), ("reason", "overlap")]) >= 2.0,
        "fires and overlap skips counted"
    );
    assert!(s.has(m::CRON_LATENESS_SECONDS));
    let sum = s.value(
        &format!("{}_sum", m::CRON_LATENESS_SECONDS),
        &[("schedule", "slow")],
    );
    let count = s.value(
        &format!("{}_count", m::CRON_LATENESS_SECONDS),
        &[("schedule", "slow")],
    );
    println!(
        "mean lateness of {count} fires: {:.1} ms",
        sum / count * 1000.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_into_a_tenant_sharded_queue_each_fire_time_once() {
    use fairjob::testing::RedisCluster;
    use fairjob::{Client, Enqueue, Job, QueueSpec, Worker};
    let cluster = RedisCluster::start(3, 1, &[]).expect("cluster starts");
    let url = cluster.url();
    let ns = fairjob_tests::namespace();
    let c = Client::builder(&url).namespace(&ns).build().await.unwrap();
    assert!(c.broker().is_cluster());
    let job: Enqueue<CronRecordJob> = CronRecordJob(0).set_tenant("ac:me {1}").queue("fanout");
    c.cron()
        .set(CronSpec::new("tick", "* * * * * *", job))
        .await
        .unwrap();
    let worker = || {
        Worker::builder(&url)
            .namespace(&ns)
            .registry(registry())
            .queues(QueueSpec::parse(&["fanout".to_owned()]).unwrap())
            .sharded_queue("fanout")
            .poll_interval(Duration::from_millis(100))
            .lease(Duration::from_millis(1500))
            .heartbeat(Duration::from_millis(300))
    };
    let (h1, t1) = spawn(worker());
    let (h2, t2) = spawn(worker());
    let key = format!("{}record", c.broker().keys().prefix());
    let records = || async {
        let lines: Vec<String> =
            fairjob_tests::query(c.broker(), redis::cmd("LRANGE").arg(&key).arg(0).arg(-1))
                .await
                .unwrap();
        lines
    };
    eventually!(within Duration::from_secs(20), records().await.len() >= 4, "fire times run on the cluster");
    stop(h1, t1).await;
    stop(h2, t2).await;
    let mut per_fire: BTreeMap<i64, BTreeSet<String>> = BTreeMap::new();
    for l in records().await {
        let p: Vec<&str> = l.split(' ').collect();
        per_fire
            .entry(p[1].parse().unwrap())
            .or_default()
            .insert(p[2].to_owned());
    }
    for (fire, jids) in &per_fire {
        assert_eq!(jids.len(), 1, "fire time {fire}: {jids:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_claim_taken_over_after_its_push_is_not_pushed_twice() {
    use fairjob::testing::RedisCluster;
    use fairjob::{Client, QueueSpec, Worker};
    let cluster = RedisCluster::start(3, 1, &[]).expect("cluster starts");
    let url = cluster.url();
    let ns = fairjob_tests::namespace();
    let c = Client::builder(&url).namespace(&ns).build().await.unwrap();
    let b = c.broker();
    assert!(b.is_cluster());
    let payload = |jid: &str, fire: i64| {
        format!(
            r#"{{"class":"CronRecordJob","args":[0],"queue":"cronq","jid":"{jid}","retry":true,"created_at":1.0,"enqueued_at":1.0,"fairjob_cron":"tick","fairjob_fire_time":{fire}}}"#
        )
    };
    // Two claims whose poller died (their leases long expired): the first
    // after its push (its once mark is in the queue's slot), the second
    // before it.
    let (pushed_jid, unpushed_jid) = ("aaaaaaaaaaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbbbbbbbbbb");
    let firing = b.keys().cron_firing();
    let marks = b.keys().pushed("cronq");
    let _: i64 = fairjob_tests::query(
        b,
        redis::cmd("ZADD")
            .arg(&firing)
            .arg(0)
            .arg(payload(pushed_jid, 1000))
            .arg(0)
            .arg(payload(unpushed_jid, 1001)),
    )
    .await
    .unwrap();
    let _: i64 = fairjob_tests::query(b, redis::cmd("ZADD").arg(&marks).arg(1).arg(pushed_jid))
        .await
        .unwrap();
    let (h, t) = spawn(
        Worker::builder(&url)
            .namespace(&ns)
            .registry(registry())
            .queues(QueueSpec::parse(&["cronq".to_owned()]).unwrap())
            .poll_interval(Duration::from_millis(100)),
    );
    let key = format!("{}record", b.keys().prefix());
    let records = || async {
        let lines: Vec<String> =
            fairjob_tests::query(b, redis::cmd("LRANGE").arg(&key).arg(0).arg(-1))
                .await
                .unwrap();
        lines
    };
    eventually!(within Duration::from_secs(20),
        records().await.len() == 1, "the unpushed claim is pushed by a takeover");
    let left = || async {
        let f: usize = fairjob_tests::query(b, redis::cmd("ZCARD").arg(&firing))
            .await
            .unwrap();
        let m: usize = fairjob_tests::query(b, redis::cmd("ZCARD").arg(&marks))
            .await
            .unwrap();
        (f, m)
    };
    eventually!(
        left().await == (0, 0),
        "both claims and their marks are gone"
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop(h, t).await;
    let got = records().await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(
        got[0].starts_with(&format!("tick 1001 {unpushed_jid}")),
        "{got:?}"
    );
}
