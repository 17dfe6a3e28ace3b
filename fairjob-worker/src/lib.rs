//! The bundled fairjob worker.
//!
//! A worker binary must link the crates that hold the job types (`inventory`
//! only sees crates the binary links), so a user's `src/bin/worker.rs` is one line:
//!
//! ```text
//! fairjob_worker::main!(my_jobs);
//! ```
//!
//! That gives the whole CLI: `worker -r redis://… -q default,4 -q slow,1 -c 25`
//! (also `worker run …`, and `worker run --web 127.0.0.1:7433` to serve the
//! dashboard beside processing), `worker jobs`, `worker stats`, `worker
//! tenants <Class>`, `worker shards <queue>`, `worker explain <jid>`, `worker
//! web --bind 127.0.0.1:7433`.
//! The `fairjob-worker` binary built from this crate has every command that needs
//! no job types; asked to run jobs, it explains how to build a worker with `main!`.
//!
//! Features: `web` (the dashboard, fairjob-web) and `postgres`
//! (fairjob-postgres and sqlx: the pump, `postgres migrate|status`, `pump`,
//! `explain --postgres`) are on by default, `otel` (`--otel`: OTLP export,
//! see [`otel`]) and `otel-grpc` (the same over gRPC too) are off; a command or
//! flag whose feature was left out fails at once, naming it.

mod cli;
mod inspect;
mod metrics;
pub mod otel;
mod postgres;
mod web;

use std::process::ExitCode;

pub use cli::Cli;
pub use metrics::{MetricsListener, install_metrics, serve_metrics};

/// Builds `fn main()` for a worker binary that links the named job crates.
///
/// ```text
/// fairjob_worker::main!(my_jobs, billing_jobs);
/// ```
#[macro_export]
macro_rules! main {
    ($($krate:ident),* $(,)?) => {
        $(
            #[allow(unused_imports)]
            use $krate as _;
        )*
        fn main() -> ::std::process::ExitCode {
            $crate::run_cli(true)
        }
    };
}

/// Runs the worker CLI. `with_jobs` is false for the plain `fairjob-worker`
/// binary, which links no job types.
pub fn run_cli(with_jobs: bool) -> ExitCode {
    cli::run(with_jobs)
}
