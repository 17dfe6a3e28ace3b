//! The broker's in-memory backend for fairjob's testing mode (feature
//! `testing`): a [`MemoryStore`] holding what `push.lua` and `schedule.lua`
//! would have written, on a virtual clock, per store (nothing global).
//!
//! A push follows `push.lua`'s reroute semantics: per window key a set of
//! `jid:<jid>` scored by whole seconds of the clock; the job is registered
//! first (a re-push of a jid moves its score and uses no new quota), entries
//! older than the longest window are trimmed and the key's expiry refreshed,
//! then every rule with `threshold < count(now - per ..= +inf)` matches and the
//! last matching rule picks the queue. The client decides what is counted (a
//! pinned queue never is), exactly as for Redis. Unique locks follow
//! `lib/unique.lua` (take, replace a waiting holder, release by jid) on the
//! virtual clock.
//!
//! Tenant-sharded queues, slot limits and rate limiters run the same rules
//! as the scripts, from [`crate::policy`]: a sharded queue is a
//! [`ShardState`](crate::policy::dispatch::ShardState) of the recorded jobs
//! (`shards.rs`), fetched into in-progress records and ended through them, a
//! limit is a [`SlotState`](crate::policy::slots::SlotState) or a
//! [`Limiter`](crate::policy::gcra::Limiter) (`limits.rs`); the broker's
//! operations choose this store in testing mode (`tests/tests/twins.rs`
//! compares it with Redis). Batches and workflows keep a
//! [`Membership`](crate::policy::batch::Membership) each (`batches.rs`): a
//! member's end goes through the rules in its exit, and fired callbacks and
//! released steps are pushed to their queues (`tests/tests/batches.rs` and
//! `workflows.rs` compare it with Redis).
//!
//! Layer 2, like the rest of the broker: it moves payload strings and knows
//! nothing of job types. Whoever runs jobs in testing mode (the `testing`
//! module) watches pushes through a [`PushObserver`].

mod batches;
mod limits;
mod shards;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::future::BoxFuture;

use super::keys;
use super::push::{PushSpec, Pushed, When};
use super::token::Token;
use super::unique::UniqueLock;
use crate::error::Result;
use crate::policy::reroute::Window;
use crate::policy::unique;

/// Told of every push into a [`MemoryStore`] before the push returns (the
/// inline mode performs the jobs there). The store holds it strongly: it
/// must not hold the store (or a client on it) strongly in turn.
pub(crate) trait PushObserver: Send + Sync {
    /// `seqs` were just recorded as waiting in their queues.
    fn pushed(&self, seqs: Vec<u64>) -> BoxFuture<'static, Result<()>>;
}

/// Where a recorded job waits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Waiting {
    /// In its queue, to be performed.
    Queued,
    /// In `schedule`, due at these epoch seconds (its queue is not chosen yet).
    Scheduled(f64),
    /// In `retry`, due at these epoch seconds.
    Retry(f64),
}

/// One recorded job.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    /// Recording order (each push, schedule or retry gets the next number).
    pub seq: u64,
    /// The payload as Redis would hold it.
    pub payload: String,
    /// The queue chosen by the push (`None` while scheduled or retrying).
    pub queue: Option<String>,
    /// For a tenant-sharded queue, the shard's encoded tenant (`""` = none).
    pub shard: Option<String>,
    pub waiting: Waiting,
}

impl Entry {
    /// The in-progress token a worker would hold for this job.
    pub(crate) fn token(&self, queue: &str) -> Token {
        let mut raw = format!("{}|{}", self.seq, keys::encode(queue));
        if let Some(t) = &self.shard {
            raw.push('|');
            raw.push_str(t);
        }
        Token {
            raw,
            queue: queue.to_owned(),
            tenant: self.shard.clone(),
        }
    }
}

/// Jobs, reroute windows and a virtual clock, in memory.
pub(crate) struct MemoryStore {
    state: Mutex<State>,
    observer: OnceLock<Arc<dyn PushObserver>>,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.lock();
        f.debug_struct("MemoryStore")
            .field("jobs", &st.jobs.len())
            .field("windows", &st.windows.len())
            .field("ahead", &st.ahead)
            .finish()
    }
}

#[derive(Default)]
struct State {
    /// How far the virtual clock is ahead of the system clock.
    ahead: Duration,
    next_seq: u64,
    /// Waiting jobs, in recording order.
    jobs: Vec<Entry>,
    windows: HashMap<String, Window>,
    /// Iterable jobs' state by jid, as `it-{jid}` would hold it.
    iterations: HashMap<String, Iteration>,
    /// Unique locks by key, as `lib/unique.lua` keeps them.
    uniques: HashMap<String, unique::Lock>,
    /// Tenant-sharded queues by name.
    shards: HashMap<String, shards::MemShard>,
    /// In-progress records: identity → token → the job.
    inflight: HashMap<String, BTreeMap<String, Entry>>,
    /// Slot limits by full key.
    slots: HashMap<String, crate::policy::slots::SlotState>,
    /// Rate limiters by full key.
    limiters: HashMap<String, crate::policy::gcra::Limiter>,
    /// Batches and workflows by their hash's key.
    batches: HashMap<String, batches::MemBatch>,
    /// When set, the virtual clock stands still here (plus `ahead`).
    frozen: Option<Duration>,
}

/// One iterable job's state: the fence, the cursor, runtime, cancelled, executions.
#[derive(Default)]
struct Iteration {
    fence: String,
    cursor: Option<String>,
    runtime: f64,
    cancelled: bool,
    executions: u64,
}

impl State {
    fn record(
        &mut self,
        payload: String,
        queue: Option<String>,
        shard: Option<String>,
        waiting: Waiting,
    ) -> u64 {
        self.next_seq += 1;
        let seq = self.next_seq;
        self.jobs.push(Entry {
            seq,
            payload,
            queue,
            shard,
            waiting,
        });
        seq
    }

    /// `unique_take`: `None` when taken (or held by `jid`), else the holder.
    fn unique_take(&mut self, u: &UniqueLock, now: f64) -> Option<String> {
        let key = format!("{}{}", u.prefix, u.digest);
        let mut slot = self.uniques.remove(&key);
        let holder = unique::take(&mut slot, &u.jid, u.ttl_ms, now);
        if let Some(l) = slot {
            self.uniques.insert(key, l);
        }
        holder
    }

    /// A replacing push: the holder's waiting entry (as `is_where` accepts
    /// it) takes `payload` (under the holder's jid) and `waiting`; returns
    /// whether the holder was found waiting.
    fn unique_replace(
        &mut self,
        u: &UniqueLock,
        holder: &str,
        payload: &str,
        now: f64,
        is_where: impl Fn(&Entry) -> bool,
        waiting: Option<Waiting>,
    ) -> bool {
        let key = format!("{}{}", u.prefix, u.digest);
        let Some(p) = self.uniques.get(&key).and_then(|l| l.waiting.clone()) else {
            return false;
        };
        let Some(entry) = self.jobs.iter_mut().find(|e| e.payload == p && is_where(e)) else {
            return false;
        };
        let new = unique::swap_jid(payload, &u.jid, holder);
        entry.payload = new.clone();
        if let Some(w) = waiting {
            entry.waiting = w;
        }
        let l = self.uniques.get_mut(&key).expect("checked");
        l.waiting = Some(new);
        l.expires_at = now + u.ttl_ms as f64 / 1000.0;
        true
    }

    fn unique_waits_as(&mut self, u: &UniqueLock, payload: &str) {
        if let Some(l) = self.uniques.get_mut(&format!("{}{}", u.prefix, u.digest)) {
            l.waiting = Some(payload.to_owned());
        }
    }

    fn now(&self, clock_offset: i64) -> f64 {
        self.since_epoch().as_secs_f64() + clock_offset as f64
    }

    /// The virtual clock since the epoch.
    fn since_epoch(&self) -> Duration {
        let base = self.frozen.unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
        });
        base + self.ahead
    }

    /// The virtual clock in µs (the scripts' clock).
    fn now_us(&self) -> u64 {
        self.since_epoch().as_micros() as u64
    }
}

impl MemoryStore {
    /// `iterate_claim.lua` in memory.
    pub(crate) fn iteration_claim(&self, jid: &str, token: &str) -> super::IterationState {
        let mut st = self.lock();
        let it = st.iterations.entry(jid.to_owned()).or_default();
        it.fence = token.to_owned();
        it.executions += 1;
        super::IterationState {
            cursor: it.cursor.clone(),
            runtime: it.runtime,
            cancelled: it.cancelled,
            executions: it.executions,
        }
    }

    /// `iterate_save.lua` in memory.
    pub(crate) fn iteration_save(
        &self,
        jid: &str,
        token: &str,
        cursor: Option<&str>,
        runtime: f64,
        _save: super::SaveInfo,
    ) -> super::Saved {
        let mut st = self.lock();
        let Some(it) = st.iterations.get_mut(jid).filter(|it| it.fence == token) else {
            return super::Saved::Fenced;
        };
        let Some(cursor) = cursor else {
            st.iterations.remove(jid);
            return super::Saved::Saved;
        };
        it.cursor = Some(cursor.to_owned());
        it.runtime += runtime;
        if it.cancelled {
            super::Saved::Cancelled
        } else {
            super::Saved::Saved
        }
    }

    /// The saved cursor of an iterable job, if any.
    pub(crate) fn iteration_cursor(&self, jid: &str) -> Option<String> {
        self.lock().iterations.get(jid)?.cursor.clone()
    }

    /// Sidekiq's `cancel!` in memory. True when newly cancelled.
    pub(crate) fn iteration_cancel(&self, jid: &str) -> bool {
        let mut st = self.lock();
        let it = st.iterations.entry(jid.to_owned()).or_default();
        !std::mem::replace(&mut it.cancelled, true)
    }

    /// An empty store whose clock is the system's.
    pub(crate) fn new() -> Arc<MemoryStore> {
        Arc::new(MemoryStore {
            state: Mutex::new(State::default()),
            observer: OnceLock::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panicking job never holds this lock; a poisoned one still holds
        // consistent data (every change is a single push or remove).
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sets the observer told of every push (once).
    pub(crate) fn observe(&self, observer: Arc<dyn PushObserver>) {
        let _ = self.observer.set(observer);
    }

    /// The virtual clock.
    pub(crate) fn now(&self) -> SystemTime {
        UNIX_EPOCH + self.lock().since_epoch()
    }

    /// Stops the virtual clock at `at` (moved only by [`Self::advance`] from then on).
    pub(crate) fn freeze(&self, at: SystemTime) {
        let mut st = self.lock();
        st.frozen = Some(at.duration_since(UNIX_EPOCH).unwrap_or_default());
        st.ahead = Duration::ZERO;
    }

    /// Moves the virtual clock forward.
    pub(crate) fn advance(&self, by: Duration) {
        self.lock().ahead += by;
    }

    /// Records a batch of pushes as `push.lua` would make them, then tells
    /// the observer. A push from a batch's staged set takes its member out
    /// of it, and is skipped when it is no longer there (pushed already);
    /// no other promoting source is kept here, so none is ever gone.
    pub(crate) async fn push(&self, jobs: &[PushSpec], clock_offset: i64) -> Result<Vec<Pushed>> {
        let now = self.lock().now(clock_offset);
        let (pushed, seqs) = self.record_pushes(jobs, now);
        self.notify(seqs).await?;
        Ok(pushed)
    }

    /// Tells the observer that `seqs` were recorded as waiting in their
    /// queues (a push, or what a batch's script pushes itself: a fired
    /// callback, a released workflow step).
    pub(crate) async fn notify(&self, seqs: Vec<u64>) -> Result<()> {
        match self.observer.get() {
            Some(observer) if !seqs.is_empty() => observer.pushed(seqs).await,
            _ => Ok(()),
        }
    }

    /// Records pushes at `now_f` (epoch seconds of the virtual clock).
    fn record_pushes(&self, jobs: &[PushSpec], now_f: f64) -> (Vec<Pushed>, Vec<u64>) {
        let mut st = self.lock();
        let now = now_f.floor() as i64;
        let mut pushed = Vec::with_capacity(jobs.len());
        let mut seqs = Vec::with_capacity(jobs.len());
        for job in jobs {
            if let Some(src) = &job.src
                && st.claim_staged(&src.record, &src.member) == Some(false)
            {
                pushed.push(Pushed::SourceGone);
                continue;
            }
            if let Some(u) = &job.unique {
                let holder = st.unique_take(u, now_f);
                if let (Some(holder), false) = (holder, job.src.is_some()) {
                    let own = &job.candidates[0];
                    let payload = format!(
                        "{}{}{}",
                        job.before,
                        serde_json::to_string(&own.queue).expect("strings encode"),
                        job.after
                    );
                    let replaced = u.replace
                        && !own.sharded
                        && st.unique_replace(
                            u,
                            &holder,
                            &payload,
                            now_f,
                            |e| {
                                e.waiting == Waiting::Queued && e.queue.as_ref() == Some(&own.queue)
                            },
                            None,
                        );
                    pushed.push(if replaced {
                        Pushed::Replaced(holder)
                    } else {
                        Pushed::Duplicate(holder)
                    });
                    continue;
                }
            }
            let mut chosen = 0;
            if let Some(r) = &job.reroute {
                chosen = st.windows.entry(r.window_key.clone()).or_default().choose(
                    now,
                    now_f,
                    &r.member,
                    r.max_window_secs as i64,
                    &r.rules,
                );
            }
            let cand = &job.candidates[chosen.min(job.candidates.len() - 1)];
            let qjson = serde_json::to_string(&cand.queue).expect("strings encode");
            let payload = format!("{}{}{}", job.before, qjson, job.after);
            if let Some(u) = job.unique.as_ref().filter(|u| u.replace) {
                st.unique_waits_as(u, &payload);
            }
            let shard = cand
                .sharded
                .then(|| cand.tenant.as_deref().map(keys::encode).unwrap_or_default());
            let seq = st.record(
                payload,
                Some(cand.queue.clone()),
                shard.clone(),
                Waiting::Queued,
            );
            if let Some(t) = &shard {
                st.shard_push(&cand.queue, t, seq, false);
            }
            seqs.push(seq);
            pushed.push(Pushed::To(chosen));
        }
        (pushed, seqs)
    }

    /// Adds payloads to `schedule`, as `schedule.lua` does (unique locks too).
    pub(crate) fn schedule(
        &self,
        entries: &[(When, String, Option<UniqueLock>)],
        clock_offset: i64,
    ) -> Vec<Pushed> {
        let mut st = self.lock();
        let now = st.now(clock_offset);
        let mut out = Vec::with_capacity(entries.len());
        for (when, payload, unique) in entries {
            let due = match when {
                When::In(secs) => now + secs,
                When::At(secs) => *secs,
            };
            if let Some(u) = unique
                && let Some(holder) = st.unique_take(u, now)
            {
                let replaced = u.replace
                    && st.unique_replace(
                        u,
                        &holder,
                        payload,
                        now,
                        |e| matches!(e.waiting, Waiting::Scheduled(_)),
                        Some(Waiting::Scheduled(due)),
                    );
                out.push(if replaced {
                    Pushed::Replaced(holder)
                } else {
                    Pushed::Duplicate(holder)
                });
                continue;
            }
            if let Some(u) = unique.as_ref().filter(|u| u.replace) {
                st.unique_waits_as(u, payload);
            }
            st.record(payload.clone(), None, None, Waiting::Scheduled(due));
            out.push(Pushed::To(0));
        }
        out
    }

    /// `unique_release.lua`: drops the lock at `key` if `jid` holds it
    /// (`None`: whoever does).
    pub(crate) fn unique_release(&self, key: &str, jid: Option<&str>) -> bool {
        let mut st = self.lock();
        let now = st.now(0);
        let mut slot = st.uniques.remove(key);
        let held = unique::release(&mut slot, jid, now);
        if let Some(l) = slot {
            st.uniques.insert(key.to_owned(), l);
        }
        held
    }

    /// Every waiting job, in recording order.
    pub(crate) fn entries(&self) -> Vec<Entry> {
        self.lock().jobs.clone()
    }

    /// Takes out the scheduled and retrying jobs that are due, earliest first
    /// (their caller pushes them again, as the scheduler promotes them).
    pub(crate) fn take_due(&self) -> Vec<Entry> {
        let mut st = self.lock();
        let now = st.now(0);
        let due_at = |e: &Entry| match e.waiting {
            Waiting::Queued => None,
            Waiting::Scheduled(at) | Waiting::Retry(at) => (at <= now).then_some(at),
        };
        let mut due: Vec<Entry> = Vec::new();
        st.jobs.retain(|e| {
            if due_at(e).is_some() {
                due.push(e.clone());
                false
            } else {
                true
            }
        });
        due.sort_by(|a, b| {
            due_at(a)
                .partial_cmp(&due_at(b))
                .expect("finite")
                .then(a.seq.cmp(&b.seq))
        });
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::{Candidate, RerouteSpec};

    fn spec(jid: &str, rules: &[(u64, u64)], max_window_secs: u64) -> PushSpec {
        let candidate = |queue: &str| Candidate {
            queue: queue.to_owned(),
            sharded: false,
            tenant: Some("acme".to_owned()),
        };
        let mut candidates = vec![candidate("q")];
        candidates.extend((1..=rules.len()).map(|i| candidate(&format!("rule{i}"))));
        PushSpec {
            src: None,
            reroute: Some(RerouteSpec {
                window_key: "w".to_owned(),
                member: format!("jid:{jid}"),
                max_window_secs,
                rules: rules.to_vec(),
            }),
            before: r#"{"class":"A","queue":"#.to_owned(),
            after: "}".to_owned(),
            candidates,
            unique: None,
            once: None,
        }
    }

    fn chosen(store: &MemoryStore, jid: &str, rules: &[(u64, u64)], max: u64, at: f64) -> usize {
        match store.record_pushes(&[spec(jid, rules, max)], at).0[..] {
            [Pushed::To(i)] => i,
            ref other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_window_counts_from_now_minus_per_inclusive_in_whole_seconds() {
        let store = MemoryStore::new();
        let rule = [(1, 60)];
        assert_eq!(chosen(&store, "a", &rule, 3600, 1000.9), 0);
        // 60 s later to the second (1060.2 floors to 1060): `a` at 1000 is
        // still counted, as ZCOUNT now-per +inf counts it.
        assert_eq!(chosen(&store, "b", &rule, 3600, 1060.2), 1);
        // One second further, `a` has left the window.
        assert_eq!(chosen(&store, "c", &rule, 3600, 1061.0), 1, "b and c");
        assert_eq!(chosen(&store, "d", &rule, 3600, 1200.0), 0);
    }

    #[test]
    fn the_last_matching_rule_wins_and_a_repush_uses_no_quota() {
        let store = MemoryStore::new();
        let rules = [(1, 3600), (2, 60)];
        assert_eq!(chosen(&store, "a", &rules, 3600, 100.0), 0);
        assert_eq!(chosen(&store, "b", &rules, 3600, 100.0), 1);
        assert_eq!(chosen(&store, "c", &rules, 3600, 100.0), 2);
        // `c` again: still three members.
        assert_eq!(chosen(&store, "c", &rules, 3600, 100.0), 2);
        // Later: only the hour rule matches (a re-push moved `c` to 500).
        assert_eq!(chosen(&store, "c", &rules, 3600, 500.0), 1);
    }

    #[test]
    fn old_entries_are_trimmed_and_an_idle_key_expires() {
        let store = MemoryStore::new();
        let rule = [(1, 60)];
        assert_eq!(chosen(&store, "a", &rule, 60, 0.0), 0);
        assert_eq!(chosen(&store, "b", &rule, 60, 59.0), 1);
        // The key expires 60 s after its last push: nothing is left just
        // after 119 (without the expiry, `b` at 59 would still count).
        assert_eq!(chosen(&store, "c", &rule, 60, 119.5), 0);
        assert_eq!(store.lock().windows["w"].members.len(), 1);
    }
}
