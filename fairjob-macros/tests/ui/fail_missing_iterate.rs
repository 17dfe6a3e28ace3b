use fairjob::Job;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
#[iterable]
struct Convert {
    rows: u64,
}

fn main() {}
