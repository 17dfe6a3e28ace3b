//! [`JobContext`]: what a running job knows about itself, and its way to stop
//! early at shutdown.

use std::fmt;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio_util::sync::CancellationToken;

use crate::broker::{SlotHold, Token};
use crate::client::Client;
use crate::payload::{Payload, fields};

/// A running job's identity and surroundings. Cheap to clone.
#[derive(Clone)]
pub struct JobContext {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) payload: Payload,
    pub(crate) class: String,
    pub(crate) jid: String,
    pub(crate) queue: String,
    pub(crate) tenant: Option<String>,
    pub(crate) token: Token,
    pub(crate) cancel: CancellationToken,
    pub(crate) client: Client,
    pub(crate) started: Instant,
    pub(crate) identity: String,
    /// The slot this job holds, if its type has a `#[concurrency]` limit.
    pub(crate) slot: Mutex<Option<SlotHold>>,
    /// Set when the job was parked in a lock-wait list instead of running.
    pub(crate) parked: AtomicBool,
}

impl fmt::Debug for JobContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobContext")
            .field("class", &self.inner.class)
            .field("jid", &self.inner.jid)
            .field("queue", &self.inner.queue)
            .field("tenant", &self.inner.tenant)
            .field("attempt", &self.attempt())
            .finish()
    }
}

impl JobContext {
    /// The job id (24 hex characters).
    pub fn jid(&self) -> &str {
        &self.inner.jid
    }

    /// The class name.
    pub fn class(&self) -> &str {
        &self.inner.class
    }

    /// The queue the job was fetched from.
    pub fn queue(&self) -> &str {
        &self.inner.queue
    }

    /// The tenant, if the job has one.
    pub fn tenant(&self) -> Option<&str> {
        self.inner.tenant.as_deref()
    }

    /// Sidekiq's `retry_count`: `None` on the first try, 0 after one failure, …
    pub fn retry_count(&self) -> Option<u32> {
        self.inner.payload.retry_count()
    }

    /// How many earlier runs were interrupted (their worker died or lost its lease).
    pub fn interrupted_count(&self) -> u32 {
        self.inner
            .payload
            .get(fields::INTERRUPTED_COUNT)
            .unwrap_or(0)
    }

    /// True when the run before this one started but never finished.
    pub fn was_interrupted(&self) -> bool {
        self.interrupted_count() > 0
    }

    /// This run's number, starting at 1: failures and interruptions both count.
    pub fn attempt(&self) -> u32 {
        1 + self.retry_count().map_or(0, |c| c + 1) + self.interrupted_count()
    }

    /// The whole payload (unknown fields included).
    pub fn payload(&self) -> &Payload {
        &self.inner.payload
    }

    /// A client for enqueueing from inside the job (it runs the worker's client middleware).
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// True once the worker asked running jobs to stop (shutdown timeout reached).
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancel.is_cancelled()
    }

    /// Resolves when the worker asks running jobs to stop.
    pub async fn cancelled(&self) {
        self.inner.cancel.cancelled().await
    }

    /// The in-progress token (queue and shard the job came from).
    pub fn token(&self) -> &Token {
        &self.inner.token
    }
}
