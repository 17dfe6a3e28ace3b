//! The [`Registry`] of job types a worker runs, collected from every linked
//! `#[derive(Job)]` with `inventory`, and each type's erased entry point: decode
//! a payload's `args` into the type and say which slot it needs ([`Prepared`]),
//! then perform it.

use std::collections::BTreeMap;
use std::fmt;

use futures_util::future::BoxFuture;

use super::{ErasedIterate, Iterate, Job, JobContext, Perform};
use crate::error::{Error, JobError, Result};
use crate::wire::ClassInfo;
use crate::wire::{IterableOptions, JobOptions, Payload, Retry, WireRule};
use crate::{limit, rate};

/// A performing job's future.
pub(crate) type RunFuture = BoxFuture<'static, Result<(), JobError>>;

/// How a registered type turns a payload into a job ready to run.
pub(crate) type PrepareFn = fn(&Payload) -> std::result::Result<Prepared, JobError>;

/// A decoded job, ready to run.
pub(crate) struct Prepared {
    /// The slot it must hold while it runs, if its type has a `#[concurrency]` limit.
    pub slot: Option<SlotRequest>,
    /// The rate limiter it must pass before it starts, if its type has a `#[rate_limit]`.
    pub rate: Option<RateGate>,
    /// Its type's `#[job(timeout)]`, if any.
    pub timeout: Option<std::time::Duration>,
    run: Run,
}

/// What running a prepared job means.
pub(crate) enum Run {
    /// `perform` of a plain job.
    Perform(Box<dyn FnOnce(JobContext) -> RunFuture + Send>),
    /// The steps of an `#[iterable]` job, driven by the worker's runner.
    Iterate(Box<dyn ErasedIterate>, IterableOptions),
}

impl fmt::Debug for Prepared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Prepared")
            .field("slot", &self.slot)
            .finish_non_exhaustive()
    }
}

impl Prepared {
    /// What running the job means.
    pub(crate) fn into_run(self) -> Run {
        self.run
    }

    /// An `#[iterable]` job (fair yield may ask it to give its slot back).
    pub(crate) fn is_iterable(&self) -> bool {
        matches!(self.run, Run::Iterate(..))
    }
}

/// A slot a job needs: `full_key` with the type's declared limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SlotRequest {
    pub full_key: String,
    pub limit: u32,
}

/// A rate limiter a job must pass: `full_key` with the type's declared rate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RateGate {
    pub full_key: String,
    pub rate: rate::Rate,
}

/// The rate limiter of a job of `T`, if its type declares one.
fn rate_gate<T: Job>(job: &T, payload: &Payload) -> Option<RateGate> {
    let l = T::OPTIONS.rate_limit?;
    let key = if l.by_tenant {
        payload.tenant()
    } else {
        job.rate_key()
    };
    Some(RateGate {
        full_key: rate::full_key(T::CLASS, &l, key.as_deref()),
        rate: rate::Rate::of(&l),
    })
}

/// A decoded job with the slot and the rate limiter it needs.
type Decoded<T> = (T, Option<SlotRequest>, Option<RateGate>);

/// Decodes `T` from the payload's args and says which slot and which rate
/// limiter it needs.
fn decode<T: Job>(payload: &Payload) -> std::result::Result<Decoded<T>, JobError> {
    let job = T::from_payload(payload).map_err(|e| match e {
        // An ActiveJob job's failure names its Ruby class (the payload's
        // `class` is the wrapper).
        e @ Error::Decode { .. } if payload.is_active_job() => {
            JobError::retry(e).with_class("ArgumentError")
        }
        Error::Decode { source, .. } => JobError::retry(source).with_class("ArgumentError"),
        other => JobError::retry(other).with_class("ArgumentError"),
    })?;
    let slot = match (T::OPTIONS.concurrency, job.concurrency_key()) {
        (Some(l), Some(key)) => Some(SlotRequest {
            full_key: limit::full_key(T::CLASS, &l, &key),
            limit: l.limit,
        }),
        _ => None,
    };
    let rate = rate_gate(&job, payload);
    Ok((job, slot, rate))
}

/// Decodes `T` from the payload's args and captures it for [`Prepared::into_run`].
fn prepare<T: Perform>(payload: &Payload) -> std::result::Result<Prepared, JobError> {
    let (job, slot, rate) = decode::<T>(payload)?;
    Ok(Prepared {
        slot,
        rate,
        timeout: T::OPTIONS.timeout,
        run: Run::Perform(Box::new(move |cx: JobContext| -> RunFuture {
            Box::pin(async move { job.perform(&cx).await })
        })),
    })
}

/// Decodes an `#[iterable]` `T` and captures it for the step runner.
fn prepare_iterable<T: Iterate>(payload: &Payload) -> std::result::Result<Prepared, JobError> {
    let (job, slot, rate) = decode::<T>(payload)?;
    let options = T::OPTIONS.iterable.unwrap_or_default();
    Ok(Prepared {
        slot,
        rate,
        timeout: T::OPTIONS.timeout,
        run: Run::Iterate(Box::new(job), options),
    })
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
    pub(crate) prepare: PrepareFn,
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
            prepare: prepare::<T>,
        }
    }

    /// The registration of an `#[iterable]` `T`; `type_name` is the type's path.
    pub const fn new_iterable<T: Iterate>(type_name: &'static str) -> Self {
        JobRegistration {
            class: T::CLASS,
            type_name,
            options: T::OPTIONS,
            prepare: prepare_iterable::<T>,
        }
    }

    /// What workers publish about the class (see [`ClassInfo`]).
    pub fn class_info(&self) -> ClassInfo {
        let o = &self.options;
        ClassInfo {
            class: self.class.to_owned(),
            queue: o.queue.to_owned(),
            throttles: o.throttles.iter().map(WireRule::from).collect(),
            sharded: o.shard_by_tenant,
            concurrency: o.concurrency.map(|c| c.limit),
            group: o.concurrency.and_then(|c| c.group).map(str::to_owned),
            retries: match o.retry {
                Retry::Default => Some(Retry::DEFAULT_MAX),
                Retry::Times(n) => Some(n),
                Retry::Never => None,
            },
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

    /// Adds an `#[iterable]` `T` explicitly.
    pub fn register_iterable<T: Iterate>(&mut self) -> Result<&mut Self> {
        self.insert(JobRegistration::new_iterable::<T>(
            std::any::type_name::<T>(),
        ))?;
        Ok(self)
    }

    /// Adds one registration; a second type with the same class is an error,
    /// while the same type registered twice is accepted once.
    pub fn insert(&mut self, registration: JobRegistration) -> Result<()> {
        if let Some(existing) = self.jobs.get(registration.class) {
            if existing.type_name == registration.type_name
                || std::ptr::fn_addr_eq(existing.prepare, registration.prepare)
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

    /// Every registered class as workers publish it, by name.
    pub fn class_infos(&self) -> Vec<ClassInfo> {
        self.iter().map(JobRegistration::class_info).collect()
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

    /// Decodes a payload of a registered class into a job ready to run; an
    /// unknown class is [`Error::UnknownJob`], as a job failure. (The worker
    /// reads the class once and calls [`Self::prepare_class`].)
    #[cfg(feature = "testing")]
    pub(crate) fn prepare(&self, payload: &Payload) -> std::result::Result<Prepared, JobError> {
        self.prepare_class(&payload.class(), payload)
    }

    /// [`Self::prepare`] for a payload whose class (`Payload::class`) the
    /// caller already read.
    pub(crate) fn prepare_class(
        &self,
        class: &str,
        payload: &Payload,
    ) -> std::result::Result<Prepared, JobError> {
        match self.jobs.get(class) {
            Some(r) => (r.prepare)(payload),
            None => Err(JobError::retry(Error::UnknownJob {
                class: class.to_owned(),
            })
            .with_class("UnknownJobClass")),
        }
    }
}
