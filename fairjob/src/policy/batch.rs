//! Batches' membership (the twin of `broker/scripts/lib/batch.lua`): when a
//! batch's callbacks fire, decided from sets of members, never from counters,
//! so a member that ends twice (a duplicate ack, a run repeated after a
//! kill -9, a fenced late completion) changes nothing the second time and
//! every event fires at most once.
//!
//! - `complete`: every member has run once (succeeded, failed into `retry`,
//!   died, or failed and was discarded).
//! - `success`: every member has succeeded; never before `complete` (it may
//!   come later: a member that failed succeeds on a retry, or a dead member
//!   is retried by hand and succeeds).
//! - `death`: the first member that dies.
//!
//! An empty batch fires `complete` and `success` when it is committed. A
//! batch that fired `complete` takes no more members.

use std::collections::{BTreeMap, BTreeSet};

/// A batch callback's event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Event {
    /// Every member has run once.
    Complete,
    /// Every member has succeeded.
    Success,
    /// The first member died.
    Death,
}

impl Event {
    /// Every event, in the order a batch can fire them.
    pub const ALL: [Event; 3] = [Event::Death, Event::Complete, Event::Success];

    /// The event's name (`complete`, `success`, `death`), as Redis keeps it.
    pub fn as_str(self) -> &'static str {
        match self {
            Event::Complete => "complete",
            Event::Success => "success",
            Event::Death => "death",
        }
    }

    /// The event named `name`.
    pub fn parse(name: &str) -> Option<Event> {
        Event::ALL.into_iter().find(|e| e.as_str() == name)
    }
}

/// How a member's run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// It succeeded.
    Ok,
    /// It failed and waits in `retry`.
    Retry,
    /// It failed and went to `dead`.
    Dead,
    /// It failed and is kept nowhere (`retry: false` without `dead`).
    Discarded,
    /// A child batch (the member) has run: its `complete` callback ran (or
    /// it fired `complete` without one).
    ChildRan,
    /// A child batch has succeeded: its `success` callback succeeded (or it
    /// fired `success` without one).
    ChildSucceeded,
}

impl Outcome {
    /// The outcome's name as the scripts take it.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Retry => "retry",
            Outcome::Dead => "dead",
            Outcome::Discarded => "discarded",
            Outcome::ChildRan => "kid_ran",
            Outcome::ChildSucceeded => "kid_ok",
        }
    }
}

/// Why a member could not be added.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The batch fired `complete`.
    Finished,
}

/// One batch's membership.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Membership {
    /// Open: committed (members run, events fire). Before that, staging.
    pub open: bool,
    /// Members that have not run once.
    pub pending: BTreeSet<String>,
    /// Members that have not succeeded.
    pub unsucceeded: BTreeSet<String>,
    /// Failed members that have not succeeded since, with their failure.
    pub failed: BTreeMap<String, String>,
    /// Members ever added.
    pub total: u64,
    /// Events fired, with their time.
    pub fired: BTreeMap<Event, f64>,
    /// A workflow's steps (a workflow is a batch whose members are steps).
    pub workflow: Option<super::workflow::Graph>,
}

impl Membership {
    /// Whether `event` has fired.
    pub fn has_fired(&self, event: Event) -> bool {
        self.fired.contains_key(&event)
    }

    fn fire(&mut self, event: Event, now: f64, out: &mut Vec<Event>) {
        if let std::collections::btree_map::Entry::Vacant(v) = self.fired.entry(event) {
            v.insert(now);
            out.push(event);
        }
    }
}

/// `fj_batch_add`: registers member `jid` (idempotent), unless the batch
/// fired `complete`.
pub fn add(m: &mut Membership, jid: &str) -> Result<(), Refused> {
    if m.has_fired(Event::Complete) {
        return Err(Refused::Finished);
    }
    if m.pending.insert(jid.to_owned()) {
        m.total += 1;
    }
    m.unsucceeded.insert(jid.to_owned());
    Ok(())
}

/// `fj_batch_adopt`: child batch `kid` (its member id `b:<bid>`) joins its
/// parent before it opens, unless the parent fired `complete`. A child is
/// not counted in `total` (members are jobs).
pub fn adopt(m: &mut Membership, kid: &str) -> Result<(), Refused> {
    if m.has_fired(Event::Complete) {
        return Err(Refused::Finished);
    }
    m.pending.insert(kid.to_owned());
    m.unsucceeded.insert(kid.to_owned());
    Ok(())
}

/// A child batch's member id in its parent.
pub fn kid_id(bid: &str) -> String {
    format!("b:{bid}")
}

/// What a child batch that fired `event` reports to its parent when it has
/// no callback for it (with one, the callback's end reports it).
pub fn reported(event: Event) -> Option<Outcome> {
    match event {
        Event::Complete => Some(Outcome::ChildRan),
        Event::Success => Some(Outcome::ChildSucceeded),
        Event::Death => None,
    }
}

/// `fj_batch_settle`: fires what the sets now allow (an open batch only);
/// returns the events fired, in order.
pub fn settle(m: &mut Membership, now: f64) -> Vec<Event> {
    let mut out = Vec::new();
    if !m.open {
        return out;
    }
    if m.pending.is_empty() {
        m.fire(Event::Complete, now, &mut out);
    }
    if m.has_fired(Event::Complete) && m.unsucceeded.is_empty() {
        m.fire(Event::Success, now, &mut out);
    }
    out
}

/// The commit's flip (`batch_commit.lua`): the batch opens, and an empty one
/// fires `complete` and `success` at once.
pub fn open(m: &mut Membership, now: f64) -> Vec<Event> {
    if m.open {
        return Vec::new();
    }
    m.open = true;
    settle(m, now)
}

/// What a member's end changed ([`end_member`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ended {
    /// The events fired, in order (`death` first: it fires before a
    /// workflow's steps are told, `complete` and `success` after).
    pub events: Vec<Event>,
    /// For a workflow's step: the steps its end released into their queues
    /// and those it cancelled, in the order the scripts push and cancel them.
    pub steps: super::workflow::Changed,
}

/// `fj_batch_end`: member `jid`'s run ended with `outcome` (`error`: its
/// failure, kept until it succeeds). A jid that is not a member changes
/// nothing. Returns the events fired, in order.
pub fn end(m: &mut Membership, jid: &str, outcome: Outcome, now: f64, error: &str) -> Vec<Event> {
    end_member(m, jid, outcome, now, error).events
}

/// [`end`], also saying which of a workflow's steps the end released and
/// cancelled (the memory store of fairjob's testing mode pushes the
/// released ones, as `lib/batch.lua` does).
pub fn end_member(m: &mut Membership, jid: &str, outcome: Outcome, now: f64, error: &str) -> Ended {
    if matches!(outcome, Outcome::ChildRan | Outcome::ChildSucceeded) {
        m.pending.remove(jid);
        if outcome == Outcome::ChildSucceeded {
            m.unsucceeded.remove(jid);
        }
        return Ended {
            events: settle(m, now),
            steps: Default::default(),
        };
    }
    m.pending.remove(jid);
    let member = m.unsucceeded.contains(jid);
    let mut out = Vec::new();
    if outcome == Outcome::Ok {
        if member {
            m.unsucceeded.remove(jid);
            m.failed.remove(jid);
        }
    } else if member {
        if !error.is_empty() {
            m.failed.insert(jid.to_owned(), error.to_owned());
        }
        if outcome == Outcome::Dead {
            m.fire(Event::Death, now, &mut out);
        }
    }
    let mut steps = super::workflow::Changed::default();
    if let Some(g) = m.workflow.as_mut() {
        steps = super::workflow::end(g, jid, outcome);
        for (step, dep) in &steps.cancelled {
            let jid = g.steps[step].jid.clone();
            m.pending.remove(&jid);
            m.failed.insert(jid, cancelled(dep));
        }
    }
    out.extend(settle(m, now));
    Ended { events: out, steps }
}

/// The failure recorded for a step cancelled because `dep` failed.
pub fn cancelled(dep: &str) -> String {
    format!("cancelled: dependency `{dep}` failed")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(jids: &[&str]) -> Membership {
        let mut m = Membership::default();
        for j in jids {
            add(&mut m, j).unwrap();
        }
        assert!(open(&mut m, 1.0).is_empty() || jids.is_empty());
        m
    }

    #[test]
    fn complete_then_success_once_whatever_repeats() {
        let mut m = batch(&["a", "b"]);
        assert_eq!(end(&mut m, "a", Outcome::Ok, 2.0, ""), vec![]);
        assert_eq!(end(&mut m, "a", Outcome::Ok, 2.0, ""), vec![]);
        assert_eq!(
            end(&mut m, "b", Outcome::Ok, 3.0, ""),
            vec![Event::Complete, Event::Success]
        );
        assert_eq!(end(&mut m, "b", Outcome::Ok, 4.0, ""), vec![]);
        assert_eq!(m.fired[&Event::Complete], 3.0);
    }

    #[test]
    fn a_retry_completes_and_success_waits_for_it() {
        let mut m = batch(&["a", "b"]);
        end(&mut m, "a", Outcome::Ok, 2.0, "");
        assert_eq!(
            end(&mut m, "b", Outcome::Retry, 3.0, "E: x"),
            vec![Event::Complete]
        );
        assert_eq!(m.failed.get("b").map(String::as_str), Some("E: x"));
        // A run repeated after a kill: nothing new.
        assert_eq!(end(&mut m, "b", Outcome::Retry, 3.5, "E: x"), vec![]);
        assert_eq!(end(&mut m, "b", Outcome::Ok, 4.0, ""), vec![Event::Success]);
        assert!(m.failed.is_empty());
        assert_eq!(add(&mut m, "c"), Err(Refused::Finished));
    }

    #[test]
    fn death_fires_once_and_success_only_after_a_retry_by_hand() {
        let mut m = batch(&["a", "b", "c"]);
        assert_eq!(
            end(&mut m, "a", Outcome::Dead, 2.0, "E"),
            vec![Event::Death]
        );
        assert_eq!(end(&mut m, "b", Outcome::Dead, 2.0, "E"), vec![]);
        assert_eq!(
            end(&mut m, "c", Outcome::Discarded, 3.0, "E"),
            vec![Event::Complete]
        );
        end(&mut m, "a", Outcome::Ok, 4.0, "");
        end(&mut m, "b", Outcome::Ok, 4.0, "");
        assert_eq!(end(&mut m, "c", Outcome::Ok, 5.0, ""), vec![Event::Success]);
    }

    #[test]
    fn a_parent_waits_for_its_child_to_run_and_to_succeed() {
        let mut parent = batch(&["a"]);
        adopt(&mut parent, &kid_id("c")).unwrap();
        assert_eq!(end(&mut parent, "a", Outcome::Ok, 2.0, ""), vec![]);
        assert_eq!(
            end(&mut parent, "b:c", Outcome::ChildRan, 3.0, ""),
            vec![Event::Complete]
        );
        assert_eq!(
            end(&mut parent, "b:c", Outcome::ChildSucceeded, 4.0, ""),
            vec![Event::Success]
        );
        assert_eq!(adopt(&mut parent, "b:d"), Err(Refused::Finished));
        assert_eq!(reported(Event::Death), None);
    }

    #[test]
    fn a_steps_end_says_which_steps_it_released_or_cancelled() {
        use crate::policy::workflow::{Graph, OnDependencyFailure::Cancel};
        let workflow = || {
            let mut m = batch(&["j-a", "j-b", "j-c"]);
            let step = |n: &str, deps: &[&str]| {
                let deps = deps.iter().map(|d| d.to_string()).collect();
                (
                    n.to_owned(),
                    format!("j-{n}"),
                    deps,
                    Cancel,
                    BTreeMap::new(),
                )
            };
            m.workflow = Some(Graph::new(&[
                step("a", &[]),
                step("b", &["a"]),
                step("c", &["a"]),
            ]));
            m
        };
        let mut m = workflow();
        let ended = end_member(&mut m, "j-a", Outcome::Ok, 2.0, "");
        assert_eq!(ended.events, vec![]);
        assert_eq!(ended.steps.released, ["b", "c"]);
        assert!(ended.steps.cancelled.is_empty());
        // Released once: a repeated end releases nothing.
        assert_eq!(
            end_member(&mut m, "j-a", Outcome::Ok, 2.0, ""),
            Ended::default()
        );
        let mut m = workflow();
        let ended = end_member(&mut m, "j-a", Outcome::Dead, 2.0, "E");
        assert_eq!(ended.events, vec![Event::Death, Event::Complete]);
        assert!(ended.steps.released.is_empty());
        let gone: Vec<&str> = ended.steps.cancelled.iter().map(|c| c.0.as_str()).collect();
        assert_eq!(gone, ["b", "c"]);
        assert_eq!(m.failed["j-b"], cancelled("a"));
    }

    #[test]
    fn an_empty_batch_fires_at_its_commit_and_strangers_change_nothing() {
        let mut m = Membership::default();
        assert_eq!(open(&mut m, 1.0), vec![Event::Complete, Event::Success]);
        let mut m = batch(&["a"]);
        assert_eq!(end(&mut m, "zz", Outcome::Dead, 2.0, "E"), vec![]);
        assert!(m.failed.is_empty());
        // Staging: nothing fires before the commit.
        let mut s = Membership::default();
        add(&mut s, "a").unwrap();
        assert_eq!(end(&mut s, "a", Outcome::Ok, 1.0, ""), vec![]);
    }
}
