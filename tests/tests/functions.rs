//! Scripts as Redis functions (`FCALL`) and by hash (`EVALSHA`): by default
//! every script is a function library of its own and is called with
//! `FCALL`; with `functions` off, or on a Redis that refuses functions (here
//! an ACL without `FCALL` and `FUNCTION`, as on Redis 6.2, which has neither
//! command, or on a managed Redis), scripts are called by hash. Both run
//! plain and tenant-sharded jobs end to end, and a `FUNCTION FLUSH` (or a
//! restart that loses them) only makes the next call load its library again.

use std::time::Duration;

use fairjob::Job;
use fairjob::broker::{ConnectOptions, RedisBroker};
use fairjob_tests::jobs::{RecordJob, ShardJob};
use fairjob_tests::{Redis, eventually, queues, raw};

/// Script calls Redis ran, by command: (`fcall`, `evalsha`).
async fn script_calls(admin_url: &str) -> (u64, u64) {
    let calls = fairjob_tests::redis_command_calls(admin_url).await;
    let get = |n: &str| calls.iter().find(|(c, _)| c == n).map_or(0, |(_, k)| *k);
    (get("fcall"), get("evalsha"))
}

/// fairjob's function libraries on the server.
async fn libraries(admin_url: &str) -> Vec<String> {
    let list: Vec<redis::Value> = redis::cmd("FUNCTION")
        .arg("LIST")
        .arg("LIBRARYNAME")
        .arg("fairjob_*")
        .query_async(&mut raw(admin_url).await)
        .await
        .expect("FUNCTION LIST");
    let mut names = Vec::new();
    for lib in list {
        let fields: Vec<redis::Value> = redis::FromRedisValue::from_redis_value(lib).unwrap();
        for pair in fields.chunks(2) {
            let key: String = redis::FromRedisValue::from_redis_value_ref(&pair[0]).unwrap();
            if key == "library_name" {
                names.push(redis::FromRedisValue::from_redis_value_ref(&pair[1]).unwrap());
            }
        }
    }
    names
}

/// Pushes 10 plain and 12 sharded jobs (each records a line) through `redis`'s client (with
/// `functions` on or off), runs them with an in-process worker of the same
/// setting, and waits until all ran.
async fn run_jobs(redis: &Redis, functions: bool) {
    let client = fairjob::Client::builder(redis.url())
        .namespace(redis.ns())
        .functions(functions)
        .build()
        .await
        .unwrap();
    for i in 0..10 {
        RecordJob(format!("plain {i}"))
            .perform_async(&client)
            .await
            .unwrap();
    }
    for t in ["a", "b:{x}", "ü <script>"] {
        client.push_bulk(ShardJob::batch(t, 4)).await.unwrap();
    }
    let worker = fairjob_tests::worker(redis.url(), redis.ns())
        .functions(functions)
        .queues(queues(&["default", "conversions"]))
        .build()
        .await
        .unwrap();
    let running = fairjob_tests::spawn(worker);
    eventually!(
        within Duration::from_secs(20),
        let done = redis.records().await.len();
        done == 22,
        "every job ran (functions {functions})"
    );
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_are_functions_by_default_and_load_again_when_flushed() {
    let redis = Redis::start().await;
    let url = redis.url().to_owned();
    fairjob_tests::reset_redis_stats(&url).await;
    run_jobs(&redis, true).await;
    let (fcall, evalsha) = script_calls(&url).await;
    assert!(fcall > 0, "scripts are called with FCALL");
    assert_eq!(evalsha, 0, "no script is called by hash");
    let loaded = libraries(&url).await;
    assert!(
        loaded.len() >= 4,
        "push, fetch, shard fetch, ack: {loaded:?}"
    );

    // Every script loads as a function library (a Lua error, such as too
    // many upvalues in a script's body, would fail here).
    let broker = RedisBroker::connect(&url, ConnectOptions::default())
        .await
        .unwrap();
    broker.load_scripts().await.unwrap();
    let all = libraries(&url).await;
    assert_eq!(all.len(), fairjob::broker::script_hashes().len(), "{all:?}");
    for (name, sha) in fairjob::broker::script_hashes() {
        assert!(all.contains(&format!("fairjob_{sha}")), "{name}.lua");
    }

    // A FUNCTION FLUSH (a restart without persistence, a failover to a server
    // that never had them) costs one load at the next call.
    let _: () = redis::cmd("FUNCTION")
        .arg("FLUSH")
        .query_async(&mut raw(&url).await)
        .await
        .unwrap();
    assert!(libraries(&url).await.is_empty());
    let redis2 = Redis::connect(&url, &fairjob_tests::namespace()).await;
    run_jobs(&redis2, true).await;
    assert!(!libraries(&url).await.is_empty(), "loaded again");
    assert_eq!(script_calls(&url).await.1, 0, "still no EVALSHA");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_are_called_by_hash_when_functions_are_off() {
    let redis = Redis::start().await;
    let url = redis.url().to_owned();
    fairjob_tests::reset_redis_stats(&url).await;
    run_jobs(&redis, false).await;
    let (fcall, evalsha) = script_calls(&url).await;
    assert_eq!(fcall, 0, "no FCALL with functions off");
    assert!(evalsha > 0, "scripts are called by hash");
    assert!(libraries(&url).await.is_empty(), "no library loaded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_refuses_functions_gets_scripts_by_hash() {
    const ADMIN_PW: &str = "Adm1n-fn-51a0";
    let server = fairjob_tests::RedisServer::start(&["--requirepass", ADMIN_PW]).unwrap();
    let admin = format!("redis://:{ADMIN_PW}@127.0.0.1:{}", server.port());
    let ns = fairjob_tests::namespace();
    // As Redis 6.2 (no FCALL, no FUNCTION) or a managed Redis's ACL.
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("app")
        .arg("reset")
        .arg("on")
        .arg(">app-fn-pw")
        .arg(format!("~{ns}:*"))
        .arg("+@all")
        .arg("-fcall")
        .arg("-fcall_ro")
        .arg("-function")
        .query_async(&mut raw(&admin).await)
        .await
        .unwrap();
    let url = format!("redis://app:app-fn-pw@127.0.0.1:{}", server.port());
    let redis = Redis::connect(&url, &ns).await;
    fairjob_tests::reset_redis_stats(&admin).await;
    run_jobs(&redis, true).await;
    let (fcall, evalsha) = script_calls(&admin).await;
    assert_eq!(fcall, 0, "every FCALL was refused");
    assert!(evalsha > 0, "the scripts ran by hash");
    assert!(libraries(&admin).await.is_empty());
}
