use fairjob::{Job, JobContext, JobError, Perform};
use serde::{Deserialize, Serialize};

#[derive(Default, Serialize, Deserialize, Job)]
#[cron("0 3 * * *", catch_up = "latest:10m")]
struct Nightly;

impl Perform for Nightly {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

fn main() {}
