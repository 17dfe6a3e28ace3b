use fairjob::Job;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
struct Wrap<T> {
    value: T,
}

fn main() {}
