//! One fetch: reserve up to n jobs, each from the first non-empty queue of its
//! own weighted order, as Sidekiq's BasicFetch does per BRPOP.
//!
//! Plain queues are Sidekiq's lists, served by one fetch.lua call for all of
//! them. A tenant-sharded queue is served by its own shard_fetch.lua call, whose
//! keys all share the queue's Redis Cluster slot. When a worker's queues mix
//! both, a fetch runs in rounds: each round asks every order's next candidate
//! (for plain queues: the run of plain queues up to the next sharded one), all
//! calls of a round pipelined on one connection, and an order that got nothing
//! moves on past the queues found empty. A worker with plain queues only (or
//! with one sharded queue only) fetches in one round, one round trip.

use std::collections::BTreeMap;

use futures_util::future::try_join_all;
use redis::Value;

use crate::broker::{self, Keys, RedisBroker, ShardKeys};
use crate::error::Result;

/// One of the worker's queues, as the fetch scripts see it.
#[derive(Debug)]
struct FetchQueue {
    /// `queue:<name>`.
    list: String,
    /// `|<encoded name>`: the token suffix.
    suffix: String,
    /// For a sharded queue: its keys and this worker's in-progress record of it.
    shard: Option<(ShardKeys, String)>,
}

/// The worker's queues, prepared once.
#[derive(Debug)]
pub(crate) struct Fetcher {
    queues: Vec<FetchQueue>,
    inflight: String,
}

/// A reserved job: its token and raw payload.
pub(crate) type Reserved = (String, Vec<u8>);

impl Fetcher {
    pub(crate) fn new(keys: &Keys, identity: &str, queues: &[(String, bool)]) -> Fetcher {
        Fetcher {
            queues: queues
                .iter()
                .map(|(q, sharded)| FetchQueue {
                    list: keys.queue(q),
                    suffix: format!("|{}", broker::keys::encode(q)),
                    shard: sharded.then(|| {
                        let sk = keys.shard(q);
                        let inflight = sk.inflight(identity);
                        (sk, inflight)
                    }),
                })
                .collect(),
            inflight: keys.inflight(identity),
        }
    }

    /// Reserves at most one job per order (`orders` hold queue indices); token
    /// sequence numbers are taken from `seq`.
    pub(crate) async fn reserve(
        &self,
        broker: &RedisBroker,
        orders: &[Vec<usize>],
        seq: &mut u64,
    ) -> Result<Vec<Reserved>> {
        let n = orders.len();
        let mut pos = vec![0usize; n];
        let mut done = vec![false; n];
        let mut empty = vec![false; self.queues.len()];
        let mut out = Vec::new();
        loop {
            let plan = self.plan(orders, &mut pos, &mut done, &empty);
            if plan.plain.is_empty() && plan.shards.is_empty() {
                return Ok(out);
            }
            let mut invs = Vec::with_capacity(1 + plan.shards.len());
            if !plan.plain.is_empty() {
                invs.push(self.plain_call(&plan.plain, *seq));
                *seq += plan.plain.len() as u64;
            }
            for (&q, asking) in &plan.shards {
                invs.push(self.shard_call(q, asking.len(), *seq));
                *seq += asking.len() as u64;
            }
            let replies: Vec<Vec<Value>> =
                try_join_all(invs.iter().map(|inv| broker.invoke::<Vec<Value>>(inv))).await?;
            let mut replies = replies.into_iter();
            if !plan.plain.is_empty() {
                let reply = replies.next().unwrap_or_default();
                let mut served = vec![false; plan.plain.len()];
                let mut it = reply.into_iter();
                while let (Some(i), Some(token), Some(raw)) = (it.next(), it.next(), it.next()) {
                    let i: usize = redis::FromRedisValue::from_redis_value(i).unwrap_or(0);
                    if let Some(s) = i.checked_sub(1).and_then(|i| served.get_mut(i)) {
                        *s = true;
                    }
                    out.push(reserved(token, raw));
                }
                for ((order, segment), served) in plan.plain.iter().zip(served) {
                    if served {
                        done[*order] = true;
                    } else {
                        // Every queue of the run was empty.
                        for q in segment {
                            empty[*q] = true;
                        }
                    }
                }
            }
            for ((q, asking), reply) in plan.shards.iter().zip(replies) {
                let got = reply.len() / 2;
                let mut it = reply.into_iter();
                while let (Some(token), Some(raw)) = (it.next(), it.next()) {
                    out.push(reserved(token, raw));
                }
                for order in &asking[..got.min(asking.len())] {
                    done[*order] = true;
                }
                if got < asking.len() {
                    empty[*q] = true;
                }
            }
        }
    }

    /// The next candidate of every order not yet served or exhausted.
    fn plan(
        &self,
        orders: &[Vec<usize>],
        pos: &mut [usize],
        done: &mut [bool],
        empty: &[bool],
    ) -> Plan {
        let mut plan = Plan::default();
        for (i, order) in orders.iter().enumerate() {
            if done[i] {
                continue;
            }
            while pos[i] < order.len() && empty[order[pos[i]]] {
                pos[i] += 1;
            }
            let Some(&q) = order.get(pos[i]) else {
                done[i] = true;
                continue;
            };
            if self.queues[q].shard.is_some() {
                plan.shards.entry(q).or_default().push(i);
            } else {
                let segment = order[pos[i]..]
                    .iter()
                    .copied()
                    .take_while(|&j| self.queues[j].shard.is_none())
                    .filter(|&j| !empty[j])
                    .collect();
                plan.plain.push((i, segment));
            }
        }
        plan
    }

    fn plain_call(
        &self,
        plain: &[(usize, Vec<usize>)],
        seq: u64,
    ) -> redis::ScriptInvocation<'static> {
        let mut inv = broker::FETCH.prepare_invoke();
        inv.key(&self.inflight);
        inv.arg(plain.len()).arg(self.queues.len()).arg(seq);
        for q in &self.queues {
            inv.key(&q.list).arg(&q.suffix);
        }
        for (_, segment) in plain {
            inv.arg(segment.len());
            for q in segment {
                inv.arg(q + 1);
            }
        }
        inv
    }

    fn shard_call(&self, q: usize, n: usize, seq: u64) -> redis::ScriptInvocation<'static> {
        let fq = &self.queues[q];
        let (sk, inflight) = fq.shard.as_ref().expect("a sharded queue");
        let mut inv = broker::SHARD_FETCH.prepare_invoke();
        inv.key(&sk.inbox);
        for k in sk.state() {
            inv.key(k);
        }
        inv.key(inflight);
        inv.arg(n).arg(seq).arg(&fq.suffix).arg(&sk.shard_prefix);
        inv
    }
}

/// One round's calls: plain orders with their run of plain queues, and per
/// sharded queue the orders asking it.
#[derive(Debug, Default)]
struct Plan {
    plain: Vec<(usize, Vec<usize>)>,
    shards: BTreeMap<usize, Vec<usize>>,
}

fn reserved(token: Value, raw: Value) -> Reserved {
    (
        redis::FromRedisValue::from_redis_value(token).unwrap_or_default(),
        redis::FromRedisValue::from_redis_value(raw).unwrap_or_default(),
    )
}
