//! [`Fake`]: fairjob without Redis, for an application's unit tests. The
//! fake sits behind the broker: the client, its middleware, tenant resolution,
//! reroute planning and every `Enqueue` option run exactly as in production,
//! and only the final write lands in memory instead of in Redis.

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::broker::{
    Acquired, Entry, Finish, Holds, MemoryStore, PushObserver, RateAcquired, SlotHold, Token,
    UniqueHold, Waiting,
};
use crate::client::{Client, ClientBuilder, ClientMiddleware};
use crate::config::ClientConfig;
use crate::error::{Error, JobError, Result};
use crate::job::{Job, JobContext, JobParts, Registry};
use crate::policy::dispatch::ShardState;
use crate::policy::gcra::Limiter;
use crate::policy::slots::SlotState;
use crate::wire::{Payload, UniqueUntil, fields};
use crate::worker::{Outcome, ServerMiddleware, batch_member, perform_detached};
use crate::{limit, rate};

/// Jobs one drain may perform before it gives up (a job that enqueues itself
/// forever would otherwise hang the test).
const MAX_PER_DRAIN: usize = 100_000;

/// fairjob in memory, for tests: an ordinary [`Client`] whose pushes are
/// recorded here instead of in Redis, and a way to perform them.
///
/// Each `Fake` is its own world (queues, reroute windows, clock, failures):
/// tests running in parallel on cargo's threads never see each other's jobs.
/// Cloning a `Fake` shares it.
///
/// - [`Fake::new`] records pushes; [`Fake::drain`], [`Fake::drain_queue`] and
///   [`Fake::perform_one`] perform them through the job registry and the
///   server middleware chain, as a worker would.
/// - [`Fake::inline`] performs each job before `perform_async` returns; a
///   failure comes back from the push as [`Error::JobFailed`] and is not retried.
/// - Batches and workflows ([`crate::batch`]) run as on Redis (below).
///
/// The client runs its middleware and the jobs' reroute rules as in
/// production (the fake keeps its own windows, with `push.lua`'s semantics).
/// Tenant-sharded queues, slot limits (`#[concurrency]`) and rate limits
/// (`#[rate_limit]`) run the rules the Redis scripts run ([`crate::policy`];
/// `tests/tests/twins.rs` compares the two): a drain takes a sharded queue's
/// jobs in its dispatch order (weights, floors, caps, bursts and tenants'
/// rates, changed with [`RedisBroker::set_shard_policy`](crate::broker::RedisBroker::set_shard_policy)
/// on `fake.client().broker()`), a job over its rate or without a free slot
/// waits in its limiter (it is still listed by [`Fake::enqueued`]) and goes
/// back to its queue when the virtual clock gives its limiter room (a drain
/// releases it, one interval at a time) or a slot frees. A drain performs
/// one job at a time, so a slot limit of 1 or more never holds a job back
/// (a limit of 0, set at runtime, pauses the key). Commands that need Redis
/// (a job's own commands on `broker().connection()`, admin views) fail with
/// [`Error::NotInTestingMode`]. Test those against a real Redis with
/// [`RedisServer`](super::RedisServer).
///
/// The fake knows every `#[derive(Job)]` type linked into the test binary,
/// as a worker does (so two types with one class name are an error here too;
/// the examples below are standalone doctests for that reason).
///
/// # Batches and workflows
///
/// [`Batch`](crate::Batch) and [`Workflow`](crate::Workflow) commits,
/// reopening from a member, child batches, [`JobContext::batch_status`],
/// [`JobContext::record`], [`JobContext::upstream`] and
/// [`JobContext::failed_dependencies`] work on the fake, by the rules the
/// Redis scripts run ([`crate::policy::batch`], [`crate::policy::workflow`];
/// `tests/tests/batches.rs` and `workflows.rs` compare the fake's answers
/// with Redis's). A commit puts the members (a workflow's steps without
/// dependencies) in their queues; a drain performs them, and each member's
/// end changes its batch's sets as its exit script would: a callback whose
/// event fires (each once) is pushed to its queue and performed by the same
/// drain, after the members; a child batch's callbacks come before its
/// parent's; a workflow step held for its dependencies is released into its
/// queue when they succeed (or per its `on_dependency_failure` when one
/// fails) and performed by the same drain. A member that fails follows its
/// retry option as any job: `complete` fires once it has run (even into
/// `retry`), `death` when it dies, `success` once every member succeeded.
///
/// In inline mode a batch runs within its `commit`: its members as they
/// are pushed, each callback and released step as it fires. A failure there
/// is not retried and goes to its batch (its status, `complete` without
/// `success`) and to [`Fake::failures`], not to the commit, which against
/// Redis never sees its members run.
///
/// Not kept: the batches' listing (the dashboard's Batches page and
/// `worker batches` need Redis), and batches' expiry (a batch lives as long
/// as its fake).
///
/// ```standalone_crate
/// use std::sync::atomic::{AtomicU32, Ordering};
/// use fairjob::batch::Event;
/// use fairjob::prelude::*;
/// use fairjob::testing::Fake;
/// use serde::{Deserialize, Serialize};
///
/// static IMPORTED: AtomicU32 = AtomicU32::new(0);
///
/// #[derive(Serialize, Deserialize, Job)]
/// struct ImportRow {
///     row: u32,
/// }
///
/// impl Perform for ImportRow {
///     async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
///         IMPORTED.fetch_add(1, Ordering::SeqCst);
///         Ok(())
///     }
/// }
///
/// /// The batch's `success` callback: every row is in.
/// #[derive(Serialize, Deserialize, Job)]
/// struct ImportDone {
///     import_id: u64,
/// }
///
/// impl Perform for ImportDone {
///     async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
///         assert_eq!(cx.batch_event(), Some(Event::Success));
///         let status = cx.batch_status().await?.expect("the batch that fired");
///         assert_eq!((status.total, status.unsucceeded), (3, 0));
///         Ok(())
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let fake = Fake::new();
/// let bid = Batch::new()
///     .on_success(ImportDone { import_id: 7 })
///     .push_bulk((1..=3).map(|row| ImportRow { row }))
///     .commit(&fake.client())
///     .await
///     .unwrap();
/// assert_eq!(fake.enqueued::<ImportRow>().len(), 3);
/// assert!(fake.enqueued::<ImportDone>().is_empty()); // not fired yet
///
/// assert_eq!(fake.drain().await.unwrap(), 4); // the rows, then the callback
/// assert_eq!(IMPORTED.load(Ordering::SeqCst), 3);
/// let status = fake.client().batch_status(&bid).await.unwrap().unwrap();
/// assert!(status.success_at.is_some());
/// assert_eq!(fake.drain().await.unwrap(), 0); // fired once
/// # }
/// ```
///
/// ```standalone_crate
/// use fairjob::prelude::*;
/// use fairjob::testing::Fake;
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize, Job)]
/// #[job(queue = "mailers")]
/// struct WelcomeMail {
///     account: String,
/// }
///
/// impl Perform for WelcomeMail {
///     async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
///         Ok(())
///     }
/// }
///
/// // The application's own code.
/// async fn signup(client: &Client, account: &str) -> fairjob::Result<String> {
///     WelcomeMail { account: account.into() }
///         .set_tenant(account)
///         .perform_async(client)
///         .await
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let fake = Fake::new();
/// signup(&fake.client(), "acme").await.unwrap();
///
/// let mails = fake.enqueued::<WelcomeMail>();
/// assert_eq!(mails.len(), 1);
/// assert_eq!(mails[0].job.account, "acme");
/// assert_eq!(mails[0].tenant.as_deref(), Some("acme"));
/// assert_eq!(mails[0].queue, "mailers");
///
/// assert_eq!(fake.drain().await.unwrap(), 1); // performed it
/// assert!(fake.enqueued::<WelcomeMail>().is_empty());
/// # }
/// ```
#[derive(Clone)]
pub struct Fake {
    inner: Arc<Shared>,
}

struct Shared {
    store: Arc<MemoryStore>,
    client: Client,
    registry: Registry,
    chain: Arc<[Arc<dyn ServerMiddleware>]>,
    inline: bool,
    failures: Mutex<Vec<Failure>>,
    /// Runs still to be asked to yield after their first step.
    force_yields: AtomicUsize,
    /// Runs that yielded.
    yields: AtomicUsize,
    /// The next in-progress token's number.
    tokens: AtomicU64,
}

/// The worker identity the fake fetches its jobs as.
const IDENTITY: &str = "fairjob-fake:0:fake";

/// A job the fake took out of its queue into its in-progress record.
struct Taken {
    token: Token,
    entry: Entry,
}

impl fmt::Debug for Fake {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fake")
            .field("inline", &self.inner.inline)
            .field("waiting", &self.inner.store.entries().len())
            .field("jobs", &self.inner.registry.len())
            .field("server_middleware", &self.inner.chain.len())
            .finish()
    }
}

/// A job waiting in a [`Fake`], decoded into its type.
///
/// ```standalone_crate
/// use std::time::Duration;
/// use fairjob::prelude::*;
/// use fairjob::testing::Fake;
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize, Job)]
/// #[job(queue = "reminders", retry = 3)]
/// struct Reminder {
///     user: u64,
/// }
///
/// impl Perform for Reminder {
///     async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
///         Ok(())
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let fake = Fake::new();
/// let day = Duration::from_secs(86_400);
/// let jid = Reminder { user: 7 }.perform_in(&fake.client(), day).await.unwrap();
///
/// let [reminder] = &fake.enqueued::<Reminder>()[..] else { panic!("one reminder") };
/// assert_eq!(reminder.jid, jid);
/// assert_eq!(reminder.job.user, 7);
/// assert!(reminder.at.unwrap() > fake.now());           // scheduled, not due yet
/// assert_eq!(reminder.payload.get::<u32>("retry"), Some(3));
///
/// assert_eq!(fake.drain().await.unwrap(), 0);           // not due: nothing runs
/// fake.advance(day);
/// assert_eq!(fake.drain().await.unwrap(), 1);
/// # }
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Enqueued<J> {
    /// The job, decoded from the recorded payload with [`Job::from_args`] (a
    /// JSON round trip through the real payload encoder).
    pub job: J,
    /// Its jid.
    pub jid: String,
    /// The queue it was pushed to, after client middleware and reroute rules;
    /// for a job still scheduled (or waiting for a retry), the queue on its
    /// payload (the rules choose again when it becomes due, as in production).
    pub queue: String,
    /// Its tenant, as resolved at the push (explicit `.set_tenant()`, a client
    /// middleware, or the type's `#[fair_tenant]`).
    pub tenant: Option<String>,
    /// When it is due, for a job scheduled with `perform_in`/`perform_at` or
    /// waiting for a retry (on the fake's virtual clock); `None` when it waits
    /// in its queue.
    pub at: Option<SystemTime>,
    /// The raw Sidekiq payload as it would be in Redis.
    pub payload: Payload,
}

/// A job run by a [`Fake`] that failed.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Failure {
    /// Job class.
    pub class: String,
    /// The jid.
    pub jid: String,
    /// The queue it was performed from.
    pub queue: String,
    /// Its tenant.
    pub tenant: Option<String>,
    /// Which run failed, starting at 1 ([`JobContext::attempt`]).
    pub attempt: u32,
    /// The failure's `error_class`.
    pub error_class: String,
    /// The failure's `error_message`.
    pub message: String,
    /// What became of the job.
    pub next: AfterFailure,
}

/// What a [`Fake`] did with a failed job: what its retry option says, as a
/// worker would.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AfterFailure {
    /// Waiting for a retry, due at this time of the virtual clock
    /// ([`Fake::advance`] makes it due).
    Retry {
        /// When the retry is due.
        at: SystemTime,
    },
    /// Out of retries, or discarded: a worker would move it to `dead`.
    Dead,
    /// `retry: false` (or `dead: false`): dropped, as Sidekiq drops it.
    Dropped,
    /// Inline mode: the error went back to the code that pushed the job,
    /// and the job is not retried.
    Returned,
}

/// Configures a [`Fake`]: the client's settings and middleware, the server
/// middleware, the job types, inline or not.
#[must_use]
pub struct FakeBuilder {
    client: ClientBuilder,
    server_middleware: Vec<Arc<dyn ServerMiddleware>>,
    registry: Option<Registry>,
    inline: bool,
}

impl fmt::Debug for FakeBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FakeBuilder")
            .field("client", &self.client)
            .field("server_middleware", &self.server_middleware.len())
            .field("inline", &self.inline)
            .finish_non_exhaustive()
    }
}

impl FakeBuilder {
    /// Takes the settings and client middleware of the application's own
    /// [`ClientBuilder`] (its Redis URL is not used), so tests push through the
    /// same chain as production.
    pub fn client(mut self, builder: ClientBuilder) -> Self {
        self.client = builder;
        self
    }

    /// Appends a client middleware.
    pub fn client_middleware(mut self, m: impl ClientMiddleware) -> Self {
        self.client = self.client.middleware(m);
        self
    }

    /// Appends a server middleware (runs around every job the fake performs).
    pub fn server_middleware(mut self, m: impl ServerMiddleware) -> Self {
        self.server_middleware.push(Arc::new(m));
        self
    }

    /// The job types the fake can perform (default: every `#[derive(Job)]`
    /// linked into the test binary).
    pub fn registry(mut self, registry: Registry) -> Self {
        self.registry = Some(registry);
        self
    }

    /// Performs each job when it is pushed (see [`Fake::inline`]).
    pub fn inline(mut self) -> Self {
        self.inline = true;
        self
    }

    /// The fake. Fails on what would stop a worker or a client from starting
    /// (two job types with one class name, a queue that cannot be sharded).
    pub fn build(self) -> Result<Fake> {
        let registry = match self.registry {
            Some(r) => r,
            None => Registry::from_inventory()?,
        };
        let mut client = self.client;
        for q in registry.sharded_queues() {
            client = client.sharded_queue(q);
        }
        let store = MemoryStore::new();
        let client = client.build_in_memory(store.clone())?;
        let inline = self.inline;
        let inner = Arc::new_cyclic(|me: &Weak<Shared>| {
            if inline {
                store.observe(Arc::new(InlineObserver { fake: me.clone() }));
            }
            Shared {
                store,
                client,
                registry,
                chain: self.server_middleware.into(),
                inline,
                failures: Mutex::new(Vec::new()),
                force_yields: AtomicUsize::new(0),
                yields: AtomicUsize::new(0),
                tokens: AtomicU64::new(1),
            }
        });
        Ok(Fake { inner })
    }
}

impl Default for Fake {
    fn default() -> Self {
        Fake::new()
    }
}

impl Fake {
    /// A fake that records pushes (perform them with [`Fake::drain`]), knowing
    /// every `#[derive(Job)]` type linked into the test binary.
    ///
    /// # Panics
    ///
    /// When two linked job types share a class name (a worker would refuse to
    /// start); use [`Fake::builder`] to get that as an error.
    pub fn new() -> Fake {
        Fake::builder()
            .build()
            .unwrap_or_else(|e| panic!("fairjob::testing::Fake: {e}"))
    }

    /// A fake that performs each job before its `perform_async` returns
    /// (Sidekiq's inline mode), through the server middleware chain. A job
    /// that fails makes the push return [`Error::JobFailed`] and is not
    /// retried. Jobs scheduled for later wait for [`Fake::advance`] and
    /// [`Fake::drain`]. A batch (or workflow) runs within its `commit`,
    /// callbacks and released steps included; its jobs' failures go to the
    /// batch, not to the commit (see [`Fake`]).
    ///
    /// ```standalone_crate
    /// # use fairjob::prelude::*;
    /// # use serde::{Deserialize, Serialize};
    /// # use std::sync::atomic::{AtomicU32, Ordering};
    /// static SENT: AtomicU32 = AtomicU32::new(0);
    ///
    /// #[derive(Serialize, Deserialize, Job)]
    /// struct Ping;
    ///
    /// impl Perform for Ping {
    ///     async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
    ///         SENT.fetch_add(1, Ordering::SeqCst);
    ///         Ok(())
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let fake = fairjob::testing::Fake::inline();
    /// Ping.perform_async(&fake.client()).await.unwrap();
    /// assert_eq!(SENT.load(Ordering::SeqCst), 1); // already performed
    /// # }
    /// ```
    ///
    /// # Panics
    ///
    /// As [`Fake::new`].
    pub fn inline() -> Fake {
        Fake::builder()
            .inline()
            .build()
            .unwrap_or_else(|e| panic!("fairjob::testing::Fake: {e}"))
    }

    /// A builder, to give the fake the application's client settings and
    /// middleware, server middleware, or an explicit registry.
    pub fn builder() -> FakeBuilder {
        FakeBuilder {
            client: ClientBuilder::from_config(ClientConfig::default()),
            server_middleware: Vec::new(),
            registry: None,
            inline: false,
        }
    }

    /// An ordinary [`Client`] whose pushes go to this fake. Jobs the fake
    /// performs get the same client in [`JobContext::client`].
    pub fn client(&self) -> Client {
        self.inner.client.clone()
    }

    /// The jobs of type `J` waiting in the fake (in a queue, scheduled, or
    /// waiting for a retry), in the order they were pushed.
    ///
    /// # Panics
    ///
    /// When a recorded job of `J`'s class does not decode into `J` (its
    /// `Serialize` and `Deserialize` disagree): the worker could not run it
    /// either.
    pub fn enqueued<J: Job>(&self) -> Vec<Enqueued<J>> {
        let parked = self
            .inner
            .store
            .parked()
            .into_iter()
            .map(|(queue, payload)| Entry {
                seq: 0,
                payload,
                queue: Some(queue),
                shard: None,
                waiting: Waiting::Queued,
            });
        self.inner
            .store
            .entries()
            .into_iter()
            .chain(parked)
            .filter_map(|e| {
                let payload = parse(&e).ok()?;
                (payload.class() == J::CLASS).then(|| decode::<J>(e, payload))
            })
            .collect()
    }

    /// Performs every due job, in the order they were pushed, including the
    /// jobs those jobs push, until none is left; scheduled jobs and retries
    /// that are due on the virtual clock are pushed first (through the client
    /// middleware and reroute rules, as the scheduler pushes them). Returns
    /// how many jobs ran.
    ///
    /// A failed job follows its retry option on the virtual clock (see
    /// [`Fake::failures`] and [`Fake::advance`]), the drain goes on with the
    /// others, and then returns [`Error::JobFailed`] for the first failure, so
    /// `drain().await.unwrap()` fails the test when a job failed.
    pub async fn drain(&self) -> Result<usize> {
        self.inner.run(&|_| true, None, false).await
    }

    /// As [`Fake::drain`], for the jobs of one queue only (including jobs that
    /// they push to that queue).
    pub async fn drain_queue(&self, queue: &str) -> Result<usize> {
        self.inner
            .run(&|e: &Entry| e.queue.as_deref() == Some(queue), None, false)
            .await
    }

    /// Performs the oldest due job of type `J`, and only it (the jobs it
    /// pushes are recorded, not performed). Fails with [`Error::Fake`] when no
    /// job of `J` is due, and with [`Error::JobFailed`] when it failed.
    pub async fn perform_one<J: Job>(&self) -> Result<()> {
        let ran = self
            .inner
            .run(
                &|e: &Entry| parse(e).is_ok_and(|p| p.class() == J::CLASS),
                Some(1),
                true,
            )
            .await?;
        if ran == 0 {
            return Err(Error::Fake(format!(
                "perform_one: no job of `{}` is due",
                J::CLASS
            )));
        }
        Ok(())
    }

    /// Moves the virtual clock forward: scheduled jobs and retries whose time
    /// has come run at the next drain, and reroute windows age.
    pub fn advance(&self, by: Duration) {
        self.inner.store.advance(by);
    }

    /// The virtual clock: the system clock (or where [`Fake::freeze_clock`]
    /// stopped it) plus everything [`Fake::advance`]d.
    pub fn now(&self) -> SystemTime {
        self.inner.store.now()
    }

    /// Stops the virtual clock at `at`: from then on only [`Fake::advance`]
    /// moves it (as `tokio::time::pause` does for timers).
    pub fn freeze_clock(&self, at: SystemTime) {
        self.inner.store.freeze(at);
    }

    /// A tenant-sharded queue's state as the fake holds it: its dispatch
    /// order, running counts, settings and every tenant's waiting jobs (by
    /// jid), the state the Redis scripts keep in its keys.
    pub fn shard(&self, queue: &str) -> ShardState<String> {
        self.inner.store.shard_state(queue)
    }

    /// A slot limit's holders, reservations and waiting jobs (`full_key`:
    /// `<Class>:<key>` or `group:<group>:<key>`).
    pub fn slot_limit(&self, full_key: &str) -> SlotState {
        self.inner.store.slot_state(full_key)
    }

    /// A rate limiter's state and waiting jobs.
    pub fn rate_limiter(&self, full_key: &str) -> Limiter {
        self.inner.store.limiter(full_key)
    }

    /// Asks the next `runs` performed jobs to yield: an `#[iterable]` job
    /// then yields after its first step (its cursor saved, the job back at
    /// its queue's tail), as a worker's shutdown or slice would make it.
    /// A drain goes on and resumes it from the cursor.
    pub fn force_yield(&self, runs: usize) {
        self.inner.force_yields.store(runs, Ordering::SeqCst);
    }

    /// How many runs yielded so far (not failures).
    pub fn yields(&self) -> usize {
        self.inner.yields.load(Ordering::SeqCst)
    }

    /// The saved cursor of iterable job `jid` (none before its first
    /// checkpoint or yield, and none once it completed).
    pub fn cursor<C: serde::de::DeserializeOwned>(&self, jid: &str) -> Option<C> {
        let json = self.inner.store.iteration_cursor(jid)?;
        serde_json::from_str(&json).ok()
    }

    /// Cancels iterable job `jid` (as [`Client::cancel`]).
    pub fn cancel(&self, jid: &str) -> bool {
        self.inner.store.iteration_cancel(jid)
    }

    /// Every failed run so far, oldest first.
    pub fn failures(&self) -> Vec<Failure> {
        self.inner.failures.lock().expect("failures lock").clone()
    }
}

impl Shared {
    /// Performs queued jobs that `pick` accepts until none is left or `limit`
    /// ran; pushes due scheduled jobs and retries, and releases rate
    /// limiters' waiters whose time has come, before each. `out_of_order`:
    /// a job of a sharded queue that its dispatch order does not serve next
    /// may be taken (`perform_one`).
    async fn run(
        self: &Arc<Self>,
        pick: &(dyn Fn(&Entry) -> bool + Sync),
        limit: Option<usize>,
        out_of_order: bool,
    ) -> Result<usize> {
        let mut ran = 0;
        let mut first_failure = None;
        let mut taken = 0;
        while limit.is_none_or(|l| ran < l) {
            self.promote_due().await?;
            self.release_rates().await?;
            let Some(job) = self.take(pick, out_of_order).await? else {
                break;
            };
            taken += 1;
            if taken > MAX_PER_DRAIN {
                return Err(Error::Fake(format!(
                    "a drain performed {MAX_PER_DRAIN} jobs and more keep coming: does a job enqueue itself?"
                )));
            }
            let Some(slot) = self.admit(&job).await? else {
                // Parked in its limiter: it goes on waiting there.
                continue;
            };
            ran += 1;
            if let Err(e) = self.perform(job, slot).await {
                first_failure.get_or_insert(e);
            }
        }
        match first_failure {
            Some(e) => Err(e),
            None => Ok(ran),
        }
    }

    /// Takes the next job that `pick` accepts into the fake's in-progress
    /// record: of the plain queues' oldest accepted job and each sharded
    /// queue's next dispatch (when accepted), the one pushed first.
    async fn take(
        &self,
        pick: &(dyn Fn(&Entry) -> bool + Sync),
        out_of_order: bool,
    ) -> Result<Option<Taken>> {
        let broker = self.client.broker();
        let mut best: Option<(u64, Option<String>)> =
            self.store.first_plain(pick).map(|e| (e.seq, None));
        for q in self.store.sharded_queues() {
            if let Some(e) = self.store.next_dispatch(&q).filter(|e| pick(e))
                && best.as_ref().is_none_or(|(seq, _)| e.seq < *seq)
            {
                best = Some((e.seq, Some(q)));
            }
        }
        let taken = match best {
            Some((seq, None)) => self.store.take_waiting(seq),
            Some((_, Some(q))) => {
                let queue = broker.shard_queue(&q, IDENTITY);
                let n = self.tokens.fetch_add(1, Ordering::SeqCst);
                let got = broker.fetch_shard(&queue, 1, n).await?;
                let Some(r) = got.into_iter().next() else {
                    return Ok(None);
                };
                let token = Token::parse(&r.token).expect("the store's token");
                let entry = Entry {
                    seq: 0,
                    payload: String::from_utf8_lossy(&r.raw).into_owned(),
                    queue: Some(q),
                    shard: token.tenant.clone(),
                    waiting: Waiting::Queued,
                };
                return Ok(Some(Taken { token, entry }));
            }
            None if out_of_order => self.store.take_out_of_order(pick),
            None => None,
        };
        let Some(entry) = taken else {
            return Ok(None);
        };
        let queue = entry.queue.clone().unwrap_or_default();
        let token = entry.token(&queue);
        broker.hold_taken(IDENTITY, &token, entry.clone());
        Ok(Some(Taken { token, entry }))
    }

    /// The rate limiter, then the slot limit, of a taken job, as the worker
    /// passes them: `Some(slot held)` when it may run, `None` when it waits
    /// in a limiter.
    async fn admit(&self, job: &Taken) -> Result<Option<Option<SlotHold>>> {
        let Ok(payload) = parse(&job.entry) else {
            return Ok(Some(None));
        };
        let Ok(prepared) = self.registry.prepare(&payload) else {
            return Ok(Some(None));
        };
        let broker = self.client.broker();
        if let Some(gate) = &prepared.rate {
            match rate::acquire(
                broker,
                IDENTITY,
                &job.token,
                &payload,
                &gate.full_key,
                gate.rate,
            )
            .await?
            {
                RateAcquired::Pass => {}
                RateAcquired::Parked(_) | RateAcquired::Lost => return Ok(None),
            }
        }
        if let Some(req) = &prepared.slot {
            return match limit::acquire(
                broker,
                IDENTITY,
                &job.token,
                &payload,
                &req.full_key,
                req.limit,
            )
            .await?
            {
                Acquired::Slot(hold) => Ok(Some(Some(hold))),
                Acquired::Parked | Acquired::Lost => Ok(None),
            };
        }
        Ok(Some(None))
    }

    /// Releases the waiters of rate limiters whose release is due on the
    /// virtual clock (the worker's releaser).
    async fn release_rates(&self) -> Result<()> {
        let broker = self.client.broker();
        let (now, due) = broker.rates_due(100).await?;
        for (member, at) in due {
            if at <= now {
                broker.rate_release(&member).await?;
            }
        }
        Ok(())
    }

    /// Pushes the scheduled jobs and retries that are due, as the scheduler
    /// does: through the client middleware and the reroute rules.
    async fn promote_due(&self) -> Result<()> {
        for entry in self.store.take_due() {
            let payload = parse(&entry)?;
            self.client.repush(payload, None).await?;
        }
        Ok(())
    }

    /// Performs one recorded job and records what its retry option makes of a
    /// failure; `Err(JobFailed)` when it failed.
    async fn perform(&self, job: Taken, slot: Option<SlotHold>) -> Result<()> {
        let Taken { token, entry } = job;
        let payload = parse(&entry)?;
        let queue = token.queue.clone();
        let cx = JobContext::new(JobParts {
            token: token.clone(),
            payload,
            cancel: CancellationToken::new(),
            stopping: CancellationToken::new(),
            client: self.client.clone(),
        });
        let forced = self
            .force_yields
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if forced {
            cx.ask_to_yield();
        }
        // A unique job's lock, as the worker handles it: released as it
        // starts (`until = "start"`), else when it succeeds or dies; a retry
        // or a yield keeps it.
        let hold = UniqueHold::of(cx.payload());
        let release = |hold: &UniqueHold| {
            let broker = self.client.broker();
            self.store
                .unique_release(&broker.unique_key(hold), Some(&hold.jid));
        };
        if let Some(h) = hold.as_ref().filter(|h| h.until == UniqueUntil::Start) {
            release(h);
        }
        let (result, outcome) =
            perform_detached(&self.registry, self.chain.clone(), cx.clone()).await;
        let yielded = result.as_ref().is_err_and(JobError::is_yield);
        if let Some(h) = &hold
            && !yielded
            && (result.is_ok() || self.inline || !matches!(outcome, Outcome::Retry(..)))
        {
            release(h);
        }
        // The job's one exit, as the worker's: one broker call that takes it
        // out of the in-progress record (releasing its tenant's running
        // count and its slot).
        let back = cx.payload().to_json();
        let (exit, failed) = match (&result, &outcome) {
            (Ok(()), _) => (Finish::Ack, None),
            (Err(e), _) if e.is_yield() => (Finish::Back { payload: &back }, None),
            (Err(e), _) if self.inline => (Finish::Ack, Some((e, AfterFailure::Returned))),
            (Err(e), Outcome::Ack) => (Finish::Ack, Some((e, AfterFailure::Dropped))),
            (Err(e), Outcome::Dead(payload)) => {
                (Finish::Dead { payload }, Some((e, AfterFailure::Dead)))
            }
            (Err(e), Outcome::Retry(payload, delay)) => (
                Finish::Retry {
                    payload,
                    delay: *delay,
                },
                Some((
                    e,
                    AfterFailure::Retry {
                        at: self.store.now() + *delay,
                    },
                )),
            ),
        };
        // A batch member (or a child batch's callback): its end leaves its
        // batch's sets in the same call, as the worker's exit does.
        let member = batch_member(cx.payload(), Some(&result));
        let holds = Holds {
            slot: slot.as_ref(),
            batch: member.as_ref(),
            ..Holds::default()
        };
        self.client
            .broker()
            .finish(IDENTITY, &token, exit, 0, holds)
            .await?;
        if yielded {
            // Back to its queue's tail, no retry used.
            self.yields.fetch_add(1, Ordering::SeqCst);
            return Ok(());
        }
        let Some((e, next)) = failed else {
            return Ok(());
        };
        self.failures.lock().expect("failures lock").push(Failure {
            class: cx.class().to_owned(),
            jid: cx.jid().to_owned(),
            queue,
            tenant: cx.tenant().map(str::to_owned),
            attempt: cx.attempt(),
            error_class: e.class().to_owned(),
            message: e.message().to_owned(),
            next,
        });
        Err(Error::JobFailed {
            class: cx.class().to_owned(),
            jid: cx.jid().to_owned(),
            error_class: e.class().to_owned(),
            message: e.message().to_owned(),
        })
    }
}

/// Inline mode: performs each pushed job before the push returns.
struct InlineObserver {
    fake: Weak<Shared>,
}

impl PushObserver for InlineObserver {
    fn pushed(&self, seqs: Vec<u64>) -> BoxFuture<'static, Result<()>> {
        let fake = self.fake.upgrade();
        Box::pin(async move {
            let Some(fake) = fake else {
                return Ok(());
            };
            let mut first_failure = None;
            for seq in seqs {
                let Some(job) = fake.take(&|e: &Entry| e.seq == seq, true).await? else {
                    continue;
                };
                let Some(slot) = fake.admit(&job).await? else {
                    continue;
                };
                // A batch's job (a member, a step, a callback) fails into
                // its batch (its status, its events) and `failures`, not
                // into the push: a commit against Redis never sees its
                // members fail, and a callback or a released step is pushed
                // by another job's end.
                let in_batch = parse(&job.entry).is_ok_and(|p| {
                    p.get_str(fields::BID).is_some() || p.get_str(fields::BATCH_CALLBACK).is_some()
                });
                match fake.perform(job, slot).await {
                    Err(Error::JobFailed { .. }) if in_batch => {}
                    Err(e) => {
                        first_failure.get_or_insert(e);
                    }
                    Ok(()) => {}
                }
            }
            first_failure.map_or(Ok(()), Err)
        })
    }
}

fn parse(entry: &Entry) -> Result<Payload> {
    Ok(Payload::parse(entry.payload.clone().into_bytes())?)
}

fn decode<J: Job>(entry: Entry, payload: Payload) -> Enqueued<J> {
    let job = J::from_payload(&payload).unwrap_or_else(|e| {
        panic!(
            "fake.enqueued::<{}>(): job {} does not decode into its type: {e}",
            std::any::type_name::<J>(),
            payload.jid()
        )
    });
    let at = match entry.waiting {
        Waiting::Queued => None,
        Waiting::Scheduled(at) | Waiting::Retry(at) => {
            Some(UNIX_EPOCH + Duration::from_secs_f64(at.max(0.0)))
        }
    };
    Enqueued {
        job,
        jid: payload.jid(),
        queue: entry.queue.unwrap_or_else(|| payload.queue()),
        tenant: payload.tenant(),
        at,
        payload,
    }
}
