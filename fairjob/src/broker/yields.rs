//! Fair yield on tenant-sharded queues, the Redis side: a worker's tick
//! (`shard_yield.lua`: record its running iterable jobs, read the requests
//! for them, and, for the one worker that takes the decision lock, a
//! snapshot for `policy::share::decide`), the requests (`shard_yield_ask.lua`),
//! the queue's fair-yield settings and the per-tenant counts for views.
//! Every key is in the queue's slot.

use std::time::Duration;

use super::RedisBroker;
use super::keys;
use super::scripts::{SHARD_YIELD, SHARD_YIELD_ASK};
use super::shards::Setting;
use crate::error::{Error, Result};

/// One running iterable job of this worker, for the tick.
#[derive(Debug, Clone, PartialEq)]
pub struct MyRun {
    /// Its jid.
    pub jid: String,
    /// Its tenant, encoded as its token holds it.
    pub tenant: String,
    /// When this run started (epoch seconds).
    pub started: f64,
}

/// A tenant of the decision snapshot (raw; see `policy::share::TenantLoad`).
#[derive(Debug, Clone, PartialEq)]
pub struct TenantRow {
    /// Encoded tenant.
    pub tenant: String,
    /// Running jobs.
    pub running: u32,
    /// Pending jobs.
    pub pending: u64,
    /// Weight.
    pub weight: f64,
    /// Floor.
    pub floor: u32,
    /// Cap.
    pub cap: Option<u32>,
    /// Burst.
    pub burst: Option<u32>,
    /// Seconds waiting in the dispatch order, if it is there.
    pub waited: Option<f64>,
    /// Its share hold in force (see `policy::share::share_holds`): the limit and
    /// the seconds it has left.
    pub hold: Option<(u32, f64)>,
}

/// A recorded run of the decision snapshot.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRow {
    /// Its jid.
    pub jid: String,
    /// Encoded tenant.
    pub tenant: String,
    /// Seconds since its run started.
    pub ran: f64,
    /// Seconds since it was asked, if it was.
    pub asked: Option<f64>,
    /// When its run started (epoch seconds, as recorded): names the run.
    pub started: String,
    /// Why it was asked (`share`, `floor`, `burst`), if it was.
    pub reason: Option<String>,
    /// Seconds since any run of the job was last asked, if one was within
    /// the cool-down.
    pub last_asked: Option<f64>,
}

/// A queue's fair-yield settings as stored (`None`: the default).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct StoredYield {
    /// Grace.
    pub grace: Option<Duration>,
    /// Minimum run.
    pub min_run: Option<Duration>,
    /// Cool-down.
    pub cooldown: Option<Duration>,
    /// Fair yield turned off.
    pub off: bool,
}

/// The decision snapshot (only for the worker that took the lock).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Snapshot {
    /// The queue's settings.
    pub settings: StoredYield,
    /// Tenants running or first in the dispatch order.
    pub tenants: Vec<TenantRow>,
    /// Recorded runs.
    pub runs: Vec<RunRow>,
    /// How long tenants seen waiting waited for the slots they got since
    /// the last deciding tick (seconds).
    pub slot_waits: Vec<f64>,
}

/// The reply of one tick.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Tick {
    /// This worker's jobs asked to yield.
    pub asked: Vec<String>,
    /// Requests to this worker's jobs found unhonoured after the cool-down now.
    pub ignored: u64,
    /// The snapshot, when this worker decides this tick.
    pub snapshot: Option<Snapshot>,
}

/// A request to yield that a running job has not honoured yet.
#[derive(Debug, Clone, PartialEq)]
pub struct YieldRequest {
    /// When it was asked, epoch seconds.
    pub asked_at: f64,
    /// Unhonoured past the cool-down (the job keeps running).
    pub ignored: bool,
    /// Why (`share`, `floor`, `burst`); `None` for a request recorded by an
    /// older fairjob.
    pub reason: Option<String>,
}

/// A change of a queue's fair-yield settings (queue-wide).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct YieldPolicy {
    /// Grace (default 1 s).
    pub grace: Setting<Duration>,
    /// Minimum run (default 1 s).
    pub min_run: Setting<Duration>,
    /// Cool-down (default 10 s).
    pub cooldown: Setting<Duration>,
    /// On (default) or off.
    pub enabled: Setting<bool>,
}

/// Per-tenant fair-yield counts (since the queue's counts were last reset).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct YieldCounts {
    /// Requests sent.
    pub requested: u64,
    /// Requests honoured (the job left its slot).
    pub honoured: u64,
    /// Requests unhonoured after the cool-down.
    pub ignored: u64,
}

fn num<T: std::str::FromStr>(s: &str) -> Option<T> {
    if s.is_empty() { None } else { s.parse().ok() }
}

fn ms(s: &str) -> Option<Duration> {
    num::<u64>(s).map(Duration::from_millis)
}

type TickReply = (
    Vec<String>,
    u64,
    u8,
    Vec<String>,
    Vec<String>,
    Vec<String>,
    Vec<String>,
);

impl RedisBroker {
    /// One fair-yield tick of this worker (`identity`) on a sharded queue:
    /// records `mine`, returns the requests for them, and the decision
    /// snapshot when this worker takes the decision lock for `lock`.
    pub async fn yield_tick(
        &self,
        queue: &str,
        identity: &str,
        mine: &[MyRun],
        lock: Duration,
        topk: usize,
        stale: Duration,
    ) -> Result<Tick> {
        let sk = self.keys.shard(queue);
        let mut inv = SHARD_YIELD.call();
        for k in sk.state() {
            inv.key(k);
        }
        inv.key(&sk.wake)
            .key(&sk.runs)
            .key(&sk.waits)
            .key(&sk.yields)
            .key(&sk.decide)
            .key(&sk.slot_waits);
        inv.arg(&sk.shard_prefix)
            .arg(keys::encode(identity))
            .arg(lock.as_millis().max(1) as u64)
            .arg(topk.max(1))
            .arg(stale.as_secs_f64());
        for r in mine {
            inv.arg(&r.jid).arg(&r.tenant).arg(r.started);
        }
        let (asked, ignored, decider, settings, tenants, runs, waits): TickReply =
            self.invoke(&inv).await?;
        let snapshot = (decider == 1).then(|| {
            let get = |i: usize| settings.get(i).map(String::as_str).unwrap_or("");
            Snapshot {
                settings: StoredYield {
                    grace: ms(get(0)),
                    min_run: ms(get(1)),
                    cooldown: ms(get(2)),
                    off: get(3) == "1",
                },
                tenants: tenants
                    .chunks_exact(10)
                    .map(|c| TenantRow {
                        tenant: c[0].clone(),
                        running: num(&c[1]).unwrap_or(0),
                        pending: num(&c[2]).unwrap_or(0),
                        weight: num(&c[3]).unwrap_or(1.0),
                        floor: num(&c[4]).unwrap_or(0),
                        cap: num(&c[5]),
                        burst: num(&c[6]),
                        waited: num(&c[7]),
                        hold: num(&c[8]).zip(num(&c[9])),
                    })
                    .collect(),
                runs: runs
                    .chunks_exact(7)
                    .map(|c| RunRow {
                        jid: c[0].clone(),
                        tenant: c[1].clone(),
                        ran: num(&c[2]).unwrap_or(0.0),
                        asked: num(&c[3]),
                        started: c[4].clone(),
                        reason: (!c[5].is_empty()).then(|| c[5].clone()),
                        last_asked: num(&c[6]),
                    })
                    .collect(),
                slot_waits: waits.iter().filter_map(|w| num(w)).collect(),
            }
        });
        Ok(Tick {
            asked,
            ignored,
            snapshot,
        })
    }

    /// Writes fair yield's decision on a sharded queue: share `holds`
    /// (encoded tenant, limit for `hold_ttl`, or `None` to lift it), then
    /// asks these runs (jid, run start as the snapshot gave it, reason) of
    /// running jobs to yield (those still running that run and not asked
    /// within `cooldown`); returns the jids marked.
    pub async fn yield_ask(
        &self,
        queue: &str,
        cooldown: Duration,
        hold_ttl: Duration,
        holds: &[(&str, Option<u32>)],
        runs: &[(&str, &str, &str)],
    ) -> Result<Vec<String>> {
        if runs.is_empty() && holds.is_empty() {
            return Ok(Vec::new());
        }
        let sk = self.keys.shard(queue);
        let mut inv = SHARD_YIELD_ASK.call();
        inv.key(&sk.runs)
            .key(&sk.yields)
            .key(&sk.policy)
            .arg(cooldown.as_secs_f64())
            .arg(hold_ttl.as_micros() as u64)
            .arg(holds.len());
        for (tenant, limit) in holds {
            inv.arg(*tenant)
                .arg(limit.map(|l| l.to_string()).unwrap_or_default());
        }
        for (jid, started, reason) in runs {
            inv.arg(*jid).arg(*started).arg(*reason);
        }
        self.invoke(&inv).await
    }

    /// Changes a sharded queue's fair-yield settings.
    pub async fn set_yield_policy(&self, queue: &str, policy: YieldPolicy) -> Result<()> {
        self.keys.check_shardable(queue).map_err(Error::Config)?;
        let sk = self.keys.shard(queue);
        let mut pipe = redis::pipe();
        let mut any = false;
        let mut set = |field: &str, v: Setting<String>| match v {
            Setting::Keep => {}
            Setting::Clear => {
                pipe.hdel(&sk.policy, field).ignore();
                any = true;
            }
            Setting::Set(v) => {
                pipe.hset(&sk.policy, field, v).ignore();
                any = true;
            }
        };
        let d = |s: Setting<Duration>| match s {
            Setting::Keep => Setting::Keep,
            Setting::Clear => Setting::Clear,
            Setting::Set(d) => Setting::Set(d.as_millis().to_string()),
        };
        set("y:grace", d(policy.grace));
        set("y:minrun", d(policy.min_run));
        set("y:cooldown", d(policy.cooldown));
        set(
            "y:off",
            match policy.enabled {
                Setting::Keep => Setting::Keep,
                Setting::Set(false) => Setting::Set("1".to_owned()),
                Setting::Clear | Setting::Set(true) => Setting::Clear,
            },
        );
        if !any {
            return Ok(());
        }
        let _: () = self.pipe(&pipe).await?;
        Ok(())
    }

    /// A sharded queue's fair-yield settings as stored.
    pub async fn yield_policy(&self, queue: &str) -> Result<StoredYield> {
        let sk = self.keys.shard(queue);
        let v: Vec<Option<String>> = self
            .query(
                redis::cmd("HMGET")
                    .arg(&sk.policy)
                    .arg("y:grace")
                    .arg("y:minrun")
                    .arg("y:cooldown")
                    .arg("y:off"),
            )
            .await?;
        let get = |i: usize| v.get(i).cloned().flatten().unwrap_or_default();
        Ok(StoredYield {
            grace: ms(&get(0)),
            min_run: ms(&get(1)),
            cooldown: ms(&get(2)),
            off: get(3) == "1",
        })
    }

    /// The fair-yield request of a running job of a sharded queue, if it
    /// was asked and has not yielded yet.
    pub async fn yield_request(&self, queue: &str, jid: &str) -> Result<Option<YieldRequest>> {
        let sk = self.keys.shard(queue);
        let v: Option<String> = self
            .query(redis::cmd("HGET").arg(&sk.runs).arg(jid))
            .await?;
        Ok(v.and_then(|v| {
            let parts: Vec<&str> = v.split('|').collect();
            let asked: f64 = parts.get(3)?.parse().ok()?;
            (asked > 0.0).then(|| YieldRequest {
                asked_at: asked,
                ignored: parts.get(4) == Some(&"1"),
                reason: parts
                    .get(6)
                    .filter(|r| !r.is_empty())
                    .map(|r| (*r).to_owned()),
            })
        }))
    }

    /// Fair-yield counts of the given encoded tenants of a sharded queue.
    pub async fn yield_counts(&self, queue: &str, encoded: &[String]) -> Result<Vec<YieldCounts>> {
        if encoded.is_empty() {
            return Ok(Vec::new());
        }
        let sk = self.keys.shard(queue);
        let mut cmd = redis::cmd("HMGET");
        cmd.arg(&sk.yields);
        for t in encoded {
            cmd.arg(format!("r:{t}"))
                .arg(format!("h:{t}"))
                .arg(format!("i:{t}"));
        }
        let v: Vec<Option<u64>> = self.query(&cmd).await?;
        Ok(v.chunks_exact(3)
            .map(|c| YieldCounts {
                requested: c[0].unwrap_or(0),
                honoured: c[1].unwrap_or(0),
                ignored: c[2].unwrap_or(0),
            })
            .collect())
    }
}
