//! The server middleware chain: links of the shape `call(cx, next)` around every
//! perform. The tracing span and the ack/retry handling are links of it
//! (outermost), then the user's links, then the job's `perform`.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use futures_util::future::BoxFuture;

use super::JobContext;
use crate::error::JobError;

/// One link of the server chain.
pub trait ServerMiddleware: Send + Sync + 'static {
    /// Wraps the rest of the chain: call `next.run(cx)` to perform the job.
    fn call(&self, cx: JobContext, next: ServerNext) -> BoxFuture<'static, Result<(), JobError>>;
}

pub(crate) type Terminal =
    Arc<dyn Fn(JobContext) -> BoxFuture<'static, Result<(), JobError>> + Send + Sync>;

/// The rest of the server chain.
pub struct ServerNext {
    chain: Arc<[Arc<dyn ServerMiddleware>]>,
    index: usize,
    terminal: Terminal,
}

impl fmt::Debug for ServerNext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerNext")
            .field("remaining", &(self.chain.len() - self.index))
            .finish()
    }
}

impl ServerNext {
    pub(crate) fn new(chain: Arc<[Arc<dyn ServerMiddleware>]>, terminal: Terminal) -> Self {
        ServerNext {
            chain,
            index: 0,
            terminal,
        }
    }

    /// Runs the rest of the chain and, at its end, the job.
    pub async fn run(self, cx: JobContext) -> Result<(), JobError> {
        match self.chain.get(self.index).cloned() {
            Some(link) => {
                let next = ServerNext {
                    chain: self.chain,
                    index: self.index + 1,
                    terminal: self.terminal,
                };
                link.call(cx, next).await
            }
            None => (self.terminal)(cx).await,
        }
    }
}

/// A server middleware from an async closure.
///
/// ```
/// use fairjob::server_middleware_fn;
/// let timing = server_middleware_fn(|cx, next| async move {
///     let started = std::time::Instant::now();
///     let result = next.run(cx).await;
///     tracing::debug!(elapsed = ?started.elapsed(), "job done");
///     result
/// });
/// # let _ = timing;
/// ```
pub fn server_middleware_fn<F, Fut>(f: F) -> FnServerMiddleware<F>
where
    F: Fn(JobContext, ServerNext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), JobError>> + Send + 'static,
{
    FnServerMiddleware(f)
}

/// See [`server_middleware_fn`].
pub struct FnServerMiddleware<F>(F);

impl<F> fmt::Debug for FnServerMiddleware<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FnServerMiddleware")
    }
}

impl<F, Fut> ServerMiddleware for FnServerMiddleware<F>
where
    F: Fn(JobContext, ServerNext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), JobError>> + Send + 'static,
{
    fn call(&self, cx: JobContext, next: ServerNext) -> BoxFuture<'static, Result<(), JobError>> {
        Box::pin((self.0)(cx, next))
    }
}
