//! A batch or workflow prepared now and committed later, with its bid chosen
//! now: `fairjob-postgres` stores one in the application's transaction and
//! its pump commits it once that transaction has committed. Preparing checks
//! what can be checked without a client; the stored form is JSON; the commit
//! is [`Batch::commit`]'s own, with the prepared bid, and may be repeated
//! (after a crash) without staging, flipping or pushing anything twice.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::super::push::check_queue_name;
use super::{Batch, WfStep, Workflow, refuse_unique, validate_steps};
use crate::client::{Client, PushJob};
use crate::error::{Error, Result};
use crate::policy::batch::Event;
use crate::policy::workflow::OnDependencyFailure;
use crate::wire::{Payload, new_jid};

/// The stored form's version (its `fairjob_batch` field).
const FORMAT: u32 = 1;

/// What a member's payload gains at its push besides its own fields (its
/// batch's id and its enqueue time), for [`PreparedBatch::check_payload_size`].
const PUSH_FIELDS_BYTES: usize = 64;

/// A batch (or workflow) checked and given its bid, to commit later:
/// [`Batch::prepare`] / [`Workflow::prepare`], stored with
/// [`to_json`](Self::to_json), read back with [`from_json`](Self::from_json)
/// and committed with [`commit`](Self::commit).
///
/// Preparing refuses what a commit would refuse before writing anything and
/// needs no client for: a member that does not build, a unique job, a bad
/// queue name, a workflow's cycle, unknown or duplicate step name (and
/// [`check_payload_size`](Self::check_payload_size) a member too large).
/// What depends on the committing client comes at the commit: its
/// middleware (which runs then), its `max_payload_bytes`, and whether Redis
/// is a cluster (workflows and child batches need one server).
///
/// Committing is idempotent by bid: a commit repeated after a crash (at any
/// point of the first one) stages no member twice, flips the batch open once
/// (the batch's callbacks fire once) and pushes each member once, and a
/// commit repeated after the batch opened only pushes what is left staged.
#[must_use = "a prepared batch does nothing until it is committed"]
pub struct PreparedBatch {
    bid: String,
    description: String,
    tenant: Option<String>,
    parent: Option<String>,
    callbacks: Vec<(Event, PushJob)>,
    members: Vec<PushJob>,
    /// A workflow's steps (`None`: a plain batch).
    steps: Option<Vec<Step>>,
}

struct Step {
    name: String,
    job: PushJob,
    deps: Vec<String>,
    policy: OnDependencyFailure,
    edges: BTreeMap<String, OnDependencyFailure>,
}

impl std::fmt::Debug for PreparedBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedBatch")
            .field("bid", &self.bid)
            .field("description", &self.description)
            .field("tenant", &self.tenant)
            .field("members", &self.members.len())
            .field("steps", &self.steps.as_ref().map(Vec::len))
            .finish()
    }
}

impl Batch {
    /// Checks this batch and gives it its bid now, to commit it later (see
    /// [`PreparedBatch`]).
    pub fn prepare(self) -> Result<PreparedBatch> {
        PreparedBatch::new(self, None)
    }
}

impl Workflow {
    /// Checks this workflow (a cycle, an unknown or a duplicate step name is
    /// [`Error::Workflow`]) and gives it its bid now, to commit it later (see
    /// [`PreparedBatch`]).
    pub fn prepare(self) -> Result<PreparedBatch> {
        validate_steps(&self.steps)?;
        PreparedBatch::new(self.batch, Some(self.steps))
    }
}

impl PreparedBatch {
    fn new(batch: Batch, steps: Option<Vec<WfStep>>) -> Result<PreparedBatch> {
        let members = batch.members.into_iter().collect::<Result<Vec<_>>>()?;
        let callbacks = batch
            .callbacks
            .into_iter()
            .map(|(e, job)| Ok((e, job?)))
            .collect::<Result<Vec<_>>>()?;
        let steps = steps
            .map(|steps| {
                steps
                    .into_iter()
                    .map(|s| {
                        Ok(Step {
                            job: s.job?,
                            name: s.name,
                            deps: s.deps,
                            policy: s.policy,
                            edges: s.edges,
                        })
                    })
                    .collect::<Result<Vec<_>>>()
            })
            .transpose()?;
        let prepared = PreparedBatch {
            bid: new_jid(),
            description: batch.description,
            tenant: batch.tenant,
            parent: batch.parent,
            callbacks,
            members,
            steps,
        };
        for job in prepared.members_and_steps() {
            refuse_unique(job)?;
            check_queue_name(&job.queue())?;
        }
        for (_, job) in &prepared.callbacks {
            check_queue_name(&job.queue())?;
        }
        Ok(prepared)
    }

    /// The batch's id (the bid its commit returns, and its members carry).
    pub fn bid(&self) -> &str {
        &self.bid
    }

    /// Whether it is a workflow.
    pub fn is_workflow(&self) -> bool {
        self.steps.is_some()
    }

    /// Its members (a workflow's steps).
    pub fn len(&self) -> usize {
        self.members.len() + self.steps.as_ref().map_or(0, Vec::len)
    }

    /// Whether it has no member.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The tenant its callbacks run in as far as known before the client
    /// middleware runs: the one set with `set_tenant`, else the first
    /// member's (its own, else its type's `#[fair_tenant]`).
    pub fn tenant(&self) -> Option<String> {
        self.tenant.clone().or_else(|| {
            self.members_and_steps().next().and_then(|job| {
                job.tenant()
                    .or_else(|| job.default_tenant().map(str::to_owned))
            })
        })
    }

    /// Refuses a member, step or callback whose payload is larger than `max`
    /// bytes (a client's `max_payload_bytes`) as the commit would, within a
    /// few dozen bytes (the fields its push adds); the commit checks again,
    /// exactly, with its own client's maximum.
    pub fn check_payload_size(&self, max: usize) -> Result<()> {
        let callbacks = self.callbacks.iter().map(|(_, job)| job);
        for job in self.members_and_steps().chain(callbacks) {
            let size = job.payload().to_json().len() + PUSH_FIELDS_BYTES;
            if size > max {
                return Err(Error::PayloadTooLarge {
                    class: job.class(),
                    size,
                    max,
                });
            }
        }
        Ok(())
    }

    fn members_and_steps(&self) -> impl Iterator<Item = &PushJob> {
        let steps = self.steps.iter().flatten().map(|s| &s.job);
        self.members.iter().chain(steps)
    }

    /// Commits it as [`Batch::commit`] (or [`Workflow::commit`]) does, as
    /// batch [`bid`](Self::bid); returns the bid. Safe to repeat, from this
    /// process or another, with the same prepared batch (see
    /// [`PreparedBatch`]).
    pub async fn commit(self, client: &Client) -> Result<String> {
        let PreparedBatch {
            bid,
            description,
            tenant,
            parent,
            callbacks,
            members,
            steps,
        } = self;
        let batch = Batch {
            description,
            tenant,
            parent,
            callbacks: callbacks.into_iter().map(|(e, job)| (e, Ok(job))).collect(),
            members: members.into_iter().map(Ok).collect(),
        };
        let steps = steps.map(|steps| {
            steps
                .into_iter()
                .map(|s| WfStep {
                    name: s.name,
                    job: Ok(s.job),
                    deps: s.deps,
                    policy: s.policy,
                    edges: s.edges,
                })
                .collect()
        });
        client.commit_with(bid, batch, steps).await
    }

    /// The stored form: JSON (each payload as the push would send it).
    pub fn to_json(&self) -> String {
        let job = |job: &PushJob| StoredJob {
            job: raw(job.payload()),
            default_tenant: job.default_tenant().map(str::to_owned),
        };
        let stored = Stored {
            fairjob_batch: FORMAT,
            bid: self.bid.clone(),
            description: self.description.clone(),
            tenant: self.tenant.clone(),
            parent: self.parent.clone(),
            callbacks: self
                .callbacks
                .iter()
                .map(|(e, j)| {
                    let StoredJob {
                        job,
                        default_tenant,
                    } = job(j);
                    StoredCallback {
                        event: e.as_str().to_owned(),
                        job,
                        default_tenant,
                    }
                })
                .collect(),
            members: self.members.iter().map(job).collect(),
            steps: self.steps.as_ref().map(|steps| {
                steps
                    .iter()
                    .map(|s| StoredStep {
                        name: s.name.clone(),
                        job: raw(s.job.payload()),
                        default_tenant: s.job.default_tenant().map(str::to_owned),
                        deps: s.deps.clone(),
                        policy: s.policy.as_str().to_owned(),
                        edges: s
                            .edges
                            .iter()
                            .map(|(d, p)| (d.clone(), p.as_str().to_owned()))
                            .collect(),
                    })
                    .collect()
            }),
        };
        serde_json::to_string(&stored).expect("a stored batch serializes")
    }

    /// Reads [`to_json`](Self::to_json)'s form back; a workflow's steps are
    /// checked again. Anything else is [`Error::Malformed`].
    pub fn from_json(json: &str) -> Result<PreparedBatch> {
        let bad = |what: String| Error::Malformed(format!("stored batch: {what}"));
        let stored: Stored = serde_json::from_str(json).map_err(|e| bad(e.to_string()))?;
        if stored.fairjob_batch != FORMAT {
            return Err(bad(format!(
                "format {} (this fairjob reads format {FORMAT})",
                stored.fairjob_batch
            )));
        }
        let job = |s: StoredJob| -> Result<PushJob> {
            let payload = Payload::parse(s.job.get().as_bytes().to_vec())?;
            let mut job = PushJob::new(payload);
            job.set_default_tenant(s.default_tenant);
            Ok(job)
        };
        let callbacks = stored
            .callbacks
            .into_iter()
            .map(|c| {
                let event = Event::parse(&c.event)
                    .ok_or_else(|| bad(format!("unknown event `{}`", c.event)))?;
                let stored = StoredJob {
                    job: c.job,
                    default_tenant: c.default_tenant,
                };
                Ok((event, job(stored)?))
            })
            .collect::<Result<Vec<_>>>()?;
        let members = stored
            .members
            .into_iter()
            .map(job)
            .collect::<Result<Vec<_>>>()?;
        let steps = stored
            .steps
            .map(|steps| {
                steps
                    .into_iter()
                    .map(|s| {
                        let stored = StoredJob {
                            job: s.job,
                            default_tenant: s.default_tenant,
                        };
                        Ok(Step {
                            job: job(stored)?,
                            name: s.name,
                            deps: s.deps,
                            policy: OnDependencyFailure::parse(&s.policy),
                            edges: s
                                .edges
                                .into_iter()
                                .map(|(d, p)| (d, OnDependencyFailure::parse(&p)))
                                .collect(),
                        })
                    })
                    .collect::<Result<Vec<_>>>()
            })
            .transpose()?;
        if let Some(steps) = &steps {
            let decl: Vec<(String, Vec<String>)> = steps
                .iter()
                .map(|s| (s.name.clone(), s.deps.clone()))
                .collect();
            crate::policy::workflow::validate(&decl).map_err(Error::Workflow)?;
        }
        Ok(PreparedBatch {
            bid: stored.bid,
            description: stored.description,
            tenant: stored.tenant,
            parent: stored.parent,
            callbacks,
            members,
            steps,
        })
    }
}

fn raw(payload: &Payload) -> Box<RawValue> {
    RawValue::from_string(payload.to_json()).expect("a payload is a JSON object")
}

#[derive(Serialize, Deserialize)]
struct Stored {
    /// The format's version; also what tells a stored batch from a job.
    fairjob_batch: u32,
    bid: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    description: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tenant: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    parent: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    callbacks: Vec<StoredCallback>,
    #[serde(default)]
    members: Vec<StoredJob>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    steps: Option<Vec<StoredStep>>,
}

#[derive(Serialize, Deserialize)]
struct StoredJob {
    job: Box<RawValue>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    default_tenant: Option<String>,
}

/// A callback: its event, and its job as [`StoredJob`]'s fields (no
/// `flatten`: a raw value does not go through one).
#[derive(Serialize, Deserialize)]
struct StoredCallback {
    event: String,
    job: Box<RawValue>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    default_tenant: Option<String>,
}

/// A step: its name, its job as [`StoredJob`]'s fields, its dependencies
/// and policies.
#[derive(Serialize, Deserialize)]
struct StoredStep {
    name: String,
    job: Box<RawValue>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    default_tenant: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    deps: Vec<String>,
    policy: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    edges: BTreeMap<String, String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn push(class: &str, queue: &str) -> PushJob {
        let args = RawValue::from_string("[1]".into()).unwrap();
        PushJob::new(Payload::new(class, args, queue))
    }

    #[test]
    fn a_prepared_workflow_round_trips_through_its_stored_form() {
        let mut cb = push("Done", "callbacks");
        cb.set_default_tenant(Some("acme".into()));
        let wf = Workflow::new()
            .description("nightly")
            .add("a", push("A", "q"))
            .add_after("b", push("B", "q"), ["a"])
            .on_dependency_failure("b", OnDependencyFailure::Continue)
            .on_failure_of("b", "a", OnDependencyFailure::Ignore)
            .on_success(cb)
            .prepare()
            .unwrap();
        assert_eq!(wf.bid().len(), 24);
        assert!(wf.is_workflow());
        assert_eq!(wf.len(), 2);
        let json = wf.to_json();
        let back = PreparedBatch::from_json(&json).unwrap();
        assert_eq!(back.to_json(), json, "the stored form is stable");
        assert_eq!(back.bid(), wf.bid());
        let steps = back.steps.as_ref().unwrap();
        assert_eq!(steps[1].deps, ["a"]);
        assert_eq!(steps[1].policy, OnDependencyFailure::Continue);
        assert_eq!(steps[1].edges["a"], OnDependencyFailure::Ignore);
        assert_eq!(back.callbacks[0].0, Event::Success);
        assert_eq!(back.callbacks[0].1.default_tenant(), Some("acme"));
        // Payloads are stored as JSON, not as strings in JSON.
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["steps"][0]["job"]["class"], "A");
    }

    #[test]
    fn preparing_refuses_what_the_commit_would() {
        let cycle = Workflow::new()
            .add_after("a", push("A", "q"), ["b"])
            .add_after("b", push("B", "q"), ["a"])
            .prepare()
            .unwrap_err();
        assert!(matches!(cycle, Error::Workflow(_)), "{cycle}");
        let unknown = Workflow::new()
            .add_after("a", push("A", "q"), ["nope"])
            .prepare()
            .unwrap_err();
        assert!(unknown.to_string().contains("nope"), "{unknown}");
        let bad_queue = Batch::new().push(push("A", "a,b")).prepare().unwrap_err();
        assert!(matches!(bad_queue, Error::Config(_)), "{bad_queue}");
        let mut unique = push("U", "q");
        unique
            .payload_mut()
            .set(crate::wire::fields::UNIQUE_DIGEST, "d");
        unique
            .payload_mut()
            .set(crate::wire::fields::UNIQUE_FOR, 60);
        let unique = Batch::new().push(unique).prepare().unwrap_err();
        assert!(unique.to_string().contains("unique job"), "{unique}");

        let big = Batch::new()
            .push(push("A", "q"))
            .push(PushJob::new(Payload::new(
                "Big",
                RawValue::from_string(format!("[\"{}\"]", "x".repeat(2000))).unwrap(),
                "q",
            )))
            .prepare()
            .unwrap();
        let err = big.check_payload_size(1000).unwrap_err();
        assert!(
            matches!(&err, Error::PayloadTooLarge { class, .. } if class == "Big"),
            "{err}"
        );
        big.check_payload_size(1 << 20).unwrap();
    }

    #[test]
    fn a_stored_form_of_another_version_or_shape_is_malformed() {
        for json in [
            "{\"class\":\"A\",\"args\":[],\"jid\":\"j\"}",
            "{\"fairjob_batch\":2,\"bid\":\"b\",\"members\":[]}",
            "{\"fairjob_batch\":1,\"bid\":\"b\",\"members\":[{\"job\":{\"no\":1}}]}",
        ] {
            let err = PreparedBatch::from_json(json).unwrap_err();
            assert!(matches!(err, Error::Malformed(_)), "{json}: {err:?}");
        }
    }
}
