//! Odd tenant ids and queue names (reliability.md §3 T27, T28): `:`, `{`, `}`,
//! glob characters, whitespace, newline, NUL, non-ASCII (NFC and NFD), 10 KB.
//! They round-trip unchanged through enqueue, fetch and perform, and no two
//! tenants share a key: each tenant's shard list and reroute window hold its
//! own jobs only, and every key of a sharded queue keeps the queue's hash tag.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use fairjob::{Client, Job, QueueSpec, WorkerBuilder};
use fairjob_tests::jobs::{EchoTenantJob, TJob};
use fairjob_tests::{Redis, eventually};
use redis::AsyncCommands;
use serde_json::Value;

fn odd_tenants() -> Vec<String> {
    let mut t: Vec<String> = [
        ":",
        "a:b",
        "a:b:inflight",
        "a",
        "A",
        "{",
        "}",
        "a}b",
        "{sq:odd}",
        "*",
        "?",
        "[",
        "]",
        "\\",
        " ",
        "two words",
        "\n",
        "line\nbreak",
        "\0",
        "nul\0in",
        "\u{ff}",
        "\u{e9}",
        "e\u{301}",
        "日本",
        "%41",
        "%",
        "'); redis.call('FLUSHALL') --",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    t.push("x".repeat(10 * 1024));
    t
}

/// Runs `worker` until `n` jobs have recorded themselves; returns the records
/// by tag (each job's argument).
async fn run_until_recorded(
    redis: &Redis,
    worker: WorkerBuilder,
    n: usize,
) -> BTreeMap<String, Value> {
    let run = fairjob_tests::spawn(worker.build().await.unwrap());
    eventually!(
        within Duration::from_secs(20),
        let ran = redis.recorded().await; ran >= n,
        "{n} jobs run"
    );
    run.stop().await;
    let recs = redis.json_records().await;
    let by_tag: BTreeMap<String, Value> = recs
        .iter()
        .map(|v| (v["tag"].as_str().unwrap().to_owned(), v.clone()))
        .collect();
    assert_eq!(by_tag.len(), recs.len(), "each job ran once");
    by_tag
}

/// The hash tag Redis Cluster would use for `key` (the first `{…}` with content).
fn hash_tag(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let close = key[open + 1..].find('}')? + open + 1;
    (close > open + 1).then(|| &key[open + 1..close])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_tenant_ids_round_trip_and_never_share_a_key() {
    let redis = Redis::start().await;
    let keys = redis.keys();
    let c = Client::builder(redis.url())
        .namespace(redis.ns())
        .sharded_queue("odd")
        .build()
        .await
        .unwrap();
    let tenants = odd_tenants();
    let mut tjob_jids = Vec::new();
    for (i, t) in tenants.iter().enumerate() {
        EchoTenantJob(format!("plain-{i}"))
            .set_tenant(t.clone())
            .perform_async(&c)
            .await
            .unwrap();
        EchoTenantJob(format!("shard-{i}"))
            .set_tenant(t.clone())
            .queue("odd")
            .perform_async(&c)
            .await
            .unwrap();
        // A job with reroute rules: one window per tenant (the gem's key, raw tenant).
        tjob_jids.push(TJob { tenant: t.clone() }.perform_async(&c).await.unwrap());
    }
    // The empty tenant is no tenant.
    EchoTenantJob("none".into())
        .set_tenant("")
        .perform_async(&c)
        .await
        .unwrap();

    // Keys before any worker runs: one shard list and one window per tenant,
    // each holding that tenant's job only.
    let mut r = redis.conn();
    let shard = keys.shard("odd");
    let mut lists = BTreeSet::new();
    let mut windows = BTreeSet::new();
    for (i, t) in tenants.iter().enumerate() {
        let list = shard.tenant_list(Some(t));
        assert!(lists.insert(list.clone()), "tenant {i} shares a shard list");
        let body = &list[shard.shard_prefix.len()..];
        assert!(
            !body.contains([':', '{', '}', '*', '?', '[', ']', '\\', ' ', '\n', '\0']),
            "tenant {i}'s list key has separators, braces or globs: {body:?}"
        );
        assert_eq!(
            hash_tag(&list),
            Some(shard.inbox.as_str()),
            "tenant {i}: {list:?}"
        );
        let entries = redis.payloads(&list).await;
        assert_eq!(entries.len(), 1, "tenant {i}'s list {list:?}: {entries:?}");
        let v = &entries[0];
        assert_eq!(v["fair_tenant"].as_str(), Some(t.as_str()), "tenant {i}");
        assert_eq!(v["args"][0], format!("shard-{i}"));

        let window = keys.fair_window("TJob", t, "whatever");
        assert!(windows.insert(window.clone()), "tenant {i} shares a window");
        let members = redis.zrange(&window).await;
        assert_eq!(
            members,
            vec![format!("jid:{}", tjob_jids[i])],
            "tenant {i}'s window holds only its own job"
        );
    }
    let shard_lists = format!("{}*", shard.shard_prefix);
    let found: BTreeSet<String> = redis.scan_keys(&shard_lists).await.into_iter().collect();
    assert_eq!(found, lists, "shard lists are exactly one per tenant");
    let members: BTreeSet<String> = r.smembers(&shard.tenants).await.unwrap();
    assert_eq!(members.len(), tenants.len(), "{} tenants", members.len());
    for k in [&shard.ring, &shard.seq, &shard.tenants] {
        assert_eq!(hash_tag(k), Some(shard.inbox.as_str()), "{k}");
    }

    let worker = redis
        .worker()
        .sharded_queue("odd")
        .queues(QueueSpec::parse(&["default".into(), "odd".into()]).unwrap());
    let by_tag = run_until_recorded(&redis, worker, 2 * tenants.len() + 1).await;
    for (i, t) in tenants.iter().enumerate() {
        let plain = &by_tag[&format!("plain-{i}")];
        assert_eq!(plain["queue"], "default");
        assert_eq!(plain["tenant"].as_str(), Some(t.as_str()), "tenant {i}");
        assert_eq!(plain["payload_tenant"].as_str(), Some(t.as_str()));
        let sharded = &by_tag[&format!("shard-{i}")];
        assert_eq!(sharded["queue"], "odd");
        assert_eq!(sharded["tenant"].as_str(), Some(t.as_str()), "tenant {i}");
    }
    assert_eq!(by_tag["none"]["tenant"], Value::Null);

    // After the run the shard bookkeeping is empty: nothing leaked per tenant.
    let left = redis.scan_keys(&shard_lists).await;
    assert!(left.is_empty(), "{} shard lists left", left.len());
    let running: BTreeMap<String, String> = r.hgetall(&shard.running).await.unwrap();
    assert!(running.is_empty(), "{running:?}");
    assert_eq!(redis.zcard(&shard.ring).await, 0);
    // Nothing outside the namespace was touched.
    let outside: Vec<String> = redis
        .scan_keys("*")
        .await
        .into_iter()
        .filter(|k| !k.starts_with(keys.prefix()))
        .collect();
    assert!(outside.is_empty(), "{outside:?}");
}

fn odd_queues() -> Vec<String> {
    let mut q: Vec<String> = [
        "a:b",
        "queue:default",
        "{",
        "}",
        "a}b",
        "{sq:odd}",
        "*",
        "?",
        "[x]",
        "\\",
        "nul\0in",
        "\u{e9}",
        "e\u{301}",
        "日本",
        "%41",
        "A",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    q.push("q".repeat(10 * 1024));
    q
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_queue_names_round_trip() {
    let redis = Redis::start().await;
    let keys = redis.keys();
    let c = redis.client().await;
    let queues = odd_queues();
    for (i, q) in queues.iter().enumerate() {
        EchoTenantJob(format!("q-{i}"))
            .queue(q.clone())
            .perform_async(&c)
            .await
            .unwrap();
    }
    let mut wakes = BTreeSet::new();
    for (i, q) in queues.iter().enumerate() {
        assert_eq!(redis.llen(keys.queue(q)).await, 1, "queue {i}");
        assert!(wakes.insert(keys.wake(q)), "queue {i} shares a wake key");
    }
    let known: BTreeSet<String> = redis.conn().smembers(keys.queues()).await.unwrap();
    assert_eq!(known, queues.iter().cloned().collect::<BTreeSet<_>>());

    let worker = redis.worker().queues(QueueSpec::parse(&queues).unwrap());
    let by_tag = run_until_recorded(&redis, worker, queues.len()).await;
    assert_eq!(by_tag.len(), queues.len());
    for (i, q) in queues.iter().enumerate() {
        let rec = &by_tag[&format!("q-{i}")];
        assert_eq!(rec["queue"].as_str(), Some(q.as_str()), "queue {i}");
        assert_eq!(rec["payload_queue"].as_str(), Some(q.as_str()), "queue {i}");
    }
}

/// Queue names with whitespace or a comma: the client accepts them, so a
/// worker must be able to serve exactly that queue (or the client must refuse
/// the name). `QueueSpec::parse` is the only way to name a worker's queues.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_names_with_whitespace_or_commas_are_served_or_refused() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    let mut failures = Vec::new();
    for (i, q) in ["line\nbreak", "two words", "tab\there", "a,1"]
        .iter()
        .enumerate()
    {
        let pushed = EchoTenantJob(format!("ws-{i}"))
            .queue(*q)
            .perform_async(&c)
            .await;
        if pushed.is_err() {
            continue; // refused at enqueue: acceptable
        }
        match QueueSpec::parse(&[(*q).to_owned()]) {
            Ok(spec) => {
                let names: Vec<&str> = spec.queues().collect();
                if names != [*q] {
                    failures.push(format!(
                        "{q:?} was enqueued, but a worker given it serves {names:?}"
                    ));
                }
            }
            Err(e) => failures.push(format!(
                "{q:?} was enqueued, but no worker can be given it: {e}"
            )),
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
