//! Fair yield: a worker's tick on each tenant-sharded queue it fetches (every
//! [`TICK`]). It records its running `#[iterable]` jobs and picks up the
//! requests for them (`broker::yield_tick`); the one worker that takes the
//! queue's decision lock this tick also decides who is asked
//! ([`crate::preempt::decide`], pure) and writes the requests.
//!
//! The channel: a per-queue hash of running iterable jobs in the queue's own
//! Redis slot, read by every worker at its tick. The lease renewal and the
//! heartbeat come every few seconds (a third of the lease: 10 s by default),
//! too late for a request that must arrive within about a second; the
//! wake-up list is taken by one idle worker, never by the busy one running
//! the job. A tick of 250 ms puts a request on the job within ~250 ms of its
//! decision (at once when the decider runs the job); the job yields at its
//! next step.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::Shared;
use crate::broker::{MyRun, Snapshot};
use crate::metrics;
use crate::preempt::{self, RunningJob, TenantLoad, YieldSettings};

/// How often each worker ticks on each sharded queue.
pub(crate) const TICK: Duration = Duration::from_millis(250);
/// Tenants of the dispatch order the decision looks at (the first by pass).
const TOPK: usize = 64;
/// A run another worker has not re-recorded for this long is dropped (its
/// worker died or stopped).
const STALE: Duration = Duration::from_secs(5);

pub(crate) async fn run(shared: Arc<Shared>, stop: CancellationToken) {
    if shared.sharded.is_empty() {
        return;
    }
    let mut every = tokio::time::interval(TICK);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = every.tick() => {}
        }
        for q in &shared.sharded {
            if let Err(e) = tick(&shared, q).await {
                shared.redis_trouble("fair yield", &e);
            }
        }
    }
}

async fn tick(shared: &Shared, queue: &str) -> crate::Result<()> {
    let mine: Vec<MyRun> = shared
        .running
        .lock()
        .expect("running lock")
        .values()
        .filter(|r| r.iterable && r.cx.queue() == queue)
        .map(|r| MyRun {
            jid: r.cx.jid().to_owned(),
            tenant: r.cx.token().tenant.clone().unwrap_or_default(),
            started: r.started,
        })
        .collect();
    let broker = shared.client.broker();
    let tick = broker
        .yield_tick(queue, &shared.identity, &mine, TICK * 4 / 5, TOPK, STALE)
        .await?;
    deliver(shared, queue, &tick.asked);
    if tick.ignored > 0 {
        ::metrics::counter!(metrics::YIELD_IGNORED_TOTAL, "queue" => queue.to_owned())
            .increment(tick.ignored);
        tracing::warn!(
            job.queue = queue,
            jobs = tick.ignored,
            "iterable jobs asked to yield did not within the cool-down (they keep running)"
        );
    }
    let Some(snap) = tick.snapshot else {
        return Ok(());
    };
    for secs in &snap.slot_waits {
        ::metrics::histogram!(metrics::SLOT_WAIT_SECONDS, "queue" => queue.to_owned())
            .record(*secs);
    }
    let (tenants, jobs, settings) = decision_input(&snap);
    let asks = preempt::decide(&tenants, &jobs, &settings);
    if asks.is_empty() {
        return Ok(());
    }
    let runs: Vec<(&str, &str)> = asks
        .iter()
        .filter_map(|a| {
            let run = snap.runs.iter().find(|r| r.jid == a.jid)?;
            Some((a.jid.as_str(), run.started.as_str()))
        })
        .collect();
    let marked = broker.yield_ask(queue, settings.cooldown, &runs).await?;
    for a in asks.iter().filter(|a| marked.contains(&a.jid)) {
        ::metrics::counter!(
            metrics::YIELD_REQUESTS_TOTAL,
            "queue" => queue.to_owned(),
            "reason" => a.reason.as_str()
        )
        .increment(1);
        tracing::info!(
            job.queue = queue,
            job.jid = %a.jid,
            tenant = %a.tenant,
            reason = a.reason.as_str(),
            "asked a running iterable job to yield"
        );
    }
    deliver(shared, queue, &marked);
    Ok(())
}

/// The pure decision's input from a snapshot.
fn decision_input(snap: &Snapshot) -> (Vec<TenantLoad>, Vec<RunningJob>, YieldSettings) {
    let d = YieldSettings::DEFAULT;
    let settings = YieldSettings {
        grace: snap.settings.grace.unwrap_or(d.grace),
        min_run: snap.settings.min_run.unwrap_or(d.min_run),
        cooldown: snap.settings.cooldown.unwrap_or(d.cooldown),
        enabled: !snap.settings.off,
    };
    let tenants = snap
        .tenants
        .iter()
        .map(|t| TenantLoad {
            tenant: t.tenant.clone(),
            running: t.running,
            pending: t.pending,
            weight: t.weight,
            floor: t.floor,
            cap: t.cap,
            burst: t.burst,
            waited: t.waited,
        })
        .collect();
    let jobs = snap
        .runs
        .iter()
        .map(|r| RunningJob {
            jid: r.jid.clone(),
            tenant: r.tenant.clone(),
            ran: r.ran,
            asked: r.asked,
        })
        .collect();
    (tenants, jobs, settings)
}

/// Asks this worker's running jobs among `jids` to yield at their next step.
fn deliver(shared: &Shared, queue: &str, jids: &[String]) {
    if jids.is_empty() {
        return;
    }
    let running = shared.running.lock().expect("running lock");
    for r in running.values() {
        if r.iterable && r.cx.queue() == queue && jids.iter().any(|j| j == r.cx.jid()) {
            if !r.cx.should_yield() {
                tracing::debug!(
                    job.queue = queue,
                    job.jid = r.cx.jid(),
                    "fair yield: asked to yield"
                );
            }
            r.cx.ask_to_yield();
        }
    }
}
