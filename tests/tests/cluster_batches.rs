//! Batches on a real Redis Cluster (three primaries): members on plain
//! queues spread over the slots and on a tenant-sharded queue; the batch's
//! keys in a slot of their own, so each member's end reaches its batch in a
//! step after its exit. Every member runs once and each callback once; child
//! batches and workflows, which need one server, are refused with a clear
//! error.

use std::time::Duration;

use fairjob::batch::Event;
use fairjob::testing::RedisCluster;
use fairjob::{Batch, Client, Job, QueueSpec, Worker, Workflow};
use fairjob_tests::jobs::{RecordJob, ShardJob};
use fairjob_tests::{eventually, namespace, spawn};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_fires_each_callback_once_on_a_cluster() {
    let cluster = RedisCluster::start(3, 0, &[]).expect("cluster starts");
    let url = cluster.url();
    let ns = namespace();
    let c = Client::builder(&url).namespace(&ns).build().await.unwrap();
    assert!(c.broker().is_cluster());
    let plain: Vec<_> = (0..40)
        .map(|n| RecordJob(format!("m{n}")).queue(format!("bq{}", n % 4)))
        .collect();
    let bid = Batch::new()
        .on_complete(RecordJob("complete".into()).queue("cb"))
        .on_success(RecordJob("success".into()).queue("cb"))
        .push_bulk(plain)
        .push_bulk(
            ["a:b", "{x}", "日本"]
                .iter()
                .flat_map(|t| ShardJob::batch(t, 5)),
        )
        .commit(&c)
        .await
        .unwrap();
    let names: Vec<String> = ["bq0", "bq1", "bq2", "bq3", "cb", "conversions"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let worker = Worker::builder(&url)
        .namespace(&ns)
        .queues(QueueSpec::parse(&names).unwrap())
        .sharded_queue("conversions")
        .concurrency(8)
        .poll_interval(Duration::from_millis(100))
        .build()
        .await
        .unwrap();
    let _w = spawn(worker);
    eventually!(
        within Duration::from_secs(60),
        c.batch_status(&bid).await.unwrap().unwrap().success_at.is_some(),
        "the batch succeeds"
    );
    eventually!(
        fairjob_tests::client_records(&c)
            .await
            .iter()
            .filter(|r| r.contains(" success "))
            .count()
            == 1,
        "the success callback runs"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let r = fairjob_tests::client_records(&c).await;
    assert_eq!(
        r.iter().filter(|l| l.contains(" complete ")).count(),
        1,
        "{r:?}"
    );
    assert_eq!(
        r.iter().filter(|l| l.contains(" success ")).count(),
        1,
        "{r:?}"
    );
    assert_eq!(r.len(), 40 + 15 + 2, "every member once: {r:?}");
    let status = c.batch_status(&bid).await.unwrap().unwrap();
    assert_eq!(
        (status.total, status.pending, status.unsucceeded),
        (55, 0, 0)
    );
    assert!(status.fired_at(Event::Complete).is_some());

    let err = Batch::new().child_of(&bid).commit(&c).await.unwrap_err();
    assert!(
        matches!(&err, fairjob::Error::Batch(m) if m.contains("one Redis server")),
        "{err}"
    );
    let err = Workflow::new()
        .add("a", RecordJob("x".into()))
        .commit(&c)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, fairjob::Error::Workflow(m) if m.contains("one Redis server")),
        "{err}"
    );
}
