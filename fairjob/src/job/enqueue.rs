//! [`Enqueue`]: one enqueue with per-call options
//! (`job.set_tenant("acme").queue("x").retry(3).perform_async(&client)`), and
//! how a typed job becomes a [`PushJob`] for the client.

use std::fmt;
use std::time::{Duration, SystemTime};

use super::Job;
use crate::client::{Client, IntoPush, PushJob};
use serde_json::value::RawValue;

use crate::error::{Error, Result};
use crate::wire::{
    ArgsShape, Payload, Retry, UniqueSpec, WireRule, active_job, fields, now_f64, unique_digest,
};

/// An enqueue with per-call options: `job.set_tenant("acme").queue("x").retry(3).perform_async(&client)`.
#[must_use]
pub struct Enqueue<J> {
    job: J,
    tenant: Option<String>,
    queue: Option<String>,
    retry: Option<Retry>,
}

impl<J> fmt::Debug for Enqueue<J> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Enqueue")
            .field("class", &std::any::type_name::<J>())
            .field("tenant", &self.tenant)
            .field("queue", &self.queue)
            .field("retry", &self.retry)
            .finish()
    }
}

impl<J: Job> Enqueue<J> {
    pub(crate) fn new(job: J) -> Self {
        Enqueue {
            job,
            tenant: None,
            queue: None,
            retry: None,
        }
    }

    /// The tenant of this job (wins over middleware and `#[fair_tenant]`). Empty = none.
    pub fn set_tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant = Some(tenant.into());
        self
    }

    /// An explicit queue: never rerouted or counted, also on retry.
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = Some(queue.into());
        self
    }

    /// Sidekiq's `retry` option for this job: `n` retries (0 = fail once, go to dead).
    pub fn retry(mut self, n: u32) -> Self {
        self.retry = Some(Retry::Times(n));
        self
    }

    /// No retries, and not kept in `dead` (Sidekiq's `retry: false`).
    pub fn no_retry(mut self) -> Self {
        self.retry = Some(Retry::Never);
        self
    }

    /// Pushes now; returns the jid.
    pub async fn perform_async(self, client: &Client) -> Result<String> {
        client.push(self).await
    }

    /// Schedules after `delay` by Redis's clock; returns the jid. A delay of zero
    /// pushes at once.
    pub async fn perform_in(self, client: &Client, delay: Duration) -> Result<String> {
        client.push_in(self, delay).await
    }

    /// Schedules at `at`; returns the jid. A time in the past pushes at once.
    pub async fn perform_at(self, client: &Client, at: SystemTime) -> Result<String> {
        client.push_at(self, at).await
    }
}

impl<J: Job> IntoPush for Enqueue<J> {
    fn into_push(self) -> Result<PushJob> {
        let args = self.job.to_args()?;
        let unique = match J::OPTIONS.unique {
            Some(options) => {
                let key = match self.job.unique_key_json() {
                    Some(key) => key.map_err(|source| Error::Encode {
                        class: J::CLASS.to_owned(),
                        source,
                    })?,
                    None => args.get().to_owned(),
                };
                Some((options, unique_digest(J::CLASS, &key)))
            }
            None => None,
        };
        let queue = self.queue.as_deref().unwrap_or(J::OPTIONS.queue);
        let mut payload = if J::OPTIONS.active_job {
            let mut p = Payload::new(
                active_job::WRAPPER,
                active_job_args::<J>(&args, queue)?,
                queue,
            );
            p.set(active_job::WRAPPED, J::CLASS);
            p
        } else {
            Payload::new(J::CLASS, args, queue)
        };
        payload.set("retry", self.retry.unwrap_or(J::OPTIONS.retry).to_json());
        if !J::OPTIONS.throttles.is_empty() {
            let rules: Vec<WireRule> = J::OPTIONS.throttles.iter().map(Into::into).collect();
            payload.set(fields::FAIR_TENANT_QUEUES, rules);
        }
        payload.set("created_at", now_f64());
        if let Some(q) = self.queue {
            payload.set("queue", q);
            payload.set(fields::QUEUE_PINNED, true);
        }
        if let Some(t) = self.tenant.filter(|t| !t.is_empty()) {
            payload.set(fields::FAIR_TENANT, t);
        }
        if let Some((options, digest)) = unique {
            UniqueSpec::write(&options, digest, &mut payload);
        }
        let sharded = J::OPTIONS.shard_by_tenant.then_some(J::OPTIONS.queue);
        Ok(PushJob::typed(payload, self.job.fair_tenant(), sharded))
    }
}

/// `args` for ActiveJob's Sidekiq adapter: `[<serialized job>]` holding the
/// job's arguments in ActiveJob's form (a struct with named fields as keyword
/// arguments).
fn active_job_args<J: Job>(args: &RawValue, queue: &str) -> Result<Box<RawValue>> {
    let encode_error = |e: String| Error::Encode {
        class: J::CLASS.to_owned(),
        source: serde::ser::Error::custom(e),
    };
    let plain: serde_json::Value =
        serde_json::from_str(args.get()).map_err(|e| encode_error(e.to_string()))?;
    let keywords = J::ARGS == ArgsShape::Named;
    let arguments =
        active_job::encode_arguments(plain, keywords).map_err(|e| encode_error(e.to_string()))?;
    let enqueued_at = humantime::format_rfc3339_nanos(SystemTime::now()).to_string();
    let job = active_job::serialize_job(J::CLASS, queue, arguments, &enqueued_at);
    serde_json::value::to_raw_value(&[job]).map_err(|e| encode_error(e.to_string()))
}

impl<J: Job> IntoPush for J {
    fn into_push(self) -> Result<PushJob> {
        Enqueue::new(self).into_push()
    }
}
