//! The fetch loop: take as many free permits as there are (up to a batch),
//! reserve that many jobs, each from the first non-empty queue of its own
//! weighted order (as Sidekiq's BasicFetch does per BRPOP), hand each to a
//! processor task; when nothing is found, sleep on the queues' wake-up lists.
//!
//! Plain queues are Sidekiq's lists, served by one `fetch.lua` call for all of
//! them. A tenant-sharded queue is served by its own `shard_fetch.lua` call,
//! whose keys all share the queue's Redis Cluster slot. When a worker's queues
//! mix both, a fetch runs in rounds: each round asks every order's next
//! candidate (for plain queues: the run of plain queues up to the next sharded
//! one), all calls of a round concurrently on one connection, and an order that
//! got nothing moves on past the queues found empty. A worker with plain queues
//! only (or with one sharded queue only) fetches in one round, one round trip.
//!
//! A fetch carries the acks of the worker's tenant-sharded jobs that ended
//! well since the last one (handed over with their permits, see `acks.rs`):
//! its first round acks them in the call that reserves from their queue
//! (`shard_fetch.lua`), or beside it for a queue the round does not ask. An
//! idle, quiet or stopping fetch loop hands them to the ack task instead.
//!
//! A queue an operator paused (`broker.pause_queue`) is left out of every
//! order; the paused set is re-read every couple of seconds, not per fetch.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::future::{BoxFuture, join_all};
use futures_util::stream::FuturesUnordered;
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;

use super::acks::{self, AckSender, PendingAck};
use super::handle::WorkerHandle;
use super::processor::Permit;
use super::{Shared, backoff_sleep, processor};
use crate::broker::{PlainQueue, RedisBroker, Reserved, ShardQueue, Waiter};
use crate::error::Result;

/// Jobs reserved by one fetch at most.
const MAX_BATCH: usize = 100;

/// Jobs one `shard_fetch.lua` call dispatches at most, and acks it carries
/// at most (each is a few Redis commands and some Lua; more are asked for in
/// several calls, so that no call runs long: past 16 jobs a call's cost per
/// job hardly falls).
const SHARD_CALL: usize = 16;

/// How often the fetch loop re-reads the paused queues.
const PAUSED_REFRESH: Duration = Duration::from_secs(2);

/// The worker's queues as the fetch scripts see them, prepared once.
#[derive(Debug)]
struct Fetcher {
    identity: String,
    /// Every plain queue, in the order `fetch.lua` numbers them.
    plain: Vec<PlainQueue>,
    /// Per queue of the worker (by its index in the queue list): where it is.
    kinds: Vec<Kind>,
    /// When the first tenant of a sharded queue waiting for its rate may start
    /// again (from the last short fetch): an idle wait ends no later.
    rate_due: std::sync::Mutex<Option<Instant>>,
    /// The ack task: carried acks a failed fetch could not write go there.
    acks: Option<AckSender>,
}

#[derive(Debug)]
enum Kind {
    /// Index into `plain`.
    Plain(usize),
    /// A plain queue fetched by a call of its own (Redis Cluster mode).
    Alone(Box<PlainQueue>),
    Shard(Box<ShardQueue>),
}

/// One round's calls: plain orders with their run of plain queues, and per
/// sharded queue the orders asking it.
#[derive(Debug, Default)]
struct Round {
    plain: Vec<(usize, Vec<usize>)>,
    shards: BTreeMap<usize, Vec<usize>>,
}

enum Reply {
    Plain(Vec<(usize, Reserved)>),
    Shard(Vec<Reserved>),
}

impl Fetcher {
    fn new(
        broker: &RedisBroker,
        identity: &str,
        queues: &[(String, bool)],
        acks: Option<AckSender>,
    ) -> Fetcher {
        let mut plain = Vec::new();
        let kinds = queues
            .iter()
            .map(|(q, sharded)| {
                if *sharded {
                    return Kind::Shard(Box::new(broker.shard_queue(q, identity)));
                }
                let pq = broker.plain_queue(q, identity);
                if pq.alone() {
                    Kind::Alone(Box::new(pq))
                } else {
                    plain.push(pq);
                    Kind::Plain(plain.len() - 1)
                }
            })
            .collect();
        Fetcher {
            identity: identity.to_owned(),
            plain,
            kinds,
            rate_due: std::sync::Mutex::new(None),
            acks,
        }
    }

    /// True for a queue fetched by a call of its own.
    fn is_shard(&self, q: usize) -> bool {
        !matches!(self.kinds[q], Kind::Plain(_))
    }

    /// Reserves as [`Self::reserve`] does, the fetch queued behind a wait on
    /// the wake-up lists (one round trip from idle to reserved): for a worker
    /// of plain queues only, which one `fetch.lua` call serves. `None` when
    /// the fetch could not run that way (the caller reserves itself).
    async fn reserve_after_wait(
        &self,
        broker: &RedisBroker,
        waiter: &mut Waiter,
        orders: &[Vec<usize>],
        seq: &AtomicU64,
    ) -> Option<Vec<Reserved>> {
        let segments: Vec<Vec<usize>> = orders
            .iter()
            .map(|order| {
                order
                    .iter()
                    .filter_map(|&q| match self.kinds[q] {
                        Kind::Plain(i) => Some(i),
                        _ => None,
                    })
                    .collect()
            })
            .collect();
        let first = seq.fetch_add(segments.len() as u64, Ordering::Relaxed);
        let got = broker
            .fetch_plain_after_wait(waiter, &self.identity, &self.plain, &segments, first)
            .await?;
        Some(got.into_iter().map(|(_, job)| job).collect())
    }

    /// Notes that a tenant waiting for its rate may start `after` from now.
    fn note_rate_due(&self, after: Duration) {
        let at = Instant::now() + after;
        let mut due = self.rate_due.lock().expect("rate_due lock");
        if due.is_none_or(|d| at < d) {
            *due = Some(at);
        }
    }

    /// How long an idle wait may last at most (until a tenant waiting for its
    /// rate is due), clearing the note.
    fn take_rate_due(&self) -> Option<Duration> {
        let due = self.rate_due.lock().expect("rate_due lock").take()?;
        Some(due.saturating_duration_since(Instant::now()))
    }

    /// True when one `fetch.lua` call serves every queue of the worker.
    fn plain_only(&self) -> bool {
        self.kinds.iter().all(|k| matches!(k, Kind::Plain(_)))
    }

    /// Reserves at most one job per order (`orders` hold queue indices); token
    /// sequence numbers are taken from `seq`. `acks` (of tenant-sharded
    /// queues' jobs) are written by the first round: in the call that reserves
    /// from their queue, or beside the round's calls.
    async fn reserve(
        &self,
        broker: &RedisBroker,
        orders: &[Vec<usize>],
        seq: &AtomicU64,
        acks: Vec<PendingAck>,
    ) -> Result<Vec<Reserved>> {
        let n = orders.len();
        let mut pos = vec![0usize; n];
        let mut done = vec![false; n];
        let mut empty = vec![false; self.kinds.len()];
        let mut out = Vec::new();
        // The acks by the index of their queue, until the first round
        // takes them.
        let mut carried: BTreeMap<usize, Vec<PendingAck>> = BTreeMap::new();
        for a in acks {
            let q = self
                .kinds
                .iter()
                .position(|k| matches!(k, Kind::Shard(sq) if sq.name == a.record.queue));
            // (An ack of a queue the worker does not fetch goes beside.)
            carried.entry(q.unwrap_or(usize::MAX)).or_default().push(a);
        }
        loop {
            let round = self.plan(orders, &mut pos, &mut done, &empty);
            // The first round carries the acks: a sharded queue it asks
            // acks its own in the call that reserves from it (below), the
            // rest go beside the round's calls.
            let mut beside: Vec<PendingAck> = carried
                .extract_if(.., |q, _| !round.shards.contains_key(q))
                .flat_map(|(_, mine)| mine)
                .collect();
            if round.plain.is_empty() && round.shards.is_empty() {
                if !beside.is_empty() {
                    acks::write(broker, &mut beside).await;
                }
                return Ok(out);
            }
            let mut calls: Vec<BoxFuture<'_, Result<Reply>>> = Vec::new();
            if !round.plain.is_empty() {
                let segments: Vec<Vec<usize>> = round
                    .plain
                    .iter()
                    .map(|(_, seg)| {
                        seg.iter()
                            .map(|&q| match self.kinds[q] {
                                Kind::Plain(i) => i,
                                _ => unreachable!("segments hold plain queues"),
                            })
                            .collect()
                    })
                    .collect();
                let first = seq.fetch_add(segments.len() as u64, Ordering::Relaxed);
                calls.push(Box::pin(async move {
                    broker
                        .fetch_plain(&self.identity, &self.plain, &segments, first)
                        .await
                        .map(Reply::Plain)
                }));
            }
            for (&q, asking) in &round.shards {
                // Several short calls rather than one long one (Redis runs one
                // script at a time); their replies are joined in order below.
                let per_call = match &self.kinds[q] {
                    Kind::Shard(_) => SHARD_CALL,
                    _ => MAX_BATCH,
                };
                let mut left = asking.len();
                let mut mine = carried.remove(&q).unwrap_or_default();
                let mut parts: Vec<BoxFuture<'_, Result<Vec<Reserved>>>> = Vec::new();
                while left > 0 {
                    let want = left.min(per_call);
                    let first = seq.fetch_add(want as u64, Ordering::Relaxed);
                    left -= want;
                    let part_acks: Vec<PendingAck> =
                        mine.drain(..mine.len().min(SHARD_CALL)).collect();
                    parts.push(match &self.kinds[q] {
                        Kind::Shard(sq) => Box::pin(async move {
                            let (got, due) = self
                                .fetch_acking(broker, sq, want, first, part_acks)
                                .await?;
                            if let Some(after) = due {
                                self.note_rate_due(after);
                            }
                            Ok(got)
                        }),
                        Kind::Alone(pq) => Box::pin(broker.fetch_plain_alone(pq, want, first)),
                        Kind::Plain(_) => unreachable!("own calls are for sharded or lone queues"),
                    });
                }
                // More acks than calls: beside them.
                beside.extend(mine);
                calls.push(Box::pin(async move {
                    // Every part to its end (not cut short by another's
                    // error): a part carries acks whose jobs wait to hear.
                    let replies = join_all(parts)
                        .await
                        .into_iter()
                        .collect::<Result<Vec<_>>>()?;
                    Ok(Reply::Shard(replies.into_iter().flatten().collect()))
                }));
            }
            let write_beside = async {
                if !beside.is_empty() {
                    acks::write(broker, &mut beside).await;
                }
            };
            let (replies, ()) = tokio::join!(join_all(calls), write_beside);
            let mut replies = replies.into_iter().collect::<Result<Vec<_>>>()?.into_iter();
            if !round.plain.is_empty() {
                let Some(Reply::Plain(got)) = replies.next() else {
                    unreachable!("the plain call comes first")
                };
                let mut served = vec![false; round.plain.len()];
                for (i, job) in got {
                    if let Some(s) = served.get_mut(i) {
                        *s = true;
                    }
                    out.push(job);
                }
                for ((order, segment), served) in round.plain.iter().zip(served) {
                    if served {
                        done[*order] = true;
                    } else {
                        // Every queue of the run was empty.
                        for q in segment {
                            empty[*q] = true;
                        }
                    }
                }
            }
            for ((q, asking), reply) in round.shards.iter().zip(replies) {
                let Reply::Shard(got) = reply else {
                    unreachable!("shard calls follow the plain one")
                };
                let n = got.len();
                out.extend(got);
                for order in &asking[..n.min(asking.len())] {
                    done[*order] = true;
                }
                if n < asking.len() {
                    empty[*q] = true;
                }
            }
        }
    }

    /// One `shard_fetch.lua` call, acking `acks` first (each job's task hears
    /// how its ack ended). When the call fails, the acks go to the ack task,
    /// which writes them again (a token found gone then, because the failed
    /// call had run, is reported fenced, as a retried ack would be).
    async fn fetch_acking(
        &self,
        broker: &RedisBroker,
        sq: &ShardQueue,
        want: usize,
        first: u64,
        acks: Vec<PendingAck>,
    ) -> Result<(Vec<Reserved>, Option<Duration>)> {
        if acks.is_empty() {
            return broker.fetch_shard_hinted(sq, want, first).await;
        }
        let pairs: Vec<(&str, &str)> = acks
            .iter()
            .map(|a| (a.token.as_str(), a.tenant.as_str()))
            .collect();
        let got = broker.fetch_shard_acking(sq, want, first, &pairs).await;
        drop(pairs);
        match got {
            Ok(got) => {
                let fenced = got.fenced.iter().copied().chain(std::iter::repeat(false));
                for (a, f) in acks.into_iter().zip(fenced) {
                    a.written(f);
                }
                Ok((got.jobs, got.rate_due))
            }
            Err(e) => {
                acks::hand_over(self.acks.as_ref(), acks);
                Err(e)
            }
        }
    }

    /// The next candidate of every order not yet served or exhausted.
    fn plan(
        &self,
        orders: &[Vec<usize>],
        pos: &mut [usize],
        done: &mut [bool],
        empty: &[bool],
    ) -> Round {
        let mut round = Round::default();
        for (i, order) in orders.iter().enumerate() {
            if done[i] {
                continue;
            }
            while pos[i] < order.len() && empty[order[pos[i]]] {
                pos[i] += 1;
            }
            let Some(&q) = order.get(pos[i]) else {
                done[i] = true;
                continue;
            };
            if self.is_shard(q) {
                round.shards.entry(q).or_default().push(i);
            } else {
                let segment = order[pos[i]..]
                    .iter()
                    .copied()
                    .take_while(|&j| !self.is_shard(j))
                    .filter(|&j| !empty[j])
                    .collect();
                round.plain.push((i, segment));
            }
        }
        round
    }
}

/// Fetches in flight at most: while one fetch's reply is on its way, the
/// permits of jobs that ended meanwhile go out in another.
const IN_FLIGHT: usize = 2;

/// Fetches in flight at most when fetches carry the acks of tenant-sharded
/// jobs: one, which then carries every ack and permit that gathered while the
/// previous one was on its way (a second fetch would split them into two
/// script calls, each paying the call's fixed cost, and under a greedy flood
/// measured a higher p99 wait for small tenants: docs/benchmarks-history.md).
const IN_FLIGHT_FOLDING: usize = 1;

/// What one fetch in flight gives back: the jobs it reserved (or its error),
/// the permits it held, and the waiter if it blocked on the wake-up lists.
struct Fetched {
    reserved: Result<Vec<Reserved>>,
    permits: Vec<Permit>,
    waiter: Option<Waiter>,
}

/// Fetches and dispatches jobs until the worker is told to stop fetching.
///
/// Up to [`IN_FLIGHT`] fetches run at once ([`IN_FLIGHT_FOLDING`] when they
/// carry sharded jobs' acks), each asking for as many jobs as
/// it holds permits (never more than the free slots). When a fetch comes back
/// short (some order found every queue empty) the worker is idle: its next
/// fetch, alone in flight, first blocks on the wake-up lists (for plain
/// queues on one server, in the same round trip, see
/// [`Fetcher::reserve_after_wait`]). Told to stop, the loop still takes in
/// the replies of fetches in flight and runs their jobs, so none is left
/// reserved and unseen.
///
/// `fold` brings the acks of sharded jobs that ended, each with its permit:
/// a fetch that can start now carries them (their permits are its own); while
/// fetches are in flight and not idle they wait for the next one (one comes
/// as soon as one returns); an idle, quiet or stopping loop hands them to the
/// ack task at once, and when the loop ends the channel closes (later acks
/// go to the ack task).
pub(crate) async fn fetch_loop(
    shared: &Arc<Shared>,
    semaphore: &Arc<Semaphore>,
    jobs: &mut JoinSet<()>,
    handle: &WorkerHandle,
    mut fold: Option<mpsc::UnboundedReceiver<PendingAck>>,
) {
    let stop = handle.stopped_fetching();
    tokio::pin!(stop);
    let broker = shared.client.broker();
    let queue_names: Vec<(String, bool)> = shared
        .queues
        .queues()
        .map(|q| (q.to_owned(), shared.sharded.iter().any(|s| s == q)))
        .collect();
    // Idle workers block on every queue's wake list.
    let wake_keys = broker.wake_keys(&queue_names);
    let fetcher = Fetcher::new(broker, &shared.identity, &queue_names, shared.acks.clone());
    // Acks handed over, waiting for a fetch to carry them.
    let mut carried: Vec<PendingAck> = Vec::new();
    // The waiter, unless an idle fetch in flight has it.
    let mut waiter = Some(broker.waiter(shared.config.poll_interval, wake_keys.clone()));
    let seq = AtomicU64::new(0);
    // Queues an operator paused, re-read at most every PAUSED_REFRESH (not
    // per fetch): a pause takes effect within that time.
    let mut paused = vec![false; queue_names.len()];
    let mut paused_read: Option<Instant> = None;
    let mut failures = 0u32;
    // The last fetch came back short: the next one waits for a wake-up first.
    let mut idle = false;
    let mut stopping = false;
    let mut inflight: FuturesUnordered<BoxFuture<'_, Fetched>> = FuturesUnordered::new();
    let in_flight = if fold.is_some() && !shared.sharded.is_empty() {
        IN_FLIGHT_FOLDING
    } else {
        IN_FLIGHT
    };
    loop {
        while jobs.try_join_next().is_some() {}
        if let Some(rx) = &mut fold {
            while let Ok(a) = rx.try_recv() {
                carried.push(a);
            }
        }
        let quiet = stopping || handle.is_quiet();
        if quiet && inflight.is_empty() {
            // Later acks go to the ack task (a send to the closed channel
            // gives them back); those already sent are handed over.
            if let Some(rx) = &mut fold {
                rx.close();
                while let Ok(a) = rx.try_recv() {
                    carried.push(a);
                }
            }
            acks::hand_over(shared.acks.as_ref(), carried.drain(..));
            return;
        }
        // An idle fetch waits alone; otherwise up to `in_flight` at once.
        let may_start = !quiet && inflight.len() < in_flight && (!idle || inflight.is_empty());
        if !carried.is_empty() && !may_start && (quiet || idle) {
            acks::hand_over(shared.acks.as_ref(), carried.drain(..));
        }
        let next_ack = async {
            match &mut fold {
                Some(rx) => rx.recv().await,
                None => std::future::pending().await,
            }
        };
        let first = if may_start && !carried.is_empty() {
            None
        } else {
            Some(tokio::select! {
            p = semaphore.clone().acquire_owned(), if may_start => p.expect("semaphore open"),
            Some(a) = next_ack => {
                carried.push(a);
                continue;
            }
            Some(done) = inflight.next() => {
                if let Some(w) = done.waiter {
                    waiter = Some(w);
                }
                let permits = done.permits;
                let fetched = match done.reserved {
                    Ok(v) => {
                        failures = 0;
                        v
                    }
                    Err(e) => {
                        failures += 1;
                        shared.redis_trouble("fetch", &e);
                        drop(permits);
                        if !stopping {
                            tokio::select! {
                                _ = backoff_sleep(failures) => {}
                                _ = &mut stop => stopping = true,
                            }
                        }
                        continue;
                    }
                };
                let (n, got) = (permits.len(), fetched.len());
                // Fewer than asked: some order found every queue empty.
                idle = got < n;
                if got > 0 {
                    dispatch(shared, jobs, fetched, permits);
                }
                if got == n && n > 1 && !stopping {
                    // A full batch: there may be more; wake another idle worker.
                    let _ = broker.wake(&wake_keys[0]).await;
                }
                continue;
            }
            _ = &mut stop, if !stopping => {
                stopping = true;
                continue;
            }
            Some(_) = jobs.join_next(), if !jobs.is_empty() => continue,
            })
        };
        // The carried acks' permits first, then free ones.
        let take = carried.len().min(MAX_BATCH);
        let mut acks: Vec<PendingAck> = carried.drain(..take).collect();
        let mut permits: Vec<Permit> = first.into_iter().collect();
        permits.extend(acks.iter_mut().filter_map(|a| a.permit.take()));
        while permits.len() < MAX_BATCH {
            match semaphore.clone().try_acquire_owned() {
                Ok(p) => permits.push(p),
                Err(_) => break,
            }
        }
        let n = permits.len();
        if paused_read.is_none_or(|t| t.elapsed() >= PAUSED_REFRESH) {
            paused_read = Some(Instant::now());
            match broker.paused_queues().await {
                Ok(names) => {
                    for (p, (q, _)) in paused.iter_mut().zip(&queue_names) {
                        let now = names.contains(q);
                        if now != *p {
                            tracing::info!(job.queue = %q, paused = now, "queue {}", if now { "paused: not fetching it" } else { "resumed" });
                        }
                        *p = now;
                    }
                }
                Err(e) => shared.redis_trouble("fetch", &e),
            }
        }
        let orders: Vec<Vec<usize>> = {
            let mut rng = rand::rng();
            let any_paused = paused.iter().any(|p| *p);
            (0..n)
                .map(|_| {
                    let mut o = Vec::new();
                    shared.queues.fetch_order(&mut rng, &mut o);
                    if any_paused {
                        o.retain(|q| !paused[*q]);
                    }
                    o
                })
                .collect()
        };
        let (fetcher, seq) = (&fetcher, &seq);
        // A fetch carrying acks does not wait (an ack may have made a tenant
        // runnable, and it must be written now).
        let blocking = if idle && acks.is_empty() {
            waiter.take()
        } else {
            None
        };
        inflight.push(Box::pin(async move {
            let Some(mut w) = blocking else {
                let reserved = fetcher.reserve(broker, &orders, seq, acks).await;
                return Fetched {
                    reserved,
                    permits,
                    waiter: None,
                };
            };
            // Idle: wait for a wake-up token or the poll interval, then
            // fetch (plain queues on one server: in the same round trip).
            let mut reserved = None;
            if fetcher.plain_only() {
                reserved = fetcher
                    .reserve_after_wait(broker, &mut w, &orders, seq)
                    .await
                    .map(Ok);
            } else {
                w.wait_at_most(fetcher.take_rate_due()).await;
            }
            let reserved = match reserved {
                Some(r) => r,
                None => fetcher.reserve(broker, &orders, seq, Vec::new()).await,
            };
            Fetched {
                reserved,
                permits,
                waiter: Some(w),
            }
        }));
    }
}

/// Hands each reserved job to a task of its own, with its permit.
fn dispatch(
    shared: &Arc<Shared>,
    jobs: &mut JoinSet<()>,
    fetched: Vec<Reserved>,
    permits: Vec<Permit>,
) {
    {
        let mut held = shared.held.lock().expect("held lock");
        held.extend(fetched.iter().map(|r| r.token.clone()));
    }
    for (reserved, permit) in fetched.into_iter().zip(permits) {
        let shared = shared.clone();
        // Boxed: the runtime moves a task's future (into its cell, and its
        // stages) by value; a job's run is a few kilobytes of state, a box
        // one pointer.
        jobs.spawn(Box::pin(async move {
            let token = reserved.token.clone();
            processor::process(shared.clone(), reserved, permit).await;
            shared.held.lock().expect("held lock").remove(&token);
        }));
    }
}
