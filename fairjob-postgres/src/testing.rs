//! A private PostgreSQL server for tests (feature `testing`), as
//! `fairjob::testing::RedisServer` is for Redis.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A private PostgreSQL server on a free loopback port in a temporary
/// directory, started with `initdb` and `pg_ctl`; stopped and removed on drop.
/// Never the machine's shared server.
///
/// PostgreSQL refuses to run as root: when the test runs as root, the server
/// runs as the `postgres` user (`runuser`) in a directory that user owns.
/// The binaries are looked up on the `PATH`, then under
/// `/usr/lib/postgresql/<version>/bin` (Debian's `postgresql` package).
#[derive(Debug)]
pub struct PostgresServer {
    port: u16,
    dir: PathBuf,
    bin: PathBuf,
    as_postgres: bool,
    opts: String,
}

impl PostgresServer {
    /// Initialises a cluster (user `postgres`, trust authentication on
    /// loopback only) and starts it on a free port.
    pub fn start() -> std::io::Result<PostgresServer> {
        let bin = bin_dir()?;
        let as_postgres = is_root();
        let port = fairjob::testing::free_port()?;
        let dir =
            std::env::temp_dir().join(format!("fairjob-postgres-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let opts = format!(
            "-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories='{}' -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=50 -c shared_buffers=16MB -c min_wal_size=4MB -c max_wal_size=32MB",
            dir.display()
        );
        let server = PostgresServer {
            port,
            dir,
            bin,
            as_postgres,
            opts,
        };
        if as_postgres {
            let st = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&server.dir)
                .status()?;
            check(st.success(), "chown postgres of the data directory")?;
        }
        let data = server.dir.join("data");
        let st = server
            .command("initdb")
            .args([
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--locale=C",
                // Small WAL segments: a test cluster takes a few MB of disk.
                "--wal-segsize=1",
                "--no-sync",
                "-D",
            ])
            .arg(&data)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?;
        check(st.success(), "initdb failed")?;
        server.start_again()?;
        Ok(server)
    }

    /// Starts the server again after [`stop`](Self::stop) (same port, same data).
    pub fn start_again(&self) -> std::io::Result<()> {
        let st = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.dir.join("data"))
            .arg("-l")
            .arg(self.dir.join("log"))
            .args(["-w", "-t", "60", "-o", &self.opts, "start"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?;
        check(
            st.success(),
            "pg_ctl start failed (see the log in the data dir)",
        )
    }

    /// Stops the server (`pg_ctl stop -m fast`: connections are cut, and the
    /// commits are kept even though the test server runs with
    /// `synchronous_commit=off`, which an immediate stop would lose), keeping
    /// its data for [`start_again`](Self::start_again).
    pub fn stop(&self) -> std::io::Result<()> {
        let st = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(["-m", "fast", "-w", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?;
        check(st.success(), "pg_ctl stop failed")
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `postgres://postgres@127.0.0.1:<port>/postgres`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    fn command(&self, tool: &str) -> Command {
        let path = self.bin.join(tool);
        if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(path);
            c.current_dir(&self.dir);
            c
        } else {
            Command::new(path)
        }
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        let _ = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(["-m", "immediate", "-w", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn check(ok: bool, what: &str) -> std::io::Result<()> {
    if ok {
        Ok(())
    } else {
        Err(std::io::Error::other(what.to_owned()))
    }
}

fn is_root() -> bool {
    // The workspace forbids `unsafe` (no `geteuid`): ask `id`.
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout.trim_ascii() == b"0")
        .unwrap_or(false)
}

/// The directory holding `initdb` and `pg_ctl`.
fn bin_dir() -> std::io::Result<PathBuf> {
    if let Some(path) = std::env::var_os("PATH") {
        for d in std::env::split_paths(&path) {
            if d.join("initdb").is_file() && d.join("pg_ctl").is_file() {
                // Debian links only some tools onto the PATH: prefer the real dir.
                let real = std::fs::canonicalize(d.join("initdb"))?;
                return Ok(real.parent().map(Path::to_path_buf).unwrap_or(d));
            }
        }
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|b| b.join("initdb").is_file())
        .collect();
    found.sort();
    found.pop().ok_or_else(|| {
        std::io::Error::other(
            "initdb not found: install PostgreSQL (Debian: apt-get install postgresql)",
        )
    })
}
