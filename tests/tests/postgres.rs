//! fairjob-postgres against a private PostgreSQL and a private Redis:
//! transactional enqueue, the pump's claims, once-only publishing and fairness.

use std::time::Duration;

use fairjob::Job;
use fairjob_examples::{ECHO_LIST, EchoJob};
use fairjob_postgres::testing::PostgresServer;
use fairjob_postgres::{EnqueueTx, Error, Pump, SCHEMA_VERSION, migrate, perform_bulk_tx};
use fairjob_tests::jobs::ShardJob;
use fairjob_tests::{Redis, eventually};
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

async fn setup() -> (PostgresServer, PgPool, Redis) {
    let pg = PostgresServer::start().expect("start a private PostgreSQL (initdb, pg_ctl)");
    let pool = PgPoolOptions::new()
        .max_connections(8)
        .connect(&pg.url())
        .await
        .unwrap();
    migrate(&pool).await.unwrap();
    (pg, pool, Redis::start().await)
}

async fn queued(redis: &Redis) -> Vec<serde_json::Value> {
    redis.payloads(&redis.keys().queue("default")).await
}

async fn outbox_rows(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM fairjob.outbox")
        .fetch_one(pool)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_never_runs_commit_runs() {
    let (_pg, pool, redis) = setup().await;
    let client = redis.client().await;

    let mut tx = pool.begin().await.unwrap();
    let rolled = EchoJob("rolled back".into())
        .perform_async_tx(&mut *tx)
        .await
        .unwrap();
    tx.rollback().await.unwrap();

    let mut tx = pool.begin().await.unwrap();
    // The transaction itself works as well as its connection (`&mut *tx`).
    let jid = EchoJob("committed".into())
        .perform_async_tx(&mut tx)
        .await
        .unwrap();
    assert_eq!(jid.len(), 24, "the jid is known before the commit");
    tx.commit().await.unwrap();

    let pump = Pump::new(pool.clone(), client.clone());
    let stats = pump.pump_once().await.unwrap();
    assert_eq!(stats.pushed, 1);
    assert_eq!(
        outbox_rows(&pool).await,
        0,
        "outbox: the row goes once Redis has the job"
    );

    let run = fairjob_tests::spawn(redis.worker().build().await.unwrap());
    eventually!(
        let echoed = redis.lrange(redis.key(ECHO_LIST)).await; echoed == vec!["committed".to_owned()],
        "the committed job runs"
    );
    run.stop().await;
    let all = redis.lrange(redis.key(ECHO_LIST)).await;
    assert_eq!(all, vec!["committed".to_owned()], "{rolled} never runs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_transaction_is_invisible_to_the_pump() {
    let (_pg, pool, redis) = setup().await;
    let client = redis.client().await;
    let pump = Pump::new(pool.clone(), client)
        .poll_interval(Duration::from_millis(50))
        .max_idle_interval(Duration::from_millis(100));
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(pump.run(async {
        let _ = stop_rx.await;
    }));

    let mut tx = pool.begin().await.unwrap();
    EchoJob("later".into())
        .perform_async_tx(&mut *tx)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        queued(&redis).await.is_empty(),
        "nothing in Redis before the commit"
    );
    tx.commit().await.unwrap();
    eventually!(
        queued(&redis).await.len() == 1,
        "the pump pushes it after the commit"
    );

    let _ = stop_tx.send(());
    running.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_tenant_ids_survive_the_round_trip() {
    let (_pg, pool, redis) = setup().await;
    let tenants = [
        "a:b",
        "{slot}",
        "with space",
        "Zürich-東京",
        "<script>alert(1)</script>",
        "",
    ];
    let mut tx = pool.begin().await.unwrap();
    let jobs = tenants
        .iter()
        .map(|t| EchoJob(format!("for {t}")).set_tenant(*t));
    let jids = perform_bulk_tx(&mut *tx, jobs).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(jids.len(), tenants.len());

    let stats = Pump::new(pool.clone(), redis.client().await)
        .pump_once()
        .await
        .unwrap();
    assert_eq!(stats.pushed, tenants.len());
    let payloads = queued(&redis).await;
    for (t, jid) in tenants.iter().zip(&jids) {
        let p = payloads
            .iter()
            .find(|p| p["jid"] == jid.as_str())
            .unwrap_or_else(|| panic!("{jid} ({t}) reached Redis"));
        if t.is_empty() {
            assert!(p.get("fair_tenant").is_none(), "{p}");
        } else {
            assert_eq!(p["fair_tenant"], *t, "{p}");
        }
        assert_eq!(p["class"], EchoJob::CLASS);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_repeated_after_a_crash_is_not_pushed_twice() {
    let (_pg, pool, redis) = setup().await;
    let client = redis.client().await;
    let mut tx = pool.begin().await.unwrap();
    EchoJob("once".into())
        .perform_async_tx(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    // Keep a copy of the row as it is once staged: a pump killed after the
    // Redis push and before its DELETE leaves exactly that row behind.
    sqlx::query("CREATE TABLE kept AS SELECT * FROM fairjob.outbox")
        .execute(&pool)
        .await
        .unwrap();
    let pump = Pump::new(pool.clone(), client);
    assert_eq!(pump.pump_once().await.unwrap().pushed, 1);
    sqlx::query("INSERT INTO fairjob.outbox SELECT * FROM kept")
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query("UPDATE fairjob.outbox SET staged = true")
        .execute(&pool)
        .await
        .unwrap();
    let again = pump.pump_once().await.unwrap();
    assert_eq!((again.pushed, again.already), (0, 1));
    assert_eq!(queued(&redis).await.len(), 1, "the job is in Redis once");
    assert_eq!(outbox_rows(&pool).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pump_rolled_back_after_its_push_pushes_nothing_twice_to_plain_and_sharded_queues() {
    let (_pg, pool, redis) = setup().await;
    let mut tx = pool.begin().await.unwrap();
    for n in 0..3 {
        EchoJob(format!("plain {n}"))
            .perform_async_tx(&mut *tx)
            .await
            .unwrap();
        ShardJob {
            tenant: format!("t{{:{n}}}"),
            n,
            ms: 0,
        }
        .perform_async_tx(&mut *tx)
        .await
        .unwrap();
    }
    tx.commit().await.unwrap();
    // The fault: the pump's write-back fails after its Redis push, so its
    // transaction rolls back and every row is pending again, unmarked.
    sqlx::raw_sql(
        "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS
           $$ BEGIN RAISE EXCEPTION 'refused by the test'; END $$;
         CREATE TRIGGER refuse BEFORE DELETE ON fairjob.outbox
           FOR EACH STATEMENT EXECUTE FUNCTION refuse();",
    )
    .execute(&pool)
    .await
    .unwrap();
    let pump = Pump::new(pool.clone(), redis.client().await);
    let err = pump.pump_once().await.unwrap_err();
    assert!(err.to_string().contains("refused by the test"), "{err}");
    assert_eq!(outbox_rows(&pool).await, 6, "the rows came back");
    assert_eq!(queued(&redis).await.len(), 3, "the plain jobs were pushed");
    sqlx::query("DROP TRIGGER refuse ON fairjob.outbox")
        .execute(&pool)
        .await
        .unwrap();
    let again = pump.pump_once().await.unwrap();
    assert_eq!((again.pushed, again.already), (0, 6));
    assert_eq!(outbox_rows(&pool).await, 0);
    assert_eq!(queued(&redis).await.len(), 3, "each plain job once");
    // Each sharded job runs once.
    let run = fairjob_tests::spawn(
        redis
            .worker()
            .queues(fairjob_tests::queues(&["conversions"]))
            .build()
            .await
            .unwrap(),
    );
    eventually!(redis.records().await.len() >= 3, "the sharded jobs run");
    tokio::time::sleep(Duration::from_millis(500)).await;
    run.stop().await;
    let mut records = redis.records().await;
    records.sort();
    assert_eq!(
        records,
        ["t{:0} 0", "t{:1} 1", "t{:2} 2"],
        "each sharded job once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_pumps_push_every_job_once() {
    let (_pg, pool, redis) = setup().await;
    let mut tx = pool.begin().await.unwrap();
    let jobs = (0..3000).map(|i| EchoJob(i.to_string()).set_tenant(format!("t{}", i % 7)));
    perform_bulk_tx(&mut *tx, jobs).await.unwrap();
    tx.commit().await.unwrap();

    let mut handles = Vec::new();
    for _ in 0..2 {
        let pump = Pump::new(pool.clone(), redis.client().await).batch(200);
        handles.push(tokio::spawn(async move {
            let mut claimed = 0;
            loop {
                let s = pump.pump_once().await.unwrap();
                if s.claimed == 0 {
                    return claimed;
                }
                claimed += s.pushed;
            }
        }));
    }
    let mut total = 0;
    for h in handles {
        total += h.await.unwrap();
    }
    assert_eq!(total, 3000);
    let payloads = queued(&redis).await;
    let mut jids: Vec<&str> = payloads
        .iter()
        .map(|p| p["jid"].as_str().unwrap())
        .collect();
    jids.sort_unstable();
    jids.dedup();
    assert_eq!(jids.len(), 3000, "every job once");
    assert_eq!(outbox_rows(&pool).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pump_is_fair_between_tenants() {
    let (_pg, pool, redis) = setup().await;
    let mut tx = pool.begin().await.unwrap();
    // The issue's size: tenant a's 200,000 committed rows ahead of b's one.
    let jobs = (0..200_000).map(|i| EchoJob(i.to_string()).set_tenant("a"));
    perform_bulk_tx(&mut *tx, jobs).await.unwrap();
    tx.commit().await.unwrap();
    let mut tx = pool.begin().await.unwrap();
    let b = EchoJob("b".into())
        .set_tenant("b")
        .perform_async_tx(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();

    let pump = Pump::new(pool.clone(), redis.client().await).batch(500);
    let stats = pump.pump_once().await.unwrap();
    assert_eq!(
        stats.pushed, 500,
        "a batch is full even with one busy tenant"
    );
    let payloads = queued(&redis).await;
    assert!(
        payloads.iter().any(|p| p["jid"] == b.as_str()),
        "tenant b's job reached Redis in the first batch, before a's 200,000"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_older_than_the_crate_names_the_fix() {
    let pg = PostgresServer::start().unwrap();
    let pool = PgPool::connect(&pg.url()).await.unwrap();
    let redis = Redis::start().await;
    let err = Pump::new(pool.clone(), redis.client().await)
        .run(async {})
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::SchemaOutdated { found: 0, .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains("fairjob-worker postgres migrate"),
        "{err}"
    );
    migrate(&pool).await.unwrap();
    migrate(&pool).await.unwrap(); // idempotent
    fairjob_postgres::check_schema(&pool).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_migrates_and_a_killed_pump_process_loses_nothing() {
    let pg = PostgresServer::start().unwrap();
    let redis = Redis::start().await;
    let out = redis.cli(&["postgres", "migrate", "--postgres", &pg.url()]);
    assert!(out.contains("schema at version"), "{out}");
    let pool = PgPool::connect(&pg.url()).await.unwrap();
    let mut tx = pool.begin().await.unwrap();
    let jobs = (0..2000).map(|i| EchoJob(i.to_string()).set_tenant(format!("t{}", i % 3)));
    perform_bulk_tx(&mut *tx, jobs).await.unwrap();
    tx.commit().await.unwrap();

    let pump = |batch: &str| {
        std::process::Command::new(fairjob_tests::bin("test-worker"))
            .args(["-r", redis.url(), "--namespace", redis.ns()])
            .args(["pump", "--postgres", &pg.url(), "--batch", batch])
            .args(["--poll-interval", "20ms", "--max-idle-interval", "100ms"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    // Killed as soon as it has pushed something: mid-batch, or between a
    // push and its DELETE.
    let mut first = pump("50");
    eventually!(!queued(&redis).await.is_empty(), "the pump pushes");
    first.kill().unwrap();
    first.wait().unwrap();
    // Its claims hold for the lease (30 s by default): end them, as time would.
    sqlx::query("UPDATE fairjob.outbox SET claimed_until = NULL")
        .execute(&pool)
        .await
        .unwrap();
    let mut second = pump("500");
    eventually!(
        outbox_rows(&pool).await == 0,
        "the second pump drains the outbox"
    );
    second.kill().unwrap();
    second.wait().unwrap();
    let payloads = queued(&redis).await;
    let mut jids: Vec<&str> = payloads
        .iter()
        .map(|p| p["jid"].as_str().unwrap())
        .collect();
    let n = jids.len();
    jids.sort_unstable();
    jids.dedup();
    assert_eq!((n, jids.len()), (2000, 2000), "every job in Redis once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_with_postgres_pumps_committed_jobs() {
    let (pg, pool, redis) = setup().await;
    // The worker runs another queue: the job stays where its pump put it.
    // `--postgres` alone takes DATABASE_URL's URL, as `pump` does.
    let mut worker = redis
        .worker_process()
        .queues(["elsewhere"])
        .arg("--postgres")
        .env("DATABASE_URL", pg.url())
        .start();
    let mut tx = pool.begin().await.unwrap();
    let jid = EchoJob("from a transaction".into())
        .set_tenant("acme")
        .perform_async_tx(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    eventually!(
        let q = queued(&redis).await;
        q.len() == 1 && q[0]["jid"] == jid.as_str(),
        "the worker's own pump pushes the job"
    );
    assert_eq!(outbox_rows(&pool).await, 0);
    worker.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_too_large_is_kept_as_failed_and_the_rest_go_on() {
    let (_pg, pool, redis) = setup().await;
    let client = fairjob::Client::builder(redis.url())
        .namespace(redis.ns())
        .max_payload_bytes(1000)
        .build()
        .await
        .unwrap();
    let mut tx = pool.begin().await.unwrap();
    let big = EchoJob("x".repeat(5000))
        .perform_async_tx(&mut *tx)
        .await
        .unwrap();
    let small = EchoJob("small".into())
        .perform_async_tx(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let stats = Pump::new(pool.clone(), client).pump_once().await.unwrap();
    assert_eq!((stats.pushed, stats.failed), (1, 1));
    let q = queued(&redis).await;
    assert_eq!(q.len(), 1);
    assert_eq!(q[0]["jid"], small.as_str());
    let (jid, error): (String, String) =
        sqlx::query_as("SELECT jid, error FROM fairjob.outbox WHERE failed_at IS NOT NULL")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(jid, big);
    assert!(
        error.contains("is 5") && error.contains("maximum of 1000 bytes"),
        "the error names the size: {error}"
    );
    assert!(
        error.contains("raise the pushing client's max_payload_bytes"),
        "and the fix: {error}"
    );
    // Nothing lost: after the fix (a client that allows it) and the SQL the
    // error names, the job is pushed.
    apply_named_fix(&pool, &error).await;
    let stats = Pump::new(pool.clone(), redis.client().await)
        .pump_once()
        .await
        .unwrap();
    assert_eq!((stats.pushed, stats.failed), (1, 0));
    let q = queued(&redis).await;
    assert!(q.iter().any(|p| p["jid"] == big.as_str()), "{q:?}");
    assert_eq!(outbox_rows(&pool).await, 0);
}

/// Runs the `UPDATE …` a failed row's error names (between backticks).
async fn apply_named_fix(pool: &PgPool, error: &str) {
    let sql = error
        .split('`')
        .find(|part| part.starts_with("UPDATE fairjob.outbox"))
        .unwrap_or_else(|| panic!("the error names the SQL that retries it: {error}"));
    let done = sqlx::query(sqlx::AssertSqlSafe(sql.to_owned()))
        .execute(pool)
        .await
        .unwrap();
    assert_eq!(done.rows_affected(), 1, "{sql}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payload_that_does_not_decode_is_kept_as_failed_until_fixed() {
    let (_pg, pool, redis) = setup().await;
    let mut tx = pool.begin().await.unwrap();
    let bad = EchoJob("corrupted".into())
        .perform_async_tx(&mut *tx)
        .await
        .unwrap();
    let good = EchoJob("fine".into())
        .perform_async_tx(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    // Corrupt one stored payload (a hand edit, a bad migration).
    let original: String = sqlx::query_scalar("SELECT payload FROM fairjob.outbox WHERE jid = $1")
        .bind(&bad)
        .fetch_one(&pool)
        .await
        .unwrap();
    sqlx::query("UPDATE fairjob.outbox SET payload = '{\"class\": 12' WHERE jid = $1")
        .bind(&bad)
        .execute(&pool)
        .await
        .unwrap();

    let pump = Pump::new(pool.clone(), redis.client().await);
    let stats = pump.pump_once().await.unwrap();
    assert_eq!((stats.pushed, stats.failed), (1, 1), "{stats:?}");
    let q = queued(&redis).await;
    assert_eq!(q.len(), 1);
    assert_eq!(q[0]["jid"], good.as_str(), "the rest go on");
    let row = fairjob_postgres::find_job(&pool, &bad)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.state, "failed", "{row:?}");
    let error = row.error.clone().unwrap();
    assert!(
        error.contains("stored payload does not decode")
            && error.contains("correct the row's payload"),
        "the error says what is wrong and what fixes it: {error}"
    );
    assert!(
        row.describe().contains("never pushed"),
        "{}",
        row.describe()
    );
    // A failed row is not retried by itself.
    assert_eq!(pump.pump_once().await.unwrap().claimed, 0);

    sqlx::query("UPDATE fairjob.outbox SET payload = $2 WHERE jid = $1")
        .bind(&bad)
        .bind(&original)
        .execute(&pool)
        .await
        .unwrap();
    apply_named_fix(&pool, &error).await;
    assert_eq!(pump.pump_once().await.unwrap().pushed, 1);
    let q = queued(&redis).await;
    assert!(
        q.iter().any(|p| p["jid"] == bad.as_str()),
        "nothing lost: {q:?}"
    );
    assert_eq!(outbox_rows(&pool).await, 0);
}

/// Takes a migrated database back to schema version 1 (as the first
/// release of the crate left it), keeping its rows.
async fn downgrade_to_v1(pool: &PgPool) {
    sqlx::raw_sql(
        "DROP INDEX fairjob.outbox_pending;
         DROP INDEX fairjob.outbox_published;
         DROP INDEX fairjob.outbox_done;
         ALTER TABLE fairjob.outbox DROP COLUMN keep, DROP COLUMN published_at,
             DROP COLUMN published_epoch, DROP COLUMN done_at, DROP COLUMN state,
             DROP COLUMN kind;
         CREATE INDEX outbox_tenant_id ON fairjob.outbox (tenant, id) WHERE failed_at IS NULL;
         DROP TABLE fairjob.relay, fairjob.republished, fairjob.pumps;
         DELETE FROM fairjob.migrations WHERE version >= 2;",
    )
    .execute(pool)
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_older_than_the_crate_stops_enqueue_and_pump_naming_the_fix_and_loses_nothing() {
    let (pg, pool, redis) = setup().await;
    let mut tx = pool.begin().await.unwrap();
    let before = perform_bulk_tx(&mut *tx, (0..3).map(|i| EchoJob(format!("before {i}"))))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    downgrade_to_v1(&pool).await;

    // Enqueue: the caller's transaction fails with the fix named.
    let mut tx = pool.begin().await.unwrap();
    let err = EchoJob("on v1".into())
        .perform_async_tx(&mut *tx)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::SchemaNotReady { .. }), "{err:?}");
    assert!(
        err.to_string().contains("fairjob-worker postgres migrate"),
        "{err}"
    );
    tx.rollback().await.unwrap();

    // The pump, in a library and as a process, refuses to start.
    let err = Pump::new(pool.clone(), redis.client().await)
        .run(async {})
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::SchemaOutdated {
                found: 1,
                wanted: SCHEMA_VERSION
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("version 1"), "{err}");
    let out = std::process::Command::new(fairjob_tests::bin("test-worker"))
        .args(["-r", redis.url(), "--namespace", redis.ns()])
        .args(["pump", "--postgres", &pg.url()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("fairjob-worker postgres migrate"),
        "the process names the fix: {stderr}"
    );

    // After the migration the rows written before it are all pushed.
    let out = redis.cli(&["postgres", "migrate", "--postgres", &pg.url()]);
    assert!(
        out.contains(&format!("schema at version {SCHEMA_VERSION}")),
        "{out}"
    );
    let stats = Pump::new(pool.clone(), redis.client().await)
        .pump_once()
        .await
        .unwrap();
    assert_eq!(stats.pushed, 3);
    let q = queued(&redis).await;
    for jid in &before {
        assert!(q.iter().any(|p| p["jid"] == jid.as_str()), "{jid} lost");
    }
}
