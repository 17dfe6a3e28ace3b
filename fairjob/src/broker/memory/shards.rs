//! Tenant-sharded queues and in-progress records in memory: what
//! `shard_fetch.lua`, `shard_finish.lua`, `shard_ack_many.lua`,
//! `shard_policy.lua`, `finish.lua` and `front.lua` do, through the same
//! rules ([`crate::policy::dispatch`]). A sharded queue's jobs stay recorded
//! (so the fake lists them) while its [`ShardState`] keeps their order; a
//! fetched job moves into its worker's in-progress record, and leaves it
//! exactly once, fenced by its token.

use std::collections::VecDeque;
use std::time::Duration;

use super::{Entry, MemoryStore, State, Waiting};
use crate::broker::fetch::Reserved;
use crate::broker::finish::{Finish, FinishReply};
use crate::broker::token::Token;
use crate::policy::dispatch::reserve::{INBOX_MOVE, RATE_WAKE};
use crate::policy::dispatch::{Call, ShardPolicy, ShardState, inbox_tenant};

/// One tenant-sharded queue in memory: its state (jobs by recording number)
/// and its inbox (jobs put back for the next fetch to sort into shards).
#[derive(Debug, Default)]
pub(crate) struct MemShard {
    pub(crate) state: ShardState<u64>,
    pub(crate) inbox: VecDeque<u64>,
}

impl State {
    /// The entry recorded as `seq`, while it waits.
    fn entry(&self, seq: u64) -> Option<&Entry> {
        self.jobs.iter().find(|e| e.seq == seq)
    }

    /// Takes the waiting entry `seq` out of the records.
    pub(super) fn take_seq(&mut self, seq: u64) -> Option<Entry> {
        let i = self.jobs.iter().position(|e| e.seq == seq)?;
        Some(self.jobs.remove(i))
    }

    /// A push of recorded job `seq` to tenant `t`'s list of `queue` (at its
    /// front, or last), as `shard_push` does.
    pub(super) fn shard_push(&mut self, queue: &str, t: &str, seq: u64, front: bool) {
        let now = self.now_us();
        let sh = self.shards.entry(queue.to_owned()).or_default();
        let mut call = Call::new(&mut sh.state, now);
        call.push(t, seq, front);
        call.end();
    }

    /// Puts a job back where a plain queue's next fetch finds it first
    /// (`RPUSH`), or last (`LPUSH`); on a sharded queue, into its inbox (a
    /// released waiter) or its tenant's list (a job put back). Returns its
    /// recording number.
    pub(super) fn requeue(
        &mut self,
        queue: &str,
        payload: String,
        tenant: Option<&str>,
        front: bool,
    ) -> u64 {
        let sharded = self.shards.contains_key(queue);
        match (sharded, tenant) {
            (true, Some(t)) => {
                let seq = self.record(
                    payload,
                    Some(queue.to_owned()),
                    Some(t.to_owned()),
                    Waiting::Queued,
                );
                let now = self.now_us();
                let sh = self.shards.get_mut(queue).expect("sharded");
                let mut call = Call::new(&mut sh.state, now);
                call.push(t, seq, front);
                call.end();
                seq
            }
            (true, None) => {
                let seq = self.record(payload, Some(queue.to_owned()), None, Waiting::Queued);
                let sh = self.shards.get_mut(queue).expect("sharded");
                if front {
                    sh.inbox.push_front(seq);
                } else {
                    sh.inbox.push_back(seq);
                }
                seq
            }
            (false, _) => {
                let seq = self.record(payload, Some(queue.to_owned()), None, Waiting::Queued);
                if front {
                    let e = self.jobs.pop().expect("just recorded");
                    debug_assert_eq!(e.seq, seq);
                    self.jobs.insert(0, e);
                }
                seq
            }
        }
    }
}

impl MemoryStore {
    /// Declares `queue` tenant-sharded (its pushes go to tenant lists).
    pub(crate) fn shard_queue(&self, queue: &str) {
        self.lock().shards.entry(queue.to_owned()).or_default();
    }

    /// The queues declared (or pushed to as) tenant-sharded.
    pub(crate) fn sharded_queues(&self) -> Vec<String> {
        let mut q: Vec<String> = self.lock().shards.keys().cloned().collect();
        q.sort();
        q
    }

    /// The first waiting job of a plain queue that `pick` accepts, in
    /// recording order (nothing changes).
    pub(crate) fn first_plain(&self, mut pick: impl FnMut(&Entry) -> bool) -> Option<Entry> {
        let st = self.lock();
        st.jobs
            .iter()
            .find(|e| {
                e.waiting == Waiting::Queued
                    && !e.queue.as_ref().is_some_and(|q| st.shards.contains_key(q))
                    && pick(e)
            })
            .cloned()
    }

    /// Takes the waiting job recorded as `seq` out of its queue.
    pub(crate) fn take_waiting(&self, seq: u64) -> Option<Entry> {
        self.lock().take_seq(seq)
    }

    /// The job the next fetch of sharded `queue` would dispatch (nothing changes).
    pub(crate) fn next_dispatch(&self, queue: &str) -> Option<Entry> {
        let st = self.lock();
        let now = st.now_us();
        let sh = st.shards.get(queue)?;
        let (mut state, mut inbox) = (sh.state.clone(), sh.inbox.clone());
        let tenant_of = |seq: &u64| {
            st.entry(*seq)
                .map_or((String::new(), false), |e| inbox_tenant(&e.payload))
        };
        let f = Call::new(&mut state, now).fetch(1, &mut inbox, INBOX_MOVE, tenant_of, RATE_WAKE);
        f.jobs.first().and_then(|(_, seq)| st.entry(*seq).cloned())
    }

    /// Takes the first waiting job of a sharded queue that `pick` accepts
    /// out of its tenant's list (or the inbox), outside the dispatch order,
    /// counted as running for its tenant until its end.
    pub(crate) fn take_out_of_order(&self, mut pick: impl FnMut(&Entry) -> bool) -> Option<Entry> {
        let mut guard = self.lock();
        let st = &mut *guard;
        let now = st.now_us();
        let e = st
            .jobs
            .iter()
            .find(|e| {
                e.waiting == Waiting::Queued
                    && e.queue.as_ref().is_some_and(|q| st.shards.contains_key(q))
                    && pick(e)
            })?
            .clone();
        let queue = e.queue.clone().expect("a queue");
        let sh = st.shards.get_mut(&queue).expect("sharded");
        let t = match &e.shard {
            Some(t) => t.clone(),
            None => inbox_tenant(&e.payload).0,
        };
        sh.inbox.retain(|s| *s != e.seq);
        if let Some(list) = sh.state.lists.get_mut(&t) {
            list.retain(|s| *s != e.seq);
            if list.is_empty() {
                sh.state.lists.remove(&t);
            }
        }
        let running = sh.state.running(&t) + 1;
        sh.state.set_running(&t, running);
        sh.state.tenants.insert(t.clone());
        let mut call = Call::new(&mut sh.state, now);
        call.consider(&t);
        call.end();
        let mut entry = st.take_seq(e.seq)?;
        entry.shard = Some(t);
        Some(entry)
    }

    /// `shard_fetch.lua`: up to `n` jobs of `queue` in dispatch order into
    /// the in-progress record `record`, under tokens numbered from `seq`
    /// (`suffix`: the token's `|<encoded queue>`); and, when it dispatched
    /// fewer and a tenant waits for its rate, the wait until its rate allows.
    pub(crate) fn fetch_shard(
        &self,
        queue: &str,
        record: &str,
        suffix: &str,
        n: usize,
        mut seq: u64,
    ) -> (Vec<Reserved>, Option<Duration>) {
        let mut guard = self.lock();
        let st = &mut *guard;
        let now = st.now_us();
        let jobs = &st.jobs;
        let sh = st.shards.entry(queue.to_owned()).or_default();
        let tenant_of = |seq: &u64| {
            jobs.iter()
                .find(|e| e.seq == *seq)
                .map_or((String::new(), false), |e| inbox_tenant(&e.payload))
        };
        let fetched =
            Call::new(&mut sh.state, now).fetch(n, &mut sh.inbox, INBOX_MOVE, tenant_of, RATE_WAKE);
        let mut out = Vec::with_capacity(fetched.jobs.len());
        for (t, job) in fetched.jobs {
            let Some(mut entry) = st.take_seq(job) else {
                continue;
            };
            entry.shard = Some(t.clone());
            let token = format!("{seq}{suffix}|{t}");
            seq += 1;
            out.push(Reserved {
                token: token.clone(),
                raw: entry.payload.clone().into_bytes(),
            });
            st.inflight
                .entry(record.to_owned())
                .or_default()
                .insert(token, entry);
        }
        (out, fetched.next_rate_in.map(Duration::from_micros))
    }

    /// Records `entry` (taken out of its queue) as fetched into `record`.
    pub(crate) fn hold(&self, record: &str, token: &Token, entry: Entry) {
        self.lock()
            .inflight
            .entry(record.to_owned())
            .or_default()
            .insert(token.raw.clone(), entry);
    }

    /// A fetched job leaves its in-progress record `record` (`finish.lua`,
    /// `shard_finish.lua`), fenced by its token: acked, to `retry` (due after
    /// the delay on the virtual clock), to `dead` (dropped here), or back in
    /// its queue (its tenant's list) at the front or the tail.
    pub(crate) fn finish(&self, record: &str, token: &Token, action: Finish<'_>) -> FinishReply {
        let mut st = self.lock();
        let Some(_entry) = st.leave(record, token) else {
            return FinishReply::Fenced;
        };
        let queue = token.queue.clone();
        let tenant = token.tenant.as_deref();
        let back = match action {
            Finish::Front { payload } => Some((payload, true)),
            Finish::Back { payload } => Some((payload, false)),
            Finish::Retry { payload, delay } => {
                let due = st.now(0) + delay.as_secs_f64();
                st.record(payload.to_owned(), None, None, Waiting::Retry(due));
                None
            }
            Finish::Ack | Finish::Dead { .. } => None,
        };
        match tenant {
            Some(t) => {
                let now = st.now_us();
                let seq = back.map(|(payload, front)| {
                    let seq = st.record(
                        payload.to_owned(),
                        Some(queue.clone()),
                        Some(t.to_owned()),
                        Waiting::Queued,
                    );
                    (seq, front)
                });
                let sh = st.shards.entry(queue).or_default();
                Call::new(&mut sh.state, now).finish(t, seq);
            }
            None => {
                if let Some((payload, front)) = back {
                    st.requeue(&queue, payload.to_owned(), None, front);
                }
            }
        }
        FinishReply::Done
    }

    /// `shard_ack_many.lua`: acks of `(token, tenant)` pairs of the jobs
    /// of `queue` in `record`; true for each fenced one.
    pub(crate) fn ack_many(&self, record: &str, queue: &str, acks: &[(&str, &str)]) -> Vec<bool> {
        let mut st = self.lock();
        let mut fenced = Vec::with_capacity(acks.len());
        let mut tenants = Vec::new();
        for (token, tenant) in acks {
            let held = st
                .inflight
                .get_mut(record)
                .and_then(|r| r.remove(*token))
                .is_some();
            fenced.push(!held);
            if held {
                tenants.push((*tenant).to_owned());
            }
        }
        let now = st.now_us();
        let sh = st.shards.entry(queue.to_owned()).or_default();
        Call::new(&mut sh.state, now).ack(tenants.iter().map(String::as_str));
        fenced
    }

    /// `shard_policy.lua`: a change of `queue`'s settings for `field` (an
    /// encoded tenant or `*`), the tenants it may concern re-checked.
    pub(crate) fn set_shard_policy(&self, queue: &str, field: &str, change: &ShardPolicy) {
        let mut st = self.lock();
        let now = st.now_us();
        let sh = st.shards.entry(queue.to_owned()).or_default();
        let recheck: Vec<String> = if field == "*" {
            sh.state.tenants.iter().cloned().collect()
        } else {
            vec![field.to_owned()]
        };
        Call::new(&mut sh.state, now).set_policy(field, change, recheck.iter().map(String::as_str));
    }

    /// A sharded queue's state as the fake holds it, jobs by jid.
    pub(crate) fn shard_state(&self, queue: &str) -> ShardState<String> {
        let st = self.lock();
        let Some(sh) = st.shards.get(queue) else {
            return ShardState::default();
        };
        let jid = |seq: &u64| {
            st.entry(*seq)
                .and_then(|e| crate::wire::Payload::parse(e.payload.clone().into_bytes()).ok())
                .map(|p| p.jid())
                .unwrap_or_default()
        };
        let s = &sh.state;
        ShardState {
            ready: s.ready.clone(),
            rmember: s.rmember.clone(),
            seq: s.seq,
            running: s.running.clone(),
            policy: s.policy.clone(),
            tenants: s.tenants.clone(),
            floorq: s.floorq.clone(),
            lastpass: s.lastpass.clone(),
            vt: s.vt,
            rwait: s.rwait.clone(),
            pace: s.pace.clone(),
            lists: s
                .lists
                .iter()
                .map(|(t, l)| (t.clone(), l.iter().map(jid).collect()))
                .collect(),
        }
    }
}

impl State {
    /// Takes `token`'s job out of in-progress record `record` (`None`:
    /// fenced, it is not there).
    pub(super) fn leave(&mut self, record: &str, token: &Token) -> Option<Entry> {
        let held = self.inflight.get_mut(record)?;
        let e = held.remove(&token.raw);
        if held.is_empty() {
            self.inflight.remove(record);
        }
        e
    }
}
