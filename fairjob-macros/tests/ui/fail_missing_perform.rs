use fairjob::Job;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
struct SendMail {
    to: String,
}

fn main() {}
