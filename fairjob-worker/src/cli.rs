//! Command-line parsing (flags familiar to Sidekiq users), logging set-up, and
//! dispatch to running jobs or to the inspection commands.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand, ValueEnum};
use fairjob::config::{Part, WorkerConfig, parse_duration};
use fairjob::inspect::{Setting, ShardPolicy, YieldPolicy};
use fairjob::{Registry, Worker};

/// The fairjob worker.
#[derive(Debug, Parser)]
#[command(name = "worker", version, about = "Runs fairjob jobs (Sidekiq-compatible) and inspects queues", long_about = None)]
pub struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(flatten)]
    run: RunArgs,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Args)]
struct Global {
    /// Redis, namespace, cluster, replicas to wait for, TLS files: the
    /// settings table's global flags.
    #[command(flatten)]
    settings: GlobalFlags,
    /// TOML config file; every flag has a key (durations in humantime form, e.g. "25s")
    #[arg(short = 'C', long = "config", global = true)]
    config: Option<PathBuf>,
    /// Log lines as text (coloured on a terminal unless NO_COLOR is set) or as
    /// one JSON object per line with the span fields
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Enable the dashboard's actions (retry, delete, kill, pause, edit limits…); read-only without
    #[arg(long, global = true)]
    web_actions: bool,
    /// A token the dashboard requires on every route (bearer header or login form)
    #[arg(
        long,
        global = true,
        env = "FAIRJOB_WEB_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    web_token: Option<String>,
    /// Export spans (a job's `process` span, the `send` spans of the jobs it
    /// enqueues) over OTLP/HTTP to the collector the standard `OTEL_*`
    /// variables name (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_SERVICE_NAME, …);
    /// needs the `otel` feature of fairjob-worker
    #[arg(long, global = true)]
    otel: bool,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

#[derive(Debug, Args, Default, Clone)]
struct RunArgs {
    /// A queue and its weight, Sidekiq style: -q default,4 -q throttled,1 (repeatable)
    #[arg(short = 'q', long = "queue", value_name = "NAME[,WEIGHT]")]
    queues: Vec<String>,
    /// A strict tier of weighted queues, most urgent first: -Q critical -Q "default,4 slow,1"
    #[arg(short = 'Q', long = "tier", value_name = "QUEUES")]
    tiers: Vec<String>,
    /// Concurrency, timeouts, intervals, metrics, …: the settings table's
    /// flags of running jobs.
    #[command(flatten)]
    settings: RunFlags,
    /// Serve the dashboard beside processing, on this address (e.g. 127.0.0.1:7433)
    #[arg(long, value_name = "ADDR")]
    web: Option<std::net::SocketAddr>,
    /// Serve Prometheus metrics on this address (`/metrics`, with `/healthz`
    /// and `/readyz` for probes), e.g. 127.0.0.1:9464
    #[arg(long, value_name = "ADDR")]
    metrics: Option<std::net::SocketAddr>,
}

impl RunArgs {
    /// `self` with every flag `later` sets overriding it (`worker -c 5 run -c 7`).
    fn merged(mut self, later: RunArgs) -> RunArgs {
        self.settings = self.settings.merged(later.settings);
        if !later.queues.is_empty() || !later.tiers.is_empty() {
            self.queues = later.queues;
            self.tiers = later.tiers;
        }
        if later.web.is_some() {
            self.web = later.web;
        }
        if later.metrics.is_some() {
            self.metrics = later.metrics;
        }
        self
    }
}

/// The flags of fairjob's settings table (`fairjob::__worker_settings!`):
/// its rows with `global kind(args)` become [`GlobalFlags`], those with
/// `run kind(args)` [`RunFlags`], each flag documented by its row; `apply`
/// sets what they give on a config, `merged` lets a later command's flags
/// override an earlier one's.
macro_rules! setting_flags {
    // Each row becomes `{ docs group field [type] }`, with `dest kind (args)`
    // when it has a flag; then a row with a flag becomes `{ docs group field
    // [the flag's type] apply merge (args) }` in the global or the run list.
    ($(
        $(#[doc = $gdoc:literal])*
        $vis:vis $gkind:ident $group:ident $(in $($seg:ident).+)? {$(
            $(#[doc = $doc:literal])*
            $field:ident $(: ..$part:ty)? $(: $ty:ty)? $(= $default:expr)?
            $(, file $file:literal)?
            $(, builder $builder:tt)?
            $(, global $global:ident $gargs:tt)?
            $(, run $run:ident $rargs:tt)?
        ;)*}
    )*) => {
        setting_flags! { @row [] [] $($({
            [$(#[doc = $doc])*] $group $field [$($part)? $($ty)?]
            $(global $global $gargs)? $(run $run $rargs)?
        })*)* }
    };
    // The field each kind of flag takes, and how it lands.
    (@row $g:tt $r:tt {
        $d:tt $p:ident $f:ident [$t:ty] $dest:ident flag $a:tt
    } $($rows:tt)*) => {
        setting_flags! { @push $dest $g $r
            { $d $p $f [Option<<$t as FlagValue>::Value>] set later $a } $($rows)* }
    };
    (@row $g:tt $r:tt {
        $d:tt $p:ident $f:ident [$t:ty] $dest:ident switch $a:tt
    } $($rows:tt)*) => {
        setting_flags! { @push $dest $g $r
            { $d $p $f [bool] turn_on either $a } $($rows)* }
    };
    (@row $g:tt $r:tt {
        $d:tt $p:ident $f:ident [$t:ty] $dest:ident switch_off $a:tt
    } $($rows:tt)*) => {
        setting_flags! { @push $dest $g $r
            { $d $p $f [bool] turn_off either $a } $($rows)* }
    };
    (@row $g:tt $r:tt {
        $d:tt $p:ident $f:ident [$t:ty] $dest:ident append $a:tt
    } $($rows:tt)*) => {
        setting_flags! { @push $dest $g $r
            { $d $p $f [$t] add both $a } $($rows)* }
    };
    // A row without a flag.
    (@row $g:tt $r:tt { $d:tt $p:ident $f:ident $t:tt } $($rows:tt)*) => {
        setting_flags! { @row $g $r $($rows)* }
    };
    (@push global [$($g:tt)*] $r:tt $flag:tt $($rows:tt)*) => {
        setting_flags! { @row [$($g)* $flag] $r $($rows)* }
    };
    (@push run $g:tt [$($r:tt)*] $flag:tt $($rows:tt)*) => {
        setting_flags! { @row $g [$($r)* $flag] $($rows)* }
    };
    // Every row read.
    (@row [$($g:tt)*] [$($r:tt)*]) => {
        setting_flags! { @flags GlobalFlags (global = true) $($g)* }
        setting_flags! { @flags RunFlags () $($r)* }
        setting_flags! { @merged RunFlags $($r)* }
    };
    (@flags $name:ident $extra:tt $({
        [$($doc:tt)*] $part:ident $field:ident [$ty:ty] $apply:ident $merge:ident ($($args:tt)*)
    })*) => {
        #[derive(Debug, Args, Default, Clone)]
        struct $name {$(
            $($doc)*
            #[arg $extra]
            #[arg($($args)*)]
            $field: $ty,
        )*}

        impl $name {
            /// Sets what the flags give on `config`.
            fn apply(&self, config: &mut WorkerConfig) {$(
                let part = Part::<fairjob::config::$part>::part(config);
                kind::$apply(&self.$field, &mut part.$field);
            )*}
        }
    };
    // Global flags need no merging: clap puts one given after a subcommand
    // in the same field.
    (@merged $name:ident $({
        $d:tt $p:ident $field:ident $t:tt $apply:ident $merge:ident $a:tt
    })*) => {
        impl $name {
            /// `self` with what `later` gives over it.
            fn merged(mut self, later: Self) -> Self {
                $( kind::$merge(&mut self.$field, later.$field); )*
                self
            }
        }
    };
}

fairjob::__worker_settings!(setting_flags);

/// The value a `flag` takes: the setting's type, or the type inside its
/// `Option`.
trait FlagValue {
    type Value;
}

macro_rules! flag_value_is_the_setting {
    ($($t:ty),*) => {$( impl FlagValue for $t { type Value = $t; } )*};
}
flag_value_is_the_setting!(usize, u32, String, Duration);

impl<T> FlagValue for Option<T> {
    type Value = T;
}

/// How each kind of flag lands on its setting (`apply`) and how one given
/// after `run` overrides one before it (`merge`).
mod kind {
    /// `flag`: `--x VALUE` sets the setting (`Some(VALUE)` for an `Option`).
    pub(super) fn set<V: Clone, S: From<V>>(flag: &Option<V>, setting: &mut S) {
        if let Some(v) = flag {
            *setting = S::from(v.clone());
        }
    }

    /// `flag`: the later value, when given.
    pub(super) fn later<V>(earlier: &mut Option<V>, later: Option<V>) {
        if later.is_some() {
            *earlier = later;
        }
    }

    /// `switch`: `--x` turns the setting on.
    pub(super) fn turn_on(flag: &bool, setting: &mut bool) {
        *setting |= *flag;
    }

    /// `switch_off`: `--no-x` turns the setting off.
    pub(super) fn turn_off(flag: &bool, setting: &mut bool) {
        *setting &= !*flag;
    }

    /// `switch`, `switch_off`: given before or after `run`.
    pub(super) fn either(earlier: &mut bool, later: bool) {
        *earlier |= later;
    }

    /// `append`: `--x VALUE`, repeatable, adds to the list.
    pub(super) fn add<V: Clone>(flag: &[V], setting: &mut Vec<V>) {
        setting.extend_from_slice(flag);
    }

    /// `append`: those before `run`, then those after it.
    pub(super) fn both<V>(earlier: &mut Vec<V>, later: Vec<V>) {
        earlier.extend(later);
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run jobs (the default); takes every worker flag
    Run(Box<RunArgs>),
    /// List the registered job types, their queues and options
    Jobs,
    /// Queue sizes, scheduled/retry/dead counts, processed/failed counters, workers
    Stats,
    /// Per tenant of a job class: counts per reroute window and the queue its next job would get
    Tenants {
        /// Job class
        class: String,
        /// A rule when the class is not registered here: QUEUE:THRESHOLD:PER (repeatable)
        #[arg(long = "rule")]
        rules: Vec<String>,
    },
    /// A sharded queue's tenants: pending, running, limit and position in the rotation
    Shards {
        /// Queue name
        queue: String,
    },
    /// Slot limits (`#[concurrency]`): keys with limit, running and waiting; `limits set KEY N` changes one
    Limits {
        #[command(subcommand)]
        action: Option<LimitsAction>,
    },
    /// Rate limits (`#[rate_limit]`): keys with their rate, waiting jobs and next
    /// release; `rate-limits set KEY LIMIT PER`, `pause KEY`, `resume KEY` change one live
    RateLimits {
        #[command(subcommand)]
        action: Option<RateLimitsAction>,
    },
    /// Unique jobs (`#[unique]`): a page of live locks with their holder and
    /// time left; `unique unlock KEY` removes one by hand
    Unique {
        #[command(subcommand)]
        action: Option<UniqueAction>,
        /// Locks to list
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// Set a sharded queue's fair-share settings for a tenant, or the defaults
    /// (weight: share under contention; floor: jobs guaranteed running; cap:
    /// running limit, 0 pauses; burst: running limit while no other tenant
    /// has pending work), and the queue's fair-yield settings. "default"
    /// removes a tenant's own value, "none" removes a cap or burst
    ShardPolicy {
        /// Queue name
        queue: String,
        /// The tenant (default: every tenant without its own settings)
        #[arg(long)]
        tenant: Option<String>,
        /// Weight (a number above 0, or "default")
        #[arg(long)]
        weight: Option<String>,
        /// Floor (a number, or "default")
        #[arg(long)]
        floor: Option<String>,
        /// Cap (a number, "none" or "default")
        #[arg(long)]
        cap: Option<String>,
        /// Rate: most starts per period (`10/s`, `100/1m`), "none" or "default";
        /// a tenant whose rate is spent waits, its place kept, while others run
        #[arg(long)]
        rate: Option<String>,
        /// Burst: the running limit while no other tenant of the queue has
        /// pending work, above the cap (a number, "none" or "default")
        #[arg(long)]
        burst: Option<String>,
        /// Fair yield's grace for the queue: how long a tenant waits below
        /// its share before an over-share tenant's iterable job is asked to
        /// yield (e.g. "1s"; "default" removes it)
        #[arg(long)]
        yield_grace: Option<String>,
        /// Fair yield's minimum run before a job may be asked (e.g. "1s")
        #[arg(long)]
        yield_min_run: Option<String>,
        /// Fair yield's cool-down: no job asked again within it (e.g. "10s")
        #[arg(long)]
        yield_cooldown: Option<String>,
        /// Fair yield on the queue: "on" (the default) or "off"
        #[arg(long)]
        fair_yield: Option<String>,
    },
    /// Serve the dashboard (no jobs run): queues, tenants, shards, limits, retries, explain
    Web {
        /// Address to listen on; a non-loopback address needs --web-token
        #[arg(long, default_value = "127.0.0.1:7433")]
        bind: std::net::SocketAddr,
    },
    /// Where a job is and why it waits (the dashboard's explain, on the command line)
    Explain {
        /// The job's jid
        jid: String,
        /// Also look for the jid in fairjob-postgres' table (committed and
        /// not yet in Redis, kept, or failed); without a URL, `DATABASE_URL`'s
        #[arg(long, value_name = "URL", num_args = 0..=1, default_missing_value = "")]
        postgres: Option<String>,
        /// Its tenant, if known (narrows the walk of sharded queues)
        #[arg(long)]
        tenant: Option<String>,
        /// Print the JSON the dashboard's /api/explain returns
        #[arg(long)]
        json: bool,
    },
    /// Periodic schedules: expression, zone, next and last fire time and
    /// outcome, paused; `cron pause|resume|run-now NAME` steers one
    Cron {
        #[command(subcommand)]
        action: Option<CronAction>,
    },
    /// Batches: the newest ones with their state, counts and fire times;
    /// `batches BID` shows one with its callbacks and failed members
    Batches {
        /// A batch's id (default: list the newest batches)
        bid: Option<String>,
    },
    /// A workflow's steps in name order, a page at a time: state (held,
    /// queued, running, retrying, done, failed, cancelled), jid,
    /// dependencies, and what a held step waits for
    Workflow {
        /// The workflow's id (its batch's id)
        wid: String,
        /// The first step shown, by its place in name order (0-based)
        #[arg(long, default_value_t = 0)]
        from: u64,
        /// Steps shown at most (up to 500)
        #[arg(long, default_value_t = fairjob::inspect::STEP_ROWS)]
        limit: usize,
    },
    /// fairjob-postgres' schema (`postgres migrate`)
    Postgres {
        #[command(subcommand)]
        action: PostgresAction,
    },
    /// Move jobs enqueued in PostgreSQL transactions into Redis (fairjob-postgres'
    /// pump, fair between tenants; several pumps may run at once)
    Pump(Box<crate::postgres::PumpArgs>),
    /// Set a sharded queue's per-tenant running limit (0 pauses; "none" removes it)
    ShardLimit {
        /// Queue name
        queue: String,
        /// Limit (a number, or "none")
        limit: String,
        /// The tenant (default: every tenant without its own limit)
        #[arg(long)]
        tenant: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
enum PostgresAction {
    /// Create or upgrade the `fairjob` schema (its own migrations table, apart from the application's)
    Migrate {
        /// PostgreSQL URL (default: the config's `[postgres] url`)
        #[arg(long, env = "DATABASE_URL", hide_env_values = true, value_name = "URL")]
        postgres: Option<String>,
    },
    /// The outbox backlog per tenant, the pump's lag, pumps alive, kept jobs
    /// and republish events (Redis lost data)
    Status {
        /// PostgreSQL URL (default: the config's `[postgres] url`)
        #[arg(long, env = "DATABASE_URL", hide_env_values = true, value_name = "URL")]
        postgres: Option<String>,
        /// Print JSON
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
enum LimitsAction {
    /// Set a key's limit at runtime (0 pauses it; "default" returns to the declared limit)
    Set {
        /// The full key, as `limits` lists it (`Class:key` or `group:name:key`)
        key: String,
        /// The new limit, or "default"
        limit: String,
    },
}

#[derive(Debug, Subcommand)]
enum RateLimitsAction {
    /// Set a key's rate at runtime (0 pauses it), e.g. `set Charge:42 50 1s`
    Set {
        /// The full key, as `rate-limits` lists it (`Class:key`, `group:name:key`, `Class`)
        key: String,
        /// Starts per period
        limit: u32,
        /// The period (`1s`, `1m`, `250ms`)
        per: String,
        /// Extra starts allowed at once
        #[arg(long)]
        burst: Option<u32>,
    },
    /// Pause a key: its jobs wait, none starts
    Pause {
        /// The full key
        key: String,
    },
    /// Back to the declared rate (resumes a paused key)
    Resume {
        /// The full key
        key: String,
    },
}

#[derive(Debug, Subcommand)]
enum CronAction {
    /// Pause a schedule: no fire time is enqueued until it is resumed
    Pause {
        /// The schedule's name
        name: String,
    },
    /// Resume a paused schedule from its next fire time
    Resume {
        /// The schedule's name
        name: String,
    },
    /// Enqueue the schedule's job now (through the scheduler)
    RunNow {
        /// The schedule's name
        name: String,
    },
}

#[derive(Debug, Subcommand)]
enum UniqueAction {
    /// Remove a lock, whoever holds it: the next push of its key is accepted
    Unlock {
        /// The lock's key, as `unique` lists it
        key: String,
    },
}

/// Whether log lines get ANSI colours: only on a terminal, and never with
/// `NO_COLOR` set to anything non-empty (<https://no-color.org>).
fn use_colour(is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    is_terminal && no_color.is_none_or(|v| v.is_empty())
}

/// What must be done at exit for the logging set-up: the OpenTelemetry
/// exporter's last flush, when `--otel` installed one.
#[derive(Debug, Default)]
struct Logging {
    #[cfg(feature = "otel")]
    otel: Option<crate::otel::Exporting>,
}

impl Logging {
    fn finish(self) {
        #[cfg(feature = "otel")]
        if let Some(otel) = self.otel {
            otel.shutdown();
        }
    }
}

fn init_logging(format: LogFormat, otel: bool) -> Result<Logging> {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;

    let filter = tracing_subscriber::EnvFilter::try_from_env("FAIRJOB_LOG")
        .or_else(|_| tracing_subscriber::EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let fmt = tracing_subscriber::fmt::layer().with_target(false);
    let fmt = match format {
        LogFormat::Json => fmt
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .with_filter(filter)
            .boxed(),
        LogFormat::Text => fmt
            .with_ansi(use_colour(
                std::io::stdout().is_terminal(),
                std::env::var_os("NO_COLOR").as_deref(),
            ))
            .with_filter(filter)
            .boxed(),
    };
    let registry = tracing_subscriber::registry().with(fmt);
    #[cfg(feature = "otel")]
    {
        // A set-up the exporter cannot use is a warning, once the log is
        // installed: tracing never stops the worker.
        let (layer, exporting, problem) = match otel.then(crate::otel::layer) {
            // Spans are exported at `info` whatever the log level.
            Some(Ok((layer, exporting))) => (
                Some(layer.with_filter(tracing_subscriber::filter::LevelFilter::INFO)),
                Some(exporting),
                None,
            ),
            Some(Err(e)) => (None, None, Some(e)),
            None => (None, None, None),
        };
        registry.with(layer).init();
        if let Some(e) = problem {
            crate::otel::warn_not_exporting(&e);
        }
        Ok(Logging { otel: exporting })
    }
    #[cfg(not(feature = "otel"))]
    {
        if otel {
            bail!("{}", crate::otel::NOT_BUILT);
        }
        registry.init();
        Ok(Logging::default())
    }
}

pub(crate) fn run(with_jobs: bool) -> ExitCode {
    let cli = Cli::parse();
    let logging = match init_logging(cli.global.log_format, cli.global.otel) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(dispatch(cli, with_jobs));
    drop(runtime);
    logging.finish();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

const NO_JOBS: &str = "\
this `fairjob-worker` binary links no job types, so it cannot run jobs. A worker must \
link the crate that declares your `#[derive(Job)]` types: add `fairjob-worker` to that \
crate's dependencies and create `src/bin/worker.rs` containing the single line \
`fairjob_worker::main!(my_jobs);` (naming your crate, and any other crate with jobs), \
then run `cargo run --release --bin worker -- -r redis://127.0.0.1:6379 -c 10`. The \
commands that need no job types (`stats`, `tenants`, `shards`, `shard-limit`, `limits`, `rate-limits`, `unique`, `web`, \
`explain`, `batches`, `workflow`, `postgres migrate`, `pump`) work here.";

async fn dispatch(cli: Cli, with_jobs: bool) -> Result<()> {
    let registry = || -> Result<Registry> {
        if with_jobs {
            Ok(Registry::from_inventory()?)
        } else {
            Ok(Registry::new())
        }
    };
    let Cli {
        global,
        run,
        command,
    } = cli;
    let (command, run) = match command {
        None => (None, run),
        Some(Command::Run(later)) => (None, run.merged(*later)),
        Some(other) => (Some(other), run),
    };
    let config = load_config(&global, &run)?;
    check_features(command.as_ref(), run.web.is_some(), &config)?;
    let web = crate::web::Options {
        actions: global.web_actions,
        token: global.web_token.clone(),
    };
    let Some(command) = command else {
        if !with_jobs {
            bail!("{NO_JOBS}");
        }
        return run_worker(config, registry()?, run.web, run.metrics, &web).await;
    };
    #[cfg(feature = "postgres")]
    match &command {
        Command::Postgres {
            action: PostgresAction::Migrate { postgres },
        } => return crate::postgres::migrate(&config, postgres.as_deref()).await,
        Command::Postgres {
            action: PostgresAction::Status { postgres, json },
        } => return crate::postgres::status(&config, postgres.as_deref(), *json).await,
        Command::Pump(args) => return crate::postgres::pump(&config, args).await,
        Command::Explain {
            jid,
            postgres: Some(url),
            json: false,
            ..
        } => crate::postgres::explain(&database_url(url)?, jid).await?,
        _ => {}
    }
    let inspect = crate::inspect::Inspect::connect(&config).await;
    match command {
        Command::Postgres { .. } | Command::Pump { .. } => unreachable!("handled above"),
        Command::Run(_) => unreachable!("handled above"),
        Command::Jobs => {
            if !with_jobs {
                bail!("{NO_JOBS}");
            }
            crate::inspect::jobs(&registry()?);
            Ok(())
        }
        Command::Stats => inspect?.stats().await,
        Command::Tenants { class, rules } => inspect?.tenants(&registry()?, &class, &rules).await,
        Command::Limits { action: None } => inspect?.limits(&registry()?).await,
        Command::Limits {
            action: Some(LimitsAction::Set { key, limit }),
        } => {
            let limit = match limit.as_str() {
                "default" => None,
                n => Some(
                    n.parse::<u32>()
                        .context("the limit is a number or `default`")?,
                ),
            };
            inspect?.set_limit(&registry()?, &key, limit).await
        }
        Command::RateLimits { action: None } => inspect?.rate_limits().await,
        Command::RateLimits {
            action: Some(action),
        } => {
            let inspect = inspect?;
            match action {
                RateLimitsAction::Set {
                    key,
                    limit,
                    per,
                    burst,
                } => {
                    let per = fairjob::rate::parse_period(&per).map_err(anyhow::Error::msg)?;
                    inspect.set_rate(&key, limit, per, burst).await
                }
                RateLimitsAction::Pause { key } => inspect.pause_rate(&key).await,
                RateLimitsAction::Resume { key } => inspect.resume_rate(&key).await,
            }
        }
        Command::Unique {
            action: None,
            limit,
        } => inspect?.unique_locks(limit).await,
        Command::Unique {
            action: Some(UniqueAction::Unlock { key }),
            ..
        } => inspect?.unlock(&key).await,
        Command::Shards { queue } => inspect?.shards(&queue).await,
        Command::Cron { action } => {
            let inspect = inspect?;
            match action {
                None => inspect.cron().await,
                Some(CronAction::Pause { name }) => inspect.cron_act(&name, "pause").await,
                Some(CronAction::Resume { name }) => inspect.cron_act(&name, "resume").await,
                Some(CronAction::RunNow { name }) => inspect.cron_act(&name, "run-now").await,
            }
        }
        Command::Batches { bid: None } => inspect?.batches().await,
        Command::Batches { bid: Some(bid) } => inspect?.batch(&bid).await,
        Command::Workflow { wid, from, limit } => inspect?.workflow(&wid, from, limit).await,
        Command::Web { bind } => crate::web::serve_only(&config, &web, bind).await,
        Command::Explain {
            jid, tenant, json, ..
        } => {
            inspect?
                .explain(&registry()?, &jid, tenant.as_deref(), json)
                .await
        }
        Command::ShardPolicy {
            queue,
            tenant,
            weight,
            floor,
            cap,
            burst,
            yield_grace,
            yield_min_run,
            yield_cooldown,
            fair_yield,
            rate,
        } => {
            let rate = match rate.as_deref() {
                None => Setting::Keep,
                Some("default" | "none") => Setting::Clear,
                Some(v) => Setting::Set(
                    fairjob::rate::parse_tenant_rate(v)
                        .map_err(|e| anyhow::anyhow!("--rate: {e}"))?,
                ),
            };
            let policy = ShardPolicy {
                weight: setting(weight.as_deref(), "weight")?,
                floor: setting(floor.as_deref(), "floor")?,
                cap: setting(cap.as_deref(), "cap")?,
                rate,
                burst: setting(burst.as_deref(), "burst")?,
            };
            let yields = YieldPolicy {
                grace: duration_setting(yield_grace.as_deref(), "yield-grace")?,
                min_run: duration_setting(yield_min_run.as_deref(), "yield-min-run")?,
                cooldown: duration_setting(yield_cooldown.as_deref(), "yield-cooldown")?,
                enabled: match fair_yield.as_deref() {
                    None => Setting::Keep,
                    Some("on" | "default") => Setting::Clear,
                    Some("off") => Setting::Set(false),
                    Some(v) => bail!("--fair-yield takes `on` or `off`, not {v:?}"),
                },
            };
            inspect?
                .shard_policy(&queue, tenant.as_deref(), policy, yields)
                .await
        }
        Command::ShardLimit {
            queue,
            limit,
            tenant,
        } => {
            let limit = match limit.as_str() {
                "none" => None,
                n => Some(
                    n.parse::<u32>()
                        .context("the limit is a number or `none`")?,
                ),
            };
            inspect?.shard_limit(&queue, tenant.as_deref(), limit).await
        }
    }
}

/// A `shard-policy` duration: absent (keep), `default` (clear), or a duration.
fn duration_setting(value: Option<&str>, what: &str) -> Result<Setting<std::time::Duration>> {
    Ok(match value {
        None => Setting::Keep,
        Some("default") => Setting::Clear,
        Some(v) => Setting::Set(
            parse_duration(v)
                .map_err(|e| anyhow::anyhow!("--{what} takes a duration or `default`: {e}"))?,
        ),
    })
}

/// A `shard-policy` value: absent (keep), `default`/`none` (clear), or a number.
fn setting<T: std::str::FromStr>(value: Option<&str>, what: &str) -> Result<Setting<T>> {
    Ok(match value {
        None => Setting::Keep,
        Some("default" | "none") => Setting::Clear,
        Some(v) => Setting::Set(v.parse().map_err(|_| {
            anyhow::anyhow!("--{what} takes a number, `default` or `none`, not {v:?}")
        })?),
    })
}

/// Fails before anything starts when the command (or `run`'s `--web`, or a
/// PostgreSQL URL from `--postgres` or the config's `[postgres]` table) needs
/// a feature this binary was built without, saying how to enable it.
fn check_features(command: Option<&Command>, web: bool, config: &WorkerConfig) -> Result<()> {
    let needs_web = match command {
        None => web,
        Some(c) => matches!(c, Command::Web { .. }),
    };
    let needs_postgres = match command {
        None => config.postgres.url.is_some(),
        Some(c) => matches!(
            c,
            Command::Postgres { .. }
                | Command::Pump(_)
                | Command::Explain {
                    postgres: Some(_),
                    ..
                }
        ),
    };
    #[cfg(not(feature = "web"))]
    if needs_web {
        bail!("{}", crate::web::NOT_BUILT);
    }
    #[cfg(not(feature = "postgres"))]
    if needs_postgres {
        bail!("{}", crate::postgres::NOT_BUILT);
    }
    let _ = (needs_web, needs_postgres);
    Ok(())
}

async fn run_worker(
    config: WorkerConfig,
    registry: Registry,
    web_addr: Option<std::net::SocketAddr>,
    metrics_addr: Option<std::net::SocketAddr>,
    web: &crate::web::Options,
) -> Result<()> {
    if registry.is_empty() {
        bail!(
            "no job types are registered in this binary: name the crates that hold your jobs in \
             `fairjob_worker::main!(...)`"
        );
    }
    // Without --metrics nothing exports the gauges: leave the sampling to
    // processes that do.
    let mut config = config;
    if metrics_addr.is_none() {
        config.metrics.sample = false;
    }
    // Installed before anything records, so nothing is lost.
    let recorder = match metrics_addr {
        Some(_) => Some(crate::metrics::install_metrics(&config.metrics)?),
        None => None,
    };
    let handle = fairjob::WorkerHandle::new();
    // Redis down at start-up is waited for, with backoff; bad credentials
    // or settings end the worker at once.
    let mut delay = Duration::from_millis(200);
    let worker = loop {
        let built = Worker::builder(config.client.redis_url())
            .config(config.clone())
            .registry(registry.clone())
            .build()
            .await;
        match built {
            Ok(w) => break w,
            Err(e) if e.is_transient() => {
                tracing::error!(error = %e, retry_in = ?delay, "cannot reach redis; waiting for it");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
            Err(e) => return Err(e.into()),
        }
    };
    println!(
        "fairjob worker {} — queues: {}",
        worker.identity(),
        worker.queues()
    );
    let listener = match (metrics_addr, recorder) {
        (Some(addr), Some(recorder)) => Some(
            crate::metrics::serve_metrics(addr, recorder, handle.clone(), worker.client().clone())
                .await?,
        ),
        _ => None,
    };
    let dashboard = match web_addr {
        Some(addr) => Some(crate::web::spawn(&config, web, addr, &handle).await?),
        None => None,
    };
    #[cfg(feature = "postgres")]
    let pump = match &config.postgres.url {
        Some(url) => {
            Some(crate::postgres::spawn_pump(url, &config.postgres, worker.client().clone()).await?)
        }
        None => None,
    };
    let result = worker.run_with_signals(handle).await;
    #[cfg(feature = "postgres")]
    if let Some(p) = pump {
        p.stop().await;
    }
    if let Some(d) = dashboard {
        d.stop().await;
    }
    if let Some(l) = listener {
        l.stop().await;
    }
    result?;
    Ok(())
}

/// A PostgreSQL URL given with `--postgres`: `--postgres` alone (an empty
/// value) takes `DATABASE_URL`'s, as `pump` and `postgres migrate` do when
/// they are given none.
fn database_url(flag: &str) -> Result<String> {
    if !flag.is_empty() {
        return Ok(flag.to_owned());
    }
    match std::env::var("DATABASE_URL") {
        Ok(url) if !url.is_empty() => Ok(url),
        _ => bail!("--postgres without a URL reads DATABASE_URL, which is not set"),
    }
}

fn load_config(global: &Global, r: &RunArgs) -> Result<WorkerConfig> {
    let mut c = match &global.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            toml::from_str::<WorkerConfig>(&text)
                .with_context(|| format!("in {}", path.display()))?
        }
        None => WorkerConfig::default(),
    };
    global.settings.apply(&mut c);
    r.settings.apply(&mut c);
    if let Some(url) = &c.postgres.url {
        c.postgres.url = Some(database_url(url)?);
    }
    if !r.queues.is_empty() {
        c.queues = r.queues.clone();
        c.tiers.clear();
    }
    if !r.tiers.is_empty() {
        if !r.queues.is_empty() {
            bail!("use either -q/--queue (one tier) or -Q/--tier (several tiers), not both");
        }
        // `-Q "default,4 slow,1"`: whitespace separates a tier's queues on the
        // command line (a queue name with spaces needs the config file's `tiers`).
        c.tiers = r
            .tiers
            .iter()
            .map(|t| t.split_whitespace().map(str::to_owned).collect())
            .collect();
        c.queues.clear();
    }
    c.validate()?;
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Without the `otel` feature, `--otel` fails before anything starts and
    /// says how to build a worker that has it.
    #[cfg(not(feature = "otel"))]
    #[test]
    fn otel_without_the_feature_says_how_to_enable_it() {
        let e = init_logging(LogFormat::Text, true).unwrap_err().to_string();
        assert!(e.contains("`otel` feature of fairjob-worker"), "{e}");
        assert!(e.contains("features = [\"otel\"]"), "{e}");
    }

    /// `check_features` as `dispatch` calls it, for the command line `args`.
    fn features_for(args: &[&str]) -> Result<()> {
        let cli = Cli::try_parse_from(args).unwrap();
        let (command, run) = match cli.command {
            None => (None, cli.run),
            Some(Command::Run(later)) => (None, cli.run.merged(*later)),
            Some(other) => (Some(other), cli.run),
        };
        let config = load_config(&cli.global, &run).unwrap();
        check_features(command.as_ref(), run.web.is_some(), &config)
    }

    /// Without the `web` feature, `worker web` and `run --web` still parse
    /// and fail before anything starts, saying how to enable it.
    #[cfg(not(feature = "web"))]
    #[test]
    fn web_without_the_feature_says_how_to_enable_it() {
        for args in [
            &["worker", "web"][..],
            &["worker", "run", "--web", "127.0.0.1:0"],
            &["worker", "--web", "127.0.0.1:0"],
        ] {
            let e = features_for(args).unwrap_err().to_string();
            assert!(
                e.contains("`web` feature of fairjob-worker"),
                "{args:?}: {e}"
            );
            assert!(e.contains("features = [\"web\"]"), "{args:?}: {e}");
        }
        features_for(&["worker", "run", "--metrics", "127.0.0.1:0"]).unwrap();
    }

    /// Without the `postgres` feature, its commands and a PostgreSQL URL
    /// still parse and fail before anything starts, saying how to enable it.
    #[cfg(not(feature = "postgres"))]
    #[test]
    fn postgres_without_the_feature_says_how_to_enable_it() {
        for args in [
            &[
                "worker",
                "postgres",
                "migrate",
                "--postgres",
                "postgres://db",
            ][..],
            &[
                "worker",
                "postgres",
                "status",
                "--postgres",
                "postgres://db",
            ],
            &["worker", "pump", "--postgres", "postgres://db"],
            &["worker", "explain", "j1", "--postgres", "postgres://db"],
            &["worker", "run", "--postgres", "postgres://db"],
            &["worker", "--postgres", "postgres://db"],
        ] {
            let e = features_for(args).unwrap_err().to_string();
            assert!(
                e.contains("`postgres` feature of fairjob-worker"),
                "{args:?}: {e}"
            );
            assert!(e.contains("features = [\"postgres\"]"), "{args:?}: {e}");
        }
        features_for(&["worker", "explain", "j1"]).unwrap();
    }

    /// With the default features nothing is refused.
    #[cfg(all(feature = "web", feature = "postgres"))]
    #[test]
    fn default_features_refuse_nothing() {
        features_for(&["worker", "web"]).unwrap();
        features_for(&[
            "worker",
            "run",
            "--web",
            "127.0.0.1:0",
            "--postgres",
            "postgres://db",
        ])
        .unwrap();
        features_for(&["worker", "pump", "--postgres", "postgres://db"]).unwrap();
    }

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    fn config_of(args: &[&str]) -> WorkerConfig {
        let cli = Cli::try_parse_from(args).unwrap();
        let run = match cli.command {
            Some(Command::Run(later)) => cli.run.merged(*later),
            _ => cli.run,
        };
        load_config(&cli.global, &run).unwrap()
    }

    /// A mistake in the config file is reported at its line, with its key:
    /// an unknown key, and a wrongly typed value of a worker key, a client
    /// key, a metrics key, a duration and a key of the `[postgres]` table.
    #[test]
    fn a_config_file_error_names_its_line_and_key() {
        let dir = std::env::temp_dir().join(format!("fairjob-cli-err-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("w.toml");
        let cases = [
            ("concurrency = 3\nconcurency = 5\n", 2, "concurency"),
            ("tag = \"x\"\n\nconcurrency = \"many\"\n", 3, "concurrency"),
            ("concurrency = 3\nnamespace = 3\n", 2, "namespace"),
            ("\nmetrics_top_k = \"all\"\n", 2, "metrics_top_k"),
            ("concurrency = 3\n\n\nlease = \"a while\"\n", 4, "lease"),
            ("concurrency = 3\n[postgres]\nurl = 1\n", 3, "url"),
            ("[postgres]\nurll = \"x\"\n", 2, "urll"),
        ];
        for (text, line, key) in cases {
            std::fs::write(&path, text).unwrap();
            let cli = Cli::try_parse_from(["worker", "-C", path.to_str().unwrap()]).unwrap();
            let err = format!("{:#}", load_config(&cli.global, &cli.run).unwrap_err());
            assert!(err.contains(&format!("line {line},")), "{text:?}: {err}");
            assert!(err.contains(key), "{text:?}: {err}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn flags_override_the_config_file() {
        let dir = std::env::temp_dir().join(format!("fairjob-cli-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("w.toml");
        std::fs::write(
            &path,
            "concurrency = 3\ntimeout = \"10s\"\nqueues = [\"a,2\", \"b,1\"]\nnamespace = \"app\"\n",
        )
        .unwrap();
        let c = config_of(&["worker", "-C", path.to_str().unwrap(), "-c", "7"]);
        assert_eq!(c.concurrency, 7);
        assert_eq!(c.timeout, Duration::from_secs(10));
        assert_eq!(c.queues, vec!["a,2".to_owned(), "b,1".to_owned()]);
        assert_eq!(c.client.connect.namespace.as_deref(), Some("app"));
        let c = config_of(&[
            "worker",
            "-Q",
            "critical",
            "-Q",
            "default,4 slow,1",
            "-t",
            "3s",
        ]);
        assert_eq!(
            c.queue_spec().unwrap().unwrap().to_string(),
            "critical > default,4 slow,1"
        );
        assert_eq!(c.timeout, Duration::from_secs(3));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Each flag of the settings table lands on its setting, whether given
    /// before `run` or after it (the later one wins).
    #[test]
    fn every_flag_lands_on_its_setting() {
        let c = config_of(&[
            "worker",
            "-r",
            "redis://h:1",
            "--namespace",
            "ns",
            "--cluster",
            "--wait-replicas",
            "2",
            "--wait-timeout",
            "3s",
            "--tls-ca",
            "/ca",
            "--tls-cert",
            "/c",
            "--tls-key",
            "/k",
            "-t",
            "9s",
            "--lease",
            "40s",
            "--heartbeat",
            "4s",
            "--reaper-interval",
            "5s",
            "--poll-interval",
            "6s",
            "--scheduled-poll-interval",
            "7s",
            "--max-interruptions",
            "8",
            "--max-payload-bytes",
            "100",
            "--job-timeout",
            "1m",
            "--shard",
            "a",
            "-g",
            "blue",
            "--fair-key-format",
            "f:%<fair_tenant>s",
            "--no-wait-stats",
            "--metrics-top-k",
            "3",
            "--no-tenant-labels",
            "--metrics-idle-timeout",
            "1m",
            "--metrics-interval",
            "2s",
            "--no-metrics-sampler",
            "--postgres",
            "postgres://db",
            "-c",
            "4",
            "run",
            "-c",
            "6",
            "--shard",
            "b",
            "--namespace",
            "later",
        ]);
        let connect = &c.client.connect;
        assert_eq!(c.client.redis.as_deref(), Some("redis://h:1"));
        assert_eq!(connect.namespace.as_deref(), Some("later"));
        assert!(connect.cluster);
        assert_eq!(connect.wait_replicas, 2);
        assert_eq!(connect.wait_timeout, Duration::from_secs(3));
        assert_eq!(connect.tls_ca_file, Some(PathBuf::from("/ca")));
        assert_eq!(connect.tls_cert_file, Some(PathBuf::from("/c")));
        assert_eq!(connect.tls_key_file, Some(PathBuf::from("/k")));
        assert_eq!(
            connect.fair_key_format.as_deref(),
            Some("f:%<fair_tenant>s")
        );
        assert_eq!(
            c.client.sharded_queues,
            vec!["a".to_owned(), "b".to_owned()]
        );
        assert_eq!(c.concurrency, 6);
        assert_eq!(c.timeout, Duration::from_secs(9));
        assert_eq!(c.lease, Duration::from_secs(40));
        assert_eq!(c.heartbeat, Some(Duration::from_secs(4)));
        assert_eq!(c.reaper_interval, Duration::from_secs(5));
        assert_eq!(c.poll_interval, Duration::from_secs(6));
        assert_eq!(c.scheduled_poll_interval, Duration::from_secs(7));
        assert_eq!(c.max_interruptions, 8);
        assert_eq!(c.max_payload_bytes, 100);
        assert_eq!(c.job_timeout, Some(Duration::from_secs(60)));
        assert_eq!(c.tag, "blue");
        assert!(!c.wait_stats);
        assert_eq!(c.metrics.top_k, 3);
        assert!(!c.metrics.tenant_labels);
        assert_eq!(c.metrics.idle_timeout, Duration::from_secs(60));
        assert_eq!(c.metrics.sample_interval, Duration::from_secs(2));
        assert!(!c.metrics.sample);
        assert_eq!(c.postgres.url.as_deref(), Some("postgres://db"));
        let c = config_of(&["worker"]);
        assert!(c.wait_stats && c.metrics.tenant_labels && c.metrics.sample);
        assert!(!c.client.connect.cluster && c.client.sharded_queues.is_empty());
        assert_eq!((c.concurrency, c.heartbeat), (10, None));
        let c = config_of(&["worker", "--no-wait-stats", "run", "--cluster"]);
        assert!(!c.wait_stats && c.client.connect.cluster);
    }

    #[test]
    fn run_takes_every_worker_flag_after_it() {
        let c = config_of(&[
            "worker", "-c", "5", "run", "-q", "x,2", "-c", "7", "--shard", "s",
        ]);
        assert_eq!(c.concurrency, 7);
        assert_eq!(c.queues, vec!["x,2".to_owned()]);
        assert_eq!(c.client.sharded_queues, vec!["s".to_owned()]);
        let c = config_of(&["worker", "-q", "y", "run"]);
        assert_eq!(c.queues, vec!["y".to_owned()]);
    }

    #[test]
    fn tls_files_come_from_flags_or_the_config_file() {
        let c = config_of(&[
            "worker",
            "--tls-ca",
            "/etc/ca.pem",
            "--tls-cert",
            "/etc/me.pem",
            "--tls-key",
            "/etc/me.key",
        ]);
        assert_eq!(
            c.client.connect.tls_ca_file,
            Some(PathBuf::from("/etc/ca.pem"))
        );
        assert_eq!(
            c.client.connect.tls_cert_file,
            Some(PathBuf::from("/etc/me.pem"))
        );
        assert_eq!(
            c.client.connect.tls_key_file,
            Some(PathBuf::from("/etc/me.key"))
        );
        let dir = std::env::temp_dir().join(format!("fairjob-cli-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("w.toml");
        std::fs::write(
            &path,
            "tls_ca_file = \"/a/ca.pem\"\ntls_cert_file = \"/a/c.pem\"\ntls_key_file = \"/a/c.key\"\n",
        )
        .unwrap();
        let c = config_of(&[
            "worker",
            "-C",
            path.to_str().unwrap(),
            "--tls-ca",
            "/b/ca.pem",
        ]);
        assert_eq!(
            c.client.connect.tls_ca_file,
            Some(PathBuf::from("/b/ca.pem"))
        );
        assert_eq!(
            c.client.connect.tls_cert_file,
            Some(PathBuf::from("/a/c.pem"))
        );
        assert_eq!(
            c.client.connect.tls_key_file,
            Some(PathBuf::from("/a/c.key"))
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        use std::ffi::OsStr;
        assert!(use_colour(true, None));
        assert!(!use_colour(false, None));
        assert!(!use_colour(true, Some(OsStr::new("1"))));
        assert!(use_colour(true, Some(OsStr::new(""))));
    }
}
