use fairjob::{Job, JobContext, JobError, Perform};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
#[fair_tenant(acount_id)]
struct Import {
    account_id: u64,
}

impl Perform for Import {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

fn main() {}
