//! Dispatch on a sharded queue: a tenant's place in the order kept up to date
//! with its jobs and settings ([`Call::consider`]), pushes, releases, the
//! inbox, the dispatch of the next job ([`Call::reserve`]), and the steps the
//! scripts take as one call each ([`Call::fetch`], [`Call::finish`],
//! [`Call::ack`], [`Call::set_policy`]). The twin of
//! `broker/scripts/lib/dispatch/reserve.lua` and of the shard scripts' bodies.

use std::collections::VecDeque;

use super::Call;
use super::order::next_pass;
use super::pace::PARK_AFTER_US;
use super::settings::ShardPolicy;
use super::state::tenant_of_member;
use crate::wire::encoding::encode;

/// Inbox entries one fetch call moves into shards at most (each costs a JSON
/// decode in Lua; the bound keeps the script short).
pub const INBOX_MOVE: usize = 50;

/// Tenants waiting for their rate one fetch call brings back at most.
pub const RATE_WAKE: usize = 16;

/// The most jobs one dispatch looks at before it gives up (tenants found at
/// their cap, drained or waiting for their rate leave the order on the way).
pub const TRIES: usize = 32;

/// The tenant of an inbox entry pushed by a producer that knows nothing of
/// shards: its `fair_tenant` field (encoded; an integer as its digits), or
/// the shared shard (`""`) when it has none or is not JSON. Also whether the
/// entry is a slot waiter released by a freed slot (`fairjob_slot_released`),
/// which goes to the front of its tenant's list.
pub fn inbox_tenant(payload: &str) -> (String, bool) {
    let Ok(serde_json::Value::Object(job)) = serde_json::from_str::<serde_json::Value>(payload)
    else {
        return (String::new(), false);
    };
    let front = job.get("fairjob_slot_released") == Some(&serde_json::Value::Bool(true));
    let tenant = match job.get("fair_tenant") {
        Some(serde_json::Value::String(t)) if !t.is_empty() => encode(t),
        Some(serde_json::Value::Number(n)) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => i.to_string(),
            (None, Some(f)) if f == f.floor() && f.abs() < 9.2e18 => format!("{}", f as i64),
            _ => String::new(),
        },
        _ => String::new(),
    };
    (tenant, front)
}

/// What one fetch call dispatched.
#[derive(Debug, Clone, PartialEq)]
pub struct Fetched<J> {
    /// The jobs in dispatch order, with their (encoded) tenants.
    pub jobs: Vec<(String, J)>,
    /// When it dispatched fewer than asked and a tenant waits for its rate:
    /// µs until the first one's rate allows a start.
    pub next_rate_in: Option<u64>,
}

impl<J> Call<'_, J> {
    /// Brings `t`'s place in the order up to date with its jobs and
    /// settings: in it when runnable (entering at `max(last pass, vt)`), out
    /// of it otherwise, and in `floorq` exactly while under its floor. A
    /// tenant waiting for its rate stays out until its time (or until its
    /// rate is removed, or changed so that its time is further away than its
    /// window of starts allows). True when `t` entered the order.
    pub fn consider(&mut self, t: &str) -> bool {
        if let Some(w) = self.state.rwait.score(t) {
            let p = self.settings(t);
            let now = self.now as f64;
            if let Some((interval, window)) = p.rate
                && w > now
                && w <= now + (interval * window) as f64
            {
                return false;
            }
            return self.rate_unpark(t);
        }
        let m = self.state.rmember.get(t).cloned();
        if self.runnable(t) {
            let Some(m) = m else {
                let last = self.state.lastpass.score(t);
                if last.is_some() {
                    self.state.lastpass.remove(t);
                }
                self.enready(t, last.unwrap_or(0.0));
                return true;
            };
            let floor = self.settings(t).floor;
            if floor > 0.0 && (self.state.running(t) as f64) < floor {
                if let Some(pass) = self.state.ready.score(&m) {
                    self.state.floorq.add(&m, pass);
                }
            } else {
                self.state.floorq.remove(&m);
            }
        } else if m.is_some() {
            let pass = self.unready(t, None);
            self.remember(t, pass);
        }
        false
    }

    /// Adds a job to `t`'s list (next to run when `front`) and brings `t`
    /// into the order if it can run; true when it entered.
    pub fn push(&mut self, t: &str, job: J, front: bool) -> bool {
        self.state.put(t, job, front);
        self.state.tenants.insert(t.to_owned());
        self.consider(t)
    }

    /// Releases one running job of `t`; true when that put `t` back in the order.
    pub fn release(&mut self, t: &str) -> bool {
        let r = self.state.running(t).saturating_sub(1);
        self.state.set_running(t, r);
        let entered = self.consider(t);
        if r == 0 && self.state.pending(t) == 0 {
            self.state.tenants.remove(t);
            self.rate_forget(t);
        }
        entered
    }

    /// The head (member `m` of `t`) leaves the order at its cap or drained;
    /// `pass` is kept for when it returns.
    fn head_leave(&mut self, t: &str, m: &str, pass: f64) {
        self.unready(t, Some(m));
        self.remember(t, Some(pass));
    }

    /// Dispatches the next job: the tenant under its floor with the smallest
    /// pass, else the smallest pass of all; its oldest job; its pass advanced
    /// by `1 / weight`. A tenant found at its limit leaves the order until one
    /// of its jobs ends or its limit is raised; one found with its rate spent
    /// waits in `rwait`, its pass kept. At most [`TRIES`] heads are looked at.
    pub fn reserve(&mut self) -> Option<(String, J)> {
        for _ in 0..TRIES {
            let (m, pass, floored) = match self.state.floorq.first() {
                Some((m, pass)) => (m.to_owned(), pass, true),
                None => {
                    let (m, pass) = self.state.ready.first()?;
                    (m.to_owned(), pass, false)
                }
            };
            let t = tenant_of_member(&m).to_owned();
            let p = self.settings(&t);
            let limit = self.limit(&t);
            let under = |running: u64| limit.is_none_or(|l| (running as f64) < l);
            let wait_until = if under(self.state.running(&t)) {
                self.rate_wait(&t, &p)
            } else {
                None
            };
            if !under(self.state.running(&t)) {
                self.head_leave(&t, &m, pass);
                continue;
            }
            if let Some(at) = wait_until {
                self.rate_park(&t, &m, pass, at);
                continue;
            }
            let Some(job) = self.state.pop(&t) else {
                self.head_leave(&t, &m, pass);
                continue;
            };
            let running = self.state.running(&t) + 1;
            self.state.set_running(&t, running);
            let counted = self.rate_count(&t, &p);
            if !floored {
                self.advance(pass);
            }
            let next = next_pass(pass, p.weight);
            let more = under(running) && self.state.pending(&t) > 0;
            if !more {
                self.head_leave(&t, &m, next);
            } else if let Some((_, due)) = counted.filter(|(wait, _)| *wait > PARK_AFTER_US) {
                self.rate_park(&t, &m, next, due);
            } else {
                self.state.ready.add(&m, next);
                if floored || p.floor > 0.0 {
                    if (running as f64) < p.floor {
                        self.state.floorq.add(&m, next);
                    } else {
                        self.state.floorq.remove(&m);
                    }
                }
            }
            return Some((t, job));
        }
        None
    }

    /// `shard_fetch.lua`: moves at most `inbox_max` entries of the inbox into
    /// their tenants' lists (`tenant_of` reads an entry: see [`inbox_tenant`]),
    /// brings back at most `wake_max` tenants whose rate allows a start, then
    /// dispatches up to `n` jobs. Ends the call.
    pub fn fetch(
        mut self,
        n: usize,
        inbox: &mut VecDeque<J>,
        inbox_max: usize,
        tenant_of: impl Fn(&J) -> (String, bool),
        wake_max: usize,
    ) -> Fetched<J> {
        for _ in 0..inbox_max {
            let Some(e) = inbox.pop_front() else { break };
            let (t, front) = tenant_of(&e);
            self.push(&t, e, front);
        }
        self.rate_wake(wake_max);
        let mut jobs = Vec::new();
        while jobs.len() < n {
            match self.reserve() {
                Some(j) => jobs.push(j),
                None => break,
            }
        }
        let next_rate_in = (jobs.len() < n)
            .then(|| self.state.rwait.first())
            .flatten()
            .map(|(_, at)| (at - self.now as f64).max(0.0) as u64);
        self.end();
        Fetched { jobs, next_rate_in }
    }

    /// `shard_finish.lua` (not fenced): a job of `t` ends, put back in its
    /// list first when `back_in` says so (`Some(true)`: at the front,
    /// `Some(false)`: at the tail). True when a tenant entered the order.
    pub fn finish(mut self, t: &str, back_in: Option<(J, bool)>) -> bool {
        let mut entered = false;
        if let Some((job, front)) = back_in {
            entered |= self.push(t, job, front);
        }
        entered |= self.release(t);
        self.end();
        entered
    }

    /// `shard_ack_many.lua`: jobs of these tenants (not fenced) end, in
    /// order. True when a tenant entered the order.
    pub fn ack<'t>(mut self, tenants: impl IntoIterator<Item = &'t str>) -> bool {
        let mut entered = false;
        for t in tenants {
            entered |= self.release(t);
        }
        self.end();
        entered
    }

    /// `shard_policy.lua`: a change for `field` (an encoded tenant, or `*`),
    /// then every tenant of `recheck` brought up to date with it, in that
    /// order. Returns how many tenants entered the order.
    pub fn set_policy<'t>(
        mut self,
        field: &str,
        change: &ShardPolicy,
        recheck: impl IntoIterator<Item = &'t str>,
    ) -> usize {
        change.apply(&mut self.state.policy, field);
        let before = self.state.ready.len();
        let mut entered = 0;
        for t in recheck {
            if self.consider(t) {
                entered += 1;
            }
        }
        let grown = self.state.ready.len().saturating_sub(before);
        self.end();
        entered.max(grown)
    }
}
