//! Odd tenant ids and queue names (reliability.md §3 T27, T28): `:`, `{`, `}`,
//! glob characters, whitespace, newline, NUL, non-ASCII (NFC and NFD), 10 KB.
//! They round-trip unchanged through enqueue, fetch and perform, and no two
//! tenants share a key: each tenant's shard list and reroute window hold its
//! own jobs only, and every key of a sharded queue keeps the queue's hash tag.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use fairjob::broker::Keys;
use fairjob::config::WorkerConfig;
use fairjob::{Client, Job, QueueSpec, Worker};
use fairjob_tests::jobs::{EchoTenantJob, TJob};
use fairjob_tests::{namespace, raw, redis, scan_keys, wait_until};
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

fn config(ns: &str, sharded: &[&str]) -> WorkerConfig {
    WorkerConfig {
        namespace: Some(ns.to_owned()),
        concurrency: 5,
        timeout: Duration::from_secs(3),
        lease: Duration::from_millis(1500),
        heartbeat: Some(Duration::from_millis(300)),
        reaper_interval: Duration::from_millis(300),
        poll_interval: Duration::from_millis(100),
        scheduled_poll_interval: Duration::from_millis(100),
        sharded_queues: sharded.iter().map(|s| (*s).to_owned()).collect(),
        ..WorkerConfig::default()
    }
}

async fn records(url: &str, ns: &str) -> Vec<Value> {
    let mut r = raw(url).await;
    let lines: Vec<String> = r.lrange(format!("{ns}:record"), 0, -1).await.unwrap();
    lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Runs an in-process worker on `queues` until `n` records exist (or 20 s).
async fn run_until_recorded(url: &str, ns: &str, cfg: WorkerConfig, queues: QueueSpec, n: usize) {
    let w = Worker::builder(url)
        .config(cfg)
        .queues(queues)
        .build()
        .await
        .unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(w.run_until(async move {
        let _ = rx.await;
    }));
    let ok = wait_until(Duration::from_secs(20), || async {
        records(url, ns).await.len() >= n
    })
    .await;
    tx.send(()).unwrap();
    run.await.unwrap().unwrap();
    assert!(ok, "only {} of {n} jobs ran", records(url, ns).await.len());
}

/// The hash tag Redis Cluster would use for `key` (the first `{…}` with content).
fn hash_tag(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let close = key[open + 1..].find('}')? + open + 1;
    (close > open + 1).then(|| &key[open + 1..close])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_tenant_ids_round_trip_and_never_share_a_key() {
    let server = redis();
    let url = server.url();
    let ns = namespace();
    let keys = Keys::new(Some(&ns));
    let c = Client::builder(&url)
        .namespace(&ns)
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
    let mut r = raw(&url).await;
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
        let entries: Vec<String> = r.lrange(&list, 0, -1).await.unwrap();
        assert_eq!(entries.len(), 1, "tenant {i}'s list {list:?}: {entries:?}");
        let v: Value = serde_json::from_str(&entries[0]).unwrap();
        assert_eq!(v["fair_tenant"].as_str(), Some(t.as_str()), "tenant {i}");
        assert_eq!(v["args"][0], format!("shard-{i}"));

        let window = keys.fair_window("TJob", t, "whatever");
        assert!(windows.insert(window.clone()), "tenant {i} shares a window");
        let members: Vec<String> = r.zrange(&window, 0, -1).await.unwrap();
        assert_eq!(
            members,
            vec![format!("jid:{}", tjob_jids[i])],
            "tenant {i}'s window holds only its own job"
        );
    }
    let shard_keys = scan_keys(&url, &format!("{}*", shard.shard_prefix)).await;
    let found: BTreeSet<String> = shard_keys.into_iter().collect();
    assert_eq!(found, lists, "shard lists are exactly one per tenant");
    let members: BTreeSet<String> = r.smembers(&shard.tenants).await.unwrap();
    assert_eq!(members.len(), tenants.len(), "{} tenants", members.len());
    for k in [&shard.ring, &shard.seq, &shard.tenants] {
        assert_eq!(hash_tag(k), Some(shard.inbox.as_str()), "{k}");
    }

    run_until_recorded(
        &url,
        &ns,
        config(&ns, &["odd"]),
        QueueSpec::parse(&["default".into(), "odd".into()]).unwrap(),
        2 * tenants.len() + 1,
    )
    .await;

    let recs = records(&url, &ns).await;
    let by_tag: BTreeMap<String, &Value> = recs
        .iter()
        .map(|v| (v["tag"].as_str().unwrap().to_owned(), v))
        .collect();
    assert_eq!(by_tag.len(), recs.len(), "each job ran once");
    for (i, t) in tenants.iter().enumerate() {
        let plain = by_tag[&format!("plain-{i}")];
        assert_eq!(plain["queue"], "default");
        assert_eq!(plain["tenant"].as_str(), Some(t.as_str()), "tenant {i}");
        assert_eq!(plain["payload_tenant"].as_str(), Some(t.as_str()));
        let sharded = by_tag[&format!("shard-{i}")];
        assert_eq!(sharded["queue"], "odd");
        assert_eq!(sharded["tenant"].as_str(), Some(t.as_str()), "tenant {i}");
    }
    assert_eq!(by_tag["none"]["tenant"], Value::Null);

    // After the run the shard bookkeeping is empty: nothing leaked per tenant.
    let left = scan_keys(&url, &format!("{}*", shard.shard_prefix)).await;
    assert!(left.is_empty(), "{} shard lists left", left.len());
    let running: BTreeMap<String, String> = r.hgetall(&shard.running).await.unwrap();
    assert!(running.is_empty(), "{running:?}");
    let ring: Vec<String> = r.zrange(&shard.ring, 0, -1).await.unwrap();
    assert!(ring.is_empty());
    // Nothing outside the namespace was touched.
    let outside: Vec<String> = scan_keys(&url, "*")
        .await
        .into_iter()
        .filter(|k| !k.starts_with(&format!("{ns}:")))
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
    let server = redis();
    let url = server.url();
    let ns = namespace();
    let keys = Keys::new(Some(&ns));
    let c = Client::builder(&url).namespace(&ns).build().await.unwrap();
    let queues = odd_queues();
    for (i, q) in queues.iter().enumerate() {
        EchoTenantJob(format!("q-{i}"))
            .queue(q.clone())
            .perform_async(&c)
            .await
            .unwrap();
    }
    let mut r = raw(&url).await;
    let mut wakes = BTreeSet::new();
    for (i, q) in queues.iter().enumerate() {
        let n: u64 = r.llen(keys.queue(q)).await.unwrap();
        assert_eq!(n, 1, "queue {i}");
        assert!(wakes.insert(keys.wake(q)), "queue {i} shares a wake key");
    }
    let known: BTreeSet<String> = r.smembers(keys.queues()).await.unwrap();
    assert_eq!(known, queues.iter().cloned().collect::<BTreeSet<_>>());

    run_until_recorded(
        &url,
        &ns,
        config(&ns, &[]),
        QueueSpec::parse(&queues).unwrap(),
        queues.len(),
    )
    .await;
    let recs = records(&url, &ns).await;
    let by_tag: BTreeMap<String, &Value> = recs
        .iter()
        .map(|v| (v["tag"].as_str().unwrap().to_owned(), v))
        .collect();
    assert_eq!(by_tag.len(), queues.len());
    for (i, q) in queues.iter().enumerate() {
        let rec = by_tag[&format!("q-{i}")];
        assert_eq!(rec["queue"].as_str(), Some(q.as_str()), "queue {i}");
        assert_eq!(rec["payload_queue"].as_str(), Some(q.as_str()), "queue {i}");
    }
}

/// Queue names with whitespace or a comma: the client accepts them, so a
/// worker must be able to serve exactly that queue (or the client must refuse
/// the name). `QueueSpec::parse` is the only way to name a worker's queues.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_names_with_whitespace_or_commas_are_served_or_refused() {
    let server = redis();
    let url = server.url();
    let ns = namespace();
    let c = Client::builder(&url).namespace(&ns).build().await.unwrap();
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
