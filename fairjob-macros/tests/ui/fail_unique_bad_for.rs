use fairjob::{Job, JobContext, JobError, Perform};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
#[unique(for = "ten minutes")]
struct Sync {
    account_id: u64,
}

impl Perform for Sync {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

fn main() {}
