//! `fairjob-worker`: the commands that need no job types (`stats`, `tenants`,
//! `shards`, `shard-limit`). To run jobs, build a worker with `fairjob_worker::main!`.

fn main() -> std::process::ExitCode {
    fairjob_worker::run_cli(false)
}
