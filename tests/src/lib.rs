//! Test support for fairjob's integration tests, fault suite and benchmarks, the
//! way tokio keeps `tests/support/`: a test file reads as the behaviour it
//! checks, and the set-up lives here.
//!
//! - [`Redis`]: a private redis-server and a random namespace, with helpers
//!   that read what tests assert on; key names come from `fairjob::broker::Keys`.
//! - [`TestWorker`]: the one builder for `test-worker` OS processes (the fault
//!   suite's flags in one place), starting a [`WorkerProcess`];
//!   [`worker`]: the one builder for in-process workers, run with [`spawn`].
//! - [`eventually!`]: waits for a condition and says what it waited for.
//! - [`Ledger`]: which process started and ended which job, outside Redis.
//! - [`jobs`], [`slot_jobs`], [`rate_jobs`]: the jobs the tests run.
//! - [`source`]: the workspace's own sources, for the static checks.
//! - [`metrics`]: a worker serving `--metrics`, and parsed scrapes.
//! - [`ruby`]: Ruby scripts and a real `sidekiq` server beside fairjob.
//!
//! Every test talks to a real `redis-server` started here; a test that cannot
//! start or reach one fails.

pub mod fair_jobs;
pub mod jobs;
mod ledger;
pub mod logs;
pub mod long_jobs;
pub mod metrics;
pub mod rate_jobs;
pub mod ruby;
pub mod slot_jobs;
pub mod slowlog;
pub mod source;
mod support;
pub mod web;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

pub use fairjob::testing::{RedisServer, free_port};
use fairjob::{Client, QueueSpec, WorkerBuilder};
pub use ledger::{Ledger, ledger_dir, step_ledger, timed_ledger};
pub use support::redis::Redis;
pub use support::wait;
pub use support::wait::wait_until;
pub use support::worker::{TestWorker, WorkerProcess};

/// Starts a private redis-server (panics with a clear message if it can't).
pub fn redis() -> RedisServer {
    RedisServer::start(&[])
        .expect("a private redis-server must start (apt-get install redis-server)")
}

/// The value after `--name` on the command line (the benchmark binaries'
/// flags), or `default`; a value that does not parse stops the run.
pub fn flag<T: std::str::FromStr>(name: &str, default: T) -> T {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name}: cannot parse {v:?}"))
        })
        .unwrap_or(default)
}

/// A random key namespace, so tests sharing a server never see each other's keys.
pub fn namespace() -> String {
    format!("t{}", &fairjob::payload::new_jid()[..10])
}

/// A client on `url` in namespace `ns`.
pub async fn client(url: &str, ns: &str) -> Client {
    Client::builder(url)
        .namespace(ns)
        .build()
        .await
        .expect("client connects")
}

/// A worker builder with short intervals for tests.
pub fn worker(url: &str, ns: &str) -> WorkerBuilder {
    fairjob::Worker::builder(url)
        .namespace(ns)
        .concurrency(5)
        .shutdown_timeout(Duration::from_secs(3))
        .poll_interval(Duration::from_millis(100))
        .scheduled_poll_interval(Duration::from_millis(100))
        .lease(Duration::from_millis(1500))
        .heartbeat(Duration::from_millis(300))
        .reaper_interval(Duration::from_millis(300))
}

/// A worker's queue list from Sidekiq-style names (`"default"`, `"slow,1"`).
pub fn queues(names: &[&str]) -> QueueSpec {
    let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    QueueSpec::parse(&names).expect("a valid queue list")
}

/// Runs one command on the broker's connection (for jobs that record what they did).
pub async fn query<T: redis::FromRedisValue>(
    b: &fairjob::broker::RedisBroker,
    cmd: &redis::Cmd,
) -> fairjob::Result<T> {
    Ok(cmd.query_async(&mut b.connection()).await?)
}

/// The lines `RecordJob` and its kin recorded, through a client (e.g. on a
/// Redis Cluster, where [`Redis::records`] has no handle).
pub async fn client_records(c: &fairjob::Client) -> Vec<String> {
    let key = format!("{}{}", c.broker().keys().prefix(), crate::jobs::RECORD);
    query(c.broker(), redis::cmd("LRANGE").arg(key).arg(0).arg(-1))
        .await
        .expect("the record list reads")
}

/// Runs a pipeline on the broker's connection.
pub async fn pipe<T: redis::FromRedisValue>(
    b: &fairjob::broker::RedisBroker,
    pipe: &redis::Pipeline,
) -> fairjob::Result<T> {
    Ok(pipe.query_async(&mut b.connection()).await?)
}

/// A raw Redis connection for assertions.
pub async fn raw(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("redis reachable")
}

/// Calls per command since Redis's last `CONFIG RESETSTAT` (`INFO
/// commandstats`, commands inside scripts counted): (`evalsha`, `hset`,
/// `config|resetstat`…, calls).
pub async fn redis_command_calls(url: &str) -> Vec<(String, u64)> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut raw(url).await)
        .await
        .expect("INFO commandstats");
    commandstats_calls(&info)
}

/// The (command, calls) pairs of an `INFO commandstats` reply.
pub fn commandstats_calls(info: &str) -> Vec<(String, u64)> {
    info.lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            Some((name.to_owned(), calls))
        })
        .collect()
}

/// Commands Redis has run since its last `CONFIG RESETSTAT` (commands inside
/// scripts counted; `INFO`, `CONFIG` and `SLOWLOG`, the benchmarks' own, left
/// out).
pub async fn redis_commands(url: &str) -> u64 {
    redis_command_calls(url)
        .await
        .into_iter()
        .filter(|(name, _)| {
            !name.starts_with("info") && !name.starts_with("config") && !name.starts_with("slowlog")
        })
        .map(|(_, calls)| calls)
        .sum()
}

/// CPU time a process (`pid`, or this one for `"self"`) has used so far, in
/// ns: the sum of its live threads' `schedstat` run times.
pub fn process_cpu_ns(pid: &str) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// Resets Redis's command counts (`CONFIG RESETSTAT`) for [`redis_commands`].
pub async fn reset_redis_stats(url: &str) {
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut raw(url).await)
        .await
        .expect("CONFIG RESETSTAT");
}

/// Path of a binary built by this workspace (`test-worker`, `worker`, …), next to
/// the test executable.
pub fn bin(name: &str) -> PathBuf {
    let mut dir = std::env::current_exe().expect("current exe");
    dir.pop();
    if dir.ends_with("deps") {
        dir.pop();
    }
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is not built; run the tests with cargo (which builds it)",
        path.display()
    );
    path
}

/// A fresh, empty scratch directory under the system temp dir, removed on drop.
pub fn temp_dir(tag: &str) -> TempDir {
    let dir = std::env::temp_dir().join(format!(
        "fairjob-{tag}-{}-{}",
        std::process::id(),
        &fairjob::payload::new_jid()[..8]
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    TempDir(dir)
}

/// A scratch directory, removed when dropped.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl std::ops::Deref for TempDir {
    type Target = std::path::Path;

    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// True while process `pid` exists and has not exited (a zombie counts as exited).
pub fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            // `pid (comm) S ...`: the state follows the last `)`.
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.trim_start().chars().next());
            !matches!(state, Some('Z') | Some('X') | None)
        }
        Err(_) => false,
    }
}

/// Runs `redis-cli -p <port> <args>` and returns its stdout.
pub fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .arg("-p")
        .arg(port.to_string())
        .args(args)
        .output()
        .expect("redis-cli runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A Sidekiq payload for `job` as a Ruby producer would LPUSH it (no fairjob fields).
pub fn sidekiq_payload<J: fairjob::Job>(job: &J, jid: &str, queue: &str) -> String {
    let args: serde_json::Value =
        serde_json::from_str(job.to_args().expect("args encode").get()).expect("args are JSON");
    serde_json::json!({
        "class": J::CLASS,
        "args": args,
        "jid": jid,
        "queue": queue,
        "retry": true,
        "created_at": fairjob::payload::now_f64(),
    })
    .to_string()
}

/// Runs a benchmark's async main on a multi-threaded runtime; an error is
/// printed as `<name>: <error>` and fails the process.
pub fn run_main(
    name: &str,
    main: impl std::future::Future<Output = anyhow::Result<()>>,
) -> std::process::ExitCode {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match runtime.block_on(main) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Nearest-rank percentile `p` (0–100) of a sorted slice; NaN when it is empty
/// (the benchmarks' reports).
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// A worker running in this process, stopped (gracefully) by [`RunningWorker::stop`].
#[derive(Debug)]
pub struct RunningWorker {
    identity: String,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<fairjob::Result<()>>,
}

/// Runs `worker` in this process until [`RunningWorker::stop`].
pub fn spawn(worker: fairjob::Worker) -> RunningWorker {
    let identity = worker.identity().to_owned();
    let (stop, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(worker.run_until(async move {
        let _ = rx.await;
    }));
    RunningWorker {
        identity,
        stop,
        task,
    }
}

impl RunningWorker {
    /// The worker's identity (`host:pid:random`).
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Graceful shutdown; panics if the worker failed.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        self.task
            .await
            .expect("worker task")
            .expect("worker ran without error");
    }
}
