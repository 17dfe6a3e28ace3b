//! Starts a private `redis-server` on a free loopback port (for the demo and
//! tests); stops it and removes its data directory on drop.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A private `redis-server` process on a free loopback port, for integration
/// tests against a real Redis (what [`Fake`](super::Fake) does not simulate:
/// slot limits, tenant-shard limits and weights, a job's own Redis commands,
/// a real worker). Never the default port; stopped, and its data directory
/// removed, on drop. Needs `redis-server` on the `PATH`.
///
/// ```
/// use fairjob::prelude::*;
/// use fairjob::testing::RedisServer;
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize, Job)]
/// #[job(queue = "mailers")]
/// struct WelcomeMail(String);
///
/// impl Perform for WelcomeMail {
///     async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
///         Ok(())
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let redis = RedisServer::start(&[])?;
/// let client = Client::connect(&redis.url()).await?;
/// WelcomeMail("acme".into()).perform_async(&client).await?;
/// let overview = client.broker().overview().await?;
/// assert_eq!(overview.queues[0].name, "mailers");
/// assert_eq!(overview.queues[0].size, 1);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct RedisServer {
    child: Child,
    port: u16,
    dir: std::path::PathBuf,
    /// Whether drop removes `dir` (true when `start` made it).
    owns_dir: bool,
    /// TLS: the server's TLS arguments; `port` is then its `tls-port` and
    /// the plain port is off.
    tls: Option<Vec<String>>,
}

impl RedisServer {
    /// Starts `redis-server` with no persistence on a free port; `extra` are more
    /// config arguments (`["--appendonly", "yes"]`).
    pub fn start(extra: &[&str]) -> std::io::Result<RedisServer> {
        Self::start_with(extra, None)
    }

    /// Starts `redis-server` speaking TLS only, with `ca`'s server
    /// certificate, on a free port ([`url`](Self::url) is then
    /// `rediss://127.0.0.1:<port>`); with `auth_clients`, clients must present
    /// a certificate `ca` signed (mutual TLS).
    pub fn start_tls(
        ca: &super::TestCa,
        auth_clients: bool,
        extra: &[&str],
    ) -> std::io::Result<RedisServer> {
        Self::start_with(extra, Some(ca.server_args(auth_clients)))
    }

    fn start_with(extra: &[&str], tls: Option<Vec<String>>) -> std::io::Result<RedisServer> {
        // A free port can be taken by someone else between our probe and the
        // server's bind; then the server exits and we try another port.
        let mut attempt = 0;
        loop {
            attempt += 1;
            let port = free_port()?;
            let dir =
                std::env::temp_dir().join(format!("fairjob-redis-{}-{port}", std::process::id()));
            std::fs::create_dir_all(&dir)?;
            match Self::start_on_with(port, &dir, extra, tls.clone()) {
                Ok(mut s) => {
                    s.owns_dir = true;
                    return Ok(s);
                }
                Err(e) => {
                    let _ = std::fs::remove_dir_all(&dir);
                    if attempt >= 5 || e.kind() == std::io::ErrorKind::NotFound {
                        return Err(e);
                    }
                }
            }
        }
    }

    /// Starts on a given port and data directory (to restart a server).
    pub fn start_on(
        port: u16,
        dir: &std::path::Path,
        extra: &[&str],
    ) -> std::io::Result<RedisServer> {
        Self::start_on_with(port, dir, extra, None)
    }

    /// [`start_on`](Self::start_on), speaking TLS when `tls` holds the
    /// server's TLS arguments.
    pub(crate) fn start_on_with(
        port: u16,
        dir: &std::path::Path,
        extra: &[&str],
        tls: Option<Vec<String>>,
    ) -> std::io::Result<RedisServer> {
        let child = Self::spawn(port, dir, extra, tls.as_deref())?;
        let mut server = RedisServer {
            child,
            port,
            dir: dir.to_path_buf(),
            owns_dir: false,
            tls,
        };
        server.wait_ready()?;
        Ok(server)
    }

    /// Kills the server and starts a new one on the same port and data directory,
    /// with `extra` config (to test a Redis that goes away and comes back).
    pub fn restart(&mut self, extra: &[&str]) -> std::io::Result<()> {
        self.kill();
        self.child = Self::spawn(self.port, &self.dir, extra, self.tls.as_deref())?;
        self.wait_ready()
    }

    fn spawn(
        port: u16,
        dir: &std::path::Path,
        extra: &[&str],
        tls: Option<&[String]>,
    ) -> std::io::Result<Child> {
        let mut cmd = Command::new("redis-server");
        match tls {
            Some(tls) => cmd
                .arg("--port")
                .arg("0")
                .arg("--tls-port")
                .arg(port.to_string())
                .args(tls),
            None => cmd.arg("--port").arg(port.to_string()),
        };
        cmd.arg("--bind")
            .arg("127.0.0.1")
            .arg("--save")
            .arg("")
            .arg("--appendonly")
            .arg("no")
            .arg("--dir")
            .arg(dir)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        cmd.spawn().map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!(
                    "cannot start redis-server (is it installed? apt-get install redis-server): {e}"
                ),
            )
        })
    }

    fn wait_ready(&mut self) -> std::io::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(std::io::Error::other(format!(
                    "redis-server exited at start ({status}); port {} taken?",
                    self.port
                )));
            }
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                // Answering, and it is ours: a server that lost the port to
                // another one exits right after failing to bind.
                std::thread::sleep(Duration::from_millis(20));
                if let Ok(Some(status)) = self.child.try_wait() {
                    return Err(std::io::Error::other(format!(
                        "redis-server exited at start ({status}); port {} taken?",
                        self.port
                    )));
                }
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(std::io::Error::other(
                    "redis-server did not start within 10s",
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `redis://127.0.0.1:<port>` (`rediss://` for a TLS server).
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The data directory.
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills the server at once (no save).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        if self.owns_dir {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind(("127.0.0.1", 0))?.local_addr()?.port())
}
