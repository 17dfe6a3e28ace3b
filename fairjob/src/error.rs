//! Errors: the library's [`Error`] and what a job's `perform` returns, [`JobError`].
//!
//! `Error` keeps its sources; `JobError` says what should happen next to the job
//! (retry, retry after a delay, or discard).

use std::fmt;
use std::time::Duration;

/// The library's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong outside a job's own code.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Redis refused or failed a command (connection lost, timeout, script error…).
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// Redis is out of memory (`maxmemory` reached with `noeviction`): new work is refused.
    #[error("redis is out of memory: the job was not enqueued ({0})")]
    OutOfMemory(String),
    /// Authentication failed; the URL's password is never part of the message.
    #[error("redis refused the credentials: {0}")]
    Auth(String),
    /// The Redis URL or a connection option is invalid.
    #[error("invalid redis connection settings: {0}")]
    Connection(String),
    /// A job's arguments could not be encoded as JSON.
    #[error("cannot encode the arguments of `{class}`: {source}")]
    Encode {
        /// Job class.
        class: String,
        /// serde_json's error.
        source: serde_json::Error,
    },
    /// A payload's `args` do not fit the job type.
    #[error("cannot decode the arguments of `{class}`: {reason}")]
    Decode {
        /// Job class.
        class: String,
        /// What was expected and what was found.
        reason: String,
    },
    /// A payload is not a Sidekiq job (not JSON, not an object, missing fields…).
    #[error("malformed payload: {0}")]
    Malformed(String),
    /// The payload is larger than the client's maximum.
    #[error("the payload of `{class}` is {size} bytes, above the maximum of {max} bytes")]
    PayloadTooLarge {
        /// Job class.
        class: String,
        /// Encoded size in bytes.
        size: usize,
        /// The configured maximum.
        max: usize,
    },
    /// No registered job type has this class name.
    #[error("unknown job class `{class}`")]
    UnknownJob {
        /// The payload's class.
        class: String,
    },
    /// Two Rust types declare the same class name.
    #[error("two job types share the class name `{class}`: `{first}` and `{second}`")]
    DuplicateClass {
        /// The shared class name.
        class: String,
        /// The first type.
        first: String,
        /// The second type.
        second: String,
    },
    /// A client middleware stopped the push; nothing was written.
    #[error("a client middleware stopped the push of `{class}` (jid {jid})")]
    Stopped {
        /// Job class.
        class: String,
        /// The jid the job would have had.
        jid: String,
    },
    /// A tenant id is not acceptable (empty ids are "no tenant", not an error).
    #[error("invalid tenant id: {0}")]
    InvalidTenant(String),
    /// Invalid configuration (queue list, durations, limits…).
    #[error("invalid configuration: {0}")]
    Config(String),
}

impl Error {
    /// Maps a Redis error, recognising OOM and authentication replies.
    pub(crate) fn from_redis(err: redis::RedisError) -> Self {
        let text = err.to_string();
        if text.contains("OOM") && text.contains("maxmemory") {
            Error::OutOfMemory(text)
        } else if matches!(err.kind(), redis::ErrorKind::AuthenticationFailed)
            || text.contains("WRONGPASS")
            || text.contains("NOAUTH")
        {
            Error::Auth(text)
        } else {
            Error::Redis(err)
        }
    }

    /// True for errors that a retry may cure (connection trouble, OOM, timeouts).
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Redis(e) => {
                e.is_io_error()
                    || e.is_timeout()
                    || e.is_connection_dropped()
                    || e.is_connection_refusal()
                    || matches!(
                        e.kind(),
                        redis::ErrorKind::Server(redis::ServerErrorKind::BusyLoading)
                            | redis::ErrorKind::Server(redis::ServerErrorKind::TryAgain)
                            | redis::ErrorKind::Server(redis::ServerErrorKind::MasterDown)
                            | redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly)
                    )
            }
            Error::OutOfMemory(_) => true,
            _ => false,
        }
    }
}

/// What a job's `perform` returns on failure: the error and what to do next.
///
/// Any `E: std::error::Error` converts with `?` into a retryable `JobError`.
pub struct JobError {
    kind: JobErrorKind,
    class: String,
    message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum JobErrorKind {
    Retry,
    RetryIn(Duration),
    Discard,
}

impl JobError {
    /// A failure retried with Sidekiq's backoff (the default for `?`).
    pub fn retry(message: impl fmt::Display) -> Self {
        JobError {
            kind: JobErrorKind::Retry,
            class: "JobError".into(),
            message: message.to_string(),
        }
    }

    /// A failure retried after `delay` instead of the backoff (the attempt still counts).
    pub fn retry_in(delay: Duration, message: impl fmt::Display) -> Self {
        JobError {
            kind: JobErrorKind::RetryIn(delay),
            class: "JobError".into(),
            message: message.to_string(),
        }
    }

    /// A failure that must not be retried; the job goes to `dead` (if its `retry` allows).
    pub fn discard(message: impl fmt::Display) -> Self {
        JobError {
            kind: JobErrorKind::Discard,
            class: "JobError".into(),
            message: message.to_string(),
        }
    }

    /// Sets the `error_class` written to the payload (Ruby tools show it).
    #[must_use]
    pub fn with_class(mut self, class: impl Into<String>) -> Self {
        self.class = class.into();
        self
    }

    /// The `error_class` recorded for this failure.
    pub fn class(&self) -> &str {
        &self.class
    }

    /// The `error_message` recorded for this failure.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// True when the job should not be retried.
    pub fn is_discard(&self) -> bool {
        self.kind == JobErrorKind::Discard
    }

    pub(crate) fn kind(&self) -> JobErrorKind {
        self.kind
    }
}

impl fmt::Debug for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobError")
            .field("kind", &self.kind)
            .field("class", &self.class)
            .field("message", &self.message)
            .finish()
    }
}

impl fmt::Display for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.class, self.message)
    }
}

impl<E: std::error::Error> From<E> for JobError {
    fn from(err: E) -> Self {
        let full = std::any::type_name::<E>();
        let short = full.rsplit("::").next().unwrap_or(full);
        let mut message = err.to_string();
        let mut source = err.source();
        while let Some(s) = source {
            message.push_str(": ");
            message.push_str(&s.to_string());
            source = s.source();
        }
        JobError {
            kind: JobErrorKind::Retry,
            class: short.to_owned(),
            message,
        }
    }
}
