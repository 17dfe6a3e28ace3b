//! The client middleware chain: Sidekiq's `call(job, next)` links, frozen at
//! build time into an `Arc<[Arc<dyn ClientMiddleware>]>`.
//!
//! A link may edit the job, stop it (return `Ok(None)`: nothing is written), or
//! pass it on with `next.run(job)`. `Next` owns an `Arc` of the rest of the chain
//! rather than borrowing it, so a link written with [`client_middleware_fn`] is a
//! plain closure returning an `async move` block.
//!
//! The chain runs for every push: from application code, from inside a running
//! job, and for the scheduler's promotions.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use futures_util::future::BoxFuture;

use super::push::PushJob;
use crate::error::Result;

/// One link of the client chain.
pub trait ClientMiddleware: Send + Sync + 'static {
    /// Handles `job`: edit it, stop it (`Ok(None)`), or pass it on with `next.run(job)`.
    fn call(&self, job: PushJob, next: ClientNext) -> BoxFuture<'static, Result<Option<PushJob>>>;
}

/// The rest of the client chain.
pub struct ClientNext {
    chain: Arc<[Arc<dyn ClientMiddleware>]>,
    index: usize,
}

impl fmt::Debug for ClientNext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientNext")
            .field("remaining", &(self.chain.len() - self.index))
            .finish()
    }
}

impl ClientNext {
    pub(crate) fn new(chain: Arc<[Arc<dyn ClientMiddleware>]>) -> Self {
        ClientNext { chain, index: 0 }
    }

    /// Passes the job to the next link (or, at the end, back to the push).
    pub async fn run(self, job: PushJob) -> Result<Option<PushJob>> {
        match self.chain.get(self.index).cloned() {
            Some(link) => {
                let next = ClientNext {
                    chain: self.chain,
                    index: self.index + 1,
                };
                link.call(job, next).await
            }
            None => Ok(Some(job)),
        }
    }
}

/// A client middleware from an async closure:
///
/// ```
/// use fairjob::{ClientBuilder, client_middleware_fn};
/// let builder = ClientBuilder::new("redis://127.0.0.1/").middleware(client_middleware_fn(
///     |mut job, next| async move {
///         job.payload_mut().set("origin", "web");
///         next.run(job).await
///     },
/// ));
/// ```
pub fn client_middleware_fn<F, Fut>(f: F) -> FnClientMiddleware<F>
where
    F: Fn(PushJob, ClientNext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Option<PushJob>>> + Send + 'static,
{
    FnClientMiddleware(f)
}

/// See [`client_middleware_fn`].
pub struct FnClientMiddleware<F>(F);

impl<F> fmt::Debug for FnClientMiddleware<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FnClientMiddleware")
    }
}

impl<F, Fut> ClientMiddleware for FnClientMiddleware<F>
where
    F: Fn(PushJob, ClientNext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Option<PushJob>>> + Send + 'static,
{
    fn call(&self, job: PushJob, next: ClientNext) -> BoxFuture<'static, Result<Option<PushJob>>> {
        Box::pin((self.0)(job, next))
    }
}
