//! A tenant-sharded queue's state, as its Redis keys hold it
//! (`ShardKeys::state()` and the tenants' lists): [`ShardState`], with
//! [`ZSet`] for Redis's sorted sets. The twin of
//! `broker/scripts/lib/dispatch/state.lua`; a test reads the keys of a real
//! queue into one and compares it with the model's.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// A field of a sharded queue's `running` hash that no tenant can have
/// (`!` is always encoded) and longer than Redis's listpack limit for a
/// field, so the hash stays a hash table at any number of tenants (reading or
/// writing one count is O(1), not a scan). The scripts write it with the
/// counts; readers of the whole hash skip it. Not part of [`ShardState`].
pub const RUNNING_MARK: &str = "!hash-table-------------------------------------------------------";

/// The same mark in a sharded queue's `rmember` hash (tenant → its member of
/// `ready`), written with every member, gone with the last.
pub const RMEMBER_MARK: &str = RUNNING_MARK;

/// The member of `ready` that keeps the sorted set a skiplist at any number
/// of tenants (longer than Redis's 64-byte listpack limit for a member; no
/// tenant's member starts with `!`), at `+inf` so it is always last: a read
/// of the order by rank stops at it, counts leave it out (`ZCOUNT -inf
/// (+inf`), and the key goes with the last tenant. Not part of [`ShardState`].
pub const READY_MARK: &str =
    "!skiplist-------------------------------------------------------------";

/// A sorted set as Redis keeps one: each member once, with a score; in order
/// of score, then of the member's bytes.
#[derive(Debug, Clone, Default)]
pub struct ZSet {
    scores: BTreeMap<String, f64>,
    order: BTreeSet<Ranked>,
}

#[derive(Debug, Clone)]
struct Ranked(f64, String);

impl PartialEq for Ranked {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Ranked {}
impl PartialOrd for Ranked {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Ranked {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0
            .total_cmp(&other.0)
            .then_with(|| self.1.cmp(&other.1))
    }
}

impl PartialEq for ZSet {
    fn eq(&self, other: &Self) -> bool {
        self.scores == other.scores
    }
}

impl ZSet {
    /// `ZADD`: sets `member`'s score.
    pub fn add(&mut self, member: &str, score: f64) {
        if let Some(old) = self.scores.insert(member.to_owned(), score) {
            self.order.remove(&Ranked(old, member.to_owned()));
        }
        self.order.insert(Ranked(score, member.to_owned()));
    }

    /// `ZREM`: true when `member` was there.
    pub fn remove(&mut self, member: &str) -> bool {
        match self.scores.remove(member) {
            Some(old) => {
                self.order.remove(&Ranked(old, member.to_owned()));
                true
            }
            None => false,
        }
    }

    /// `ZSCORE`.
    pub fn score(&self, member: &str) -> Option<f64> {
        self.scores.get(member).copied()
    }

    /// The first member and its score (`ZRANGE 0 0 WITHSCORES`).
    pub fn first(&self) -> Option<(&str, f64)> {
        self.order.first().map(|r| (r.1.as_str(), r.0))
    }

    /// `ZCARD`.
    pub fn len(&self) -> usize {
        self.scores.len()
    }

    /// No member.
    pub fn is_empty(&self) -> bool {
        self.scores.is_empty()
    }

    /// Members and scores, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, f64)> {
        self.order.iter().map(|r| (r.1.as_str(), r.0))
    }

    /// The first `limit` members scored at most `max`, in order
    /// (`ZRANGEBYSCORE -inf max LIMIT 0 limit`).
    pub fn up_to(&self, max: f64, limit: usize) -> Vec<String> {
        self.iter()
            .take_while(|(_, s)| *s <= max)
            .take(limit)
            .map(|(m, _)| m.to_owned())
            .collect()
    }

    /// `ZREMRANGEBYSCORE -inf max`.
    pub fn remove_up_to(&mut self, max: f64) {
        for m in self.up_to(max, usize::MAX) {
            self.remove(&m);
        }
    }
}

impl FromIterator<(String, f64)> for ZSet {
    fn from_iter<I: IntoIterator<Item = (String, f64)>>(iter: I) -> Self {
        let mut z = ZSet::default();
        for (m, s) in iter {
            z.add(&m, s);
        }
        z
    }
}

/// A tenant's pace state (`rstate`): `t:<tenant>`, `s:<tenant>`, and while
/// it waits for its rate `p:<tenant>` and `m:<tenant>`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Pace {
    /// The theoretical arrival time of its next start (µs).
    pub tat: Option<u64>,
    /// Its last starts (µs), oldest first (`s:`, 16 digits each).
    pub starts: Option<Vec<u64>>,
    /// While it waits in `rwait`: the pass and the member it left the order with.
    pub kept: Option<(f64, String)>,
}

impl Pace {
    fn is_empty(&self) -> bool {
        self.tat.is_none() && self.starts.is_none() && self.kept.is_none()
    }
}

/// One tenant-sharded queue: its dispatch order, running counts, settings,
/// pace and every tenant's pending jobs (`J`: a payload, or the testing
/// store's handle of one).
#[derive(Debug, Clone, PartialEq)]
pub struct ShardState<J> {
    /// Runnable tenants by pass (`ready`: member `<15-digit seq><tenant>`).
    pub ready: ZSet,
    /// Each tenant's member of `ready` (`rmember`).
    pub rmember: BTreeMap<String, String>,
    /// The last sequence number taken (`seq`).
    pub seq: u64,
    /// Running jobs per tenant (`running`; no entry at 0).
    pub running: BTreeMap<String, u64>,
    /// The settings hash as stored (`policy`: `c:<t>`, `w:<t>`, …).
    pub policy: BTreeMap<String, String>,
    /// Tenants with pending or running jobs (`tenants`).
    pub tenants: BTreeSet<String>,
    /// Runnable tenants under their floor, by pass (`floorq`).
    pub floorq: ZSet,
    /// Passes of tenants out of the order while ahead of vt (`lastpass`).
    pub lastpass: ZSet,
    /// The virtual time (`vt`; 0 when unset).
    pub vt: f64,
    /// Tenants waiting for their rate, by the µs it allows a start (`rwait`).
    pub rwait: ZSet,
    /// Each tenant's pace (`rstate`; no entry when empty).
    pub pace: BTreeMap<String, Pace>,
    /// Each tenant's pending jobs, the next to dispatch first (no entry when
    /// empty; in Redis the list's right end).
    pub lists: BTreeMap<String, VecDeque<J>>,
}

impl<J> Default for ShardState<J> {
    fn default() -> Self {
        ShardState {
            ready: ZSet::default(),
            rmember: BTreeMap::new(),
            seq: 0,
            running: BTreeMap::new(),
            policy: BTreeMap::new(),
            tenants: BTreeSet::new(),
            floorq: ZSet::default(),
            lastpass: ZSet::default(),
            vt: 0.0,
            rwait: ZSet::default(),
            pace: BTreeMap::new(),
            lists: BTreeMap::new(),
        }
    }
}

impl<J> ShardState<J> {
    /// `t`'s running jobs.
    pub fn running(&self, t: &str) -> u64 {
        self.running.get(t).copied().unwrap_or(0)
    }

    /// Sets `t`'s running jobs (an entry only above 0).
    pub fn set_running(&mut self, t: &str, n: u64) {
        if n == 0 {
            self.running.remove(t);
        } else {
            self.running.insert(t.to_owned(), n);
        }
    }

    /// `t`'s pending jobs.
    pub fn pending(&self, t: &str) -> usize {
        self.lists.get(t).map_or(0, VecDeque::len)
    }

    /// Takes `t`'s next job (`RPOP`).
    pub fn pop(&mut self, t: &str) -> Option<J> {
        let list = self.lists.get_mut(t)?;
        let job = list.pop_front();
        if list.is_empty() {
            self.lists.remove(t);
        }
        job
    }

    /// Adds a job to `t`'s list: next to run (`front`, `RPUSH`) or last (`LPUSH`).
    pub fn put(&mut self, t: &str, job: J, front: bool) {
        let list = self.lists.entry(t.to_owned()).or_default();
        if front {
            list.push_front(job);
        } else {
            list.push_back(job);
        }
    }

    /// `t`'s pace, changed by `f` (its entry dropped when left empty).
    pub fn pace_mut<R>(&mut self, t: &str, f: impl FnOnce(&mut Pace) -> R) -> R {
        let pace = self.pace.entry(t.to_owned()).or_default();
        let r = f(pace);
        if pace.is_empty() {
            self.pace.remove(t);
        }
        r
    }

    /// The tenants in the dispatch order, in order (decoded names are the
    /// caller's: these are the encoded tenants of the keys).
    pub fn order(&self) -> Vec<String> {
        self.ready
            .iter()
            .map(|(m, _)| tenant_of_member(m).to_owned())
            .collect()
    }
}

/// The tenant of a `ready` member (`<15-digit seq><tenant>`).
pub fn tenant_of_member(member: &str) -> &str {
    member.get(15..).unwrap_or("")
}

/// The `ready` member of `t` with sequence number `seq`.
pub fn member_of(seq: u64, t: &str) -> String {
    format!("{seq:015}{t}")
}
