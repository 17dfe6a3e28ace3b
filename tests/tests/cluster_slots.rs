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

use fairjob::broker::Keys;
use fairjob::{Job, QueueSpec};
use fairjob_tests::jobs::{ShardFailJob, ShardJob};
use fairjob_tests::{RedisServer, WorkerProcess, client, namespace, raw, wait_until, worker};
use redis::AsyncCommands;

const Q: &str = "conversions";

/// Everything the in-process workers log at WARN or above, to assert that no
/// step of theirs was refused by the cluster node.
static LOG: std::sync::Mutex<Vec<u8>> = std::sync::Mutex::new(Vec::new());

struct LogWriter;

impl std::io::Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        LOG.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn capture_logs() {
    let _ = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .with_writer(|| LogWriter)
        .try_init();
}

fn assert_no_cross_slot_errors() {
    let log = String::from_utf8_lossy(&LOG.lock().unwrap()).into_owned();
    assert!(
        !log.to_lowercase().contains("slot"),
        "a worker step was refused by the cluster node:\n{log}"
    );
}
const TENANTS: [&str; 5] = ["a:b", "{x}", "日本", "two words", "}{"];

/// A cluster-mode redis-server owning every slot, checked to refuse cross-slot keys.
async fn cluster_node() -> RedisServer {
    let server = RedisServer::start(&[
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
    ])
    .expect("a cluster-mode redis-server starts");
    let mut r = raw(&server.url()).await;
    let _: () = redis::cmd("CLUSTER")
        .arg("ADDSLOTSRANGE")
        .arg(0)
        .arg(16383)
        .query_async(&mut r)
        .await
        .expect("CLUSTER ADDSLOTSRANGE");
    let url = server.url();
    assert!(
        wait_until(Duration::from_secs(20), || async {
            let info: String = redis::cmd("CLUSTER")
                .arg("INFO")
                .query_async(&mut raw(&url).await)
                .await
                .unwrap_or_default();
            info.contains("cluster_state:ok")
        })
        .await,
        "the one-node cluster comes up"
    );
    let err = redis::cmd("MSET")
        .arg("a")
        .arg(1)
        .arg("b")
        .arg(2)
        .query_async::<()>(&mut r)
        .await
        .expect_err("a cluster node refuses keys of two slots");
    assert!(
        err.to_string().to_lowercase().contains("crossslot"),
        "{err}"
    );
    server
}

async fn keyslot(url: &str, key: &str) -> i64 {
    redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query_async(&mut raw(url).await)
        .await
        .unwrap()
}

/// Every key of the sharded queue now in Redis, with its slot.
async fn queue_keys(url: &str, keys: &Keys) -> BTreeMap<String, i64> {
    let sk = keys.shard(Q);
    let tag_prefix = sk.ring.trim_end_matches("ring").to_owned();
    let all: Vec<String> = raw(url).await.keys("*").await.unwrap();
    let mut out = BTreeMap::new();
    for k in all {
        if k.starts_with(&tag_prefix) || k == sk.inbox {
            let slot = keyslot(url, &k).await;
            out.insert(k, slot);
        }
    }
    out
}

async fn records(url: &str, ns: &str) -> Vec<String> {
    raw(url)
        .await
        .lrange(format!("{ns}:record"), 0, -1)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sharded_queue_lives_in_the_slot_of_its_inbox() {
    capture_logs();
    let server = cluster_node().await;
    let url = server.url();
    let ns = namespace();
    let keys = Keys::new(Some(&ns));
    let sk = keys.shard(Q);
    let inbox_slot = keyslot(&url, &sk.inbox).await;
    let c = client(&url, &ns).await;
    assert!(c.is_sharded(Q));

    // Enqueue: in bulk, one by one, and as a Ruby producer would (LPUSH to the inbox).
    c.push_bulk(TENANTS.iter().flat_map(|t| {
        (0..4).map(|n| ShardJob {
            tenant: (*t).to_owned(),
            n,
            ms: 0,
        })
    }))
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
    let _: i64 = raw(&url)
        .await
        .lpush(&sk.inbox, ruby.to_string())
        .await
        .unwrap();
    // A limit of 0 pauses one tenant; set on the cluster node like everything else.
    c.broker()
        .set_shard_limit(Q, Some("}{"), Some(0))
        .await
        .unwrap();

    let before = queue_keys(&url, &keys).await;
    assert!(
        before.len() >= TENANTS.len() + 3,
        "shard lists, ring, tenants, limits: {before:?}"
    );
    for (k, slot) in &before {
        assert_eq!(*slot, inbox_slot, "{k} is outside the inbox's slot");
    }

    let w = worker(&url, &ns)
        .concurrency(4)
        .queues(QueueSpec::parse(&[Q.to_owned()]).unwrap())
        .build()
        .await
        .unwrap();
    let run = fairjob_tests::spawn(w);
    let expected = (TENANTS.len() - 1) * 5 + 1;
    assert!(
        wait_until(Duration::from_secs(30), || async {
            records(&url, &ns).await.len() >= expected
        })
        .await,
        "jobs ran: {:?}",
        records(&url, &ns).await
    );
    // The paused tenant's jobs wait; raising its limit lets them run.
    assert!(
        !records(&url, &ns)
            .await
            .iter()
            .any(|r| r.starts_with("}{ "))
    );
    c.broker()
        .set_shard_limit(Q, Some("}{"), Some(2))
        .await
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(20), || async {
            records(&url, &ns).await.len() == expected + 5
        })
        .await
    );

    // A failing job goes to Sidekiq's retry set (its own key, its own step).
    ShardFailJob {
        tenant: "{x}".into(),
    }
    .perform_async(&c)
    .await
    .unwrap();
    assert!(
        wait_until(Duration::from_secs(20), || async {
            raw(&url).await.zcard::<_, u64>(keys.retry()).await.unwrap() == 1
        })
        .await,
        "the failed job waits in `retry`"
    );
    // Make it due now: it is promoted back to its tenant's shard, fails again
    // and is buried in `dead` (retry = 1).
    let waiting: Vec<String> = raw(&url).await.zrange(keys.retry(), 0, -1).await.unwrap();
    let _: i64 = raw(&url)
        .await
        .zadd(keys.retry(), &waiting[0], 0)
        .await
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(20), || async {
            raw(&url).await.zcard::<_, u64>(keys.dead()).await.unwrap() == 1
        })
        .await,
        "the retried job ran from its shard and died: {:?}",
        records(&url, &ns).await
    );
    run.stop().await;
    assert_no_cross_slot_errors();
    // The worker's one refused BLPOP over two slots' wake lists made it wait on
    // one list from then on (no refusal per idle poll).
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut raw(&url).await)
        .await
        .unwrap();
    let blpop = stats
        .lines()
        .find(|l| l.starts_with("cmdstat_blpop:"))
        .expect("the worker waited with BLPOP");
    let field = |name: &str| -> u64 {
        blpop
            .split([':', ','])
            .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
            .map_or(0, |v| v.parse().unwrap())
    };
    assert!(field("rejected_calls") <= 1, "{blpop}");
    assert!(field("calls") >= 1, "{blpop}");

    let mut seen: Vec<String> = records(&url, &ns)
        .await
        .into_iter()
        .filter(|r| !r.contains(" fail "))
        .collect();
    seen.sort();
    let mut want: Vec<String> = TENANTS
        .iter()
        .flat_map(|t| (0..5).map(move |n| format!("{t} {n}")))
        .chain(["ruby 0".to_owned()])
        .collect();
    want.sort();
    assert_eq!(seen, want, "every job ran exactly once");
    let fails: Vec<String> = records(&url, &ns)
        .await
        .into_iter()
        .filter(|r| r.contains(" fail "))
        .collect();
    assert_eq!(fails, ["{x} fail 1", "{x} fail 2"]);
    let dead: Vec<String> = raw(&url).await.zrange(keys.dead(), 0, -1).await.unwrap();
    let v: serde_json::Value = serde_json::from_str(&dead[0]).unwrap();
    assert_eq!(v["fair_tenant"], "{x}");
    assert_eq!(v["queue"], Q);
    assert_eq!(v["retry_count"], 1);

    // Nothing is left running or in progress, and what remains is in the slot.
    let running: BTreeMap<String, i64> = raw(&url).await.hgetall(&sk.running).await.unwrap();
    assert!(running.is_empty(), "{running:?}");
    let after = queue_keys(&url, &keys).await;
    assert!(
        !after.keys().any(|k| k.starts_with(&sk.inflight_prefix)),
        "{after:?}"
    );
    for (k, slot) in &after {
        assert_eq!(*slot, inbox_slot, "{k} is outside the inbox's slot");
    }
    let stale: i64 = raw(&url)
        .await
        .get::<_, Option<i64>>(keys.stat("fenced"))
        .await
        .unwrap()
        .unwrap_or(0);
    assert_eq!(stale, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_workers_sharded_jobs_are_recovered_on_a_cluster_node() {
    let server = cluster_node().await;
    let url = server.url();
    let ns = namespace();
    let keys = Keys::new(Some(&ns));
    let sk = keys.shard(Q);
    let c = client(&url, &ns).await;
    c.push_bulk(TENANTS.iter().map(|t| ShardJob {
        tenant: (*t).to_owned(),
        n: 0,
        ms: 60_000,
    }))
    .await
    .unwrap();
    let args = [
        "-q",
        Q,
        "-c",
        "10",
        "--lease",
        "1500ms",
        "--heartbeat",
        "300ms",
        "--reaper-interval",
        "300ms",
    ];
    let mut doomed = WorkerProcess::start(&url, &ns, None, &args);
    let in_progress = || async {
        let ks: Vec<String> = raw(&url)
            .await
            .keys(format!("{}*", sk.inflight_prefix))
            .await
            .unwrap();
        let mut n = 0;
        for k in ks {
            n += raw(&url).await.hlen::<_, usize>(&k).await.unwrap();
        }
        n
    };
    assert!(
        wait_until(Duration::from_secs(20), || async {
            in_progress().await == TENANTS.len()
        })
        .await,
        "the first worker holds every job"
    );
    doomed.signal("KILL");
    doomed.wait_timeout(Duration::from_secs(5));
    // A new worker's reaper returns them to their shards (fenced, in the slot),
    // each tenant's running count released once, and runs them again.
    let _rescuer = WorkerProcess::start(&url, &ns, None, &args);
    assert!(
        wait_until(Duration::from_secs(30), || async {
            records(&url, &ns).await.len() == 2 * TENANTS.len()
        })
        .await,
        "recovered jobs ran again: {:?}",
        records(&url, &ns).await
    );
    let running: BTreeMap<String, i64> = raw(&url).await.hgetall(&sk.running).await.unwrap();
    assert_eq!(running.len(), TENANTS.len(), "{running:?}");
    assert!(running.values().all(|n| *n == 1), "{running:?}");
    let recovered: i64 = raw(&url).await.get(keys.stat("recovered")).await.unwrap();
    assert_eq!(recovered, TENANTS.len() as i64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_whose_braces_would_split_a_sharded_queue_are_refused() {
    let server = fairjob_tests::redis();
    let url = server.url();
    for q in ["a}b", "{x}"] {
        let err = fairjob::Client::builder(&url)
            .sharded_queue(q)
            .build()
            .await
            .expect_err("the client refuses it");
        assert!(err.to_string().contains("can't be sharded"), "{err}");
        let err = worker(&url, &namespace())
            .sharded_queue(q)
            .build()
            .await
            .expect_err("the worker refuses it");
        assert!(err.to_string().contains("can't be sharded"), "{err}");
    }
    // Braces that are a whole tag in the namespace keep everything in one slot.
    fairjob::Client::builder(&url)
        .namespace("{app}")
        .sharded_queue("a}b")
        .build()
        .await
        .expect("a namespace tag is fine");
}
