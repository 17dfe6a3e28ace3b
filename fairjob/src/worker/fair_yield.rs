//! Fair yield: a worker's tick on each tenant-sharded queue it fetches (every
//! [`TICK`]). It records its running yieldable jobs (`#[iterable]` jobs, and
//! plain jobs that have called `cx.should_yield()` at least once: they poll
//! it, so they can honour a request) and picks up the requests for them
//! (`broker::yield_tick`); the one worker that takes the queue's decision
//! lock this tick also decides who is asked ([`crate::policy::share::decide`],
//! pure) and which tenants dispatch holds at their share
//! ([`crate::policy::share::share_holds`]), and writes both.
//!
//! The channel: a per-queue hash of running yieldable jobs in the queue's own
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
use crate::policy::share::{self, RunningJob, TenantLoad, YieldSettings};

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
        .filter(|r| yieldable(r) && r.cx.queue() == queue)
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
    let asks = share::decide(&tenants, &jobs, &settings);
    // Holds only while the queue runs yieldable jobs (long jobs are what
    // stride order alone can't share out by slot-time).
    let want = if jobs.is_empty() {
        Vec::new()
    } else {
        share::share_holds(&tenants, &settings)
    };
    let holds = hold_changes(&snap, &want);
    if asks.is_empty() && holds.is_empty() {
        return Ok(());
    }
    let runs: Vec<(&str, &str, &str)> = asks
        .iter()
        .filter_map(|a| {
            let run = snap.runs.iter().find(|r| r.jid == a.jid)?;
            Some((a.jid.as_str(), run.started.as_str(), a.reason.as_str()))
        })
        .collect();
    let holds: Vec<(&str, Option<u32>)> = holds.iter().map(|(t, l)| (t.as_str(), *l)).collect();
    let marked = broker
        .yield_ask(queue, settings.cooldown, HOLD_TTL, &holds, &runs)
        .await?;
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
            "asked a running job to yield"
        );
    }
    deliver(shared, queue, &marked);
    Ok(())
}

/// A job fair yield may ask: iterable, or a plain job that polls
/// `cx.should_yield()`.
fn yieldable(r: &super::Running) -> bool {
    r.iterable || r.cx.polls_yield()
}

/// The share holds to write: new or changed ones, ones with less than half
/// their time to live left (renewed), and `None` for those in force that are
/// no longer wanted (lifted).
fn hold_changes(snap: &Snapshot, want: &[(String, u32)]) -> Vec<(String, Option<u32>)> {
    let mut out = Vec::new();
    for (t, limit) in want {
        let now = snap
            .tenants
            .iter()
            .find(|r| &r.tenant == t)
            .and_then(|r| r.hold);
        let fresh = now.is_some_and(|(l, left)| l == *limit && left > HOLD_TTL.as_secs_f64() / 2.0);
        if !fresh {
            out.push((t.clone(), Some(*limit)));
        }
    }
    for r in &snap.tenants {
        if r.hold.is_some() && !want.iter().any(|(t, _)| *t == r.tenant) {
            out.push((r.tenant.clone(), None));
        }
    }
    out
}

/// How long a share hold lasts unless a later deciding tick renews it.
const HOLD_TTL: Duration = Duration::from_secs(3);

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
            last_asked: r.last_asked,
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
        if yieldable(r) && r.cx.queue() == queue && jids.iter().any(|j| j == r.cx.jid()) {
            if !r.cx.yield_asked() {
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
