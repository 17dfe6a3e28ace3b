//! [`TestWorker`]: the one builder for `test-worker` OS processes, with the
//! fault suite's short lease, heartbeat and poll intervals set in one place, and
//! [`WorkerProcess`], the running child (signals, exit, its log).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::bin;

/// How a worker process is started: `test-worker -r <url> --namespace <ns>`
/// and its flags, each set once. Every flag starts at the tests' value, here
/// and nowhere else:
///
/// | flag | value |
/// |---|---|
/// | `-c` | 5 |
/// | `-t` (shutdown timeout) | 3 s |
/// | `--lease` | 1500 ms |
/// | `--heartbeat` | 300 ms |
/// | `--reaper-interval` | 300 ms |
/// | `--poll-interval` | 100 ms |
/// | `--scheduled-poll-interval` | 100 ms |
///
/// and no `-q` (the worker's default queue) until [`TestWorker::queues`].
/// Its log level is `$FAIRJOB_TEST_WORKER_LOG` (default `warn`); its output is
/// dropped unless [`TestWorker::log_to`] names a file (or
/// `$FAIRJOB_TEST_WORKER_STDERR` is set, which keeps stderr).
#[derive(Debug, Clone)]
#[must_use]
pub struct TestWorker {
    url: String,
    ns: String,
    queues: Vec<String>,
    flags: Vec<(String, String)>,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    ledger: Option<PathBuf>,
    log: Option<PathBuf>,
}

/// The flags every test worker process starts with.
const FLAGS: &[(&str, &str)] = &[
    ("-c", "5"),
    ("-t", "3s"),
    ("--lease", "1500ms"),
    ("--heartbeat", "300ms"),
    ("--reaper-interval", "300ms"),
    ("--poll-interval", "100ms"),
    ("--scheduled-poll-interval", "100ms"),
];

impl TestWorker {
    /// A worker on `url` in namespace `ns`, with the tests' settings.
    pub fn new(url: &str, ns: &str) -> TestWorker {
        TestWorker {
            url: url.to_owned(),
            ns: ns.to_owned(),
            queues: Vec::new(),
            flags: FLAGS
                .iter()
                .map(|(f, v)| ((*f).to_owned(), (*v).to_owned()))
                .collect(),
            args: Vec::new(),
            env: Vec::new(),
            ledger: None,
            log: None,
        }
    }

    /// The queues to work (`-q` each, `"name,weight"` allowed).
    pub fn queues<S: Into<String>>(mut self, queues: impl IntoIterator<Item = S>) -> TestWorker {
        self.queues = queues.into_iter().map(Into::into).collect();
        self
    }

    /// `-c`: jobs run at once.
    pub fn concurrency(self, n: usize) -> TestWorker {
        self.flag("-c", n.to_string())
    }

    /// Sets a flag that takes a value (`"--lease", "10s"`; `"-t", "5s"`),
    /// replacing the tests' value if it has one.
    pub fn flag(mut self, flag: &str, value: impl Into<String>) -> TestWorker {
        let value = value.into();
        match self.flags.iter_mut().find(|(f, _)| f == flag) {
            Some(set) => set.1 = value,
            None => self.flags.push((flag.to_owned(), value)),
        }
        self
    }

    /// One more argument, after the flags (`--log-format`, then `json`).
    pub fn arg(mut self, arg: impl Into<OsString>) -> TestWorker {
        self.args.push(arg.into());
        self
    }

    /// An environment variable for the worker (`FAIRJOB_LOG`, `info`).
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> TestWorker {
        self.env.push((key.into(), value.into()));
        self
    }

    /// `LedgerJob`s and `ProbeJob`s of this worker write their ledger lines in `dir`.
    pub fn ledger(mut self, dir: &Path) -> TestWorker {
        self.ledger = Some(dir.to_owned());
        self
    }

    /// The worker's stdout and stderr go to the file `path` ([`WorkerProcess::log`]).
    pub fn log_to(mut self, path: &Path) -> TestWorker {
        self.log = Some(path.to_owned());
        self
    }

    /// `test-worker` with the global flags and the environment, no run flags.
    fn base(&self) -> Command {
        let mut cmd = Command::new(bin("test-worker"));
        cmd.arg("-r")
            .arg(&self.url)
            .arg("--namespace")
            .arg(&self.ns);
        cmd.env(
            "FAIRJOB_LOG",
            std::env::var("FAIRJOB_TEST_WORKER_LOG").unwrap_or_else(|_| "warn".into()),
        );
        cmd.env_remove("REDIS_URL");
        if let Some(dir) = &self.ledger {
            cmd.env("FAIRJOB_TEST_LEDGER", dir);
        }
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        cmd
    }

    /// Starts the worker process.
    pub fn start(&self) -> WorkerProcess {
        let mut cmd = self.base();
        for q in &self.queues {
            cmd.arg("-q").arg(q);
        }
        for (flag, value) in &self.flags {
            cmd.arg(flag).arg(value);
        }
        cmd.args(&self.args);
        match &self.log {
            Some(path) => {
                let file = std::fs::File::create(path).expect("log file");
                cmd.stdout(file.try_clone().expect("log file"));
                cmd.stderr(file);
            }
            None => {
                cmd.stdout(Stdio::null());
                if std::env::var_os("FAIRJOB_TEST_WORKER_STDERR").is_none() {
                    cmd.stderr(Stdio::null());
                }
            }
        }
        WorkerProcess {
            child: cmd.spawn().expect("test-worker starts"),
            log: self.log.clone(),
        }
    }

    /// Runs a `test-worker` command (`jobs`, `shards <queue>`…) to completion
    /// instead of a worker; panics unless it succeeds; returns its stdout.
    pub fn command(&self, args: &[&str]) -> String {
        let out = self.command_output(args);
        assert!(
            out.status.success(),
            "test-worker {args:?} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("UTF-8 output")
    }

    /// Runs `test-worker <args>` (a command that ends) and returns what it
    /// did, failed or not.
    pub fn command_output(&self, args: &[&str]) -> std::process::Output {
        self.base().args(args).output().expect("test-worker runs")
    }
}

/// A running `test-worker` process, killed (if still running) when dropped.
#[derive(Debug)]
pub struct WorkerProcess {
    /// The child.
    pub child: Child,
    log: Option<PathBuf>,
}

impl WorkerProcess {
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

    /// Whether the process is still running (not exited, not a zombie).
    pub fn is_running(&self) -> bool {
        crate::process_alive(self.pid())
    }

    /// Waits for exit, up to `timeout`; the exit status, or None if it still runs.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<ExitStatus> {
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

    /// TERM, then waits up to 10 s: the exit status, or None if it still runs.
    pub fn stop(&mut self) -> Option<ExitStatus> {
        self.signal("TERM");
        self.wait_timeout(Duration::from_secs(10))
    }

    /// What the worker has written to its log so far (`""` without [`TestWorker::log_to`]).
    pub fn log(&self) -> String {
        self.log
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default()
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
