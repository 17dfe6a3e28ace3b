use fairjob::{Job, JobContext, JobError, Perform};
use serde::{Deserialize, Serialize};

#[derive(Default, Serialize, Deserialize, Job)]
#[cron("0 3 * * *", overlap = "queue")]
struct Nightly;

impl Perform for Nightly {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

fn main() {}
