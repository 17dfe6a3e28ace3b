//! [`JobContext`]: what a running job knows about itself (jid, class, queue,
//! tenant, attempt, the whole payload), a client for enqueueing from inside it,
//! and its way to stop early ([`JobContext::cancelled`]).

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio_util::sync::CancellationToken;

use crate::broker::Token;
use crate::client::Client;
use crate::wire::active_job::{self, JobData};
use crate::wire::{Payload, fields};

/// A running job's identity and surroundings. Cheap to clone.
#[derive(Clone)]
pub struct JobContext {
    inner: Arc<Inner>,
}

struct Inner {
    payload: Payload,
    class: String,
    jid: String,
    tenant: Option<String>,
    token: Token,
    cancel: CancellationToken,
    stopping: CancellationToken,
    yield_asked: CancellationToken,
    /// The job has called [`JobContext::should_yield`]: it polls, so fair
    /// yield may ask it.
    polls_yield: std::sync::atomic::AtomicBool,
    /// This run holds the fence of the job's `it-{jid}` state.
    claimed: std::sync::atomic::AtomicBool,
    /// This run's fence value: the token (unique within one worker's
    /// in-progress record) and a random part (unique across workers). Made
    /// when first asked (iterable jobs only), not for every job.
    run_id: std::sync::OnceLock<String>,
    client: Client,
    started: Instant,
    active_job: Option<JobData>,
}

/// What the worker (or a test) knows when it builds a [`JobContext`].
pub(crate) struct JobParts {
    pub payload: Payload,
    pub token: Token,
    pub cancel: CancellationToken,
    /// Cancelled when the worker begins to shut down (iterable jobs yield).
    pub stopping: CancellationToken,
    pub client: Client,
}

impl fmt::Debug for JobContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobContext")
            .field("class", &self.inner.class)
            .field("jid", &self.inner.jid)
            .field("queue", &self.inner.token.queue)
            .field("tenant", &self.inner.tenant)
            .field("attempt", &self.attempt())
            .finish()
    }
}

impl JobContext {
    pub(crate) fn new(parts: JobParts) -> JobContext {
        let JobParts {
            payload,
            token,
            cancel,
            stopping,
            client,
        } = parts;
        JobContext {
            inner: Arc::new(Inner {
                class: payload.class(),
                jid: payload.jid(),
                tenant: payload.tenant(),
                active_job: payload
                    .is_active_job()
                    .then(|| active_job::job_data(payload.args().get()).unwrap_or_default()),
                payload,
                token,
                cancel,
                stopping,
                yield_asked: CancellationToken::new(),
                polls_yield: std::sync::atomic::AtomicBool::new(false),
                claimed: std::sync::atomic::AtomicBool::new(false),
                run_id: std::sync::OnceLock::new(),
                client,
                started: Instant::now(),
            }),
        }
    }

    /// The fire time of the periodic schedule that enqueued this job; `None`
    /// for a job no schedule enqueued.
    pub fn fire_time(&self) -> Option<std::time::SystemTime> {
        let secs: i64 = self.inner.payload.get(crate::wire::fields::FIRE_TIME)?;
        Some(std::time::UNIX_EPOCH + std::time::Duration::from_secs(u64::try_from(secs).ok()?))
    }

    /// The periodic schedule that enqueued this job, if any.
    pub fn schedule(&self) -> Option<String> {
        self.inner.payload.get_str(crate::wire::fields::CRON)
    }

    /// The job id (24 hex characters).
    pub fn jid(&self) -> &str {
        &self.inner.jid
    }

    /// The class name (for an ActiveJob job, the ActiveJob class).
    pub fn class(&self) -> &str {
        &self.inner.class
    }

    /// The queue the job was fetched from.
    pub fn queue(&self) -> &str {
        &self.inner.token.queue
    }

    /// The tenant, if the job has one.
    pub fn tenant(&self) -> Option<&str> {
        self.inner.tenant.as_deref()
    }

    /// Sidekiq's `retry_count`: `None` on the first try, 0 after one failure, …
    pub fn retry_count(&self) -> Option<u32> {
        self.inner.payload.retry_count()
    }

    /// How many earlier runs were interrupted (their worker died or lost its lease).
    pub fn interrupted_count(&self) -> u32 {
        self.inner
            .payload
            .get(fields::INTERRUPTED_COUNT)
            .unwrap_or(0)
    }

    /// True when the run before this one started but never finished.
    pub fn was_interrupted(&self) -> bool {
        self.interrupted_count() > 0
    }

    /// This run's number, starting at 1: failures and interruptions both count.
    pub fn attempt(&self) -> u32 {
        1 + self.retry_count().map_or(0, |c| c + 1) + self.interrupted_count()
    }

    /// When the job was last put on its queue (Sidekiq's `enqueued_at`, or
    /// ActiveJob's when a payload has no usable one).
    pub fn enqueued_at(&self) -> Option<SystemTime> {
        let secs = self.inner.payload.timestamp("enqueued_at").or_else(|| {
            let iso = self.inner.active_job.as_ref()?.enqueued_at.as_deref()?;
            let t = humantime::parse_rfc3339_weak(iso).ok()?;
            t.duration_since(UNIX_EPOCH).ok().map(|d| d.as_secs_f64())
        })?;
        (secs.is_finite() && secs >= 0.0).then(|| UNIX_EPOCH + Duration::from_secs_f64(secs))
    }

    /// What ActiveJob's serialized job says, for a job that came through
    /// ActiveJob's Sidekiq adapter.
    pub fn active_job(&self) -> Option<&JobData> {
        self.inner.active_job.as_ref()
    }

    /// ActiveJob's `job_id` (a UUID, kept across ActiveJob's own retries), for
    /// an ActiveJob job.
    pub fn job_id(&self) -> Option<&str> {
        self.active_job()?.job_id.as_deref()
    }

    /// ActiveJob's `executions` as a Rails job sees it inside `perform`:
    /// 1 on the first run, one more for each re-enqueue by ActiveJob's
    /// `retry_on` (Sidekiq's own retries run the same serialized job, so they
    /// do not raise it; see [`JobContext::attempt`]). `None` for a job that did
    /// not come through ActiveJob.
    pub fn executions(&self) -> Option<u32> {
        self.active_job()
            .map(|d| d.executions.unwrap_or(0).saturating_add(1))
    }

    /// ActiveJob's `locale` (`I18n.locale` at enqueue), for an ActiveJob job.
    pub fn locale(&self) -> Option<&str> {
        self.active_job()?.locale.as_deref()
    }

    /// The whole payload (unknown fields included).
    pub fn payload(&self) -> &Payload {
        &self.inner.payload
    }

    /// A client for enqueueing from inside the job (it runs the worker's client middleware).
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// True once the worker asked this job to stop (shutdown timeout reached).
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancel.is_cancelled()
    }

    /// Resolves when the worker asks this job to stop.
    pub async fn cancelled(&self) {
        self.inner.cancel.cancelled().await
    }

    /// True when the job should give its place back soon: the worker is
    /// shutting down, or the job was asked to yield. An iterable job's runner
    /// checks it between steps; a plain job may check it and return
    /// [`JobError::yield_now`](crate::JobError::yield_now).
    ///
    /// A plain job on a tenant-sharded queue that has called it once is
    /// registered with fair yield at the worker's next tick (within 250 ms)
    /// and may from then on be asked to yield like an iterable job: keep
    /// polling it (every second or more often) and return
    /// `JobError::yield_now()` when it says so, after
    /// [`JobContext::checkpoint`] if the job resumes.
    pub fn should_yield(&self) -> bool {
        self.inner
            .polls_yield
            .store(true, std::sync::atomic::Ordering::Relaxed);
        self.inner.stopping.is_cancelled() || self.inner.yield_asked.is_cancelled()
    }

    /// The job has called [`JobContext::should_yield`] (fair yield may ask it).
    pub(crate) fn polls_yield(&self) -> bool {
        self.inner
            .polls_yield
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// True once the worker began to shut down.
    pub(crate) fn is_stopping(&self) -> bool {
        self.inner.stopping.is_cancelled()
    }

    /// True once the job was asked to yield ([`JobContext::ask_to_yield`]).
    pub(crate) fn yield_asked(&self) -> bool {
        self.inner.yield_asked.is_cancelled()
    }

    /// Asks the job to yield at its next check of [`JobContext::should_yield`]
    /// (the testing fake's forced yield; the hook of scheduler requests).
    pub fn ask_to_yield(&self) {
        self.inner.yield_asked.cancel();
    }

    /// The place a plain job saved with [`JobContext::checkpoint`] in an
    /// earlier run (`None` on the first run), for a job that resumes after a
    /// yield or a crash. It starts this run's hold on the job's `it-{jid}`
    /// state: call it before the first checkpoint.
    pub async fn saved_cursor<C: serde::de::DeserializeOwned>(&self) -> crate::Result<Option<C>> {
        let state = self.claim_iteration().await?;
        let Some(json) = state.cursor else {
            return Ok(None);
        };
        serde_json::from_str(&json)
            .map(Some)
            .map_err(|e| crate::Error::Decode {
                class: self.class().to_owned(),
                source: crate::error::DecodeError::Json(e),
            })
    }

    /// Saves a plain job's place in its `it-{jid}` hash (Sidekiq's
    /// iterable-job state, kept 30 days), for [`JobContext::saved_cursor`]
    /// after a yield or a crash. Fenced: `Ok(false)` when a newer run of the
    /// job (it was recovered from this worker) holds the state; this run
    /// should stop. The state is not removed when the job ends.
    pub async fn checkpoint<C: serde::Serialize>(&self, cursor: &C) -> crate::Result<bool> {
        use std::sync::atomic::Ordering;
        let json = serde_json::to_string(cursor).map_err(|source| crate::Error::Encode {
            class: self.class().to_owned(),
            source,
        })?;
        if !self.inner.claimed.load(Ordering::SeqCst) {
            self.claim_iteration().await?;
        }
        let saved = self
            .save_iteration(Some(&json), 0.0, Default::default())
            .await?;
        Ok(saved != crate::broker::Saved::Fenced)
    }

    /// This run's fence value for the job's `it-{jid}` state.
    pub(crate) fn run_id(&self) -> &str {
        self.inner
            .run_id
            .get_or_init(|| format!("{}|{:016x}", self.inner.token.raw, rand::random::<u64>()))
    }

    /// Starts this run's hold on the job's `it-{jid}` state: takes its fence
    /// (this run's id), counts the execution and returns what earlier runs
    /// saved. The one claim of both a plain job's [`JobContext::saved_cursor`]
    /// and an iterable job's runner (`worker::iterate`).
    pub(crate) async fn claim_iteration(&self) -> crate::Result<crate::broker::IterationState> {
        self.inner
            .claimed
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.client()
            .broker()
            .iteration_claim(self.jid(), self.run_id())
            .await
    }

    /// Saves `cursor` (JSON) in the job's `it-{jid}` state, adding `runtime`
    /// seconds and `info`'s counts, or with `None` removes the state of a
    /// completed job; refused ([`Saved::Fenced`](crate::broker::Saved::Fenced))
    /// unless this run holds the fence. The one save of both
    /// [`JobContext::checkpoint`] and an iterable job's runner.
    pub(crate) async fn save_iteration(
        &self,
        cursor: Option<&str>,
        runtime: f64,
        info: crate::broker::SaveInfo,
    ) -> crate::Result<crate::broker::Saved> {
        self.client()
            .broker()
            .iteration_save(self.jid(), self.run_id(), cursor, runtime, info)
            .await
    }

    /// The in-progress token (queue and shard the job came from).
    pub fn token(&self) -> &Token {
        &self.inner.token
    }

    /// How long this run has taken so far.
    pub fn elapsed(&self) -> Duration {
        self.inner.started.elapsed()
    }
}
