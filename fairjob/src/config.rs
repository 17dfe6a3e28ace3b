//! Settings, in one place: [`ClientConfig`] (the Redis URL, how to reach it
//! as the broker's [`ConnectOptions`], reroute windows, payload limits) and [`WorkerConfig`], which contains one, so
//! the worker's own client (promotions, jobs enqueued from jobs, the CLI's
//! commands) counts in the same windows as the application's.
//!
//! `ClientBuilder` and `WorkerBuilder` are thin named setters over these. Every
//! command-line flag of the worker has a key in the TOML form (`-C
//! worker.toml`), which is flat: `redis`, `namespace`, `concurrency`, … side by
//! side. Durations are humantime strings (`"25s"`, `"1m 30s"`).
//!
//! Layer 3: settings and their validation; nothing here connects or runs.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use crate::broker::ConnectOptions;
use crate::error::{Error, Result};
use crate::fair::DEFAULT_MAX_WINDOW;
use crate::queues::QueueSpec;
use crate::wire::Payload;
use crate::wire::Propagation;
use crate::wire::cron::{CatchUp, CronEntry, CronSource, Overlap};
pub use crate::wire::duration::parse_duration;
use crate::wire::duration::{human, human_opt};

/// The default Redis URL.
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";

/// The client's default maximum payload size: 1 MiB.
pub const DEFAULT_MAX_PAYLOAD: usize = 1024 * 1024;

/// Everything a [`Client`](crate::Client) needs: the Redis URL, how to reach
/// it ([`ConnectOptions`], whose keys sit flat beside these in the serde form),
/// and what the client itself enforces.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClientConfig {
    /// Redis URL (`REDIS_URL`); [`DEFAULT_REDIS_URL`] when unset.
    pub redis: Option<String>,
    /// Namespace, timeouts, cluster mode, replicas to wait for, TLS files.
    #[serde(flatten)]
    pub connect: ConnectOptions,
    /// The reroute window kept per tenant (default 1 day, as the gem); raised
    /// automatically to the longest `per` of a job's rules.
    #[serde(with = "human")]
    pub max_throttling_window: Duration,
    /// Largest payload a push accepts, in bytes (default 1 MiB).
    pub max_payload_bytes: usize,
    /// Queues that are tenant-sharded (besides those declared by
    /// `#[job(shard_by_tenant)]` and those workers announce in Redis).
    pub sharded_queues: Vec<String>,
    /// How long a push keeps retrying while Redis refuses it (busy, loading,
    /// read-only, out of memory, writes stopped) or before it could be sent;
    /// 0 turns retries off (default 2 s). See the README's "When Redis says no".
    #[serde(with = "human")]
    pub retry_deadline: Duration,
}

/// The default [`ClientConfig::retry_deadline`].
pub const DEFAULT_RETRY_DEADLINE: Duration = Duration::from_secs(2);

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            redis: None,
            connect: ConnectOptions::default(),
            max_throttling_window: DEFAULT_MAX_WINDOW,
            max_payload_bytes: DEFAULT_MAX_PAYLOAD,
            sharded_queues: Vec::new(),
            retry_deadline: DEFAULT_RETRY_DEADLINE,
        }
    }
}

impl ClientConfig {
    /// The Redis URL in force.
    pub fn redis_url(&self) -> &str {
        self.redis.as_deref().unwrap_or(DEFAULT_REDIS_URL)
    }

    /// The broker's connection options (an empty namespace is none).
    pub fn connect_options(&self) -> ConnectOptions {
        ConnectOptions {
            namespace: self.connect.namespace.clone().filter(|n| !n.is_empty()),
            ..self.connect.clone()
        }
    }
}

/// The worker's settings with Sidekiq-like defaults, and its client's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "WorkerConfigFile", into = "WorkerConfigFile")]
pub struct WorkerConfig {
    /// The worker's client: Redis, namespace, windows (also used for pushes
    /// from jobs, promotions and the CLI's commands).
    pub client: ClientConfig,
    /// One tier of queues, Sidekiq style: `"name"` or `"name,weight"`.
    pub queues: Vec<String>,
    /// Ordered tiers, each a list like `queues`: a tier is fetched only when every
    /// queue of the tiers before it is empty. Exclusive with `queues`.
    pub tiers: Vec<Vec<String>>,
    /// Jobs run at once (default 10).
    pub concurrency: usize,
    /// Shutdown timeout (default 25s).
    pub timeout: Duration,
    /// Worker lease: a worker silent this long is dead and its jobs are offered
    /// again (default 30s).
    pub lease: Duration,
    /// Heartbeat interval (default: a third of the lease).
    pub heartbeat: Option<Duration>,
    /// How often some worker looks for dead workers' jobs (default 15s).
    pub reaper_interval: Duration,
    /// How often an idle worker looks at its queues without a wake-up (jobs pushed
    /// by clients that don't send wake-ups, e.g. Ruby Sidekiq) (default 1s).
    pub poll_interval: Duration,
    /// Average interval of the scheduler (`schedule`/`retry` promotion) (default 5s, ±50%).
    pub scheduled_poll_interval: Duration,
    /// Interruptions (worker deaths) before a job is dead-lettered (default 3).
    pub max_interruptions: u32,
    /// Largest payload a worker reads as a job; larger entries go to `dead` (default 16 MiB).
    pub max_payload_bytes: usize,
    /// How long a job may run when its type sets no `#[job(timeout)]`: then it
    /// is cancelled and, after a short grace, fails and is retried (default:
    /// no limit, as in Sidekiq).
    pub job_timeout: Option<Duration>,
    /// Sidekiq's process `tag`, shown in the Web UI.
    pub tag: String,
    /// Sidekiq's process labels.
    pub labels: Vec<String>,
    /// Keep per-queue and per-tenant wait statistics (enqueue → start) and
    /// per-queue throughput in Redis, aggregated in the worker and flushed
    /// with its heartbeat, for the dashboard and metrics (default true).
    pub wait_stats: bool,
    /// Write the acks of tenant-sharded queues' jobs that succeeded in
    /// batches: while one batch is on its way to Redis, the next gathers, and
    /// each batch is one script call per queue instead of one per job, each
    /// ack still fenced by its job's token and releasing its tenant's running
    /// count. No job waits on a timer; a crash between a job's end and its
    /// ack re-runs it, as it would without batching (default true).
    pub batch_acks: bool,
    /// What the worker reports through the `metrics` facade: label bounds and
    /// the sampler of the gauges read from Redis.
    pub metrics: MetricsConfig,
    /// With the `otel` feature: how a performed job's span continues the
    /// trace context its enqueue wrote (`child`, `link` or `none`; default
    /// `child`).
    pub propagation: Propagation,
    /// Periodic schedules (`[[cron]]` entries), declared like `#[cron]`.
    pub cron: Vec<CronConfig>,
    /// fairjob-postgres' pump beside the worker (the `[postgres]` table):
    /// read by `fairjob-worker run` (and `pump`); a library worker uses
    /// `fairjob_postgres::WorkerBuilderExt::postgres`.
    pub postgres: PostgresConfig,
}

/// The `[postgres]` table of the worker's TOML: the pump `fairjob-worker
/// run` starts beside the worker when `url` is set (as `--postgres URL`),
/// and the defaults of `fairjob-worker pump`.
///
/// ```toml
/// [postgres]
/// url = "postgres://app@db/app"
/// keep_queues = ["billing"]   # "Postgres stays the truth" for these queues
/// listen = true               # also wake on NOTIFY fairjob_outbox
/// retention = "7d"
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PostgresConfig {
    /// The PostgreSQL URL (none: no pump).
    pub url: Option<String>,
    /// Queues whose jobs stay in PostgreSQL until they end.
    pub keep_queues: Vec<String>,
    /// Wake on `NOTIFY fairjob_outbox` besides polling (default false).
    pub listen: bool,
    /// Rows per batch (default 500).
    pub batch: usize,
    /// Poll interval while there is work (default 100ms).
    #[serde(with = "human")]
    pub poll_interval: Duration,
    /// Longest wait between polls when idle (default 2s).
    #[serde(with = "human")]
    pub max_idle_interval: Duration,
    /// How often the relay epoch is checked and completions drained (default 1s).
    #[serde(with = "human")]
    pub check_interval: Duration,
    /// How long finished kept rows stay (default 7 days).
    #[serde(with = "human")]
    pub retention: Duration,
    /// How long a kept job may be missing from Redis before it is published
    /// again (default 60s).
    #[serde(with = "human")]
    pub lost_grace: Duration,
}

impl Default for PostgresConfig {
    fn default() -> Self {
        PostgresConfig {
            url: None,
            keep_queues: Vec::new(),
            listen: false,
            batch: 500,
            poll_interval: Duration::from_millis(100),
            max_idle_interval: Duration::from_secs(2),
            check_interval: Duration::from_secs(1),
            retention: Duration::from_secs(7 * 24 * 3600),
            lost_grace: Duration::from_secs(60),
        }
    }
}

/// Settings of the worker's metrics (see [`crate::metrics`]). In the TOML
/// file these keys start with `metrics_` (`metrics_top_k = 20`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsConfig {
    /// Tenants (and slot keys) with a series of their own, per queue: the K
    /// busiest; the rest are `"__other__"` (default 20).
    pub top_k: usize,
    /// Label series by tenant at all; `false` puts every tenant in
    /// `"__other__"` (default true).
    pub tenant_labels: bool,
    /// A tenant's series are dropped once it has been quiet this long (the
    /// exporter's idle timeout; default 5 minutes).
    #[serde(with = "human")]
    pub idle_timeout: Duration,
    /// Sample the gauges read from Redis (queue sizes and latency, shards,
    /// slot waiters) when this process holds the sampler lease (default true).
    pub sample: bool,
    /// How often the sampler reads Redis (default 10 s).
    #[serde(with = "human")]
    pub sample_interval: Duration,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            top_k: 20,
            tenant_labels: true,
            idle_timeout: Duration::from_secs(300),
            sample: true,
            sample_interval: Duration::from_secs(10),
        }
    }
}

impl MetricsConfig {
    /// Tenants labelled per queue: `top_k`, or 0 with tenant labels off.
    pub fn tenant_slots(&self) -> usize {
        if self.tenant_labels { self.top_k } else { 0 }
    }
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            client: ClientConfig::default(),
            queues: Vec::new(),
            tiers: Vec::new(),
            concurrency: 10,
            timeout: Duration::from_secs(25),
            lease: Duration::from_secs(30),
            heartbeat: None,
            reaper_interval: Duration::from_secs(15),
            poll_interval: Duration::from_secs(1),
            scheduled_poll_interval: Duration::from_secs(5),
            max_interruptions: 3,
            max_payload_bytes: 16 * 1024 * 1024,
            job_timeout: None,
            tag: String::new(),
            labels: Vec::new(),
            wait_stats: true,
            batch_acks: true,
            metrics: MetricsConfig::default(),
            propagation: Propagation::Child,
            cron: Vec::new(),
            postgres: PostgresConfig::default(),
        }
    }
}

impl WorkerConfig {
    /// The queue tiers, or `None` when neither `queues` nor `tiers` is set (the
    /// worker then derives them from the registered jobs).
    pub fn queue_spec(&self) -> Result<Option<QueueSpec>> {
        match (self.queues.is_empty(), self.tiers.is_empty()) {
            (true, true) => Ok(None),
            (false, false) => Err(Error::Config(
                "set either `queues` or `tiers`, not both".into(),
            )),
            (false, true) => QueueSpec::parse_tiers(std::slice::from_ref(&self.queues)).map(Some),
            (true, false) => QueueSpec::parse_tiers(&self.tiers).map(Some),
        }
    }

    /// Checks values that serde cannot.
    pub fn validate(&self) -> Result<()> {
        if self.concurrency == 0 {
            return Err(Error::Config("`concurrency` must be at least 1".into()));
        }
        if self.lease < Duration::from_millis(300) {
            return Err(Error::Config("`lease` must be at least 300ms".into()));
        }
        if self.metrics.sample_interval < Duration::from_millis(100) {
            return Err(Error::Config(
                "`metrics_sample_interval` must be at least 100ms".into(),
            ));
        }
        if let Some(h) = self.heartbeat
            && h >= self.lease
        {
            return Err(Error::Config(
                "`heartbeat` must be shorter than `lease`".into(),
            ));
        }
        self.queue_spec()?;
        Ok(())
    }

    /// The heartbeat interval in force.
    pub fn heartbeat_interval(&self) -> Duration {
        self.heartbeat.unwrap_or(self.lease / 3)
    }
}

/// The flat form of [`WorkerConfig`] in a TOML file: client keys beside worker keys.
/// The connection's keys are spelled out here rather than taken with
/// `#[serde(flatten)]` (as [`ClientConfig`] does): a flattened field is read
/// from a buffer, so a TOML error in it would lose its line and its key's name.
/// The defaults still come from [`WorkerConfig::default`], written once.
#[derive(Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct WorkerConfigFile {
    redis: Option<String>,
    namespace: Option<String>,
    #[serde(with = "human")]
    connect_timeout: Duration,
    #[serde(with = "human")]
    response_timeout: Duration,
    fair_key_format: Option<String>,
    cluster: bool,
    wait_replicas: u32,
    #[serde(with = "human")]
    wait_timeout: Duration,
    tls_ca_file: Option<PathBuf>,
    tls_cert_file: Option<PathBuf>,
    tls_key_file: Option<PathBuf>,
    #[serde(with = "human")]
    max_throttling_window: Duration,
    max_enqueue_bytes: usize,
    sharded_queues: Vec<String>,
    #[serde(with = "human")]
    retry_deadline: Duration,
    queues: Vec<String>,
    tiers: Vec<Vec<String>>,
    concurrency: usize,
    #[serde(with = "human")]
    timeout: Duration,
    #[serde(with = "human")]
    lease: Duration,
    #[serde(with = "human_opt")]
    heartbeat: Option<Duration>,
    #[serde(with = "human")]
    reaper_interval: Duration,
    #[serde(with = "human")]
    poll_interval: Duration,
    #[serde(with = "human")]
    scheduled_poll_interval: Duration,
    max_interruptions: u32,
    max_payload_bytes: usize,
    #[serde(with = "human_opt")]
    job_timeout: Option<Duration>,
    tag: String,
    labels: Vec<String>,
    wait_stats: bool,
    batch_acks: bool,
    metrics_top_k: usize,
    metrics_tenant_labels: bool,
    #[serde(with = "human")]
    metrics_idle_timeout: Duration,
    metrics_sample: bool,
    #[serde(with = "human")]
    metrics_sample_interval: Duration,
    propagation: Propagation,
    cron: Vec<CronConfig>,
    postgres: PostgresConfig,
}

/// A `[[cron]]` entry of the worker's TOML: a periodic schedule of a job
/// class with fixed arguments.
///
/// ```toml
/// [[cron]]
/// name = "nightly-report"
/// cron = "0 3 * * *"
/// class = "ReportJob"
/// args = [42]
/// tz = "Europe/Berlin"     # default "UTC"
/// catch_up = "10m"          # or "none"
/// overlap = "skip"          # default "allow"
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CronConfig {
    /// The schedule's name.
    pub name: String,
    /// The cron expression.
    pub cron: String,
    /// The job class it enqueues.
    pub class: String,
    /// Its arguments (Sidekiq's positional `args`).
    #[serde(default = "empty_args")]
    pub args: serde_json::Value,
    /// Its queue (default `default`).
    #[serde(default)]
    pub queue: Option<String>,
    /// Its tenant.
    #[serde(default)]
    pub tenant: Option<String>,
    /// The IANA zone (default `UTC`).
    #[serde(default = "utc")]
    pub tz: String,
    /// `"none"` or a grace (default `"10m"`).
    #[serde(default = "ten_minutes")]
    pub catch_up: String,
    /// `"allow"` (default) or `"skip"`.
    #[serde(default = "allow")]
    pub overlap: String,
}

fn empty_args() -> serde_json::Value {
    serde_json::Value::Array(Vec::new())
}
fn utc() -> String {
    "UTC".into()
}
fn ten_minutes() -> String {
    "10m".into()
}
fn allow() -> String {
    "allow".into()
}

impl CronConfig {
    /// The checked entry.
    pub fn to_entry(&self) -> Result<CronEntry> {
        let name = &self.name;
        let bad = |reason: String| Error::InvalidSchedule {
            name: name.clone(),
            reason,
        };
        let args = match &self.args {
            a @ serde_json::Value::Array(_) => a.clone(),
            other => serde_json::Value::Array(vec![other.clone()]),
        };
        let raw = serde_json::value::to_raw_value(&args).map_err(|e| bad(e.to_string()))?;
        let mut job = Payload::new(&self.class, raw, self.queue.as_deref().unwrap_or("default"));
        job.set("retry", true);
        if let Some(t) = self.tenant.as_deref().filter(|t| !t.is_empty()) {
            job.set(crate::wire::fields::FAIR_TENANT, t);
        }
        let catch_up = CatchUp::parse(&self.catch_up).map_err(|e| e.for_schedule(name))?;
        let overlap = Overlap::parse(&self.overlap).ok_or_else(|| {
            bad(format!(
                "overlap `{}`: expected `allow` or `skip`",
                self.overlap
            ))
        })?;
        CronEntry::new(
            name.clone(),
            &self.cron,
            &self.tz,
            catch_up,
            overlap,
            CronSource::Code,
            &job,
        )
        .map_err(|e| e.for_schedule(name))
    }
}

impl WorkerConfig {
    /// The `[[cron]]` entries, checked.
    pub fn cron_entries(&self) -> Result<Vec<CronEntry>> {
        self.cron.iter().map(CronConfig::to_entry).collect()
    }
}

impl Default for WorkerConfigFile {
    fn default() -> Self {
        WorkerConfig::default().into()
    }
}

impl From<WorkerConfig> for WorkerConfigFile {
    fn from(w: WorkerConfig) -> Self {
        let c = w.client;
        let ConnectOptions {
            namespace,
            response_timeout,
            connect_timeout,
            fair_key_format,
            cluster,
            wait_replicas,
            wait_timeout,
            tls_ca_file,
            tls_cert_file,
            tls_key_file,
        } = c.connect;
        WorkerConfigFile {
            redis: c.redis,
            namespace,
            connect_timeout,
            response_timeout,
            fair_key_format,
            cluster,
            wait_replicas,
            wait_timeout,
            tls_ca_file,
            tls_cert_file,
            tls_key_file,
            max_throttling_window: c.max_throttling_window,
            max_enqueue_bytes: c.max_payload_bytes,
            sharded_queues: c.sharded_queues,
            retry_deadline: c.retry_deadline,
            queues: w.queues,
            tiers: w.tiers,
            concurrency: w.concurrency,
            timeout: w.timeout,
            lease: w.lease,
            heartbeat: w.heartbeat,
            reaper_interval: w.reaper_interval,
            poll_interval: w.poll_interval,
            scheduled_poll_interval: w.scheduled_poll_interval,
            max_interruptions: w.max_interruptions,
            max_payload_bytes: w.max_payload_bytes,
            job_timeout: w.job_timeout,
            tag: w.tag,
            labels: w.labels,
            wait_stats: w.wait_stats,
            batch_acks: w.batch_acks,
            metrics_top_k: w.metrics.top_k,
            metrics_tenant_labels: w.metrics.tenant_labels,
            metrics_idle_timeout: w.metrics.idle_timeout,
            metrics_sample: w.metrics.sample,
            metrics_sample_interval: w.metrics.sample_interval,
            propagation: w.propagation,
            cron: w.cron,
            postgres: w.postgres,
        }
    }
}

impl From<WorkerConfigFile> for WorkerConfig {
    fn from(f: WorkerConfigFile) -> Self {
        WorkerConfig {
            client: ClientConfig {
                redis: f.redis,
                connect: ConnectOptions {
                    namespace: f.namespace,
                    response_timeout: f.response_timeout,
                    connect_timeout: f.connect_timeout,
                    fair_key_format: f.fair_key_format,
                    cluster: f.cluster,
                    wait_replicas: f.wait_replicas,
                    wait_timeout: f.wait_timeout,
                    tls_ca_file: f.tls_ca_file,
                    tls_cert_file: f.tls_cert_file,
                    tls_key_file: f.tls_key_file,
                },
                max_throttling_window: f.max_throttling_window,
                max_payload_bytes: f.max_enqueue_bytes,
                sharded_queues: f.sharded_queues,
                retry_deadline: f.retry_deadline,
            },
            queues: f.queues,
            tiers: f.tiers,
            concurrency: f.concurrency,
            timeout: f.timeout,
            lease: f.lease,
            heartbeat: f.heartbeat,
            reaper_interval: f.reaper_interval,
            poll_interval: f.poll_interval,
            scheduled_poll_interval: f.scheduled_poll_interval,
            max_interruptions: f.max_interruptions,
            max_payload_bytes: f.max_payload_bytes,
            job_timeout: f.job_timeout,
            tag: f.tag,
            labels: f.labels,
            wait_stats: f.wait_stats,
            batch_acks: f.batch_acks,
            metrics: MetricsConfig {
                top_k: f.metrics_top_k,
                tenant_labels: f.metrics_tenant_labels,
                idle_timeout: f.metrics_idle_timeout,
                sample: f.metrics_sample,
                sample_interval: f.metrics_sample_interval,
            },
            propagation: f.propagation,
            cron: f.cron,
            postgres: f.postgres,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_postgres_table_is_read_with_its_defaults() {
        let c: WorkerConfig = serde_json::from_str(
            r#"{"postgres": {"url": "postgres://db/app", "keep_queues": ["billing"], "retention": "1d"}}"#,
        )
        .unwrap();
        assert_eq!(c.postgres.url.as_deref(), Some("postgres://db/app"));
        assert_eq!(c.postgres.keep_queues, vec!["billing".to_owned()]);
        assert_eq!(c.postgres.retention, Duration::from_secs(86_400));
        assert_eq!(c.postgres.batch, 500);
        assert!(!c.postgres.listen);
        let err =
            serde_json::from_str::<WorkerConfig>(r#"{"postgres": {"keep": []}}"#).unwrap_err();
        assert!(err.to_string().contains("keep"), "{err}");
    }

    #[test]
    fn config_round_trips_through_serde_flat() {
        let c = WorkerConfig {
            queues: vec!["default,4".into(), "slow,1".into()],
            client: ClientConfig {
                connect: ConnectOptions {
                    namespace: Some("app".into()),
                    fair_key_format: Some("w:%<job_class>s:%<fair_tenant>s".into()),
                    ..ConnectOptions::default()
                },
                ..ClientConfig::default()
            },
            ..WorkerConfig::default()
        };
        let json = serde_json::to_string(&c).unwrap();
        assert!(json.contains(r#""timeout":"25s""#), "{json}");
        assert!(json.contains(r#""namespace":"app""#), "{json}");
        assert!(!json.contains(r#""client""#), "{json}");
        assert!(!json.contains(r#""connect""#), "{json}");
        assert!(json.contains(r#""wait_timeout":"1s""#), "{json}");
        let back: WorkerConfig = serde_json::from_str(&json).unwrap();
        assert_eq!(back, c);
        let err = serde_json::from_str::<WorkerConfig>(r#"{"concurency":3}"#).unwrap_err();
        assert!(err.to_string().contains("unknown field"), "{err}");
        let partial: WorkerConfig =
            serde_json::from_str(r#"{"redis":"redis://h:1","concurrency":3}"#).unwrap();
        assert_eq!(partial.client.redis.as_deref(), Some("redis://h:1"));
        assert_eq!(partial.concurrency, 3);
        assert_eq!(partial.lease, Duration::from_secs(30));
        assert_eq!(partial.propagation, Propagation::Child);
        let linked: WorkerConfig = serde_json::from_str(r#"{"propagation":"link"}"#).unwrap();
        assert_eq!(linked.propagation, Propagation::Link);
        let client: ClientConfig =
            serde_json::from_str(r#"{"namespace":"","connect_timeout":"2s","cluster":true}"#)
                .unwrap();
        assert_eq!(client.connect.connect_timeout, Duration::from_secs(2));
        assert!(client.connect.cluster);
        assert_eq!(client.max_payload_bytes, DEFAULT_MAX_PAYLOAD);
        assert_eq!(client.retry_deadline, DEFAULT_RETRY_DEADLINE);
        let off: WorkerConfig = serde_json::from_str(r#"{"retry_deadline":"0s"}"#).unwrap();
        assert_eq!(off.client.retry_deadline, Duration::ZERO);
        assert_eq!(
            client.connect_options(),
            ConnectOptions {
                connect_timeout: Duration::from_secs(2),
                cluster: true,
                ..ConnectOptions::default()
            }
        );
        let err = serde_json::from_str::<ClientConfig>(r#"{"namspace":"x"}"#).unwrap_err();
        assert!(err.to_string().contains("unknown field"), "{err}");
    }

    #[test]
    fn queues_and_tiers_are_exclusive() {
        let c = WorkerConfig {
            queues: vec!["a".into()],
            tiers: vec![vec!["b".into()]],
            ..WorkerConfig::default()
        };
        assert!(c.validate().is_err());
    }
}
