//! The example worker: `cargo run -p fairjob-examples --bin worker -- -c 10`.
fairjob_worker::main!(fairjob_examples);
