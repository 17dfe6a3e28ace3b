//! An `#[iterable]` job implements `Iterate` and no `Perform`, and carries
//! its checkpoint and slice in its options.

use fairjob::{Iterate, Job, JobContext, JobError, Registry, Step};
use serde::{Deserialize, Serialize};
use std::time::Duration;

#[derive(Serialize, Deserialize, Job)]
#[job(queue = "media")]
#[iterable(checkpoint = "2s", slice = "1m")]
struct Convert {
    rows: u64,
}

impl Iterate for Convert {
    type Cursor = u64;
    async fn step(&self, cursor: Option<u64>, _cx: &JobContext) -> Result<Step<u64>, JobError> {
        let next = cursor.map_or(0, |c| c + 1);
        Ok(if next < self.rows { Step::Next(next) } else { Step::Done })
    }
}

#[derive(Serialize, Deserialize, Job)]
#[iterable]
struct Defaults;

impl Iterate for Defaults {
    type Cursor = String;
    async fn step(&self, _cursor: Option<String>, _cx: &JobContext) -> Result<Step<String>, JobError> {
        Ok(Step::Done)
    }
}

fn main() {
    let it = Convert::OPTIONS.iterable.expect("iterable");
    assert_eq!(it.checkpoint, Duration::from_secs(2));
    assert_eq!(it.slice, Duration::from_secs(60));
    assert_eq!(
        Defaults::OPTIONS.iterable,
        Some(fairjob::__private::IterableOptions::DEFAULT)
    );
    let registry = Registry::from_inventory().expect("registry");
    assert!(registry.get("Convert").is_some());
}
