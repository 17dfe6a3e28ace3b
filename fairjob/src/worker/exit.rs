//! One exit for a fetched job. Every way a job leaves an in-progress record is
//! an [`Exit`] or a park, and this file holds every write of one: a job this
//! worker ran ([`finish`], which retries Redis errors), a job its gates park
//! ([`admit`]: its rate limiter, then its concurrency slot), its unfinished
//! jobs at shutdown ([`requeue`]), the orphans its heartbeat finds in its own
//! records ([`write`]) and a dead worker's jobs the reaper takes back ([`recover`]).
//! Each exit is exactly one broker call, fenced by the job's token; a unique
//! job's lock is released in the same call when it succeeds or dies (`Ack`,
//! `Dead`), and kept by `Retry`, `Front` and `Yield`. So is the end of a job
//! a relay keeps (`kept`, its jid) recorded for PostgreSQL in the same call
//! (`Ack`, `Dead`; on one server, see `relay.rs`), and a batch member's end
//! (`Ack`, `Retry`, `Dead`: it leaves its batch's sets, and an event it
//! completes fires; on one server, see `batch.rs`):
//!
//! | exit | broker call |
//! |------|-------------|
//! | `Ack` of a tenant-sharded queue's job holding no slot and in no batch, acks batched | the ack task (`acks.rs`, one `ack_many` per batch and queue) |
//! | `Ack` | `finish(Finish::Ack)` |
//! | `Retry` | `finish(Finish::Retry)` |
//! | `Dead` | `finish(Finish::Dead)` (the reaper: `recover`) |
//! | `Front` | `finish(Finish::Front)` (the reaper: `recover`) |
//! | `Yield` | `finish(Finish::Back)`: the queue's (tenant shard's) tail, no retry used |
//! | park: waits in its rate limiter's list | `rate_acquire`: the gate's script counts the start, or parks the job (`lib/gcra.lua`), leaving the record and its tenant's running count in the same step (`fj_park_leave`, `lib/exit.lua`) |
//! | park: waits in its slot limit's list | `slot_acquire`: the gate's script takes a slot, or parks the job (`lib/slots.lua`), leaving as above |

use std::sync::Arc;
use std::time::Duration;

use super::processor::Permit;
use super::retry::Outcome;
use super::{Running, Shared, acks, backoff_sleep};
use crate::broker::{
    Acquired, Finish, FinishReply, Holds, MemberEnd, RateAcquired, SlotHold, Token,
};
use crate::error::{Error, JobError, Result};
use crate::job::{JobContext, RateGate, SlotRequest};
use crate::policy::batch::Outcome as BatchOutcome;
use crate::{limit, metrics, rate};

/// How a fetched job leaves its worker's in-progress record.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Exit {
    /// Done (or failed in a way Sidekiq does not keep).
    Ack,
    /// To `retry` with this payload, due after this delay.
    Retry(String, Duration),
    /// To `dead` with this payload.
    Dead(String),
    /// Back to the front of its queue with this payload: unfinished at
    /// shutdown, an orphan of this worker's records, a dead worker's job.
    Front(String),
    /// Back to the tail of its queue (its tenant's shard) with this payload:
    /// the job yielded. Not a failure; no retry is used.
    Yield(String),
}

impl From<Outcome> for Exit {
    fn from(outcome: Outcome) -> Self {
        match outcome {
            Outcome::Ack => Exit::Ack,
            Outcome::Retry(payload, delay) => Exit::Retry(payload, delay),
            Outcome::Dead(payload) => Exit::Dead(payload),
        }
    }
}

impl Exit {
    /// A batch member's outcome when its run ends with this exit (`None`: a
    /// requeue or a yield is no end).
    pub(crate) fn member_outcome(&self, member: &MemberEnd) -> Option<BatchOutcome> {
        member.outcome(&self.step())
    }

    /// The broker's step for this exit.
    fn step(&self) -> Finish<'_> {
        match self {
            Exit::Ack => Finish::Ack,
            Exit::Retry(payload, delay) => Finish::Retry {
                payload,
                delay: *delay,
            },
            Exit::Dead(payload) => Finish::Dead { payload },
            Exit::Front(payload) => Finish::Front { payload },
            Exit::Yield(payload) => Finish::Back { payload },
        }
    }
}

/// Writes the end of a job this worker ran, retrying Redis errors with
/// backoff until done or the worker abandons Redis work (then the entry stays
/// and the reaper recovers it later). True when the write was fenced (the job
/// had been recovered from this worker). `holds`: what the end releases or
/// records (a slot, a unique lock, a kept job's end for its relay).
///
/// `permit`, the job's place in the worker's concurrency when it still holds
/// it, goes with a tenant-sharded queue's ack to the fetch that carries it
/// (see `acks.rs`); otherwise it is released when the end is written.
pub(crate) async fn finish(
    shared: &Shared,
    token: &Token,
    exit: Exit,
    holds: Holds<'_>,
    mut permit: Option<Permit>,
) -> bool {
    let mut attempt = 0u32;
    loop {
        let Some(written) = send(shared, token, &exit, holds, &mut permit).await else {
            if shared.abandon.is_cancelled() {
                // The ack task is gone: the worker is abandoning Redis work.
                return false;
            }
            // The ack was dropped unwritten (it cannot be while the worker
            // runs, but an unwritten ack must not pass for a written one):
            // it is sent again.
            attempt += 1;
            backoff_sleep(attempt).await;
            continue;
        };
        match written {
            Ok(FinishReply::Done | FinishReply::OwnerAlive) => return false,
            Ok(FinishReply::Fenced) => {
                let lost = |shared: &Shared| {
                    shared
                        .lost_with_redis
                        .lock()
                        .expect("lost lock")
                        .remove(&token.raw)
                };
                if lost(shared) || (super::heartbeat::redis_lost_data(shared).await && lost(shared))
                {
                    tracing::debug!(token = %token.raw, "completion fenced: Redis lost this job with its data");
                } else {
                    tracing::warn!(token = %token.raw, "stale completion fenced: the job was recovered from this worker after its lease expired");
                }
                ::metrics::counter!(metrics::FENCED_TOTAL).increment(1);
                return true;
            }
            Err(e) => {
                attempt += 1;
                shared.redis_trouble("finish", &e);
                if shared.abandon.is_cancelled() {
                    return false;
                }
                tokio::select! {
                    _ = backoff_sleep(attempt) => {}
                    _ = shared.abandon.cancelled() => return false,
                }
            }
        }
    }
}

/// One attempt at the one call that ends a job this worker ran: a
/// tenant-sharded queue's ack (of a job holding no slot) is written with
/// others, by the next fetch or the ack task (the permit goes with it);
/// every other exit is one [`write`]. `None` when the ack task is gone.
async fn send(
    shared: &Shared,
    token: &Token,
    exit: &Exit,
    holds: Holds<'_>,
    permit: &mut Option<Permit>,
) -> Option<std::result::Result<FinishReply, Arc<Error>>> {
    if let (Exit::Ack, None, None, None, Some(tx)) =
        (exit, holds.slot, holds.unique, holds.batch, &shared.acks)
        && let Some(record) = shared
            .client
            .broker()
            .shard_ack_record(&shared.identity, token)
    {
        let fold = shared.fold.as_ref();
        return acks::submit(tx, fold, record, token, holds.kept, permit.take()).await;
    }
    Some(write(shared, token, exit, holds).await.map_err(Arc::new))
}

/// Ends a job in this worker's own in-progress record: one `finish` call.
pub(crate) async fn write(
    shared: &Shared,
    token: &Token,
    exit: &Exit,
    holds: Holds<'_>,
) -> Result<FinishReply> {
    shared
        .client
        .broker()
        .finish(
            &shared.identity,
            token,
            exit.step(),
            shared.client.clock_offset(),
            holds,
        )
        .await
}

/// Ends a job in dead worker `identity`'s record (the reaper): one `recover`
/// call, done only if that worker's lease is still gone.
pub(crate) async fn recover(
    shared: &Shared,
    identity: &str,
    token: &Token,
    exit: &Exit,
    holds: Holds<'_>,
) -> Result<FinishReply> {
    shared
        .client
        .broker()
        .recover(
            identity,
            token,
            exit.step(),
            shared.client.clock_offset(),
            holds,
        )
        .await
}

/// Puts the unfinished jobs of a shutdown back at the front of their queues;
/// at the first Redis error the rest stay in progress for the reaper.
pub(crate) async fn requeue(shared: &Shared, unfinished: Vec<Running>) {
    for job in unfinished {
        // The bytes Redis held (to_json keeps them when unedited).
        let exit = Exit::Front(job.cx.payload().to_json());
        let holds = Holds {
            slot: job.slot.as_ref(),
            ..Holds::default()
        };
        if let Err(e) = write(shared, job.cx.token(), &exit, holds).await {
            tracing::warn!(error = %e, job.jid = job.cx.jid(), "could not requeue; it stays in progress and is recovered after the lease");
            return;
        }
    }
}

/// How long a requeue at shutdown may take before the worker gives up on Redis.
pub(crate) const REQUEUE_TIMEOUT: Duration = Duration::from_secs(3);

/// What a job's gates (its rate limiter, then its concurrency slot) said.
#[derive(Debug)]
pub(crate) enum Admission {
    /// It runs, holding this slot (if its type has a `#[concurrency]`).
    Go(Option<SlotHold>),
    /// It left the in-progress record: parked in a limiter's list (it waits
    /// there, holding no worker), or recovered by another worker meanwhile.
    Parked,
    /// A gate could not be asked (a Redis error): a failure of the job.
    Failed(JobError),
}

/// Passes a job's gates, as one exit: its rate limiter (first: a job waiting
/// for its rate holds no slot, and one waiting for a slot has its start
/// counted), then its concurrency slot. Each gate is one broker call whose
/// script either lets the job on or parks it, taking it out of the
/// in-progress record in the same step.
pub(crate) async fn admit(
    shared: &Shared,
    cx: &JobContext,
    rate_gate: Option<&RateGate>,
    slot: Option<&SlotRequest>,
) -> Admission {
    let span = tracing::Span::current();
    let broker = shared.client.broker();
    let (identity, token, payload) = (&shared.identity, cx.token(), cx.payload());
    if let Some(gate) = rate_gate {
        let key = &gate.full_key;
        match rate::acquire(broker, identity, token, payload, key, gate.rate).await {
            Ok(RateAcquired::Pass) => {}
            Ok(RateAcquired::Parked(next)) => {
                span.record("outcome", "rate_limited");
                tracing::debug!(key = %key, "rate spent: parked in the limiter's list");
                shared.rate_release.notify(next);
                return Admission::Parked;
            }
            Ok(RateAcquired::Lost) => return lost(&span, key, "passed its rate limiter"),
            Err(e) => {
                return Admission::Failed(
                    JobError::retry(format!("cannot pass the rate limiter `{key}`: {e}"))
                        .with_class("RateLimitError"),
                );
            }
        }
    }
    let Some(req) = slot else {
        return Admission::Go(None);
    };
    let key = &req.full_key;
    match limit::acquire(broker, identity, token, payload, key, req.limit).await {
        Ok(Acquired::Slot(hold)) => Admission::Go(Some(hold)),
        Ok(Acquired::Parked) => {
            span.record("outcome", "parked");
            tracing::debug!(key = %key, "no free slot: parked in the lock-wait list");
            Admission::Parked
        }
        Ok(Acquired::Lost) => lost(&span, key, "took its slot"),
        Err(e) => Admission::Failed(
            JobError::retry(format!("cannot take a slot of `{key}`: {e}")).with_class("SlotError"),
        ),
    }
}

/// A job recovered by another worker before it passed a gate: not run here.
fn lost(span: &tracing::Span, key: &str, before: &str) -> Admission {
    span.record("outcome", "lost");
    tracing::warn!(
        key = %key,
        "the job was recovered by another worker before it {before}; not run here"
    );
    Admission::Parked
}
