use fairjob::{Job, JobContext, JobError, Perform};
use serde::{Deserialize, Serialize};

#[derive(Default, Serialize, Deserialize, Job)]
#[cron("61 3 * * *")]
struct Nightly;

impl Perform for Nightly {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

fn main() {}
