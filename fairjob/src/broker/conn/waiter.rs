//! The idle workers' blocking waiter ([`Waiter`]): a connection of its own,
//! apart from the shared [`Conn`](super::Conn), on which a worker blocks
//! (`BLPOP`) on its queues' wake-up lists, and on a cluster one per slot
//! group. It plays the role of sqlx's listener: a long-lived connection
//! that only waits.

use std::fmt;
use std::time::{Duration, Instant};

use futures_util::future::{BoxFuture, FutureExt};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{AsyncConnectionConfig, Cmd, Value};

use super::connect::{ConnectOptions, Opener, cluster_client};
use crate::broker::keys;

/// How much of a short wait is slept on the process's timer rather than
/// blocked in Redis (see [`Waiter::wait_at_most`]).
const TIMEOUT_SLACK: Duration = Duration::from_millis(100);

/// A connection of its own on which an idle worker blocks (BLPOP) on its
/// queues' wake-up lists until a job arrives or `block` passes. On a cluster,
/// the lists are grouped by hash slot and each group blocks on a connection of
/// its own (one BLPOP can't span slots); a group's BLPOP still in flight when
/// another group woke the worker is kept for the next wait, not sent again.
pub struct Waiter {
    /// `None` in testing mode: the waiter only sleeps.
    opener: Option<Opener>,
    options: ConnectOptions,
    block: Duration,
    conn: Option<redis::aio::MultiplexedConnection>,
    keys: Vec<String>,
    /// `BLPOP` on every key for up to `block` (one server).
    blpop: Cmd,
    cluster: Option<ClusterWaits>,
}

struct ClusterWaits {
    client: Option<ClusterClient>,
    groups: Vec<SlotWait>,
}

/// One slot's wake lists and the BLPOP on them in flight, if any.
struct SlotWait {
    keys: Vec<String>,
    conn: Option<ClusterConnection>,
    pending: Option<BoxFuture<'static, (ClusterConnection, bool)>>,
}

impl fmt::Debug for Waiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Waiter")
            .field("block", &self.block)
            .field("keys", &self.keys)
            .field("cluster", &self.cluster.is_some())
            .finish()
    }
}

impl Waiter {
    pub(crate) fn new(
        opener: Option<Opener>,
        options: ConnectOptions,
        block: Duration,
        keys: Vec<String>,
    ) -> Waiter {
        let cluster = match &opener {
            Some(Opener::Cluster(..)) => {
                let mut groups: Vec<(u16, Vec<String>)> = Vec::new();
                for k in &keys {
                    let slot = keys::cluster_slot(k);
                    match groups.iter_mut().find(|(s, _)| *s == slot) {
                        Some((_, g)) => g.push(k.clone()),
                        None => groups.push((slot, vec![k.clone()])),
                    }
                }
                Some(ClusterWaits {
                    client: None,
                    groups: groups
                        .into_iter()
                        .map(|(_, keys)| SlotWait {
                            keys,
                            conn: None,
                            pending: None,
                        })
                        .collect(),
                })
            }
            _ => None,
        };
        let mut blpop = redis::cmd("BLPOP");
        for k in &keys {
            blpop.arg(k);
        }
        blpop.arg(block.as_secs_f64());
        Waiter {
            opener,
            options,
            block,
            conn: None,
            keys,
            blpop,
            cluster,
        }
    }

    /// As [`Self::wait`], for at most `at_most` when that is shorter than the
    /// block time (a sharded queue's tenant waiting for its rate is due then).
    ///
    /// Redis times a blocking command out only when its event loop next turns
    /// (up to `1 / hz`: 100 ms at the default `hz 10`), so a `BLPOP` of 20 ms
    /// on a quiet server returns up to 100 ms late. The wait blocks in Redis
    /// for all but `TIMEOUT_SLACK` of it (woken early by a token as usual)
    /// and sleeps the rest on this process's timer: it ends on time, and
    /// only its last 100 ms don't see a wake-up token.
    pub async fn wait_at_most(&mut self, at_most: Option<Duration>) {
        let Some(d) = at_most.filter(|d| *d < self.block) else {
            return self.wait().await;
        };
        let started = tokio::time::Instant::now();
        let deadline = started + d;
        if let Some(blocking) = d
            .checked_sub(TIMEOUT_SLACK)
            .filter(|b| *b >= Duration::from_millis(1))
        {
            let mut blpop = redis::cmd("BLPOP");
            for k in &self.keys {
                blpop.arg(k);
            }
            blpop.arg(blocking.as_secs_f64());
            let block = std::mem::replace(&mut self.block, blocking);
            let full = std::mem::replace(&mut self.blpop, blpop);
            self.wait().await;
            self.block = block;
            self.blpop = full;
            if started.elapsed() < blocking {
                // Woken (or Redis is away): the caller fetches now.
                return;
            }
        }
        tokio::time::sleep_until(deadline).await;
    }

    /// Blocks until a wake-up token arrives or the block time passes. Returns
    /// early (after at most the block time) when Redis is unreachable, so the
    /// caller's loop goes on polling.
    pub async fn wait(&mut self) {
        let started = Instant::now();
        if self.cluster.is_some() {
            if !self.wait_cluster().await {
                // Nothing to block on (no connection yet): sleep instead.
                tokio::time::sleep(self.block.saturating_sub(started.elapsed())).await;
            }
            return;
        }
        self.connect().await;
        let Some(conn) = self.conn.as_mut() else {
            tokio::time::sleep(self.block.saturating_sub(started.elapsed())).await;
            return;
        };
        if self
            .blpop
            .query_async::<Option<(String, String)>>(conn)
            .await
            .is_err()
        {
            self.conn = None;
            tokio::time::sleep(self.block.saturating_sub(started.elapsed())).await;
        }
    }

    /// As [`Self::wait`] on one server, then `then` on the same connection
    /// with no round trip in between: both go out as one pipeline, and Redis
    /// runs `then` the moment the wait ends (a wake-up token, or the block
    /// time), so an idle worker's fetch costs one round trip, as Sidekiq's
    /// `BRPOP` does. Returns `then`'s reply, or `None` when it did not run
    /// that way (a cluster, testing mode, a script Redis does not have yet,
    /// a lost connection): the caller then runs it itself.
    ///
    /// Cancelling this future may leave `then` to run in Redis unseen: a
    /// caller whose `then` moves jobs awaits it to the end (at most the block
    /// time and the response timeout).
    pub(crate) async fn wait_then(&mut self, then: &Cmd) -> Option<Value> {
        if self.cluster.is_some() || !matches!(self.opener, Some(Opener::Single(_))) {
            self.wait().await;
            return None;
        }
        let started = Instant::now();
        self.connect().await;
        let Some(conn) = self.conn.as_mut() else {
            tokio::time::sleep(self.block.saturating_sub(started.elapsed())).await;
            return None;
        };
        let mut pipe = redis::pipe();
        pipe.add_command(self.blpop.clone())
            .ignore()
            .add_command(then.clone());
        match pipe.query_async::<(Value,)>(conn).await {
            Ok((reply,)) => Some(reply),
            Err(e) if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() => {
                self.conn = None;
                tokio::time::sleep(self.block.saturating_sub(started.elapsed())).await;
                None
            }
            // An error reply (NOSCRIPT after a restart): the caller's own
            // call loads the script.
            Err(_) => None,
        }
    }

    /// Opens the waiter's connection on one server, if it has none.
    async fn connect(&mut self) {
        if self.conn.is_none()
            && let Some(Opener::Single(client)) = &self.opener
        {
            let cfg = AsyncConnectionConfig::new()
                .set_connection_timeout(Some(self.options.connect_timeout))
                .set_response_timeout(Some(self.block + self.options.response_timeout));
            self.conn = client
                .get_multiplexed_async_connection_with_config(&cfg)
                .await
                .ok();
        }
    }

    /// The cluster wait: one BLPOP per slot group, each on its own
    /// connection, until the first returns (or the block time passes).
    /// False when there was nothing to block on.
    async fn wait_cluster(&mut self) -> bool {
        let Some(Opener::Cluster(seeds, tls)) = &self.opener else {
            return false;
        };
        let waits = self.cluster.as_mut().expect("cluster waits");
        if waits.client.is_none() {
            waits.client = cluster_client(
                seeds,
                &self.options,
                tls,
                self.block + self.options.response_timeout,
            )
            .ok();
        }
        let Some(client) = &waits.client else {
            return false;
        };
        for g in &mut waits.groups {
            if g.pending.is_some() {
                continue;
            }
            if g.conn.is_none() {
                g.conn = tokio::time::timeout(
                    self.options.connect_timeout,
                    client.get_async_connection(),
                )
                .await
                .ok()
                .and_then(Result::ok);
            }
            let Some(conn) = g.conn.take() else { continue };
            let mut cmd = redis::cmd("BLPOP");
            for k in &g.keys {
                cmd.arg(k);
            }
            cmd.arg(self.block.as_secs_f64());
            g.pending = Some(
                async move {
                    let mut conn = conn;
                    let ok = cmd
                        .query_async::<Option<(String, String)>>(&mut conn)
                        .await
                        .is_ok();
                    (conn, ok)
                }
                .boxed(),
            );
        }
        let pending: Vec<(usize, &mut BoxFuture<'static, (ClusterConnection, bool)>)> = waits
            .groups
            .iter_mut()
            .enumerate()
            .filter_map(|(i, g)| g.pending.as_mut().map(|p| (i, p)))
            .collect();
        if pending.is_empty() {
            return false;
        }
        let (indices, futures): (Vec<usize>, Vec<_>) = pending.into_iter().unzip();
        let limit = self.block + self.options.response_timeout;
        let Ok(((conn, ok), which, _)) =
            tokio::time::timeout(limit, futures_util::future::select_all(futures)).await
        else {
            return true;
        };
        let g = &mut waits.groups[indices[which]];
        g.pending = None;
        if ok {
            g.conn = Some(conn);
        }
        ok
    }
}
