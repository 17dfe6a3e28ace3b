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
    /// Redis failed a command in a way no other variant names (a script
    /// error, an unexpected reply…).
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// Redis could not be reached or the connection broke (refused, reset,
    /// timed out, broken pipe). `maybe_ran` is false when the command was
    /// never sent (a retry cannot run it twice), true when it was sent and its
    /// reply was lost (it may have run).
    #[error("redis is unreachable ({detail}): {}", if *.maybe_ran {
        "the command was sent and may have run; check before repeating it"
    } else {
        "nothing was sent; it can be repeated once redis is back"
    })]
    Unreachable {
        /// What the connection reported.
        detail: String,
        /// Whether the command may have run.
        maybe_ran: bool,
    },
    /// Redis is blocked by a long script or function (`BUSY`, after
    /// `busy-reply-threshold`): it ran nothing of this command.
    #[error(
        "redis is busy running a script ({0}): retry shortly, or end that script with SCRIPT KILL"
    )]
    Busy(String),
    /// Redis is loading its dataset after a restart (`LOADING`): it ran
    /// nothing of this command.
    #[error("redis is loading its dataset ({0}): retry in a few seconds")]
    Loading(String),
    /// The server is a read-only replica (`READONLY`), e.g. a primary demoted
    /// by a failover: it wrote nothing.
    #[error(
        "redis is a read-only replica ({0}): point the client at the primary (after a failover the client reconnects by itself)"
    )]
    ReadOnly(String),
    /// Redis is out of memory (`maxmemory` reached with `noeviction`): it
    /// refused this write and wrote nothing.
    #[error("redis is out of memory ({0}): the write was refused; free memory or raise maxmemory")]
    OutOfMemory(String),
    /// Redis stopped accepting writes after a failed snapshot (`MISCONF`,
    /// `stop-writes-on-bgsave-error`): it wrote nothing.
    #[error(
        "redis refuses writes after a failed save ({0}): fix its disk or dir; writes resume after the next good save"
    )]
    WritesStopped(String),
    /// A cluster cannot serve the key's slot now (`CLUSTERDOWN`, `TRYAGAIN`,
    /// `MASTERDOWN`): nothing ran.
    #[error("the redis cluster cannot serve this key now ({0}): retry shortly")]
    ClusterDown(String),
    /// Redis does not have a fairjob script (`NOSCRIPT`) and loading it
    /// failed or was undone at once (`SCRIPT FLUSH`): nothing ran.
    #[error(
        "redis does not have fairjob's script ({0}): retry; if it persists, check that SCRIPT LOAD is allowed"
    )]
    NoScript(String),
    /// A push was sent but did not complete: its reply was lost, or a bulk
    /// push's later part was refused after an earlier part was written. The
    /// job(s) may have been enqueued; pushing again may enqueue them twice.
    /// The jids say which.
    #[error("the push of job {} did not complete and it may have been enqueued: check before pushing it again ({source})", jids_text(.jids))]
    MaybeEnqueued {
        /// The jids of the push (one, or a bulk push's batch).
        jids: Vec<String>,
        /// What happened to the reply.
        source: Box<Error>,
    },
    /// Authentication failed; the URL's password is never part of the message.
    #[error("redis refused the credentials: {0}")]
    Auth(String),
    /// Connecting failed in a way that points at the settings (a TLS URL
    /// to a plain port or the reverse, a cluster that does not answer); a
    /// server that is simply down is [`Error::Unreachable`].
    #[error("cannot connect to redis: {0}")]
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
    /// A unique job's key is held by another job (`#[unique]`,
    /// `on_conflict = "reject"`, or a `"replace"` whose holder no longer
    /// waits): nothing was written.
    #[error("not enqueued: duplicate of job {jid}")]
    Duplicate {
        /// The jid of the job that holds the key.
        jid: String,
    },
    /// Invalid configuration (queue list, durations, limits…).
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A periodic schedule's expression (or catch-up policy) does not parse,
    /// or never fires.
    #[error("periodic schedule `{name}`: {reason}")]
    InvalidSchedule {
        /// The schedule's name.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A periodic schedule names a time zone the system's database lacks.
    #[error(
        "periodic schedule `{name}`: unknown time zone `{zone}` (expected an IANA name such as `Europe/Berlin`, or `UTC`)"
    )]
    UnknownZone {
        /// The schedule's name.
        name: String,
        /// The zone given.
        zone: String,
    },
    /// No periodic schedule of this name.
    #[error("no periodic schedule named `{0}`")]
    NoSchedule(String),
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
    /// A batch that has fired `complete` takes no more members.
    #[error("batch {bid} has finished (it fired `complete`): it takes no more jobs")]
    BatchFinished {
        /// The batch's id.
        bid: String,
    },
    /// No batch has this id (never committed, or its data expired).
    #[error("no batch {bid}: it was never committed or its data has expired")]
    NoSuchBatch {
        /// The batch's id.
        bid: String,
    },
    /// A workflow that cannot be committed as built (a cycle, an unknown or
    /// duplicate step name…, named in the message), or a step's result
    /// that cannot be recorded or read.
    #[error("workflow: {0}")]
    Workflow(String),
    /// A batch that cannot be committed as built (the reason says why).
    #[error("batch: {0}")]
    Batch(String),
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
    /// Maps a Redis error to its variant by the error code Redis sent (`OOM`,
    /// `BUSY`, `LOADING`, `READONLY`, `MISCONF`, `CLUSTERDOWN`/`TRYAGAIN`/
    /// `MASTERDOWN`, `NOSCRIPT`, `NOAUTH`/`WRONGPASS`) or by what the
    /// connection reported (unreachable: sent or not). A pipeline's errors
    /// collapse to its first (they repeat one refusal), so no raw pipeline
    /// dump reaches a caller.
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
        // A pipeline's (or a single reply's) server errors: the first one.
        let err = match err
            .clone()
            .into_server_errors()
            .and_then(|items| items.first().map(|(_, e)| e.clone()))
        {
            Some(first)
                if err.kind() != redis::ErrorKind::Server(redis::ServerErrorKind::ExecAbort) =>
            {
                redis::RedisError::from(first)
            }
            _ => err,
        };
        if matches!(err.kind(), redis::ErrorKind::AuthenticationFailed) {
            return Error::Auth(err.to_string());
        }
        if let Some(code) = err.code() {
            let said = || said(&err, code);
            return match code {
                "OOM" => Error::OutOfMemory(said()),
                "BUSY" => Error::Busy(said()),
                "LOADING" => Error::Loading(said()),
                "READONLY" => Error::ReadOnly(said()),
                "MISCONF" => Error::WritesStopped(said()),
                "CLUSTERDOWN" | "TRYAGAIN" | "MASTERDOWN" => Error::ClusterDown(said()),
                "NOSCRIPT" => Error::NoScript(said()),
                "NOAUTH" | "WRONGPASS" => Error::Auth(err.to_string()),
                _ => Error::Redis(err),
            };
        }
        match unreachable(&err) {
            Some(maybe_ran) => Error::Unreachable {
                detail: err.to_string(),
                maybe_ran,
            },
            None => Error::Redis(err),
        }
    }

    /// True for errors that a retry may cure: Redis unreachable, or refusing
    /// for a while (busy, loading, a read-only replica, out of memory, writes
    /// stopped, a cluster electing a primary or moving slots, a script to
    /// load again). A push whose reply was lost is transient too, but must
    /// not be repeated blindly ([`Error::is_safe_to_repeat`]).
    pub fn is_transient(&self) -> bool {
        use redis::ServerErrorKind as S;
        match self {
            Error::Redis(e) => {
                e.is_io_error()
                    || e.is_timeout()
                    || e.is_cluster_error()
                    || matches!(e.kind(), redis::ErrorKind::Server(S::Moved | S::Ask))
            }
            Error::Unreachable { .. }
            | Error::Busy(_)
            | Error::Loading(_)
            | Error::ReadOnly(_)
            | Error::OutOfMemory(_)
            | Error::WritesStopped(_)
            | Error::ClusterDown(_)
            | Error::NoScript(_)
            | Error::MaybeEnqueued { .. }
            | Error::Connection(_) => true,
            _ => false,
        }
    }

    /// True when the command certainly did not run, so repeating it cannot
    /// run it twice: Redis refused it (a refused script wrote nothing) or it
    /// was never sent.
    pub fn is_safe_to_repeat(&self) -> bool {
        match self {
            Error::Unreachable { maybe_ran, .. } => !maybe_ran,
            Error::Busy(_)
            | Error::Loading(_)
            | Error::ReadOnly(_)
            | Error::OutOfMemory(_)
            | Error::WritesStopped(_)
            | Error::ClusterDown(_)
            | Error::NoScript(_) => true,
            _ => false,
        }
    }

    /// True when Redis answered but refuses writes for now (out of memory,
    /// `MISCONF`, a read-only replica, busy, loading, a cluster that is down):
    /// what a worker's health reports as degraded.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            Error::Busy(_)
                | Error::Loading(_)
                | Error::ReadOnly(_)
                | Error::OutOfMemory(_)
                | Error::WritesStopped(_)
                | Error::ClusterDown(_)
        )
    }

    /// A short, stable name of the error's kind, the label of
    /// `fairjob_redis_errors_total` (`unreachable`, `busy`, `loading`,
    /// `readonly`, `oom`, `misconf`, `clusterdown`, `noscript`, `auth`,
    /// `maybe_enqueued`, `other`).
    pub fn redis_kind(&self) -> &'static str {
        match self {
            Error::Unreachable { .. } | Error::Connection(_) => "unreachable",
            Error::Busy(_) => "busy",
            Error::Loading(_) => "loading",
            Error::ReadOnly(_) => "readonly",
            Error::OutOfMemory(_) => "oom",
            Error::WritesStopped(_) => "misconf",
            Error::ClusterDown(_) => "clusterdown",
            Error::NoScript(_) => "noscript",
            Error::Auth(_) => "auth",
            Error::MaybeEnqueued { .. } => "maybe_enqueued",
            _ => "other",
        }
    }
}

/// The jids of a push, for a message: one, or the first and how many more.
fn jids_text(jids: &[String]) -> String {
    match jids {
        [] => "(none)".to_owned(),
        [one] => one.clone(),
        [first, rest @ ..] => format!("{first} (and {} more of its batch)", rest.len()),
    }
}

/// What Redis said: its code and the first line of its message.
fn said(err: &redis::RedisError, code: &str) -> String {
    let detail = err.detail().unwrap_or_default();
    let line = detail.lines().next().unwrap_or_default().trim();
    if line.is_empty() {
        code.to_owned()
    } else {
        format!("{code} {line}")
    }
}

/// Whether `err` says Redis could not be reached: `Some(false)` when the
/// command was never sent (the connection was refused or already closed
/// before it was written), `Some(true)` when it was sent and the reply was
/// lost (reset, end of stream, timed out), `None` for another error.
///
/// The Redis client reports a connection it already knew was closed as a
/// broken pipe; the same code also reaches a command in flight when the
/// server drops the connection between running it and replying, a window
/// of microseconds in which a retried push may be enqueued twice
/// (at-least-once, as the README says).
fn unreachable(err: &redis::RedisError) -> Option<bool> {
    if !err.is_io_error() {
        return None;
    }
    if err.is_connection_refusal() {
        return Some(false);
    }
    // The client keeps the I/O error behind a shared pointer: its kind shows
    // only in the text (`broken pipe`, `Broken pipe (os error 32)`).
    let text = err.to_string().to_lowercase();
    let never_sent = ["broken pipe", "not connected", "connection refused"]
        .iter()
        .any(|t| text.contains(t));
    Some(!never_sent)
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
        let busy = parsed(
            "-BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.\r\n",
        );
        assert!(matches!(busy, Error::Busy(_)), "{busy:?}");
        assert!(busy.to_string().contains("BUSY Redis is busy"), "{busy}");
        assert!(busy.is_safe_to_repeat() && busy.is_transient() && busy.is_refusal());
        for (reply, kind) in [
            (
                "-LOADING Redis is loading the dataset in memory\r\n",
                "loading",
            ),
            (
                "-READONLY You can't write against a read only replica.\r\n",
                "readonly",
            ),
            (
                "-MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk.\r\n",
                "misconf",
            ),
            (
                "-TRYAGAIN Multiple keys request during rehashing of slot\r\n",
                "clusterdown",
            ),
            ("-CLUSTERDOWN The cluster is down\r\n", "clusterdown"),
            ("-NOSCRIPT No matching script.\r\n", "noscript"),
            (
                "-OOM command not allowed when used memory > 'maxmemory'.\r\n",
                "oom",
            ),
        ] {
            let e = parsed(reply);
            assert_eq!(e.redis_kind(), kind, "{e:?}");
            assert!(e.is_safe_to_repeat() && e.is_transient(), "{e:?}");
            assert!(!e.to_string().contains('\n'), "one line: {e}");
        }
        assert!(
            !parsed("-OOM command not allowed\r\n")
                .to_string()
                .contains("enqueued"),
            "the out-of-memory text claims nothing about a job"
        );
        // A message that merely mentions the words is not misread.
        assert!(matches!(
            parsed("-ERR user script says OOM maxmemory WRONGPASS\r\n"),
            Error::Redis(_)
        ));
    }

    #[test]
    fn connection_failures_say_whether_the_command_may_have_run() {
        use std::io::{Error as Io, ErrorKind as K};
        let of = |k: K| Error::from_redis(redis::RedisError::from(Io::from(k)));
        for k in [K::ConnectionRefused, K::BrokenPipe, K::NotConnected] {
            let e = of(k);
            assert!(
                matches!(
                    e,
                    Error::Unreachable {
                        maybe_ran: false,
                        ..
                    }
                ),
                "{k:?}: {e:?}"
            );
            assert!(e.is_safe_to_repeat(), "{e}");
            assert!(e.to_string().contains("nothing was sent"), "{e}");
        }
        for k in [K::ConnectionReset, K::UnexpectedEof, K::TimedOut] {
            let e = of(k);
            assert!(
                matches!(
                    e,
                    Error::Unreachable {
                        maybe_ran: true,
                        ..
                    }
                ),
                "{k:?}: {e:?}"
            );
            assert!(!e.is_safe_to_repeat() && e.is_transient(), "{e}");
            assert!(e.to_string().contains("may have run"), "{e}");
        }
        let lost = Error::MaybeEnqueued {
            jids: vec!["abc".into()],
            source: Box::new(of(K::ConnectionReset)),
        };
        assert!(lost.to_string().contains("job abc"), "{lost}");
        assert!(!lost.is_safe_to_repeat());
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
