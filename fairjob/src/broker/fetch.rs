//! Reserve jobs: `fetch.lua` moves jobs from Sidekiq's plain queue lists into
//! a worker's in-progress record, each from the first non-empty queue of its
//! own order; `shard_fetch.lua` does the same for one tenant-sharded queue,
//! every key in that queue's cluster slot. Which orders to ask, and in which
//! rounds, is the worker's business (`worker/fetch.rs`).

use redis::{FromRedisValue, Value};

use super::scripts::{FETCH, SHARD_FETCH};
use super::{RedisBroker, ShardKeys, keys};
use crate::error::Result;
use crate::policy::dispatch::reserve::{INBOX_MOVE, RATE_WAKE};

/// A reserved job: its in-progress token and raw payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reserved {
    /// The field of the in-progress record (see [`super::Token`]).
    pub token: String,
    /// The payload's bytes as Redis holds them.
    pub raw: Vec<u8>,
}

/// A plain queue as `fetch.lua` sees it, prepared once per worker.
#[derive(Debug, Clone)]
pub(crate) struct PlainQueue {
    list: String,
    suffix: String,
    /// In cluster mode, the worker's in-progress record of this queue (in
    /// its slot): the queue is then fetched on its own
    /// ([`RedisBroker::fetch_plain_alone`]), not with the others.
    own_record: Option<String>,
}

impl PlainQueue {
    /// True when this queue is fetched by a call of its own (cluster mode).
    pub(crate) fn alone(&self) -> bool {
        self.own_record.is_some()
    }
}

/// A tenant-sharded queue as `shard_fetch.lua` sees it, with this worker's
/// in-progress record of it.
#[doc(hidden)]
#[derive(Debug, Clone)]
pub struct ShardQueue {
    /// The queue's name.
    pub(crate) name: String,
    sk: ShardKeys,
    identity: String,
    inflight: String,
    suffix: String,
}

impl RedisBroker {
    /// The keys of plain queue `name` for `identity`.
    pub(crate) fn plain_queue(&self, name: &str, identity: &str) -> PlainQueue {
        PlainQueue {
            list: self.keys.queue(name),
            suffix: format!("|{}", keys::encode(name)),
            own_record: self
                .is_cluster()
                .then(|| self.keys.shard(name).inflight(identity)),
        }
    }

    /// Reserves up to `n` jobs of one plain queue fetched on its own (cluster
    /// mode: `fetch.lua` with the worker's record of the queue, in its slot).
    pub(crate) async fn fetch_plain_alone(
        &self,
        queue: &PlainQueue,
        n: usize,
        seq: u64,
    ) -> Result<Vec<Reserved>> {
        let record = queue
            .own_record
            .as_ref()
            .expect("a queue fetched alone has its own record");
        let mut inv = FETCH.call();
        inv.key(record).key(&queue.list);
        inv.arg(n).arg(1).arg(seq).arg(&queue.suffix);
        for _ in 0..n {
            inv.arg(1).arg(1);
        }
        let reply: Vec<Value> = self.invoke(&inv).await?;
        let mut out = Vec::with_capacity(reply.len() / 3);
        let mut it = reply.into_iter();
        while let (Some(_), Some(token), Some(raw)) = (it.next(), it.next(), it.next()) {
            out.push(reserved(token, raw));
        }
        Ok(out)
    }

    /// The keys of sharded queue `name` and `identity`'s record of it.
    #[doc(hidden)]
    pub fn shard_queue(&self, name: &str, identity: &str) -> ShardQueue {
        let sk = self.keys.shard(name);
        let inflight = sk.inflight(identity);
        ShardQueue {
            name: name.to_owned(),
            sk,
            identity: identity.to_owned(),
            inflight,
            suffix: format!("|{}", keys::encode(name)),
        }
    }

    /// Testing mode: records `entry`, a job the fake took out of its queue,
    /// as fetched by `identity` under `token` (its end then goes through
    /// [`Self::finish`]).
    #[cfg(feature = "testing")]
    pub(crate) fn hold_taken(&self, identity: &str, token: &super::Token, entry: super::Entry) {
        if let Some(store) = self.memory() {
            store.hold(&self.inflight_of(identity, token), token, entry);
        }
    }

    /// Reserves at most one job per order from plain queues into `identity`'s
    /// record. `orders[i]` lists indices into `queues`, most wanted first.
    /// Returns `(order, job)` for each order served; tokens are numbered from `seq`.
    pub(crate) async fn fetch_plain(
        &self,
        identity: &str,
        queues: &[PlainQueue],
        orders: &[Vec<usize>],
        seq: u64,
    ) -> Result<Vec<(usize, Reserved)>> {
        let inv = self.fetch_plain_call(identity, queues, orders, seq);
        let reply: Vec<Value> = self.invoke(&inv).await?;
        Ok(plain_reply(reply))
    }

    /// [`Self::fetch_plain`] queued behind `waiter`'s wait on the wake-up
    /// lists, in one round trip ([`Waiter::wait_then`]). `None` when it could
    /// not run that way: the caller fetches itself.
    ///
    /// [`Waiter::wait_then`]: super::Waiter::wait_then
    pub(crate) async fn fetch_plain_after_wait(
        &self,
        waiter: &mut super::Waiter,
        identity: &str,
        queues: &[PlainQueue],
        orders: &[Vec<usize>],
        seq: u64,
    ) -> Option<Vec<(usize, Reserved)>> {
        let inv = self.fetch_plain_call(identity, queues, orders, seq);
        let reply = waiter.wait_then(&self.script_command(&inv)).await?;
        Vec::<Value>::from_redis_value(reply).ok().map(plain_reply)
    }

    fn fetch_plain_call(
        &self,
        identity: &str,
        queues: &[PlainQueue],
        orders: &[Vec<usize>],
        seq: u64,
    ) -> super::scripts::Call<'static> {
        let mut inv = FETCH.call();
        inv.key(self.keys.inflight(identity));
        inv.arg(orders.len()).arg(queues.len()).arg(seq);
        for q in queues {
            inv.key(&q.list).arg(&q.suffix);
        }
        for order in orders {
            inv.arg(order.len());
            for q in order {
                inv.arg(q + 1);
            }
        }
        inv
    }

    /// Reserves up to `n` jobs of one sharded queue, in its fair-share order;
    /// tokens are numbered from `seq`. (Public, hidden, for the benchmarks
    /// that time the script.)
    #[doc(hidden)]
    pub async fn fetch_shard(
        &self,
        queue: &ShardQueue,
        n: usize,
        seq: u64,
    ) -> Result<Vec<Reserved>> {
        Ok(self.fetch_shard_hinted(queue, n, seq).await?.0)
    }

    /// As [`Self::fetch_shard`], with, when it reserved fewer than `n` and a
    /// tenant waits for its rate, how long until the first such tenant's rate
    /// allows a start (an idle worker waits no longer).
    pub async fn fetch_shard_hinted(
        &self,
        queue: &ShardQueue,
        n: usize,
        seq: u64,
    ) -> Result<(Vec<Reserved>, Option<std::time::Duration>)> {
        let got = self.fetch_shard_acking(queue, n, seq, &[]).await?;
        Ok((got.jobs, got.rate_due))
    }

    /// As [`Self::fetch_shard_hinted`], acking first, in the same step, jobs
    /// of this queue that ended well in `queue`'s in-progress record: `acks`
    /// are (token, encoded tenant) pairs, each fenced by its token, as
    /// [`Self::ack_many`] does (without kept jobs: those go through it). A
    /// worker's next fetch carries the acks of the jobs it finished, so a
    /// sharded job costs one round trip and its tenant's running count is
    /// released in the step that refills the slot. Fenced acks are counted.
    pub async fn fetch_shard_acking(
        &self,
        queue: &ShardQueue,
        n: usize,
        seq: u64,
        acks: &[(&str, &str)],
    ) -> Result<ShardFetched> {
        #[cfg(feature = "testing")]
        if let Some(store) = self.memory() {
            let fenced = if acks.is_empty() {
                Vec::new()
            } else {
                store.ack_many(&queue.inflight, &queue.name, acks)
            };
            let (jobs, rate_due) =
                store.fetch_shard(&queue.name, &queue.inflight, &queue.suffix, n, seq);
            return Ok(ShardFetched {
                jobs,
                rate_due,
                fenced,
            });
        }
        let mut inv = SHARD_FETCH.call();
        inv.key(&queue.sk.inbox);
        for k in queue.sk.state() {
            inv.key(k);
        }
        inv.key(&queue.inflight)
            .key(&queue.sk.fetchers)
            .key(&queue.sk.waits)
            .key(&queue.sk.slot_waits);
        inv.arg(n)
            .arg(seq)
            .arg(&queue.suffix)
            .arg(&queue.sk.shard_prefix)
            .arg(INBOX_MOVE)
            .arg(&queue.identity)
            .arg(RATE_WAKE);
        if !acks.is_empty() {
            inv.key(&queue.sk.wake).arg("1");
            for (token, tenant) in acks {
                inv.arg(*token).arg(*tenant).arg("");
            }
        }
        let mut reply: Vec<Value> = self.invoke(&inv).await?;
        let mut fenced = Vec::new();
        if !acks.is_empty() && !reply.is_empty() {
            let gone = Vec::<usize>::from_redis_value(reply.remove(0)).unwrap_or_default();
            fenced = self.fenced_acks(gone, acks.len()).await;
        }
        let rate_due = if reply.len() % 2 == 1 {
            reply
                .pop()
                .and_then(|v| u64::from_redis_value(v).ok())
                .map(std::time::Duration::from_micros)
        } else {
            None
        };
        let mut jobs = Vec::with_capacity(reply.len() / 2);
        let mut it = reply.into_iter();
        while let (Some(token), Some(raw)) = (it.next(), it.next()) {
            jobs.push(reserved(token, raw));
        }
        Ok(ShardFetched {
            jobs,
            rate_due,
            fenced,
        })
    }
}

/// What [`RedisBroker::fetch_shard_acking`] did: the jobs it reserved, how
/// long until a tenant waiting for its rate is due (when it reserved fewer than
/// asked and one waits), and per ack it carried whether it was fenced.
#[derive(Debug, Default)]
pub struct ShardFetched {
    /// The jobs reserved, in dispatch order.
    pub jobs: Vec<Reserved>,
    /// How long until the first tenant waiting for its rate may start.
    pub rate_due: Option<std::time::Duration>,
    /// Per ack carried, in order: true when its token was gone.
    pub fenced: Vec<bool>,
}

/// The current minute since the epoch (the dispatch counts' bucket).
pub(crate) fn epoch_minute() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / 60)
}

/// `fetch.lua`'s reply: (order, token, payload) triples, orders from 1.
fn plain_reply(reply: Vec<Value>) -> Vec<(usize, Reserved)> {
    let mut out = Vec::with_capacity(reply.len() / 3);
    let mut it = reply.into_iter();
    while let (Some(i), Some(token), Some(raw)) = (it.next(), it.next(), it.next()) {
        let i = usize::from_redis_value(i).unwrap_or(0);
        if let Some(order) = i.checked_sub(1) {
            out.push((order, reserved(token, raw)));
        }
    }
    out
}

fn reserved(token: Value, raw: Value) -> Reserved {
    Reserved {
        token: String::from_redis_value(token).unwrap_or_default(),
        raw: Vec::<u8>::from_redis_value(raw).unwrap_or_default(),
    }
}
