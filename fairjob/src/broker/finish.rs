//! A fetched job leaves its worker's in-progress record exactly once, fenced by
//! its token: ack, retry, dead, or back to the front of its queue
//! (`finish.lua`; `shard_finish.lua` and `slot_release.lua` for a job of a
//! tenant-sharded queue), by its own worker or, for a dead worker's job, by a
//! reaper.
//!
//! The end of a job a relay keeps (fairjob-postgres' "Postgres stays the
//! truth", [`Holds::kept`]) is recorded by the same script that acks or
//! buries it: `done <jid>` / `dead <jid>` pushed to the relay's completion
//! list and the jid removed from its live set, so no crash can fall between
//! the two. On one server only: on a Redis Cluster those keys are in another
//! slot, and the worker records the end right after (`RedisBroker::ends_in_script`).

use std::time::Duration;

use super::push::ZSet;
use super::scripts::{FINISH, FRONT, SHARD_ACK_MANY, SHARD_FINISH, SLOT_RELEASE};
use super::slots::RESERVATION_TTL;
use super::{RedisBroker, SlotHold, Token, UniqueHold};
use crate::error::Result;
use crate::policy::batch::{Event, Outcome};

/// What happens to a fetched job when it leaves the in-progress record.
#[derive(Debug, Clone, Copy)]
pub enum Finish<'a> {
    /// Done.
    Ack,
    /// To `retry`, due after `delay` by Redis's clock.
    Retry {
        /// The edited payload (retry count, error).
        payload: &'a str,
        /// The backoff.
        delay: Duration,
    },
    /// To `dead`.
    Dead {
        /// The edited payload.
        payload: &'a str,
    },
    /// Back to the front of its queue (next to run).
    Front {
        /// The payload.
        payload: &'a str,
    },
    /// Back to the tail of its queue (of its tenant's shard on a sharded
    /// queue): a job that yielded.
    Back {
        /// The payload.
        payload: &'a str,
    },
}

/// What a job's end releases or records besides its in-progress entry.
#[derive(Debug, Clone, Copy, Default)]
pub struct Holds<'a> {
    /// The concurrency slot it held.
    pub slot: Option<&'a SlotHold>,
    /// Its unique lock (released by an ack or a burial).
    pub unique: Option<&'a UniqueHold>,
    /// Its jid when a relay keeps it until it ends: an ack or a burial then
    /// records its end in the relay's completion list in the same script
    /// (one server; see `RedisBroker::ends_in_script`).
    pub kept: Option<&'a str>,
    /// Its batch, when it is a member: an ack, a retry or a burial takes it
    /// out of the batch's sets in the same script (one server; see
    /// `RedisBroker::batch_in_script`).
    pub batch: Option<&'a MemberEnd>,
}

/// A batch member's end, as its exit writes it (`scripts/lib/batch.lua`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemberEnd {
    /// The batch's id.
    pub bid: String,
    /// The member's jid.
    pub jid: String,
    /// The run failed: its failure (`class: message`), kept for the batch's
    /// status; an ack of a failed run is a discard.
    pub failure: Option<String>,
    /// For a child batch's callback job (a member of the parent under the
    /// child's member id): the event it is the callback of.
    pub child: Option<Event>,
}

impl MemberEnd {
    /// The member's outcome when its run ends with `action` (`None`: a
    /// requeue or a yield, not an end).
    pub fn outcome(&self, action: &Finish<'_>) -> Option<Outcome> {
        let ended = !matches!(action, Finish::Front { .. } | Finish::Back { .. });
        match self.child {
            // Any end of the child's `complete` callback: the child ran.
            Some(Event::Complete) => return ended.then_some(Outcome::ChildRan),
            // Its `success` callback's success: the child succeeded.
            Some(Event::Success) => {
                let ok = matches!(action, Finish::Ack) && self.failure.is_none();
                return ok.then_some(Outcome::ChildSucceeded);
            }
            Some(Event::Death) => return None,
            None => {}
        }
        match action {
            Finish::Ack if self.failure.is_some() => Some(Outcome::Discarded),
            Finish::Ack => Some(Outcome::Ok),
            Finish::Retry { .. } => Some(Outcome::Retry),
            Finish::Dead { .. } => Some(Outcome::Dead),
            Finish::Front { .. } | Finish::Back { .. } => None,
        }
    }
}

/// Where a batched ack goes: see [`RedisBroker::shard_ack_record`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct AckRecord {
    /// The worker's in-progress record of the queue.
    pub key: String,
    /// The tenant-sharded queue.
    pub queue: String,
}

/// The reply of a finish (or a recovery) script: how the job's move ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReply {
    /// The job left the record as asked.
    Done,
    /// The token was gone: the job had been recovered elsewhere. Nothing
    /// changed, and the stale completion was counted (`fairjob:stat:fenced`).
    Fenced,
    /// A recovery found the owner's lease renewed: the job stays its own.
    OwnerAlive,
}

impl RedisBroker {
    /// Ends a job's stay in `identity`'s in-progress record (fenced by `token`).
    pub async fn finish(
        &self,
        identity: &str,
        token: &Token,
        action: Finish<'_>,
        clock_offset: i64,
        holds: Holds<'_>,
    ) -> Result<FinishReply> {
        self.finish_guarded(identity, token, action, clock_offset, holds, false)
            .await
    }

    /// Whether the end of a kept job ([`Holds::kept`]) is recorded by the
    /// script that acks or buries it: on one server. On a Redis Cluster the
    /// relay's completion list is in another slot than the job's records, so
    /// the caller records the end itself after the job's exit.
    pub(crate) fn ends_in_script(&self) -> bool {
        !self.is_cluster()
    }

    /// Where the ack of `token` goes when acks are written together
    /// ([`Self::ack_many`]): for a job of a tenant-sharded queue, that
    /// queue's in-progress record of `identity` (in the queue's hash slot).
    /// `None` for a job of a plain queue, whose ack is a lone `HDEL`
    /// ([`Self::finish`]); concurrent ones already share a write to Redis
    /// (the connection pipelines them), so batching them saves nothing.
    pub fn shard_ack_record(&self, identity: &str, token: &Token) -> Option<AckRecord> {
        token.is_sharded().then(|| AckRecord {
            key: self.inflight_of(identity, token),
            queue: token.queue.clone(),
        })
    }

    /// Acks jobs of one tenant-sharded queue that ended well, all held in
    /// `record`, in one `shard_ack_many.lua` call: for each, its entry
    /// leaves the record, fenced by its token, and its tenant's running count
    /// is released, as `shard_finish.lua` does for one. `acks` are (token,
    /// encoded tenant, kept jid) triples: a kept job's end is recorded in the
    /// same call on one server (`ends_in_script`). Returns, per ack,
    /// whether it was fenced (the job had been recovered from this worker);
    /// fenced completions are counted.
    pub async fn ack_many(
        &self,
        record: &AckRecord,
        acks: &[(&str, &str, Option<&str>)],
    ) -> Result<Vec<bool>> {
        if acks.is_empty() {
            return Ok(Vec::new());
        }
        #[cfg(feature = "testing")]
        if let Some(store) = self.memory() {
            let pairs: Vec<(&str, &str)> =
                acks.iter().map(|(t, tenant, _)| (*t, *tenant)).collect();
            return Ok(store.ack_many(&record.key, &record.queue, &pairs));
        }
        let sk = self.keys.shard(&record.queue);
        let mut inv = SHARD_ACK_MANY.call();
        inv.key(&record.key);
        for k in sk.state() {
            inv.key(k);
        }
        inv.key(&sk.wake);
        inv.arg(&sk.shard_prefix);
        let in_script = self.ends_in_script();
        let mut kept_any = false;
        for (token, tenant, kept) in acks {
            let kept = kept.filter(|_| in_script);
            kept_any |= kept.is_some();
            inv.arg(*token).arg(*tenant).arg(kept.unwrap_or_default());
        }
        if kept_any {
            inv.key(self.keys.relay_done()).key(self.keys.relay_live());
        }
        let gone: Vec<usize> = self.invoke(&inv).await?;
        Ok(self.fenced_acks(gone, acks.len()).await)
    }

    /// Which of `n` acks were fenced, from the 1-based positions a script
    /// found gone (`shard_ack_list`); the fenced completions are counted.
    pub(super) async fn fenced_acks(&self, gone: Vec<usize>, n: usize) -> Vec<bool> {
        let mut fenced = vec![false; n];
        for i in gone {
            if let Some(f) = i.checked_sub(1).and_then(|i| fenced.get_mut(i)) {
                *f = true;
            }
        }
        let stale = fenced.iter().filter(|f| **f).count() as u64;
        if let Err(e) = self.count("fenced", stale).await {
            // The acks are written; only the counter missed them.
            tracing::warn!(error = %e, stale, "could not count fenced completions");
        }
        fenced
    }

    /// A batch member's end as the exit scripts take it: the batch's hash,
    /// the jid, the outcome and the failure (`lib/batch.lua`).
    fn member_end_args(
        &self,
        inv: &mut super::scripts::Call<'_>,
        m: &MemberEnd,
        action: &Finish<'_>,
    ) {
        let outcome = m.outcome(action).unwrap_or(Outcome::Ok);
        inv.arg(self.keys.batch(&m.bid))
            .arg(&m.jid)
            .arg(outcome.as_str())
            .arg(m.failure.as_deref().unwrap_or_default());
    }

    /// Recovers a job of `identity` (the reaper): the same step as [`Self::finish`],
    /// done only if `identity`'s lease is still gone when the script runs, so a
    /// worker that came back since the reaper looked keeps its job.
    pub async fn recover(
        &self,
        identity: &str,
        token: &Token,
        action: Finish<'_>,
        clock_offset: i64,
        holds: Holds<'_>,
    ) -> Result<FinishReply> {
        self.finish_guarded(identity, token, action, clock_offset, holds, true)
            .await
    }

    async fn finish_guarded(
        &self,
        identity: &str,
        token: &Token,
        action: Finish<'_>,
        clock_offset: i64,
        holds: Holds<'_>,
        only_if_dead: bool,
    ) -> Result<FinishReply> {
        // A unique job's lock goes when the job succeeds or dies; a retry or
        // a requeue keeps it. So does a kept job's end get recorded.
        let ends = matches!(action, Finish::Ack | Finish::Dead { .. });
        let holds = Holds {
            slot: holds.slot,
            unique: holds.unique.filter(|_| ends),
            kept: holds.kept.filter(|_| ends && self.ends_in_script()),
            batch: holds
                .batch
                .filter(|b| b.outcome(&action).is_some() && self.batch_in_script()),
        };
        #[cfg(feature = "testing")]
        if let Some(store) = self.memory() {
            let reply = store.finish(&self.inflight_of(identity, token), token, action);
            if reply == FinishReply::Done {
                if let Some(hold) = holds.slot {
                    store.release_slot(hold, RESERVATION_TTL);
                }
                if let Some(u) = holds.unique {
                    store.unique_release(&self.unique_key(u), Some(&u.jid));
                }
                if let Some(m) = holds.batch
                    && let Some(outcome) = m.outcome(&action)
                {
                    // The batch part of the exit, after the job left its
                    // record (the store tells every dependent at once).
                    let failure = m.failure.as_deref().unwrap_or_default();
                    let key = self.keys.batch(&m.bid);
                    let (_, pushed) = store.batch_end(&key, &m.jid, outcome, failure, clock_offset);
                    store.notify(pushed).await?;
                }
            }
            return Ok(reply);
        }
        let (reply, workflow_left) = if token.is_sharded() || self.is_cluster() {
            self.finish_split(identity, token, action, clock_offset, holds, only_if_dead)
                .await?
        } else {
            self.finish_one(identity, token, action, clock_offset, holds, only_if_dead)
                .await?
        };
        if workflow_left && let Some(m) = holds.batch {
            // The exit told a workflow's steps what one call's budget
            // allows; the rest now.
            self.workflow_drain(&m.bid, clock_offset).await?;
        }
        Ok(reply)
    }

    /// [`Self::finish_guarded`] on one server for a plain queue's job: one
    /// HDEL in the common case, else one `finish.lua`. Also says whether the
    /// exit left a workflow's steps to tell (see `workflow_drain`).
    async fn finish_one(
        &self,
        identity: &str,
        token: &Token,
        action: Finish<'_>,
        clock_offset: i64,
        holds: Holds<'_>,
        only_if_dead: bool,
    ) -> Result<(FinishReply, bool)> {
        let Holds {
            slot,
            unique: release,
            kept,
            batch,
        } = holds;
        if !only_if_dead
            && matches!(action, Finish::Ack)
            && slot.is_none()
            && release.is_none()
            && kept.is_none()
            && batch.is_none()
        {
            // The common case needs no script: one HDEL, fenced by the token.
            let removed: i64 = self
                .query(
                    redis::cmd("HDEL")
                        .arg(self.own_inflight(identity).as_ref())
                        .arg(&token.raw),
                )
                .await?;
            if removed == 0 {
                self.count("fenced", 1).await?;
                return Ok((FinishReply::Fenced, false));
            }
            return Ok((FinishReply::Done, false));
        }
        let mut inv = FINISH.call();
        inv.key(self.keys.inflight(identity))
            .key(self.keys.stat("fenced"));
        let (name, payload, delay): (&str, &[u8], f64) = match &action {
            Finish::Ack => ("ack", b"", 0.0),
            Finish::Retry { payload, delay } => ("retry", payload.as_bytes(), delay.as_secs_f64()),
            Finish::Dead { payload } => ("dead", payload.as_bytes(), 0.0),
            Finish::Front { payload } => ("front", payload.as_bytes(), 0.0),
            Finish::Back { payload } => ("back", payload.as_bytes(), 0.0),
        };
        let dest = match &action {
            Finish::Retry { .. } => self.keys.retry(),
            Finish::Dead { .. } => self.keys.dead(),
            _ => self.keys.queue(&token.queue),
        };
        inv.key(dest).key(self.keys.wake(&token.queue));
        inv.arg(token.raw.as_str())
            .arg(name)
            .arg(payload)
            .arg(delay)
            .arg(clock_offset);
        match slot {
            Some(hold) => self.slot_part(&mut inv, identity, hold),
            None => {
                inv.arg("").arg("").arg("").arg("").arg("");
            }
        }
        if only_if_dead {
            inv.arg("1").key(self.keys.lease(identity));
        } else {
            inv.arg("");
        }
        match release {
            Some(u) => inv
                .arg(self.keys.unique_prefix(&u.queue))
                .arg(&u.digest)
                .arg(&u.jid),
            None => inv.arg("").arg("").arg(""),
        };
        if let Some(jid) = kept {
            // After the lease (a recovery's): finish.lua finds them last.
            inv.arg(jid)
                .key(self.keys.relay_done())
                .key(self.keys.relay_live());
        } else if batch.is_some() {
            inv.arg("");
        }
        if let Some(m) = batch {
            self.member_end_args(&mut inv, m, &action);
        }
        let done: i64 = self.invoke(&inv).await?;
        let reply = match done {
            1 | 3 => FinishReply::Done,
            2 => FinishReply::OwnerAlive,
            _ => FinishReply::Fenced,
        };
        Ok((reply, done == 3))
    }

    /// [`Self::finish_guarded`] for a job of a tenant-sharded queue, and for
    /// every job in cluster mode. The step that takes the job out of its
    /// record (shard_finish.lua; for a plain queue an HDEL, or front.lua)
    /// touches only keys in the queue's cluster slot; Sidekiq's `retry` and
    /// `dead` sets and a held slot's keys live elsewhere, so those are
    /// separate steps, ordered so that a crash between them repeats a job
    /// rather than losing it: the retry/dead entry is written first and taken
    /// back if the job turns out fenced. A kept job's end (`kept`, one server
    /// only) is recorded by shard_finish.lua, the commit point. Also says
    /// whether the exit left a workflow's steps to tell.
    async fn finish_split(
        &self,
        identity: &str,
        token: &Token,
        action: Finish<'_>,
        clock_offset: i64,
        holds: Holds<'_>,
        only_if_dead: bool,
    ) -> Result<(FinishReply, bool)> {
        let Holds {
            slot,
            unique: release,
            kept,
            batch,
        } = holds;
        let sk = self.keys.shard(&token.queue);
        // The lock is released in the ending script when it shares its slot
        // (a sharded queue's own lock), else right after the end.
        let in_step = release.filter(|u| token.is_sharded() && u.queue == token.queue);
        if only_if_dead {
            // The reaper saw the lease gone; look again just before the move (a
            // worker that came back in between keeps its job).
            let alive: bool = self
                .query(redis::cmd("EXISTS").arg(self.keys.lease(identity)))
                .await?;
            if alive {
                return Ok((FinishReply::OwnerAlive, false));
            }
        }
        let written = match &action {
            Finish::Retry { payload, delay } => {
                self.zset_add(ZSet::Retry, delay.as_secs_f64(), payload, clock_offset)
                    .await?;
                Some((ZSet::Retry, *payload))
            }
            Finish::Dead { payload } => {
                self.zset_add(ZSet::Dead, 0.0, payload, clock_offset)
                    .await?;
                Some((ZSet::Dead, *payload))
            }
            Finish::Ack | Finish::Front { .. } | Finish::Back { .. } => None,
        };
        // The commit point: the job leaves the in-progress record.
        let done: i64 = if token.is_sharded() {
            let (name, payload): (&str, &[u8]) = match &action {
                Finish::Front { payload } => ("front", payload.as_bytes()),
                Finish::Back { payload } => ("back", payload.as_bytes()),
                _ => ("done", b""),
            };
            let mut inv = SHARD_FINISH.call();
            inv.key(sk.inflight(identity));
            for k in sk.state() {
                inv.key(k);
            }
            inv.key(&sk.wake);
            inv.arg(token.raw.as_str())
                .arg(name)
                .arg(payload)
                .arg(&sk.shard_prefix)
                .arg(token.tenant.as_deref().unwrap_or_default());
            match in_step {
                Some(u) => inv
                    .arg(self.keys.unique_prefix(&u.queue))
                    .arg(&u.digest)
                    .arg(&u.jid),
                None => inv.arg("").arg("").arg(""),
            };
            if let Some(jid) = kept {
                let state = if matches!(action, Finish::Dead { .. }) {
                    "dead"
                } else {
                    "done"
                };
                inv.arg(state).arg(jid);
                inv.key(self.keys.relay_done()).key(self.keys.relay_live());
            } else if batch.is_some() {
                inv.arg("").arg("");
            }
            if let Some(m) = batch {
                self.member_end_args(&mut inv, m, &action);
                inv.arg(clock_offset);
            }
            self.invoke(&inv).await?
        } else if let Finish::Front { payload } | Finish::Back { payload } = &action {
            let side = if matches!(action, Finish::Back { .. }) {
                "back"
            } else {
                ""
            };
            let mut inv = FRONT.call();
            inv.key(self.keys.queue(&token.queue))
                .key(self.wake_key(&token.queue, false))
                .key(sk.inflight(identity));
            inv.arg(payload.as_bytes())
                .arg(token.raw.as_str())
                .arg(side);
            self.invoke(&inv).await?
        } else {
            self.query(
                redis::cmd("HDEL")
                    .arg(sk.inflight(identity))
                    .arg(&token.raw),
            )
            .await?
        };
        if done == 0 {
            if let Some((set, payload)) = written {
                self.zset_remove(set, payload).await?;
            }
            self.count("fenced", 1).await?;
            return Ok((FinishReply::Fenced, false));
        }
        if let Some(hold) = slot {
            self.release_slot(identity, token, hold).await?;
        }
        if let Some(u) = release.filter(|_| in_step.is_none()) {
            self.unique_release(&self.unique_key(u), Some(&u.jid))
                .await?;
        }
        Ok((FinishReply::Done, done == 3))
    }

    /// A job parked by a limiter (slot or rate) leaves this worker's
    /// in-progress record, and on a sharded queue stops counting as running
    /// for its tenant. 1 if it was there, 0 if a reaper recovered it meanwhile.
    pub(super) async fn leave_record(&self, identity: &str, token: &Token) -> Result<i64> {
        let Some(tenant) = &token.tenant else {
            return self
                .query(
                    redis::cmd("HDEL")
                        .arg(self.inflight_of(identity, token))
                        .arg(&token.raw),
                )
                .await;
        };
        let sk = self.keys.shard(&token.queue);
        let mut inv = SHARD_FINISH.call();
        inv.key(sk.inflight(identity));
        for key in sk.state() {
            inv.key(key);
        }
        inv.key(&sk.wake);
        inv.arg(token.raw.as_str())
            .arg("done")
            .arg("")
            .arg(&sk.shard_prefix)
            .arg(tenant.as_str());
        self.invoke(&inv).await
    }

    /// Releases the slot a job held, after the job left its record: one
    /// script in the limit's slot. On one server it also forgets the slot
    /// record and pushes released waiters to their queues; in cluster mode
    /// those are further steps (the record after, the waiters delivered from
    /// the releasing set, see `deliver_released`).
    pub async fn release_slot(&self, identity: &str, token: &Token, hold: &SlotHold) -> Result<()> {
        #[cfg(feature = "testing")]
        if let Some(store) = self.memory() {
            store.release_slot(hold, RESERVATION_TTL);
            return Ok(());
        }
        let mut inv = SLOT_RELEASE.call();
        self.slot_part(&mut inv, identity, hold);
        inv.arg(token.raw.as_str());
        if !self.is_cluster() {
            let _: i64 = self.invoke(&inv).await?;
            return Ok(());
        }
        inv.arg("c");
        let released: Vec<Vec<u8>> = self.invoke(&inv).await?;
        let _: i64 = self
            .query(
                redis::cmd("HDEL")
                    .arg(self.keys.slots(identity))
                    .arg(&token.raw),
            )
            .await?;
        self.deliver_released(&self.keys.limit(&hold.full_key).releasing, released)
            .await
    }

    /// Cluster mode: puts released slot or rate waiters (entries staged in
    /// the limiter's releasing set) at the front of their queues, each in its
    /// queue's slot, then drops them from the set. The push is the commit
    /// point: a crash before the drop delivers the entry again once its
    /// lease runs out (the reaper), a duplicate, never a loss.
    pub(crate) async fn deliver_released(
        &self,
        releasing: &str,
        entries: Vec<Vec<u8>>,
    ) -> Result<()> {
        for entry in entries {
            let fields = super::slots::waiter_fields(&entry);
            let (Some(queue), Some(payload)) = (fields.get(1), fields.get(3)) else {
                tracing::warn!("dropping a malformed released slot waiter entry");
                let _: i64 = self
                    .query(redis::cmd("ZREM").arg(releasing).arg(&entry))
                    .await?;
                continue;
            };
            let queue = String::from_utf8_lossy(queue);
            let mut inv = FRONT.call();
            inv.key(self.keys.queue(&queue))
                .key(self.wake_key(&queue, false));
            inv.arg(payload.as_slice());
            let _: i64 = self.invoke(&inv).await?;
            let _: i64 = self
                .query(redis::cmd("ZREM").arg(releasing).arg(&entry))
                .await?;
        }
        Ok(())
    }

    /// Appends a held slot's keys and arguments (the shape `slot_release` in
    /// lib/slots.lua takes, from finish.lua and slot_release.lua; in cluster
    /// mode the releasing set takes the slot record's place).
    fn slot_part(&self, inv: &mut super::scripts::Call<'_>, identity: &str, hold: &SlotHold) {
        let lk = self.keys.limit(&hold.full_key);
        inv.key(&lk.limit)
            .key(&lk.holders)
            .key(&lk.reserved)
            .key(&lk.waiters);
        if self.is_cluster() {
            inv.key(&lk.releasing);
        } else {
            inv.key(self.keys.slots(identity));
        }
        inv.arg(&hold.holder)
            .arg(hold.default_limit)
            .arg(RESERVATION_TTL.as_millis() as u64);
        let (qp, wp) = self.keys.queue_and_wake_prefixes();
        inv.arg(qp).arg(wp);
    }
}
