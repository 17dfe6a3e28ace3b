//! Self-healing bookkeeping. A Redis that loses its last writes (an AOF
//! `everysec` crash, a failover) can leave a tenant's running count, the
//! dispatch order or a slot's holders disagreeing with the in-progress
//! records: a tenant stuck at its cap, out of the rotation, or a slot held by
//! nobody, forever. The reaper runs these checks every pass, each bounded:
//! per sharded queue one recount of running jobs (`shard_reconcile.lua`, as
//! costly as the jobs in flight on the queue) and one page of tenants, plus one
//! step of a scan for tenant lists nobody lists; one page of slot keys. Where
//! each check stopped is kept in Redis, so the next pass (by any worker) goes on.

use std::collections::BTreeSet;

use super::keys::glob_escape;
use super::scripts::{RECLAIM, SHARD_RECONCILE, SLOT_FORGET};
use super::slots::RESERVATION_TTL;
use super::{RedisBroker, Token};
use crate::error::Result;

/// Tenants, tenant lists and slot keys one pass looks at, per check.
const PASS_BATCH: usize = 200;

/// Tenants one `shard_reconcile.lua` call re-checks at most (a pass finds up
/// to about 2 * PASS_BATCH; with 10,000 tenants waiting for their rates, 400
/// in one call took 5.8 ms).
const RECHECK_CALL: usize = 50;

/// What one pass repaired.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Healed {
    /// Tenants whose running count disagreed with the in-progress records.
    pub running_counts: u64,
    /// Tenants out of (or wrongly in) the dispatch order or the tenant set.
    pub tenants: u64,
    /// Slot holders whose job was gone.
    pub slot_holders: u64,
}

impl Healed {
    /// True when nothing needed repair.
    pub fn is_empty(&self) -> bool {
        *self == Healed::default()
    }
}

impl RedisBroker {
    pub(super) async fn cursor(&self, what: &str) -> Result<u64> {
        let c: Option<u64> = self
            .query(
                redis::cmd("HGET")
                    .arg(self.keys.reconcile_cursors())
                    .arg(what),
            )
            .await?;
        Ok(c.unwrap_or(0))
    }

    pub(super) async fn set_cursor(&self, what: &str, cursor: u64) -> Result<()> {
        let _: i64 = self
            .query(
                redis::cmd("HSET")
                    .arg(self.keys.reconcile_cursors())
                    .arg(what)
                    .arg(cursor),
            )
            .await?;
        Ok(())
    }

    /// One pass over a sharded queue: recount its running jobs from the
    /// in-progress records of `workers` (every registered worker), and re-check
    /// one page of its tenants and one step of a scan for tenant lists.
    pub(crate) async fn reconcile_shard(&self, queue: &str, workers: &[String]) -> Result<Healed> {
        let sk = self.keys.shard(queue);
        let tenants_at = format!("tenants:{queue}");
        let lists_at = format!("lists:{queue}");
        let (t_next, mut tenants): (u64, Vec<String>) = self
            .sscan(&sk.tenants, self.cursor(&tenants_at).await?, PASS_BATCH)
            .await?;
        // The queue's keys are all in its slot: the scan runs on that node.
        let (l_next, lists): (u64, Vec<String>) = self
            .query_on_slot_of(
                redis::cmd("SCAN")
                    .arg(self.cursor(&lists_at).await?)
                    .arg("MATCH")
                    .arg(format!("{}*", glob_escape(&sk.shard_prefix)))
                    .arg("COUNT")
                    .arg(PASS_BATCH),
                &sk.inbox,
            )
            .await?;
        tenants.extend(
            lists
                .iter()
                .filter_map(|k| k.strip_prefix(&sk.shard_prefix).map(str::to_owned)),
        );
        let tenants: BTreeSet<String> = tenants.into_iter().collect();
        let tenants: Vec<&String> = tenants.iter().collect();
        // The first call recounts the running jobs with the first tenants;
        // the others re-check at most RECHECK_CALL tenants each (each costs
        // a few commands and its settings).
        let mut chunks = tenants.chunks(RECHECK_CALL);
        let first = chunks.next().unwrap_or_default();
        let Some((counts, mut fixed)) =
            self.reconcile_shard_call(&sk, Some(workers), first).await?
        else {
            // Workers keep joining; the next pass counts.
            return Ok(Healed::default());
        };
        for chunk in chunks {
            if let Some((_, f)) = self.reconcile_shard_call(&sk, None, chunk).await? {
                fixed += f;
            }
        }
        self.set_cursor(&tenants_at, t_next).await?;
        self.set_cursor(&lists_at, l_next).await?;
        Ok(Healed {
            running_counts: counts,
            tenants: fixed,
            slot_holders: 0,
        })
    }

    /// One `shard_reconcile.lua` call re-checking `tenants`; with `workers`
    /// it first recounts the running jobs from the in-progress records of
    /// every worker that may hold a job of the queue. (running counts fixed,
    /// tenants fixed); `None` when workers kept joining (three tries).
    async fn reconcile_shard_call(
        &self,
        sk: &super::ShardKeys,
        workers: Option<&[String]>,
        tenants: &[&String],
    ) -> Result<Option<(u64, u64)>> {
        for _ in 0..3 {
            let mut inv = SHARD_RECONCILE.call();
            for k in sk.state() {
                inv.key(k);
            }
            inv.key(&sk.wake).key(&sk.fetchers).arg(&sk.shard_prefix);
            let fetchers: Vec<String>;
            match workers {
                // The registered workers (0.1 workers of a rolling upgrade
                // aren't listed as fetchers) and the queue's fetchers; the
                // script refuses when a fetcher joined since.
                Some(workers) => {
                    fetchers = self.query(redis::cmd("SMEMBERS").arg(&sk.fetchers)).await?;
                    let all: BTreeSet<&str> = workers
                        .iter()
                        .chain(&fetchers)
                        .map(String::as_str)
                        .collect();
                    inv.arg(all.len());
                    for w in &all {
                        inv.key(sk.inflight(w)).arg(*w);
                    }
                }
                None => {
                    inv.arg(-1);
                }
            }
            for t in tenants {
                inv.arg(*t);
            }
            let reply: (i64, u64) = self.invoke(&inv).await?;
            if reply.0 >= 0 {
                return Ok(Some((reply.0 as u64, reply.1)));
            }
        }
        Ok(None)
    }

    /// One page of slot keys: drops holders whose job is no longer in its
    /// worker's in-progress record, releasing waiters into the freed slots.
    /// `default_of` gives a key's declared limit (used while none is set at runtime).
    pub(crate) async fn reconcile_slots(
        &self,
        default_of: &(dyn Fn(&str) -> u32 + Sync),
    ) -> Result<Healed> {
        let k = &self.keys;
        let (next, members): (u64, Vec<String>) = self
            .sscan(
                &k.limits_registry(),
                self.cursor("slots").await?,
                PASS_BATCH,
            )
            .await?;
        let mut healed = Healed::default();
        for member in members {
            let Some(full) = super::keys::decode(&member) else {
                continue;
            };
            let lk = k.limit(&full);
            if self.is_cluster() {
                // Released waiters whose deliverer died: deliver them again.
                let mut inv = RECLAIM.call();
                inv.key(&lk.releasing)
                    .arg(PASS_BATCH)
                    .arg(RESERVATION_TTL.as_millis() as u64);
                let stale: Vec<Vec<u8>> = self.invoke(&inv).await?;
                self.deliver_released(&lk.releasing, stale).await?;
            }
            let holders: Vec<String> = self
                .query(redis::cmd("ZRANGE").arg(&lk.holders).arg(0).arg(999))
                .await?;
            // Each holder is `<identity>|<token>`; its job must be in that
            // worker's record (its own, or its record of a sharded queue).
            let mut checks = Vec::new();
            let mut pipe = redis::pipe();
            for h in &holders {
                let Some((identity, raw)) = h.split_once('|') else {
                    continue;
                };
                let Some(token) = Token::parse(raw) else {
                    continue;
                };
                pipe.hexists(self.inflight_of(identity, &token), &token.raw);
                checks.push(h);
            }
            if checks.is_empty() {
                continue;
            }
            let present: Vec<bool> = self.pipe(&pipe).await?;
            for (holder, present) in checks.into_iter().zip(present) {
                if present {
                    continue;
                }
                let mut inv = SLOT_FORGET.call();
                inv.key(&lk.limit)
                    .key(&lk.holders)
                    .key(&lk.reserved)
                    .key(&lk.waiters);
                let (qp, wp) = k.queue_and_wake_prefixes();
                inv.arg(holder)
                    .arg(default_of(&full))
                    .arg(RESERVATION_TTL.as_millis() as u64)
                    .arg(qp)
                    .arg(wp);
                let forgot = if self.is_cluster() {
                    inv.key(&lk.releasing).arg("c");
                    match self.invoke::<redis::Value>(&inv).await? {
                        redis::Value::Int(_) => false,
                        released => {
                            let released: Vec<Vec<u8>> = redis::from_redis_value(released)
                                .map_err(|e| crate::error::Error::from_redis(e.into()))?;
                            self.deliver_released(&lk.releasing, released).await?;
                            true
                        }
                    }
                } else {
                    self.invoke::<i64>(&inv).await? >= 0
                };
                if forgot {
                    healed.slot_holders += 1;
                }
            }
        }
        self.set_cursor("slots", next).await?;
        Ok(healed)
    }

    /// Identities of every registered worker.
    pub(crate) async fn worker_identities(&self) -> Result<Vec<String>> {
        self.query(redis::cmd("HKEYS").arg(self.keys.workers()))
            .await
    }
}
