use fairjob::{Job, JobContext, JobError, Perform};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
#[cron("0 3 * * *")]
struct Report {
    account_id: u64,
}

impl Perform for Report {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

fn main() {}
