//! [`Worker`]: a connected worker and its run: register, start the heartbeat,
//! scheduler and reaper, fetch until told to stop, then shut down gracefully
//! (wait up to the timeout, cancel and requeue what is still running).

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::handle::{WorkerHandle, install_signals};
use super::middleware::ServerMiddleware;
use super::{
    Running, Shared, Stats, WorkerBuilder, acks, exit, fetch, heartbeat, reaper, releaser, sampler,
    scheduler,
};
use crate::client::Client;
use crate::config::WorkerConfig;
use crate::error::Result;
use crate::job::Registry;
use crate::queues::QueueSpec;
use crate::wire::now_f64;

/// A connected worker, ready to run.
pub struct Worker {
    pub(super) client: Client,
    pub(super) registry: Registry,
    pub(super) queues: QueueSpec,
    pub(super) sharded: Vec<String>,
    pub(super) cron: Vec<crate::wire::cron::CronEntry>,
    pub(super) config: WorkerConfig,
    pub(super) identity: String,
    pub(super) server_middleware: Vec<Arc<dyn ServerMiddleware>>,
    pub(super) services: Vec<super::builder::Service>,
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

    /// The settings in force.
    pub fn config(&self) -> &WorkerConfig {
        &self.config
    }

    /// Runs until SIGTERM/SIGINT (graceful shutdown); SIGTSTP stops fetching.
    pub async fn run(self) -> Result<()> {
        self.run_with_signals(WorkerHandle::new()).await
    }

    /// As [`Worker::run`], with the OS signals routed to `handle` (keep a
    /// clone to watch the worker: [`WorkerHandle::is_fetching`] for a
    /// readiness probe).
    pub async fn run_with_signals(self, handle: WorkerHandle) -> Result<()> {
        install_signals(&handle)?;
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
        let series = super::series::JobSeries::new(&self.config.metrics);
        let (ack_tx, ack_rx) = acks::channel();
        let ack_tx = self.config.batch_acks.then_some(ack_tx);
        let (fold_tx, fold_rx) = acks::channel();
        let (fold_tx, fold_rx) = if self.config.batch_acks && self.config.fold_acks {
            (Some(fold_tx), Some(fold_rx))
        } else {
            (None, None)
        };
        let services = self.services;
        let shared = Arc::new(Shared {
            client: self.client,
            registry: self.registry,
            identity: self.identity,
            config: self.config,
            queues: self.queues,
            sharded: self.sharded,
            cron: self.cron,
            chain: self.server_middleware.into(),
            running: Mutex::new(HashMap::new()),
            held: Mutex::new(std::collections::HashSet::new()),
            stats: Stats::default(),
            waits: Mutex::new(Default::default()),
            job_cancel: CancellationToken::new(),
            abandon: CancellationToken::new(),
            control: handle.clone(),
            started_at: now_f64(),
            series: Mutex::new(series),
            acks: ack_tx,
            fold: fold_tx,
            rate_release: Default::default(),
            last_trouble: Mutex::new(None),
            suppressed: AtomicU64::new(0),
            lost_with_redis: Mutex::new(Default::default()),
        });

        tracing::info!(
            identity = %shared.identity,
            queues = %shared.queues,
            concurrency,
            redis = %shared.client.broker().redis_display(),
            jobs = shared.registry.len(),
            "fairjob worker starting"
        );
        crate::metrics::describe();
        heartbeat::busy(&shared);
        heartbeat::startup_checks(&shared).await;
        heartbeat::register(&shared).await;
        for q in &shared.sharded {
            // A Redis written by fairjob 0.1: its round-robin rings join the
            // fair-share order (fetches also move a few per call).
            match shared.client.broker().migrate_shard_ring(q).await {
                Ok(0) => {}
                Ok(n) => {
                    tracing::info!(job.queue = %q, tenants = n, "moved a 0.1 round-robin ring into the fair-share order")
                }
                Err(e) => shared.redis_trouble("migration", &e),
            }
        }

        let background = CancellationToken::new();
        let mut tasks = JoinSet::new();
        tasks.spawn(heartbeat::run(shared.clone(), background.clone()));
        tasks.spawn(scheduler::run(shared.clone(), background.clone()));
        tasks.spawn(super::cron::run(shared.clone(), background.clone()));
        tasks.spawn(reaper::run(shared.clone(), background.clone()));
        tasks.spawn(sampler::run(shared.clone(), background.clone()));
        tasks.spawn(releaser::run(shared.clone(), background.clone()));
        tasks.spawn(super::fair_yield::run(shared.clone(), background.clone()));
        for service in services {
            let stop = background.clone().cancelled_owned();
            tasks.spawn(service(shared.client.clone(), Box::pin(stop)));
        }
        // Runs through the shutdown (jobs still finishing hand it their acks)
        // and stops when Redis work is abandoned, at its end.
        tasks.spawn(acks::run(shared.clone(), ack_rx));

        let semaphore = Arc::new(Semaphore::new(concurrency));
        let mut jobs: JoinSet<()> = JoinSet::new();
        handle.set_fetching(true);
        fetch::fetch_loop(&shared, &semaphore, &mut jobs, &handle, fold_rx).await;
        handle.set_fetching(false);
        if !handle.is_stopping() {
            // Quiet: keep finishing jobs and beating until told to stop.
            loop {
                tokio::select! {
                    _ = handle.stopping() => break,
                    Some(_) = jobs.join_next() => {}
                }
            }
        }
        shutdown(&shared, &mut jobs).await;
        background.cancel();
        while tasks.join_next().await.is_some() {}
        let _ = tokio::time::timeout(Duration::from_secs(2), heartbeat::unregister(&shared)).await;
        tracing::info!("fairjob worker stopped");
        Ok(())
    }
}

/// Graceful shutdown: wait up to the timeout for running jobs, then cancel
/// them and put them back at the front of their queues.
async fn shutdown(shared: &Shared, jobs: &mut JoinSet<()>) {
    let deadline = tokio::time::Instant::now() + shared.config.timeout;
    tracing::info!(running = jobs.len(), timeout = ?shared.config.timeout, "waiting for running jobs");
    loop {
        tokio::select! {
            next = jobs.join_next() => { if next.is_none() { break } },
            _ = tokio::time::sleep_until(deadline) => break,
        }
    }
    if !jobs.is_empty() {
        let unfinished: Vec<Running> = shared
            .running
            .lock()
            .expect("running lock")
            .drain()
            .map(|(_, r)| r)
            .collect();
        tracing::warn!(
            count = unfinished.len(),
            "shutdown timeout: cancelling and requeueing unfinished jobs"
        );
        shared.job_cancel.cancel();
        let _ =
            tokio::time::timeout(exit::REQUEUE_TIMEOUT, exit::requeue(shared, unfinished)).await;
        shared.abandon.cancel();
        // Give cancelled jobs a moment to notice, then stop them.
        let _ = tokio::time::timeout(Duration::from_millis(500), async {
            while jobs.join_next().await.is_some() {}
        })
        .await;
        jobs.abort_all();
    }
    shared.abandon.cancel();
}
