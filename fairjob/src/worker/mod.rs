//! The worker: fetch (Sidekiq's weighted order, at-least-once), the processor
//! pool, retries, the scheduler, the heartbeat, the reaper of dead workers' jobs,
//! and graceful shutdown.
//!
//! A fetched job moves atomically (one `fetch.lua` call, or `shard_fetch.lua`
//! for a tenant-sharded queue, whose record lives in the queue's cluster slot)
//! into this process's in-progress record and leaves it only through
//! `finish.lua` (`shard_finish.lua`): ack, retry, dead, or back to its queue. The process holds a lease that its heartbeat renews;
//! when the lease of some process expires, a reaper returns that process's jobs
//! to their queues. Idle workers block on wake-up tokens that fairjob clients
//! push with every job, and look at their queues every `poll_interval` for jobs
//! pushed by clients that don't (Ruby Sidekiq).

mod context;
mod fetch;
mod heartbeat;
mod middleware;
mod processor;
mod queues;
mod reaper;
mod scheduler;

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::Rng;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

pub use context::JobContext;
pub use heartbeat::rss_kb;
pub use middleware::{FnServerMiddleware, ServerMiddleware, ServerNext, server_middleware_fn};
pub use processor::backoff;
pub use queues::QueueSpec;

pub(crate) use processor::{RunFn, run_job};

use crate::broker::{self, Token};
use crate::client::{Client, ClientBuilder, ClientMiddleware};
use crate::config::WorkerConfig;
use crate::error::{Error, Result};
use crate::job::Registry;
use crate::payload;

/// Configures a [`Worker`].
#[must_use]
pub struct WorkerBuilder {
    url: String,
    config: WorkerConfig,
    registry: Option<Registry>,
    queues: Option<QueueSpec>,
    client_middleware: Vec<Arc<dyn ClientMiddleware>>,
    server_middleware: Vec<Arc<dyn ServerMiddleware>>,
    clock_offset: i64,
}

impl fmt::Debug for WorkerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkerBuilder")
            .field("redis", &broker::redacted(&self.url))
            .field("config", &self.config.concurrency)
            .finish_non_exhaustive()
    }
}

impl WorkerBuilder {
    /// A worker for `url` with [`WorkerConfig`]'s defaults.
    pub fn new(url: impl Into<String>) -> Self {
        WorkerBuilder {
            url: url.into(),
            config: WorkerConfig::default(),
            registry: None,
            queues: None,
            client_middleware: Vec::new(),
            server_middleware: Vec::new(),
            clock_offset: 0,
        }
    }

    /// All settings at once (the CLI's flags and config file).
    pub fn config(mut self, config: WorkerConfig) -> Self {
        self.config = config;
        self
    }

    /// The job types to run (default: every `#[derive(Job)]` linked in).
    pub fn registry(mut self, registry: Registry) -> Self {
        self.registry = Some(registry);
        self
    }

    /// The queue list (default: derived from the registered jobs).
    pub fn queues(mut self, queues: QueueSpec) -> Self {
        self.queues = Some(queues);
        self
    }

    /// Declares a queue tenant-sharded (as `#[job(shard_by_tenant)]` or the
    /// config's `sharded_queues` do).
    pub fn sharded_queue(mut self, queue: impl Into<String>) -> Self {
        self.config.sharded_queues.push(queue.into());
        self
    }

    /// Jobs run at once.
    pub fn concurrency(mut self, n: usize) -> Self {
        self.config.concurrency = n;
        self
    }

    /// Key prefix.
    pub fn namespace(mut self, ns: impl Into<String>) -> Self {
        self.config.namespace = Some(ns.into());
        self
    }

    /// Shutdown timeout.
    pub fn shutdown_timeout(mut self, d: Duration) -> Self {
        self.config.timeout = d;
        self
    }

    /// Lease, heartbeat and reaper interval (tests use short ones).
    pub fn lease(
        mut self,
        lease: Duration,
        heartbeat: Duration,
        reaper_interval: Duration,
    ) -> Self {
        self.config.lease = lease;
        self.config.heartbeat = Some(heartbeat);
        self.config.reaper_interval = reaper_interval;
        self
    }

    /// Idle poll interval and scheduler interval.
    pub fn poll_intervals(mut self, poll: Duration, scheduled: Duration) -> Self {
        self.config.poll_interval = poll;
        self.config.scheduled_poll_interval = scheduled;
        self
    }

    /// Appends a client middleware (used for pushes from jobs and the scheduler).
    pub fn client_middleware(mut self, m: impl ClientMiddleware) -> Self {
        self.client_middleware.push(Arc::new(m));
        self
    }

    /// Appends a server middleware (runs around every perform).
    pub fn server_middleware(mut self, m: impl ServerMiddleware) -> Self {
        self.server_middleware.push(Arc::new(m));
        self
    }

    #[doc(hidden)]
    pub fn clock_offset(mut self, secs: i64) -> Self {
        self.clock_offset = secs;
        self
    }

    /// Connects and checks everything; the worker is ready to [`Worker::run`].
    pub async fn build(self) -> Result<Worker> {
        self.config.validate()?;
        let registry = match self.registry {
            Some(r) => r,
            None => Registry::from_inventory()?,
        };
        if registry.is_empty() {
            return Err(Error::Config(
                "no job types are registered: name the crates that hold your jobs in `fairjob_worker::main!(my_jobs)`"
                    .into(),
            ));
        }
        let queues = match (self.queues, self.config.queue_spec()?) {
            (Some(q), _) | (None, Some(q)) => q,
            (None, None) => QueueSpec::from_registry(&registry),
        };
        let mut sharded: Vec<String> = registry
            .sharded_queues()
            .into_iter()
            .map(str::to_owned)
            .collect();
        sharded.extend(self.config.sharded_queues.iter().cloned());
        sharded.sort();
        sharded.dedup();
        let mut cb = ClientBuilder::new(self.url.clone())
            .connect_timeout(Duration::from_secs(5))
            .response_timeout(Duration::from_secs(5));
        if let Some(ns) = &self.config.namespace {
            cb = cb.namespace(ns.clone());
        }
        for q in &sharded {
            cb = cb.sharded_queue(q.clone());
        }
        for m in self.client_middleware {
            cb = cb.middleware(ArcClientMiddleware(m));
        }
        let client = cb.build().await?;
        client.set_clock_offset(self.clock_offset);
        let identity = format!(
            "{}:{}:{}",
            gethostname::gethostname().to_string_lossy(),
            std::process::id(),
            &payload::new_jid()[..12]
        );
        Ok(Worker {
            client,
            registry,
            queues,
            sharded,
            config: self.config,
            identity,
            server_middleware: self.server_middleware,
        })
    }
}

struct ArcClientMiddleware(Arc<dyn ClientMiddleware>);

impl ClientMiddleware for ArcClientMiddleware {
    fn call(
        &self,
        job: crate::client::PushJob,
        next: crate::client::ClientNext,
    ) -> futures_util::future::BoxFuture<'static, Result<Option<crate::client::PushJob>>> {
        self.0.call(job, next)
    }
}

/// A connected worker, ready to run.
pub struct Worker {
    client: Client,
    registry: Registry,
    queues: QueueSpec,
    sharded: Vec<String>,
    config: WorkerConfig,
    identity: String,
    server_middleware: Vec<Arc<dyn ServerMiddleware>>,
}

impl fmt::Debug for Worker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Worker")
            .field("identity", &self.identity)
            .field("queues", &self.queues.to_string())
            .field("concurrency", &self.config.concurrency)
            .finish()
    }
}

/// Controls a running worker from elsewhere (tests, embedding, signal handlers).
#[derive(Debug, Clone)]
pub struct WorkerHandle {
    quiet: CancellationToken,
    stop: CancellationToken,
}

impl Default for WorkerHandle {
    fn default() -> Self {
        Self::new()
    }
}

impl WorkerHandle {
    /// A handle to pass to [`Worker::run_with`] (keep a clone to control the worker).
    pub fn new() -> Self {
        WorkerHandle {
            quiet: CancellationToken::new(),
            stop: CancellationToken::new(),
        }
    }

    /// True once the worker was told to stop fetching (quiet or stop).
    pub fn is_quiet(&self) -> bool {
        self.quiet.is_cancelled() || self.stop.is_cancelled()
    }

    /// Resolves when the worker is told to stop fetching (quiet or stop).
    async fn stopped_fetching(&self) {
        tokio::select! {
            _ = self.quiet.cancelled() => {}
            _ = self.stop.cancelled() => {}
        }
    }

    /// Stops fetching new jobs; running ones finish (Sidekiq's TSTP).
    pub fn quiet(&self) {
        self.quiet.cancel();
    }

    /// Graceful shutdown (Sidekiq's TERM).
    pub fn stop(&self) {
        self.stop.cancel();
    }
}

#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub processed: AtomicU64,
    pub failed: AtomicU64,
}

/// State shared by the fetch loop, job tasks and background loops.
pub(crate) struct Shared {
    pub client: Client,
    pub registry: Registry,
    pub identity: String,
    pub config: WorkerConfig,
    pub queues: QueueSpec,
    pub sharded: Vec<String>,
    pub chain: Arc<[Arc<dyn ServerMiddleware>]>,
    /// The end of the chain: the registered type's perform.
    pub terminal: middleware::Terminal,
    pub running: Mutex<HashMap<String, JobContext>>,
    pub stats: Stats,
    /// Cancelled when running jobs should stop (shutdown timeout reached).
    pub job_cancel: CancellationToken,
    /// Cancelled when the worker gives up on Redis work still pending (exit).
    pub abandon: CancellationToken,
    /// Quiet/stop controls (signals, Sidekiq's remote signals).
    pub control: WorkerHandle,
    pub started_at: f64,
    last_trouble: Mutex<Option<Instant>>,
    suppressed: AtomicU64,
}

impl Shared {
    /// Logs a Redis failure at a bounded rate (one line per 10 s, with a count).
    pub(crate) fn redis_trouble(&self, during: &str, e: &Error) {
        let mut last = self.last_trouble.lock().expect("trouble lock");
        let now = Instant::now();
        if last.is_none_or(|t| now.duration_since(t) >= Duration::from_secs(10)) {
            let suppressed = self.suppressed.swap(0, Ordering::Relaxed);
            tracing::error!(during, error = %e, suppressed, "redis unavailable; retrying with backoff");
            *last = Some(now);
        } else {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Sleeps for an exponential backoff with full jitter, capped at 5 s.
pub(crate) async fn backoff_sleep(attempt: u32) {
    let cap = Duration::from_millis(100u64.saturating_mul(1 << attempt.min(6)))
        .min(Duration::from_secs(5));
    let d = rand::rng().random_range(cap / 4..=cap);
    tokio::time::sleep(d).await;
}

impl Worker {
    /// A builder.
    pub fn builder(url: impl Into<String>) -> WorkerBuilder {
        WorkerBuilder::new(url)
    }

    /// This process's identity (`host:pid:random`).
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The queue list in force.
    pub fn queues(&self) -> &QueueSpec {
        &self.queues
    }

    /// The registered jobs.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The client jobs use to enqueue.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Runs until SIGTERM/SIGINT (graceful shutdown); SIGTSTP stops fetching.
    pub async fn run(self) -> Result<()> {
        let quiet = CancellationToken::new();
        let stop = CancellationToken::new();
        let handle = WorkerHandle {
            quiet: quiet.clone(),
            stop: stop.clone(),
        };
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let mut term =
                signal(SignalKind::terminate()).map_err(|e| Error::Config(e.to_string()))?;
            let mut int =
                signal(SignalKind::interrupt()).map_err(|e| Error::Config(e.to_string()))?;
            let mut tstp =
                signal(SignalKind::from_raw(20)).map_err(|e| Error::Config(e.to_string()))?;
            let h = handle.clone();
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = term.recv() => { tracing::info!("TERM: shutting down"); h.stop(); }
                        _ = int.recv() => { tracing::info!("INT: shutting down"); h.stop(); }
                        _ = tstp.recv() => { tracing::info!("TSTP: quiet, no new jobs"); h.quiet(); }
                    }
                }
            });
        }
        self.run_with(handle).await
    }

    /// Runs until `shutdown` resolves, then shuts down gracefully.
    pub async fn run_until(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<()> {
        let handle = WorkerHandle::new();
        let h = handle.clone();
        tokio::spawn(async move {
            shutdown.await;
            h.stop();
        });
        self.run_with(handle).await
    }

    /// Runs, controlled by `handle`.
    pub async fn run_with(self, handle: WorkerHandle) -> Result<()> {
        let concurrency = self.config.concurrency;
        let terminal = processor::terminal(&self.registry);
        let user_links = self.server_middleware;
        // The finish link (ack/retry) needs the state it is part of: it holds a weak
        // reference, so the chain lives in `Shared` without a reference cycle.
        let shared = Arc::new_cyclic(|me: &std::sync::Weak<Shared>| {
            let mut chain: Vec<Arc<dyn ServerMiddleware>> = vec![
                Arc::new(processor::TraceLink),
                Arc::new(processor::FinishLink(me.clone())),
            ];
            chain.extend(user_links);
            Shared {
                client: self.client,
                registry: self.registry,
                identity: self.identity,
                config: self.config,
                queues: self.queues,
                sharded: self.sharded,
                chain: chain.into(),
                terminal,
                running: Mutex::new(HashMap::new()),
                stats: Stats::default(),
                job_cancel: CancellationToken::new(),
                abandon: CancellationToken::new(),
                control: handle.clone(),
                started_at: payload::now_f64(),
                last_trouble: Mutex::new(None),
                suppressed: AtomicU64::new(0),
            }
        });

        tracing::info!(
            identity = %shared.identity,
            queues = %shared.queues,
            concurrency,
            redis = %shared.client.broker().redis_display(),
            jobs = shared.registry.len(),
            "fairjob worker starting"
        );
        heartbeat::startup_checks(&shared).await;
        heartbeat::register(&shared).await;

        let background = CancellationToken::new();
        let mut tasks = JoinSet::new();
        tasks.spawn(heartbeat::run(shared.clone(), background.clone()));
        tasks.spawn(scheduler::run(shared.clone(), background.clone()));
        tasks.spawn(reaper::run(shared.clone(), background.clone()));

        let semaphore = Arc::new(Semaphore::new(concurrency));
        let mut jobs: JoinSet<()> = JoinSet::new();
        fetch_loop(&shared, &semaphore, &mut jobs, &handle).await;
        if !handle.stop.is_cancelled() {
            // Quiet: keep finishing jobs and beating until told to stop.
            loop {
                tokio::select! {
                    _ = handle.stop.cancelled() => break,
                    Some(_) = jobs.join_next() => {}
                }
            }
        }

        // Graceful shutdown: wait up to the timeout for running jobs.
        let deadline = tokio::time::Instant::now() + shared.config.timeout;
        tracing::info!(running = jobs.len(), timeout = ?shared.config.timeout, "waiting for running jobs");
        loop {
            tokio::select! {
                next = jobs.join_next() => { if next.is_none() { break } },
                _ = tokio::time::sleep_until(deadline) => break,
            }
        }
        if !jobs.is_empty() {
            let unfinished: Vec<JobContext> = shared
                .running
                .lock()
                .expect("running lock")
                .values()
                .cloned()
                .collect();
            tracing::warn!(
                count = unfinished.len(),
                "shutdown timeout: cancelling and requeueing unfinished jobs"
            );
            shared.job_cancel.cancel();
            let requeue = async {
                for cx in &unfinished {
                    // The bytes Redis held (to_json keeps them when unedited).
                    let raw = cx.payload().to_json();
                    let slot = cx.inner.slot.lock().expect("slot lock").take();
                    match shared
                        .client
                        .broker()
                        .finish(
                            &shared.identity,
                            cx.token(),
                            broker::Finish::Front { payload: &raw },
                            0,
                            slot.as_ref(),
                        )
                        .await
                    {
                        Ok(_) => {}
                        Err(e) => {
                            tracing::warn!(error = %e, jid = cx.jid(), "could not requeue; it stays in progress and is recovered after the lease");
                            break;
                        }
                    }
                }
            };
            let _ = tokio::time::timeout(Duration::from_secs(3), requeue).await;
            shared.abandon.cancel();
            // Give cancelled jobs a moment to notice, then stop them.
            let _ = tokio::time::timeout(Duration::from_millis(500), async {
                while jobs.join_next().await.is_some() {}
            })
            .await;
            jobs.abort_all();
        }
        shared.abandon.cancel();
        background.cancel();
        while tasks.join_next().await.is_some() {}
        let _ = tokio::time::timeout(Duration::from_secs(2), heartbeat::unregister(&shared)).await;
        tracing::info!("fairjob worker stopped");
        Ok(())
    }
}

async fn fetch_loop(
    shared: &Arc<Shared>,
    semaphore: &Arc<Semaphore>,
    jobs: &mut JoinSet<()>,
    handle: &WorkerHandle,
) {
    let stop = handle.stopped_fetching();
    tokio::pin!(stop);
    let queue_names: Vec<(String, bool)> = shared
        .queues
        .queues()
        .map(|q| (q.to_owned(), shared.sharded.iter().any(|s| s == q)))
        .collect();
    let keys = shared.client.broker().keys().clone();
    // Idle workers block on every queue's wake list; the shard scripts wake a
    // sharded queue's own list (in its cluster slot), released slot waiters the
    // plain one.
    let mut wake_keys: Vec<String> = queue_names.iter().map(|(q, _)| keys.wake(q)).collect();
    wake_keys.extend(
        queue_names
            .iter()
            .filter(|(_, s)| *s)
            .map(|(q, _)| keys.shard(q).wake),
    );
    let preferred_wake = wake_keys[queue_names.len()..]
        .first()
        .unwrap_or(&wake_keys[0])
        .clone();
    let fetcher = fetch::Fetcher::new(&keys, &shared.identity, &queue_names);
    let mut seq: u64 = 0;
    let mut orders: Vec<Vec<usize>> = Vec::new();
    let mut failures = 0u32;
    let mut blocking: Option<redis::aio::MultiplexedConnection> = None;
    let poll = shared.config.poll_interval;
    loop {
        while jobs.try_join_next().is_some() {}
        if handle.is_quiet() {
            return;
        }
        let first = tokio::select! {
            p = semaphore.clone().acquire_owned() => p.expect("semaphore open"),
            _ = &mut stop => return,
            Some(_) = jobs.join_next(), if !jobs.is_empty() => continue,
        };
        let mut permits = vec![first];
        while permits.len() < 100 {
            match semaphore.clone().try_acquire_owned() {
                Ok(p) => permits.push(p),
                Err(_) => break,
            }
        }
        let n = permits.len();
        {
            let mut rng = rand::rng();
            orders.resize_with(n, Vec::new);
            for o in &mut orders {
                shared.queues.fetch_order(&mut rng, o);
            }
        }
        let fetched = fetcher
            .reserve(shared.client.broker(), &orders[..n], &mut seq)
            .await;
        let fetched = match fetched {
            Ok(v) => {
                failures = 0;
                v
            }
            Err(e) => {
                failures += 1;
                shared.redis_trouble("fetch", &e);
                drop(permits);
                tokio::select! {
                    _ = backoff_sleep(failures) => {}
                    _ = &mut stop => return,
                }
                continue;
            }
        };
        let got = fetched.len();
        if got == 0 {
            drop(permits);
            // Idle: wait for a wake-up token or the poll interval.
            if blocking.is_none() {
                blocking = shared.client.broker().blocking_conn(poll).await.ok();
            }
            match blocking.as_mut() {
                Some(conn) => {
                    let mut cmd = redis::cmd("BLPOP");
                    for k in &wake_keys {
                        cmd.arg(k);
                    }
                    cmd.arg(poll.as_secs_f64());
                    let wait = cmd.query_async::<Option<(String, String)>>(conn);
                    let waited = tokio::select! {
                        r = wait => r,
                        _ = &mut stop => return,
                    };
                    if let Err(e) = waited {
                        if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::CrossSlot) {
                            // Redis Cluster: one BLPOP can't span the queues' slots.
                            // Wait on one queue's list; the others are polled.
                            tracing::info!("wake lists span cluster slots; waiting on one");
                            wake_keys.truncate(1);
                            wake_keys[0] = preferred_wake.clone();
                        } else {
                            blocking = None;
                            tokio::select! {
                                _ = tokio::time::sleep(poll) => {}
                                _ = &mut stop => return,
                            }
                        }
                    }
                }
                None => {
                    tokio::select! {
                        _ = tokio::time::sleep(poll) => {}
                        _ = &mut stop => return,
                    }
                }
            }
            continue;
        }
        let mut permits = permits.into_iter();
        for (token, raw) in fetched {
            let Some(token) = Token::parse(&token) else {
                tracing::error!(token, "fetch returned a token fairjob cannot read");
                continue;
            };
            let permit = permits.next().expect("one permit per fetched job");
            let shared = shared.clone();
            jobs.spawn(async move {
                processor::process(shared, processor::Fetched { token, raw }).await;
                drop(permit);
            });
        }
        if got == n && n > 1 {
            // A full batch: there may be more; wake another idle worker.
            let mut pipe = redis::pipe();
            pipe.lpush(&wake_keys[0], "1")
                .ignore()
                .ltrim(&wake_keys[0], 0, 0)
                .ignore();
            let _ = shared.client.broker().pipe::<()>(&pipe).await;
        }
    }
}
