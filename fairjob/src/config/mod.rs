//! Settings, in one place: [`ClientConfig`] (the Redis URL, how to reach it
//! as the broker's [`ConnectOptions`], reroute windows, payload limits) and
//! [`WorkerConfig`], which contains one, so the worker's own client
//! (promotions, jobs enqueued from jobs, the CLI's commands) counts in the
//! same windows as the application's.
//!
//! Every setting is one row of the table below, [`crate::__worker_settings!`]:
//! its type, default and doc, its key in the TOML form (`-C worker.toml`),
//! its `WorkerBuilder` setter and its `fairjob-worker` flag when it has
//! them. The TOML form is flat: `redis`, `namespace`, `concurrency`, … side
//! by side, with the `[postgres]` table and `[[cron]]` entries. Durations
//! are humantime strings (`"25s"`, `"1m 30s"`).
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

mod flat;

#[doc(hidden)]
pub use flat::Part;

/// The default Redis URL.
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";

/// The client's default maximum payload size: 1 MiB.
pub const DEFAULT_MAX_PAYLOAD: usize = 1024 * 1024;

/// The default [`ClientConfig::retry_deadline`].
pub const DEFAULT_RETRY_DEADLINE: Duration = Duration::from_secs(2);

/// Largest result a workflow's step may record, by default.
pub const DEFAULT_MAX_RESULT: usize = 64 * 1024;

/// How long a batch's data stays after its `success` fired, by default.
pub const DEFAULT_BATCH_RETENTION: Duration = Duration::from_secs(86_400);

/// The settings table: every setting of a worker, once. Not a public API;
/// `fairjob-worker` reads it to declare its flags.
///
/// `__worker_settings!(callback)` calls `callback! { table }`, and each
/// reader takes what it needs: this module the structs, their `Default`s
/// and their serde form (`flat`), `WorkerBuilder` its setters,
/// `fairjob-worker` its flags. A group is a struct, with its place in a
/// `WorkerConfig` after `in` (the root, `WorkerConfig`, has none; its serde
/// form is the worker's file):
///
/// - `pub struct Name in path { rows }` is defined here;
/// - `impl Name in path { rows }` is defined elsewhere (the broker's
///   `ConnectOptions`, which keeps its own docs and defaults) and only
///   lends its keys, setters and flags.
///
/// A row is `/// doc`, then `field: Type = default`, then its parts, in
/// this order, each optional:
///
/// - `..Type` instead of `Type`: a struct of the table whose keys sit flat
///   beside this one's;
/// - `file "key"`: the key's name in the worker's file when not the
///   field's (the struct's own serde form keeps the field's);
/// - `builder(fn name(arg: Type) => value)`: a `WorkerBuilder` setter,
///   documented by the row's doc (`=> value` when the field is not `arg`
///   itself);
/// - `global kind(args)` or `run kind(args)`: a flag of `fairjob-worker`,
///   global (every command) or of running jobs, with clap's `#[arg(args)]`
///   and the row's doc as its help. `kind` is `flag` (`--x VALUE` sets
///   the setting; `Some(VALUE)` for an `Option`), `switch` (`--x` turns a
///   `bool` on), `switch_off` (`--no-x` turns it off; give its `help`) or
///   `append` (`--x VALUE`, repeatable, adds to a list).
///
/// So a new setting is one row: its field, default, doc, key, setter and
/// flag come from it. Checks that span settings go in
/// [`WorkerConfig::validate`].
#[doc(hidden)]
#[macro_export]
macro_rules! __worker_settings {
    ($callback:path) => {
        $callback! {
            /// The worker's settings with Sidekiq-like defaults, and its client's.
            pub struct WorkerConfig {
                /// The worker's client: Redis, namespace, windows (also used for pushes
                /// from jobs, promotions and the CLI's commands).
                client: ..ClientConfig = ClientConfig::default();
                /// One tier of queues, Sidekiq style: `"name"` or `"name,weight"`.
                queues: Vec<String> = Vec::new();
                /// Ordered tiers, each a list like `queues`: a tier is fetched only when every
                /// queue of the tiers before it is empty. Exclusive with `queues`.
                tiers: Vec<Vec<String>> = Vec::new();
                /// Jobs run at once (default 10).
                concurrency: usize = 10,
                    builder(fn concurrency(n: usize)),
                    run flag(short = 'c', long);
                /// Shutdown timeout (default 25s).
                timeout: Duration = Duration::from_secs(25),
                    builder(fn shutdown_timeout(d: Duration)),
                    run flag(short = 't', long, value_parser = parse_duration);
                /// Worker lease: a worker silent this long is dead and its jobs are offered
                /// again (default 30s).
                lease: Duration = Duration::from_secs(30),
                    builder(fn lease(lease: Duration)),
                    run flag(long, value_parser = parse_duration);
                /// Heartbeat interval (default: a third of the lease).
                heartbeat: Option<Duration> = None,
                    builder(fn heartbeat(interval: Duration) => Some(interval)),
                    run flag(long, value_parser = parse_duration);
                /// How often some worker looks for dead workers' jobs (default 15s).
                reaper_interval: Duration = Duration::from_secs(15),
                    builder(fn reaper_interval(interval: Duration)),
                    run flag(long, value_parser = parse_duration);
                /// How often an idle worker looks at its queues without a wake-up (jobs pushed
                /// by clients that don't send wake-ups, e.g. Ruby Sidekiq) (default 1s).
                poll_interval: Duration = Duration::from_secs(1),
                    builder(fn poll_interval(interval: Duration)),
                    run flag(long, value_parser = parse_duration);
                /// Average interval of the scheduler (`schedule`/`retry` promotion)
                /// (default 5s, ±50%).
                scheduled_poll_interval: Duration = Duration::from_secs(5),
                    builder(fn scheduled_poll_interval(interval: Duration)),
                    run flag(long, value_parser = parse_duration);
                /// Interruptions (worker deaths) before a job is dead-lettered (default 3).
                max_interruptions: u32 = 3,
                    builder(fn max_interruptions(n: u32)),
                    run flag(long);
                /// Largest payload a worker reads as a job; larger entries go to `dead`
                /// (default 16 MiB).
                max_payload_bytes: usize = 16 * 1024 * 1024,
                    run flag(long);
                /// How long a job may run when its type sets no `#[job(timeout)]`: then it
                /// is cancelled and, after a short grace, fails and is retried (default:
                /// no limit, as in Sidekiq).
                job_timeout: Option<Duration> = None,
                    builder(fn job_timeout(timeout: Duration) => Some(timeout)),
                    run flag(long, value_parser = parse_duration);
                /// Sidekiq's process `tag`, shown in the Web UI.
                tag: String = String::new(),
                    run flag(short = 'g', long);
                /// Sidekiq's process labels.
                labels: Vec<String> = Vec::new();
                /// Keep per-queue and per-tenant wait statistics (enqueue → start) and
                /// per-queue throughput in Redis, aggregated in the worker and flushed
                /// with its heartbeat, for the dashboard and metrics (default true).
                wait_stats: bool = true,
                    builder(fn wait_stats(on: bool)),
                    run switch_off(long = "no-wait-stats",
                        help = "Keep no wait statistics (per queue and tenant) in Redis");
                /// Write the acks of tenant-sharded queues' jobs that succeeded in
                /// batches: while one batch is on its way to Redis, the next gathers, and
                /// each batch is one script call per queue instead of one per job, each
                /// ack still fenced by its job's token and releasing its tenant's running
                /// count. No job waits on a timer; a crash between a job's end and its
                /// ack re-runs it, as it would without batching (default true).
                batch_acks: bool = true,
                    builder(fn batch_acks(on: bool));
                /// With `batch_acks`: the next fetch of a tenant-sharded queue carries the
                /// acks of its jobs that succeeded (one script call acks, then refills
                /// the freed slots: one round trip per sharded job, the tenant's running
                /// count released in the step that dispatches), and the worker keeps one
                /// fetch in flight instead of two. Measured (BENCHMARKS.md, "Acks folded
                /// into the next fetch, on by default"): Redis CPU per sharded job
                /// −15%, script calls per job halved, small tenants' wait under a greedy
                /// flood unchanged when jobs' lengths vary (default true).
                fold_acks: bool = true,
                    builder(fn fold_acks(on: bool));
                /// What the worker reports through the `metrics` facade: label bounds and
                /// the sampler of the gauges read from Redis.
                metrics: ..MetricsConfig = MetricsConfig::default(),
                    builder(fn metrics(metrics: MetricsConfig));
                /// With the `otel` feature: how a performed job's span continues the
                /// trace context its enqueue wrote (`child`, `link` or `none`; default
                /// `child`).
                propagation: Propagation = Propagation::Child,
                    builder(fn propagation(propagation: Propagation));
                /// Periodic schedules (`[[cron]]` entries), declared like `#[cron]`.
                cron: Vec<CronConfig> = Vec::new();
                /// fairjob-postgres' pump beside the worker (the `[postgres]` table):
                /// read by `fairjob-worker run` (and `pump`); a library worker uses
                /// `fairjob_postgres::WorkerBuilderExt::postgres`.
                postgres: PostgresConfig = PostgresConfig::default();
            }

            /// Everything a [`Client`](crate::Client) needs: the Redis URL, how to reach
            /// it ([`ConnectOptions`], whose keys sit flat beside these in the serde form),
            /// and what the client itself enforces.
            pub struct ClientConfig in client {
                /// Redis URL, e.g. redis://:password@host:6379/0 (default
                /// redis://127.0.0.1:6379).
                redis: Option<String> = None,
                    global flag(short = 'r', long = "redis", env = "REDIS_URL",
                        hide_env_values = true);
                /// Namespace, timeouts, cluster mode, replicas to wait for, TLS files.
                connect: ..ConnectOptions = ConnectOptions::default();
                /// The reroute window kept per tenant (default 1 day, as the gem); raised
                /// automatically to the longest `per` of a job's rules.
                max_throttling_window: Duration = DEFAULT_MAX_WINDOW,
                    builder(fn max_throttling_window(window: Duration));
                /// Largest payload a push accepts, in bytes (default 1 MiB).
                max_payload_bytes: usize = DEFAULT_MAX_PAYLOAD,
                    file "max_enqueue_bytes";
                /// Queues that are tenant-sharded (besides those declared by
                /// `#[job(shard_by_tenant)]` and those workers announce in Redis).
                sharded_queues: Vec<String> = Vec::new(),
                    run append(long = "shard", value_name = "QUEUE",
                        help = "Declare a queue tenant-sharded (repeatable)");
                /// How long a push keeps retrying while Redis refuses it (busy, loading,
                /// read-only, out of memory, writes stopped) or before it could be sent;
                /// 0 turns retries off (default 2 s). See the README's "When Redis says no".
                retry_deadline: Duration = DEFAULT_RETRY_DEADLINE;
                /// How long a batch's data stays after its `success` fired (default 1 day).
                batch_retention: Duration = DEFAULT_BATCH_RETENTION,
                    builder(fn batch_retention(retention: Duration));
                /// Largest result a workflow's step may record, in bytes (default 64 KiB).
                max_result_bytes: usize = DEFAULT_MAX_RESULT,
                    builder(fn max_result_bytes(max: usize));
            }

            // Documented, with their defaults, on `ConnectOptions` itself; the
            // docs here are the setters' and the flags'.
            impl ConnectOptions in client.connect {
                /// Key prefix, as redis-namespace did for Sidekiq.
                namespace: Option<String>,
                    builder(fn namespace(ns: impl Into<String>) => {
                        let ns = ns.into();
                        (!ns.is_empty()).then_some(ns)
                    }),
                    global flag(long);
                response_timeout: Duration;
                connect_timeout: Duration;
                /// The reroute window key format, the gem's `enqueues_key` (placeholders
                /// `%<job_class>s`, `%<fair_tenant>s`, `%<queue>s`); the gem's by default.
                fair_key_format: Option<String>,
                    builder(fn fair_key_format(format: impl Into<String>) => Some(format.into())),
                    run flag(long);
                /// Redis Cluster mode even with one seed URL (detected otherwise; give
                /// several seeds as redis://a:7000,redis://b:7001).
                cluster: bool,
                    global switch(long);
                /// Every push (promotions, retries' re-enqueues, jobs enqueued from jobs)
                /// waits until N replicas have it (Redis WAIT), or fails (default 0: none).
                wait_replicas: u32,
                    global flag(long, value_name = "N");
                /// How long a push waits for its replicas (default 1s).
                wait_timeout: Duration,
                    global flag(long, value_parser = parse_duration, value_name = "DURATION");
                /// For a `rediss://` URL: a PEM file of the CA certificate(s) that signed the
                /// server's certificate (default: the system's root certificates).
                tls_ca_file: Option<PathBuf>,
                    builder(fn tls_ca_file(path: impl Into<PathBuf>) => Some(path.into())),
                    global flag(long = "tls-ca", env = "REDIS_TLS_CA", value_name = "FILE");
                /// Mutual TLS: a PEM client certificate, with --tls-key.
                tls_cert_file: Option<PathBuf>,
                    global flag(long = "tls-cert", env = "REDIS_TLS_CERT", value_name = "FILE");
                /// Mutual TLS: the client certificate's PEM private key.
                tls_key_file: Option<PathBuf>,
                    global flag(long = "tls-key", env = "REDIS_TLS_KEY", value_name = "FILE");
                /// Call scripts as Redis functions (FCALL) where Redis has them (default
                /// true); off: by hash (EVALSHA).
                functions: bool,
                    builder(fn functions(on: bool)),
                    global switch_off(long = "no-functions",
                        help = "Call scripts by hash (EVALSHA), not as Redis functions (FCALL)");
            }

            /// Settings of the worker's metrics (see [`crate::metrics`]). In the TOML
            /// file these keys start with `metrics_` (`metrics_top_k = 20`).
            pub struct MetricsConfig in metrics {
                /// Tenants (and slot keys) with a series of their own, per queue: the K
                /// busiest; the rest are `"__other__"` (default 20).
                top_k: usize = 20,
                    file "metrics_top_k",
                    run flag(long = "metrics-top-k", value_name = "K");
                /// Label series by tenant at all; `false` puts every tenant in
                /// `"__other__"` (default true).
                tenant_labels: bool = true,
                    file "metrics_tenant_labels",
                    run switch_off(long = "no-tenant-labels",
                        help = "Put every tenant in \"__other__\": no per-tenant series at all");
                /// A tenant's series are dropped once it has been quiet this long (the
                /// exporter's idle timeout; default 5 minutes).
                idle_timeout: Duration = Duration::from_secs(300),
                    file "metrics_idle_timeout",
                    run flag(long = "metrics-idle-timeout", value_parser = parse_duration,
                        value_name = "DURATION");
                /// Sample the gauges read from Redis (queue sizes and latency, shards,
                /// slot waiters) when this process holds the sampler lease (default true).
                sample: bool = true,
                    file "metrics_sample",
                    run switch_off(long = "no-metrics-sampler",
                        help = "Never sample the Redis gauges from this process (others may)");
                /// How often the sampler reads Redis (default 10s).
                sample_interval: Duration = Duration::from_secs(10),
                    file "metrics_sample_interval",
                    run flag(long = "metrics-interval", value_parser = parse_duration,
                        value_name = "DURATION");
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
            pub struct PostgresConfig in postgres {
                /// The PostgreSQL URL: with one, `fairjob-worker run` also runs
                /// fairjob-postgres' pump in its process, as `fairjob-worker pump` does
                /// (default none: no pump). `--postgres` without a URL takes
                /// `DATABASE_URL`'s, as `pump` and `postgres migrate` do.
                url: Option<String> = None,
                    run flag(long = "postgres", value_name = "URL", num_args = 0..=1,
                        default_missing_value = "");
                /// Queues whose jobs stay in PostgreSQL until they end.
                keep_queues: Vec<String> = Vec::new();
                /// Wake on `NOTIFY fairjob_outbox` besides polling (default false).
                listen: bool = false;
                /// Rows per batch (default 500).
                batch: usize = 500;
                /// Poll interval while there is work (default 100ms).
                poll_interval: Duration = Duration::from_millis(100);
                /// Longest wait between polls when idle (default 2s).
                max_idle_interval: Duration = Duration::from_secs(2);
                /// How often the relay epoch is checked and completions drained (default 1s).
                check_interval: Duration = Duration::from_secs(1);
                /// How long finished kept rows stay (default 7 days).
                retention: Duration = Duration::from_secs(7 * 24 * 3600);
                /// How long a kept job may be missing from Redis before it is published
                /// again (default 60s).
                lost_grace: Duration = Duration::from_secs(60);
            }
        }
    };
}

crate::__worker_settings!(flat::settings_structs);

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

impl MetricsConfig {
    /// Tenants labelled per queue: `top_k`, or 0 with tenant labels off.
    pub fn tenant_slots(&self) -> usize {
        if self.tenant_labels { self.top_k } else { 0 }
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

    /// The keys a worker's TOML file may hold, and each struct's own serde
    /// form, as they were before the table: existing files keep parsing.
    #[test]
    fn the_keys_are_the_files_keys() {
        use flat::Flat;
        fn sorted(keys: &[&str]) -> Vec<String> {
            let mut keys: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
            keys.sort();
            keys
        }
        let connect = "namespace connect_timeout response_timeout fair_key_format cluster \
                       wait_replicas wait_timeout tls_ca_file tls_cert_file tls_key_file functions";
        let file = format!(
            "redis {connect} max_throttling_window max_enqueue_bytes sharded_queues \
             retry_deadline batch_retention max_result_bytes queues tiers concurrency timeout lease heartbeat reaper_interval \
             poll_interval scheduled_poll_interval max_interruptions max_payload_bytes \
             job_timeout tag labels wait_stats batch_acks fold_acks metrics_top_k metrics_tenant_labels \
             metrics_idle_timeout metrics_sample metrics_sample_interval propagation cron postgres"
        );
        let client = format!(
            "redis {connect} max_throttling_window max_payload_bytes sharded_queues retry_deadline \
             batch_retention max_result_bytes"
        );
        let split = |s: &str| sorted(&s.split_whitespace().collect::<Vec<_>>());
        assert_eq!(sorted(WorkerConfig::keys(true)), split(&file));
        assert_eq!(WorkerConfig::keys(true).len(), 43, "no key twice");
        assert_eq!(sorted(ClientConfig::keys(false)), split(&client));
        assert_eq!(
            sorted(MetricsConfig::keys(false)),
            split("top_k tenant_labels idle_timeout sample sample_interval")
        );
        assert_eq!(
            sorted(PostgresConfig::keys(false)),
            split(
                "url keep_queues listen batch poll_interval max_idle_interval check_interval \
                 retention lost_grace"
            )
        );
        let metrics: MetricsConfig =
            serde_json::from_str(r#"{"top_k": 5, "sample_interval": "1s"}"#).unwrap();
        assert_eq!(metrics.top_k, 5);
        assert_eq!(metrics.sample_interval, Duration::from_secs(1));
        let err = serde_json::from_str::<MetricsConfig>(r#"{"metrics_top_k": 5}"#).unwrap_err();
        assert!(err.to_string().contains("unknown field"), "{err}");
        let err = serde_json::from_str::<WorkerConfig>(r#"{"tag": "a", "tag": "b"}"#).unwrap_err();
        assert!(err.to_string().contains("duplicate field `tag`"), "{err}");
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
