//! The cron poller: enqueues each periodic schedule's fire times, exactly
//! once across any number of workers, without a leader.
//!
//! Every worker runs one. At start-up it reconciles the schedules its code
//! declares with those in Redis (`cron_reconcile.lua`, in bounded steps; of
//! several workers starting at once the last to begin decides). Then it sleeps until
//! the earliest next fire time (at most [`IDLE`], so schedules set at run time
//! are seen), and for each due schedule decides by the pure rules of
//! [`crate::wire::cron`] (on time, missed and caught up, skipped) on Redis's
//! clock. The decision is applied by `cron_claim.lua`, a compare-and-set on the
//! schedule's next fire time: of several pollers deciding on the same fire
//! time, one wins, and a fire time at or before the last one is never claimed
//! again. The winner's job is written to the firing record under a lease and
//! pushed through the client (middleware, reroute, tenant shards) with that
//! record as its source: `push.lua` removes it in the push's own step, so a
//! poller killed between claim and push leaves a claim that another poller
//! pushes once the lease expires ([`LEASE`]), and none is pushed twice (for a
//! tenant-sharded queue or on a cluster, where the removal follows the push,
//! the push marks the job's jid in the queue's slot in its own step, and a
//! takeover finds the mark and pushes nothing: `Src::once`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::{Shared, backoff_sleep};
use crate::broker::{ClaimSpec, CronClaim, Src};
use crate::metrics;
use crate::wire::cron::{CronEntry, Overlap, decide};
use crate::wire::{Payload, fields};

/// The longest the poller sleeps (so a schedule set at run time, a resume or
/// a change is picked up within it).
const IDLE: Duration = Duration::from_millis(1000);
/// How long a claimed fire time's job may wait for its push before another
/// poller takes it over.
const LEASE: Duration = Duration::from_secs(30);
/// Due schedules handled per read.
const BATCH: usize = 100;

pub(crate) async fn run(shared: Arc<Shared>, stop: CancellationToken) {
    let mut failures = 0;
    while let Err(e) = reconcile(&shared).await {
        failures += 1;
        shared.redis_trouble("cron reconcile", &e);
        tokio::select! {
            _ = backoff_sleep(failures) => {}
            _ = stop.cancelled() => return,
        }
    }
    failures = 0;
    loop {
        let wait = if shared.control.is_quiet() {
            IDLE
        } else {
            match tick(&shared).await {
                Ok(wait) => {
                    failures = 0;
                    wait
                }
                Err(e) => {
                    failures += 1;
                    shared.redis_trouble("cron", &e);
                    backoff_sleep(failures).await;
                    continue;
                }
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.cancelled() => return,
        }
    }
}

/// Replaces the code-declared schedules in Redis by this worker's (when it
/// declares any; a worker without schedules leaves them alone).
async fn reconcile(shared: &Shared) -> crate::Result<()> {
    if shared.cron.is_empty() {
        return Ok(());
    }
    let broker = shared.client.broker();
    let now = (broker.time().await? as i64) + shared.client.clock_offset();
    let declared: Vec<(String, String, Option<i64>)> = shared
        .cron
        .iter()
        .map(|e| {
            let next = e.schedule().ok().and_then(|s| s.next_after_secs(now));
            (e.name.clone(), e.to_json(), next)
        })
        .collect();
    match broker.cron_reconcile(&shared.identity, &declared).await? {
        Some(removed) => tracing::info!(
            schedules = declared.len(),
            removed = ?removed,
            "periodic schedules reconciled"
        ),
        None => tracing::info!(
            schedules = declared.len(),
            "a worker that started later reconciles the periodic schedules"
        ),
    }
    Ok(())
}

/// One pass: take over stale claims, fire what is due; returns how long to
/// sleep until the earliest next fire time.
async fn tick(shared: &Shared) -> crate::Result<Duration> {
    let broker = shared.client.broker();
    let offset = shared.client.clock_offset();
    let started = Instant::now();
    let now_ms = ((broker.time().await? + offset as f64) * 1000.0) as i64;
    for member in broker.cron_redrive(BATCH, LEASE, offset).await? {
        push_claimed(shared, member).await?;
    }
    loop {
        let due = broker.cron_due_at(now_ms.div_euclid(1000), BATCH).await?;
        let n = due.len();
        for (name, at) in due {
            fire(shared, &name, at, now_ms).await?;
        }
        if n < BATCH {
            break;
        }
    }
    let Some(earliest) = broker.cron_earliest().await? else {
        return Ok(IDLE);
    };
    let elapsed = started.elapsed().as_millis() as i64;
    let until = earliest * 1000 - (now_ms + elapsed);
    Ok(Duration::from_millis(
        until.clamp(0, IDLE.as_millis() as i64) as u64,
    ))
}

/// Decides and claims one due schedule; pushes its job when claimed.
async fn fire(shared: &Shared, name: &str, due: i64, now_ms: i64) -> crate::Result<()> {
    let broker = shared.client.broker();
    let Some(entry) = broker
        .cron_entry(name)
        .await?
        .and_then(|j| CronEntry::from_json(&j))
    else {
        tracing::warn!(cron = name, "a due schedule has no readable entry; removed");
        broker.cron_remove(name).await?;
        return Ok(());
    };
    let schedule = match entry.schedule() {
        Ok(s) => s,
        Err(e) => {
            // An older or newer worker may read it; this one leaves it be.
            tracing::warn!(cron = name, error = %e, "cannot read a schedule; left to other workers");
            return Ok(());
        }
    };
    let Some(decision) = decide(&schedule, entry.catch_up(), due, now_ms) else {
        return Ok(());
    };
    let job = decision
        .fire
        .and_then(|f| entry.job_for(f, now_ms as f64 / 1000.0));
    let (jid, json) = match &job {
        Some(p) => (p.jid(), p.to_json()),
        None => (String::new(), String::new()),
    };
    let spec = ClaimSpec {
        name,
        expected: due,
        fire: decision
            .fire
            .filter(|_| job.is_some())
            .map(|f| (f, jid.as_str(), json.as_str())),
        next: decision.next,
        skip_overlap: entry.overlap() == Overlap::Skip,
        missed: decision.missed,
    };
    let claim = broker
        .cron_claim(&spec, LEASE, shared.client.clock_offset())
        .await?;
    let label = name.to_owned();
    if decision.missed {
        ::metrics::counter!(metrics::CRON_SKIPPED_TOTAL, "schedule" => label.clone(), "reason" => "missed")
            .increment(1);
    }
    match claim {
        CronClaim::Claimed => {
            let fire = decision.fire.unwrap_or(due);
            let late = (now_ms - fire * 1000).max(0) as f64 / 1000.0;
            ::metrics::counter!(metrics::CRON_FIRES_TOTAL, "schedule" => label.clone())
                .increment(1);
            ::metrics::histogram!(metrics::CRON_LATENESS_SECONDS, "schedule" => label).record(late);
            tracing::debug!(cron = name, fire, late, job.jid = %jid, "fire time claimed");
            push_claimed(shared, json).await?;
        }
        CronClaim::SkippedOverlap => {
            ::metrics::counter!(metrics::CRON_SKIPPED_TOTAL, "schedule" => label, "reason" => "overlap")
                .increment(1);
            tracing::info!(
                cron = name,
                "fire time skipped: the previous run is still queued or running"
            );
        }
        CronClaim::Missed => {
            tracing::info!(cron = name, "missed fire times skipped (catch-up policy)");
        }
        CronClaim::Stale | CronClaim::Gone => {}
    }
    Ok(())
}

/// Pushes a claimed fire time's job through the client, consuming its claim.
async fn push_claimed(shared: &Shared, member: String) -> crate::Result<()> {
    let broker = shared.client.broker();
    let record = broker.keys().cron_firing();
    let payload = match Payload::parse_slice(member.as_bytes()) {
        Ok(p) => p,
        Err(m) => {
            tracing::error!(reason = %m, "unreadable claimed cron job dropped");
            broker.drop_claim(&record, member.as_bytes()).await?;
            return Ok(());
        }
    };
    // The jid is new per claimed fire time: where the push and the claim's
    // removal are two steps (a sharded queue, a cluster), the push marks it
    // in the queue's slot, so a takeover after a crash between them pushes
    // nothing twice.
    let src = Src {
        record: record.clone(),
        member,
        once: Some(payload.jid()),
    };
    match shared.client.repush(payload, Some(src.clone())).await {
        Ok(Some(_)) => Ok(()),
        Ok(None) => {
            // A middleware stopped it (or another poller pushed it).
            broker.drop_claim(&record, src.member.as_bytes()).await?;
            Ok(())
        }
        Err(e) if e.is_transient() => Err(e),
        Err(e) => {
            tracing::error!(error = %e, "cannot push a periodic job; dropped");
            broker.drop_claim(&record, src.member.as_bytes()).await?;
            Ok(())
        }
    }
}

/// A job ended (succeeded or dead): if a schedule with `overlap = "skip"`
/// enqueued it, that schedule may fire again.
pub(crate) async fn run_ended(shared: &Shared, payload: &Payload) {
    let Some(name) = payload.get_str(fields::CRON) else {
        return;
    };
    if let Err(e) = shared
        .client
        .broker()
        .cron_release(&name, &payload.jid())
        .await
    {
        shared.redis_trouble("cron release", &e);
    }
}
