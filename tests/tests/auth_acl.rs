//! AUTH and ACL (reliability.md §3 T13, T28, T29): a client and a worker process
//! that log in as an ACL user limited to the namespace's keys, without the
//! `@dangerous` commands (so no CONFIG, no INFO), run jobs end to end through
//! every script (push, fetch, ack, retry, schedule and promotion, tenant
//! shards); the worker warns that it cannot check `maxmemory-policy` and
//! carries on. A wrong or missing password makes the worker exit non-zero within
//! 5 s with a clear error that never shows the password.

use std::time::{Duration, Instant};

use fairjob::{Client, Error, Job};
use fairjob_tests::jobs::{FailJob, LedgerJob, ProbeJob, ShardJob};
use fairjob_tests::{
    Ledger, Redis, RedisServer, TestWorker, eventually, ledger_dir, namespace, raw,
};
use redis::AsyncCommands;

const ADMIN_PW: &str = "Adm1n-pw-7c1f";
const APP_PW: &str = "App-pw-93e0b";
const WRONG_PW: &str = "Wr0ng-pw-d4a8";

/// A worker of every queue the jobs here use, logging to `log`.
fn worker(url: &str, ns: &str, log: &std::path::Path) -> TestWorker {
    TestWorker::new(url, ns)
        .queues(["ledger", "conversions", "default"])
        .log_to(log)
}

/// A redis-server with a password, and an ACL user `app` limited to `ns:*`.
async fn secured(ns: &str) -> RedisServer {
    let server = RedisServer::start(&["--requirepass", ADMIN_PW]).expect("redis-server starts");
    let admin = format!("redis://:{ADMIN_PW}@127.0.0.1:{}", server.port());
    let mut r = raw(&admin).await;
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("app")
        .arg("reset")
        .arg("on")
        .arg(format!(">{APP_PW}"))
        .arg(format!("~{ns}:*"))
        .arg("+@all")
        .arg("-@dangerous")
        .query_async(&mut r)
        .await
        .unwrap();
    server
}

fn app_url(server: &RedisServer, password: &str) -> String {
    format!("redis://app:{password}@127.0.0.1:{}", server.port())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_user_runs_jobs_end_to_end() {
    let ns = namespace();
    let server = secured(&ns).await;
    let url = app_url(&server, APP_PW);
    let redis = Redis::connect(&url, &ns).await;

    // The ACL really is in force: CONFIG and INFO are refused, other keys too.
    let mut app = redis.conn();
    let config: redis::RedisResult<Vec<String>> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .query_async(&mut app)
        .await;
    assert!(config.is_err(), "CONFIG must be refused to the app user");
    let info: redis::RedisResult<String> = redis::cmd("INFO").query_async(&mut app).await;
    assert!(info.is_err(), "INFO must be refused to the app user");
    let other: redis::RedisResult<()> = app.set("outside", 1).await;
    assert!(other.is_err(), "keys outside the namespace are refused");

    let c = redis.client().await;
    let mut jids = Vec::new();
    for _ in 0..20 {
        jids.push(LedgerJob::sleeping(10).perform_async(&c).await.unwrap());
    }
    let scheduled = ProbeJob {
        tag: "scheduled".into(),
        ms: 0,
    }
    .perform_in(&c, Duration::from_millis(500))
    .await
    .unwrap();
    for n in 0..3 {
        ShardJob {
            tenant: format!("t{{:{n}}}"),
            n,
            ms: 0,
        }
        .perform_async(&c)
        .await
        .unwrap();
    }
    FailJob("acl".into()).perform_async(&c).await.unwrap();

    let dir = ledger_dir("acl");
    let mut w = worker(&url, &ns, &dir.join("worker.log"))
        .ledger(&dir)
        .start();
    eventually!(
        within Duration::from_secs(20),
        {
            let l = Ledger::read(&dir);
            jids.iter().all(|j| l.ended(j) == 1) && l.ended(&scheduled) == 1
        },
        "jobs run as the ACL user; worker alive: {}; log:\n{}",
        w.is_running(),
        w.log()
    );
    // 3 ShardJobs and the scheduled ProbeJob record onto `record`.
    eventually!(
        redis.records().await.len() == 4 && redis.zcard(redis.keys().retry()).await == 1,
        "shard jobs and the failing job run; log:\n{}",
        w.log()
    );
    let retry = redis.zrange(redis.keys().retry()).await;
    assert!(retry[0].contains("boom acl"), "{retry:?}");

    assert!(w.is_running(), "the worker died");
    let status = w.stop();
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
    let log = w.log();
    println!("auth_acl: worker log as the ACL user:\n{log}");
    assert!(
        log.contains("maxmemory-policy"),
        "the worker warns it cannot check maxmemory-policy:\n{log}"
    );
    assert!(!log.contains(APP_PW), "the password leaked into the log");
    assert!(!log.contains(ADMIN_PW));
}

/// Starts a worker with `url`, expects it to exit non-zero within 5 s; returns its log.
fn refused_worker(url: &str, ns: &str, tag: &str) -> String {
    let dir = ledger_dir(tag);
    let started = Instant::now();
    let mut w = worker(url, ns, &dir.join("worker.log")).start();
    let status = w.wait_timeout(Duration::from_secs(5));
    let took = started.elapsed();
    let log = w.log();
    println!("auth_acl ({tag}): exit {status:?} after {took:?}; log: {log}");
    let status = status.unwrap_or_else(|| panic!("the worker still runs after 5 s: {log}"));
    assert!(
        !status.success(),
        "a refused login must exit non-zero: {log}"
    );
    assert_eq!(status.code(), Some(1), "{log}");
    log
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_fails_fast_and_never_shows_the_password() {
    let ns = namespace();
    let server = secured(&ns).await;

    let wrong = app_url(&server, WRONG_PW);
    let log = refused_worker(&wrong, &ns, "wrongpw");
    let lower = log.to_lowercase();
    assert!(
        lower.contains("credentials") || lower.contains("wrongpass"),
        "the error says the credentials were refused: {log}"
    );
    assert!(
        log.contains(&format!("127.0.0.1:{}", server.port())),
        "the error names the server: {log}"
    );
    assert!(!log.contains(WRONG_PW), "the password leaked: {log}");

    // No password at all against a server that requires one.
    let anonymous = format!("redis://127.0.0.1:{}", server.port());
    let log = refused_worker(&anonymous, &ns, "nopw");
    let lower = log.to_lowercase();
    assert!(
        lower.contains("credentials") || lower.contains("noauth") || lower.contains("auth"),
        "the error says authentication is required: {log}"
    );

    // The client: a typed error, fast, with no password in Display or Debug.
    let started = Instant::now();
    let err = Client::builder(&wrong)
        .namespace(&ns)
        .build()
        .await
        .expect_err("a wrong password is refused");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(matches!(err, Error::Auth(_)), "{err:?}");
    assert!(!err.to_string().contains(WRONG_PW), "{err}");
    assert!(!format!("{err:?}").contains(WRONG_PW), "{err:?}");
}
