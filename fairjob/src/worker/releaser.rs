//! The rate releaser: moves rate-limited waiters back to their queues when
//! their limiter has room, at the allowed rate (see [`crate::rate`]).
//!
//! It reads the head of the release schedule (`rates:due`, key → next release
//! time on Redis's clock) and sleeps until the earliest one: nobody polls the
//! waiting jobs. A job parked by this process wakes it early (a new key's
//! first release may be sooner than what it sleeps for); with nothing due it
//! looks again every [`IDLE`] (which is how it sees keys parked or resumed by
//! other processes). Every worker runs one; the release script judges each
//! key by its rule, so racing releasers release no more than the rate allows.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::{Shared, backoff_sleep};

/// The longest sleep: a key whose release was scheduled elsewhere (another
/// process parked a job, an operator resumed it) is seen within this.
const IDLE: Duration = Duration::from_millis(250);
/// Keys read from the schedule's head per round.
const HEAD: usize = 64;

/// Wakes the releaser when this process parks a job.
#[derive(Debug, Default)]
pub(crate) struct ReleaseBell {
    notify: Notify,
    earliest: Mutex<Option<u64>>,
}

impl ReleaseBell {
    /// A job was parked; its key's next release is `next` (µs, Redis's clock).
    pub(crate) fn notify(&self, next: Option<u64>) {
        if let Some(at) = next {
            let mut e = self.earliest.lock().expect("bell lock");
            if e.is_none_or(|cur| at < cur) {
                *e = Some(at);
                self.notify.notify_one();
            }
        }
    }

    fn take(&self) {
        *self.earliest.lock().expect("bell lock") = None;
    }
}

pub(crate) async fn run(shared: std::sync::Arc<Shared>, stop: CancellationToken) {
    let mut failures = 0;
    // The key due first, released before the schedule is read again (one
    // round trip less between its due time and its release).
    let mut hot: Option<String> = None;
    loop {
        if shared.control.is_quiet() {
            tokio::select! {
                _ = tokio::time::sleep(IDLE) => continue,
                _ = stop.cancelled() => return,
            }
        }
        shared.rate_release.take();
        let wait = match release_due(&shared, hot.take()).await {
            Ok((wait, next_hot)) => {
                failures = 0;
                hot = next_hot;
                wait
            }
            Err(e) => {
                failures += 1;
                shared.redis_trouble("rate releaser", &e);
                backoff_sleep(failures).await;
                continue;
            }
        };
        if wait.is_zero() {
            continue;
        }
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = shared.rate_release.notify.notified() => hot = None,
            _ = stop.cancelled() => return,
        }
    }
}

/// Releases `hot` (the key that was due first), then every key due now;
/// returns how long to sleep until the next, and which key that is.
async fn release_due(
    shared: &Shared,
    hot: Option<String>,
) -> crate::Result<(Duration, Option<String>)> {
    let broker = shared.client.broker();
    if let Some(member) = hot {
        broker.rate_release(&member).await?;
    }
    let (now, due) = broker.rates_due(HEAD).await?;
    let read_at = Instant::now();
    let mut next: Option<u64> = None;
    let mut next_member: Option<String> = None;
    let full = due.len() == HEAD;
    let last_due = due.last().is_some_and(|(_, at)| *at <= now);
    for (member, at) in due {
        let at = if at <= now {
            let r = broker.rate_release(&member).await?;
            match r.next {
                Some(n) => n.saturating_sub(r.now) + now,
                None => continue,
            }
        } else {
            at
        };
        if next.is_none_or(|n| at < n) {
            next = Some(at);
            next_member = Some(member);
        }
    }
    Ok(match next {
        _ if full && last_due => (Duration::ZERO, None),
        Some(at) if at.saturating_sub(now) <= IDLE.as_micros() as u64 => {
            // From the read, not from now: the releases since took time.
            let until = read_at + Duration::from_micros(at.saturating_sub(now));
            (until.saturating_duration_since(Instant::now()), next_member)
        }
        _ => (IDLE, None),
    })
}
