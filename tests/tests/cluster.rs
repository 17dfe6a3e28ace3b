//! fairjob on a real Redis Cluster: three primaries with a replica each,
//! started by the test on free ports (`fairjob::testing::RedisCluster`).
//!
//! The whole path runs with keys spread over every primary: plain queues,
//! rerouted jobs, a tenant-sharded queue with odd tenant ids, a slot-limited
//! job, a scheduled job, a retry, a job that dies, a malformed entry. Every
//! job that nothing failed runs exactly once.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use fairjob::testing::RedisCluster;
use fairjob::{Client, Job, JobContext, JobError, Perform, QueueSpec, Worker};
use fairjob_tests::jobs::{RecordJob, ShardJob, TJob};
use fairjob_tests::{eventually, namespace};
use serde::{Deserialize, Serialize};

/// Odd tenant ids: separators, braces (a hash tag of their own), spaces,
/// non-ASCII, markup.
const TENANTS: [&str; 6] = ["a:b", "{x}", "日本", "two words", "}{", "<script>"];

/// A slot-limited job (one at a time per key) whose gauge keys share a hash
/// tag, so its own bookkeeping stays in one slot too.
#[derive(Debug, Clone, Serialize, Deserialize, Job)]
#[job(class = "ClusterSlotJob", queue = "cslots")]
#[concurrency(limit = 1, key = key)]
struct ClusterSlotJob {
    key: String,
    n: u32,
}

impl Perform for ClusterSlotJob {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        let b = cx.client().broker();
        let p = b.keys().prefix();
        let gauge = format!("{p}{{gauge}}:now:{}", self.key);
        let max = format!("{p}{{gauge}}:max:{}", self.key);
        let now: i64 = fairjob_tests::query(b, redis::cmd("INCR").arg(&gauge)).await?;
        let mut seen: i64 = fairjob_tests::query(b, redis::cmd("GET").arg(&max))
            .await
            .ok()
            .flatten()
            .unwrap_or(0);
        if now > seen {
            seen = now;
            fairjob_tests::query::<()>(b, redis::cmd("SET").arg(&max).arg(seen)).await?;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        fairjob_tests::query::<i64>(b, redis::cmd("DECR").arg(&gauge)).await?;
        let line = format!("slot {} {}", self.key, self.n);
        fairjob_tests::query::<i64>(b, redis::cmd("RPUSH").arg(format!("{p}record")).arg(line))
            .await?;
        Ok(())
    }
}

/// Keys per primary (DBSIZE on each).
fn keys_per_primary(cluster: &RedisCluster) -> BTreeMap<u16, u64> {
    cluster
        .primaries()
        .into_iter()
        .map(|p| {
            let n = cluster
                .cli(p, &["DBSIZE"])
                .unwrap()
                .trim()
                .parse()
                .unwrap_or(0);
            (p, n)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_whole_path_runs_on_three_primaries() {
    let cluster = RedisCluster::start(3, 1, &[]).expect("cluster starts");
    let url = cluster.url();
    let ns = namespace();
    let c = Client::builder(&url).namespace(&ns).build().await.unwrap();
    assert!(
        c.broker().is_cluster(),
        "a seed list connects in cluster mode"
    );

    // Plain queues, spread over the slots.
    let plain: Vec<String> = (0..8).map(|i| format!("plain{i}")).collect();
    let mut expected = BTreeSet::new();
    for (i, q) in plain.iter().enumerate() {
        for n in 0..5 {
            let arg = format!("p{i}-{n}");
            RecordJob(arg.clone())
                .queue(q)
                .perform_async(&c)
                .await
                .unwrap();
            expected.insert(format!("{q} - {arg} 1 false"));
        }
    }
    // A bulk push over several queues keeps each queue's order.
    let bulk: Vec<_> = (0..50)
        .map(|n| RecordJob(format!("b{n}")).queue(format!("bulk{}", n % 3)))
        .collect();
    c.push_bulk(bulk).await.unwrap();
    for n in 0..50 {
        expected.insert(format!("bulk{} - b{n} 1 false", n % 3));
    }
    // Rerouted: the second and third job of one tenant move on.
    for _ in 0..3 {
        TJob {
            tenant: "greedy".into(),
        }
        .perform_async(&c)
        .await
        .unwrap();
    }
    // A tenant-sharded queue with odd tenant ids.
    for t in TENANTS {
        c.push_bulk(ShardJob::batch(t, 4)).await.unwrap();
    }
    // Slot-limited jobs of two keys.
    for n in 0..6 {
        ClusterSlotJob {
            key: format!("k{}", n % 2),
            n,
        }
        .perform_async(&c)
        .await
        .unwrap();
    }
    // Scheduled.
    RecordJob("later".into())
        .queue("plain0")
        .perform_in(&c, Duration::from_millis(800))
        .await
        .unwrap();
    expected.insert("plain0 - later 1 false".to_owned());
    // A malformed entry and a job on its last retry.
    let k = c.broker().keys().clone();
    fairjob_tests::query::<i64>(
        c.broker(),
        redis::cmd("LPUSH").arg(k.queue("plain1")).arg("{not json"),
    )
    .await
    .unwrap();
    let last = r#"{"class":"FailJob","args":["y"],"jid":"0123456789abcdef01234567","queue":"plain2","retry":2,"retry_count":1,"failed_at":1.5}"#;
    fairjob_tests::query::<i64>(
        c.broker(),
        redis::cmd("LPUSH").arg(k.queue("plain2")).arg(last),
    )
    .await
    .unwrap();
    // The gem's rules chose: the first job stays, the next two exceed both
    // rules (the last matching one wins).
    for (q, n) in [
        ("whatever", 1),
        ("whatever_semislow", 0),
        ("whatever_supaslow", 2),
    ] {
        let len: u64 = fairjob_tests::query(c.broker(), redis::cmd("LLEN").arg(k.queue(q)))
            .await
            .unwrap();
        assert_eq!(len, n, "{q}");
    }
    // A bulk push keeps each queue's order (checked in the lists: with
    // several jobs at once, the order they finish in is not the order they
    // started in). LPUSH puts the newest first.
    for q in 0..3 {
        let list: Vec<String> = fairjob_tests::query(
            c.broker(),
            redis::cmd("LRANGE")
                .arg(k.queue(&format!("bulk{q}")))
                .arg(0)
                .arg(-1),
        )
        .await
        .unwrap();
        let args: Vec<u32> = list
            .iter()
            .rev()
            .map(|p| {
                let v: serde_json::Value = serde_json::from_str(p).unwrap();
                v["args"][0].as_str().unwrap()[1..].parse().unwrap()
            })
            .collect();
        let want: Vec<u32> = (0..50).filter(|n| n % 3 == q).collect();
        assert_eq!(args, want, "bulk{q} is in push order");
    }
    let spread = keys_per_primary(&cluster);
    assert!(
        spread.values().filter(|n| **n > 0).count() == 3,
        "the jobs' keys are on every primary: {spread:?}"
    );

    let mut names: Vec<String> = plain.clone();
    names.extend(["bulk0", "bulk1", "bulk2"].map(String::from));
    names.extend(
        [
            "whatever",
            "whatever_semislow",
            "whatever_supaslow",
            "conversions",
            "cslots",
        ]
        .map(String::from),
    );
    let worker = Worker::builder(&url)
        .namespace(&ns)
        .queues(QueueSpec::parse(&names).unwrap())
        .sharded_queue("conversions")
        .concurrency(8)
        .poll_interval(Duration::from_millis(100))
        .scheduled_poll_interval(Duration::from_millis(100))
        .lease(Duration::from_millis(1500))
        .heartbeat(Duration::from_millis(300))
        .reaper_interval(Duration::from_millis(300))
        .build()
        .await
        .unwrap();
    let run = fairjob_tests::spawn(worker);
    let want = expected.len() + TENANTS.len() * 4 + 6;
    eventually!(
        within Duration::from_secs(30),
        fairjob_tests::client_records(&c).await.len() >= want,
        "every job runs"
    );
    let dead_key = k.dead();
    eventually!(
        fairjob_tests::query::<u64>(c.broker(), redis::cmd("ZCARD").arg(&dead_key))
            .await
            .unwrap()
            == 2,
        "the malformed entry and the exhausted job are dead"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let got = fairjob_tests::client_records(&c).await;
    assert_eq!(got.len(), want, "nothing ran twice: {got:?}");
    let got_set: BTreeSet<String> = got.iter().cloned().collect();
    for e in &expected {
        assert!(got_set.contains(e), "{e} ran: {got:?}");
    }
    for t in TENANTS {
        let mine: Vec<&String> = got
            .iter()
            .filter(|l| l.rsplit_once(' ').is_some_and(|(tt, _)| tt == t))
            .collect();
        assert_eq!(mine.len(), 4, "tenant {t}: {got:?}");
    }
    // The slot limit held (one at a time per key).
    for key in ["k0", "k1"] {
        let max: Option<i64> = fairjob_tests::query(
            c.broker(),
            redis::cmd("GET").arg(format!("{}{{gauge}}:max:{key}", k.prefix())),
        )
        .await
        .unwrap();
        assert_eq!(max, Some(1), "slot key {key} ran one at a time");
    }
    for q in ["whatever", "whatever_supaslow"] {
        let left: u64 = fairjob_tests::query(c.broker(), redis::cmd("LLEN").arg(k.queue(q)))
            .await
            .unwrap();
        assert_eq!(left, 0, "{q} drained");
    }
    run.stop().await;
}
