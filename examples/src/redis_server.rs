//! Starts a private `redis-server` on a free loopback port (for the demo and
//! tests); stops it on drop.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A private redis-server process.
#[derive(Debug)]
pub struct RedisServer {
    child: Child,
    port: u16,
    dir: std::path::PathBuf,
}

impl RedisServer {
    /// Starts `redis-server` with no persistence on a free port; `extra` are more
    /// config arguments (`["--appendonly", "yes"]`).
    pub fn start(extra: &[&str]) -> std::io::Result<RedisServer> {
        let port = free_port()?;
        let dir = std::env::temp_dir().join(format!("fairjob-redis-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        Self::start_on(port, &dir, extra)
    }

    /// Starts on a given port and data directory (to restart a server).
    pub fn start_on(
        port: u16,
        dir: &std::path::Path,
        extra: &[&str],
    ) -> std::io::Result<RedisServer> {
        let mut cmd = Command::new("redis-server");
        cmd.arg("--port")
            .arg(port.to_string())
            .arg("--bind")
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
        let child = cmd.spawn().map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!(
                    "cannot start redis-server (is it installed? apt-get install redis-server): {e}"
                ),
            )
        })?;
        let server = RedisServer {
            child,
            port,
            dir: dir.to_path_buf(),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Ok(server);
            }
            if Instant::now() > deadline {
                return Err(std::io::Error::other(
                    "redis-server did not start within 10s",
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
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
    }
}

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind(("127.0.0.1", 0))?.local_addr()?.port())
}
