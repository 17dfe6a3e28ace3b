use fairjob::{Iterate, Job, JobContext, JobError, Step};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
#[iterable(checkpoint = "1m", slice = "30s")]
struct Convert;

impl Iterate for Convert {
    type Cursor = u64;
    async fn step(&self, _cursor: Option<u64>, _cx: &JobContext) -> Result<Step<u64>, JobError> {
        Ok(Step::Done)
    }
}

fn main() {}
