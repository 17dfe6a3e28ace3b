//! [`eventually!`](crate::eventually): poll a condition until it holds or a
//! timeout passes, then fail saying what was awaited and what was seen last.
//!
//! The one way the tests wait for something to happen; never a fixed sleep
//! before an assertion that something did happen.

use std::fmt::Debug;
use std::time::Duration;

/// How long [`eventually!`](crate::eventually) waits when not told otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// How often [`eventually!`](crate::eventually) looks again.
const POLL: Duration = Duration::from_millis(20);

/// The longest rendering of a last observed value put into a failure message.
const SHOWN: usize = 2000;

/// Waits for `eventually!`'s next look.
#[doc(hidden)]
pub async fn pause() {
    tokio::time::sleep(POLL).await;
}

/// Fails an `eventually!` whose condition never held, showing `name`'s last value.
#[doc(hidden)]
#[track_caller]
pub fn timed_out<T: Debug>(timeout: Duration, what: &str, name: &str, last: &T) -> ! {
    let mut shown = format!("{last:?}");
    if shown.len() > SHOWN {
        let cut = (0..=SHOWN)
            .rev()
            .find(|i| shown.is_char_boundary(*i))
            .unwrap_or(0);
        shown.truncate(cut);
        shown.push_str(" …");
    }
    panic!("eventually: {what}: not within {timeout:?}; last `{name}` = {shown}")
}

/// Fails an `eventually!` whose condition `cond` was still false.
#[doc(hidden)]
#[track_caller]
pub fn still_false(timeout: Duration, what: &str, cond: &str) -> ! {
    panic!("eventually: {what}: not within {timeout:?}; `{cond}` is still false")
}

/// Polls a condition (every 20 ms, in an async test) until it holds, and panics
/// with a message saying what it waited for once the timeout (10 s unless
/// `within` says otherwise) has passed.
///
/// ```no_run
/// # async fn example() {
/// use std::time::Duration;
/// use fairjob_tests::{Redis, eventually};
///
/// let redis = Redis::start().await;
/// // A condition, then what it means (a format string and its arguments,
/// // evaluated only on failure):
/// eventually!(redis.zcard(redis.keys().retry()).await == 1, "the failed job waits in `retry`");
/// // A value looked at again each time: the failure shows its last value, and
/// // the macro returns it once the condition holds.
/// let n = eventually!(let n = redis.recorded().await; n >= 3, "three jobs record");
/// // Another timeout:
/// eventually!(within Duration::from_secs(60), redis.recorded().await >= 300, "the backlog drains");
/// # }
/// ```
#[macro_export]
macro_rules! eventually {
    (within $timeout:expr, let $v:ident = $value:expr; $cond:expr, $($what:tt)+) => {{
        let timeout: ::std::time::Duration = $timeout;
        let deadline = ::std::time::Instant::now() + timeout;
        loop {
            let $v = $value;
            if $cond {
                break $v;
            }
            if ::std::time::Instant::now() >= deadline {
                $crate::wait::timed_out(timeout, &format!($($what)+), stringify!($v), &$v);
            }
            $crate::wait::pause().await;
        }
    }};
    (within $timeout:expr, $cond:expr, $($what:tt)+) => {{
        let timeout: ::std::time::Duration = $timeout;
        let deadline = ::std::time::Instant::now() + timeout;
        while !$cond {
            if ::std::time::Instant::now() >= deadline {
                $crate::wait::still_false(timeout, &format!($($what)+), stringify!($cond));
            }
            $crate::wait::pause().await;
        }
    }};
    (let $v:ident = $value:expr; $cond:expr, $($what:tt)+) => {
        $crate::eventually!(within $crate::wait::DEFAULT_TIMEOUT, let $v = $value; $cond, $($what)+)
    };
    ($cond:expr, $($what:tt)+) => {
        $crate::eventually!(within $crate::wait::DEFAULT_TIMEOUT, $cond, $($what)+)
    };
}

/// Polls `check` until it holds or `timeout` passes; returns whether it held
/// (for tests that report their own failure, where [`eventually!`] would panic).
pub async fn wait_until<F, Fut>(timeout: std::time::Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = std::time::Instant::now() + timeout;
    while std::time::Instant::now() < deadline {
        if check().await {
            return true;
        }
        pause().await;
    }
    check().await
}
