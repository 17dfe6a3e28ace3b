//! Tenant-sharded queues keep to one Redis Cluster slot (issue 5: "every key one
//! script touches for a queue shares a hash tag").
//!
//! The server here is a real `redis-server` in cluster mode that owns all 16384
//! slots: a plain connection works, and Redis itself refuses every command,
//! transaction or script whose keys span two slots (CROSSSLOT). A sharded
//! queue's enqueue, inbox sorting, round-robin reserve, ack, requeue, limit
//! change, retry and recovery all run against it, with tenant ids full of
//! separators and braces, and every key the queue leaves behind is checked with
//! `CLUSTER KEYSLOT` against the slot of its inbox `queue:<name>`.

use std::collections::BTreeMap;
use std::time::Duration;

use fairjob::{Job, QueueSpec};
use fairjob_tests::jobs::{ShardFailJob, ShardJob};
use fairjob_tests::{Redis, eventually, namespace};
use redis::AsyncCommands;

const Q: &str = "conversions";

/// Nothing the in-process workers logged at WARN or above says a step of
/// theirs was refused by the cluster node.
fn assert_no_cross_slot_errors() {
    let log = fairjob_tests::logs::since(0);
    assert!(
        !log.to_lowercase().contains("slot"),
        "a worker step was refused by the cluster node:\n{log}"
    );
}

const TENANTS: [&str; 5] = ["a:b", "{x}", "日本", "two words", "}{"];

/// A cluster-mode redis-server owning every slot, checked to refuse cross-slot keys.
async fn cluster_node() -> Redis {
    let redis = Redis::start_with(&[
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
    ])
    .await;
    let _: () = redis
        .query(redis::cmd("CLUSTER").arg("ADDSLOTSRANGE").arg(0).arg(16383))
        .await;
    eventually!(
        within Duration::from_secs(20),
        let info = redis.query::<String>(redis::cmd("CLUSTER").arg("INFO")).await;
        info.contains("cluster_state:ok"),
        "the one-node cluster comes up"
    );
    let err = redis::cmd("MSET")
        .arg("a")
        .arg(1)
        .arg("b")
        .arg(2)
        .query_async::<()>(&mut redis.conn())
        .await
        .expect_err("a cluster node refuses keys of two slots");
    assert!(
        err.to_string().to_lowercase().contains("crossslot"),
        "{err}"
    );
    redis
}

async fn keyslot(redis: &Redis, key: &str) -> i64 {
    redis
        .query(redis::cmd("CLUSTER").arg("KEYSLOT").arg(key))
        .await
}

/// Every key of the sharded queue now in Redis, with its slot.
async fn queue_keys(redis: &Redis) -> BTreeMap<String, i64> {
    let sk = redis.keys().shard(Q);
    let tag_prefix = sk.ring.trim_end_matches("ring").to_owned();
    let mut out = BTreeMap::new();
    for k in redis.scan_keys("*").await {
        if k.starts_with(&tag_prefix) || k == sk.inbox {
            let slot = keyslot(redis, &k).await;
            out.insert(k, slot);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sharded_queue_lives_in_the_slot_of_its_inbox() {
    fairjob_tests::logs::capture();
    let redis = cluster_node().await;
    let keys = redis.keys();
    let sk = keys.shard(Q);
    let inbox_slot = keyslot(&redis, &sk.inbox).await;
    let c = redis.client().await;
    assert!(c.is_sharded(Q));

    // Enqueue: in bulk, one by one, and as a Ruby producer would (LPUSH to the inbox).
    c.push_bulk(TENANTS.iter().flat_map(|t| ShardJob::batch(t, 4)))
        .await
        .unwrap();
    for t in TENANTS {
        ShardJob {
            tenant: t.to_owned(),
            n: 4,
            ms: 0,
        }
        .perform_async(&c)
        .await
        .unwrap();
    }
    let ruby = serde_json::json!({
        "class": "ShardJob", "args": [{"tenant": "ruby", "n": 0, "ms": 0}], "retry": true,
        "queue": Q, "jid": fairjob::payload::new_jid(), "created_at": 1.7e9,
        "enqueued_at": 1.7e9, "fair_tenant": "ruby",
    });
    redis.lpush_raw(Q, ruby.to_string()).await;
    // A limit of 0 pauses one tenant; set on the cluster node like everything else.
    c.broker()
        .set_shard_limit(Q, Some("}{"), Some(0))
        .await
        .unwrap();

    let before = queue_keys(&redis).await;
    assert!(
        before.len() >= TENANTS.len() + 3,
        "shard lists, ring, tenants, limits: {before:?}"
    );
    for (k, slot) in &before {
        assert_eq!(*slot, inbox_slot, "{k} is outside the inbox's slot");
    }

    let w = redis
        .worker()
        .concurrency(4)
        .queues(QueueSpec::parse(&[Q.to_owned()]).unwrap())
        .build()
        .await
        .unwrap();
    let run = fairjob_tests::spawn(w);
    let expected = (TENANTS.len() - 1) * 5 + 1;
    eventually!(
        within Duration::from_secs(30),
        let records = redis.records().await; records.len() >= expected,
        "jobs run"
    );
    // The paused tenant's jobs wait; raising its limit lets them run.
    assert!(!redis.records().await.iter().any(|r| r.starts_with("}{ ")));
    c.broker()
        .set_shard_limit(Q, Some("}{"), Some(2))
        .await
        .unwrap();
    eventually!(
        within Duration::from_secs(20),
        let records = redis.records().await; records.len() == expected + 5,
        "the resumed tenant runs"
    );

    // A failing job goes to Sidekiq's retry set (its own key, its own step).
    ShardFailJob {
        tenant: "{x}".into(),
    }
    .perform_async(&c)
    .await
    .unwrap();
    eventually!(
        within Duration::from_secs(20),
        redis.zcard(keys.retry()).await == 1,
        "the failed job waits in `retry`"
    );
    // Make it due now: it is promoted back to its tenant's shard, fails again
    // and is buried in `dead` (retry = 1).
    let waiting = redis.zrange(keys.retry()).await;
    let _: i64 = redis
        .conn()
        .zadd(keys.retry(), &waiting[0], 0)
        .await
        .unwrap();
    eventually!(
        within Duration::from_secs(20),
        redis.zcard(keys.dead()).await == 1,
        "the retried job runs from its shard and dies: {:?}",
        redis.records().await
    );
    run.stop().await;
    assert_no_cross_slot_errors();
    // The worker's one refused BLPOP over two slots' wake lists made it wait on
    // one list from then on (no refusal per idle poll).
    let blpop = redis.info("commandstats", "cmdstat_blpop").await;
    let field = |name: &str| -> u64 {
        blpop
            .split([':', ','])
            .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
            .map_or(0, |v| v.parse().unwrap())
    };
    assert!(field("rejected_calls") <= 1, "{blpop}");
    assert!(field("calls") >= 1, "{blpop}");

    let (mut seen, fails): (Vec<String>, Vec<String>) = redis
        .records()
        .await
        .into_iter()
        .partition(|r| !r.contains(" fail "));
    seen.sort();
    let mut want: Vec<String> = TENANTS
        .iter()
        .flat_map(|t| (0..5).map(move |n| format!("{t} {n}")))
        .chain(["ruby 0".to_owned()])
        .collect();
    want.sort();
    assert_eq!(seen, want, "every job ran exactly once");
    assert_eq!(fails, ["{x} fail 1", "{x} fail 2"]);
    let dead = redis.payloads(&keys.dead()).await;
    assert_eq!(dead[0]["fair_tenant"], "{x}");
    assert_eq!(dead[0]["queue"], Q);
    assert_eq!(dead[0]["retry_count"], 1);

    // Nothing is left running or in progress, and what remains is in the slot.
    let running: BTreeMap<String, i64> = redis.conn().hgetall(&sk.running).await.unwrap();
    assert!(running.is_empty(), "{running:?}");
    let after = queue_keys(&redis).await;
    assert!(
        !after.keys().any(|k| k.starts_with(&sk.inflight_prefix)),
        "{after:?}"
    );
    for (k, slot) in &after {
        assert_eq!(*slot, inbox_slot, "{k} is outside the inbox's slot");
    }
    assert_eq!(redis.stat("fenced").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_workers_sharded_jobs_are_recovered_on_a_cluster_node() {
    let redis = cluster_node().await;
    let sk = redis.keys().shard(Q);
    let c = redis.client().await;
    c.push_bulk(TENANTS.iter().map(|t| ShardJob {
        tenant: (*t).to_owned(),
        n: 0,
        ms: 60_000,
    }))
    .await
    .unwrap();
    let worker = redis.worker_process().queues([Q]).concurrency(10);
    let mut doomed = worker.start();
    let in_progress = || async {
        let mut n = 0;
        for k in redis.scan_keys(&format!("{}*", sk.inflight_prefix)).await {
            n += redis.hlen(&k).await;
        }
        n
    };
    eventually!(
        within Duration::from_secs(20),
        let held = in_progress().await; held == TENANTS.len(),
        "the first worker holds every job"
    );
    doomed.signal("KILL");
    doomed.wait_timeout(Duration::from_secs(5));
    // A new worker's reaper returns them to their shards (fenced, in the slot),
    // each tenant's running count released once, and runs them again.
    let _rescuer = worker.start();
    eventually!(
        within Duration::from_secs(30),
        let records = redis.records().await; records.len() == 2 * TENANTS.len(),
        "recovered jobs run again"
    );
    let mut running: BTreeMap<String, i64> = redis.conn().hgetall(&sk.running).await.unwrap();
    // The hash's mark (it keeps `running` a hash table) is no tenant's count.
    running.remove(fairjob::policy::dispatch::state::RUNNING_MARK);
    assert_eq!(running.len(), TENANTS.len(), "{running:?}");
    assert!(running.values().all(|n| *n == 1), "{running:?}");
    assert_eq!(redis.stat("recovered").await, TENANTS.len() as i64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_whose_braces_would_split_a_sharded_queue_are_refused() {
    let redis = Redis::start().await;
    let url = redis.url();
    for q in ["a}b", "{x}"] {
        let err = fairjob::Client::builder(url)
            .sharded_queue(q)
            .build()
            .await
            .expect_err("the client refuses it");
        assert!(err.to_string().contains("can't be sharded"), "{err}");
        let err = fairjob_tests::worker(url, &namespace())
            .sharded_queue(q)
            .build()
            .await
            .expect_err("the worker refuses it");
        assert!(err.to_string().contains("can't be sharded"), "{err}");
    }
    // Braces that are a whole tag in the namespace keep everything in one slot.
    fairjob::Client::builder(url)
        .namespace("{app}")
        .sharded_queue("a}b")
        .build()
        .await
        .expect("a namespace tag is fine");
}
