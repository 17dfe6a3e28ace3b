//! Errors: the library's [`Error`] and what a job's `perform` returns, [`JobError`].
//!
//! The bottom layer: it names no other module of the crate. `Error` keeps its
//! sources; `JobError` says what should happen next to the job (retry, retry
//! after a delay, or discard).

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
    /// The Redis URL or a connection option is invalid, or the server cannot be reached.
    #[error("invalid redis connection settings: {0}")]
    Connection(String),
    /// A TLS file given to the client (CA, client certificate or its key)
    /// cannot be read or holds no usable PEM; the message names the file.
    #[error("TLS file {}: {problem}", .path.display())]
    TlsFile {
        /// The file, as given.
        path: std::path::PathBuf,
        /// What is wrong with it.
        problem: String,
    },
    /// The TLS handshake with Redis failed: the server's certificate is not
    /// trusted or not valid for the URL's host name, or the server refused the
    /// client (mutual TLS without a client certificate, or one it does not trust).
    #[error("TLS with redis failed: {0}")]
    Tls(String),
    /// A job's arguments could not be encoded as JSON.
    #[error("cannot encode the arguments of `{class}`: {source}")]
    Encode {
        /// Job class.
        class: String,
        /// serde_json's error.
        source: serde_json::Error,
    },
    /// A payload's `args` do not fit the job type.
    #[error("cannot decode the arguments of `{class}`: {source}")]
    Decode {
        /// Job class.
        class: String,
        /// What was wrong.
        source: DecodeError,
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
    #[error(
        "no job type is registered for class `{class}` in this worker \
         (Ruby-only and Rust-only classes need their own queues)"
    )]
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
    /// Invalid configuration (queue list, durations, limits…).
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A push reached Redis but fewer replicas than
    /// [`ClientBuilder::wait_replicas`](crate::ClientBuilder::wait_replicas)
    /// asked for confirmed it in time: a failover now could lose it. The job
    /// is in Redis (unless that failover happens), so pushing it again may
    /// enqueue it twice.
    #[error(
        "only {acked} of {wanted} replicas confirmed the push within {timeout_ms} ms \
         (it is on the primary; a failover before it replicates would lose it)"
    )]
    NotReplicated {
        /// Replicas that confirmed.
        acked: u32,
        /// Replicas asked for.
        wanted: u32,
        /// The wait, in milliseconds.
        timeout_ms: u64,
    },
    /// An operating-system facility failed (a signal handler could not be installed…).
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// fairjob's testing mode (`fairjob::testing::Fake`) keeps jobs in memory
    /// and has no Redis: this command or operation needs one.
    #[error("{}", not_in_testing_mode(.0))]
    NotInTestingMode(String),
    /// A job performed by fairjob's testing mode failed (what its `perform` or
    /// a server middleware returned, or its panic).
    #[error("job `{class}` (jid {jid}) failed: {error_class}: {message}")]
    JobFailed {
        /// Job class.
        class: String,
        /// The jid.
        jid: String,
        /// The failure's `error_class`.
        error_class: String,
        /// The failure's `error_message`.
        message: String,
    },
    /// A request to fairjob's testing mode that it cannot carry out (nothing to
    /// perform, a drain that never ends…).
    #[error("fairjob testing mode: {0}")]
    Fake(String),
}

/// The description of the Redis client error that a command on a testing-mode
/// connection fails with; [`Error::from_redis`] turns it into
/// [`Error::NotInTestingMode`].
pub(crate) const NO_REDIS_IN_TESTING_MODE: &str = "fairjob's testing mode has no Redis";

/// What a testing-mode error says about `what` (a command, an operation).
pub(crate) fn not_in_testing_mode(what: &str) -> String {
    format!(
        "{what} is not available in fairjob's testing mode \
         (test it against a real Redis with fairjob::testing::RedisServer)"
    )
}

/// Why a payload's `args` do not decode into a job type.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// `args` holds another number of arguments than the type has fields.
    #[error("expected {expected} argument{} in `args`, got {got}", if *.expected == 1 { "" } else { "s" })]
    Arity {
        /// The type's arity.
        expected: usize,
        /// The payload's.
        got: usize,
    },
    /// `args` is not a JSON array.
    #[error("`args` is not a JSON array: {0}")]
    NotAnArray(#[source] serde_json::Error),
    /// An argument does not deserialize into the field's type.
    #[error("cannot decode `args`: {0}")]
    Json(#[source] serde_json::Error),
    /// An ActiveJob payload's `arguments` hold something fairjob cannot read
    /// (a custom serializer…), or are not ActiveJob's serialized job.
    #[error("ActiveJob {0}")]
    ActiveJob(#[source] ActiveJobArgumentError),
    /// One of an ActiveJob payload's arguments does not deserialize into the
    /// type; `path` names it (`[1]` the second argument, `[0].at` its key `at`).
    #[error("ActiveJob argument {path} does not fit: {source}")]
    ActiveJobArgument {
        /// Where the argument is.
        path: String,
        /// serde_json's error.
        #[source]
        source: serde_json::Error,
    },
    /// An ActiveJob payload names a type not declared `#[job(active_job)]`.
    #[error(
        "it arrived through ActiveJob (`{wrapper}`) but its Rust type is not declared `#[job(active_job)]`"
    )]
    NotActiveJob {
        /// The payload's wrapper class.
        wrapper: String,
    },
}

/// Why an ActiveJob payload's arguments do not decode (or a job's arguments
/// cannot be written in ActiveJob's form).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActiveJobArgumentError {
    /// `args` is not `[<serialized job>]`.
    NotSerialized(String),
    /// One argument (its path, like `[1].at`) does not fit.
    Argument {
        /// Where: `[index]` then `.key` / `[index]` inside it.
        path: String,
        /// What is wrong with it.
        problem: String,
    },
}

impl fmt::Display for ActiveJobArgumentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ActiveJobArgumentError::NotSerialized(why) => {
                write!(f, "`args` is not ActiveJob's serialized job: {why}")
            }
            ActiveJobArgumentError::Argument { path, problem } => {
                write!(f, "argument {path}: {problem}")
            }
        }
    }
}

impl std::error::Error for ActiveJobArgumentError {}

impl Error {
    /// Maps a Redis error, recognising out-of-memory and authentication replies
    /// by the error codes Redis sends (`OOM`, `NOAUTH`, `WRONGPASS`), also
    /// inside a pipeline's errors.
    pub(crate) fn from_redis(err: redis::RedisError) -> Self {
        if err.kind() == redis::ErrorKind::Client
            && err.to_string().starts_with(NO_REDIS_IN_TESTING_MODE)
        {
            let detail = err.detail().unwrap_or_default();
            let what = detail
                .split_once(" is not available")
                .map_or(detail, |(w, _)| w);
            return Error::NotInTestingMode(what.to_owned());
        }
        let has = |wanted: &[&str]| match err.code() {
            Some(code) => wanted.contains(&code),
            None => err
                .clone()
                .into_server_errors()
                .is_some_and(|items| items.iter().any(|(_, e)| wanted.contains(&e.code()))),
        };
        if has(&["OOM"]) {
            Error::OutOfMemory(err.to_string())
        } else if has(&["NOAUTH", "WRONGPASS"])
            || matches!(err.kind(), redis::ErrorKind::AuthenticationFailed)
        {
            Error::Auth(err.to_string())
        } else {
            Error::Redis(err)
        }
    }

    /// True for errors that a retry may cure (connection trouble, OOM, timeouts,
    /// a cluster that is moving slots or electing a primary).
    pub fn is_transient(&self) -> bool {
        use redis::ServerErrorKind as S;
        match self {
            Error::Redis(e) => {
                e.is_io_error()
                    || e.is_timeout()
                    || e.is_connection_dropped()
                    || e.is_connection_refusal()
                    || e.is_cluster_error()
                    || matches!(
                        e.kind(),
                        redis::ErrorKind::Server(
                            S::BusyLoading
                                | S::TryAgain
                                | S::MasterDown
                                | S::ReadOnly
                                | S::ClusterDown
                                | S::Moved
                                | S::Ask
                        )
                    )
            }
            Error::OutOfMemory(_) | Error::Connection(_) => true,
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

/// What should happen to a job after a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum JobErrorKind {
    /// Retried with Sidekiq's backoff.
    Retry,
    /// Retried after this delay.
    RetryIn(Duration),
    /// Not retried: the job goes to `dead` (if its options allow).
    Discard,
    /// Not a failure: the job gives its place back and goes to its queue's
    /// tail (its tenant's shard on a sharded queue) without using a retry
    /// (see [`JobError::yield_now`]).
    Yield,
}

impl JobError {
    /// A failure retried with Sidekiq's backoff (the default for `?`).
    pub fn retry(message: impl fmt::Display) -> Self {
        Self::new(JobErrorKind::Retry, message)
    }

    /// A failure retried after `delay` instead of the backoff (the attempt still counts).
    pub fn retry_in(delay: Duration, message: impl fmt::Display) -> Self {
        Self::new(JobErrorKind::RetryIn(delay), message)
    }

    /// A failure that must not be retried; the job goes to `dead` (if its `retry` allows).
    pub fn discard(message: impl fmt::Display) -> Self {
        Self::new(JobErrorKind::Discard, message)
    }

    /// Not a failure: the job yields. It goes back to its queue's tail (its
    /// tenant's shard on a sharded queue) as it is, without using a retry
    /// or counting a failure, and runs again from the start; an iterable job
    /// resumes from its cursor, a plain job from what it saved with
    /// [`JobContext::checkpoint`](crate::JobContext::checkpoint).
    pub fn yield_now() -> Self {
        Self::new(JobErrorKind::Yield, "yielded").with_class("Yield")
    }

    /// A yield of the iterable-job runner, its reason as the message.
    pub(crate) fn yield_for(reason: &'static str) -> Self {
        Self::new(JobErrorKind::Yield, reason).with_class("Yield")
    }

    /// True for [`JobError::yield_now`].
    pub fn is_yield(&self) -> bool {
        self.kind == JobErrorKind::Yield
    }

    fn new(kind: JobErrorKind, message: impl fmt::Display) -> Self {
        JobError {
            kind,
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

    /// What should happen next.
    pub fn kind(&self) -> JobErrorKind {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_error_codes_map_to_typed_errors() {
        let parsed = |reply: &str| -> Error {
            let v = redis::parse_redis_value(reply.as_bytes()).unwrap();
            match v {
                redis::Value::ServerError(e) => Error::from_redis(e.into()),
                other => panic!("{other:?}"),
            }
        };
        assert!(matches!(
            parsed("-OOM command not allowed when used memory > 'maxmemory'.\r\n"),
            Error::OutOfMemory(_)
        ));
        assert!(matches!(
            parsed("-WRONGPASS invalid username-password pair\r\n"),
            Error::Auth(_)
        ));
        assert!(matches!(
            parsed("-NOAUTH Authentication required.\r\n"),
            Error::Auth(_)
        ));
        // A message that merely mentions the words is not misread.
        assert!(matches!(
            parsed("-ERR user script says OOM maxmemory WRONGPASS\r\n"),
            Error::Redis(_)
        ));
    }

    #[test]
    fn a_testing_mode_refusal_reads_back_as_its_own_error() {
        let raw = redis::RedisError::from((
            redis::ErrorKind::Client,
            NO_REDIS_IN_TESTING_MODE,
            not_in_testing_mode("the Redis command PING"),
        ));
        let text = raw.to_string();
        assert!(
            text.contains("PING is not available in fairjob's testing mode"),
            "{text}"
        );
        match Error::from_redis(raw) {
            Error::NotInTestingMode(what) => assert_eq!(what, "the Redis command PING"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn decode_errors_keep_their_source() {
        let json = serde_json::from_str::<u8>("x").unwrap_err();
        let e = Error::Decode {
            class: "A".into(),
            source: DecodeError::Json(json),
        };
        let source = std::error::Error::source(&e).expect("a source");
        assert!(std::error::Error::source(source).is_some());
    }
}
