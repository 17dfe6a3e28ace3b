//! The server middleware chain: the user's links of the shape `call(cx, next)`
//! around every perform, frozen at build time; the end of the chain is the
//! job's own `perform`. What happens before (parse, slot) and after (ack, retry,
//! dead) is the processor's, not a link's.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use futures_util::future::BoxFuture;

use crate::error::JobError;
use crate::job::{JobContext, Prepared};

/// One link of the server chain.
pub trait ServerMiddleware: Send + Sync + 'static {
    /// Wraps the rest of the chain: call `next.run(cx)` to perform the job.
    fn call(&self, cx: JobContext, next: ServerNext) -> BoxFuture<'static, Result<(), JobError>>;
}

/// The rest of the server chain.
pub struct ServerNext {
    chain: Arc<[Arc<dyn ServerMiddleware>]>,
    index: usize,
    job: Prepared,
}

impl fmt::Debug for ServerNext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerNext")
            .field("remaining", &(self.chain.len() - self.index))
            .finish()
    }
}

impl ServerNext {
    pub(crate) fn new(chain: Arc<[Arc<dyn ServerMiddleware>]>, job: Prepared) -> Self {
        ServerNext {
            chain,
            index: 0,
            job,
        }
    }

    /// Runs the rest of the chain and, at its end, the job.
    pub async fn run(self, cx: JobContext) -> Result<(), JobError> {
        match self.chain.get(self.index).cloned() {
            Some(link) => {
                let next = ServerNext {
                    chain: self.chain,
                    index: self.index + 1,
                    job: self.job,
                };
                link.call(cx, next).await
            }
            None => super::iterate::perform(self.job, cx).await,
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
