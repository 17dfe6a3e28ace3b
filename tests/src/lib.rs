//! Test support for fairjob's integration tests, fault suite and benchmarks:
//! private redis-servers on free ports, random namespaces, worker processes,
//! and the jobs the tests run.
//!
//! Every test talks to a real `redis-server` started here; a test that cannot
//! start or reach one fails.

pub mod jobs;
pub mod slot_jobs;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fairjob::{Client, WorkerBuilder};
pub use fairjob_examples::redis_server::{RedisServer, free_port};

/// Starts a private redis-server (panics with a clear message if it can't).
pub fn redis() -> RedisServer {
    RedisServer::start(&[])
        .expect("a private redis-server must start (apt-get install redis-server)")
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
        .poll_intervals(Duration::from_millis(100), Duration::from_millis(100))
        .lease(
            Duration::from_millis(1500),
            Duration::from_millis(300),
            Duration::from_millis(300),
        )
}

/// Polls `check` every 20 ms until it returns true or `timeout` passes.
pub async fn wait_until<F, Fut>(timeout: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    check().await
}

/// A raw Redis connection for assertions.
pub async fn raw(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("redis reachable")
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

/// A worker OS process (the real `test-worker` binary).
#[derive(Debug)]
pub struct WorkerProcess {
    /// The child.
    pub child: Child,
}

impl WorkerProcess {
    /// Starts `test-worker` with `args` (after the redis URL and namespace).
    pub fn start(
        url: &str,
        ns: &str,
        ledger: Option<&std::path::Path>,
        args: &[&str],
    ) -> WorkerProcess {
        let mut cmd = Command::new(bin("test-worker"));
        cmd.arg("-r").arg(url).arg("--namespace").arg(ns).args(args);
        if let Some(l) = ledger {
            cmd.env("FAIRJOB_TEST_LEDGER", l);
        }
        cmd.env(
            "FAIRJOB_LOG",
            std::env::var("FAIRJOB_TEST_WORKER_LOG").unwrap_or_else(|_| "warn".into()),
        );
        cmd.stdout(Stdio::null());
        if std::env::var_os("FAIRJOB_TEST_WORKER_STDERR").is_none() {
            cmd.stderr(Stdio::null());
        }
        WorkerProcess {
            child: cmd.spawn().expect("test-worker starts"),
        }
    }

    /// The pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends a signal (`"TERM"`, `"KILL"`, `"STOP"`, `"CONT"`, `"TSTP"`).
    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.pid().to_string())
            .status()
            .expect("kill");
        assert!(status.success(), "kill -{sig} {}", self.pid());
    }

    /// Waits for exit, up to `timeout`; returns the exit code (None = still running or killed).
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reads every ledger file in `dir`: lines `start|end <jid> <pid>`.
pub fn read_ledger(dir: &std::path::Path) -> Vec<(String, String, u32)> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if let Ok(text) = std::fs::read_to_string(e.path()) {
                for line in text.lines() {
                    let mut parts = line.split(' ');
                    if let (Some(kind), Some(jid), Some(pid)) =
                        (parts.next(), parts.next(), parts.next())
                    {
                        out.push((kind.to_owned(), jid.to_owned(), pid.parse().unwrap_or(0)));
                    }
                }
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------
// Fault-suite helpers (crash, freeze, poison, Redis restart, OOM, ACL tests).

/// A fresh, empty directory for one test's ledger (outside any Redis).
pub fn ledger_dir(tag: &str) -> TempDir {
    temp_dir(&format!("ledger-{tag}"))
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

/// A ledger summarised per jid: the pids that wrote `start` and `end`, in file order.
#[derive(Debug, Default, Clone)]
pub struct Ledger {
    /// jid → pids that started it (one entry per start).
    pub starts: std::collections::HashMap<String, Vec<u32>>,
    /// jid → pids that ended it (one entry per end).
    pub ends: std::collections::HashMap<String, Vec<u32>>,
}

impl Ledger {
    /// Reads every ledger file in `dir`.
    pub fn read(dir: &std::path::Path) -> Ledger {
        let mut l = Ledger::default();
        for (kind, jid, pid) in read_ledger(dir) {
            match kind.as_str() {
                "start" => l.starts.entry(jid).or_default().push(pid),
                "end" => l.ends.entry(jid).or_default().push(pid),
                _ => {}
            }
        }
        l
    }

    /// How many times `jid` started.
    pub fn started(&self, jid: &str) -> usize {
        self.starts.get(jid).map_or(0, Vec::len)
    }

    /// How many times `jid` ended.
    pub fn ended(&self, jid: &str) -> usize {
        self.ends.get(jid).map_or(0, Vec::len)
    }

    /// Number of jids with at least one `end`.
    pub fn jobs_ended(&self) -> usize {
        self.ends.len()
    }

    /// Jids that started (on any pid) more than once.
    pub fn started_more_than_once(&self) -> std::collections::BTreeSet<String> {
        self.starts
            .iter()
            .filter(|(_, p)| p.len() > 1)
            .map(|(j, _)| j.clone())
            .collect()
    }

    /// Jids that ended more than once (duplicate completions).
    pub fn ended_more_than_once(&self) -> std::collections::BTreeSet<String> {
        self.ends
            .iter()
            .filter(|(_, p)| p.len() > 1)
            .map(|(j, _)| j.clone())
            .collect()
    }

    /// Jids started on one of `pids` and not (yet) ended there: in flight on them.
    pub fn in_flight_on(&self, pids: &[u32]) -> std::collections::BTreeSet<String> {
        let mut out = std::collections::BTreeSet::new();
        for (jid, starters) in &self.starts {
            for pid in pids {
                let s = starters.iter().filter(|p| *p == pid).count();
                let e = self
                    .ends
                    .get(jid)
                    .map_or(0, |v| v.iter().filter(|p| *p == pid).count());
                if s > e {
                    out.insert(jid.clone());
                }
            }
        }
        out
    }

    /// Jids started on `pid` (at least once).
    pub fn started_on(&self, pid: u32) -> std::collections::BTreeSet<String> {
        self.starts
            .iter()
            .filter(|(_, p)| p.contains(&pid))
            .map(|(j, _)| j.clone())
            .collect()
    }
}

/// Starts `test-worker` like [`WorkerProcess::start`], but writes its stdout
/// and stderr (logs at `FAIRJOB_LOG`, default `warn`, and errors) to the file `log`.
pub fn start_worker_logged(
    url: &str,
    ns: &str,
    ledger: Option<&std::path::Path>,
    args: &[&str],
    log: &std::path::Path,
) -> WorkerProcess {
    let mut cmd = Command::new(bin("test-worker"));
    cmd.arg("-r").arg(url).arg("--namespace").arg(ns).args(args);
    if let Some(l) = ledger {
        cmd.env("FAIRJOB_TEST_LEDGER", l);
    }
    cmd.env(
        "FAIRJOB_LOG",
        std::env::var("FAIRJOB_TEST_WORKER_LOG").unwrap_or_else(|_| "warn".into()),
    );
    cmd.env_remove("REDIS_URL");
    let file = std::fs::File::create(log).expect("log file");
    cmd.stdout(file.try_clone().expect("log file"));
    cmd.stderr(file);
    WorkerProcess {
        child: cmd.spawn().expect("test-worker starts"),
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

/// Waits up to `timeout` for process `pid` to exit; true when it did.
pub fn wait_process_exit(pid: u32, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if !process_alive(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    !process_alive(pid)
}

/// Polls `check` every 20 ms (blocking) until true or `timeout` passes.
pub fn wait_for(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if check() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    check()
}

/// Every key matching `pattern` (SCAN, so it also works where KEYS is forbidden).
pub async fn scan_keys(url: &str, pattern: &str) -> Vec<String> {
    let mut r = raw(url).await;
    let mut out = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut r)
            .await
            .expect("SCAN");
        out.extend(batch);
        cursor = next;
        if cursor == 0 {
            break;
        }
    }
    out.sort();
    out.dedup();
    out
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

/// A worker running in this process, stopped (gracefully) by [`RunningWorker::stop`].
#[derive(Debug)]
pub struct RunningWorker {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<fairjob::Result<()>>,
}

/// Runs `worker` in this process until [`RunningWorker::stop`].
pub fn spawn(worker: fairjob::Worker) -> RunningWorker {
    let (stop, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(worker.run_until(async move {
        let _ = rx.await;
    }));
    RunningWorker { stop, task }
}

impl RunningWorker {
    /// Graceful shutdown; panics if the worker failed.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        self.task
            .await
            .expect("worker task")
            .expect("worker ran without error");
    }
}
