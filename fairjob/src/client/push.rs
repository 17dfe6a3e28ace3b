//! One push, start to end: run the client middleware chain, resolve the tenant
//! (explicit `.set_tenant()` → a tenant already on the payload → the job's
//! `#[fair_tenant]` → none), plan the reroute candidates, check the size, then
//! one `push.lua` call (or `schedule.lua` for a job due later).

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tracing::Instrument;

use super::{Client, ClientNext};
use crate::broker::read::Rejection;
use crate::broker::{PushSpec, Pushed, Src, UniqueLock, When};
use crate::error::{Error, Result};
use crate::fair;
use crate::wire::{OnConflict, Payload, UniqueSpec, WireRule, fields, now_f64};

/// Jobs per `push.lua` call in [`Client::push_bulk`].
const BULK_BATCH: usize = 1000;

/// A job on its way into Redis, as client middleware sees it.
pub struct PushJob {
    payload: Payload,
    default_tenant: Option<String>,
    /// A queue the job's type declares tenant-sharded.
    sharded_queue: Option<&'static str>,
}

impl fmt::Debug for PushJob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PushJob")
            .field("payload", &self.payload)
            .field("default_tenant", &self.default_tenant)
            .finish()
    }
}

/// Anything that can be pushed: a [`PushJob`], a `#[derive(Job)]` value, or an
/// `Enqueue` builder (`job.set_tenant("acme")`).
pub trait IntoPush {
    /// Builds the payload (encoding the job's arguments).
    fn into_push(self) -> Result<PushJob>;
}

impl IntoPush for PushJob {
    fn into_push(self) -> Result<PushJob> {
        Ok(self)
    }
}

impl PushJob {
    /// A push of an already built payload (its `queue`, tenant and rules are read from it).
    pub fn new(payload: Payload) -> PushJob {
        PushJob {
            payload,
            default_tenant: None,
            sharded_queue: None,
        }
    }

    /// A push whose tenant, when none is set by then, is `default_tenant` (the
    /// job type's `#[fair_tenant]`), and for which `sharded_queue` is
    /// tenant-sharded (the job type's `shard_by_tenant` queue).
    pub(crate) fn typed(
        payload: Payload,
        default_tenant: Option<String>,
        sharded_queue: Option<&'static str>,
    ) -> PushJob {
        PushJob {
            payload,
            default_tenant,
            sharded_queue,
        }
    }

    /// The payload as it stands.
    pub fn payload(&self) -> &Payload {
        &self.payload
    }

    /// The payload, to edit (any field; unknown ones are kept).
    pub fn payload_mut(&mut self) -> &mut Payload {
        &mut self.payload
    }

    /// The class.
    pub fn class(&self) -> String {
        self.payload.class()
    }

    /// The jid.
    pub fn jid(&self) -> String {
        self.payload.jid()
    }

    /// The queue it is headed for (before rerouting).
    pub fn queue(&self) -> String {
        self.payload.queue()
    }

    /// Sends the job to another queue; like `.queue()` at enqueue, this pins it
    /// (never rerouted or counted).
    pub fn set_queue(&mut self, queue: impl Into<String>) {
        self.payload.set("queue", queue.into());
        self.payload.set(fields::QUEUE_PINNED, true);
    }

    /// The tenant on the payload, if any (the type's `#[fair_tenant]` applies
    /// only after the chain, when none was set).
    pub fn tenant(&self) -> Option<String> {
        self.payload.tenant()
    }

    /// Sets the tenant unless one is already set (explicit `.set_tenant()` wins).
    pub fn set_tenant_if_absent(&mut self, tenant: impl Into<String>) {
        let t = tenant.into();
        if self.payload.tenant().is_none() && !t.is_empty() {
            self.payload.set(fields::FAIR_TENANT, t);
        }
    }

    /// Sets the tenant, replacing any.
    pub fn set_tenant(&mut self, tenant: impl Into<String>) {
        let t = tenant.into();
        if t.is_empty() {
            self.payload.remove(fields::FAIR_TENANT);
        } else {
            self.payload.set(fields::FAIR_TENANT, t);
        }
    }

    /// The payload with its default tenant written in (a periodic
    /// schedule's job template).
    pub(crate) fn into_template(mut self) -> Payload {
        self.settle_tenant();
        self.payload
    }

    /// The tenant used when none is set by the end of the middleware chain
    /// (the job type's `#[fair_tenant]`), for a relay that stores the push.
    pub fn default_tenant(&self) -> Option<&str> {
        self.default_tenant.as_deref()
    }

    /// Sets the tenant used when none is set by the end of the chain (a relay
    /// restoring a stored push).
    pub fn set_default_tenant(&mut self, tenant: Option<String>) {
        self.default_tenant = tenant.filter(|t| !t.is_empty());
    }

    /// The queue the job's type declares tenant-sharded, if any.
    pub(super) fn sharded_queue(&self) -> Option<&'static str> {
        self.sharded_queue
    }

    /// Writes the default tenant into the payload when it has none.
    pub(super) fn settle_tenant(&mut self) {
        if self.payload.tenant().is_none()
            && let Some(t) = self.default_tenant.take()
        {
            self.payload.set(fields::FAIR_TENANT, t);
        }
    }
}

impl Client {
    /// Pushes a job now; returns its jid.
    pub async fn push(&self, job: impl IntoPush) -> Result<String> {
        self.enqueue(job.into_push()?, None).await
    }

    /// Schedules a job to run after `delay` by Redis's clock; a delay of zero
    /// pushes at once. Returns the jid.
    pub async fn push_in(&self, job: impl IntoPush, delay: Duration) -> Result<String> {
        let when = (!delay.is_zero()).then_some(When::In(delay.as_secs_f64()));
        self.enqueue(job.into_push()?, when).await
    }

    /// Schedules a job to run at `at`; a time in the past pushes at once.
    pub async fn push_at(&self, job: impl IntoPush, at: SystemTime) -> Result<String> {
        let secs = at
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        let when = (secs > now_f64()).then_some(When::At(secs));
        self.enqueue(job.into_push()?, when).await
    }

    /// Pushes many jobs: each through the middleware chain, each to its own
    /// final queue, in batches of one script call. Returns one entry per job:
    /// its jid, or `None` when a middleware stopped it or, for a unique job,
    /// its key was held (see [`Client::push_bulk_report`] to tell which).
    pub async fn push_bulk<I: IntoPush>(
        &self,
        jobs: impl IntoIterator<Item = I>,
    ) -> Result<Vec<Option<String>>> {
        Ok(self
            .push_bulk_report(jobs)
            .await?
            .into_iter()
            .map(|b| match b {
                Bulk::Pushed(jid) => Some(jid),
                Bulk::Duplicate { .. } | Bulk::Stopped => None,
            })
            .collect())
    }

    /// [`Client::push_bulk`], telling for each job whether it was pushed, was
    /// a duplicate of a unique job (each job is checked, against the jobs
    /// before it in the same batch too), or was stopped by a middleware.
    pub async fn push_bulk_report<I: IntoPush>(
        &self,
        jobs: impl IntoIterator<Item = I>,
    ) -> Result<Vec<Bulk>> {
        // One producer span for the batch; each job carries its context.
        let span = tracing::info_span!(
            "fairjob.enqueue_bulk",
            jobs = tracing::field::Empty,
            otel.name = tracing::field::Empty,
            otel.kind = tracing::field::Empty,
        );
        crate::otel::bulk_span(&span);
        async move {
            let span = tracing::Span::current();
            let mut out = Vec::new();
            let mut batch: Vec<(usize, PushJob)> = Vec::new();
            let mut queues = std::collections::BTreeSet::new();
            for job in jobs {
                let push = job.into_push()?;
                let idx = out.len();
                out.push(Bulk::Stopped);
                if let Some(mut push) = self.run_chain(push).await? {
                    crate::otel::on_bulk_job(&span, &mut push.payload);
                    queues.insert(push.payload.queue());
                    batch.push((idx, push));
                }
                if batch.len() >= BULK_BATCH {
                    self.push_many(std::mem::take(&mut batch), &mut out).await?;
                }
            }
            self.push_many(batch, &mut out).await?;
            let pushed = out.iter().filter(|b| matches!(b, Bulk::Pushed(_))).count();
            span.record("jobs", pushed as i64);
            let queue = (queues.len() == 1).then(|| queues.first()).flatten();
            crate::otel::on_bulk_end(&span, self.peer(), pushed, queue.map(String::as_str));
            Ok(out)
        }
        .instrument(span)
        .await
    }

    async fn push_many(&self, batch: Vec<(usize, PushJob)>, out: &mut [Bulk]) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let now = now_f64();
        let mut specs = Vec::with_capacity(batch.len());
        let mut jids = Vec::with_capacity(batch.len());
        let mut classes = Vec::with_capacity(batch.len());
        for (idx, job) in batch {
            jids.push((idx, job.payload.jid()));
            classes.push(job.payload.class());
            specs.push(self.prepare(job, now, None)?.0);
        }
        let pushed = self
            .retrying(
                || jids.iter().map(|(_, j)| j.clone()).collect(),
                || self.broker().push(&specs, self.clock_offset()),
            )
            .await?;
        let mut rejected = Vec::new();
        for (((spec, class), p), (idx, jid)) in specs.iter().zip(classes).zip(pushed).zip(jids) {
            out[idx] = match p {
                Pushed::To(i) => {
                    if i > 0 {
                        count_reroute(class, &spec.candidates[i].queue);
                    }
                    Bulk::Pushed(jid)
                }
                Pushed::Replaced(holder) => Bulk::Pushed(holder),
                Pushed::Duplicate(holder) => {
                    rejected.push(rejection(class, jid.clone(), &holder));
                    Bulk::Duplicate { jid, holder }
                }
                Pushed::SourceGone => Bulk::Stopped,
            };
        }
        self.rejected(rejected).await;
        Ok(())
    }

    /// Counts refused duplicates (`fairjob_unique_rejections_total`) and
    /// remembers them for explain; a failure to remember is only logged.
    async fn rejected(&self, rejected: Vec<Rejection>) {
        for r in &rejected {
            tracing::debug!(job.class = %r.class, job.jid = %r.jid, holder = %r.holder, "not enqueued: duplicate");
            ::metrics::counter!(crate::metrics::UNIQUE_REJECTIONS_TOTAL, "class" => r.class.clone())
                .increment(1);
        }
        if let Err(e) = self.broker().remember_rejections(&rejected).await {
            tracing::warn!(error = %e, "could not remember refused duplicates for explain");
        }
    }

    /// Runs the client middleware chain on `job`.
    pub(super) async fn run_chain(&self, job: PushJob) -> Result<Option<PushJob>> {
        ClientNext::new(self.inner.chain.clone()).run(job).await
    }

    /// Resolves the tenant and checks the size; returns the push, the rules it
    /// may apply and the queue it is judged against.
    pub(super) fn prepare(
        &self,
        mut job: PushJob,
        now: f64,
        src: Option<Src>,
    ) -> Result<(PushSpec, Vec<WireRule>, String)> {
        job.settle_tenant();
        let PushJob {
            mut payload,
            sharded_queue,
            ..
        } = job;
        payload.set("enqueued_at", now);
        let unique = self.unique_lock(&mut payload);
        let keys = self.broker().keys();
        let plan = fair::plan(
            &payload,
            keys,
            self.inner.config.max_throttling_window,
            &|q| self.is_sharded(q) || sharded_queue == Some(q),
        );
        if plan.reroute.is_some() {
            payload.set(fields::ORIGINAL_QUEUE, &plan.base_queue);
        } else if !plan.rules.is_empty() && payload.tenant().is_none() {
            tracing::warn!(
                job.class = %payload.class(),
                job.jid = %payload.jid(),
                "job has reroute rules but no tenant: enqueued unthrottled"
            );
        }
        for c in &plan.candidates {
            check_queue_name(&c.queue)?;
            if c.sharded && !self.is_sharded(&c.queue) {
                // Sharded by the job type's declaration only: the builder
                // checked the others.
                keys.check_shardable(&c.queue).map_err(Error::Config)?;
            }
        }
        let (before, _, after) = payload.split_at("queue");
        let size = before.len()
            + after.len()
            + plan
                .candidates
                .iter()
                .map(|c| c.queue.len())
                .max()
                .unwrap_or(0)
            + 2;
        let max = self.inner.config.max_payload_bytes;
        if size > max {
            return Err(Error::PayloadTooLarge {
                class: payload.class(),
                size,
                max,
            });
        }
        let (before, after) = if payload.has("queue") {
            (before, after)
        } else {
            // No queue field yet: splice one in at the end.
            let mut b = before;
            b.pop();
            if b.len() > 1 {
                b.push(',');
            }
            b.push_str("\"queue\":");
            (b, "}".to_owned())
        };
        let fair::Plan {
            base_queue,
            candidates,
            reroute,
            rules,
        } = plan;
        Ok((
            PushSpec {
                src,
                reroute,
                before,
                after,
                candidates,
                unique,
                once: None,
            },
            rules,
            base_queue,
        ))
    }

    /// A unique job's lock as its payload asks for it (`unique_*` fields),
    /// recording the lock's queue in the payload the first time.
    fn unique_lock(&self, payload: &mut Payload) -> Option<UniqueLock> {
        let spec = UniqueSpec::of(payload)?;
        if !payload.has(fields::UNIQUE_QUEUE) {
            payload.set(fields::UNIQUE_QUEUE, &spec.queue);
        }
        Some(UniqueLock {
            prefix: self.broker().keys().unique_prefix(&spec.queue),
            digest: spec.digest.clone(),
            jid: payload.jid(),
            ttl_ms: spec.ttl_ms(),
            replace: spec.on_conflict == OnConflict::Replace,
        })
    }

    /// Pushes one job that already went through the chain; `None` when its
    /// promoting-record entry was gone. A unique job whose key is held is
    /// `Error::Duplicate` (or, replacing a waiting holder, the holder's jid).
    pub(super) async fn push_one(&self, job: PushJob, src: Option<Src>) -> Result<Option<String>> {
        let jid = job.payload.jid();
        let class = job.payload.class();
        let (spec, rules, base_queue) = self.prepare(job, now_f64(), src)?;
        let pushed = self
            .retrying(
                || vec![jid.clone()],
                || {
                    self.broker()
                        .push(std::slice::from_ref(&spec), self.clock_offset())
                },
            )
            .await?;
        let idx = match pushed.into_iter().next() {
            Some(Pushed::To(idx)) => idx,
            Some(Pushed::Duplicate(holder)) => {
                self.rejected(vec![rejection(class, jid, &holder)]).await;
                return Err(Error::Duplicate { jid: holder });
            }
            Some(Pushed::Replaced(holder)) => {
                tracing::debug!(holder = %holder, "unique job replaced the waiting one");
                return Ok(Some(holder));
            }
            _ => return Ok(None),
        };
        let span = tracing::Span::current();
        let queue = &spec.candidates[idx].queue;
        span.record("job.queue", queue.as_str());
        crate::otel::on_pushed(&span, queue);
        if idx > 0 {
            let rule = &rules[idx - 1];
            span.record(
                "rule",
                tracing::field::display(format_args!(
                    "{} (threshold {}, per {}s)",
                    rule.queue,
                    rule.threshold,
                    rule.per.unwrap_or(0)
                )),
            );
            tracing::debug!(from = %base_queue, to = %queue, "rerouted");
            count_reroute(class, queue);
        }
        Ok(Some(jid))
    }

    async fn enqueue(&self, job: PushJob, when: Option<When>) -> Result<String> {
        let class = job.payload.class();
        let jid = job.payload.jid();
        let span = tracing::info_span!(
            "fairjob.enqueue",
            job.class = %class,
            job.jid = %jid,
            job.queue = %job.payload.queue(),
            fairjob.tenant = tracing::field::Empty,
            rule = tracing::field::Empty,
            otel.name = tracing::field::Empty,
            otel.kind = tracing::field::Empty,
        );
        crate::otel::enqueue_span(&span, &job.payload.queue());
        async move {
            let Some(mut job) = self.run_chain(job).await? else {
                return Err(Error::Stopped { class, jid });
            };
            if let Some(t) = job.payload.tenant().or_else(|| job.default_tenant.clone()) {
                tracing::Span::current().record("fairjob.tenant", t.as_str());
            }
            crate::otel::on_enqueue(&tracing::Span::current(), self.peer(), &mut job.payload);
            let Some(when) = when else {
                return self
                    .push_one(job, None)
                    .await?
                    .ok_or_else(|| Error::Stopped {
                        class,
                        jid: jid.clone(),
                    });
            };
            job.settle_tenant();
            job.payload.remove("enqueued_at");
            check_queue_name(&job.payload.queue())?;
            crate::otel::on_pushed(&tracing::Span::current(), &job.payload.queue());
            let unique = self.unique_lock(&mut job.payload);
            let json = job.payload.to_json();
            let max = self.inner.config.max_payload_bytes;
            if json.len() > max {
                return Err(Error::PayloadTooLarge {
                    class,
                    size: json.len(),
                    max,
                });
            }
            let entries = [(when, json, unique)];
            let added = self
                .retrying(
                    || vec![jid.clone()],
                    || self.broker().schedule(&entries, self.clock_offset()),
                )
                .await?;
            match added.into_iter().next() {
                Some(Pushed::Duplicate(holder)) => {
                    self.rejected(vec![rejection(class, jid, &holder)]).await;
                    Err(Error::Duplicate { jid: holder })
                }
                Some(Pushed::Replaced(holder)) => Ok(holder),
                _ => Ok(jid),
            }
        }
        .instrument(span)
        .await
    }

    /// Re-pushes a raw payload (the scheduler's promotion) through the chain;
    /// `src` is the promoting-record entry it comes from. `None` when a
    /// middleware stopped it or another poller had promoted it.
    pub(crate) async fn repush(
        &self,
        payload: Payload,
        src: Option<Src>,
    ) -> Result<Option<String>> {
        match self.run_chain(PushJob::new(payload)).await? {
            Some(job) => self.push_one(job, src).await,
            None => Ok(None),
        }
    }
}

/// A queue name a worker can be given (`-q name[,weight]`): not empty, no comma.
pub(super) fn check_queue_name(queue: &str) -> Result<()> {
    if queue.is_empty() || queue.contains(',') {
        return Err(Error::Config(format!(
            "invalid queue name {queue:?}: queue names must be non-empty and may not contain ','"
        )));
    }
    Ok(())
}

/// What became of one job of [`Client::push_bulk_report`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bulk {
    /// Pushed, with this jid (for a unique job that replaced a waiting one:
    /// the waiting job's jid).
    Pushed(String),
    /// Not pushed: a unique job whose key is held by `holder`.
    Duplicate {
        /// The jid the job would have had.
        jid: String,
        /// The jid that holds the key.
        holder: String,
    },
    /// Not pushed: a client middleware stopped it.
    Stopped,
}

/// A refused duplicate of `holder`, now.
fn rejection(class: String, jid: String, holder: &str) -> Rejection {
    Rejection {
        jid,
        holder: holder.to_owned(),
        class,
        at: now_f64(),
    }
}

/// Counts one job a reroute rule sent to `to_queue` (`fairjob_reroutes_total`).
pub(super) fn count_reroute(class: String, to_queue: &str) {
    ::metrics::counter!(
        crate::metrics::REROUTES_TOTAL,
        "class" => class,
        "to_queue" => to_queue.to_owned()
    )
    .increment(1);
}
