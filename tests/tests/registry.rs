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
    // A TLS URL against a plain server fails to connect, not to parse.
    let server = fairjob_tests::redis();
    let err = fairjob::Client::connect(&format!("rediss://:pw@127.0.0.1:{}", server.port()))
        .await
        .unwrap_err();
    let text = format!("{err} {err:?}");
    assert!(
        !text.contains("pw@") && !text.to_lowercase().contains("feature"),
        "{text}"
    );
}
