//! Support for the long-jobs scenarios (`tests/tests/fair_yield.rs`, the
//! `long_jobs` benchmark): backlogs of [`ThronStepJob`]s and the slot-time
//! each tenant of a tenant-sharded queue gets, sampled from the scheduler's
//! own running counts.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use fairjob::{Client, Job};

use crate::Redis;
use crate::jobs::ThronStepJob;

/// Enqueues `n` [`ThronStepJob`]s of tenant `tenant`, `steps` steps of `ms`
/// ms each; returns their jids.
pub async fn thron_backlog(c: &Client, tenant: &str, n: usize, steps: u64, ms: u64) -> Vec<String> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let jid = ThronStepJob {
            tenant: tenant.into(),
            steps,
            ms,
        }
        .perform_async(c)
        .await
        .expect("push");
        out.push(jid);
    }
    out
}

/// Jobs of each tenant (as the shard keys encode it) running on sharded
/// queue `queue` now, from the scheduler's running counts.
pub async fn running_of(redis: &Redis, queue: &str, tenants: &[&str]) -> Vec<u32> {
    try_running_of(redis, queue, tenants)
        .await
        .expect("HMGET running")
}

async fn try_running_of(
    redis: &Redis,
    queue: &str,
    tenants: &[&str],
) -> redis::RedisResult<Vec<u32>> {
    let key = redis.keys().shard(queue).running;
    let mut cmd = redis::cmd("HMGET");
    cmd.arg(key);
    for t in tenants {
        cmd.arg(*t);
    }
    let v: Vec<Option<u32>> = cmd.query_async(&mut redis.conn()).await?;
    Ok(v.into_iter().map(|n| n.unwrap_or(0)).collect())
}

/// Slot-time (slot-seconds) of each tenant of `tenants` on sharded queue
/// `queue` over `window`: the scheduler's running count of each, sampled
/// every 50 ms and integrated over the time between samples.
pub async fn slot_time(
    redis: &Redis,
    queue: &str,
    tenants: &[&str],
    window: Duration,
) -> BTreeMap<String, f64> {
    let mut out: BTreeMap<String, f64> = tenants.iter().map(|t| ((*t).to_owned(), 0.0)).collect();
    let start = Instant::now();
    let mut last = start;
    let mut prev = running_of(redis, queue, tenants).await;
    while last < start + window {
        tokio::time::sleep(Duration::from_millis(50)).await;
        // A read that times out (a stalled machine) is skipped: the next
        // one covers its time.
        let Ok(cur) = try_running_of(redis, queue, tenants).await else {
            continue;
        };
        let now = Instant::now();
        let dt = now.duration_since(last).as_secs_f64();
        for (i, t) in tenants.iter().enumerate() {
            // Trapezoid: the count may have changed anywhere in between.
            *out.get_mut(*t).expect("tenant") += dt * f64::from(prev[i] + cur[i]) / 2.0;
        }
        prev = cur;
        last = now;
    }
    out
}

/// Steps each tenant's jobs ran so far, from the step ledger in `dir`
/// (`jobs`: tenant → its jids).
pub fn steps_of(
    dir: &std::path::Path,
    jobs: &BTreeMap<String, Vec<String>>,
) -> BTreeMap<String, usize> {
    let ledger = crate::step_ledger(dir);
    jobs.iter()
        .map(|(t, jids)| {
            let n = jids.iter().map(|j| ledger.get(j).map_or(0, Vec::len)).sum();
            (t.clone(), n)
        })
        .collect()
}
