//! Batches, untyped: the builder, a batch's commit, a member's additions and
//! a batch's status (the guarantees, and what a running member sees:
//! [`crate::batch`]). The commit prepares every member
//! as a push would (middleware, tenant, size, queue names) before it writes
//! anything, stages them in chunks, lists the batch, flips it open, then
//! pushes the staged members from the batch's staged set, each once. A
//! commit repeated with the same bid (a [`PreparedBatch`] committed again
//! after a crash) stages nothing twice, flips nothing twice and pushes each
//! member once.

use super::push::count_reroute;
use super::{Client, IntoPush, PushJob};
use std::collections::BTreeMap;

use crate::broker::{Added, Committed, PushSpec, Pushed, Src, Staged, StagedStep};
use crate::error::{Error, Result};
pub use crate::inspect::BatchStatus;
use crate::policy::batch::Event;
use crate::policy::workflow::{OnDependencyFailure, validate};
use crate::wire::{Payload, UniqueSpec, fields, new_jid, now_f64};

mod prepared;
pub use prepared::PreparedBatch;

/// Members per `batch_stage.lua` call, and at most this many bytes of
/// payloads: a call stays well under a millisecond.
const STAGE_CHUNK: usize = 100;
const STAGE_BYTES: usize = 128 * 1024;
/// Members per `push` when the staged members are pushed.
const RELEASE_CHUNK: usize = 500;
/// A batch whose committer has not pushed every member after this long is
/// pushed by a worker's sweep.
pub(crate) const SWEEP_AFTER_SECS: f64 = 30.0;

/// A batch being built; [`Batch::commit`] makes its members runnable.
#[derive(Default)]
#[must_use = "a batch does nothing until it is committed"]
pub struct Batch {
    pub(crate) description: String,
    pub(crate) tenant: Option<String>,
    pub(crate) parent: Option<String>,
    pub(crate) callbacks: Vec<(Event, Result<PushJob>)>,
    pub(crate) members: Vec<Result<PushJob>>,
}

impl std::fmt::Debug for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch")
            .field("description", &self.description)
            .field("tenant", &self.tenant)
            .field("members", &self.members.len())
            .finish()
    }
}

impl Batch {
    /// An empty batch.
    pub fn new() -> Batch {
        Batch::default()
    }

    /// A description, shown by the dashboard and in the batch's status.
    pub fn description(mut self, text: impl Into<String>) -> Self {
        self.description = text.into();
        self
    }

    /// The tenant the callbacks run in (by default the first member's).
    pub fn set_tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant = Some(tenant.into());
        self
    }

    /// Makes this batch a child of batch `parent_bid`: the parent's
    /// `complete` and `success` wait for this batch's (and come after this
    /// batch's callbacks), at any depth. The commit fails with
    /// [`Error::BatchFinished`] when the parent fired `complete`, and with
    /// [`Error::NoSuchBatch`] when it is gone. One Redis server only (on a
    /// Redis Cluster the parent's keys are in another slot: the commit says
    /// so).
    pub fn child_of(mut self, parent_bid: impl Into<String>) -> Self {
        self.parent = Some(parent_bid.into());
        self
    }

    /// The job enqueued once every member has run once.
    pub fn on_complete(self, job: impl IntoPush) -> Self {
        self.on(Event::Complete, job)
    }

    /// The job enqueued once every member has succeeded.
    pub fn on_success(self, job: impl IntoPush) -> Self {
        self.on(Event::Success, job)
    }

    /// The job enqueued when the first member dies.
    pub fn on_death(self, job: impl IntoPush) -> Self {
        self.on(Event::Death, job)
    }

    fn on(mut self, event: Event, job: impl IntoPush) -> Self {
        self.callbacks.retain(|(e, _)| *e != event);
        self.callbacks.push((event, job.into_push()));
        self
    }

    /// Adds a member (any job type, any queue).
    pub fn push(mut self, job: impl IntoPush) -> Self {
        self.members.push(job.into_push());
        self
    }

    /// Adds many members.
    pub fn push_bulk<J: IntoPush>(mut self, jobs: impl IntoIterator<Item = J>) -> Self {
        self.members
            .extend(jobs.into_iter().map(IntoPush::into_push));
        self
    }

    /// Commits the batch: its members become runnable, all of them or none.
    /// Returns the batch's id. A member that cannot be pushed (its size, a
    /// unique job, a bad queue name) fails the whole commit before anything
    /// is written.
    pub async fn commit(self, client: &Client) -> Result<String> {
        client.commit_batch(self).await
    }
}

/// A running member's handle on its own batch ([`JobContext::batch`](crate::JobContext::batch)).
#[derive(Clone, Debug)]
pub struct BatchHandle {
    pub(crate) client: Client,
    pub(crate) bid: String,
}

impl BatchHandle {
    /// The batch's id.
    pub fn bid(&self) -> &str {
        &self.bid
    }

    /// Adds a job to the batch (it runs like a committed member). A batch
    /// that fired `complete` is [`Error::BatchFinished`]; one that is gone,
    /// [`Error::NoSuchBatch`].
    pub async fn push(&self, job: impl IntoPush) -> Result<()> {
        self.client.add_to_batch(&self.bid, job.into_push()?).await
    }

    /// A new batch, child of this one (see [`Batch::child_of`]).
    pub fn child(&self) -> Batch {
        Batch::new().child_of(self.bid.clone())
    }

    /// The batch's status now.
    pub async fn status(&self) -> Result<BatchStatus> {
        self.client
            .batch_status(&self.bid)
            .await?
            .ok_or_else(|| Error::NoSuchBatch {
                bid: self.bid.clone(),
            })
    }
}

impl Client {
    /// A handle on batch `bid`, to add jobs to it or read its status (a
    /// running member's own batch is [`JobContext::batch`](crate::JobContext::batch)). Adding to it
    /// while no member is running may race its completion: the batch may
    /// fire `complete` first, and the add is then [`Error::BatchFinished`].
    pub fn batch(&self, bid: impl Into<String>) -> BatchHandle {
        BatchHandle {
            client: self.clone(),
            bid: bid.into(),
        }
    }
}

/// A workflow being built: named steps, each run when the steps it waits
/// for have succeeded (see [`crate::batch`]). It is a batch underneath: its
/// steps are members, with the same callbacks and status.
#[derive(Debug, Default)]
#[must_use = "a workflow does nothing until it is committed"]
pub struct Workflow {
    batch: Batch,
    steps: Vec<WfStep>,
}

struct WfStep {
    name: String,
    job: Result<PushJob>,
    deps: Vec<String>,
    policy: OnDependencyFailure,
    edges: BTreeMap<String, OnDependencyFailure>,
}

impl std::fmt::Debug for WfStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WfStep")
            .field("name", &self.name)
            .field("deps", &self.deps)
            .finish()
    }
}

impl Workflow {
    /// An empty workflow.
    pub fn new() -> Workflow {
        Workflow::default()
    }

    /// A step that runs at the commit.
    pub fn add(self, name: impl Into<String>, job: impl IntoPush) -> Self {
        self.add_after(name, job, std::iter::empty::<&str>())
    }

    /// A step that runs when every step named in `deps` has succeeded.
    pub fn add_after(
        mut self,
        name: impl Into<String>,
        job: impl IntoPush,
        deps: impl IntoIterator<Item = impl AsRef<str>>,
    ) -> Self {
        self.steps.push(WfStep {
            name: name.into(),
            job: job.into_push(),
            deps: deps.into_iter().map(|d| d.as_ref().to_owned()).collect(),
            policy: OnDependencyFailure::Cancel,
            edges: BTreeMap::new(),
        });
        self
    }

    /// What step `step` does when one of its dependencies fails for good
    /// (dies, is discarded or cancelled): cancel (the default), continue or
    /// ignore. A step not declared (yet) is an error at the commit.
    pub fn on_dependency_failure(mut self, step: &str, policy: OnDependencyFailure) -> Self {
        match self.steps.iter_mut().find(|s| s.name == step) {
            Some(s) => s.policy = policy,
            None => self.steps.push(WfStep {
                name: step.to_owned(),
                job: Err(Error::Workflow(format!(
                    "`on_dependency_failure` names an unknown step `{step}`"
                ))),
                deps: Vec::new(),
                policy,
                edges: BTreeMap::new(),
            }),
        }
        self
    }

    /// The same for one edge: step `step`'s dependency on `dep`.
    pub fn on_failure_of(mut self, step: &str, dep: &str, policy: OnDependencyFailure) -> Self {
        if let Some(s) = self.steps.iter_mut().find(|s| s.name == step) {
            s.edges.insert(dep.to_owned(), policy);
        }
        self
    }

    /// A description, as [`Batch::description`].
    pub fn description(mut self, text: impl Into<String>) -> Self {
        self.batch = self.batch.description(text);
        self
    }

    /// The tenant its callbacks run in, as [`Batch::set_tenant`].
    pub fn set_tenant(mut self, tenant: impl Into<String>) -> Self {
        self.batch = self.batch.set_tenant(tenant);
        self
    }

    /// The job enqueued once every step has run once (or was cancelled).
    pub fn on_complete(mut self, job: impl IntoPush) -> Self {
        self.batch = self.batch.on_complete(job);
        self
    }

    /// The job enqueued once every step has succeeded.
    pub fn on_success(mut self, job: impl IntoPush) -> Self {
        self.batch = self.batch.on_success(job);
        self
    }

    /// The job enqueued when the first step dies.
    pub fn on_death(mut self, job: impl IntoPush) -> Self {
        self.batch = self.batch.on_death(job);
        self
    }

    /// Commits the workflow: the steps without dependencies become runnable;
    /// the others are held until theirs succeed. Returns its id (a batch
    /// id: [`Client::batch_status`] reads it). A cycle, an unknown or a
    /// duplicate step name is [`Error::Workflow`], naming it, and nothing is
    /// written.
    pub async fn commit(self, client: &Client) -> Result<String> {
        client.commit_workflow(self).await
    }
}

/// Steps, edges and held steps' index keys per `workflow_stage.lua` call
/// ([`stage_weight`]).
const STEP_CHUNK: usize = 50;

/// What staging `step` costs `workflow_stage.lua`, in STEP_CHUNK's units:
/// the step, each of its edges, and a held step's index key for explain.
fn stage_weight(step: &StagedStep) -> usize {
    1 + step.deps.len() + usize::from(step.held)
}

/// A member ready to stage: its jid, its payload as stored, its push.
struct Member {
    jid: String,
    json: String,
    class: String,
    /// Its tenant and queue (before rerouting), as its payload says.
    tenant: Option<String>,
    queue: String,
    spec: PushSpec,
}

impl Client {
    /// [`Batch::commit`].
    pub(crate) async fn commit_batch(&self, batch: Batch) -> Result<String> {
        self.commit_with(new_jid(), batch, None).await
    }

    /// [`Workflow::commit`].
    pub(crate) async fn commit_workflow(&self, wf: Workflow) -> Result<String> {
        validate_steps(&wf.steps)?;
        self.commit_with(new_jid(), wf.batch, Some(wf.steps)).await
    }

    /// Commits `batch` as batch `bid`, whose members are `steps` when it is
    /// a workflow. Repeating it with the same bid and members (after a
    /// crash) is safe: what is staged is not staged again, a batch flipped
    /// open already is not staged at all, and each member is pushed once.
    async fn commit_with(
        &self,
        bid: String,
        batch: Batch,
        steps: Option<Vec<WfStep>>,
    ) -> Result<String> {
        let now = now_f64();
        if steps.is_some() && !self.broker().batch_in_script() {
            return Err(Error::Workflow(
                "workflows need one Redis server for now: on a Redis Cluster a released step's queue is in another slot than its workflow".into(),
            ));
        }
        if batch.parent.is_some() && !self.broker().batch_in_script() {
            return Err(Error::Batch(
                "child batches need one Redis server: on a Redis Cluster a child and its parent are in different slots".into(),
            ));
        }
        let mut tenant = batch.tenant.clone();
        let mut members = Vec::with_capacity(batch.members.len());
        for job in batch.members {
            let Some(m) = self.member(&bid, job?, now).await? else {
                continue;
            };
            if tenant.is_none() {
                tenant.clone_from(&m.tenant);
            }
            members.push(m);
        }
        let workflow = steps.is_some();
        let staged_steps = self
            .steps(
                &bid,
                steps.unwrap_or_default(),
                now,
                &mut tenant,
                &mut members,
            )
            .await?;
        let tenant = tenant.unwrap_or_default();
        // The `queues` set a fired callback's queue joins, and on a Redis
        // Cluster `split`: a fired callback waits for the caller to push it.
        let mut callbacks = vec![("qs".to_owned(), self.broker().keys().queues())];
        if !self.broker().batch_in_script() {
            callbacks.push(("split".to_owned(), "1".to_owned()));
        }
        for (event, job) in batch.callbacks {
            callbacks.extend(
                self.callback_fields(&bid, batch.parent.as_deref(), event, job?, &tenant)
                    .await?,
            );
        }
        let broker = self.broker();
        // Staged: members, invisible, expiring unless the flip comes. A
        // batch no longer staging was flipped open by an earlier commit of
        // this bid: nothing more to stage.
        let mut chunk: Vec<(String, String)> = Vec::new();
        let mut bytes = 0;
        let mut staged_any = false;
        let mut open = false;
        // In name order (each step's dependents list comes out sorted), in
        // calls of about STEP_CHUNK steps, edges and index keys.
        let mut staged_steps = staged_steps;
        staged_steps.sort_by(|a, b| a.name.cmp(&b.name));
        let mut from = 0;
        while from < staged_steps.len() && !open {
            let mut to = from;
            let mut weight = 0;
            while to < staged_steps.len()
                && (to == from || weight + stage_weight(&staged_steps[to]) <= STEP_CHUNK)
            {
                weight += stage_weight(&staged_steps[to]);
                to += 1;
            }
            open = !broker
                .workflow_stage(
                    &bid,
                    &batch.description,
                    &tenant,
                    &staged_steps[from..to],
                    now,
                )
                .await?;
            staged_any = true;
            from = to;
        }
        for m in members.iter().filter(|_| !workflow) {
            if open {
                break;
            }
            bytes += m.json.len();
            chunk.push((m.jid.clone(), m.json.clone()));
            if chunk.len() >= STAGE_CHUNK || bytes >= STAGE_BYTES {
                open = !broker
                    .batch_stage(&bid, &batch.description, &tenant, &chunk, now)
                    .await?;
                staged_any = true;
                chunk.clear();
                bytes = 0;
            }
        }
        if !open && (!chunk.is_empty() || !staged_any) {
            broker
                .batch_stage(&bid, &batch.description, &tenant, &chunk, now)
                .await?;
        }
        broker.batch_listed(&bid, now).await?;
        match broker
            .batch_commit(
                &bid,
                self.inner.config.batch_retention.as_secs(),
                &callbacks,
                batch.parent.as_deref(),
                self.clock_offset(),
            )
            .await?
        {
            Committed::Opened(fired) if !broker.batch_in_script() => {
                self.push_due_callbacks(&bid, &fired).await?
            }
            // A repeated commit: what an earlier one fired and left due is
            // pushed now (each once; one no longer due is skipped).
            Committed::AlreadyOpen if !broker.batch_in_script() => {
                self.push_due_callbacks(&bid, &[Event::Complete, Event::Success, Event::Death])
                    .await?
            }
            Committed::Opened(_) | Committed::AlreadyOpen => {}
            Committed::ParentGone => {
                return Err(Error::NoSuchBatch {
                    bid: batch.parent.unwrap_or_default(),
                });
            }
            Committed::ParentFinished => {
                return Err(Error::BatchFinished {
                    bid: batch.parent.unwrap_or_default(),
                });
            }
            Committed::Gone => {
                return Err(Error::Batch(format!(
                    "batch {bid}: its staged members expired before the commit"
                )));
            }
        }
        tracing::debug!(bid = %bid, members = members.len(), "batch committed");
        // From here on the batch is committed: every member gets pushed (by a
        // sweep if this process dies now).
        self.release(&bid, members).await?;
        Ok(bid)
    }

    /// A workflow's steps as members (those without dependencies, in
    /// `members`, are pushed at the flip) and as `workflow_stage.lua` stages
    /// them. A step a middleware stops fails the commit: its dependents
    /// would wait for it forever.
    async fn steps(
        &self,
        bid: &str,
        steps: Vec<WfStep>,
        now: f64,
        tenant: &mut Option<String>,
        members: &mut Vec<Member>,
    ) -> Result<Vec<StagedStep>> {
        let mut out = Vec::with_capacity(steps.len());
        for step in steps {
            let mut job = step.job?;
            job.payload_mut().set(fields::WORKFLOW_STEP, &step.name);
            let sharded_type = job.sharded_queue();
            let Some(m) = self.member(bid, job, now).await? else {
                return Err(Error::Workflow(format!(
                    "a client middleware stopped step `{}`: its dependents would wait forever",
                    step.name
                )));
            };
            if tenant.is_none() {
                tenant.clone_from(&m.tenant);
            }
            let queue = m.queue.clone();
            let held = !step.deps.is_empty();
            let payload = if held {
                let mut p = Payload::parse_slice(m.json.as_bytes())?;
                p.set("enqueued_at", 0.0);
                let (before, _, after) = p.split_at("enqueued_at");
                format!("{before}\n{after}")
            } else {
                m.json.clone()
            };
            out.push(StagedStep {
                jid: m.jid.clone(),
                payload,
                held,
                policy: step.policy.as_str().to_owned(),
                sharded: self.is_sharded(&queue) || sharded_type == Some(queue.as_str()),
                queue,
                deps: step.deps,
                edges: step
                    .edges
                    .into_iter()
                    .map(|(d, pol)| (d, pol.as_str().to_owned()))
                    .collect(),
                name: step.name,
            });
            if !held {
                members.push(m);
            }
        }
        Ok(out)
    }

    /// A member through the client middleware, with its batch and tenant
    /// written in, and its push prepared (`None`: a middleware stopped it).
    async fn member(&self, bid: &str, job: PushJob, now: f64) -> Result<Option<Member>> {
        let Some(mut job) = self.run_chain(job).await? else {
            return Ok(None);
        };
        job.settle_tenant();
        let class = job.class();
        refuse_unique(&job)?;
        job.payload_mut().set(fields::BID, bid);
        let jid = job.jid();
        let json = job.payload().to_json();
        let (tenant, queue) = (job.tenant(), job.queue());
        let (spec, _, _) = self.prepare(job, now, None)?;
        Ok(Some(Member {
            jid,
            json,
            class,
            tenant,
            queue,
            spec,
        }))
    }

    /// A callback's fields in the batch's hash (see `lib/batch.lua`): its
    /// payload split around its `enqueued_at` value, its queue's list and
    /// wake-up list and its name.
    async fn callback_fields(
        &self,
        bid: &str,
        parent: Option<&str>,
        event: Event,
        job: PushJob,
        tenant: &str,
    ) -> Result<Vec<(String, String)>> {
        let Some(mut job) = self.run_chain(job).await? else {
            return Ok(Vec::new());
        };
        job.settle_tenant();
        if job.tenant().is_none() && !tenant.is_empty() {
            job.set_tenant(tenant);
        }
        let sharded_type = job.sharded_queue();
        let p = job.payload_mut();
        p.remove(fields::BID);
        p.set("jid", callback_jid(bid, event));
        p.set(fields::BATCH_CALLBACK, bid);
        p.set(fields::BATCH_EVENT, event.as_str());
        if let Some(parent) = parent.filter(|_| event != Event::Death) {
            // Its end reports the child's progress to the parent.
            p.set(fields::BATCH_PARENT, parent);
        }
        p.set("enqueued_at", 0.0);
        let queue = p.queue();
        super::push::check_queue_name(&queue)?;
        let (before, _, after) = p.split_at("enqueued_at");
        let size = before.len() + after.len() + 20;
        if size > self.inner.config.max_payload_bytes {
            return Err(Error::PayloadTooLarge {
                class: p.class(),
                size,
                max: self.inner.config.max_payload_bytes,
            });
        }
        let sharded = self.is_sharded(&queue) || sharded_type == Some(queue.as_str());
        let broker = self.broker();
        let e = event.as_str();
        Ok(vec![
            (format!("cb:{e}"), format!("{before}\n{after}")),
            (format!("cbq:{e}"), broker.keys().queue(&queue)),
            (format!("cbw:{e}"), broker.wake_key(&queue, sharded)),
            (format!("cbn:{e}"), queue),
        ])
    }

    /// Pushes batch `bid`'s fired callbacks that wait in its `:due` set (a
    /// Redis Cluster, where the script that fires one cannot reach its
    /// queue), each once: the push (with the `:due` entry as its `Src`)
    /// skips one no longer due, marks it in its queue's slot, then drops it
    /// from `:due`.
    pub(crate) async fn push_due_callbacks(&self, bid: &str, fired: &[Event]) -> Result<()> {
        let broker = self.broker();
        for event in fired {
            let e = event.as_str();
            let Some(stored) = broker.batch_callback(bid, e).await? else {
                continue;
            };
            let (head, tail) = stored.split_once('\n').unwrap_or((&stored, ""));
            let payload = Payload::parse(format!("{head}{:.6}{tail}", now_f64()).into_bytes())?;
            let jid = payload.jid();
            let src = Src {
                record: broker.batch_due_record(bid),
                member: e.to_owned(),
                once: Some(jid),
            };
            let (spec, _, _) = self.prepare(PushJob::new(payload), now_f64(), Some(src))?;
            broker.push(&[spec], self.clock_offset()).await?;
        }
        Ok(())
    }

    /// Pushes committed members from the batch's staged set, each once (a
    /// member already pushed, by a sweep, is left).
    async fn release(&self, bid: &str, members: Vec<Member>) -> Result<()> {
        let record = self.broker().batch_staged_record(bid);
        let mut members = members.into_iter().peekable();
        loop {
            let mut specs = Vec::new();
            let mut jids = Vec::new();
            let mut classes = Vec::new();
            for mut m in members.by_ref().take(RELEASE_CHUNK) {
                m.spec.src = Some(Src {
                    record: record.clone(),
                    member: m.jid.clone(),
                    once: None,
                });
                specs.push(m.spec);
                jids.push(m.jid);
                classes.push(m.class);
            }
            let pushed = if specs.is_empty() {
                Vec::new()
            } else {
                self.broker().push(&specs, self.clock_offset()).await?
            };
            for ((spec, class), p) in specs.iter().zip(classes).zip(pushed) {
                if let Pushed::To(i) = p
                    && i > 0
                {
                    count_reroute(class, &spec.candidates[i].queue);
                }
            }
            self.broker().batch_released(bid, &jids).await?;
            if members.peek().is_none() {
                return Ok(());
            }
        }
    }

    /// [`crate::BatchHandle::push`].
    pub(crate) async fn add_to_batch(&self, bid: &str, job: PushJob) -> Result<()> {
        let now = now_f64();
        let Some(m) = self.member(bid, job, now).await? else {
            return Ok(());
        };
        let broker = self.broker();
        // Listed as releasing first: if this process dies after the add, a
        // sweep pushes the member.
        broker.batch_listed(bid, now).await?;
        match broker.batch_add(bid, &m.jid, &m.json, now).await? {
            Added::Staged => self.release(bid, vec![m]).await,
            Added::Finished => Err(Error::BatchFinished {
                bid: bid.to_owned(),
            }),
            Added::Gone => {
                broker.batch_unlist_releasing(bid).await?;
                Err(Error::NoSuchBatch {
                    bid: bid.to_owned(),
                })
            }
        }
    }

    /// Batch `bid`'s status; `None` when there is no such batch.
    pub async fn batch_status(&self, bid: &str) -> Result<Option<BatchStatus>> {
        self.inspector().batch_status(bid).await
    }

    /// Pushes the staged members of batches whose committer stopped before
    /// pushing them all (it died after the flip): at most `max_batches`
    /// batches per call, flipped more than 30 s ago. Returns members pushed.
    pub async fn release_staged_batches(&self, max_batches: usize) -> Result<usize> {
        let broker = self.broker();
        let bids = broker
            .batches_releasing(now_f64() - SWEEP_AFTER_SECS, max_batches)
            .await?;
        let mut pushed = 0;
        for bid in bids {
            let staged = match broker.batch_staged(&bid, RELEASE_CHUNK).await? {
                Staged::Open(staged) => staged,
                // Its creator may yet commit it.
                Staged::Staging => continue,
                Staged::Gone => {
                    broker.batch_unlist_releasing(&bid).await?;
                    continue;
                }
            };
            let now = now_f64();
            let mut members = Vec::new();
            for (jid, json) in staged {
                let payload = match Payload::parse(json.into_bytes()) {
                    Ok(p) => p,
                    Err(e) => {
                        tracing::error!(bid = %bid, job.jid = %jid, error = %e, "a staged batch member is not a job; left staged");
                        continue;
                    }
                };
                let class = payload.class();
                let json = payload.to_json();
                let (tenant, queue) = (payload.tenant(), payload.queue());
                let (spec, _, _) = self.prepare(PushJob::new(payload), now, None)?;
                members.push(Member {
                    jid,
                    json,
                    class,
                    tenant,
                    queue,
                    spec,
                });
            }
            pushed += members.len();
            if !members.is_empty() {
                tracing::warn!(bid = %bid, members = members.len(), "pushing a committed batch's members its committer left");
            }
            self.release(&bid, members).await?;
        }
        Ok(pushed)
    }
}

/// A workflow's steps checked: no cycle, no unknown or duplicate name.
fn validate_steps(steps: &[WfStep]) -> Result<()> {
    let decl: Vec<(String, Vec<String>)> = steps
        .iter()
        .map(|s| (s.name.clone(), s.deps.clone()))
        .collect();
    validate(&decl).map_err(Error::Workflow)
}

/// A unique job cannot be a member.
fn refuse_unique(job: &PushJob) -> Result<()> {
    if UniqueSpec::of(job.payload()).is_some() {
        return Err(Error::Batch(format!(
            "`{}` is a unique job: it cannot be a batch member (a refused duplicate would leave its batch pending)",
            job.class()
        )));
    }
    Ok(())
}

/// The jid of batch `bid`'s callback for `event`: derived, so a replay of
/// the step that fires it names the same job (FNV-1a, 96 bits, hex).
pub fn callback_jid(bid: &str, event: Event) -> String {
    let fnv = |seed: u64| {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed;
        for b in bid.bytes().chain([b'|']).chain(event.as_str().bytes()) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        h
    };
    format!("{:016x}{:08x}", fnv(0), fnv(0x9e37_79b9) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn callback_jids_are_derived_and_distinct() {
        let a = callback_jid("b1", Event::Complete);
        assert_eq!(a, callback_jid("b1", Event::Complete));
        assert_eq!(a.len(), 24);
        assert_ne!(a, callback_jid("b1", Event::Success));
        assert_ne!(a, callback_jid("b2", Event::Complete));
    }
}
