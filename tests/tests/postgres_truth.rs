//! fairjob-postgres' "Postgres stays the truth" mode and its faults, with a
//! private PostgreSQL, a private Redis and real worker and pump processes:
//! kept rows stay until their job ends, ends flow back, Redis losing its data
//! (`FLUSHALL`, twice; a restart without persistence) republishes every job
//! not done and none done, a pump killed between the Redis push and the
//! PostgreSQL update pushes once, three pumps push every job once, the
//! worker goes on while PostgreSQL is away, and a kept job's end is recorded
//! once, by the call that acks or buries it (a worker killed right after
//! that call still has it recorded).

use std::collections::BTreeSet;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fairjob::{IntoPush, Job};
use fairjob_examples::EchoJob;
use fairjob_postgres::testing::PostgresServer;
use fairjob_postgres::{EnqueueTx, KeepExt, Pump, migrate, perform_bulk_tx};
use fairjob_tests::jobs::{LedgerJob, OutcomeJob, RecordJob, ShardEndJob, ShardJob};
use fairjob_tests::{Ledger, Redis, RedisServer, eventually, ledger_dir, redis_cli};
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

const LONG: Duration = Duration::from_secs(60);

async fn pg() -> (PostgresServer, PgPool) {
    let pg = PostgresServer::start().expect("start a private PostgreSQL (initdb, pg_ctl)");
    let pool = PgPoolOptions::new()
        .max_connections(8)
        .connect(&pg.url())
        .await
        .unwrap();
    migrate(&pool).await.unwrap();
    (pg, pool)
}

async fn count(pool: &PgPool, filter: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT count(*) FROM fairjob.outbox WHERE {filter}"
    )))
    .fetch_one(pool)
    .await
    .unwrap()
}

/// A `test-worker pump` process.
fn pump_process(url: &str, ns: &str, pg: &str, extra: &[&str], env: &[(&str, &str)]) -> Child {
    Command::new(fairjob_tests::bin("test-worker"))
        .args(["-r", url, "--namespace", ns])
        .args(["pump", "--postgres", pg])
        .args(["--poll-interval", "20ms", "--max-idle-interval", "200ms"])
        .args(["--check-interval", "200ms"])
        .args(extra)
        .envs(env.iter().copied())
        .env("FAIRJOB_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn kill(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_jobs_stay_until_they_end_and_their_ends_flow_back() {
    let (_pg, pool) = pg().await;
    let redis = Redis::start().await;
    let client = redis.client().await;
    let mut tx = pool.begin().await.unwrap();
    let mut kept = Vec::new();
    for i in 0..3 {
        let jid = EchoJob(format!("kept {i}"))
            .keep_until_done()
            .perform_async_tx(&mut *tx)
            .await
            .unwrap();
        kept.push(jid);
    }
    let dead = OutcomeJob {
        kind: "dead".into(),
        tenant: "acme".into(),
    }
    .keep_until_done()
    .perform_async_tx(&mut *tx)
    .await
    .unwrap();
    // A queue kept by the pump's setting, and a plain outbox job.
    let mut billing = EchoJob("billing".into()).into_push().unwrap();
    billing.set_queue("billing");
    let billing = billing.perform_async_tx(&mut *tx).await.unwrap();
    let outbox = EchoJob("outbox".into())
        .perform_async_tx(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();

    let pump = Pump::new(pool.clone(), client).keep_queues(["billing"]);
    let stats = pump.pump_once().await.unwrap();
    assert_eq!((stats.pushed, stats.kept), (6, 5), "{stats:?}");
    assert_eq!(
        count(&pool, "true").await,
        5,
        "the outbox row went, kept rows stay"
    );
    let row = fairjob_postgres::find_job(&pool, &outbox).await.unwrap();
    assert!(row.is_none(), "{row:?}");
    let row = fairjob_postgres::find_job(&pool, &kept[0])
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.state, "published", "{row:?}");

    let run = fairjob_tests::spawn(
        redis
            .worker()
            .queues(fairjob_tests::queues(&["default", "outcomes", "billing"]))
            .build()
            .await
            .unwrap(),
    );
    eventually!(
        within LONG,
        {
            pump.check().await.unwrap();
            count(&pool, "done_at IS NOT NULL").await == 5
        },
        "every kept job's end reaches PostgreSQL"
    );
    run.stop().await;
    for jid in kept.iter().chain([&billing]) {
        let row = fairjob_postgres::find_job(&pool, jid)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(row.state, "done", "{row:?}");
    }
    let row = fairjob_postgres::find_job(&pool, &dead)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.state, "dead", "{row:?}");
    let status = fairjob_postgres::status(&pool).await.unwrap();
    assert_eq!((status.kept_finished, status.kept_running), (5, 0));
    assert_eq!(status.backlog, 0);

    // Retention: finished rows go once older than it.
    let kept_a_week = pump.clone().retention(Duration::from_secs(3600));
    assert_eq!(kept_a_week.retain().await.unwrap(), 0);
    let none = pump.retention(Duration::ZERO);
    assert_eq!(none.retain().await.unwrap(), 5);
    assert_eq!(count(&pool, "true").await, 0);
}

/// Jids of the ledger that started more than once, among `jids`.
fn twice(ledger: &Ledger, jids: &[String]) -> Vec<String> {
    jids.iter()
        .filter(|j| ledger.started(j) > 1)
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flushall_republishes_every_job_not_done_and_none_that_was_done() {
    let (pg, pool) = pg().await;
    let redis = Redis::start().await;
    let dir = ledger_dir("pg-flushall");
    let worker = redis
        .worker_process()
        .queues(["ledger"])
        .concurrency(5)
        .flag("--postgres", pg.url())
        .ledger(&dir);
    let mut first = worker.start();
    let pumps = [
        pump_process(redis.url(), redis.ns(), &pg.url(), &[], &[]),
        pump_process(redis.url(), redis.ns(), &pg.url(), &[], &[]),
    ];

    // Done: run and recorded done in PostgreSQL.
    let mut tx = pool.begin().await.unwrap();
    let done = perform_bulk_tx(
        &mut *tx,
        (0..20).map(|_| LedgerJob::sleeping(0).keep_until_done()),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    eventually!(
        within LONG,
        count(&pool, "state = 'done'").await == 20,
        "the first jobs run and are recorded done"
    );

    // Running: long jobs the worker holds; queued: a queue nobody serves yet.
    let mut tx = pool.begin().await.unwrap();
    let running = perform_bulk_tx(
        &mut *tx,
        (0..5).map(|_| LedgerJob::sleeping(2500).keep_until_done()),
    )
    .await
    .unwrap();
    let queued = perform_bulk_tx(
        &mut *tx,
        (0..20).map(|_| {
            let mut p = LedgerJob::sleeping(0)
                .keep_until_done()
                .into_push()
                .unwrap();
            p.set_queue("later");
            p
        }),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    eventually!(
        within LONG,
        {
            let l = Ledger::read(&dir);
            running.iter().all(|j| l.started(j) == 1)
                && redis.llen(redis.keys().queue("later")).await == 20
        },
        "the long jobs run and the others wait in Redis"
    );

    // Redis loses everything, twice (the second during the republish).
    redis_cli(redis.server().port(), &["flushall"]);
    tokio::time::sleep(Duration::from_millis(300)).await;
    redis_cli(redis.server().port(), &["flushall"]);

    let mut second = redis
        .worker_process()
        .queues(["later", "ledger"])
        .ledger(&dir)
        .start();
    let not_done: Vec<String> = running.iter().chain(&queued).cloned().collect();
    eventually!(
        within LONG,
        count(&pool, "done_at IS NOT NULL").await == 45,
        "every job not done runs again and is recorded done"
    );
    let ledger = Ledger::read(&dir);
    assert!(
        ledger.not_ended(&not_done).is_empty(),
        "every job not done ran: {:?}",
        ledger.not_ended(&not_done)
    );
    assert_eq!(
        twice(&ledger, &done),
        Vec::<String>::new(),
        "no job that was done ran again"
    );
    assert_eq!(
        twice(&ledger, &queued),
        Vec::<String>::new(),
        "a queued job runs once more at most: once"
    );
    let status = fairjob_postgres::status(&pool).await.unwrap();
    assert!(!status.republished.is_empty(), "{status:?}");
    assert_eq!((status.backlog, status.kept_running), (0, 0), "{status:?}");
    first.stop();
    second.stop();
    for p in pumps {
        kill(p);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pump_killed_between_the_redis_push_and_the_postgres_update_pushes_once() {
    let (pg, pool) = pg().await;
    let redis = Redis::start().await;
    let mut tx = pool.begin().await.unwrap();
    let jids = perform_bulk_tx(
        &mut *tx,
        (0..50).map(|_| LedgerJob::sleeping(0).keep_until_done()),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();

    let hanging = pump_process(
        redis.url(),
        redis.ns(),
        &pg.url(),
        &[],
        &[(fairjob_postgres::HANG_AFTER_PUSH_ENV, "1")],
    );
    eventually!(
        within LONG,
        redis.llen(redis.keys().queue("ledger")).await == 50,
        "the pump pushes the batch"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    kill(hanging); // SIGKILL, between the push and the update
    assert_eq!(
        count(&pool, "published_at IS NULL AND staged").await,
        50,
        "PostgreSQL never heard of the push"
    );
    // Its claims would lapse after the lease (30 s): end them, as time would.
    sqlx::query("UPDATE fairjob.outbox SET claimed_until = NULL")
        .execute(&pool)
        .await
        .unwrap();
    let next = pump_process(redis.url(), redis.ns(), &pg.url(), &[], &[]);
    eventually!(
        within LONG,
        count(&pool, "published_at IS NOT NULL").await == 50,
        "the next pump finishes the batch"
    );
    let payloads = redis.payloads(&redis.keys().queue("ledger")).await;
    let unique: BTreeSet<&str> = payloads.iter().filter_map(|p| p["jid"].as_str()).collect();
    assert_eq!(
        (payloads.len(), unique.len()),
        (50, 50),
        "each job in Redis once"
    );

    let dir = ledger_dir("pg-kill");
    let mut worker = redis
        .worker_process()
        .queues(["ledger"])
        .flag("--postgres", pg.url())
        .ledger(&dir)
        .start();
    eventually!(
        within LONG,
        count(&pool, "state = 'done'").await == 50,
        "every job runs and is recorded done"
    );
    let ledger = Ledger::read(&dir);
    assert!(ledger.not_ended(&jids).is_empty());
    assert!(
        ledger.started_more_than_once().is_empty(),
        "each job ran once"
    );
    worker.stop();
    kill(next);

    // The CLI's views of the PostgreSQL side.
    let out = redis.cli(&["postgres", "status", "--postgres", &pg.url()]);
    assert!(out.contains("backlog: 0 rows"), "{out}");
    assert!(out.contains("0 in Redis not ended, 50 ended"), "{out}");
    let out = redis.cli(&["explain", &jids[0], "--postgres", &pg.url()]);
    assert!(out.contains("PostgreSQL: ended (done)"), "{out}");
    // `--postgres` alone reads DATABASE_URL, as `pump` and `postgres migrate` do.
    let from_env = redis
        .worker_process()
        .env("DATABASE_URL", pg.url())
        .command(&["explain", &jids[0], "--postgres"]);
    assert_eq!(from_env, out);
    let no_url = redis
        .worker_process()
        .env("DATABASE_URL", "")
        .command_output(&["explain", &jids[0], "--postgres"]);
    assert!(!no_url.status.success());
    let err = String::from_utf8_lossy(&no_url.stderr);
    assert!(err.contains("DATABASE_URL, which is not set"), "{err}");
}

/// The issue's size: 100,000 rows, 20 tenants, three pump processes.
const THREE_PUMPS_ROWS: usize = 100_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_pump_processes_push_100000_jobs_once() {
    let (pg, pool) = pg().await;
    let redis = Redis::start().await;
    let mut tx = pool.begin().await.unwrap();
    let jobs =
        (0..THREE_PUMPS_ROWS).map(|i| EchoJob(i.to_string()).set_tenant(format!("t{}", i % 20)));
    let jids = perform_bulk_tx(&mut *tx, jobs).await.unwrap();
    tx.commit().await.unwrap();
    let pumps: Vec<Child> = (0..3)
        .map(|_| pump_process(redis.url(), redis.ns(), &pg.url(), &["--batch", "500"], &[]))
        .collect();
    eventually!(
        within Duration::from_secs(300),
        count(&pool, "true").await == 0,
        "three pumps drain the outbox"
    );
    let status = fairjob_postgres::status(&pool).await.unwrap();
    assert_eq!(
        status.pumps.iter().filter(|p| p.alive).count(),
        3,
        "three pumps at work: {status:?}"
    );
    for p in pumps {
        kill(p);
    }
    // Read in pages: one LRANGE of 100,000 payloads outlasts the client's
    // response timeout.
    let queue = redis.keys().queue("default");
    let mut found: Vec<String> = Vec::with_capacity(THREE_PUMPS_ROWS);
    loop {
        let start = found.len();
        let page: Vec<String> = redis
            .query(
                redis::cmd("LRANGE")
                    .arg(&queue)
                    .arg(start)
                    .arg(start + 19_999),
            )
            .await;
        if page.is_empty() {
            break;
        }
        for entry in page {
            // The jid without a full JSON parse (100,000 of them, unoptimised).
            let jid = entry
                .split("\"jid\":\"")
                .nth(1)
                .and_then(|rest| rest.split('"').next())
                .unwrap_or_else(|| panic!("a payload with a jid: {entry}"));
            found.push(jid.to_owned());
        }
    }
    let unique: BTreeSet<&str> = found.iter().map(String::as_str).collect();
    assert_eq!(
        (found.len(), unique.len()),
        (THREE_PUMPS_ROWS, THREE_PUMPS_ROWS),
        "every job in Redis once"
    );
    assert!(
        jids.iter().all(|j| unique.contains(j.as_str())),
        "the very jobs committed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_redis_is_down_the_backlog_grows_and_then_drains() {
    let (pg, pool) = pg().await;
    let mut server = RedisServer::start(&[]).unwrap();
    let redis = Redis::connect(&server.url(), &fairjob_tests::namespace()).await;
    let mut pump = pump_process(redis.url(), redis.ns(), &pg.url(), &[], &[]);
    let mut tx = pool.begin().await.unwrap();
    let first = EchoJob("before".into())
        .keep_until_done()
        .perform_async_tx(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    eventually!(
        within LONG,
        count(&pool, "published_at IS NOT NULL").await == 1,
        "the pump works"
    );

    // Redis away for the issue's 30 s; commits go on meanwhile.
    server.kill();
    let down = std::time::Instant::now();
    let mut during = Vec::new();
    for round in 0..3 {
        let mut tx = pool.begin().await.unwrap();
        let jids = perform_bulk_tx(
            &mut *tx,
            (0..100).map(|i| EchoJob(format!("during {round} {i}")).keep_until_done()),
        )
        .await
        .unwrap();
        tx.commit().await.unwrap();
        during.extend(jids);
        let status = fairjob_postgres::status(&pool).await.unwrap();
        assert_eq!(
            status.backlog,
            100 * (round + 1),
            "the backlog grows while Redis is away: {status:?}"
        );
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
    assert!(down.elapsed() >= Duration::from_secs(30));
    let status = fairjob_postgres::status(&pool).await.unwrap();
    assert_eq!(
        status.backlog, 300,
        "the backlog waits for Redis: {status:?}"
    );
    assert!(status.lag.unwrap() >= Duration::from_secs(29), "{status:?}");
    assert!(
        pump.try_wait().unwrap().is_none(),
        "the pump outlives Redis's absence"
    );

    // Back without its data (no persistence): the earlier job is republished too.
    server.restart(&[]).unwrap();
    eventually!(
        within LONG,
        count(&pool, "published_at IS NOT NULL").await == 301,
        "the backlog drains"
    );
    let redis = Redis::connect(&server.url(), redis.ns()).await;
    let payloads = redis.payloads(&redis.keys().queue("default")).await;
    let unique: BTreeSet<&str> = payloads.iter().filter_map(|p| p["jid"].as_str()).collect();
    assert_eq!(
        (payloads.len(), unique.len()),
        (301, 301),
        "every job in Redis, once"
    );
    assert!(
        during.iter().all(|j| unique.contains(j.as_str())),
        "every job committed while Redis was away reached it"
    );
    assert!(
        unique.contains(first.as_str()),
        "the job Redis lost is back"
    );
    kill(pump);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_postgres_is_down_the_worker_runs_what_redis_has_and_the_pump_resumes() {
    let (pg, pool) = pg().await;
    let redis = Redis::start().await;
    let mut worker = redis
        .worker_process()
        .queues(["default"])
        .flag("--postgres", pg.url())
        .start();
    let mut tx = pool.begin().await.unwrap();
    RecordJob("via postgres".into())
        .keep_until_done()
        .perform_async_tx(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    eventually!(
        within LONG,
        count(&pool, "state = 'done'").await == 1,
        "the pump and the worker work"
    );
    drop(pool);

    // PostgreSQL away for the issue's 30 s; jobs pushed directly go on
    // running all along.
    pg.stop().unwrap();
    let down = std::time::Instant::now();
    let client = redis.client().await;
    for round in 0..3 {
        for i in 0..10 {
            RecordJob(format!("direct {round} {i}"))
                .perform_async(&client)
                .await
                .unwrap();
        }
        eventually!(
            within LONG,
            redis.recorded().await == 1 + 10 * (round + 1),
            "the worker runs what Redis has while PostgreSQL is away"
        );
        assert!(
            worker.is_running(),
            "the worker outlives PostgreSQL's absence"
        );
        if let Some(rest) = Duration::from_secs(10 * (round as u64 + 1)).checked_sub(down.elapsed())
        {
            tokio::time::sleep(rest).await;
        }
    }
    assert!(down.elapsed() >= Duration::from_secs(30));
    assert!(
        worker.is_running(),
        "the worker outlives PostgreSQL's absence"
    );

    pg.start_again().unwrap();
    let pool = PgPool::connect(&pg.url()).await.unwrap();
    let mut tx = pool.begin().await.unwrap();
    RecordJob("after".into())
        .keep_until_done()
        .perform_async_tx(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    eventually!(
        within LONG,
        count(&pool, "state = 'done'").await == 2,
        "the pump resumes"
    );
    worker.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_library_worker_runs_the_pump_with_workerbuilder_postgres() {
    use fairjob_postgres::WorkerBuilderExt;
    let (_pg, pool) = pg().await;
    let redis = Redis::start().await;
    let worker = redis
        .worker()
        .queues(fairjob_tests::queues(&["default", "billing"]))
        .postgres_with(pool.clone(), |p| {
            p.keep_queues(["billing"])
                .check_interval(Duration::from_millis(100))
                .listen(true)
        })
        .build()
        .await
        .unwrap();
    let run = fairjob_tests::spawn(worker);
    let mut tx = pool.begin().await.unwrap();
    let mut billing = EchoJob("billing".into()).into_push().unwrap();
    billing.set_queue("billing");
    let jid = billing.perform_async_tx(&mut *tx).await.unwrap();
    tx.commit().await.unwrap();
    fairjob_postgres::notify_pumps(&pool).await.unwrap();
    eventually!(
        within LONG,
        fairjob_postgres::find_job(&pool, &jid)
            .await
            .unwrap()
            .is_some_and(|r| r.state == "done"),
        "the worker's own pump keeps the billing job until it is done"
    );
    let status = fairjob_postgres::status(&pool).await.unwrap();
    assert_eq!(
        status.pumps.iter().filter(|p| p.alive).count(),
        1,
        "{status:?}"
    );
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_overview_shows_the_postgres_side() {
    use fairjob_tests::web::{Dashboard, Http};
    let (pg, pool) = pg().await;
    let redis = Redis::start().await;
    let mut tx = pool.begin().await.unwrap();
    perform_bulk_tx(
        &mut *tx,
        (0..3).map(|i| EchoJob(format!("kept {i}")).keep_until_done()),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    // The worker serves another queue: the kept jobs stay in Redis, not ended.
    let url = pg.url();
    let dashboard = Dashboard::start(
        redis.url(),
        redis.ns(),
        &[
            "run",
            "-q",
            "elsewhere",
            "--postgres",
            &url,
            "--web",
            "127.0.0.1:0",
        ],
        &[],
    );
    let mut http = Http::new();
    eventually!(
        within LONG,
        let body = http.get(&format!("{}/", dashboard.url), &[]).body;
        body.contains("PostgreSQL outbox")
            && body.contains("<tr><th>kept jobs in Redis, not ended</th><td>3</td></tr>")
            && body.contains("<tr><th>pumps alive</th><td>1</td></tr>"),
        "the overview's PostgreSQL panel"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_job_missing_from_redis_past_the_grace_is_published_again_and_a_done_one_is_not() {
    let (_pg, pool) = pg().await;
    let redis = Redis::start().await;
    let client = redis.client().await;
    let mut tx = pool.begin().await.unwrap();
    let jids = perform_bulk_tx(
        &mut *tx,
        (0..3).map(|i| EchoJob(format!("kept {i}")).keep_until_done()),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let pump = Pump::new(pool.clone(), client.clone()).lost_grace(Duration::ZERO);
    assert_eq!(pump.pump_once().await.unwrap().kept, 3);
    assert_eq!(pump.check().await.unwrap().missing, 0, "all three are live");

    // A failover that kept the epoch but dropped the writes of job 0 (its
    // push and its live mark); job 1 ended and its end is not drained yet.
    let queue = redis.keys().queue("default");
    let payloads = redis.lrange(&queue).await;
    let lost = payloads.iter().find(|p| p.contains(&jids[0])).unwrap();
    let _: i64 = redis
        .query(redis::cmd("LREM").arg(&queue).arg(0).arg(lost))
        .await;
    let _: i64 = redis
        .query(
            redis::cmd("SREM")
                .arg(redis.key("fairjob:{staged}:live"))
                .arg(&jids[0]),
        )
        .await;
    client
        .record_relay_ends(&[(fairjob::RelayEnd::Done, jids[1].clone())])
        .await
        .unwrap();

    let checked = pump.check().await.unwrap();
    assert_eq!(
        (checked.missing, checked.completions),
        (1, 1),
        "{checked:?}"
    );
    let state = |jid: String| {
        let pool = pool.clone();
        async move {
            fairjob_postgres::find_job(&pool, &jid)
                .await
                .unwrap()
                .unwrap()
                .state
        }
    };
    assert_eq!(state(jids[0].clone()).await, "pending");
    assert_eq!(
        state(jids[1].clone()).await,
        "done",
        "a done job is never republished"
    );
    assert_eq!(state(jids[2].clone()).await, "published");
    assert_eq!(pump.pump_once().await.unwrap().pushed, 1);
    assert_eq!(state(jids[0].clone()).await, "published");
    let payloads = redis.lrange(&queue).await;
    assert_eq!(
        payloads.iter().filter(|p| p.contains(&jids[0])).count(),
        1,
        "job 0 is back, once"
    );
    let status = fairjob_postgres::status(&pool).await.unwrap();
    assert_eq!(status.republished.len(), 1);
    assert_eq!(status.republished[0].jobs, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboards_explain_finds_a_jid_still_only_in_postgres() {
    use fairjob_tests::web::{Dashboard, Http};
    let (pg, pool) = pg().await;
    let redis = Redis::start().await;
    let tenant = "<script>alert(1)</script>";
    let mut tx = pool.begin().await.unwrap();
    let waiting = EchoJob("waiting".into())
        .set_tenant(tenant)
        .perform_async_tx(&mut *tx)
        .await
        .unwrap();
    let kept = EchoJob("kept".into())
        .keep_until_done()
        .perform_async_tx(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    // Only the kept job reaches Redis (a pump that takes one row per batch,
    // the kept one first by tenant order: "" < "<script>…").
    let pump = Pump::new(pool.clone(), redis.client().await).batch(1);
    assert_eq!(pump.pump_once().await.unwrap().kept, 1);
    assert!(redis.payloads(&redis.keys().queue("default")).await[0]["jid"] == kept.as_str());

    // The dashboard alone (no pump): its URL from the config's [postgres].
    let dir = fairjob_tests::temp_dir("pg-explain");
    let config = dir.join("worker.toml");
    std::fs::write(&config, format!("[postgres]\nurl = {:?}\n", pg.url())).unwrap();
    let dashboard = Dashboard::start(
        redis.url(),
        redis.ns(),
        &[
            "-C",
            config.to_str().unwrap(),
            "web",
            "--bind",
            "127.0.0.1:0",
        ],
        &[],
    );
    let mut http = Http::new();
    let page = |http: &mut Http, jid: &str| {
        let r = http.get(&format!("{}/explain?jid={jid}", dashboard.url), &[]);
        assert_eq!(r.status, 200, "{}", r.body);
        r.body
    };

    let body = page(&mut http, &waiting);
    assert!(body.contains("<h3>In PostgreSQL</h3>"), "{body}");
    assert!(
        body.contains(
            "<tr><th>state</th><td>committed, not in Redis yet (waiting for a pump)</td></tr>"
        ),
        "{body}"
    );
    assert!(
        body.contains("<tr><th>tenant</th><td>&lt;script&gt;alert(1)&lt;/script&gt;</td></tr>"),
        "the tenant is escaped: {body}"
    );
    assert!(!body.contains("<script>alert(1)"), "{body}");

    let body = page(&mut http, &kept);
    assert!(
        body.contains(
            "<tr><th>state</th><td>in Redis (kept in PostgreSQL until it ends)</td></tr>"
        ),
        "{body}"
    );
    let body = page(&mut http, "000000000000000000000000");
    assert!(
        body.contains("none (never enqueued through PostgreSQL, or its row is gone)"),
        "{body}"
    );

    // The JSON twin.
    let r = http.get(&format!("{}/api/explain?jid={waiting}", dashboard.url), &[]);
    assert_eq!(r.status, 200, "{}", r.body);
    let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(v["found"], false, "not in Redis: {v}");
    assert_eq!(v["elsewhere"][0]["title"], "In PostgreSQL", "{v}");
    let rows = v["elsewhere"][0]["rows"].as_array().unwrap();
    assert!(rows.contains(&serde_json::json!(["tenant", tenant])), "{v}");

    // PostgreSQL away: the page still answers, saying why.
    drop((pump, pool));
    pg.stop().unwrap();
    let body = page(&mut http, &waiting);
    assert!(body.contains("PostgreSQL: "), "{body}");
    assert!(!body.contains("<h3>In PostgreSQL</h3>"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pump_killed_while_draining_completions_loses_none_and_runs_no_done_job_again() {
    let (pg, pool) = pg().await;
    let redis = Redis::start().await;
    let client = redis.client().await;
    let mut tx = pool.begin().await.unwrap();
    let jids = perform_bulk_tx(
        &mut *tx,
        (0..20).map(|_| LedgerJob::sleeping(0).keep_until_done()),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let pump = Pump::new(pool.clone(), client.clone()).lost_grace(Duration::ZERO);
    assert_eq!(pump.pump_once().await.unwrap().kept, 20);

    // The jobs run; their ends wait in Redis (no pump drains them yet).
    let dir = ledger_dir("pg-drain-kill");
    let mut worker = redis
        .worker_process()
        .queues(["ledger"])
        .ledger(&dir)
        .start();
    eventually!(
        within LONG,
        client.relay_ends_waiting().await.unwrap() == 20,
        "every job ends and its end is recorded in Redis"
    );
    worker.stop();

    // A pump killed (SIGKILL) after reading the ends, before writing them.
    let marker = dir.join("drain-read");
    let hanging = pump_process(
        redis.url(),
        redis.ns(),
        &pg.url(),
        &[],
        &[(
            fairjob_postgres::HANG_AFTER_DRAIN_READ_ENV,
            marker.to_str().unwrap(),
        )],
    );
    eventually!(within LONG, marker.exists(), "the pump reads the ends and hangs");
    kill(hanging);
    assert_eq!(
        client.relay_ends_waiting().await.unwrap(),
        20,
        "the ends it read are still in Redis"
    );
    assert_eq!(count(&pool, "done_at IS NOT NULL").await, 0);

    // The next check writes them; none of the done jobs is taken for lost
    // (their jids left the live set with their ends), then or later.
    let checked = pump.check().await.unwrap();
    assert_eq!(
        (checked.completions, checked.missing),
        (20, 0),
        "{checked:?}"
    );
    assert_eq!(count(&pool, "state = 'done'").await, 20);
    assert_eq!(client.relay_ends_waiting().await.unwrap(), 0);
    assert_eq!(pump.check().await.unwrap().missing, 0);
    // Even Redis losing everything republishes none of them.
    redis_cli(redis.server().port(), &["flushall"]);
    let checked = pump.check().await.unwrap();
    assert!(checked.lost, "{checked:?}");
    assert_eq!(checked.republished, 0, "{checked:?}");
    assert_eq!(pump.pump_once().await.unwrap().pushed, 0);
    let ledger = Ledger::read(&dir);
    assert!(ledger.not_ended(&jids).is_empty());
    assert!(
        ledger.started_more_than_once().is_empty(),
        "no done job ran again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_pumps_draining_the_same_completions_write_each_end_once_and_drop_none() {
    let (_pg, pool) = pg().await;
    let redis = Redis::start().await;
    let client = redis.client().await;
    let mut tx = pool.begin().await.unwrap();
    let jids = perform_bulk_tx(
        &mut *tx,
        (0..2500).map(|i| EchoJob(format!("kept {i}")).keep_until_done()),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let pump = Pump::new(pool.clone(), client.clone()).batch(2500);
    assert_eq!(pump.pump_once().await.unwrap().kept, 2500);
    let ends: Vec<(fairjob::RelayEnd, String)> = jids
        .iter()
        .map(|j| (fairjob::RelayEnd::Done, j.clone()))
        .collect();
    for chunk in ends.chunks(100) {
        client.record_relay_ends(chunk).await.unwrap();
    }
    // Two pumps drain at once (each reads the head before the other trims).
    let other = Pump::new(pool.clone(), redis.client().await);
    let (a, b) = tokio::join!(pump.check(), other.check());
    let (a, b) = (a.unwrap(), b.unwrap());
    let rest = pump.check().await.unwrap();
    assert!(
        a.completions + b.completions + rest.completions >= 2500,
        "{a:?} {b:?} {rest:?}"
    );
    assert_eq!(client.relay_ends_waiting().await.unwrap(), 0);
    assert_eq!(count(&pool, "state = 'done'").await, 2500, "no end dropped");
}

/// No window between a kept job's end and its record: on one server the
/// script that acks or buries the job records its end in the same step. A
/// worker killed with `kill -9` right after the exits of three kept jobs (a
/// plain queue's ack, a tenant-sharded queue's batched ack, a burial in
/// `dead`) still has their ends recorded: the rows finish, and a `FLUSHALL`
/// after that republishes none of them, so none runs again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_right_after_kept_jobs_exits_has_their_ends_recorded_and_never_reruns_them()
{
    let (_pg, pool) = pg().await;
    let redis = Redis::start().await;
    let client = redis.client().await;
    let tenant = "a:{b} ü <script>";
    let mut tx = pool.begin().await.unwrap();
    let plain = LedgerJob::sleeping(0)
        .keep_until_done()
        .perform_async_tx(&mut *tx)
        .await
        .unwrap();
    let sharded = ShardJob {
        tenant: tenant.into(),
        n: 7,
        ms: 0,
    }
    .keep_until_done()
    .perform_async_tx(&mut *tx)
    .await
    .unwrap();
    let dead = OutcomeJob {
        kind: "dead".into(),
        tenant: tenant.into(),
    }
    .keep_until_done()
    .perform_async_tx(&mut *tx)
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let pump = Pump::new(pool.clone(), client.clone()).lost_grace(Duration::ZERO);
    assert_eq!(pump.pump_once().await.unwrap().kept, 3);
    let all = [plain.clone(), sharded.clone(), dead.clone()];
    assert!(client.relay_missing(&all).await.unwrap().is_empty());

    let dir = ledger_dir("pg-end-in-exit");
    let marker = dir.join("exited");
    let mut worker = redis
        .worker_process()
        .queues(["ledger", "conversions", "outcomes"])
        .ledger(&dir)
        .env(fairjob::worker::HANG_AFTER_KEPT_END_ENV, marker.as_os_str())
        .start();
    let exited = || {
        std::fs::read_to_string(&marker)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect::<BTreeSet<String>>()
    };
    eventually!(
        within LONG,
        exited() == all.iter().cloned().collect(),
        "the three jobs run and exit"
    );
    worker.signal("KILL");
    worker.wait_timeout(Duration::from_secs(10));
    assert_eq!(Ledger::read(&dir).started(&plain), 1);
    assert_eq!(redis.records().await, vec![format!("{tenant} 7")]);

    // Their ends were written with their exits: recorded, and no longer live.
    assert_eq!(client.relay_ends_waiting().await.unwrap(), 3);
    assert_eq!(client.relay_missing(&all).await.unwrap().len(), 3);
    let checked = pump.check().await.unwrap();
    assert_eq!(checked.completions, 3, "{checked:?}");
    for (jid, state) in [(&plain, "done"), (&sharded, "done"), (&dead, "dead")] {
        let row = fairjob_postgres::find_job(&pool, jid)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(row.state, state, "{row:?}");
    }

    // Redis losing its data republishes none of them.
    redis_cli(redis.server().port(), &["flushall"]);
    let checked = pump.check().await.unwrap();
    assert_eq!(
        (checked.republished, checked.missing),
        (0, 0),
        "{checked:?}"
    );
    assert_eq!(pump.pump_once().await.unwrap().pushed, 0);

    // A worker that runs a later kept job to its end runs none of them again.
    let mut tx = pool.begin().await.unwrap();
    let later = LedgerJob::sleeping(0)
        .keep_until_done()
        .perform_async_tx(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(pump.pump_once().await.unwrap().pushed, 1);
    let mut again = redis
        .worker_process()
        .queues(["ledger", "conversions", "outcomes"])
        .ledger(&dir)
        .start();
    eventually!(
        within LONG,
        {
            pump.check().await.unwrap();
            fairjob_postgres::find_job(&pool, &later)
                .await
                .unwrap()
                .is_some_and(|r| r.state == "done")
        },
        "the later job runs and is recorded done"
    );
    again.stop();
    let ledger = Ledger::read(&dir);
    assert_eq!((ledger.started(&plain), ledger.started(&later)), (1, 1));
    assert!(
        redis.records().await.is_empty(),
        "the sharded job ran again"
    );
    for (jid, state) in [(&plain, "done"), (&sharded, "done"), (&dead, "dead")] {
        let row = fairjob_postgres::find_job(&pool, jid)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(row.state, state, "{row:?}");
    }
}

/// The other ends of a kept job, each recorded once by the call that writes
/// it: a tenant-sharded queue's job discarded to `dead` (`shard_finish.lua`),
/// and the reaper's "interrupted" burial of a plain queue's and a sharded
/// queue's poison pill (`finish.lua` and `shard_finish.lua` in a recovery).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_jobs_buried_by_their_worker_or_by_the_reaper_have_their_end_recorded_once() {
    let (_pg, pool) = pg().await;
    let redis = Redis::start().await;
    let client = redis.client().await;
    let tenant = "t:{x} é";
    let pump = Pump::new(pool.clone(), client.clone());
    let ends = || async {
        let read = client.peek_relay_ends(100).await.unwrap();
        let mut ends: Vec<String> = read.ends.iter().map(|(e, jid)| e.entry(jid)).collect();
        ends.sort();
        ends
    };

    // A sharded queue's job its worker buries.
    let mut tx = pool.begin().await.unwrap();
    let discarded = ShardEndJob {
        kind: "dead".into(),
        tenant: tenant.into(),
    }
    .keep_until_done()
    .perform_async_tx(&mut *tx)
    .await
    .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(pump.pump_once().await.unwrap().kept, 1);
    let mut worker = redis.worker_process().queues(["conversions"]).start();
    eventually!(
        within LONG,
        redis.zcard(redis.keys().dead()).await == 1,
        "the job is buried"
    );
    worker.stop();
    assert_eq!(ends().await, vec![format!("dead {discarded}")]);
    assert_eq!(pump.check().await.unwrap().completions, 1);

    // Two poison pills the reaper buries after one interruption each.
    let mut tx = pool.begin().await.unwrap();
    let plain = LedgerJob::poison()
        .keep_until_done()
        .perform_async_tx(&mut *tx)
        .await
        .unwrap();
    let sharded = ShardEndJob {
        kind: "abort".into(),
        tenant: tenant.into(),
    }
    .keep_until_done()
    .perform_async_tx(&mut *tx)
    .await
    .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(pump.pump_once().await.unwrap().kept, 2);
    let dir = ledger_dir("pg-reaper-burial");
    let started = std::time::Instant::now();
    // A supervisor: a worker again each time one dies (bounded).
    while redis.zcard(redis.keys().dead()).await < 3 {
        assert!(started.elapsed() < LONG, "the poison pills were not buried");
        let mut w = redis
            .worker_process()
            .queues(["ledger", "conversions"])
            .ledger(&dir)
            .concurrency(1)
            .flag("--max-interruptions", "1")
            .start();
        while w.is_running() && redis.zcard(redis.keys().dead()).await < 3 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if w.is_running() {
            w.stop();
        }
    }
    // Buried after one interruption: never run twice.
    assert!(Ledger::read(&dir).started(&plain) <= 1);
    let mut want = vec![format!("dead {plain}"), format!("dead {sharded}")];
    want.sort();
    assert_eq!(ends().await, want, "each burial recorded once");
    assert_eq!(
        client
            .relay_missing(&[plain.clone(), sharded.clone()])
            .await
            .unwrap()
            .len(),
        2
    );
    assert_eq!(pump.check().await.unwrap().completions, 2);
    for jid in [&discarded, &plain, &sharded] {
        let row = fairjob_postgres::find_job(&pool, jid)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(row.state, "dead", "{row:?}");
    }
}
