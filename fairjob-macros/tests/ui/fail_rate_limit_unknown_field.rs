use fairjob::{Job, JobContext, JobError, Perform};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
#[rate_limit(limit = 100, per = "1m", key = acount_id)]
struct Charge {
    account_id: u64,
}

impl Perform for Charge {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

fn main() {}
