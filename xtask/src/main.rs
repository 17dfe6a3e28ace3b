//! fairjob's developer commands, run from anywhere in the repository as
//! `cargo xtask <command>` (the alias lives in `.cargo/config.toml`).
//!
//! `demo` and `test` first make sure the programs they start are installed
//! (`redis-server`; for the tests also Ruby Sidekiq and ActiveJob, chromium
//! and PostgreSQL), installing
//! what is missing with apt-get, so that on a fresh machine the README's two
//! commands do all the set-up. Standard library only, so it builds in seconds.

mod manifest;
mod package;
mod prereq;
mod scan;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, ExitStatus};

use prereq::{Plan, Requirement};

const HELP: &str = "\
cargo xtask — fairjob's developer commands

USAGE:
    cargo xtask demo [ARGS…]        install redis-server if missing, then run the demo
                                    (cargo run -p fairjob-examples --bin demo -- ARGS…);
                                    `demo --web` leaves its worker and dashboard running on
                                    http://127.0.0.1:7433 until Ctrl-C
    cargo xtask test [ARGS…]        install redis-server, Ruby Sidekiq and ActiveJob,
                                    chromium and postgresql if missing, then run the
                                    whole suite
                                    (cargo test --workspace --features fairjob-tests/otel ARGS…)
    cargo xtask check-package       check that each published crate's `cargo package --list`
                                    holds every file it reads at build time (no build)
    cargo xtask prereqs [--dry-run] install what `test` needs; with --dry-run only say
                                    what is missing and how it would be installed
    cargo xtask help                this text

Missing programs are installed with apt-get (through sudo when not root). Without
apt-get, the command says exactly what to install and stops.
";

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let command = args.next();
    let rest: Vec<String> = args.collect();
    let result = match command.as_deref() {
        Some("demo") => demo(&rest),
        Some("test") => test(&rest),
        Some("check-package") if rest.is_empty() => {
            package::run(&workspace_root(), &cargo()).map(|()| ExitCode::SUCCESS)
        }
        Some("prereqs") if rest.is_empty() || rest == ["--dry-run"] => {
            ensure("the test suite", prereq::TEST, !rest.is_empty()).map(|()| ExitCode::SUCCESS)
        }
        None | Some("help" | "-h" | "--help") => {
            print!("{HELP}");
            Ok(ExitCode::SUCCESS)
        }
        Some(other) => {
            eprintln!(
                "xtask: unknown command or arguments: {other} {}\n",
                rest.join(" ")
            );
            eprint!("{HELP}");
            return ExitCode::from(2);
        }
    };
    result.unwrap_or_else(|message| {
        eprintln!("xtask: {message}");
        ExitCode::FAILURE
    })
}

/// `cargo xtask demo`: redis-server (unless `REDIS_URL` names a server), then the demo.
fn demo(args: &[String]) -> Result<ExitCode, String> {
    if std::env::var_os("REDIS_URL").is_some() {
        println!("xtask: REDIS_URL is set, so the demo uses that server: nothing to install");
    } else {
        ensure("the demo", prereq::DEMO, false)?;
    }
    let mut cargo_args = ["run", "-p", "fairjob-examples", "--bin", "demo"]
        .map(String::from)
        .to_vec();
    if !args.is_empty() {
        cargo_args.push("--".into());
        cargo_args.extend_from_slice(args);
    }
    run_cargo(&cargo_args)
}

/// `cargo xtask test`: everything the suite starts, then `cargo test
/// --workspace` with the OpenTelemetry tests' feature.
fn test(args: &[String]) -> Result<ExitCode, String> {
    ensure("the test suite", prereq::TEST, false)?;
    let mut cargo_args = ["test", "--workspace", "--features", "fairjob-tests/otel"]
        .map(String::from)
        .to_vec();
    cargo_args.extend_from_slice(args);
    run_cargo(&cargo_args)
}

/// Makes sure `requirements` are met, installing what is missing; with
/// `dry_run`, only says what would be done (and fails if anything is missing).
fn ensure(what: &str, requirements: &[Requirement], dry_run: bool) -> Result<(), String> {
    let missing = prereq::missing(requirements);
    if missing.is_empty() {
        let names: Vec<String> = requirements.iter().map(ToString::to_string).collect();
        println!("xtask: {what} has what it needs: {}", names.join(", "));
        return Ok(());
    }
    println!("xtask: {what} needs what is not installed here:");
    for r in &missing {
        println!("  - {r}");
    }
    let commands = match prereq::plan(&missing, prereq::Host::detect()) {
        Plan::Ready => return Ok(()),
        Plan::Manual { reason, packages } => {
            return Err(prereq::manual_instructions(&reason, &packages));
        }
        Plan::Install(commands) => commands,
    };
    if dry_run {
        println!("xtask: would run:");
        for command in &commands {
            println!("  {command}");
        }
        return Err("dry run: nothing installed".into());
    }
    for command in &commands {
        println!("xtask: running: {command}");
        let status = command
            .command()
            .status()
            .map_err(|e| format!("cannot run `{command}`: {e}"))?;
        if !status.success() {
            return Err(format!("`{command}` failed ({status})"));
        }
    }
    let still = prereq::missing(requirements);
    if !still.is_empty() {
        let names: Vec<String> = still.iter().map(ToString::to_string).collect();
        return Err(format!(
            "still missing after the install: {} (is /usr/bin on PATH?)",
            names.join(", ")
        ));
    }
    println!("xtask: installed {}", prereq::packages(&missing).join(" "));
    Ok(())
}

/// The repository root (xtask lives in its `xtask/` directory).
pub(crate) fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask/ has a parent directory")
        .to_path_buf()
}

/// The cargo that runs us (cargo sets `CARGO` for `cargo run`), else `cargo` on PATH.
fn cargo() -> PathBuf {
    std::env::var_os("CARGO").map_or_else(|| PathBuf::from("cargo"), PathBuf::from)
}

/// Runs cargo with `args` in the repository root and passes on its exit code.
fn run_cargo(args: &[String]) -> Result<ExitCode, String> {
    println!("xtask: running: cargo {}", args.join(" "));
    let status = Command::new(cargo())
        .current_dir(workspace_root())
        .args(args)
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    Ok(exit_code(status))
}

fn exit_code(status: ExitStatus) -> ExitCode {
    match status.code() {
        Some(0) => ExitCode::SUCCESS,
        Some(code) => ExitCode::from(u8::try_from(code).unwrap_or(1).max(1)),
        // Killed by a signal.
        None => ExitCode::FAILURE,
    }
}

/// A temporary directory for a test, removed when dropped.
#[cfg(test)]
#[derive(Debug)]
pub(crate) struct TempDir(PathBuf);

#[cfg(test)]
impl TempDir {
    pub(crate) fn new(name: &str) -> Self {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "fairjob-xtask-{name}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path).expect("create a temp dir");
        TempDir(path)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

#[cfg(test)]
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
