//! [`WorkerBuilder`]: named setters over a [`WorkerConfig`] (generated from
//! the settings table, [`crate::__worker_settings!`]), the job registry, the
//! queue list and the middleware; `build` connects the worker's own client
//! from `config.client`, so its pushes (promotions, jobs enqueued from jobs)
//! count in the same reroute windows as the application's.

use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use super::Worker;
use super::middleware::ServerMiddleware;
use crate::broker::redacted;
use crate::client::{Client, ClientBuilder, ClientMiddleware, CronSpec, IntoPush};
use crate::config::{MetricsConfig, Part, WorkerConfig};
use crate::error::{Error, Result};
use crate::job::Registry;
use crate::queues::QueueSpec;
use crate::wire::Propagation;
use crate::wire::cron::CronSource;

/// Configures a [`Worker`].
#[must_use]
pub struct WorkerBuilder {
    config: WorkerConfig,
    registry: Option<Registry>,
    queues: Option<QueueSpec>,
    client_middleware: Vec<Arc<dyn ClientMiddleware>>,
    server_middleware: Vec<Arc<dyn ServerMiddleware>>,
    clock_offset: i64,
    cron: Vec<CronSpec>,
    services: Vec<Service>,
}

/// A future a [`WorkerBuilder::service`] gets: resolves when the worker stops.
pub type StopSignal = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A task run beside the worker (see [`WorkerBuilder::service`]).
pub(super) type Service =
    Box<dyn FnOnce(Client, StopSignal) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send>;

impl fmt::Debug for WorkerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkerBuilder")
            .field("redis", &redacted(self.config.client.redis_url()))
            .field("concurrency", &self.config.concurrency)
            .finish_non_exhaustive()
    }
}

impl WorkerBuilder {
    /// A worker for `url` with [`WorkerConfig`]'s defaults.
    pub fn new(url: impl Into<String>) -> Self {
        let mut config = WorkerConfig::default();
        config.client.redis = Some(url.into());
        Self::from_config(config)
    }

    /// A worker with these settings (Redis from `config.client.redis`).
    pub fn from_config(config: WorkerConfig) -> Self {
        WorkerBuilder {
            config,
            registry: None,
            queues: None,
            client_middleware: Vec::new(),
            server_middleware: Vec::new(),
            clock_offset: 0,
            cron: Vec::new(),
            services: Vec::new(),
        }
    }

    /// All settings at once (the CLI's flags and config file). Its `redis`, when
    /// set, replaces the builder's URL.
    pub fn config(mut self, mut config: WorkerConfig) -> Self {
        if config.client.redis.is_none() {
            config.client.redis = self.config.client.redis.take();
        }
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
        self.config.client.sharded_queues.push(queue.into());
        self
    }

    /// Mutual TLS: a PEM client certificate and its key; see
    /// [`ClientBuilder::tls_client_cert`].
    pub fn tls_client_cert(
        mut self,
        cert_path: impl Into<PathBuf>,
        key_path: impl Into<PathBuf>,
    ) -> Self {
        self.config.client.connect.tls_cert_file = Some(cert_path.into());
        self.config.client.connect.tls_key_file = Some(key_path.into());
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

    /// Declares a periodic schedule: `job` (a job with arguments, a
    /// [`PushJob`](crate::PushJob), …) enqueued at every fire time of `expr`
    /// in UTC, exactly once across all workers. Reconciled at start-up with
    /// the schedules in Redis, like `#[cron]` and the `[[cron]]` entries.
    /// A bad expression fails [`WorkerBuilder::build`].
    pub fn cron(
        self,
        name: impl Into<String>,
        expr: impl Into<String>,
        job: impl IntoPush,
    ) -> Self {
        self.cron_spec(CronSpec::new(name, expr, job))
    }

    /// Declares a periodic schedule with its zone and policies.
    pub fn cron_spec(mut self, spec: CronSpec) -> Self {
        self.cron.push(spec);
        self
    }

    #[doc(hidden)]
    pub fn clock_offset(mut self, secs: i64) -> Self {
        self.clock_offset = secs;
        self
    }

    /// Runs `service` beside the worker (fairjob-postgres' pump, through
    /// `fairjob_postgres::WorkerBuilderExt::postgres`): it starts once the
    /// worker is registered, gets the worker's client and a stop signal that
    /// resolves after the worker's jobs have shut down, and is awaited before
    /// the worker's run returns.
    pub fn service<F, Fut>(mut self, service: F) -> Self
    where
        F: FnOnce(Client, StopSignal) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.services.push(Box::new(move |client, stop| {
            Box::pin(service(client, stop))
        }));
        self
    }

    /// Connects and checks everything; the worker is ready to [`Worker::run`].
    pub async fn build(self) -> Result<Worker> {
        let mut config = self.config;
        config.validate()?;
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
        let queues = match (self.queues, config.queue_spec()?) {
            (Some(q), _) | (None, Some(q)) => q,
            (None, None) => QueueSpec::from_options(registry.iter().map(|r| &r.options)),
        };
        let sharded = &mut config.client.sharded_queues;
        sharded.extend(registry.sharded_queues().into_iter().map(str::to_owned));
        sharded.sort();
        sharded.dedup();
        let sharded = sharded.clone();
        let mut cb = ClientBuilder::from_config(config.client.clone());
        for m in self.client_middleware {
            cb = cb.middleware_arc(m);
        }
        let mut cron = Vec::new();
        for spec in self.cron {
            cron.push(spec.into_entry(CronSource::Code)?);
        }
        cron.extend(crate::job::declared_crons(&registry)?);
        cron.extend(config.cron_entries()?);
        for (i, e) in cron.iter().enumerate() {
            if cron[..i].iter().any(|o| o.name == e.name) {
                return Err(Error::Config(format!(
                    "two periodic schedules are named `{}`",
                    e.name
                )));
            }
        }
        let client = cb.build().await?;
        client.set_clock_offset(self.clock_offset);
        let identity = client.id().to_owned();
        Ok(Worker {
            client,
            registry,
            queues,
            sharded,
            cron,
            config,
            identity,
            server_middleware: self.server_middleware,
            services: self.services,
        })
    }
}

/// The settings table's setters: one method for each row with
/// `builder(fn name(arg: Type) => value)`, documented by the row.
macro_rules! setters {
    ($(
        $(#[doc = $gdoc:literal])*
        $vis:vis $kind:ident $group:ident $(in $($seg:ident).+)? {$(
            $(#[doc = $doc:literal])*
            $field:ident $(: ..$part:ty)? $(: $ty:ty)? $(= $default:expr)?
            $(, file $file:literal)?
            $(, builder $builder:tt)?
            $(, global $gkind:ident $gflag:tt)?
            $(, run $rkind:ident $rflag:tt)?
        ;)*}
    )*) => {
        /// One setter for each setting that has one (the rest are set
        /// through [`WorkerBuilder::config`]).
        impl WorkerBuilder {$($(
            setter! { [$(#[doc = $doc])*] $group $field $($builder)? }
        )*)*}
    };
}

/// One row's setter, if it has one.
macro_rules! setter {
    (
        [$($doc:tt)*] $group:ident $field:ident
        (fn $name:ident($arg:ident : $arg_ty:ty) $(=> $value:expr)?)
    ) => {
        $($doc)*
        pub fn $name(mut self, $arg: $arg_ty) -> Self {
            let part = <WorkerConfig as Part<crate::config::$group>>::part(&mut self.config);
            part.$field = setter!(@value $arg $(, $value)?);
            self
        }
    };
    ([$($doc:tt)*] $group:ident $field:ident) => {};
    (@value $arg:ident) => { $arg };
    (@value $arg:ident, $value:expr) => { $value };
}

crate::__worker_settings!(setters);
