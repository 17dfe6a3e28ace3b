//! The heartbeat: renews this process's lease (fairjob's liveness) and writes
//! Sidekiq's process records (`processes`, the identity hash, the work hash) so
//! Sidekiq's API and Web UI list fairjob workers and their running jobs, with
//! the RSS and a measured PING round trip as Sidekiq reports them. It also
//! flushes the processed/failed counters, as Sidekiq does, and picks up
//! Sidekiq's remote signals (quiet, stop).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::exit::{self, Exit};
use super::{Shared, backoff_sleep};
use std::collections::HashSet;

use crate::broker::{Beat, FinishReply, SlotHold, Token};
use crate::wire::now_f64;

/// At start-up: warn unless `maxmemory-policy` is `noeviction`.
pub(crate) async fn startup_checks(shared: &Shared) {
    match shared.client.broker().maxmemory_policy().await {
        Ok(Some(policy)) if policy != "noeviction" => tracing::warn!(
            policy,
            "REDIS EVICTS KEYS: maxmemory-policy is `{policy}`, not `noeviction`; an evicting Redis silently \
             deletes queues, leases and limits. Set `maxmemory-policy noeviction`."
        ),
        Ok(_) => {}
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
            Ok(()) => {
                renewed(shared);
                return;
            }
            Err(e @ crate::Error::OutOfMemory(_)) => {
                // Redis refuses new keys but still serves fetch and ack: start
                // draining now; the heartbeat registers once memory frees.
                tracing::error!(error = %e, "redis is out of memory: starting unregistered so the backlog drains");
                return;
            }
            Err(e) => {
                attempt += 1;
                shared.control.stalls().failed(Instant::now(), &e);
                shared.redis_trouble("register", &e);
                backoff_sleep(attempt).await;
            }
        }
    }
}

async fn try_register(shared: &Shared) -> crate::Result<()> {
    let broker = shared.client.broker();
    broker
        .renew_lease(&shared.identity, shared.config.lease)
        .await?;
    broker.data_marker_missing().await?;
    let info = json!({
        "queues": shared.queues.queues().collect::<Vec<_>>(),
        "sharded": shared.sharded,
        "started_at": shared.started_at,
    });
    broker
        .register_worker(&shared.identity, &info.to_string(), &shared.sharded)
        .await?;
    // What the dashboard and the CLI need to explain these classes.
    broker
        .publish_classes(&shared.registry.class_infos())
        .await?;
    beat(shared).await.map(|_| ())
}

/// Whether Redis lost its data (the marker every worker writes at start is
/// gone; writes it again): then says so once, at `warn`, and remembers the
/// jobs this process holds, whose completions will be fenced (their fencing
/// is logged at `debug`). Called when the lease had lapsed or a completion was
/// fenced; only the first caller after a loss finds the marker missing.
pub(crate) async fn redis_lost_data(shared: &Shared) -> bool {
    match shared.client.broker().data_marker_missing().await {
        Ok(true) => {
            let held: HashSet<String> = shared.held.lock().expect("held lock").clone();
            tracing::warn!(
                identity = %shared.identity,
                running = held.len(),
                "Redis lost its data (restarted without persistence, flushed, or failed over to a replica \
                 without it): the jobs this worker was running are gone from Redis and their completions will \
                 be fenced; jobs enqueued through fairjob-postgres are published again by its pump, other lost \
                 jobs must be enqueued again"
            );
            shared
                .lost_with_redis
                .lock()
                .expect("lost lock")
                .extend(held);
            true
        }
        Ok(false) => false,
        Err(e) => {
            shared.redis_trouble("data marker", &e);
            false
        }
    }
}

pub(crate) async fn run(shared: Arc<Shared>, stop: CancellationToken) {
    let interval = shared.config.heartbeat_interval();
    let mut suspects = HashSet::new();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = stop.cancelled() => return,
        }
        busy(&shared);
        match shared
            .client
            .broker()
            .renew_lease(&shared.identity, shared.config.lease)
            .await
        {
            Ok(true) => {
                if !redis_lost_data(&shared).await {
                    tracing::warn!(
                        identity = %shared.identity,
                        "this worker's lease had expired (frozen or cut off from Redis): its running jobs may have been \
                         recovered and re-run elsewhere; their completions here will be fenced"
                    );
                }
                renewed(&shared);
                let _ = try_register(&shared).await;
            }
            Ok(false) => renewed(&shared),
            Err(e) => {
                shared.control.stalls().failed(Instant::now(), &e);
                shared.redis_trouble("heartbeat", &e);
                // No longer pause than the interval: once Redis takes writes
                // again, every live worker renews within one interval, well
                // inside the lease its peers wait before recovering (`stall.rs`).
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
        match orphans(&shared, &mut suspects).await {
            Ok(0) => {}
            Ok(n) => tracing::warn!(
                jobs = n,
                "requeued jobs this worker's in-progress records still held after they were done \
                 (Redis lost the writes that ended them): they run again"
            ),
            Err(e) => shared.redis_trouble("heartbeat", &e),
        }
    }
}

/// The lease was renewed: ends a stall, logged once (what Redis said first,
/// how long renewals failed).
fn renewed(shared: &Shared) {
    let ended = shared.control.stalls().succeeded(Instant::now());
    if let Some(ended) = ended {
        tracing::warn!(
            said = %ended.said,
            lasted = ?ended.lasted,
            hold_off = ?shared.config.lease,
            "redis refused this worker's lease renewals for {:?}; it recovers no other worker's jobs for one lease",
            ended.lasted
        );
    }
}

/// Sets `fairjob_busy{process}`: the jobs this process is performing.
pub(crate) fn busy(shared: &Shared) {
    let running = shared.running.lock().expect("running lock").len();
    ::metrics::gauge!(crate::metrics::BUSY, "process" => shared.identity.clone())
        .set(running as f64);
}

/// Tokens in this worker's own in-progress records that it is not working on
/// (their end was written, then lost when Redis lost its last writes): seen on
/// two beats in a row, each goes back to the front of its queue, releasing its
/// tenant's count and its slot, as a dead worker's job does.
async fn orphans(shared: &Shared, suspects: &mut HashSet<String>) -> crate::Result<usize> {
    let broker = shared.client.broker();
    let tokens = broker.inflight_tokens(&shared.identity).await?;
    let held = shared.held.lock().expect("held lock").clone();
    let now: HashSet<String> = tokens.into_iter().filter(|t| !held.contains(t)).collect();
    let confirmed: Vec<String> = now.intersection(suspects).cloned().collect();
    *suspects = now;
    if confirmed.is_empty() {
        return Ok(0);
    }
    let slots = broker.slot_records(&shared.identity).await?;
    let mut requeued = 0;
    for raw in confirmed {
        suspects.remove(&raw);
        let Some(token) = Token::parse(&raw) else {
            continue;
        };
        let Some(payload) = broker.inflight_payload(&shared.identity, &token).await? else {
            continue;
        };
        let payload = String::from_utf8_lossy(&payload).into_owned();
        let slot = slots
            .get(&token.raw)
            .and_then(|v| SlotHold::from_record(&shared.identity, &token.raw, v));
        let holds = crate::broker::Holds {
            slot: slot.as_ref(),
            ..Default::default()
        };
        let done = exit::write(shared, &token, &Exit::Front(payload), holds).await?;
        if done == FinishReply::Done {
            requeued += 1;
        }
    }
    Ok(requeued)
}

/// Sidekiq's heartbeat; returns a remote signal, if one was waiting.
async fn beat(shared: &Shared) -> crate::Result<Option<String>> {
    let broker = shared.client.broker();
    let rtt = broker.ping().await?;
    let processed = shared.stats.processed.swap(0, Ordering::Relaxed);
    let failed = shared.stats.failed.swap(0, Ordering::Relaxed);
    let now = now_f64();
    let work: Vec<(String, String)> = shared
        .running
        .lock()
        .expect("running lock")
        .values()
        .map(|r| {
            let cx = &r.cx;
            let work = json!({
                "queue": cx.queue(),
                "payload": cx.payload().to_json(),
                "run_at": (now - cx.elapsed().as_secs_f64()) as i64,
            });
            (cx.token().raw.clone(), work.to_string())
        })
        .collect();
    let info = json!({
        "hostname": gethostname::gethostname().to_string_lossy(),
        "started_at": shared.started_at,
        "pid": std::process::id(),
        "tag": shared.config.tag,
        "concurrency": shared.config.concurrency,
        "queues": shared.queues.queues().collect::<Vec<_>>(),
        "weights": shared.queues.tiers().iter().map(|t| t.iter().map(|(q, w)| (q.clone(), serde_json::Value::from((*w).max(1)))).collect::<serde_json::Map<String, serde_json::Value>>()).collect::<Vec<_>>(),
        "fairjob_tiers": shared.queues.tiers(),
        "labels": shared.config.labels,
        "identity": shared.identity,
        "version": concat!("fairjob ", env!("CARGO_PKG_VERSION")),
        "embedded": false,
    });
    let stats = shared
        .waits
        .lock()
        .expect("waits lock")
        .take(crate::broker::fetch::epoch_minute());
    let record = Beat {
        processed,
        failed,
        day: crate::wire::utc_day(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or(Duration::ZERO)
                .as_secs() as i64,
        ),
        info: info.to_string(),
        work,
        now,
        quiet: shared.control.is_quiet(),
        rss_kb: rss_kb(),
        rtt_us: rtt.as_micros() as u64,
        stats,
    };
    let result = broker.beat(&shared.identity, &record).await;
    if result.is_err() {
        shared
            .waits
            .lock()
            .expect("waits lock")
            .restore(record.stats);
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
    let _ = beat(shared).await;
    let _ = broker.leave_processes(&shared.identity).await;
    // Keep the lease and worker record while jobs are still recorded in progress
    // (they are recovered after the lease expires); otherwise remove them.
    if broker.in_progress(&shared.identity).await.unwrap_or(1) == 0 {
        let _ = broker.forget_worker(&shared.identity, true).await;
    }
}

/// Resident set size in KB, as the kernel reports it (`VmRSS`; Linux), 0 elsewhere.
pub fn rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| vm_rss_kb(&s))
        .unwrap_or(0)
}

fn vm_rss_kb(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_day_is_the_calendar_date() {
        for (secs, day) in [
            (0, "1970-01-01"),
            (951_782_400, "2000-02-29"),
            (951_868_799, "2000-02-29"),
            (1_795_310_393, "2026-11-22"),
            (4_102_444_799, "2099-12-31"),
            (4_102_444_800, "2100-01-01"),
            (-1, "1969-12-31"),
        ] {
            assert_eq!(crate::wire::utc_day(secs), day, "{secs}");
        }
    }

    #[test]
    fn rss_comes_from_vm_rss_in_kb() {
        let status = "Name:\tw\nVmPeak:\t  9000 kB\nVmRSS:\t  7312 kB\nThreads:\t3\n";
        assert_eq!(vm_rss_kb(status), Some(7312));
        assert_eq!(vm_rss_kb("Name:\tw\n"), None);
        #[cfg(target_os = "linux")]
        assert!(rss_kb() > 0);
    }
}
