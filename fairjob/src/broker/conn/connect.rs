//! Connecting: [`ConnectOptions`], the seeds of a URL, the first direct
//! attempt that fails fast on a bad URL, a refused connection or wrong
//! credentials and says whether the server is a cluster node, then the
//! long-lived connection (reconnecting in the background) and the
//! [`Opener`] of the blocking ones. Credentials stay out of every message:
//! [`redacted`] for logs, `scrub` for the errors the Redis client writes.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::{AsyncConnectionConfig, IntoConnectionInfo};
use serde::{Deserialize, Serialize};

use super::tls::Tls;
#[cfg(feature = "tls")]
use super::tls::{install_tls_provider, tls_failure};
use super::{Backend, Conn, Single};
use crate::error::{Error, Result};
use crate::wire::duration::human;

/// How to reach Redis. In the settings' serde form (a [`ClientConfig`], a
/// worker's TOML file) these keys sit flat beside the others, durations as
/// humantime text (`"5s"`); a key left out keeps its default.
///
/// [`ClientConfig`]: crate::config::ClientConfig
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ConnectOptions {
    /// Key prefix (`ns:`), as redis-namespace did for Sidekiq.
    pub namespace: Option<String>,
    /// How long one command may take before it fails (default 5 s).
    #[serde(with = "human")]
    pub response_timeout: Duration,
    /// How long connecting may take (default 5 s).
    #[serde(with = "human")]
    pub connect_timeout: Duration,
    /// The reroute window key format, the gem's `enqueues_key` (placeholders
    /// `%<job_class>s`, `%<fair_tenant>s`, `%<queue>s`); the gem's by default.
    pub fair_key_format: Option<String>,
    /// Connect in Redis Cluster mode even with one seed (it is detected
    /// otherwise: `cluster_enabled:1`); a server not in cluster mode is then an error.
    pub cluster: bool,
    /// After each push, wait until this many replicas have the write (Redis
    /// `WAIT`); the push fails if they don't within `wait_timeout`. 0 (the
    /// default) waits for none.
    pub wait_replicas: u32,
    /// How long a push waits for its replicas (default 1 s).
    #[serde(with = "human")]
    pub wait_timeout: Duration,
    /// For a `rediss://` URL: a PEM file of the CA certificate(s) that signed
    /// the server's certificate (`REDIS_TLS_CA`); the system's root
    /// certificates when unset.
    pub tls_ca_file: Option<PathBuf>,
    /// Mutual TLS: a PEM client certificate (chain) (`REDIS_TLS_CERT`), with
    /// `tls_key_file`.
    pub tls_cert_file: Option<PathBuf>,
    /// Mutual TLS: the client certificate's PEM private key (`REDIS_TLS_KEY`).
    pub tls_key_file: Option<PathBuf>,
    /// Call the scripts as Redis functions (`FCALL`, Redis 7 and later;
    /// the default): a call skips setting up the script's included
    /// functions, which a function library does once as it loads. Scripts
    /// are called by hash (`EVALSHA`) when this is off, and on a Redis
    /// without functions (6.2) or whose ACL refuses them, found at the first
    /// call.
    pub functions: bool,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            namespace: None,
            response_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
            fair_key_format: None,
            cluster: false,
            wait_replicas: 0,
            wait_timeout: Duration::from_secs(1),
            tls_ca_file: None,
            tls_cert_file: None,
            tls_key_file: None,
            functions: true,
        }
    }
}

/// What [`connect`] returns: the shared connection and what is needed to open
/// the separate blocking ones.
pub(crate) struct Connected {
    pub conn: Conn,
    pub opener: Opener,
    pub display: String,
    /// The first seed's host and port (none for a Unix socket).
    pub server: Option<(String, u16)>,
}

/// Opens the blocking connections of [`Waiter`]s.
#[derive(Clone)]
pub(crate) enum Opener {
    Single(Box<redis::Client>),
    Cluster(Vec<redis::ConnectionInfo>, Tls),
}

/// Splits a URL into its seeds: `redis://a:7000,redis://b:7001`, or
/// `redis://:pw@a:7000,b:7001` where a seed without a scheme takes the first
/// one's scheme and credentials.
fn seeds(url: &str) -> Vec<String> {
    let parts: Vec<&str> = url
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    let Some(first) = parts.first() else {
        return vec![url.to_owned()];
    };
    let (scheme, rest) = first.split_once("://").unwrap_or(("redis", first));
    let userinfo = rest.rsplit_once('@').map(|(u, _)| u);
    parts
        .iter()
        .map(|p| {
            if p.contains("://") {
                (*p).to_owned()
            } else {
                match userinfo {
                    Some(u) => format!("{scheme}://{u}@{p}"),
                    None => format!("{scheme}://{p}"),
                }
            }
        })
        .collect()
}

/// Connects, failing fast with a clear error on a bad URL, a refused connection
/// or wrong credentials; later connection losses are retried in the background.
pub(crate) async fn connect(url: &str, options: &ConnectOptions) -> Result<Connected> {
    #[cfg(feature = "tls")]
    install_tls_provider();
    let seeds = seeds(url);
    let display = seeds
        .iter()
        .map(|s| redacted(s))
        .collect::<Vec<_>>()
        .join(",");
    let tls = Tls::load(options)?;
    if tls.is_set()
        && let Some(plain) = seeds.iter().find(|s| !s.starts_with("rediss://"))
    {
        return Err(Error::Config(format!(
            "TLS files are given (tls_ca_file / tls_cert_file) but {} is not a rediss:// URL",
            redacted(plain)
        )));
    }
    let mut infos = Vec::with_capacity(seeds.len());
    for seed in &seeds {
        let info = seed.as_str().into_connection_info().map_err(|e| {
            Error::Config(format!(
                "invalid redis URL {}: {}",
                redacted(seed),
                scrub(&e.to_string(), seed)
            ))
        })?;
        infos.push(info);
    }
    let server = match infos.first().map(redis::ConnectionInfo::addr) {
        Some(redis::ConnectionAddr::Tcp(host, port))
        | Some(redis::ConnectionAddr::TcpTls { host, port, .. }) => Some((host.clone(), *port)),
        _ => None,
    };
    let cfg = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(options.connect_timeout))
        .set_response_timeout(Some(options.response_timeout));
    // One direct attempt first, to the first seed that answers: a wrong
    // password or an unreachable server is reported at once instead of being
    // retried in the background; it also says whether this is a cluster.
    let mut cluster_enabled = None;
    let mut last_err = None;
    for (seed, info) in seeds.iter().zip(&infos) {
        let client = tls.client(info.clone()).map_err(|e| {
            Error::Config(format!(
                "invalid redis URL {}: {}",
                redacted(seed),
                scrub(&e.to_string(), seed)
            ))
        })?;
        match probe(&client, &cfg).await {
            Ok(enabled) => {
                cluster_enabled = Some(enabled);
                break;
            }
            Err(e) if Error::from_redis(e.clone()).is_refusal() => {
                // The server answered but refuses for now (loading, busy,
                // writes stopped…): connecting needs no write, and the
                // first real operation reports what is wrong.
                tracing::warn!(
                    redis = %redacted(seed),
                    said = %Error::from_redis(e),
                    "redis refuses commands for now; connected anyway"
                );
                cluster_enabled = Some(options.cluster || seeds.len() > 1);
                break;
            }
            Err(e) => last_err = Some(connect_error(e, seed, &redacted(seed))),
        }
    }
    let Some(cluster_enabled) = cluster_enabled else {
        return Err(last_err.expect("at least one seed"));
    };
    if !cluster_enabled && (options.cluster || seeds.len() > 1) {
        return Err(Error::Config(format!(
            "{display} is not a Redis Cluster node (its INFO says cluster_enabled:0); \
             cluster mode ({}) needs one",
            if options.cluster {
                "--cluster"
            } else {
                "several seed URLs"
            }
        )));
    }
    if cluster_enabled {
        let client = cluster_client(&infos, options, &tls, options.response_timeout)?;
        let conn = tokio::time::timeout(options.connect_timeout * 2, client.get_async_connection())
            .await
            .map_err(|_| {
                Error::Connection(format!(
                    "cannot reach the cluster at {display}: no answer within {:?}",
                    options.connect_timeout * 2
                ))
            })?
            .map_err(|e| connect_error(e, url, &display))?;
        return Ok(Connected {
            conn: Conn {
                backend: Backend::Cluster(conn),
            },
            opener: Opener::Cluster(infos, tls),
            display,
            server,
        });
    }
    let client = tls.client(infos.swap_remove(0)).map_err(|e| {
        Error::Config(format!(
            "invalid redis URL {display}: {}",
            scrub(&e.to_string(), url)
        ))
    })?;
    let manager_cfg = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(options.connect_timeout))
        .set_response_timeout(Some(options.response_timeout))
        .set_number_of_retries(2)
        .set_max_delay(Duration::from_secs(2));
    let manager = ConnectionManager::new_with_config(client.clone(), manager_cfg.clone())
        .await
        .map_err(|e| connect_error(e, url, &display))?;
    Ok(Connected {
        conn: Conn {
            backend: Backend::Single(Arc::new(Single::new(client.clone(), manager_cfg, manager))),
        },
        opener: Opener::Single(Box::new(client)),
        display,
        server,
    })
}

/// Whether the server runs in cluster mode (`INFO cluster`, which Redis
/// answers while loading and while refusing writes); a server that refuses
/// INFO, as some managed services do, counts as not, once it answers PING.
async fn probe(client: &redis::Client, cfg: &AsyncConnectionConfig) -> redis::RedisResult<bool> {
    let mut probe = client
        .get_multiplexed_async_connection_with_config(cfg)
        .await?;
    let info: redis::RedisResult<String> = redis::cmd("INFO")
        .arg("cluster")
        .query_async(&mut probe)
        .await;
    match info {
        Ok(info) => Ok(info.lines().any(|l| l.trim() == "cluster_enabled:1")),
        Err(e) if Error::from_redis(e.clone()).is_refusal() || e.is_io_error() => Err(e),
        Err(_) => {
            let _: String = redis::cmd("PING").query_async(&mut probe).await?;
            Ok(false)
        }
    }
}

/// A cluster client over `seeds` whose commands may take `response_timeout`.
pub(super) fn cluster_client(
    seeds: &[redis::ConnectionInfo],
    options: &ConnectOptions,
    tls: &Tls,
    response_timeout: Duration,
) -> Result<ClusterClient> {
    let builder = ClusterClientBuilder::new(seeds.to_vec())
        .connection_timeout(options.connect_timeout)
        .response_timeout(response_timeout)
        .retries(8)
        .max_retry_wait(1_000)
        .min_retry_wait(50);
    tls.cluster(builder)
        .build()
        .map_err(|e| Error::Config(format!("invalid cluster settings: {e}")))
}

/// `host:port/db` of a URL, with no user or password, for logs.
pub fn redacted(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    let scheme = url.split_once("://").map_or("redis", |(s, _)| s);
    format!("{scheme}://{rest}")
}

/// Replaces the URL's password (or whole user info) wherever it appears in `text`.
fn scrub(text: &str, url: &str) -> String {
    let mut out = text.to_owned();
    if let Some((_, rest)) = url.split_once("://")
        && let Some((userinfo, _)) = rest.rsplit_once('@')
    {
        if let Some((_, pass)) = userinfo.split_once(':')
            && !pass.is_empty()
        {
            out = out.replace(pass, "***");
        } else if !userinfo.is_empty() {
            out = out.replace(userinfo, "***");
        }
    }
    out
}

fn connect_error(e: redis::RedisError, url: &str, display: &str) -> Error {
    #[cfg(feature = "tls")]
    if let Some(why) = tls_failure(&e, display) {
        return Error::Tls(scrub(&why, url));
    }
    let tls_hint = if e.is_timeout() && display.starts_with("rediss://") {
        Some(" (no answer to the TLS handshake: is this the server's TLS port?)")
    } else if e.is_connection_dropped()
        && !e.is_connection_refusal()
        && display.starts_with("redis://")
    {
        Some(" (the server closed the connection: if it speaks TLS only, use a rediss:// URL)")
    } else {
        None
    };
    match Error::from_redis(e) {
        Error::Auth(text) => Error::Auth(format!("{display}: {}", scrub(&text, url))),
        // A plain server reached by a `rediss://` URL waits for the rest of
        // what it takes for a command: the handshake times out. A TLS-only
        // port drops a plain connection at its first command.
        Error::Unreachable { detail, .. } if tls_hint.is_some() => Error::Connection(format!(
            "cannot reach {display}: {}{}",
            scrub(&detail, url),
            tls_hint.unwrap_or_default()
        )),
        // Nothing was written while connecting: the caller may try again.
        Error::Unreachable { detail, .. } => Error::Unreachable {
            detail: format!("{display}: {}", scrub(&detail, url)),
            maybe_ran: false,
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacted_urls_have_no_credentials() {
        assert_eq!(
            redacted("redis://user:s3cret@host:6380/2"),
            "redis://host:6380/2"
        );
        assert_eq!(redacted("rediss://:s3cret@host"), "rediss://host");
        assert_eq!(redacted("redis://127.0.0.1/"), "redis://127.0.0.1/");
        assert_eq!(
            scrub("bad s3cret here", "redis://u:s3cret@h"),
            "bad *** here"
        );
    }
}
