//! The job types: one per kind of queue (plain FIFO, reroute rules, tenant
//! shards) and class (class 0 is every tenant's; classes 1–9 are the sybil
//! tenant's others), all doing the same thing: sleep `--job-ms` and record when
//! they started and ended.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Result;
use fairjob::payload::now_f64;
use fairjob::{Client, Job, JobContext, JobError, Perform, Registry};
use serde::{Deserialize, Serialize};

/// The plain queue (FIFO, and the base queue of the reroute rules).
pub(crate) const PLAIN_QUEUE: &str = "work";
/// The tenant-sharded queue.
pub(crate) const SHARD_QUEUE: &str = "work_shard";
/// Job classes a tenant can spread over (the sybil tenant uses all of them).
pub(crate) const CLASSES: usize = 10;

/// One performed job.
#[derive(Debug, Clone)]
pub(crate) struct Rec {
    pub(crate) tenant: String,
    pub(crate) enq: f64,
    pub(crate) start: f64,
    pub(crate) end: f64,
}

/// Every job performed in this process since the last [`take_records`].
static RECORDS: Mutex<Vec<Rec>> = Mutex::new(Vec::new());
static JOB_MICROS: AtomicU64 = AtomicU64::new(2000);

/// The jitter as a fraction in millionths (`--job-jitter`).
static JOB_JITTER_PPM: AtomicU64 = AtomicU64::new(0);

pub(crate) fn set_job_micros(us: u64, jitter: f64) {
    JOB_MICROS.store(us, Ordering::Relaxed);
    JOB_JITTER_PPM.store((jitter * 1e6).round() as u64, Ordering::Relaxed);
}

/// The job's length: `--job-ms`, varied by up to `--job-jitter` either way,
/// uniformly by a hash of its enqueue time (so the same job always gets the
/// same length, and both modes of a scenario the same mix).
fn job_micros(enq: f64) -> u64 {
    let us = JOB_MICROS.load(Ordering::Relaxed);
    let jitter = JOB_JITTER_PPM.load(Ordering::Relaxed) as f64 / 1e6;
    if jitter == 0.0 {
        return us;
    }
    let h = enq.to_bits().wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 11;
    let u = h as f64 / (1u64 << 53) as f64;
    (us as f64 * (1.0 - jitter + 2.0 * jitter * u)).round() as u64
}

pub(crate) fn records_len() -> usize {
    RECORDS.lock().expect("records").len()
}

pub(crate) fn take_records() -> Vec<Rec> {
    std::mem::take(&mut *RECORDS.lock().expect("records"))
}

async fn work(tenant: String, enq: f64) -> Result<(), JobError> {
    let start = now_f64();
    let us = job_micros(enq);
    if us > 0 {
        tokio::time::sleep(Duration::from_micros(us)).await;
    }
    let end = now_f64();
    RECORDS.lock().expect("records").push(Rec {
        tenant,
        enq,
        start,
        end,
    });
    Ok(())
}

/// Builds a job of this type for `tenant`, enqueued now.
pub(crate) trait Make: Job {
    fn make(tenant: String) -> Self;
}

/// One job type: `$name` with Sidekiq class `$class`, and the given attributes.
macro_rules! job_type {
    ($name:ident, $class:literal, $queue:literal $(, $extra:ident)?; $(#[$m:meta])*) => {
        #[derive(Debug, Serialize, Deserialize, Job)]
        #[job(class = $class, queue = $queue $(, $extra)?)]
        #[fair_tenant(tenant)]
        $(#[$m])*
        pub(crate) struct $name {
            tenant: String,
            enq: f64,
        }

        impl Perform for $name {
            async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
                work(self.tenant, self.enq).await
            }
        }

        impl Make for $name {
            fn make(tenant: String) -> Self {
                $name { tenant, enq: now_f64() }
            }
        }
    };
}

/// A plain-queue type.
macro_rules! plain {
    ($name:ident, $class:literal) => {
        job_type!($name, $class, "work";);
    };
}

/// A reroute type: a tenant past 100 jobs per hour (per class) goes to
/// `work_throttled`, past 1000 to `work_slowest`; the worker fetches 4:2:1.
macro_rules! rules {
    ($name:ident, $class:literal) => {
        job_type!($name, $class, "work";
            // Two `#[throttle]` rules repeat key names, which clippy mistakes for duplicates.
            #[allow(clippy::duplicated_attributes)]
            #[throttle(queue = "work_throttled", threshold = 100, per = "1h", weight = 2)]
            #[throttle(queue = "work_slowest", threshold = 1000, per = "1h", weight = 1)]
        );
    };
}

/// A tenant-sharded type.
macro_rules! shard {
    ($name:ident, $class:literal) => {
        job_type!($name, $class, "work_shard", shard_by_tenant;);
    };
}

plain!(Plain0, "FairPlainJob");
plain!(Plain1, "FairPlainJob1");
plain!(Plain2, "FairPlainJob2");
plain!(Plain3, "FairPlainJob3");
plain!(Plain4, "FairPlainJob4");
plain!(Plain5, "FairPlainJob5");
plain!(Plain6, "FairPlainJob6");
plain!(Plain7, "FairPlainJob7");
plain!(Plain8, "FairPlainJob8");
plain!(Plain9, "FairPlainJob9");
rules!(Rules0, "FairRulesJob");
rules!(Rules1, "FairRulesJob1");
rules!(Rules2, "FairRulesJob2");
rules!(Rules3, "FairRulesJob3");
rules!(Rules4, "FairRulesJob4");
rules!(Rules5, "FairRulesJob5");
rules!(Rules6, "FairRulesJob6");
rules!(Rules7, "FairRulesJob7");
rules!(Rules8, "FairRulesJob8");
rules!(Rules9, "FairRulesJob9");
shard!(Shard0, "FairShardJob");
shard!(Shard1, "FairShardJob1");
shard!(Shard2, "FairShardJob2");
shard!(Shard3, "FairShardJob3");
shard!(Shard4, "FairShardJob4");
shard!(Shard5, "FairShardJob5");
shard!(Shard6, "FairShardJob6");
shard!(Shard7, "FairShardJob7");
shard!(Shard8, "FairShardJob8");
shard!(Shard9, "FairShardJob9");

/// Which queue a mode's jobs go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Plain,
    Rules,
    Shard,
}

impl Kind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Plain => "plain",
            Kind::Rules => "rules",
            Kind::Shard => "shard",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Kind> {
        [Kind::Plain, Kind::Rules, Kind::Shard]
            .into_iter()
            .find(|k| k.name() == s)
    }

    /// The worker's queue list.
    pub(crate) fn queues(self) -> Vec<String> {
        match self {
            Kind::Plain => vec![PLAIN_QUEUE.into()],
            Kind::Rules => vec![
                "work,4".into(),
                "work_throttled,2".into(),
                "work_slowest,1".into(),
            ],
            Kind::Shard => vec![SHARD_QUEUE.into()],
        }
    }
}

/// Evaluates `$body` with `$t` the type of (kind, class).
macro_rules! by_type {
    ($kind:expr, $class:expr, $t:ident => $body:expr) => {
        match ($kind, $class % CLASSES) {
            (Kind::Plain, 0) => {
                type $t = Plain0;
                $body
            }
            (Kind::Plain, 1) => {
                type $t = Plain1;
                $body
            }
            (Kind::Plain, 2) => {
                type $t = Plain2;
                $body
            }
            (Kind::Plain, 3) => {
                type $t = Plain3;
                $body
            }
            (Kind::Plain, 4) => {
                type $t = Plain4;
                $body
            }
            (Kind::Plain, 5) => {
                type $t = Plain5;
                $body
            }
            (Kind::Plain, 6) => {
                type $t = Plain6;
                $body
            }
            (Kind::Plain, 7) => {
                type $t = Plain7;
                $body
            }
            (Kind::Plain, 8) => {
                type $t = Plain8;
                $body
            }
            (Kind::Plain, _) => {
                type $t = Plain9;
                $body
            }
            (Kind::Rules, 0) => {
                type $t = Rules0;
                $body
            }
            (Kind::Rules, 1) => {
                type $t = Rules1;
                $body
            }
            (Kind::Rules, 2) => {
                type $t = Rules2;
                $body
            }
            (Kind::Rules, 3) => {
                type $t = Rules3;
                $body
            }
            (Kind::Rules, 4) => {
                type $t = Rules4;
                $body
            }
            (Kind::Rules, 5) => {
                type $t = Rules5;
                $body
            }
            (Kind::Rules, 6) => {
                type $t = Rules6;
                $body
            }
            (Kind::Rules, 7) => {
                type $t = Rules7;
                $body
            }
            (Kind::Rules, 8) => {
                type $t = Rules8;
                $body
            }
            (Kind::Rules, _) => {
                type $t = Rules9;
                $body
            }
            (Kind::Shard, 0) => {
                type $t = Shard0;
                $body
            }
            (Kind::Shard, 1) => {
                type $t = Shard1;
                $body
            }
            (Kind::Shard, 2) => {
                type $t = Shard2;
                $body
            }
            (Kind::Shard, 3) => {
                type $t = Shard3;
                $body
            }
            (Kind::Shard, 4) => {
                type $t = Shard4;
                $body
            }
            (Kind::Shard, 5) => {
                type $t = Shard5;
                $body
            }
            (Kind::Shard, 6) => {
                type $t = Shard6;
                $body
            }
            (Kind::Shard, 7) => {
                type $t = Shard7;
                $body
            }
            (Kind::Shard, 8) => {
                type $t = Shard8;
                $body
            }
            (Kind::Shard, _) => {
                type $t = Shard9;
                $body
            }
        }
    };
}

fn reg<T: Perform>(r: &mut Registry) -> Result<()> {
    r.register::<T>()?;
    Ok(())
}

/// A registry of the kind's ten classes.
pub(crate) fn registry(kind: Kind) -> Result<Registry> {
    let mut r = Registry::new();
    for class in 0..CLASSES {
        by_type!(kind, class, T => reg::<T>(&mut r))?;
    }
    Ok(r)
}

async fn bulk<T: Make>(client: &Client, tenant: &str, n: u64) -> Result<usize> {
    let r = client
        .push_bulk((0..n).map(|_| T::make(tenant.to_owned())))
        .await?;
    Ok(r.iter().filter(|j| j.is_some()).count())
}

async fn one<T: Make>(client: &Client, tenant: &str) -> Result<()> {
    client.push(T::make(tenant.to_owned())).await?;
    Ok(())
}

/// `push_bulk` of `n` jobs of (kind, class) for `tenant` (batches of 1,000 per
/// script call); returns how many were pushed.
pub(crate) async fn push_bulk(
    client: &Client,
    kind: Kind,
    class: usize,
    tenant: &str,
    n: u64,
) -> Result<usize> {
    by_type!(kind, class, T => bulk::<T>(client, tenant, n).await)
}

/// One `push` of a class-0 job for `tenant`.
pub(crate) async fn push_one(client: &Client, kind: Kind, tenant: &str) -> Result<()> {
    by_type!(kind, 0usize, T => one::<T>(client, tenant).await)
}
