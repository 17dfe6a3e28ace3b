//! Workflows' steps (the twin of the workflow part of
//! `broker/scripts/lib/batch.lua`): a workflow is a batch whose members are
//! named steps, each waiting for the steps it names as dependencies. A step
//! with dependencies is held outside any queue; the end that satisfies its
//! last dependency releases it into its queue in the same step.
//!
//! When a dependency fails for good (dies, is discarded, or is cancelled),
//! each edge follows its policy, as BullMQ's flows do:
//! [`OnDependencyFailure::Cancel`] (the default: the step is cancelled, and
//! its own dependents see a failed dependency), `Continue` (the dependency
//! counts as met; the step can read which failed) or `Ignore` (the
//! dependency is dropped from its list). A cancelled step leaves its batch's
//! pending set with its failure recorded, so the workflow always completes.

use std::collections::{BTreeMap, BTreeSet};

/// What a step does when one of its dependencies fails for good.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OnDependencyFailure {
    /// The step and (through their own policies) its dependents are
    /// cancelled, never left waiting.
    #[default]
    Cancel,
    /// The dependency counts as met; the step runs and can see which failed.
    Continue,
    /// The dependency is dropped from the step's list.
    Ignore,
}

impl OnDependencyFailure {
    /// The policy's name as Redis keeps it.
    pub fn as_str(self) -> &'static str {
        match self {
            OnDependencyFailure::Cancel => "cancel",
            OnDependencyFailure::Continue => "continue",
            OnDependencyFailure::Ignore => "ignore",
        }
    }

    /// The policy named `name` (`cancel` for anything else).
    pub fn parse(name: &str) -> OnDependencyFailure {
        match name {
            "continue" => OnDependencyFailure::Continue,
            "ignore" => OnDependencyFailure::Ignore,
            _ => OnDependencyFailure::Cancel,
        }
    }
}

/// A step's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepState {
    /// Waiting for dependencies, in no queue.
    Held,
    /// In its queue (or running).
    Queued,
    /// Failed, waiting in `retry`.
    Retrying,
    /// Succeeded.
    Done,
    /// Died or was discarded.
    Failed,
    /// Cancelled because a dependency failed.
    Cancelled,
}

impl StepState {
    /// The state's name as Redis keeps it.
    pub fn as_str(self) -> &'static str {
        match self {
            StepState::Held => "held",
            StepState::Queued => "queued",
            StepState::Retrying => "retrying",
            StepState::Done => "done",
            StepState::Failed => "failed",
            StepState::Cancelled => "cancelled",
        }
    }

    /// The state named `name`.
    pub fn parse(name: &str) -> Option<StepState> {
        [
            StepState::Held,
            StepState::Queued,
            StepState::Retrying,
            StepState::Done,
            StepState::Failed,
            StepState::Cancelled,
        ]
        .into_iter()
        .find(|s| s.as_str() == name)
    }
}

/// One step.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// Its jid (its member id in the batch).
    pub jid: String,
    /// Dependencies not met yet.
    pub waiting: BTreeSet<String>,
    /// Steps that depend on it.
    pub dependents: BTreeSet<String>,
    /// Its policy for a failed dependency, and per dependency overrides.
    pub policy: OnDependencyFailure,
    /// Per-dependency policies (override `policy`).
    pub edge_policy: BTreeMap<String, OnDependencyFailure>,
    /// Dependencies that failed for good and that it continued past.
    pub failed_deps: BTreeSet<String>,
    /// Its state.
    pub state: StepState,
}

/// A workflow's steps, by name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Graph {
    /// The steps.
    pub steps: BTreeMap<String, Step>,
    /// Step names by jid.
    pub by_jid: BTreeMap<String, String>,
}

/// Checks a workflow's declaration: (name, dependencies) per step. An
/// empty, duplicate or unknown name, or a cycle, is an error naming it.
pub fn validate(steps: &[(String, Vec<String>)]) -> Result<(), String> {
    let mut names = BTreeSet::new();
    for (name, _) in steps {
        if name.is_empty() {
            return Err("a step has an empty name".into());
        }
        if !names.insert(name.as_str()) {
            return Err(format!("two steps are named `{name}`"));
        }
    }
    for (name, deps) in steps {
        for d in deps {
            if !names.contains(d.as_str()) {
                return Err(format!("step `{name}` depends on an unknown step `{d}`"));
            }
            if d == name {
                return Err(format!("step `{name}` depends on itself"));
            }
        }
    }
    // Kahn's algorithm: what is left has a cycle.
    let mut waiting: BTreeMap<&str, BTreeSet<&str>> = steps
        .iter()
        .map(|(n, d)| (n.as_str(), d.iter().map(String::as_str).collect()))
        .collect();
    loop {
        let ready: Vec<&str> = waiting
            .iter()
            .filter(|(_, d)| d.is_empty())
            .map(|(n, _)| *n)
            .collect();
        if ready.is_empty() {
            break;
        }
        for r in ready {
            waiting.remove(r);
            for d in waiting.values_mut() {
                d.remove(r);
            }
        }
    }
    match waiting.keys().next() {
        Some(n) => Err(format!("a cycle runs through step `{n}`")),
        None => Ok(()),
    }
}

/// A step as [`Graph::new`] takes it: name, jid, dependencies, policy,
/// per-dependency policies.
pub type StepDecl = (
    String,
    String,
    Vec<String>,
    OnDependencyFailure,
    BTreeMap<String, OnDependencyFailure>,
);

impl Graph {
    /// The graph of validated steps: (name, jid, dependencies, policy, edge policies).
    pub fn new(steps: &[StepDecl]) -> Graph {
        let mut g = Graph::default();
        for (name, jid, deps, policy, edges) in steps {
            g.by_jid.insert(jid.clone(), name.clone());
            g.steps.insert(
                name.clone(),
                Step {
                    jid: jid.clone(),
                    waiting: deps.iter().cloned().collect(),
                    dependents: BTreeSet::new(),
                    policy: *policy,
                    edge_policy: edges.clone(),
                    failed_deps: BTreeSet::new(),
                    state: if deps.is_empty() {
                        StepState::Queued
                    } else {
                        StepState::Held
                    },
                },
            );
        }
        for (name, _, deps, _, _) in steps {
            for d in deps {
                if let Some(s) = g.steps.get_mut(d) {
                    s.dependents.insert(name.clone());
                }
            }
        }
        g
    }
}

/// What a step's end changed: steps released into their queues, and steps
/// cancelled (each with the dependency that failed), in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changed {
    /// Released into their queues.
    pub released: Vec<String>,
    /// Cancelled: (step, the failed dependency).
    pub cancelled: Vec<(String, String)>,
}

/// `fj_wf_end`: the step with `jid` ended with `outcome` (`ok`, `retry`,
/// `dead`, `discarded`); returns the steps released and cancelled. The
/// caller resolves cancelled steps in the batch (see `batch::end`).
pub fn end(g: &mut Graph, jid: &str, outcome: super::batch::Outcome) -> Changed {
    use super::batch::Outcome;
    let mut out = Changed::default();
    let Some(name) = g.by_jid.get(jid).cloned() else {
        return out;
    };
    match outcome {
        Outcome::Ok => {
            set_state(g, &name, StepState::Done);
            let dependents = g.steps[&name].dependents.clone();
            for d in dependents {
                met(g, &d, &name, &mut out);
            }
        }
        Outcome::Dead | Outcome::Discarded => {
            set_state(g, &name, StepState::Failed);
            failed(g, &name, &mut out);
        }
        Outcome::Retry => set_state(g, &name, StepState::Retrying),
        Outcome::ChildRan | Outcome::ChildSucceeded => {}
    }
    out
}

fn set_state(g: &mut Graph, name: &str, state: StepState) {
    if let Some(s) = g.steps.get_mut(name) {
        s.state = state;
    }
}

/// Dependency `dep` of held step `name` is met (or dropped): released when
/// none is left.
fn met(g: &mut Graph, name: &str, dep: &str, out: &mut Changed) {
    let Some(s) = g.steps.get_mut(name) else {
        return;
    };
    if s.state != StepState::Held {
        return;
    }
    s.waiting.remove(dep);
    if s.waiting.is_empty() {
        s.state = StepState::Queued;
        out.released.push(name.to_owned());
    }
}

/// Step `name` failed for good: its held dependents follow their edges'
/// policies, breadth first.
fn failed(g: &mut Graph, name: &str, out: &mut Changed) {
    let mut todo = vec![name.to_owned()];
    let mut i = 0;
    while i < todo.len() {
        let f = todo[i].clone();
        i += 1;
        let dependents = g.steps[&f].dependents.clone();
        for d in dependents {
            let Some(s) = g.steps.get_mut(&d) else {
                continue;
            };
            if s.state != StepState::Held {
                continue;
            }
            let policy = s.edge_policy.get(&f).copied().unwrap_or(s.policy);
            match policy {
                OnDependencyFailure::Cancel => {
                    s.state = StepState::Cancelled;
                    out.cancelled.push((d.clone(), f.clone()));
                    todo.push(d);
                }
                OnDependencyFailure::Continue => {
                    s.failed_deps.insert(f.clone());
                    met(g, &d, &f, out);
                }
                OnDependencyFailure::Ignore => met(g, &d, &f, out),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::batch::Outcome;

    fn graph(steps: &[(&str, &[&str], OnDependencyFailure)]) -> Graph {
        let s: Vec<_> = steps
            .iter()
            .map(|(n, d, p)| {
                (
                    n.to_string(),
                    format!("j-{n}"),
                    d.iter().map(|x| x.to_string()).collect(),
                    *p,
                    BTreeMap::new(),
                )
            })
            .collect();
        Graph::new(&s)
    }

    #[test]
    fn declarations_with_cycles_unknown_or_duplicate_names_are_refused_by_name() {
        let s = |v: &[(&str, &[&str])]| -> Vec<(String, Vec<String>)> {
            v.iter()
                .map(|(n, d)| (n.to_string(), d.iter().map(|x| x.to_string()).collect()))
                .collect()
        };
        assert!(validate(&s(&[("a", &[]), ("b", &["a"])])).is_ok());
        let e = validate(&s(&[("a", &["c"]), ("b", &["a"]), ("c", &["b"])])).unwrap_err();
        assert!(e.contains("cycle"), "{e}");
        let e = validate(&s(&[("a", &["zz"])])).unwrap_err();
        assert!(e.contains("`zz`"), "{e}");
        let e = validate(&s(&[("a", &[]), ("a", &[])])).unwrap_err();
        assert!(e.contains("two steps are named `a`"), "{e}");
    }

    #[test]
    fn a_fan_in_is_released_by_its_last_dependency_once() {
        use OnDependencyFailure::Cancel;
        let mut g = graph(&[
            ("a", &[], Cancel),
            ("b", &[], Cancel),
            ("m", &["a", "b"], Cancel),
        ]);
        assert_eq!(
            end(&mut g, "j-a", Outcome::Ok).released,
            Vec::<String>::new()
        );
        assert_eq!(
            end(&mut g, "j-b", Outcome::Ok).released,
            vec!["m".to_owned()]
        );
        assert_eq!(end(&mut g, "j-b", Outcome::Ok), Changed::default());
    }

    #[test]
    fn a_failed_dependency_cancels_continues_or_is_ignored_per_policy() {
        use OnDependencyFailure::*;
        let mut g = graph(&[
            ("a", &[], Cancel),
            ("c", &["a"], Cancel),
            ("cc", &["c"], Continue),
            ("i", &["a"], Ignore),
            ("k", &["a"], Continue),
        ]);
        let ch = end(&mut g, "j-a", Outcome::Dead);
        assert_eq!(ch.cancelled, vec![("c".to_owned(), "a".to_owned())]);
        assert_eq!(
            ch.released,
            vec!["i".to_owned(), "k".to_owned(), "cc".to_owned()]
        );
        assert!(g.steps["k"].failed_deps.contains("a"));
        assert!(g.steps["cc"].failed_deps.contains("c"));
    }
}
