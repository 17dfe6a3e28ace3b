//! Safe retries of a push within the client's retry deadline
//! ([`ClientConfig::retry_deadline`](crate::config::ClientConfig::retry_deadline)).
//!
//! A push (single, bulk, scheduled) is repeated, with a growing pause, only
//! when repeating it cannot enqueue a job twice
//! ([`Error::is_safe_to_repeat`]): Redis refused it (busy, loading, a
//! read-only replica, out of memory, writes stopped after a failed save, a
//! cluster electing a primary — a refused script wrote nothing) or it failed
//! before it was sent. A read-only reply first drops the connection and opens
//! a new one (a managed Redis's failover leaves the old one on a demoted
//! replica behind the same name). A push whose reply was lost after sending
//! is never repeated: it fails with [`Error::MaybeEnqueued`], which carries
//! its jids. Once the deadline is spent the caller gets the typed error; a
//! deadline of zero turns retries off. One attempt is bounded by the
//! connection's `response_timeout`.
//!
//! The decision ([`next`]) and the pauses ([`pause`]) are pure functions.

use std::future::Future;
use std::time::{Duration, Instant};

use super::Client;
use crate::error::{Error, Result};

/// The first pause; each next one doubles, up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(20);
/// The longest pause between two attempts.
const MAX_PAUSE: Duration = Duration::from_millis(400);

/// What to do after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// Try again after this pause; open a new connection first when `reconnect`.
    Retry { after: Duration, reconnect: bool },
    /// Give up: hand the error to the caller.
    Fail,
}

/// The pause before attempt `attempt + 1` (`attempt` counts from 0).
pub(crate) fn pause(attempt: u32) -> Duration {
    FIRST_PAUSE
        .saturating_mul(1u32 << attempt.min(10))
        .min(MAX_PAUSE)
}

/// After attempt `attempt` failed with `err`, `elapsed` into a push whose
/// retry deadline is `deadline`: retry (when safe and the pause still ends
/// before the deadline) or fail.
pub(crate) fn next(err: &Error, attempt: u32, elapsed: Duration, deadline: Duration) -> Next {
    if !err.is_safe_to_repeat() {
        return Next::Fail;
    }
    let after = pause(attempt);
    if elapsed + after > deadline {
        return Next::Fail;
    }
    Next::Retry {
        after,
        reconnect: matches!(err, Error::ReadOnly(_)),
    }
}

/// The error a caller sees: a lost reply becomes [`Error::MaybeEnqueued`]
/// with the push's jids.
fn for_caller(err: Error, jids: impl FnOnce() -> Vec<String>) -> Error {
    match err {
        Error::Unreachable {
            maybe_ran: true, ..
        } => Error::MaybeEnqueued {
            jids: jids(),
            source: Box::new(err),
        },
        // The broker knows that part of a push was written, not its jids.
        Error::MaybeEnqueued { jids: j, source } if j.is_empty() => Error::MaybeEnqueued {
            jids: jids(),
            source,
        },
        other => other,
    }
}

/// Counts one failed Redis call by kind (`fairjob_redis_errors_total`).
pub(crate) fn count_error(err: &Error) {
    let kind = err.redis_kind();
    if kind != "other" || matches!(err, Error::Redis(_)) {
        ::metrics::counter!(crate::metrics::REDIS_ERRORS_TOTAL, "kind" => kind).increment(1);
    }
}

impl Client {
    /// Runs `op` (one push) until it succeeds, fails in a way that must not
    /// be repeated, or the retry deadline is spent; `jids` names the jobs for
    /// a lost reply's error.
    pub(crate) async fn retrying<T, F, Fut>(
        &self,
        jids: impl FnOnce() -> Vec<String>,
        mut op: F,
    ) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let deadline = self.inner.config.retry_deadline;
        let started = Instant::now();
        let mut attempt = 0;
        loop {
            let err = match op().await {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            count_error(&err);
            match next(&err, attempt, started.elapsed(), deadline) {
                Next::Fail => return Err(for_caller(err, jids)),
                Next::Retry { after, reconnect } => {
                    tracing::debug!(error = %err, attempt, ?after, "push refused; retrying");
                    if reconnect {
                        self.broker().reconnect();
                    }
                    tokio::time::sleep(after).await;
                    attempt += 1;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn busy() -> Error {
        Error::Busy("BUSY".into())
    }

    #[test]
    fn pauses_grow_and_stay_bounded() {
        assert_eq!(pause(0), Duration::from_millis(20));
        assert_eq!(pause(1), Duration::from_millis(40));
        assert_eq!(pause(4), Duration::from_millis(320));
        assert_eq!(pause(5), MAX_PAUSE);
        assert_eq!(pause(40), MAX_PAUSE);
    }

    #[test]
    fn refusals_are_retried_until_the_deadline() {
        let d = Duration::from_secs(2);
        assert!(matches!(
            next(&busy(), 0, Duration::ZERO, d),
            Next::Retry {
                reconnect: false,
                ..
            }
        ));
        assert_eq!(
            next(&busy(), 5, Duration::from_millis(1700), d),
            Next::Fail,
            "a pause that would end after the deadline"
        );
        assert_eq!(next(&busy(), 0, Duration::ZERO, Duration::ZERO), Next::Fail);
        assert!(matches!(
            next(&Error::ReadOnly("READONLY".into()), 0, Duration::ZERO, d),
            Next::Retry {
                reconnect: true,
                ..
            }
        ));
        let unsent = Error::Unreachable {
            detail: "broken pipe".into(),
            maybe_ran: false,
        };
        assert!(matches!(
            next(&unsent, 0, Duration::ZERO, d),
            Next::Retry { .. }
        ));
    }

    #[test]
    fn a_lost_reply_is_never_repeated_and_names_its_jobs() {
        let lost = Error::Unreachable {
            detail: "reset".into(),
            maybe_ran: true,
        };
        assert_eq!(
            next(&lost, 0, Duration::ZERO, Duration::from_secs(2)),
            Next::Fail
        );
        match for_caller(lost, || vec!["j1".into()]) {
            Error::MaybeEnqueued { jids, .. } => assert_eq!(jids, ["j1"]),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            next(
                &Error::Config("x".into()),
                0,
                Duration::ZERO,
                Duration::from_secs(2)
            ),
            Next::Fail
        );
    }
}
