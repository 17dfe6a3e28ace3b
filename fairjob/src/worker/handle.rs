//! [`WorkerHandle`]: quiet or stop a running worker from elsewhere (tests,
//! embedding, Sidekiq's remote signals), and the OS signals that do the same:
//! TERM and INT stop gracefully, TSTP quiets (the platform's own SIGTSTP, which
//! is 20 on Linux and 18 on macOS and the BSDs).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use super::stall::Stalls;
use crate::error::{Error, Result};

/// Controls a running worker from elsewhere (tests, embedding, signal handlers).
#[derive(Debug, Clone)]
pub struct WorkerHandle {
    quiet: CancellationToken,
    stop: CancellationToken,
    fetching: Arc<AtomicBool>,
    stalls: Arc<Mutex<Stalls>>,
}

impl Default for WorkerHandle {
    fn default() -> Self {
        Self::new()
    }
}

impl WorkerHandle {
    /// A handle to pass to [`Worker::run_with`](super::Worker::run_with) (keep a
    /// clone to control the worker).
    pub fn new() -> Self {
        WorkerHandle {
            quiet: CancellationToken::new(),
            stop: CancellationToken::new(),
            fetching: Arc::new(AtomicBool::new(false)),
            stalls: Arc::default(),
        }
    }

    /// True once the worker was told to stop fetching (quiet or stop).
    pub fn is_quiet(&self) -> bool {
        self.quiet.is_cancelled() || self.stop.is_cancelled()
    }

    /// True while the worker's fetch loop runs: registered and taking jobs
    /// (retrying with backoff while Redis is away), not yet quiet or stopping.
    pub fn is_fetching(&self) -> bool {
        self.fetching.load(Ordering::Relaxed)
    }

    /// While Redis refuses this worker's lease renewals (busy, loading,
    /// writes stopped, a read-only replica, unreachable): the kind
    /// (`fairjob_redis_errors_total`'s label) and what Redis said. What the
    /// worker's `/readyz` reports as degraded.
    pub fn redis_refusal(&self) -> Option<(&'static str, String)> {
        self.stalls()
            .current()
            .map(|(kind, said)| (kind, said.to_owned()))
    }

    /// This worker's view of Redis stalls.
    pub(crate) fn stalls(&self) -> std::sync::MutexGuard<'_, Stalls> {
        self.stalls.lock().expect("stalls lock")
    }

    pub(crate) fn set_fetching(&self, on: bool) {
        self.fetching.store(on, Ordering::Relaxed);
    }

    /// True once the worker was told to shut down.
    pub fn is_stopping(&self) -> bool {
        self.stop.is_cancelled()
    }

    /// Resolves when the worker is told to stop fetching (quiet or stop).
    pub(crate) async fn stopped_fetching(&self) {
        tokio::select! {
            _ = self.quiet.cancelled() => {}
            _ = self.stop.cancelled() => {}
        }
    }

    /// Resolves when the worker is told to shut down.
    pub(crate) async fn stopping(&self) {
        self.stop.cancelled().await
    }

    /// Cancelled when the worker begins to stop (iterable jobs yield then).
    pub(crate) fn stop_token(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// Stops fetching new jobs; running ones finish (Sidekiq's TSTP).
    pub fn quiet(&self) {
        self.quiet.cancel();
    }

    /// Graceful shutdown (Sidekiq's TERM).
    pub fn stop(&self) {
        self.stop.cancel();
    }
}

/// The signal that quiets a worker: the platform's SIGTSTP.
#[cfg(unix)]
pub(crate) const SIGTSTP: i32 = libc::SIGTSTP;

/// Routes TERM and INT to [`WorkerHandle::stop`] and TSTP to
/// [`WorkerHandle::quiet`], for as long as the runtime lives.
#[cfg(unix)]
pub(crate) fn install_signals(handle: &WorkerHandle) -> Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let install = |kind: SignalKind, what: &'static str| {
        signal(kind).map_err(|source| Error::Io { what, source })
    };
    let mut term = install(SignalKind::terminate(), "installing the TERM handler")?;
    let mut int = install(SignalKind::interrupt(), "installing the INT handler")?;
    let mut tstp = install(SignalKind::from_raw(SIGTSTP), "installing the TSTP handler")?;
    let h = handle.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = term.recv() => { tracing::info!("TERM: shutting down"); h.stop(); }
                _ = int.recv() => { tracing::info!("INT: shutting down"); h.stop(); }
                _ = tstp.recv() => { tracing::info!("TSTP: quiet, no new jobs"); h.quiet(); }
            }
        }
    });
    Ok(())
}

/// Routes Ctrl-C to [`WorkerHandle::stop`].
#[cfg(not(unix))]
pub(crate) fn install_signals(handle: &WorkerHandle) -> Result<()> {
    let h = handle.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            h.stop();
        }
    });
    Ok(())
}

#[cfg(all(test, unix))]
mod tests {
    #[test]
    fn tstp_is_the_platforms_own() {
        #[cfg(all(
            any(target_os = "linux", target_os = "android"),
            any(
                target_arch = "x86_64",
                target_arch = "x86",
                target_arch = "aarch64",
                target_arch = "arm"
            )
        ))]
        assert_eq!(super::SIGTSTP, 20);
        #[cfg(any(
            target_os = "macos",
            target_os = "ios",
            target_os = "freebsd",
            target_os = "openbsd",
            target_os = "netbsd",
            target_os = "dragonfly"
        ))]
        assert_eq!(super::SIGTSTP, 18);
    }
}
