//! Real Ruby beside fairjob: running a script of `tests/ruby/` and reading
//! the JSON line it prints ([`ruby_json`]), and a real `sidekiq` server
//! process loading one ([`SidekiqProcess`]). Debian's `ruby-sidekiq` and
//! `ruby-activejob` provide them; a test that cannot start `ruby` or
//! `sidekiq` fails.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// How long a Ruby script may run before the test fails.
pub const RUBY_TIMEOUT: Duration = Duration::from_secs(60);

/// `tests/ruby/<name>`, absolute.
pub fn ruby_file(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("ruby")
        .join(name)
}

/// Runs `ruby tests/ruby/<script> <args…>` with a timeout and returns its
/// stdout; panics (with stdout and stderr) if ruby cannot start, exits
/// non-zero or runs past `timeout`.
pub fn run_ruby(script: &str, args: &[&str], timeout: Duration) -> String {
    let path = ruby_file(script);
    let mut child = Command::new("ruby")
        .arg(&path)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "cannot start `ruby {}` (apt-get install ruby-sidekiq ruby-activejob): {e}",
                path.display()
            )
        });
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = r.read_to_end(&mut buf);
            String::from_utf8_lossy(&buf).into_owned()
        })
    };
    let out = drain(Box::new(child.stdout.take().expect("stdout piped")));
    let err = drain(Box::new(child.stderr.take().expect("stderr piped")));
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for ruby") {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = out.join().expect("stdout reader");
    let stderr = err.join().expect("stderr reader");
    match status {
        Some(s) if s.success() => stdout,
        Some(s) => panic!(
            "`ruby {script} {args:?}` failed ({s})\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}"
        ),
        None => panic!(
            "`ruby {script} {args:?}` did not finish within {timeout:?}\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}"
        ),
    }
}

/// [`run_ruby`] off the async runtime; parses the last non-empty stdout line as JSON.
pub async fn ruby_json(script: &'static str, args: Vec<String>) -> Value {
    let out = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run_ruby(script, &args, RUBY_TIMEOUT)
    })
    .await
    .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
    let line = out
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("`ruby {script}` printed no JSON ({e}):\n{out}"))
}

/// A real `sidekiq` server process; TERM then KILL on drop, whatever happens.
#[derive(Debug)]
pub struct SidekiqProcess {
    child: Child,
    log: PathBuf,
}

impl SidekiqProcess {
    /// `REDIS_URL=<url> sidekiq -r tests/ruby/<script> -c 2 -q <queue>…`,
    /// output to a log file.
    pub fn start(url: &str, script: &str, queues: &[&str]) -> SidekiqProcess {
        let log = std::env::temp_dir().join(format!(
            "fairjob-sidekiq-{}-{}.log",
            std::process::id(),
            &fairjob::payload::new_jid()[..8]
        ));
        let file = std::fs::File::create(&log).expect("create sidekiq log");
        let mut cmd = Command::new("sidekiq");
        cmd.arg("-r")
            .arg(ruby_file(script))
            .args(["-c", "2", "-t", "5"]);
        for q in queues {
            cmd.args(["-q", q]);
        }
        let child = cmd
            .env("REDIS_URL", url)
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("log fd"))
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start `sidekiq` (apt-get install ruby-sidekiq): {e}")
            });
        SidekiqProcess { child, log }
    }

    /// What the process wrote so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Panics with the log if the process has already exited.
    pub fn assert_running(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("sidekiq exited early ({status}); its log:\n{}", self.log());
        }
    }

    fn signal(&self, sig: &str) {
        let _ = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.child.id().to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

impl Drop for SidekiqProcess {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.signal("TERM");
            let deadline = Instant::now() + Duration::from_secs(10);
            while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            if matches!(self.child.try_wait(), Ok(None)) {
                let _ = self.child.kill();
            }
        }
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}
