//! Typed jobs: the [`Job`] and [`Perform`] traits, the per-call [`Enqueue`]
//! builder, the [`JobContext`] a running job sees, and the [`Registry`] of
//! every linked `#[derive(Job)]` with its type-erased decode-and-perform.
//!
//! Layer 5: it sits on the client (enqueueing a typed job is building a
//! [`PushJob`](crate::client::PushJob) and handing it over) and below the
//! worker, which runs what the registry prepares.

mod context;
mod cron;
mod enqueue;
mod iterate;
mod registry;

use std::future::Future;
use std::time::{Duration, SystemTime};

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;

pub use context::JobContext;
pub(crate) use context::JobParts;
pub use cron::CronDeclaration;
pub(crate) use cron::declared_crons;
pub use enqueue::Enqueue;
pub(crate) use iterate::ErasedIterate;
pub use iterate::{Iterate, Step};
pub use registry::{JobRegistration, Registry};
pub(crate) use registry::{Prepared, RateGate, Run, SlotRequest};

use crate::client::Client;
use crate::error::{DecodeError, Error, JobError, Result};
use crate::wire::{ArgsShape, JobOptions, Payload, active_job};

/// A job type: its Sidekiq class name, its options and how its fields map to
/// Sidekiq's positional `args`.
///
/// Implement it with `#[derive(Job)]`; the derive also registers the type so the
/// bundled worker finds it. The enqueue methods ([`Job::perform_async`],
/// [`Job::set_tenant`], …) are provided here.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a fairjob job",
    label = "not a `#[derive(Job)]` type",
    note = "a job type derives it: `#[derive(Serialize, Deserialize, fairjob::Job)]`, with an `impl fairjob::Perform`"
)]
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

    /// The key of `#[rate_limit(key = field | function)]`, if the type declares one.
    fn rate_key(&self) -> Option<String> {
        None
    }

    /// The JSON of the fields named by `#[unique(by(...))]`, if the type
    /// names some; `None`: the key is all of the arguments.
    fn unique_key_json(&self) -> Option<std::result::Result<String, serde_json::Error>> {
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
        Self::ARGS.decode(args).map_err(|source| Error::Decode {
            class: Self::CLASS.to_owned(),
            source,
        })
    }

    /// Decodes a payload's arguments: Sidekiq's `args`, or for a payload of
    /// ActiveJob's Sidekiq adapter (the type must be `#[job(active_job)]`)
    /// ActiveJob's `arguments` in `args[0]`, its serialization markers
    /// understood (see [`wire::active_job`](crate::wire::active_job)).
    fn from_payload(payload: &Payload) -> Result<Self> {
        if !payload.is_active_job() {
            return Self::from_args(payload.args());
        }
        let err = |source| Error::Decode {
            class: Self::CLASS.to_owned(),
            source,
        };
        if !Self::OPTIONS.active_job {
            return Err(err(DecodeError::NotActiveJob {
                wrapper: payload.wire_class(),
            }));
        }
        let (_, arguments) =
            active_job::decode(payload.args().get()).map_err(|e| err(DecodeError::ActiveJob(e)))?;
        let got = arguments.as_array().map_or(0, Vec::len);
        let expected = Self::ARGS.arity();
        if got != expected {
            return Err(err(DecodeError::Arity { expected, got }));
        }
        let plain = match Self::ARGS {
            ArgsShape::Unit => serde_json::Value::Null,
            ArgsShape::Tuple(_) => arguments,
            ArgsShape::Newtype | ArgsShape::Named => arguments
                .as_array()
                .and_then(|a| a.first().cloned())
                .unwrap_or_default(),
        };
        serde_path_to_error::deserialize(plain).map_err(|e| {
            let path = e.path().to_string();
            let path = match Self::ARGS {
                ArgsShape::Tuple(_) => path,
                ArgsShape::Newtype | ArgsShape::Named if path == "." => "[0]".to_owned(),
                ArgsShape::Newtype | ArgsShape::Named => format!("[0].{path}"),
                ArgsShape::Unit => path,
            };
            err(DecodeError::ActiveJobArgument {
                path,
                source: e.into_inner(),
            })
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
        client.push(Enqueue::new(self))
    }

    /// Schedules the job to run after `delay` (measured by Redis's clock); returns the jid.
    fn perform_in(
        self,
        client: &Client,
        delay: Duration,
    ) -> impl Future<Output = Result<String>> + Send {
        client.push_in(Enqueue::new(self), delay)
    }

    /// Schedules the job to run at `at`; returns the jid.
    fn perform_at(
        self,
        client: &Client,
        at: SystemTime,
    ) -> impl Future<Output = Result<String>> + Send {
        client.push_at(Enqueue::new(self), at)
    }
}

/// The work of a job. Write it as an `async fn`:
///
/// ```
/// # use fairjob::prelude::*;
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

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;
    use crate::client::IntoPush;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Report(u64, String, Opts);

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Opts {
        at: String,
        every: u64,
    }

    impl Job for Report {
        const CLASS: &'static str = "ReportJob";
        const OPTIONS: JobOptions = JobOptions {
            active_job: true,
            ..JobOptions::DEFAULT
        };
        const ARGS: ArgsShape = ArgsShape::Tuple(3);
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Plain(u64);

    impl Job for Plain {
        const CLASS: &'static str = "ReportJob";
        const OPTIONS: JobOptions = JobOptions::DEFAULT;
        const ARGS: ArgsShape = ArgsShape::Newtype;
    }

    fn wrapped(arguments: &str) -> Payload {
        Payload::parse(
            format!(
                r#"{{"class":"Sidekiq::ActiveJob::Wrapper","wrapped":"ReportJob","queue":"default","args":[{{"job_class":"ReportJob","arguments":{arguments}}}],"jid":"j"}}"#
            )
            .into_bytes(),
        )
        .unwrap()
    }

    #[test]
    fn active_job_arguments_decode_into_the_type() {
        let p = wrapped(
            r#"[7,{"_aj_serialized":"ActiveJob::Serializers::SymbolSerializer","value":"pdf"},{"at":{"_aj_serialized":"ActiveJob::Serializers::TimeSerializer","value":"2026-11-25T12:00:00Z"},"every":{"_aj_serialized":"ActiveJob::Serializers::DurationSerializer","value":60,"parts":[]},"_aj_ruby2_keywords":["at","every"]}]"#,
        );
        let job = Report::from_payload(&p).unwrap();
        assert_eq!(
            job,
            Report(
                7,
                "pdf".into(),
                Opts {
                    at: "2026-11-25T12:00:00Z".into(),
                    every: 60
                }
            )
        );
    }

    #[test]
    fn the_argument_that_does_not_fit_is_named_with_the_class() {
        let p = wrapped(r#"[7,"pdf",{"at":"x","every":"soon","_aj_symbol_keys":["at","every"]}]"#);
        let err = Report::from_payload(&p).unwrap_err().to_string();
        assert!(
            err.starts_with("cannot decode the arguments of `ReportJob`: ActiveJob argument [2].every does not fit: invalid type: string \"soon\""),
            "{err}"
        );
        let err = Report::from_payload(&wrapped("[7]"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("expected 3 arguments"), "{err}");
        let err = Plain::from_payload(&wrapped("[7]"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("not declared `#[job(active_job)]`"), "{err}");
    }

    #[test]
    fn an_active_job_type_is_pushed_in_the_wrapper_form_and_read_back() {
        let job = Report(
            1,
            "csv".into(),
            Opts {
                at: "t".into(),
                every: 5,
            },
        );
        let push = job.enqueue().queue("reports").into_push().unwrap();
        let p = Payload::parse(push.payload().to_json().into_bytes()).unwrap();
        assert_eq!(p.wire_class(), crate::wire::active_job::WRAPPER);
        assert_eq!(p.class(), "ReportJob");
        assert_eq!(p.queue(), "reports");
        let args: serde_json::Value = serde_json::from_str(p.args().get()).unwrap();
        assert_eq!(args[0]["job_class"], "ReportJob");
        assert_eq!(args[0]["queue_name"], "reports");
        assert_eq!(
            args[0]["arguments"],
            serde_json::json!([1, "csv", {"at": "t", "every": 5, "_aj_symbol_keys": ["at", "every"]}])
        );
        assert_eq!(
            Report::from_payload(&p).unwrap(),
            Report(
                1,
                "csv".into(),
                Opts {
                    at: "t".into(),
                    every: 5
                }
            )
        );
    }
}
