//! Enqueue: `push.lua` (reroute window, queue choice, push to a list or a
//! tenant shard, wake-up, all in one step) and `schedule.lua` (Sidekiq's
//! `schedule`, `retry` and `dead` sorted sets by Redis's clock).

use redis::Value;

use super::scripts::{Call, PUSH, SCHEDULE, UNIQUE_PUSH};
use super::unique::UniqueLock;
use super::{RedisBroker, Src, keys};
use crate::error::{Error, Result};

/// When a scheduled job is due.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum When {
    /// Seconds after Redis's clock now.
    In(f64),
    /// Absolute epoch seconds.
    At(f64),
}

/// What became of one job of a push.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pushed {
    /// Pushed to this candidate (0 = its own queue, `i` = rule `i`'s queue).
    To(usize),
    /// Not pushed: its promoting-record entry was already gone (another
    /// poller promoted it).
    SourceGone,
    /// Not pushed: its unique key is held by this jid.
    Duplicate(String),
    /// Its unique key is held by this jid, which was waiting and took the
    /// job's payload (on_conflict = replace).
    Replaced(String),
}

/// One job's push, prepared by the client.
#[derive(Debug, Clone)]
pub(crate) struct PushSpec {
    /// Remove this entry from its promoting record first; skip if it is gone.
    pub src: Option<Src>,
    /// Register in a reroute window and choose among the candidates.
    pub reroute: Option<RerouteSpec>,
    /// The payload up to the queue value, and after it.
    pub before: String,
    pub after: String,
    /// Candidate 0 is the job's own queue; candidate i is rule i's queue.
    pub candidates: Vec<Candidate>,
    /// A unique job's lock, taken in the push's step.
    pub unique: Option<UniqueLock>,
    /// Mark this member in the queue's slot (`Keys::pushed`) in the push's
    /// step; skip the push if it is already marked (see [`super::Src::once`]).
    pub once: Option<String>,
}

/// The reroute window a push registers in and the rules it is judged by.
#[derive(Debug, Clone)]
pub(crate) struct RerouteSpec {
    pub window_key: String,
    pub member: String,
    pub max_window_secs: u64,
    /// (threshold, per seconds), in declaration order.
    pub rules: Vec<(u64, u64)>,
}

impl PushSpec {
    /// Nothing to decide in Redis: no promotion record, no reroute window, one
    /// plain queue.
    /// Plain but for a unique lock that refuses duplicates
    /// (`unique_push.lua`).
    fn is_unique_plain(&self) -> bool {
        self.src.is_none()
            && self.reroute.is_none()
            && self.candidates.len() == 1
            && !self.candidates[0].sharded
            && self.once.is_none()
            && self.unique.as_ref().is_some_and(|u| !u.replace)
    }

    fn is_plain(&self) -> bool {
        self.src.is_none()
            && self.reroute.is_none()
            && self.candidates.len() == 1
            && !self.candidates[0].sharded
            && self.unique.is_none()
            && self.once.is_none()
    }
}

/// A queue a push may choose.
#[derive(Debug, Clone)]
pub(crate) struct Candidate {
    pub queue: String,
    pub sharded: bool,
    pub tenant: Option<String>,
}

/// A push script's work budget, in units of one plain job (about a
/// microsecond of Redis each): a batch is cut into calls of at most this much,
/// sent together (pipelined on the connection, run one after another), so no
/// single call holds Redis for more than a fraction of a millisecond and
/// workers fetch between them. (At 250, a 1,000-job `push_bulk` with two
/// reroute rules ran 35-job scripts of ~0.5 ms on average, dozens of them
/// over 1 ms on a busy machine: `bench`'s SLOWLOG section.)
const PUSH_BUDGET: u32 = 120;

/// Jobs per `unique_push.lua` call (a lock and a list entry each: about
/// 3 µs of Redis).
const UNIQUE_PUSH_BATCH: usize = 100;

/// How long a once mark outlives its push when the claim's drop never
/// removed it (a crash between the two): longer than any claim waits for a
/// poller to take it over.
const ONCE_KEEP: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

/// Cuts `costs` (in order) into consecutive ranges of at most [`PUSH_BUDGET`]
/// each (a single job over budget gets a range of its own).
pub(super) fn budget_ranges(costs: impl IntoIterator<Item = u32>) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let (mut start, mut cost, mut n) = (0, 0, 0);
    for c in costs {
        if cost + c > PUSH_BUDGET && n > start {
            out.push(start..n);
            (start, cost) = (n, 0);
        }
        cost += c;
        n += 1;
    }
    out.push(start..n);
    out
}

/// Cuts `jobs` into `push.lua` calls as [`budget_ranges`] does, a job whose
/// reroute window an earlier job of the same call already judged costing
/// only its `ZADD` (see [`push_cost`]).
pub(super) fn push_ranges(jobs: &[PushSpec]) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut seen: std::collections::HashSet<(&str, u64)> = std::collections::HashSet::new();
    let (mut start, mut cost) = (0, 0);
    for (n, job) in jobs.iter().enumerate() {
        let window = job
            .reroute
            .as_ref()
            .map(|r| (r.window_key.as_str(), r.max_window_secs));
        let mut c = push_cost(job, window.is_some_and(|w| seen.contains(&w)));
        if cost + c > PUSH_BUDGET && n > start {
            out.push(start..n);
            (start, cost) = (n, 0);
            seen.clear();
            c = push_cost(job, false);
        }
        cost += c;
        if let Some(w) = window {
            seen.insert(w);
        }
    }
    out.push(start..jobs.len());
    out
}

/// A job's cost in a push script, in plain-job units: a tenant shard costs its
/// dispatch bookkeeping; a reroute window a sorted-set update, its trim and
/// expiry and a count per distinct rule period (`lib/reroute.lua`), or, when
/// `again` (an earlier job of the same call judged the same window), the
/// update alone: the call keeps that window's counts.
pub(super) fn push_cost(job: &PushSpec, again: bool) -> u32 {
    let shard = if job.candidates.iter().any(|c| c.sharded) {
        5
    } else {
        0
    };
    let window = match &job.reroute {
        None => 0,
        Some(_) if again => 2,
        Some(r) => {
            let mut pers: Vec<u64> = r.rules.iter().map(|(_, per)| *per).collect();
            pers.sort_unstable();
            pers.dedup();
            4 + pers.len() as u32
        }
    };
    let unique = if job.unique.is_some() { 2 } else { 0 };
    1 + shard + window + unique
}

impl RedisBroker {
    /// Pushes a batch of prepared jobs: one script call per [`PUSH_BUDGET`]
    /// of work, all sent at once, in order (jobs of one queue keep their order).
    pub(crate) async fn push(&self, jobs: &[PushSpec], clock_offset: i64) -> Result<Vec<Pushed>> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        #[cfg(feature = "testing")]
        if let Some(store) = self.memory() {
            return store.push(jobs, clock_offset).await;
        }
        let pushed = self.push_unreplicated(jobs, clock_offset).await?;
        if self.options.wait_replicas > 0 {
            let written: Vec<String> = jobs
                .iter()
                .zip(&pushed)
                // In a cluster a promoted job was waited for before its claim
                // was dropped (`push_promoted`): no second `WAIT` for it.
                .filter(|(job, _)| !(self.is_cluster() && job.src.is_some()))
                .filter_map(|(job, p)| match p {
                    Pushed::To(c) => job.candidates.get(*c).map(|c| self.keys.queue(&c.queue)),
                    _ => None,
                })
                .collect();
            self.wait_replicated(&written).await?;
        }
        Ok(pushed)
    }

    /// Waits until `options.wait_replicas` replicas have every write made so
    /// far on the connection(s) that wrote `keys` (Redis `WAIT`, on each node
    /// that took one of them).
    pub(super) async fn wait_replicated(&self, keys: &[String]) -> Result<()> {
        let wanted = self.options.wait_replicas;
        let timeout_ms = self.options.wait_timeout.as_millis() as u64;
        let mut cmd = redis::cmd("WAIT");
        cmd.arg(wanted).arg(timeout_ms);
        let mut slots: Vec<u16> = Vec::new();
        for key in keys {
            let slot = keys::cluster_slot(key);
            if slots.contains(&slot) {
                continue;
            }
            slots.push(slot);
            let acked: u32 = self.query_on_slot_of(&cmd, key).await?;
            if acked < wanted {
                return Err(crate::Error::NotReplicated {
                    acked,
                    wanted,
                    timeout_ms,
                });
            }
            if !self.is_cluster() {
                break;
            }
        }
        Ok(())
    }

    /// [`Self::push`] without waiting for replicas.
    async fn push_unreplicated(&self, jobs: &[PushSpec], clock_offset: i64) -> Result<Vec<Pushed>> {
        if self.is_cluster() {
            return self.push_cluster(jobs, clock_offset).await;
        }
        if jobs.iter().all(PushSpec::is_plain) {
            return self.push_plain(jobs).await;
        }
        if jobs.iter().all(PushSpec::is_unique_plain)
            && jobs
                .iter()
                .all(|j| j.candidates[0].queue == jobs[0].candidates[0].queue)
        {
            return self.push_unique_plain(jobs).await;
        }
        if jobs
            .iter()
            .any(|j| j.src.is_some() && j.candidates.iter().any(|c| c.sharded))
        {
            return self.push_promoted(jobs, clock_offset).await;
        }
        // One pipeline: Redis runs the calls in order, so a bulk push keeps
        // its jobs in order even when the script must be loaded first.
        let calls: Vec<Call<'_>> = push_ranges(jobs)
            .into_iter()
            .map(|r| self.push_script(&jobs[r], clock_offset))
            .collect();
        let replies: Vec<Vec<Value>> = self.invoke_all(&calls).await?;
        replies.into_iter().flatten().map(pushed).collect()
    }

    /// Jobs with nothing to decide (no reroute window, no promotion record, a
    /// plain queue): no script, as Sidekiq pushes — `SADD queues`, one `LPUSH`
    /// per queue with its jobs in order, and a wake-up, in one round trip.
    async fn push_plain(&self, jobs: &[PushSpec]) -> Result<Vec<Pushed>> {
        let mut queues: Vec<(&str, Vec<String>)> = Vec::new();
        for job in jobs {
            let queue = job.candidates[0].queue.as_str();
            let qjson = serde_json::to_string(queue).expect("strings encode");
            let mut payload =
                String::with_capacity(job.before.len() + qjson.len() + job.after.len());
            payload.push_str(&job.before);
            payload.push_str(&qjson);
            payload.push_str(&job.after);
            match queues.iter_mut().find(|(q, _)| *q == queue) {
                Some((_, list)) => list.push(payload),
                None => queues.push((queue, vec![payload])),
            }
        }
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        pipe.sadd(
            self.keys.queues(),
            queues.iter().map(|(q, _)| *q).collect::<Vec<_>>(),
        )
        .ignore();
        for (queue, payloads) in &queues {
            pipe.lpush(self.keys.queue(queue), payloads);
            let wake = self.keys.wake(queue);
            pipe.lpush(&wake, "1").ignore().ltrim(&wake, 0, 0).ignore();
        }
        // One reply per queue's LPUSH: a refusal of all of them wrote no job
        // (the caller may repeat the push); of some, wrote some.
        let replies: Vec<redis::RedisResult<Value>> = self.pipe(&pipe).await?;
        let written = replies.iter().filter(|r| r.is_ok()).count();
        if let Some(Err(e)) = replies.into_iter().find(Result::is_err) {
            return Err(partly(Error::from_redis(e), written));
        }
        Ok(vec![Pushed::To(0); jobs.len()])
    }

    /// Unique jobs that refuse duplicates, all bound for one plain queue with
    /// nothing else to decide: `unique_push.lua`, one call per
    /// [`UNIQUE_PUSH_BATCH`] jobs, sent together and run in order.
    async fn push_unique_plain(&self, jobs: &[PushSpec]) -> Result<Vec<Pushed>> {
        let queue = &jobs[0].candidates[0].queue;
        let qjson = serde_json::to_string(queue).expect("strings encode");
        let calls: Vec<Call<'_>> = jobs
            .chunks(UNIQUE_PUSH_BATCH)
            .map(|part| {
                let mut inv = UNIQUE_PUSH.call();
                inv.key(self.keys.queues())
                    .key(self.keys.queue(queue))
                    .key(self.wake_key(queue, false))
                    .arg(queue);
                for job in part {
                    let u = job.unique.as_ref().expect("a unique job");
                    let mut payload =
                        String::with_capacity(job.before.len() + qjson.len() + job.after.len());
                    payload.push_str(&job.before);
                    payload.push_str(&qjson);
                    payload.push_str(&job.after);
                    inv.key(u.key()).arg(payload).arg(&u.jid).arg(u.ttl_ms);
                }
                inv
            })
            .collect();
        let replies: Vec<Vec<Value>> = self.invoke_all(&calls).await?;
        replies.into_iter().flatten().map(pushed).collect()
    }

    /// One `push.lua` call for `jobs` (none promoted to a sharded queue).
    pub(super) fn push_script<'s>(&self, jobs: &[PushSpec], clock_offset: i64) -> Call<'s> {
        let mut inv = PUSH.call();
        // The queues the batch may go to, once each; candidates index them.
        let mut queues: Vec<(&str, bool)> = Vec::new();
        let mut index = std::collections::HashMap::new();
        for c in jobs.iter().flat_map(|j| &j.candidates) {
            index
                .entry((c.queue.as_str(), c.sharded))
                .or_insert_with(|| {
                    queues.push((c.queue.as_str(), c.sharded));
                    queues.len()
                });
        }
        // In cluster mode the caller registers plain queues in `queues` (a
        // slot of its own).
        let has_plain = !self.is_cluster() && queues.iter().any(|(_, sharded)| !sharded);
        if has_plain {
            inv.key(self.keys.queues());
        }
        inv.arg(clock_offset)
            .arg(jobs.len())
            .arg(if has_plain { "1" } else { "0" })
            .arg(queues.len());
        for (queue, sharded) in &queues {
            let qjson = serde_json::to_string(queue).expect("strings encode");
            inv.arg(*queue).arg(qjson);
            if *sharded {
                let sk = self.keys.shard(queue);
                inv.arg("s").arg(&sk.shard_prefix);
                for k in sk.state() {
                    inv.key(k);
                }
                inv.key(&sk.wake);
            } else {
                inv.arg("p");
                inv.key(self.keys.queue(queue))
                    .key(self.wake_key(queue, false));
            }
        }
        for job in jobs {
            match &job.src {
                Some(src) => {
                    inv.arg(src.member.as_bytes()).key(&src.record);
                }
                None => {
                    inv.arg("");
                }
            }
            match &job.reroute {
                Some(r) => {
                    inv.arg(&r.member).key(&r.window_key);
                    inv.arg(r.max_window_secs).arg(r.rules.len());
                    for (threshold, per) in &r.rules {
                        inv.arg(*threshold).arg(*per);
                    }
                }
                None => {
                    inv.arg("");
                }
            }
            inv.arg(job.before.as_bytes()).arg(job.after.as_bytes());
            let tenant = job.candidates.first().and_then(|c| c.tenant.as_deref());
            inv.arg(tenant.map(keys::encode).unwrap_or_default());
            inv.arg(job.candidates.len());
            for c in &job.candidates {
                inv.arg(index[&(c.queue.as_str(), c.sharded)]);
            }
            UniqueLock::args(job.unique.as_ref(), &mut inv);
            match &job.once {
                Some(member) => {
                    inv.arg(member)
                        .key(self.keys.pushed(&job.candidates[0].queue))
                        .arg(ONCE_KEEP.as_millis() as u64);
                }
                None => {
                    inv.arg("");
                }
            }
        }
        inv
    }

    /// Adds payloads to `schedule`, a unique job's lock taken in the same
    /// step: per entry `Pushed::To(0)` when added, else the holder's jid.
    pub(crate) async fn schedule(
        &self,
        entries: &[(When, String, Option<UniqueLock>)],
        clock_offset: i64,
    ) -> Result<Vec<Pushed>> {
        if entries.is_empty() {
            return Ok(Vec::new());
        }
        #[cfg(feature = "testing")]
        if let Some(store) = self.memory() {
            return Ok(store.schedule(entries, clock_offset));
        }
        if self.is_cluster() && entries.iter().any(|(_, _, u)| u.is_some()) {
            return self.schedule_unique_cluster(entries, clock_offset).await;
        }
        self.schedule_in_one_step(entries, clock_offset).await
    }

    /// `schedule.lua` for `entries`, their locks (if any) in its step.
    pub(super) async fn schedule_in_one_step(
        &self,
        entries: &[(When, String, Option<UniqueLock>)],
        clock_offset: i64,
    ) -> Result<Vec<Pushed>> {
        let mut inv = SCHEDULE.call();
        inv.key(self.keys.schedule()).arg(clock_offset);
        for (when, payload, unique) in entries {
            match when {
                When::In(secs) => inv.arg("in").arg(*secs),
                When::At(secs) => inv.arg("at").arg(*secs),
            };
            inv.arg(payload.as_bytes());
            UniqueLock::args(unique.as_ref(), &mut inv);
        }
        let replies: Vec<Value> = self.invoke(&inv).await?;
        if self.options.wait_replicas > 0 {
            self.wait_replicated(&[self.keys.schedule()]).await?;
        }
        replies
            .into_iter()
            .map(|r| {
                Ok(match pushed(r)? {
                    Pushed::To(_) => Pushed::To(0),
                    other => other,
                })
            })
            .collect()
    }

    /// Adds one payload to a Sidekiq sorted set by Redis's clock: `retry` (due
    /// in `secs`), or `dead` (buried now, trimmed as Sidekiq trims it).
    pub(crate) async fn zset_add(
        &self,
        set: ZSet,
        secs: f64,
        payload: &str,
        clock_offset: i64,
    ) -> Result<()> {
        let (key, mode) = match set {
            ZSet::Retry => (self.keys.retry(), "in"),
            ZSet::Dead => (self.keys.dead(), "dead"),
        };
        let mut inv = SCHEDULE.call();
        inv.key(&key)
            .arg(clock_offset)
            .arg(mode)
            .arg(secs)
            .arg(payload.as_bytes());
        UniqueLock::args(None, &mut inv);
        let _: Value = self.invoke(&inv).await?;
        // In a cluster the caller's commit point (the job leaving its
        // in-progress record) is on another primary: with `wait_replicas`, the
        // set's write reaches the replicas first, so a failover of the set's
        // primary cannot lose a job whose record is already gone.
        if self.is_cluster() && self.options.wait_replicas > 0 {
            self.wait_replicated(std::slice::from_ref(&key)).await?;
        }
        Ok(())
    }

    /// Takes one payload back out of a Sidekiq sorted set (undoes [`Self::zset_add`]).
    pub(crate) async fn zset_remove(&self, set: ZSet, payload: &str) -> Result<()> {
        let key = match set {
            ZSet::Retry => self.keys.retry(),
            ZSet::Dead => self.keys.dead(),
        };
        let _: i64 = self.query(redis::cmd("ZREM").arg(key).arg(payload)).await?;
        Ok(())
    }
}

/// The error of a push of which `written` commands (queues' pushes or
/// script calls) went through before another was refused: the caller must
/// not repeat it blindly.
pub(super) fn partly(err: Error, written: usize) -> Error {
    if written > 0 && err.is_safe_to_repeat() {
        Error::MaybeEnqueued {
            jids: Vec::new(),
            source: Box::new(err),
        }
    } else {
        err
    }
}

/// A `push.lua` (or `schedule.lua`) reply entry: 0 when the source entry was
/// gone, else the 1-based chosen candidate; `{'d', jid}` a duplicate of `jid`,
/// `{'r', jid}` replaced into `jid`.
pub(super) fn pushed(v: Value) -> Result<Pushed> {
    let bad = || crate::Error::Malformed(format!("unexpected push reply {v:?}"));
    match &v {
        Value::Int(0) => Ok(Pushed::SourceGone),
        Value::Int(i) if *i > 0 => Ok(Pushed::To(*i as usize - 1)),
        Value::Array(items) if items.len() == 2 => {
            let text = |x: &Value| match x {
                Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
                Value::SimpleString(s) => Some(s.clone()),
                _ => None,
            };
            let (Some(kind), Some(jid)) = (text(&items[0]), text(&items[1])) else {
                return Err(bad());
            };
            match kind.as_str() {
                "d" => Ok(Pushed::Duplicate(jid)),
                "r" => Ok(Pushed::Replaced(jid)),
                _ => Err(bad()),
            }
        }
        _ => Err(bad()),
    }
}

/// Sidekiq's sorted sets a finished job may go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ZSet {
    Retry,
    Dead,
}

#[cfg(test)]
mod tests {
    use super::{Candidate, PUSH_BUDGET, PushSpec, RerouteSpec, budget_ranges, push_ranges};

    #[test]
    fn budget_ranges_cut_in_order_and_keep_every_job() {
        assert_eq!(budget_ranges([]), vec![0..0]);
        assert_eq!(budget_ranges([1, 1, 1]), vec![0..3]);
        let half = PUSH_BUDGET / 2;
        assert_eq!(budget_ranges([half, half, 1, half]), vec![0..2, 2..4]);
        // A job over budget alone in its range, never an empty one before it.
        assert_eq!(
            budget_ranges([PUSH_BUDGET + 5, 1, PUSH_BUDGET]),
            vec![0..1, 1..2, 2..3]
        );
    }

    fn rerouted(window: &str) -> PushSpec {
        PushSpec {
            src: None,
            reroute: Some(RerouteSpec {
                window_key: window.to_owned(),
                member: "jid:x".to_owned(),
                max_window_secs: 86_400,
                // Two rules of one period: one count.
                rules: vec![(100, 3600), (1000, 3600)],
            }),
            before: String::new(),
            after: String::new(),
            candidates: vec![Candidate {
                queue: "q".to_owned(),
                sharded: false,
                tenant: Some("t".to_owned()),
            }],
            unique: None,
            once: None,
        }
    }

    #[test]
    fn a_window_judged_earlier_in_the_call_costs_its_update_alone() {
        let first = super::push_cost(&rerouted("w"), false);
        let again = super::push_cost(&rerouted("w"), true);
        assert_eq!((first, again), (6, 3));
        // One window: the first job pays for the window, the rest for their ZADD.
        let one: Vec<PushSpec> = (0..100).map(|_| rerouted("w")).collect();
        let cut = push_ranges(&one);
        assert_eq!(cut[0], 0..((PUSH_BUDGET - first) / again + 1) as usize);
        assert_eq!(cut.iter().map(|r| r.len()).sum::<usize>(), 100);
        // A window is paid for again in each call (a call's counts are its own).
        let distinct: Vec<PushSpec> = (0..100).map(|i| rerouted(&format!("w{i}"))).collect();
        let cut = push_ranges(&distinct);
        assert_eq!(cut[0], 0..(PUSH_BUDGET / first) as usize);
        for r in &cut {
            assert!(r.len() as u32 * first <= PUSH_BUDGET);
        }
        assert_eq!(cut.last().map(|r| r.end), Some(100));
    }
}
