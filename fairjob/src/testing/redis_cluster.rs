//! A private Redis Cluster on loopback: `redis-server --cluster-enabled yes`
//! per node on free ports (each node's bus listens on its port + 10,000, so
//! ports stay ≤ 55,535), joined with `redis-cli --cluster create`, with a
//! short node timeout so failovers happen in about a second.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::RedisServer;

/// A private Redis Cluster: `primaries` primaries, each with `replicas`
/// replicas. Stopped, and its data directories removed, on drop. Needs
/// `redis-server` and `redis-cli` on the `PATH`.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    dir: std::path::PathBuf,
    /// `redis-cli`'s TLS arguments (empty without TLS).
    cli_tls: Vec<String>,
}

/// A primary of a [`RedisCluster`], as `CLUSTER NODES` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterPrimary {
    /// Its client port.
    pub port: u16,
    /// Its node id.
    pub id: String,
    /// The slot ranges it serves (inclusive).
    pub slots: Vec<(u16, u16)>,
}

/// A free port whose cluster bus port (+ 10,000) is free too.
fn free_cluster_port() -> std::io::Result<u16> {
    for _ in 0..200 {
        let port = super::free_port()?;
        if port <= 55_535 && std::net::TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return Ok(port);
        }
    }
    Err(std::io::Error::other(
        "no free port pair for a cluster node",
    ))
}

fn cli(tls: &[String], port: u16, args: &[&str]) -> std::io::Result<String> {
    let out = Command::new("redis-cli")
        .args(tls)
        .arg("-p")
        .arg(port.to_string())
        .args(args)
        .stdin(Stdio::null())
        .output()?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

impl RedisCluster {
    /// Starts the nodes and forms the cluster; returns once every node reports
    /// `cluster_state:ok` and knows every other node.
    pub fn start(
        primaries: usize,
        replicas: usize,
        extra: &[&str],
    ) -> std::io::Result<RedisCluster> {
        Self::start_with(primaries, replicas, extra, None)
    }

    /// [`start`](Self::start) with every node speaking TLS only, with
    /// `ca`'s server certificate, on the client port, the cluster bus and
    /// between replicas (`tls-cluster`, `tls-replication`), so the nodes
    /// announce their TLS ports and [`url`](Self::url) is a list of
    /// `rediss://` seeds; with `auth_clients`, clients must present a
    /// certificate `ca` signed (mutual TLS).
    pub fn start_tls(
        primaries: usize,
        replicas: usize,
        ca: &super::TestCa,
        auth_clients: bool,
        extra: &[&str],
    ) -> std::io::Result<RedisCluster> {
        let mut tls = ca.server_args(auth_clients);
        tls.extend(["--tls-cluster", "yes", "--tls-replication", "yes"].map(String::from));
        Self::start_with(primaries, replicas, extra, Some((tls, ca.cli_args())))
    }

    fn start_with(
        primaries: usize,
        replicas: usize,
        extra: &[&str],
        tls: Option<(Vec<String>, Vec<String>)>,
    ) -> std::io::Result<RedisCluster> {
        let (server_tls, cli_tls) = match tls {
            Some((server, cli)) => (Some(server), cli),
            None => (None, Vec::new()),
        };
        let dir = std::env::temp_dir().join(format!(
            "fairjob-cluster-{}-{}",
            std::process::id(),
            &crate::wire::new_jid()[..8]
        ));
        std::fs::create_dir_all(&dir)?;
        let mut cluster = RedisCluster {
            nodes: Vec::new(),
            dir,
            cli_tls,
        };
        let total = primaries * (1 + replicas);
        while cluster.nodes.len() < total {
            let port = free_cluster_port()?;
            let node_dir = cluster.dir.join(port.to_string());
            std::fs::create_dir_all(&node_dir)?;
            let mut args = vec![
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "1000",
                "--cluster-replica-validity-factor",
                "0",
                "--repl-diskless-sync",
                "yes",
                "--repl-diskless-sync-delay",
                "0",
            ];
            args.extend_from_slice(extra);
            match RedisServer::start_on_with(port, &node_dir, &args, server_tls.clone()) {
                Ok(node) => cluster.nodes.push(node),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(e),
                Err(_) => continue, // the port was taken meanwhile
            }
        }
        let addrs: Vec<String> = cluster
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        let out = Command::new("redis-cli")
            .args(&cluster.cli_tls)
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .arg("--cluster-replicas")
            .arg(replicas.to_string())
            .arg("--cluster-yes")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| {
                std::io::Error::new(
                    e.kind(),
                    format!("cannot run redis-cli (apt-get install redis-tools): {e}"),
                )
            })?;
        if !out.status.success() {
            return Err(std::io::Error::other(format!(
                "redis-cli --cluster create failed: {}",
                String::from_utf8_lossy(&out.stdout)
            )));
        }
        cluster.wait_ok(Duration::from_secs(30))?;
        Ok(cluster)
    }

    /// Waits until every running node says `cluster_state:ok` and sees all
    /// the others.
    pub fn wait_ok(&self, timeout: Duration) -> std::io::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let ok = self.nodes.iter().all(|n| {
                cli(&self.cli_tls, n.port(), &["CLUSTER", "INFO"])
                    .is_ok_and(|s| s.contains("cluster_state:ok"))
            });
            if ok {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(std::io::Error::other("the cluster did not become ok"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Every node's port.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(RedisServer::port).collect()
    }

    /// The seed list a client is given: every node's URL, comma-separated.
    pub fn url(&self) -> String {
        self.nodes
            .iter()
            .map(|n| n.url())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// A node that answers (the first ones may have been killed).
    fn live_port(&self) -> Option<u16> {
        self.nodes
            .iter()
            .map(RedisServer::port)
            .find(|p| cli(&self.cli_tls, *p, &["PING"]).is_ok_and(|r| r.contains("PONG")))
    }

    /// The live primaries as a live node sees them (`CLUSTER NODES`), by port.
    pub fn primary_slots(&self) -> Vec<ClusterPrimary> {
        let Some(ask) = self.live_port() else {
            return Vec::new();
        };
        let text = cli(&self.cli_tls, ask, &["CLUSTER", "NODES"]).unwrap_or_default();
        let mut out: Vec<ClusterPrimary> = text
            .lines()
            .filter(|l| l.contains("master") && !l.contains("fail"))
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                let port = f
                    .get(1)?
                    .split('@')
                    .next()?
                    .rsplit(':')
                    .next()?
                    .parse()
                    .ok()?;
                let ranges = f
                    .iter()
                    .skip(8)
                    .filter(|r| !r.starts_with('['))
                    .filter_map(|r| match r.split_once('-') {
                        Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                        None => r.parse().ok().map(|s| (s, s)),
                    })
                    .collect();
                Some(ClusterPrimary {
                    port,
                    id: f.first()?.to_string(),
                    slots: ranges,
                })
            })
            .collect();
        out.sort_by_key(|p| p.port);
        out
    }

    /// The ports of the nodes that are primaries now and serve slots (a
    /// primary that lost a failover may still call itself one, with none).
    pub fn primaries(&self) -> Vec<u16> {
        self.primary_slots()
            .into_iter()
            .filter(|p| !p.slots.is_empty())
            .map(|p| p.port)
            .collect()
    }

    /// `key`'s hash slot and the port of the live primary serving it (`None`
    /// while no live primary does, as during a failover).
    pub fn slot_owner(&self, key: &str) -> Option<(u16, u16)> {
        let slot = crate::broker::keys::cluster_slot(key);
        self.primary_slots()
            .into_iter()
            .find(|p| p.slots.iter().any(|(a, b)| (*a..=*b).contains(&slot)))
            .map(|p| (slot, p.port))
    }

    /// The node listening on `port`.
    pub fn node(&mut self, port: u16) -> Option<&mut RedisServer> {
        self.nodes.iter_mut().find(|n| n.port() == port)
    }

    /// Runs `redis-cli -p <port> <args>` against one node; its standard output.
    pub fn cli(&self, port: u16, args: &[&str]) -> std::io::Result<String> {
        cli(&self.cli_tls, port, args)
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            n.kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
