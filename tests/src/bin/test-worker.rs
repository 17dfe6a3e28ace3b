//! The worker binary the fault suite runs as separate processes.
fairjob_worker::main!(fairjob_tests);
