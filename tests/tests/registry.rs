//! Registration: a worker refuses zero jobs and two types sharing a class name.

use fairjob::{Job, JobContext, JobError, Perform, Registry};
use serde::{Deserialize, Serialize};

mod one {
    use super::*;
    #[derive(Serialize, Deserialize, Job)]
    #[job(class = "Shared")]
    pub(crate) struct First;
    impl Perform for First {
        async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
            Ok(())
        }
    }
}

mod two {
    use super::*;
    #[derive(Serialize, Deserialize, Job)]
    #[job(class = "Shared")]
    pub(crate) struct Second(pub(crate) u8);
    impl Perform for Second {
        async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
            Ok(())
        }
    }
}

/// A sharded job in a binary whose registry fails (two types share a class).
#[derive(Serialize, Deserialize, Job)]
#[job(class = "ShardedHere", queue = "reg_sharded", shard_by_tenant)]
#[fair_tenant(0)]
struct ShardedHere(String);

impl Perform for ShardedHere {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

#[tokio::test]
async fn a_duplicate_class_elsewhere_loses_no_sharded_queue_declaration() {
    assert!(
        Registry::from_inventory().is_err(),
        "the registry fails here"
    );
    let redis = fairjob_tests::Redis::start().await;
    let c = redis.client().await;
    assert!(c.is_sharded("reg_sharded"));
    ShardedHere("acme".into()).perform_async(&c).await.unwrap();
    let shard = redis.keys().shard("reg_sharded").tenant_list(Some("acme"));
    assert_eq!(
        redis.llen(&shard).await,
        1,
        "the job went to its tenant's shard"
    );
}

#[test]
fn two_types_with_one_class_name_are_refused_naming_both() {
    let err = Registry::from_inventory().unwrap_err().to_string();
    assert!(
        err.contains("Shared") && err.contains("First") && err.contains("Second"),
        "{err}"
    );
    let mut r = Registry::new();
    r.register::<one::First>().unwrap();
    r.register::<one::First>().unwrap();
    assert!(r.register::<two::Second>().is_err());
}

#[tokio::test]
async fn a_worker_with_no_jobs_refuses_to_start() {
    let server = fairjob_tests::redis();
    let err = fairjob::Worker::builder(server.url())
        .registry(Registry::new())
        .build()
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("no job types are registered"),
        "{err}"
    );
}

#[tokio::test]
async fn rediss_urls_are_understood() {
    // A TLS URL against a plain server fails to connect (the TLS handshake),
    // not to parse, and names no password.
    let server = fairjob_tests::redis();
    let err = fairjob::Client::builder(format!("rediss://:pw@127.0.0.1:{}", server.port()))
        .connect_timeout(std::time::Duration::from_secs(1))
        .build()
        .await
        .unwrap_err();
    let text = format!("{err} {err:?}");
    assert!(
        matches!(err, fairjob::Error::Connection(_)),
        "a connection error, not a URL or configuration error: {text}"
    );
    assert!(!text.contains("pw@") && !text.contains(":pw"), "{text}");
}
