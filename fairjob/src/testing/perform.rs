//! [`perform`]: one job's `perform`, called directly, for the job's own unit
//! tests (Oban's `perform_job`, River's `rivertest.Worker`).

use std::fmt;
use std::future::{Future, IntoFuture};
use std::pin::Pin;

use tokio_util::sync::CancellationToken;

use super::Fake;
use crate::broker::Token;
use crate::client::IntoPush;
use crate::error::JobError;
use crate::job::{JobContext, JobParts, JobRegistration, Perform, Registry};
use crate::wire::{Payload, fields};

/// Runs `job`'s `perform` once, with a [`JobContext`] as a worker would build
/// it: the job goes through the real payload encoder and back (so a
/// `Serialize`/`Deserialize` mismatch fails here as it would in a worker), and
/// you choose the tenant, the attempt and the jid. No middleware runs, and
/// nothing is retried: you get what `perform` returned.
///
/// The context's client is a fresh [`Fake`]'s, or the one you pass with
/// [`Performing::on`] to look at what the job enqueues.
///
/// ```
/// use fairjob::prelude::*;
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize, Job)]
/// struct Invoice {
///     amount: u32,
/// }
///
/// impl Perform for Invoice {
///     async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
///         if cx.attempt() < 3 {
///             return Err(JobError::retry("payment provider down"));
///         }
///         assert_eq!(cx.tenant(), Some("acme"));
///         Ok(())
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use fairjob::testing::perform;
/// assert!(perform(Invoice { amount: 5 }).tenant("acme").await.is_err());
/// perform(Invoice { amount: 5 }).tenant("acme").attempt(3).await.unwrap();
/// # }
/// ```
pub fn perform<J: Perform>(job: J) -> Performing<J> {
    Performing {
        job,
        tenant: None,
        attempt: 1,
        jid: None,
        fake: None,
    }
}

/// A pending [`perform`]; `.await` it.
#[must_use = "a `perform` does nothing until it is awaited"]
pub struct Performing<J> {
    job: J,
    tenant: Option<String>,
    attempt: u32,
    jid: Option<String>,
    fake: Option<Fake>,
}

impl<J> fmt::Debug for Performing<J> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Performing")
            .field("job", &std::any::type_name::<J>())
            .field("tenant", &self.tenant)
            .field("attempt", &self.attempt)
            .field("jid", &self.jid)
            .finish_non_exhaustive()
    }
}

impl<J: Perform> Performing<J> {
    /// The tenant the job sees (default: its `#[fair_tenant]`, if any).
    pub fn tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant = Some(tenant.into());
        self
    }

    /// Which run this is, starting at 1 (the default): `attempt(3)` is the
    /// second retry, as [`JobContext::attempt`] and `retry_count` say.
    pub fn attempt(mut self, attempt: u32) -> Self {
        self.attempt = attempt.max(1);
        self
    }

    /// The jid (default: a fresh one).
    pub fn jid(mut self, jid: impl Into<String>) -> Self {
        self.jid = Some(jid.into());
        self
    }

    /// Gives the job `fake`'s client, so what it enqueues is recorded there.
    pub fn on(mut self, fake: &Fake) -> Self {
        self.fake = Some(fake.clone());
        self
    }

    async fn run(self) -> Result<(), JobError> {
        let Performing {
            job,
            tenant,
            attempt,
            jid,
            fake,
        } = self;
        let tenant = tenant.or_else(|| job.fair_tenant());
        let push = job
            .into_push()
            .map_err(|e| JobError::retry(e).with_class("EncodeError"))?;
        let mut payload = push.payload().clone();
        if let Some(jid) = jid {
            payload.set("jid", jid);
        }
        match tenant.filter(|t| !t.is_empty()) {
            Some(t) => payload.set(fields::FAIR_TENANT, t),
            None => payload.remove(fields::FAIR_TENANT),
        }
        if attempt > 1 {
            payload.set("retry_count", attempt - 2);
        }
        // Through the bytes a worker would read.
        let payload = Payload::parse(payload.to_json().into_bytes())
            .map_err(|e| JobError::retry(e).with_class("ArgumentError"))?;
        let queue = payload.queue();
        let client = match fake {
            Some(fake) => fake.client(),
            None => Fake::builder()
                .registry(Registry::new())
                .build()
                .map_err(|e| JobError::retry(e).with_class("ConfigError"))?
                .client(),
        };
        let prepared = (JobRegistration::new::<J>(std::any::type_name::<J>()).prepare)(&payload)?;
        let cx = JobContext::new(JobParts {
            token: Token {
                raw: format!("0|{}", crate::broker::keys::encode(&queue)),
                queue,
                tenant: None,
            },
            payload,
            cancel: CancellationToken::new(),
            stopping: CancellationToken::new(),
            client,
        });
        crate::worker::perform_prepared(prepared, cx).await
    }
}

impl<J: Perform> IntoFuture for Performing<J> {
    type Output = Result<(), JobError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<(), JobError>> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.run())
    }
}
