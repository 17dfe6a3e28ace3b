//! Batches and workflows in memory: what `batch_stage.lua`,
//! `workflow_stage.lua`, `batch_commit.lua`, `batch_add.lua`,
//! `batch_end.lua` and the exit scripts' batch part (`lib/batch.lua`) do,
//! through the same rules ([`crate::policy::batch`], whose membership holds
//! a workflow's [`Graph`]). A batch is kept under its hash's key name, as
//! Redis keeps it, so a push from its staged set (a `Src` naming
//! `<key>:staged`) finds it.
//!
//! What the scripts do around the rules is done here too: a fired event
//! pushes its stored callback (its `enqueued_at` spliced in) to its queue,
//! or, for a child batch without a callback for `complete` or `success`,
//! reports to the parent at once ([`reported`]); a released workflow step's
//! held payload goes to its queue; a cancelled one's is dropped. The pushes
//! are recorded like any other job, and their recording numbers returned,
//! so the inline mode's observer can perform them.
//!
//! Not kept: the batches' listing (it serves the views and the committer's
//! sweep, which testing mode has not), and the data's expiry (a batch lives
//! as long as its store).

use std::collections::{BTreeMap, HashMap};

use super::{MemoryStore, State};
use crate::broker::{Added, BatchRow, Committed, StagedStep};
use crate::policy::batch::{self as rules, Event, Membership, Outcome, Refused, reported};
use crate::policy::workflow::{Graph, OnDependencyFailure, StepDecl};

/// Failed members a status shows at most (an `HSCAN` page's worth).
const FAILED_SOME: usize = 100;

/// One batch (or workflow), as its keys in Redis hold it.
#[derive(Debug, Default)]
pub(crate) struct MemBatch {
    /// Its sets, events fired and (a workflow) steps: the rules' state.
    m: Membership,
    /// `created_at`, `desc`, `tenant`.
    created_at: f64,
    description: String,
    tenant: String,
    /// Set by the commit: `opened_at`, `keep` and the callbacks' fields
    /// (`cb:`, `cbq:`, `cbw:`, `cbn:` per event, `qs`).
    opened_at: Option<f64>,
    keep: u64,
    callbacks: BTreeMap<String, String>,
    /// A child's parent (its hash's key) and its member id there.
    parent: Option<(String, String)>,
    /// Children adopted (`kids`).
    kids: u64,
    /// Members staged and not pushed yet: jid → staged at.
    staged: BTreeMap<String, f64>,
    /// Stored payloads (staged members', held steps'), by jid.
    payloads: HashMap<String, String>,
    /// A workflow's steps as staged, and each step's queue by name.
    steps: Vec<StepDecl>,
    queues: HashMap<String, String>,
    /// Steps' recorded results by name.
    results: HashMap<String, String>,
}

impl MemBatch {
    /// The hash's fields, as `HGETALL` returns them.
    fn fields(&self) -> Vec<(String, String)> {
        let mut f: Vec<(String, String)> = vec![
            (
                "state".into(),
                if self.m.open { "open" } else { "staging" }.into(),
            ),
            ("created_at".into(), format!("{:.6}", self.created_at)),
            ("total".into(), self.m.total.to_string()),
            ("desc".into(), self.description.clone()),
            ("tenant".into(), self.tenant.clone()),
        ];
        if let Some(at) = self.opened_at {
            f.push(("opened_at".into(), format!("{at:.6}")));
            f.push(("keep".into(), self.keep.to_string()));
        }
        for (event, at) in &self.m.fired {
            f.push((format!("{}_at", event.as_str()), format!("{at:.6}")));
        }
        if self.m.workflow.is_some() {
            f.push(("wf".into(), "1".into()));
        }
        if self.kids > 0 {
            f.push(("kids".into(), self.kids.to_string()));
        }
        if let Some((parent, kid)) = &self.parent {
            f.push(("parent".into(), parent.clone()));
            f.push(("kid".into(), kid.clone()));
        }
        f.extend(self.callbacks.iter().map(|(k, v)| (k.clone(), v.clone())));
        f
    }

    /// Registers members (jid, payload) staged at `now` (the rules refuse
    /// none: the caller checked the batch takes them).
    fn stage(&mut self, members: &[(String, String)], now: f64) {
        for (jid, payload) in members {
            if rules::add(&mut self.m, jid).is_ok() {
                self.payloads.insert(jid.clone(), payload.clone());
                self.staged.insert(jid.clone(), now);
            }
        }
    }
}

/// A stored payload split at its `enqueued_at` value by a newline, with
/// `now` spliced in (`fj_batch_push`).
fn splice(stored: &str, now: f64) -> String {
    match stored.split_once('\n') {
        Some((before, after)) => format!("{before}{now:.6}{after}"),
        None => stored.to_owned(),
    }
}

impl State {
    /// The batch at `key`.
    fn batch(&mut self, key: &str) -> Option<&mut MemBatch> {
        self.batches.get_mut(key)
    }

    /// A push whose source is `record` takes `member` out of it: `Some(true)`
    /// when `record` is a batch's staged set that held it (it is pushed
    /// now), `Some(false)` when it no longer does (pushed already), `None`
    /// for any other record (the store keeps no promoting records).
    pub(super) fn claim_staged(&mut self, record: &str, member: &str) -> Option<bool> {
        let key = record.strip_suffix(":staged")?;
        let b = self.batches.get_mut(key)?;
        Some(b.staged.remove(member).is_some())
    }

    /// Fires `events` of batch `key` as `fj_batch_fire` does once each has
    /// been marked fired: its callback pushed to its queue, or a child's
    /// `complete` / `success` without one reported to its parent (whose own
    /// events fire in turn). Returns the recording numbers of the pushes.
    fn fire(&mut self, key: &str, events: &[Event], now: f64) -> Vec<u64> {
        let mut pushed = Vec::new();
        let mut todo: Vec<(String, Event)> = events.iter().map(|e| (key.to_owned(), *e)).collect();
        todo.reverse();
        while let Some((key, event)) = todo.pop() {
            let Some(b) = self.batches.get(&key) else {
                continue;
            };
            let e = event.as_str();
            let callback = b.callbacks.get(&format!("cb:{e}")).cloned();
            let queue = b.callbacks.get(&format!("cbn:{e}")).cloned();
            let parent = b.parent.clone();
            match (callback, queue, reported(event), parent) {
                (Some(cb), Some(queue), _, _) => {
                    pushed.push(self.requeue(&queue, splice(&cb, now), None, false));
                }
                (None, _, Some(outcome), Some((parent, kid))) => {
                    let Some(p) = self.batch(&parent) else {
                        continue;
                    };
                    let fired = rules::end(&mut p.m, &kid, outcome, now, "");
                    // The parent's events come before what is left of this
                    // batch's (the scripts fire them inside this one's).
                    todo.extend(fired.into_iter().rev().map(|e| (parent.clone(), e)));
                }
                _ => {}
            }
        }
        pushed
    }

    /// A member's end (`fj_batch_end`): the rules change the batch's sets,
    /// a workflow's released steps go to their queues (after `death`'s
    /// callback, before `complete`'s and `success`'s, as the script orders
    /// them), a cancelled step's payload is dropped, and what fired fires.
    /// Returns the events fired and the recording numbers of the pushes.
    fn end(
        &mut self,
        key: &str,
        jid: &str,
        outcome: Outcome,
        failure: &str,
        now: f64,
    ) -> (Vec<Event>, Vec<u64>) {
        let Some(b) = self.batch(key) else {
            return (Vec::new(), Vec::new());
        };
        let ended = rules::end_member(&mut b.m, jid, outcome, now, failure);
        let step_jid = |b: &MemBatch, name: &str| {
            b.m.workflow
                .as_ref()
                .and_then(|g| g.steps.get(name))
                .map(|s| s.jid.clone())
        };
        let mut released = Vec::new();
        for name in &ended.steps.released {
            if let Some(jid) = step_jid(b, name)
                && let Some(payload) = b.payloads.remove(&jid)
                && let Some(queue) = b.queues.get(name)
            {
                released.push((queue.clone(), payload));
            }
        }
        for (name, _) in &ended.steps.cancelled {
            if let Some(jid) = step_jid(b, name) {
                b.payloads.remove(&jid);
            }
        }
        let (death, rest) = match ended.events.split_first() {
            Some((Event::Death, rest)) => (&ended.events[..1], rest),
            _ => (&[][..], &ended.events[..]),
        };
        let mut pushed = self.fire(key, death, now);
        for (queue, payload) in released {
            pushed.push(self.requeue(&queue, splice(&payload, now), None, false));
        }
        pushed.extend(self.fire(key, rest, now));
        (ended.events, pushed)
    }
}

impl MemoryStore {
    /// `batch_stage.lua`: stages members of the batch at `key` (created
    /// staging at `now`); false when it is no longer staging.
    pub(crate) fn batch_stage(
        &self,
        key: &str,
        description: &str,
        tenant: &str,
        members: &[(String, String)],
        now: f64,
    ) -> bool {
        let mut st = self.lock();
        let b = st
            .batches
            .entry(key.to_owned())
            .or_insert_with(|| MemBatch {
                created_at: now,
                description: description.to_owned(),
                tenant: tenant.to_owned(),
                ..MemBatch::default()
            });
        if b.m.open {
            return false;
        }
        b.stage(members, now);
        true
    }

    /// `workflow_stage.lua`: stages steps of the workflow at `key`: each is
    /// a member; one without dependencies is staged to be pushed at the
    /// flip, the others are held with their payloads. A step staged already
    /// (a commit repeated with the same bid) is skipped. False when it is no
    /// longer staging.
    pub(crate) fn workflow_stage(
        &self,
        key: &str,
        description: &str,
        tenant: &str,
        steps: &[StagedStep],
        now: f64,
    ) -> bool {
        let mut st = self.lock();
        let b = st
            .batches
            .entry(key.to_owned())
            .or_insert_with(|| MemBatch {
                created_at: now,
                description: description.to_owned(),
                tenant: tenant.to_owned(),
                m: Membership {
                    workflow: Some(Graph::default()),
                    ..Membership::default()
                },
                ..MemBatch::default()
            });
        if b.m.open {
            return false;
        }
        for s in steps {
            if b.queues.contains_key(&s.name) {
                continue;
            }
            let edges = s
                .edges
                .iter()
                .map(|(d, p)| (d.clone(), OnDependencyFailure::parse(p)))
                .collect();
            b.steps.push((
                s.name.clone(),
                s.jid.clone(),
                s.deps.clone(),
                OnDependencyFailure::parse(&s.policy),
                edges,
            ));
            b.queues.insert(s.name.clone(), s.queue.clone());
            let member = [(s.jid.clone(), s.payload.clone())];
            if s.held {
                if rules::add(&mut b.m, &s.jid).is_ok() {
                    b.payloads.insert(s.jid.clone(), s.payload.clone());
                }
            } else {
                b.stage(&member, now);
            }
        }
        // The graph of every step staged so far (a step's dependents may
        // come in a later call; nothing ends before the flip).
        b.m.workflow = Some(Graph::new(&b.steps));
        true
    }

    /// `batch_commit.lua`: flips the batch at `key` open with its callbacks'
    /// `fields`, a child joining `parent` (its hash's key, and its member
    /// id there) first; an empty batch fires at once. Returns what the flip
    /// found and the recording numbers of the callbacks it pushed.
    pub(crate) fn batch_commit(
        &self,
        key: &str,
        keep_secs: u64,
        fields: &[(String, String)],
        parent: Option<(&str, &str)>,
        clock_offset: i64,
    ) -> (Committed, Vec<u64>) {
        let mut st = self.lock();
        let now = st.now(clock_offset);
        match st.batches.get(key) {
            None => return (Committed::Gone, Vec::new()),
            Some(b) if b.m.open => return (Committed::AlreadyOpen, Vec::new()),
            Some(_) => {}
        }
        if let Some((pkey, kid)) = parent {
            let Some(p) = st.batch(pkey) else {
                return (Committed::ParentGone, Vec::new());
            };
            match rules::adopt(&mut p.m, kid) {
                Err(Refused::Finished) => return (Committed::ParentFinished, Vec::new()),
                Ok(()) => p.kids += 1,
            }
        }
        let b = st.batch(key).expect("checked");
        b.parent = parent.map(|(p, k)| (p.to_owned(), k.to_owned()));
        b.opened_at = Some(now);
        b.keep = keep_secs;
        b.callbacks = fields.iter().cloned().collect();
        let fired = rules::open(&mut b.m, now);
        let pushed = st.fire(key, &fired, now);
        (Committed::Opened(fired), pushed)
    }

    /// `batch_add.lua`: a running member adds `jid` to the batch at `key`,
    /// staged to be pushed.
    pub(crate) fn batch_add(&self, key: &str, jid: &str, payload: &str, now: f64) -> Added {
        let mut st = self.lock();
        let Some(b) = st.batch(key) else {
            return Added::Gone;
        };
        if b.m.has_fired(Event::Complete) {
            return Added::Finished;
        }
        b.stage(&[(jid.to_owned(), payload.to_owned())], now);
        Added::Staged
    }

    /// Pushed members' stored payloads are forgotten.
    pub(crate) fn batch_released(&self, key: &str, jids: &[String]) {
        let mut st = self.lock();
        if let Some(b) = st.batch(key) {
            for jid in jids {
                b.payloads.remove(jid);
            }
        }
    }

    /// `batch_end.lua`, and the batch part of an exit's script: member
    /// `jid` of the batch at `key` ended with `outcome`. Returns the events
    /// fired and the recording numbers of what it pushed.
    pub(crate) fn batch_end(
        &self,
        key: &str,
        jid: &str,
        outcome: Outcome,
        failure: &str,
        clock_offset: i64,
    ) -> (Vec<Event>, Vec<u64>) {
        let mut st = self.lock();
        let now = st.now(clock_offset);
        st.end(key, jid, outcome, failure, now)
    }

    /// The batch at `key`, as `batch_status` reads it.
    pub(crate) fn batch_status(&self, key: &str) -> Option<BatchRow> {
        let mut st = self.lock();
        let b = st.batch(key)?;
        Some(BatchRow {
            fields: b.fields(),
            pending: b.m.pending.len() as u64,
            unsucceeded: b.m.unsucceeded.len() as u64,
            failed: b.m.failed.len() as u64,
            failed_some: b
                .m
                .failed
                .iter()
                .take(FAILED_SOME)
                .map(|(j, f)| (j.clone(), f.clone()))
                .collect(),
            staged: b.staged.len() as u64,
        })
    }

    /// A workflow's steps (name, state, failed dependencies it continued
    /// past), by name, at most `n`.
    pub(crate) fn workflow_steps(&self, key: &str, n: usize) -> Vec<(String, String, Vec<String>)> {
        let mut st = self.lock();
        let Some(g) = st.batch(key).and_then(|b| b.m.workflow.as_ref()) else {
            return Vec::new();
        };
        g.steps
            .iter()
            .take(n)
            .map(|(name, s)| {
                (
                    name.clone(),
                    s.state.as_str().to_owned(),
                    s.failed_deps.iter().cloned().collect(),
                )
            })
            .collect()
    }

    /// The dependencies step `name` continued past.
    pub(crate) fn workflow_failed_deps(&self, key: &str, name: &str) -> Vec<String> {
        let mut st = self.lock();
        st.batch(key)
            .and_then(|b| b.m.workflow.as_ref()?.steps.get(name))
            .map(|s| s.failed_deps.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Records step `name`'s result (a gone workflow keeps nothing).
    pub(crate) fn workflow_record(&self, key: &str, name: &str, json: &str) {
        let mut st = self.lock();
        if let Some(b) = st.batch(key) {
            b.results.insert(name.to_owned(), json.to_owned());
        }
    }

    /// Step `name`'s recorded result.
    pub(crate) fn workflow_result(&self, key: &str, name: &str) -> Option<String> {
        self.lock().batch(key)?.results.get(name).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::batch::kid_id;

    fn members(jids: &[&str]) -> Vec<(String, String)> {
        jids.iter()
            .map(|j| ((*j).to_owned(), format!("{{\"jid\":\"{j}\"}}")))
            .collect()
    }

    /// A callback's fields as the client stores them, for queue `q`.
    fn callback(event: &str, q: &str) -> Vec<(String, String)> {
        vec![
            (
                format!("cb:{event}"),
                format!("{{\"e\":\"{event}\",\"t\":\n}}"),
            ),
            (format!("cbn:{event}"), q.to_owned()),
        ]
    }

    fn queued(store: &MemoryStore) -> Vec<String> {
        store.entries().into_iter().map(|e| e.payload).collect()
    }

    #[test]
    fn a_member_is_pushed_from_its_staged_set_once() {
        let store = MemoryStore::new();
        assert!(store.batch_stage("b", "d", "t", &members(&["a", "b"]), 5.0));
        let mut st = store.lock();
        assert_eq!(st.claim_staged("b:staged", "a"), Some(true));
        assert_eq!(st.claim_staged("b:staged", "a"), Some(false));
        assert_eq!(st.claim_staged("other:staged", "a"), None);
        assert_eq!(st.claim_staged("promoting", "a"), None);
        drop(st);
        let row = store.batch_status("b").unwrap();
        assert_eq!((row.pending, row.staged), (2, 1));
        assert!(row.fields.contains(&("state".into(), "staging".into())));
        assert!(
            row.fields
                .contains(&("created_at".into(), "5.000000".into()))
        );
    }

    #[test]
    fn fired_callbacks_are_pushed_with_their_time_and_a_child_reports_without_one() {
        let store = MemoryStore::new();
        store.freeze(std::time::UNIX_EPOCH + std::time::Duration::from_secs(100));
        assert!(store.batch_stage("p", "", "", &members(&["m"]), 1.0));
        let (c, pushed) = store.batch_commit("p", 60, &callback("complete", "cbs"), None, 0);
        assert_eq!((c, pushed), (Committed::Opened(vec![]), vec![]));
        // A child without callbacks, empty: it fires at its commit and
        // reports to its parent at once.
        assert!(store.batch_stage("c", "", "", &[], 1.0));
        let kid = kid_id("c");
        let (c, pushed) = store.batch_commit("c", 60, &[], Some(("p", &kid)), 0);
        assert_eq!(c, Committed::Opened(vec![Event::Complete, Event::Success]));
        assert!(pushed.is_empty());
        assert_eq!(store.batch_status("p").unwrap().pending, 1, "only `m`");
        let (fired, pushed) = store.batch_end("p", "m", Outcome::Ok, "", 0);
        assert_eq!(fired, vec![Event::Complete, Event::Success]);
        assert_eq!(pushed.len(), 1, "the complete callback");
        assert_eq!(queued(&store), ["{\"e\":\"complete\",\"t\":100.000000}"]);
        assert_eq!(store.entries()[0].queue.as_deref(), Some("cbs"));
        // A repeated end, a stranger, a gone batch: nothing.
        assert_eq!(
            store.batch_end("p", "m", Outcome::Ok, "", 0),
            (vec![], vec![])
        );
        assert_eq!(
            store.batch_end("p", "x", Outcome::Dead, "E", 0),
            (vec![], vec![])
        );
        assert_eq!(
            store.batch_end("gone", "m", Outcome::Ok, "", 0),
            (vec![], vec![])
        );
        // A finished parent adopts no more; a gone one, none.
        assert!(store.batch_stage("c2", "", "", &[], 1.0));
        let late = store.batch_commit("c2", 60, &[], Some(("p", "b:c2")), 0).0;
        assert_eq!(late, Committed::ParentFinished);
        let orphan = store.batch_commit("c2", 60, &[], Some(("zz", "b:c2")), 0).0;
        assert_eq!(orphan, Committed::ParentGone);
        assert_eq!(
            store.batch_commit("p", 60, &[], None, 0).0,
            Committed::AlreadyOpen
        );
        assert_eq!(
            store.batch_commit("zz", 60, &[], None, 0).0,
            Committed::Gone
        );
        assert_eq!(store.batch_add("p", "n", "{}", 1.0), Added::Finished);
        assert_eq!(store.batch_add("zz", "n", "{}", 1.0), Added::Gone);
        assert!(!store.batch_stage("p", "", "", &members(&["n"]), 1.0));
    }

    #[test]
    fn a_steps_end_pushes_the_steps_it_released_and_drops_the_cancelled() {
        let store = MemoryStore::new();
        let step = |name: &str, deps: &[&str], policy: &str| StagedStep {
            jid: format!("j-{name}"),
            name: name.into(),
            payload: if deps.is_empty() {
                format!("{{\"s\":\"{name}\"}}")
            } else {
                format!("{{\"s\":\"{name}\",\"t\":\n}}")
            },
            held: !deps.is_empty(),
            policy: policy.into(),
            queue: format!("q-{name}"),
            sharded: false,
            deps: deps.iter().map(|d| d.to_string()).collect(),
            edges: Vec::new(),
        };
        // Staged in two calls, as the client does past its chunk size; the
        // second repeated (a commit repeated after a crash): staged once.
        let first = [step("a", &[], "cancel"), step("b", &[], "cancel")];
        assert!(store.workflow_stage("w", "", "", &first, 1.0));
        let second = [
            step("c", &["a", "b"], "cancel"),
            step("d", &["a"], "continue"),
        ];
        assert!(store.workflow_stage("w", "", "", &second, 1.0));
        assert!(store.workflow_stage("w", "", "", &second, 1.0));
        assert_eq!(store.lock().batches["w"].steps.len(), 4);
        assert_eq!(store.batch_status("w").unwrap().pending, 4);
        assert_eq!(store.batch_status("w").unwrap().staged, 2, "the roots");
        let (c, _) = store.batch_commit("w", 60, &callback("death", "cbs"), None, 0);
        assert_eq!(c, Committed::Opened(vec![]));
        let (fired, pushed) = store.batch_end("w", "j-a", Outcome::Dead, "E: x", 0);
        assert_eq!(fired, vec![Event::Death]);
        // `death`'s callback first, then the released step.
        let queues: Vec<String> = store
            .entries()
            .into_iter()
            .filter_map(|e| e.queue)
            .collect();
        assert_eq!(queues, ["cbs", "q-d"]);
        assert_eq!(pushed.len(), 2);
        assert_eq!(store.workflow_failed_deps("w", "d"), ["a"]);
        let steps = store.workflow_steps("w", 10);
        let states: Vec<(&str, &str)> = steps
            .iter()
            .map(|(n, s, _)| (n.as_str(), s.as_str()))
            .collect();
        assert_eq!(
            states,
            [
                ("a", "failed"),
                ("b", "queued"),
                ("c", "cancelled"),
                ("d", "queued")
            ]
        );
        let st = store.lock();
        let held = &st.batches["w"].payloads;
        assert!(
            !held.contains_key("j-c") && !held.contains_key("j-d"),
            "released and cancelled steps hold nothing"
        );
        drop(st);
        store.workflow_record("w", "d", "42");
        assert_eq!(store.workflow_result("w", "d").as_deref(), Some("42"));
        assert_eq!(store.workflow_result("w", "c"), None);
    }
}
