//! Enqueueing: [`Client`], the per-enqueue builder [`Enqueue`], and the client
//! middleware chain that every push passes through (also pushes made from inside
//! a running job and re-pushes by the scheduler).
//!
//! A push builds a Sidekiq payload, runs the chain (which may edit it, stop it,
//! or pass it on), resolves the tenant (explicit `.set_tenant()` → a tenant
//! already on the payload → the job's `#[fair_tenant]` → none), and hands the
//! prepared strings to one `push.lua` call, which also applies reroute rules.
//! This module does not fetch or run jobs.

mod middleware;

use std::collections::HashSet;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tracing::Instrument;

pub use middleware::{ClientMiddleware, ClientNext, client_middleware_fn};

use crate::broker::{ConnectOptions, PushSpec, RedisBroker, When};
use crate::error::{Error, Result};
use crate::fair;
use crate::job::{Job, Registry, Retry};
use crate::payload::{self, Payload, fields};

/// The default maximum payload size: 1 MiB.
pub const DEFAULT_MAX_PAYLOAD: usize = 1024 * 1024;

/// Jobs per `push.lua` call in [`Client::push_bulk`].
const BULK_BATCH: usize = 1000;

/// Enqueues jobs. Cheap to clone; share one per process.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    broker: RedisBroker,
    chain: Arc<[Arc<dyn ClientMiddleware>]>,
    max_payload: usize,
    max_window: Duration,
    sharded: HashSet<String>,
    clock_offset: AtomicI64,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("broker", &self.inner.broker)
            .field("middleware", &self.inner.chain.len())
            .field("max_payload", &self.inner.max_payload)
            .finish()
    }
}

/// Configures a [`Client`].
#[must_use]
pub struct ClientBuilder {
    url: String,
    options: ConnectOptions,
    chain: Vec<Arc<dyn ClientMiddleware>>,
    max_payload: usize,
    max_window: Duration,
    sharded: HashSet<String>,
}

impl fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("redis", &crate::broker::redacted(&self.url))
            .field("options", &self.options)
            .field("middleware", &self.chain.len())
            .finish()
    }
}

impl ClientBuilder {
    /// A builder for `url` (`redis://[user:pass@]host[:port][/db]` or `rediss://…`).
    pub fn new(url: impl Into<String>) -> Self {
        let mut sharded = HashSet::new();
        if let Ok(reg) = Registry::from_inventory() {
            sharded.extend(reg.sharded_queues().into_iter().map(str::to_owned));
        }
        ClientBuilder {
            url: url.into(),
            options: ConnectOptions::default(),
            chain: Vec::new(),
            max_payload: DEFAULT_MAX_PAYLOAD,
            max_window: fair::DEFAULT_MAX_WINDOW,
            sharded,
        }
    }

    /// Prefixes every key with `namespace:`.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        let ns = namespace.into();
        self.options.namespace = (!ns.is_empty()).then_some(ns);
        self
    }

    /// Per-command timeout (default 5 s).
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.options.response_timeout = timeout;
        self
    }

    /// Connect timeout (default 5 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.options.connect_timeout = timeout;
        self
    }

    /// Appends a client middleware; links run in the order added.
    pub fn middleware(mut self, m: impl ClientMiddleware) -> Self {
        self.chain.push(Arc::new(m));
        self
    }

    /// Largest payload accepted, in bytes (default 1 MiB).
    pub fn max_payload_bytes(mut self, max: usize) -> Self {
        self.max_payload = max;
        self
    }

    /// The reroute window kept per tenant (default 1 day, as the gem); raised
    /// automatically to the longest `per` of a job's rules.
    pub fn max_throttling_window(mut self, window: Duration) -> Self {
        self.max_window = window;
        self
    }

    /// The reroute window key format, the gem's `enqueues_key` (placeholders
    /// `%<job_class>s`, `%<fair_tenant>s`, `%<queue>s`).
    pub fn fair_key_format(mut self, format: impl Into<String>) -> Self {
        self.options.fair_key_format = Some(format.into());
        self
    }

    /// Declares a queue tenant-sharded (jobs go straight to their tenant's shard).
    pub fn sharded_queue(mut self, queue: impl Into<String>) -> Self {
        self.sharded.insert(queue.into());
        self
    }

    /// Connects.
    pub async fn build(self) -> Result<Client> {
        let broker = RedisBroker::connect(&self.url, self.options).await?;
        for q in &self.sharded {
            broker.keys().check_shardable(q).map_err(Error::Config)?;
        }
        let mut sharded = self.sharded;
        // Queues that workers declared sharded; best effort (an ACL may forbid it).
        if let Ok(found) = broker
            .query::<Vec<String>>(redis::cmd("SMEMBERS").arg(broker.keys().sharded_queues()))
            .await
        {
            sharded.extend(found);
        }
        Ok(Client {
            inner: Arc::new(Inner {
                broker,
                chain: self.chain.into(),
                max_payload: self.max_payload,
                max_window: self.max_window,
                sharded,
                clock_offset: AtomicI64::new(0),
            }),
        })
    }
}

impl Client {
    /// Connects with default options.
    pub async fn connect(url: &str) -> Result<Client> {
        ClientBuilder::new(url).build().await
    }

    /// A builder.
    pub fn builder(url: impl Into<String>) -> ClientBuilder {
        ClientBuilder::new(url)
    }

    /// The Redis connection and key names.
    pub fn broker(&self) -> &RedisBroker {
        &self.inner.broker
    }

    /// True when `queue` is tenant-sharded for this client.
    pub fn is_sharded(&self, queue: &str) -> bool {
        self.inner.sharded.contains(queue)
    }

    /// Moves this client's view of Redis's clock (tests only: reroute windows,
    /// schedules and retries are judged by Redis `TIME` plus this offset).
    #[doc(hidden)]
    pub fn set_clock_offset(&self, secs: i64) {
        self.inner.clock_offset.store(secs, Ordering::Relaxed);
    }

    #[doc(hidden)]
    pub fn clock_offset(&self) -> i64 {
        self.inner.clock_offset.load(Ordering::Relaxed)
    }

    /// Pushes many jobs of one type: each through the middleware chain, each to
    /// its own final queue, in batches of one script call. Returns one entry per
    /// job: its jid, or `None` when a middleware stopped it.
    pub async fn push_bulk<J: Job>(
        &self,
        jobs: impl IntoIterator<Item = J>,
    ) -> Result<Vec<Option<String>>> {
        let mut out = Vec::new();
        let mut batch: Vec<(usize, PushJob)> = Vec::new();
        for job in jobs {
            let push = PushJob::from_job(Enqueue::new(job), None)?;
            let idx = out.len();
            out.push(None);
            if let Some(push) = self.run_chain(push).await? {
                batch.push((idx, push));
            }
            if batch.len() >= BULK_BATCH {
                self.push_many(std::mem::take(&mut batch), &mut out).await?;
            }
        }
        self.push_many(batch, &mut out).await?;
        Ok(out)
    }

    async fn push_many(
        &self,
        batch: Vec<(usize, PushJob)>,
        out: &mut [Option<String>],
    ) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let now = payload::now_f64();
        let mut specs = Vec::with_capacity(batch.len());
        let mut jids = Vec::with_capacity(batch.len());
        for (idx, job) in batch {
            jids.push((idx, job.payload.jid()));
            specs.push(self.prepare(job, now, None)?.0);
        }
        self.inner.broker.push(&specs, self.clock_offset()).await?;
        for (idx, jid) in jids {
            out[idx] = Some(jid);
        }
        Ok(())
    }

    /// Runs the client middleware chain on `job`.
    pub(crate) async fn run_chain(&self, job: PushJob) -> Result<Option<PushJob>> {
        ClientNext::new(self.inner.chain.clone()).run(job).await
    }

    /// Resolves the tenant and checks the size; returns the push, the rules it
    /// may apply and the queue it is judged against.
    fn prepare(
        &self,
        job: PushJob,
        now: f64,
        src: Option<crate::broker::Src>,
    ) -> Result<(PushSpec, Vec<fair::WireRule>, String)> {
        let PushJob {
            mut payload,
            default_tenant,
        } = job;
        if payload.tenant().is_none()
            && let Some(t) = &default_tenant
        {
            payload.set(fields::FAIR_TENANT, t);
        }
        payload.set("enqueued_at", now);
        let keys = self.inner.broker.keys();
        let plan = fair::plan(&payload, keys, self.inner.max_window, &|q| {
            self.is_sharded(q)
        });
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
        if size > self.inner.max_payload {
            return Err(Error::PayloadTooLarge {
                class: payload.class(),
                size,
                max: self.inner.max_payload,
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
            },
            rules,
            base_queue,
        ))
    }

    /// Pushes one job that already went through the chain.
    pub(crate) async fn push_one(
        &self,
        job: PushJob,
        src: Option<crate::broker::Src>,
    ) -> Result<Option<String>> {
        let jid = job.payload.jid();
        let (spec, rules, base_queue) = self.prepare(job, payload::now_f64(), src)?;
        let chosen = self
            .inner
            .broker
            .push(std::slice::from_ref(&spec), self.clock_offset())
            .await?;
        let idx = chosen.first().copied().unwrap_or(0);
        if idx == 0 {
            return Ok(None);
        }
        let span = tracing::Span::current();
        let queue = &spec.candidates[idx - 1].queue;
        span.record("job.queue", queue.as_str());
        if idx > 1 {
            let rule = &rules[idx - 2];
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
            tenant = tracing::field::Empty,
            rule = tracing::field::Empty,
        );
        async move {
            let Some(mut job) = self.run_chain(job).await? else {
                return Err(Error::Stopped { class, jid });
            };
            if let Some(t) = job.payload.tenant().or_else(|| job.default_tenant.clone()) {
                tracing::Span::current().record("tenant", t.as_str());
            }
            match when {
                None => self
                    .push_one(job, None)
                    .await?
                    .ok_or_else(|| Error::Stopped {
                        class,
                        jid: jid.clone(),
                    }),
                Some(when) => {
                    if job.payload.tenant().is_none()
                        && let Some(t) = job.default_tenant.take()
                    {
                        job.payload.set(fields::FAIR_TENANT, t);
                    }
                    job.payload.remove("enqueued_at");
                    check_queue_name(&job.payload.queue())?;
                    let json = job.payload.to_json();
                    if json.len() > self.inner.max_payload {
                        return Err(Error::PayloadTooLarge {
                            class,
                            size: json.len(),
                            max: self.inner.max_payload,
                        });
                    }
                    self.inner
                        .broker
                        .schedule(&[(when, json)], self.clock_offset())
                        .await?;
                    Ok(jid)
                }
            }
        }
        .instrument(span)
        .await
    }

    /// Re-pushes a raw payload (the scheduler's promotion, a requeue) through the
    /// chain; `src` is the promoting-record entry it comes from.
    pub(crate) async fn repush(
        &self,
        payload: Payload,
        src: Option<crate::broker::Src>,
    ) -> Result<Option<String>> {
        let job = PushJob {
            payload,
            default_tenant: None,
        };
        match self.run_chain(job).await? {
            Some(job) => self.push_one(job, src).await,
            None => Ok(None),
        }
    }
}

/// A queue name a worker can be given (`-q name[,weight]`): not empty, no comma.
fn check_queue_name(queue: &str) -> Result<()> {
    if queue.is_empty() || queue.contains(',') {
        return Err(Error::Config(format!(
            "invalid queue name {queue:?}: queue names must be non-empty and may not contain ','"
        )));
    }
    Ok(())
}

/// A job on its way into Redis, as client middleware sees it.
pub struct PushJob {
    payload: Payload,
    default_tenant: Option<String>,
}

impl fmt::Debug for PushJob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PushJob")
            .field("payload", &self.payload)
            .field("default_tenant", &self.default_tenant)
            .finish()
    }
}

impl PushJob {
    fn from_job<J: Job>(e: Enqueue<J>, _at: Option<When>) -> Result<PushJob> {
        let args = e.job.to_args()?;
        let mut payload = Payload::new(J::CLASS, args, J::OPTIONS.queue);
        payload.set("retry", e.retry.unwrap_or(J::OPTIONS.retry).to_json());
        if !J::OPTIONS.throttles.is_empty() {
            let rules: Vec<fair::WireRule> = J::OPTIONS.throttles.iter().map(Into::into).collect();
            payload.set(fields::FAIR_TENANT_QUEUES, rules);
        }
        payload.set("created_at", payload::now_f64());
        if let Some(q) = e.queue {
            payload.set("queue", q);
            payload.set(fields::QUEUE_PINNED, true);
        }
        if let Some(t) = e.tenant.filter(|t| !t.is_empty()) {
            payload.set(fields::FAIR_TENANT, t);
        }
        Ok(PushJob {
            default_tenant: e.job.fair_tenant(),
            payload,
        })
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
}

/// An enqueue with per-call options: `job.set_tenant("acme").queue("x").retry(3).perform_async(&client)`.
#[must_use]
pub struct Enqueue<J> {
    job: J,
    tenant: Option<String>,
    queue: Option<String>,
    retry: Option<Retry>,
    _p: PhantomData<fn() -> J>,
}

impl<J> fmt::Debug for Enqueue<J> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Enqueue")
            .field("class", &std::any::type_name::<J>())
            .field("tenant", &self.tenant)
            .field("queue", &self.queue)
            .field("retry", &self.retry)
            .finish()
    }
}

impl<J: Job> Enqueue<J> {
    pub(crate) fn new(job: J) -> Self {
        Enqueue {
            job,
            tenant: None,
            queue: None,
            retry: None,
            _p: PhantomData,
        }
    }

    /// The tenant of this job (wins over middleware and `#[fair_tenant]`). Empty = none.
    pub fn set_tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant = Some(tenant.into());
        self
    }

    /// An explicit queue: never rerouted or counted, also on retry.
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = Some(queue.into());
        self
    }

    /// Sidekiq's `retry` option for this job: `n` retries (0 = fail once, go to dead).
    pub fn retry(mut self, n: u32) -> Self {
        self.retry = Some(Retry::Times(n));
        self
    }

    /// No retries, and not kept in `dead` (Sidekiq's `retry: false`).
    pub fn no_retry(mut self) -> Self {
        self.retry = Some(Retry::Never);
        self
    }

    /// Pushes now; returns the jid.
    pub async fn perform_async(self, client: &Client) -> Result<String> {
        let job = PushJob::from_job(self, None)?;
        client.enqueue(job, None).await
    }

    /// Schedules after `delay` by Redis's clock; returns the jid. A delay of zero
    /// pushes at once.
    pub async fn perform_in(self, client: &Client, delay: Duration) -> Result<String> {
        if delay.is_zero() {
            return self.perform_async(client).await;
        }
        let job = PushJob::from_job(self, None)?;
        client
            .enqueue(job, Some(When::In(delay.as_secs_f64())))
            .await
    }

    /// Schedules at `at`; returns the jid. A time in the past pushes at once.
    pub async fn perform_at(self, client: &Client, at: SystemTime) -> Result<String> {
        let secs = at
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        if secs <= payload::now_f64() {
            return self.perform_async(client).await;
        }
        let job = PushJob::from_job(self, None)?;
        client.enqueue(job, Some(When::At(secs))).await
    }
}
