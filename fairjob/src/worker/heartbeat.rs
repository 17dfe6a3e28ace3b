//! The heartbeat: renews this process's lease (fairjob's liveness) and writes
//! Sidekiq's process records (`processes`, the identity hash, the work hash) so
//! Sidekiq's API and Web UI list fairjob workers and their running jobs. It also
//! flushes the processed/failed counters, as Sidekiq does.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::{Shared, backoff_sleep};

/// At start-up: warn unless `maxmemory-policy` is `noeviction`.
pub(crate) async fn startup_checks(shared: &Shared) {
    let broker = shared.client.broker();
    match broker
        .query::<Vec<String>>(redis::cmd("CONFIG").arg("GET").arg("maxmemory-policy"))
        .await
    {
        Ok(v) => match v.get(1).map(String::as_str) {
            Some("noeviction") | None => {}
            Some(policy) => tracing::warn!(
                policy,
                "REDIS EVICTS KEYS: maxmemory-policy is `{policy}`, not `noeviction`; an evicting Redis silently \
                 deletes queues, leases and limits. Set `maxmemory-policy noeviction`."
            ),
        },
        Err(e) => tracing::warn!(
            error = %e,
            "cannot read maxmemory-policy (an ACL may forbid CONFIG); make sure it is `noeviction`"
        ),
    }
}

/// Registers this process (lease and worker record) before fetching.
pub(crate) async fn register(shared: &Shared) {
    let mut attempt = 0;
    loop {
        match try_register(shared).await {
            Ok(()) => return,
            Err(e @ crate::Error::OutOfMemory(_)) => {
                // Redis refuses new keys but still serves fetch and ack: start
                // draining now; the heartbeat registers once memory frees.
                tracing::error!(error = %e, "redis is out of memory: starting unregistered so the backlog drains");
                return;
            }
            Err(e) => {
                attempt += 1;
                shared.redis_trouble("register", &e);
                backoff_sleep(attempt).await;
            }
        }
    }
}

async fn try_register(shared: &Shared) -> crate::Result<()> {
    let broker = shared.client.broker();
    let keys = broker.keys();
    broker
        .renew_lease(&shared.identity, shared.config.lease)
        .await?;
    let info = json!({
        "queues": shared.queues.queues().collect::<Vec<_>>(),
        "sharded": shared.sharded,
        "started_at": shared.started_at,
    });
    let mut pipe = redis::pipe();
    pipe.hset(keys.workers(), &shared.identity, info.to_string())
        .ignore();
    if !shared.sharded.is_empty() {
        // Pushes to a sharded queue stay in its cluster slot and so don't add it
        // to Sidekiq's `queues` set; its workers do, for the Web UI.
        pipe.sadd(keys.sharded_queues(), &shared.sharded).ignore();
        pipe.sadd(keys.queues(), &shared.sharded).ignore();
    }
    broker.pipe::<()>(&pipe).await?;
    beat(shared).await.map(|_| ())
}

pub(crate) async fn run(shared: Arc<Shared>, stop: CancellationToken) {
    let interval = shared.config.heartbeat_interval();
    let mut failures = 0;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = stop.cancelled() => return,
        }
        match shared
            .client
            .broker()
            .renew_lease(&shared.identity, shared.config.lease)
            .await
        {
            Ok(true) => {
                tracing::warn!(
                    identity = %shared.identity,
                    "this worker's lease had expired (frozen or cut off from Redis): its running jobs may have been \
                     recovered and re-run elsewhere; their completions here will be fenced"
                );
                let _ = try_register(&shared).await;
                failures = 0;
            }
            Ok(false) => failures = 0,
            Err(e) => {
                failures += 1;
                shared.redis_trouble("heartbeat", &e);
                if failures > 1 {
                    backoff_sleep(failures).await;
                }
                continue;
            }
        }
        match beat(&shared).await {
            Ok(Some(signal)) => match signal.as_str() {
                "TSTP" => {
                    tracing::info!("TSTP from Sidekiq's API: quiet, no new jobs");
                    shared.control.quiet();
                }
                "TERM" => {
                    tracing::info!("TERM from Sidekiq's API: shutting down");
                    shared.control.stop();
                }
                other => tracing::info!(signal = other, "ignoring a remote signal"),
            },
            Ok(None) => {}
            Err(e) => shared.redis_trouble("heartbeat", &e),
        }
    }
}

/// Sidekiq's heartbeat: stats, work hash, process hash; returns a remote signal
/// (`<identity>-signals`, pushed by Sidekiq's API and Web UI), if one was waiting.
async fn beat(shared: &Shared) -> crate::Result<Option<String>> {
    let broker = shared.client.broker();
    let keys = broker.keys();
    let processed = shared.stats.processed.swap(0, Ordering::Relaxed);
    let failed = shared.stats.failed.swap(0, Ordering::Relaxed);
    let now = crate::payload::now_f64();
    let day = utc_day();
    let mut pipe = redis::pipe();
    if processed > 0 {
        pipe.incr(keys.stat_processed(None), processed).ignore();
        pipe.incr(keys.stat_processed(Some(&day)), processed)
            .ignore();
        pipe.expire(keys.stat_processed(Some(&day)), 157_680_000)
            .ignore();
    }
    if failed > 0 {
        pipe.incr(keys.stat_failed(None), failed).ignore();
        pipe.incr(keys.stat_failed(Some(&day)), failed).ignore();
        pipe.expire(keys.stat_failed(Some(&day)), 157_680_000)
            .ignore();
    }
    let running: Vec<(String, String)> = shared
        .running
        .lock()
        .expect("running lock")
        .values()
        .map(|cx| {
            let work = json!({
                "queue": cx.queue(),
                "payload": cx.payload().to_json(),
                "run_at": cx.inner.started.elapsed().as_secs_f64().mul_add(-1.0, now) as i64,
            });
            (cx.token().raw.clone(), work.to_string())
        })
        .collect();
    for work_key in keys.process_work(&shared.identity) {
        pipe.del(&work_key).ignore();
        if !running.is_empty() {
            pipe.hset_multiple(&work_key, &running).ignore();
            pipe.expire(&work_key, 60).ignore();
        }
    }
    let info = json!({
        "hostname": gethostname::gethostname().to_string_lossy(),
        "started_at": shared.started_at,
        "pid": std::process::id(),
        "tag": shared.config.tag,
        "concurrency": shared.config.concurrency,
        "queues": shared.queues.queues().collect::<Vec<_>>(),
        "weights": shared.queues.tiers().iter().map(|t| t.iter().map(|(q, w)| (q.clone(), serde_json::Value::from((*w).max(1)))).collect::<serde_json::Map<String, serde_json::Value>>()).collect::<Vec<_>>(),
        "labels": shared.config.labels,
        "identity": shared.identity,
        "version": concat!("fairjob ", env!("CARGO_PKG_VERSION")),
        "embedded": false,
    });
    let quiet = shared.control.is_quiet();
    pipe.sadd(keys.processes(), &shared.identity).ignore();
    pipe.hset_multiple(
        keys.process(&shared.identity),
        &[
            ("info", info.to_string()),
            ("busy", running.len().to_string()),
            ("beat", format!("{now:.6}")),
            ("quiet", quiet.to_string()),
            ("rss", rss_kb().to_string()),
            ("rtt_us", "0".to_owned()),
        ],
    )
    .ignore();
    pipe.expire(keys.process(&shared.identity), 60).ignore();
    pipe.rpop(keys.process_signals(&shared.identity), None);
    let result = broker
        .pipe::<(Option<String>,)>(&pipe)
        .await
        .map(|(signal,)| signal);
    if result.is_err() {
        shared
            .stats
            .processed
            .fetch_add(processed, Ordering::Relaxed);
        shared.stats.failed.fetch_add(failed, Ordering::Relaxed);
    }
    result
}

/// On clean exit: flush stats, leave `processes`, drop the lease and records.
pub(crate) async fn unregister(shared: &Shared) {
    let broker = shared.client.broker();
    let keys = broker.keys();
    let _ = beat(shared).await;
    let mut pipe = redis::pipe();
    pipe.srem(keys.processes(), &shared.identity).ignore();
    for k in keys.process_work(&shared.identity) {
        pipe.del(k).ignore();
    }
    let _ = broker.pipe::<()>(&pipe).await;
    // Keep the lease and worker record while jobs are still recorded in progress
    // (they are recovered after the lease expires); otherwise remove them.
    let left = broker.in_progress(&shared.identity).await.unwrap_or(1);
    if left == 0 {
        let mut pipe = redis::pipe();
        pipe.del(keys.lease(&shared.identity)).ignore();
        pipe.hdel(keys.workers(), &shared.identity).ignore();
        let _ = broker.pipe::<()>(&pipe).await;
    }
}

/// Resident set size in KB (Linux), 0 elsewhere.
pub fn rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<u64>().ok())
        })
        .map(|pages| pages * 4)
        .unwrap_or(0)
}

fn utc_day() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs() as i64;
    let days = secs.div_euclid(86_400);
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!("{y:04}-{m:02}-{d:02}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn utc_day_is_a_date() {
        let d = super::utc_day();
        assert_eq!(d.len(), 10);
        assert!(d.starts_with("20"));
    }
}
