//! A sharded queue's tenants in fair-share terms: the defaults, the tenants
//! served next, and per tenant pending, running, weight, floor, cap, rate, burst, pass,
//! place in the dispatch order and the jobs dispatched over the last minutes.

use std::collections::HashMap;

use serde::Serialize;

use super::{MAX_READ_ROWS, Page};
use crate::broker::fetch::epoch_minute;
use crate::broker::{RedisBroker, ShardRate, keys};
use crate::error::Result;

/// Minutes of dispatch counts a view sums.
pub const SHARE_MINUTES: u64 = 5;

/// One page of a sharded queue's tenants.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ShardView {
    /// The queue.
    pub queue: String,
    /// Tenants with pending or running jobs.
    pub tenants: u64,
    /// Runnable tenants (pending work, under their cap).
    pub runnable: u64,
    /// The default weight, if set (otherwise 1).
    pub default_weight: Option<f64>,
    /// The default floor, if set (otherwise 0).
    pub default_floor: Option<u32>,
    /// The default cap (running limit), if set.
    pub default_limit: Option<u32>,
    /// The default burst, if set.
    pub default_burst: Option<u32>,
    /// The default rate (starts per period), if set.
    pub default_rate: Option<ShardRate>,
    /// Tenants out of the order, waiting for their rate.
    pub rate_waiting: u64,
    /// Redis's clock at the read (µs).
    pub now_us: u64,
    /// The queue's virtual time (the pass of the last tenant served in share order).
    pub virtual_time: f64,
    /// Jobs in the inbox, not yet sorted into shards.
    pub inbox: u64,
    /// The tenants served next, in order (at most 10).
    pub next_up: Vec<Option<String>>,
    /// Jobs dispatched from the queue over the last [`SHARE_MINUTES`] minutes.
    pub dispatched: u64,
    /// This page's rows.
    pub rows: Vec<ShardRow>,
    /// The cursor of the next page, or `None` after the last.
    pub next: Option<u64>,
}

/// One tenant of a sharded queue.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ShardRow {
    /// The tenant (`None` for the shared shard of jobs without one).
    pub tenant: Option<String>,
    /// Jobs waiting in its list.
    pub pending: u64,
    /// Jobs running.
    pub running: u64,
    /// Its own weight, if set.
    pub weight: Option<f64>,
    /// Its own floor, if set.
    pub floor: Option<u32>,
    /// Its own cap (running limit), if set.
    pub limit: Option<u32>,
    /// Its own rate (starts per period), if set.
    pub rate: Option<ShardRate>,
    /// While it waits for its rate (out of the order, its pass kept): when
    /// its rate next allows a start (µs, Redis's clock).
    pub rate_wait_until: Option<u64>,
    /// Its pass, while it is in the dispatch order (or remembered, ahead of
    /// the virtual time).
    pub pass: Option<f64>,
    /// 1-based position in the dispatch order by pass, if runnable.
    pub rotation: Option<u64>,
    /// Whether it is under its floor (served before share order).
    pub under_floor: bool,
    /// Jobs dispatched over the last [`SHARE_MINUTES`] minutes.
    pub dispatched: u64,
    /// Its own burst, if set.
    pub burst: Option<u32>,
    /// Fair-yield requests sent to its running jobs.
    pub yields_requested: u64,
    /// Of those, honoured (the job left its slot).
    pub yields_honoured: u64,
    /// Of those, unhonoured past the cool-down (the job kept running).
    pub yields_ignored: u64,
}

/// A tenant as its shard key encodes it (`None`: the shard of jobs without one).
pub fn tenant_name(encoded: &str) -> Option<String> {
    (!encoded.is_empty()).then(|| keys::decode(encoded).unwrap_or_else(|| encoded.to_owned()))
}

impl RedisBroker {
    /// One page of a sharded queue's tenants (a step of `SSCAN` over its tenant set).
    pub async fn shard_view(&self, queue: &str, page: Page) -> Result<ShardView> {
        let sk = self.keys.shard(queue);
        let minute = epoch_minute();
        let buckets: Vec<String> = (0..SHARE_MINUTES)
            .map(|m| sk.served(minute.saturating_sub(m)))
            .collect();
        let mut pipe = redis::pipe();
        pipe.scard(&sk.tenants)
            .zcount(&sk.ready, "-inf", "(+inf")
            .hget(&sk.policy, "w:*")
            .hget(&sk.policy, "f:*")
            .hget(&sk.policy, "c:*")
            .hget(&sk.policy, "b:*")
            .get(&sk.vt)
            .llen(&sk.inbox)
            .zrange(&sk.floorq, 0, 9)
            .zrange(&sk.ready, 0, 9)
            .hget(&sk.policy, "r:*")
            .zcard(&sk.rwait)
            .cmd("TIME");
        for b in &buckets {
            pipe.hget(b, "*");
        }
        pipe.cmd("SSCAN")
            .arg(&sk.tenants)
            .arg(page.cursor)
            .arg("COUNT")
            .arg(page.count.clamp(1, MAX_READ_ROWS));
        type Head = (
            u64,
            u64,
            Option<f64>,
            Option<u32>,
            Option<u32>,
            Option<u32>,
            Option<f64>,
            u64,
            Vec<String>,
            Vec<String>,
        );
        type Rates = (Option<String>, u64, (u64, u64));
        let values: Vec<redis::Value> = self.pipe(&pipe).await?;
        let n_head = 10;
        let (head, rest) = values.split_at(n_head);
        let (rates, rest) = rest.split_at(3);
        let (dr, rate_waiting, (secs, micros)): Rates =
            redis::FromRedisValue::from_redis_value(redis::Value::Array(rates.to_vec()))
                .map_err(redis::RedisError::from)?;
        let (served, scan) = rest.split_at(buckets.len());
        let head: Head =
            redis::FromRedisValue::from_redis_value(redis::Value::Array(head.to_vec()))
                .map_err(redis::RedisError::from)?;
        let (tenants, runnable, dw, df, dc, db, vt, inbox, floor_next, share_next) = head;
        let dispatched: u64 = served
            .iter()
            .map(|v| {
                redis::FromRedisValue::from_redis_value_ref(v)
                    .ok()
                    .flatten()
                    .unwrap_or(0u64)
            })
            .sum();
        let (next, mut batch): (u64, Vec<String>) =
            redis::FromRedisValue::from_redis_value_ref(&scan[0])
                .map_err(redis::RedisError::from)?;
        batch.sort();
        batch.dedup();
        let mut next_up: Vec<Option<String>> = Vec::new();
        for m in floor_next
            .iter()
            .chain(&share_next)
            .filter(|m| m.as_str() != crate::policy::dispatch::state::READY_MARK)
        {
            let t = tenant_name(m.get(15..).unwrap_or_default());
            if !next_up.contains(&t) && next_up.len() < 10 {
                next_up.push(t);
            }
        }
        let rows = self.tenant_rows(&sk, &batch, &buckets).await?;
        Ok(ShardView {
            queue: queue.to_owned(),
            tenants,
            runnable,
            default_weight: dw,
            default_floor: df,
            default_limit: dc,
            default_burst: db,
            default_rate: dr.as_deref().and_then(ShardRate::from_stored),
            rate_waiting,
            now_us: secs * 1_000_000 + micros,
            virtual_time: vt.unwrap_or(0.0),
            inbox,
            next_up,
            dispatched,
            rows,
            next: (next != 0).then_some(next),
        })
    }

    /// The rows of the given tenants (encoded, as the tenant set holds them)
    /// of a sharded queue: the one place that reads the per-tenant settings,
    /// for [`RedisBroker::shard_view`] and [`RedisBroker::shard_tenants`].
    async fn tenant_rows(
        &self,
        sk: &crate::broker::ShardKeys,
        batch: &[String],
        buckets: &[String],
    ) -> Result<Vec<ShardRow>> {
        let mut rows = Vec::with_capacity(batch.len());
        if !batch.is_empty() {
            let mut pipe = redis::pipe();
            for t in batch {
                pipe.llen(sk.tenant_list(None) + t)
                    .hget(&sk.running, t)
                    .hget(&sk.policy, format!("w:{t}"))
                    .hget(&sk.policy, format!("f:{t}"))
                    .hget(&sk.policy, format!("c:{t}"))
                    .hget(&sk.rmember, t)
                    .zscore(&sk.lastpass, t)
                    .hget(&sk.policy, format!("r:{t}"))
                    .zscore(&sk.rwait, t)
                    .hget(&sk.rstate, format!("p:{t}"))
                    .hget(&sk.policy, format!("b:{t}"))
                    .hget(&sk.yields, format!("r:{t}"))
                    .hget(&sk.yields, format!("h:{t}"))
                    .hget(&sk.yields, format!("i:{t}"));
                for b in buckets {
                    pipe.hget(b, t);
                }
            }
            let per = 14 + buckets.len();
            let found: Vec<redis::Value> = self.pipe(&pipe).await?;
            let mut members = Vec::new();
            for (t, v) in batch.iter().zip(found.chunks(per)) {
                type Row = (
                    u64,
                    Option<u64>,
                    Option<f64>,
                    Option<u32>,
                    Option<u32>,
                    Option<String>,
                    Option<f64>,
                    Option<String>,
                    Option<f64>,
                    Option<f64>,
                );
                let (pending, running, weight, floor, limit, member, last, rate, until, kept): Row =
                    redis::FromRedisValue::from_redis_value(redis::Value::Array(v[..10].to_vec()))
                        .map_err(redis::RedisError::from)?;
                type Yields = (Option<u32>, Option<u64>, Option<u64>, Option<u64>);
                let (burst, requested, honoured, ignored): Yields =
                    redis::FromRedisValue::from_redis_value(redis::Value::Array(
                        v[10..14].to_vec(),
                    ))
                    .map_err(redis::RedisError::from)?;
                let dispatched = v[14..]
                    .iter()
                    .map(|x| {
                        redis::FromRedisValue::from_redis_value_ref(x)
                            .ok()
                            .flatten()
                            .unwrap_or(0u64)
                    })
                    .sum();
                members.push(member);
                rows.push(ShardRow {
                    tenant: tenant_name(t),
                    pending,
                    running: running.unwrap_or(0),
                    weight,
                    floor,
                    limit,
                    rate: rate.as_deref().and_then(ShardRate::from_stored),
                    rate_wait_until: until.map(|u| u.max(0.0) as u64),
                    pass: kept.or(last),
                    rotation: None,
                    under_floor: false,
                    dispatched,
                    burst,
                    yields_requested: requested.unwrap_or(0),
                    yields_honoured: honoured.unwrap_or(0),
                    yields_ignored: ignored.unwrap_or(0),
                });
            }
            // Place in the order: the pass and rank of each runnable tenant.
            let mut pipe = redis::pipe();
            for m in members.iter().flatten() {
                pipe.zscore(&sk.ready, m)
                    .zrank(&sk.ready, m)
                    .zscore(&sk.floorq, m);
            }
            let places: Vec<(Option<f64>, Option<u64>, Option<f64>)> =
                if members.iter().any(Option::is_some) {
                    self.pipe(&pipe).await?
                } else {
                    Vec::new()
                };
            let mut places = places.into_iter();
            for (row, m) in rows.iter_mut().zip(&members) {
                if m.is_some()
                    && let Some((pass, rank, under)) = places.next()
                {
                    row.pass = pass.or(row.pass);
                    row.rotation = rank.map(|r| r + 1);
                    row.under_floor = under.is_some();
                }
            }
        }
        Ok(rows)
    }

    /// The given tenants of a sharded queue, with the queue's defaults
    /// (`rows` in the order asked; `None` is the shared shard of jobs without
    /// a tenant). A tenant the queue does not know has zero counts.
    pub async fn shard_tenants(&self, queue: &str, tenants: &[Option<&str>]) -> Result<ShardView> {
        let mut view = self
            .shard_view(
                queue,
                Page {
                    cursor: 0,
                    count: 0,
                },
            )
            .await?;
        let sk = self.keys.shard(queue);
        let minute = epoch_minute();
        let buckets: Vec<String> = (0..SHARE_MINUTES)
            .map(|m| sk.served(minute.saturating_sub(m)))
            .collect();
        let batch: Vec<String> = tenants
            .iter()
            .map(|t| t.map(keys::encode).unwrap_or_default())
            .collect();
        view.rows = self.tenant_rows(&sk, &batch, &buckets).await?;
        view.next = None;
        Ok(view)
    }

    /// The oldest job of each given tenant's list of a sharded queue
    /// (`LINDEX -1`; tenants as the tenant set holds them, encoded), in one
    /// pipeline.
    pub async fn shard_heads(
        &self,
        queue: &str,
        encoded: &[String],
    ) -> Result<Vec<Option<Vec<u8>>>> {
        if encoded.is_empty() {
            return Ok(Vec::new());
        }
        let sk = self.keys.shard(queue);
        let mut pipe = redis::pipe();
        for t in encoded {
            pipe.lindex(format!("{}{}", sk.shard_prefix, t), -1);
        }
        self.pipe(&pipe).await
    }

    /// A sharded queue's running count per tenant (encoded), for tenants
    /// with running jobs (one `HGETALL`).
    pub async fn shard_running(&self, queue: &str) -> Result<HashMap<String, u64>> {
        let mut all: HashMap<String, u64> = self
            .query(redis::cmd("HGETALL").arg(&self.keys.shard(queue).running))
            .await?;
        all.remove(crate::policy::dispatch::state::RUNNING_MARK);
        Ok(all)
    }

    /// One `SSCAN` step of a sharded queue's tenant set with each tenant's
    /// pending jobs (`LLEN` of its list): the next cursor (0 at the end) and
    /// `(tenant encoded, pending)`.
    pub async fn shard_pending_step(
        &self,
        queue: &str,
        cursor: u64,
        count: usize,
    ) -> Result<(u64, Vec<(String, u64)>)> {
        let sk = self.keys.shard(queue);
        let (next, batch) = self
            .sscan(&sk.tenants, cursor, count.clamp(1, MAX_READ_ROWS))
            .await?;
        if batch.is_empty() {
            return Ok((next, Vec::new()));
        }
        let mut pipe = redis::pipe();
        for t in &batch {
            pipe.llen(format!("{}{}", sk.shard_prefix, t));
        }
        let lens: Vec<u64> = self.pipe(&pipe).await?;
        Ok((next, batch.into_iter().zip(lens).collect()))
    }

    /// A sharded queue's tenants waiting for their rate (`ZCARD`).
    pub async fn shard_rate_waiting(&self, queue: &str) -> Result<u64> {
        self.query(redis::cmd("ZCARD").arg(&self.keys.shard(queue).rwait))
            .await
    }

    /// A sharded queue's tenant count (`SCARD`).
    pub async fn shard_tenant_count(&self, queue: &str) -> Result<u64> {
        self.query(redis::cmd("SCARD").arg(&self.keys.shard(queue).tenants))
            .await
    }
}
