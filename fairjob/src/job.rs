//! Declaring jobs: the [`Job`] and [`Perform`] traits, per-type [`JobOptions`],
//! and the registry that a worker builds from every linked `#[derive(Job)]`.
//!
//! This module owns what a job *is*. It must not talk to Redis: enqueueing lives
//! in [`crate::client`], running in [`crate::worker`].

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::time::{Duration, SystemTime};

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;

use crate::client::{Client, Enqueue};
use crate::error::{Error, JobError, Result};
use crate::worker::JobContext;

/// A job type: its Sidekiq class name, its options and how its fields map to
/// Sidekiq's positional `args`.
///
/// Implement it with `#[derive(Job)]`; the derive also registers the type so the
/// bundled worker finds it. The enqueue methods ([`Job::perform_async`],
/// [`Job::set_tenant`], …) are provided here.
pub trait Job: Serialize + DeserializeOwned + Send + Sync + Sized + 'static {
    /// The class name written to the payload (`"class"`), shared with Ruby.
    const CLASS: &'static str;
    /// Queue, retry, fair-tenant and limit options from the attributes.
    const OPTIONS: JobOptions;
    /// How the type's serde form maps to Sidekiq's positional `args`.
    const ARGS: ArgsShape;

    /// The tenant named by `#[fair_tenant]`, if any. An empty string is no tenant.
    fn fair_tenant(&self) -> Option<String> {
        None
    }

    /// The key of `#[concurrency]`, if the type declares one.
    fn concurrency_key(&self) -> Option<String> {
        None
    }

    /// Sidekiq's `args` array for this job.
    fn to_args(&self) -> Result<Box<RawValue>> {
        Self::ARGS.encode(self).map_err(|source| Error::Encode {
            class: Self::CLASS.to_owned(),
            source,
        })
    }

    /// Decodes Sidekiq's `args` array, checking its arity against the type's shape.
    fn from_args(args: &RawValue) -> Result<Self> {
        Self::ARGS.decode(args).map_err(|reason| Error::Decode {
            class: Self::CLASS.to_owned(),
            reason,
        })
    }

    /// Starts an enqueue with per-call options (tenant, queue, retry).
    fn enqueue(self) -> Enqueue<Self> {
        Enqueue::new(self)
    }

    /// Starts an enqueue for an explicit tenant: `job.set_tenant("acme").perform_async(&client)`.
    fn set_tenant(self, tenant: impl Into<String>) -> Enqueue<Self> {
        Enqueue::new(self).set_tenant(tenant)
    }

    /// Starts an enqueue to an explicitly chosen queue, which is never rerouted.
    fn queue(self, queue: impl Into<String>) -> Enqueue<Self> {
        Enqueue::new(self).queue(queue)
    }

    /// Pushes the job to its queue now; returns the jid.
    fn perform_async(self, client: &Client) -> impl Future<Output = Result<String>> + Send {
        Enqueue::new(self).perform_async(client)
    }

    /// Schedules the job to run after `delay` (measured by Redis's clock); returns the jid.
    fn perform_in(
        self,
        client: &Client,
        delay: Duration,
    ) -> impl Future<Output = Result<String>> + Send {
        Enqueue::new(self).perform_in(client, delay)
    }

    /// Schedules the job to run at `at`; returns the jid.
    fn perform_at(
        self,
        client: &Client,
        at: SystemTime,
    ) -> impl Future<Output = Result<String>> + Send {
        Enqueue::new(self).perform_at(client, at)
    }
}

/// The work of a job. Write it as an `async fn`:
///
/// ```
/// # use fairjob::{Job, JobContext, JobError, Perform};
/// # use serde::{Deserialize, Serialize};
/// #[derive(Serialize, Deserialize, Job)]
/// struct Hello(String);
///
/// impl Perform for Hello {
///     async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
///         println!("hello {} (jid {})", self.0, cx.jid());
///         Ok(())
///     }
/// }
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` derives `Job` but does not implement `Perform`",
    label = "this job type has no `impl Perform`",
    note = "add: `impl fairjob::Perform for {Self} {{ async fn perform(self, cx: &fairjob::JobContext) -> Result<(), fairjob::JobError> {{ Ok(()) }} }}`"
)]
pub trait Perform: Job {
    /// Runs the job. An `Err` is retried with Sidekiq's backoff unless it says otherwise.
    fn perform(self, cx: &JobContext) -> impl Future<Output = Result<(), JobError>> + Send;
}

/// Per-type options set by `#[job(...)]`, `#[throttle(...)]` and `#[concurrency(...)]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobOptions {
    /// The queue jobs go to unless rerouted or chosen at enqueue. Default `default`.
    pub queue: &'static str,
    /// Sidekiq's `retry` option.
    pub retry: Retry,
    /// Reroute rules, in declaration order (the last matching rule wins).
    pub throttles: &'static [ThrottleRule],
    /// Whether the job's queue is a tenant-sharded queue.
    pub shard_by_tenant: bool,
    /// A slot limit: at most `limit` jobs of one key run at once.
    pub concurrency: Option<ConcurrencyLimit>,
}

impl JobOptions {
    /// The defaults: queue `default`, Sidekiq's 25 retries, no rules.
    pub const DEFAULT: JobOptions = JobOptions {
        queue: "default",
        retry: Retry::Default,
        throttles: &[],
        shard_by_tenant: false,
        concurrency: None,
    };
}

impl Default for JobOptions {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Sidekiq's `retry` option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// `"retry": true`: Sidekiq's default of 25 retries.
    Default,
    /// `"retry": N`: at most N retries.
    Times(u32),
    /// `"retry": false`: a failure is final (and, as in Sidekiq, not kept in `dead`).
    Never,
}

impl Retry {
    /// Sidekiq's default number of retries.
    pub const DEFAULT_MAX: u32 = 25;

    /// The JSON value written to the payload.
    pub fn to_json(self) -> serde_json::Value {
        match self {
            Retry::Default => serde_json::Value::Bool(true),
            Retry::Times(n) => serde_json::Value::from(n),
            Retry::Never => serde_json::Value::Bool(false),
        }
    }
}

/// One `#[throttle(queue, threshold, per)]` rule: when more than `threshold` jobs
/// of one tenant were enqueued within `per`, the job goes to `queue`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThrottleRule {
    /// The slower queue.
    pub queue: &'static str,
    /// Jobs allowed in the window before this rule matches (`threshold < count`).
    pub threshold: u64,
    /// The window.
    pub per: Duration,
    /// The fetch weight of `queue` when the worker derives its queue list.
    pub weight: Option<u32>,
}

/// A `#[concurrency(limit = N, key = ...)]` slot limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConcurrencyLimit {
    /// The default number of slots per key (overridable at runtime in Redis).
    pub limit: u32,
    /// A key group shared by several job types; by default keys are per class.
    pub group: Option<&'static str>,
}

/// How a job type's serde form maps to Sidekiq's positional `args`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgsShape {
    /// A unit struct: `args: []`.
    Unit,
    /// A newtype `Job(v)`: `args: [v]`.
    Newtype,
    /// A tuple struct `Job(a, b, ...)` of this many fields: `args: [a, b, ...]`.
    Tuple(usize),
    /// A struct with named fields: `args: [{...}]`.
    Named,
}

impl ArgsShape {
    /// The arity of `args` this shape expects.
    pub fn arity(self) -> usize {
        match self {
            ArgsShape::Unit => 0,
            ArgsShape::Newtype | ArgsShape::Named => 1,
            ArgsShape::Tuple(n) => n,
        }
    }

    fn encode<T: Serialize>(self, value: &T) -> Result<Box<RawValue>, serde_json::Error> {
        let json = match self {
            ArgsShape::Unit => "[]".to_owned(),
            ArgsShape::Tuple(_) => serde_json::to_string(value)?,
            ArgsShape::Newtype | ArgsShape::Named => {
                let mut s = String::from("[");
                s.push_str(&serde_json::to_string(value)?);
                s.push(']');
                s
            }
        };
        RawValue::from_string(json)
    }

    fn decode<T: DeserializeOwned>(self, args: &RawValue) -> std::result::Result<T, String> {
        let items: Vec<&RawValue> = serde_json::from_str(args.get())
            .map_err(|e| format!("`args` is not a JSON array: {e}"))?;
        let expected = self.arity();
        if items.len() != expected {
            return Err(format!(
                "expected {expected} argument{} in `args`, got {}",
                if expected == 1 { "" } else { "s" },
                items.len()
            ));
        }
        let parsed = match self {
            ArgsShape::Unit => serde_json::from_str("null"),
            ArgsShape::Tuple(_) => serde_json::from_str(args.get()),
            ArgsShape::Newtype | ArgsShape::Named => serde_json::from_str(items[0].get()),
        };
        parsed.map_err(|e| format!("cannot decode `args`: {e}"))
    }
}

/// What the worker needs to run one job type, collected with `inventory`.
#[derive(Clone, Copy)]
pub struct JobRegistration {
    /// Sidekiq class name.
    pub class: &'static str,
    /// The Rust type's path, for messages.
    pub type_name: &'static str,
    /// The type's options.
    pub options: JobOptions,
    pub(crate) run: crate::worker::RunFn,
}

impl fmt::Debug for JobRegistration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobRegistration")
            .field("class", &self.class)
            .field("type_name", &self.type_name)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl JobRegistration {
    /// The registration of `T`; `type_name` is the type's path.
    pub const fn new<T: Perform>(type_name: &'static str) -> Self {
        JobRegistration {
            class: T::CLASS,
            type_name,
            options: T::OPTIONS,
            run: crate::worker::run_job::<T>,
        }
    }
}

inventory::collect!(JobRegistration);

/// The job types a worker can run, by class name.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    jobs: BTreeMap<&'static str, JobRegistration>,
}

impl Registry {
    /// An empty registry (use [`Registry::register`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// Every `#[derive(Job)]` type linked into this binary.
    ///
    /// Fails when two types share one class name, naming both.
    pub fn from_inventory() -> Result<Self> {
        let mut registry = Registry::new();
        for registration in inventory::iter::<JobRegistration> {
            registry.insert(*registration)?;
        }
        Ok(registry)
    }

    /// Adds `T` explicitly (tests, or crates the binary does not otherwise name).
    pub fn register<T: Perform>(&mut self) -> Result<&mut Self> {
        self.insert(JobRegistration::new::<T>(std::any::type_name::<T>()))?;
        Ok(self)
    }

    /// Adds one registration; a second type with the same class is an error,
    /// while the same type registered twice is accepted once.
    pub fn insert(&mut self, registration: JobRegistration) -> Result<()> {
        if let Some(existing) = self.jobs.get(registration.class) {
            if existing.type_name == registration.type_name
                || std::ptr::fn_addr_eq(existing.run, registration.run)
            {
                return Ok(());
            }
            return Err(Error::DuplicateClass {
                class: registration.class.to_owned(),
                first: existing.type_name.to_owned(),
                second: registration.type_name.to_owned(),
            });
        }
        self.jobs.insert(registration.class, registration);
        Ok(())
    }

    /// The registration for `class`.
    pub fn get(&self, class: &str) -> Option<&JobRegistration> {
        self.jobs.get(class)
    }

    /// All registrations, ordered by class name.
    pub fn iter(&self) -> impl Iterator<Item = &JobRegistration> {
        self.jobs.values()
    }

    /// Number of registered classes.
    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    /// True when no job is registered.
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// Queues that are declared tenant-sharded by some registered job.
    pub fn sharded_queues(&self) -> Vec<&'static str> {
        let mut queues: Vec<_> = self
            .iter()
            .filter(|r| r.options.shard_by_tenant)
            .map(|r| r.options.queue)
            .collect();
        queues.sort_unstable();
        queues.dedup();
        queues
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_encode_like_sidekiq() {
        #[derive(Serialize)]
        struct Two(u32, String);
        #[derive(Serialize)]
        struct One(String);
        #[derive(Serialize)]
        struct Unit;
        #[derive(Serialize)]
        struct Named {
            id: u32,
        }
        assert_eq!(
            ArgsShape::Tuple(2)
                .encode(&Two(1, "a".into()))
                .unwrap()
                .get(),
            r#"[1,"a"]"#
        );
        assert_eq!(
            ArgsShape::Newtype.encode(&One("x".into())).unwrap().get(),
            r#"["x"]"#
        );
        assert_eq!(ArgsShape::Unit.encode(&Unit).unwrap().get(), "[]");
        assert_eq!(
            ArgsShape::Named.encode(&Named { id: 7 }).unwrap().get(),
            r#"[{"id":7}]"#
        );
    }

    #[test]
    fn decode_checks_arity_and_says_what_it_expected() {
        #[derive(serde::Deserialize, Debug, PartialEq)]
        struct Two(u32, String);
        let ok: Two = ArgsShape::Tuple(2)
            .decode(&RawValue::from_string(r#"[1,"a"]"#.into()).unwrap())
            .unwrap();
        assert_eq!(ok, Two(1, "a".into()));
        let err = ArgsShape::Tuple(2)
            .decode::<Two>(&RawValue::from_string(r#"[1]"#.into()).unwrap())
            .unwrap_err();
        assert_eq!(err, "expected 2 arguments in `args`, got 1");
        let err = ArgsShape::Newtype
            .decode::<String>(&RawValue::from_string(r#"{"a":1}"#.into()).unwrap())
            .unwrap_err();
        assert!(err.contains("not a JSON array"), "{err}");
    }
}
