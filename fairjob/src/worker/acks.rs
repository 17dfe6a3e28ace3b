//! Batched acks: a job of a tenant-sharded queue that succeeded hands its ack
//! to one task per worker, which writes whatever acks have gathered while its
//! previous batch was on its way to Redis, one `shard_ack_many.lua` call per
//! queue ([`RedisBroker::ack_many`]; a queue's keys share one hash slot, so
//! each call stays in one slot of a Redis Cluster) instead of one
//! `shard_finish.lua` call per job. Nothing waits on a timer: under load a
//! batch is what arrived in one round trip, and a lone ack goes out at once.
//! (A plain queue's ack is one `HDEL`; concurrent ones already share a write,
//! as the connection pipelines them, so they are not batched here.)
//!
//! The job's task waits for its ack to be written before it gives up its
//! place in the `held` set, exactly as with an ack of its own, and its
//! tenant's running count is released by that write; a fenced ack is
//! reported to that job alone. The end of a job a relay keeps is recorded
//! by its batch's call (one server). A crash after a job
//! ended and before its batch was written re-runs the job, as a crash before
//! an unbatched ack would (at-least-once). A Redis error fails the whole batch
//! back to its jobs, whose finish retries with backoff as before.
//!
//! A succeeded job's ack goes first to the fetch loop, with the job's permit:
//! the next fetch of that queue carries it (`shard_fetch.lua` acks, then
//! refills the slot, in one step: one round trip per sharded job, and the
//! tenant's running count is released where the dispatch reads it), see
//! `fetch.rs`. An ack no fetch will carry soon (the worker is idle, quiet or
//! stopping, or the ack holds no permit) comes here. The job's task waits
//! for its ack either way.
//!
//! [`RedisBroker::ack_many`]: crate::broker::RedisBroker

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use super::Shared;
use super::processor::Permit;
use crate::broker::{AckRecord, FinishReply, RedisBroker, Token};
use crate::error::Error;

/// Acks one call carries at most (a dozen commands each), so that no script
/// runs long in Redis.
pub(crate) const MAX_CALL: usize = 32;

/// Acks gathered into one batch at most.
const MAX_BATCH: usize = 512;

/// How one ack's write ended, for its job's task.
type Written = Result<FinishReply, Arc<Error>>;

/// One job's ack waiting to be written: its record, its token and (encoded)
/// tenant, its jid when a relay keeps it (its end is recorded by the same
/// call), the job's permit (its place in the worker's concurrency, given to
/// the fetch that carries the ack, or released once the ack is written), and
/// where the outcome goes.
pub(crate) struct PendingAck {
    pub(crate) record: AckRecord,
    pub(crate) token: String,
    pub(crate) tenant: String,
    kept: Option<String>,
    pub(crate) permit: Option<Permit>,
    done: oneshot::Sender<Written>,
}

impl PendingAck {
    /// Whether a fetch may carry it (a kept job's end goes with `ack_many`).
    pub(crate) fn foldable(&self) -> bool {
        self.kept.is_none() && self.permit.is_some()
    }

    /// Reports how its write ended to the job's task (which may be gone,
    /// aborted at shutdown); its permit, if it still holds one, is released.
    pub(crate) fn written(self, fenced: bool) {
        let _ = self.done.send(Ok(if fenced {
            FinishReply::Fenced
        } else {
            FinishReply::Done
        }));
    }
}

/// The sending side, kept in [`Shared`].
pub(crate) type AckSender = mpsc::UnboundedSender<PendingAck>;

/// A new channel for the ack task.
pub(crate) fn channel() -> (AckSender, mpsc::UnboundedReceiver<PendingAck>) {
    mpsc::unbounded_channel()
}

/// Hands the ack of `token` (held in `record`) to be written and waits for
/// it: to the fetch loop (`fold`, while it runs) when a fetch may carry it,
/// with the job's `permit`; otherwise to the ack task. `None` when the ack
/// task is gone (the worker is abandoning Redis work).
pub(crate) async fn submit(
    tx: &AckSender,
    fold: Option<&AckSender>,
    record: AckRecord,
    token: &Token,
    kept: Option<&str>,
    permit: Option<Permit>,
) -> Option<Written> {
    let (done, written) = oneshot::channel();
    let mut pending = PendingAck {
        record,
        token: token.raw.clone(),
        tenant: token.tenant.clone().unwrap_or_default(),
        kept: kept.map(str::to_owned),
        permit,
        done,
    };
    if let Some(fold) = fold.filter(|_| pending.foldable()) {
        match fold.send(pending) {
            Ok(()) => return written.await.ok(),
            // The fetch loop has ended: the ack task writes it.
            Err(back) => pending = back.0,
        }
    }
    tx.send(pending).ok()?;
    written.await.ok()
}

/// Writes acks in batches until the worker abandons Redis work (the end of
/// its shutdown, after every job task is done) or every sender is gone.
pub(crate) async fn run(shared: Arc<Shared>, mut rx: mpsc::UnboundedReceiver<PendingAck>) {
    let broker = shared.client.broker();
    let mut batch: Vec<PendingAck> = Vec::with_capacity(MAX_BATCH);
    loop {
        let first = tokio::select! {
            biased;
            next = rx.recv() => match next {
                Some(p) => p,
                None => return,
            },
            _ = shared.abandon.cancelled() => return,
        };
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(p) => batch.push(p),
                Err(_) => break,
            }
        }
        write(broker, &mut batch).await;
    }
}

/// Writes `batch` (emptying it): one call per record (and per chunk of it),
/// all sent at once, one round trip; each ack's outcome goes to its job.
pub(crate) async fn write(broker: &RedisBroker, batch: &mut Vec<PendingAck>) {
    batch.sort_unstable_by(|a, b| a.record.cmp(&b.record));
    let groups: Vec<&[PendingAck]> = batch
        .chunk_by(|a, b| a.record == b.record)
        .flat_map(|g| g.chunks(MAX_CALL))
        .collect();
    let calls = groups.iter().map(|group| async move {
        let acks: Vec<(&str, &str, Option<&str>)> = group
            .iter()
            .map(|p| (p.token.as_str(), p.tenant.as_str(), p.kept.as_deref()))
            .collect();
        broker.ack_many(&group[0].record, &acks).await
    });
    let results = futures_util::future::join_all(calls).await;
    let sizes: Vec<usize> = groups.iter().map(|g| g.len()).collect();
    // Each group's outcome to its acks (the batch in the groups' order).
    let mut rest = batch.drain(..);
    for (size, result) in sizes.into_iter().zip(results) {
        let mine = rest.by_ref().take(size);
        match result {
            Ok(fenced) => {
                for (i, p) in mine.enumerate() {
                    p.written(fenced.get(i) == Some(&true));
                }
            }
            Err(e) => {
                let e = Arc::new(e);
                for p in mine {
                    // The job's task may be gone (aborted at shutdown).
                    let _ = p.done.send(Err(e.clone()));
                }
            }
        }
    }
}

/// Hands `acks` to the ack task (`tx`) to be written there: acks no fetch
/// will carry soon, or that a failed fetch carried. Their permits are
/// released once written.
pub(crate) fn hand_over(tx: Option<&AckSender>, acks: impl IntoIterator<Item = PendingAck>) {
    if let Some(tx) = tx {
        for a in acks {
            // Gone only when the worker abandons Redis work.
            let _ = tx.send(a);
        }
    }
}
