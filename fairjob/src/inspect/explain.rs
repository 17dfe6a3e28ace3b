//! "Why is job X still waiting?": where one job is, found by its jid, and
//! the reasons it waits, as typed facts ([`Reason`]) that the dashboard and
//! the CLI render as sentences ("position 1,204 in `reports_throttled`",
//! "tenant at its running limit 3/3 in `conversions`", "5th waiter for
//! `WebhookJob:42`, held by …", "scheduled …, retry 3 of 25", "running on
//! host:pid since …", "not enqueued: duplicate of `<jid>`" for a unique job
//! refused lately).
//!
//! Redis keeps no index by jid, so finding a job is a walk, done only when
//! asked and bounded: each call looks at most at `budget` entries, cheapest
//! places first (running jobs, then `retry`, `schedule` and `dead` with a
//! server-side `ZSCAN MATCH`, then each queue from its next job on, sharded
//! queues' inboxes and tenant lists, then slot waiters), and returns a cursor
//! to resume from, with how far it got ("scanned 10,000 of 1.2M").
//!
//! One place is not walked: a workflow's step held until its dependencies
//! succeed is in no queue. Its index key (jid → bid, written by the script
//! that stages it held, deleted by the one that releases or cancels it) is
//! read before the walk, so a held step is found at once, with the
//! dependencies it still waits for. A batch's member found anywhere is told
//! with its batch (bid, description, members not run yet).

use serde::Serialize;

use super::{
    ClassInfo, Inspector, JobSet, LimitDetail, MAX_READ_ROWS, Page, SlotHolder, class_of_limit,
};
use crate::broker::keys::glob_escape;
use crate::broker::read::{tenant_name, waiter_fields};
use crate::error::Result;
use crate::wire::{Payload, WireRule, fields};

/// Entries one call looks at by default.
pub const EXPLAIN_BUDGET: u64 = 20_000;

/// The most entries one call may look at.
pub const EXPLAIN_MAX_BUDGET: u64 = 1_000_000;

/// List entries read per `LRANGE`.
const CHUNK: u64 = 1_000;

/// Dependencies a held step's reason names at most.
const HELD_NAMED: usize = 20;

/// Where a job is.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "where", rename_all = "snake_case")]
pub enum Location {
    /// Being performed.
    Running {
        /// The worker process.
        identity: String,
        /// The queue it came from.
        queue: String,
        /// When it started, epoch seconds.
        since: f64,
    },
    /// Fetched by a worker, not yet performing (taking its slot, or just
    /// started and not in a heartbeat yet).
    Fetched {
        /// The worker process.
        identity: String,
    },
    /// Waiting in a plain queue.
    Queue {
        /// The queue.
        queue: String,
        /// 1 = next to be fetched.
        position: u64,
        /// Jobs in the queue.
        length: u64,
    },
    /// Waiting in a sharded queue's inbox (not yet sorted into its tenant's list).
    Inbox {
        /// The queue.
        queue: String,
        /// 1 = next to be sorted.
        position: u64,
        /// Entries in the inbox.
        length: u64,
    },
    /// Waiting in its tenant's list of a sharded queue.
    Shard {
        /// The queue.
        queue: String,
        /// The tenant (`None`: the shared list of jobs without one).
        tenant: Option<String>,
        /// 1 = the tenant's next job.
        position: u64,
        /// Jobs in the tenant's list.
        length: u64,
    },
    /// In `retry`, due at `at`.
    Retry {
        /// Epoch seconds.
        at: f64,
    },
    /// In `schedule`, due at `at`.
    Scheduled {
        /// Epoch seconds.
        at: f64,
    },
    /// In `dead`, buried at `at`.
    Dead {
        /// Epoch seconds.
        at: f64,
    },
    /// In the lock-wait list of a slot-limited key.
    SlotWait {
        /// The key.
        key: String,
        /// 1 = released first.
        position: u64,
        /// Jobs waiting for the key.
        waiting: u64,
    },
    /// In the list of a rate limiter.
    RateWait {
        /// The key.
        key: String,
        /// 1 = released first.
        position: u64,
        /// Jobs waiting for the key.
        waiting: u64,
    },
    /// A workflow's step held outside any queue until its dependencies
    /// succeed.
    Held {
        /// The workflow (its batch's id).
        bid: String,
        /// The step's name.
        step: String,
    },
}

/// One reason a job waits (or where it went), as typed facts; the dashboard
/// and the CLI render the sentence. [`Reason::kind`] groups them as the JSON
/// twin names them.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Reason {
    /// Being performed on `identity` since `since` (epoch seconds).
    Running {
        /// The worker process.
        identity: String,
        /// When it started.
        since: f64,
        /// Seconds it has run.
        elapsed_secs: f64,
    },
    /// Running on a tenant-sharded queue, and fair yield asked it to give
    /// its slot back (it has not yet).
    YieldRequested {
        /// When it was asked, epoch seconds.
        asked_at: f64,
        /// Why: `share`, `floor` or `burst` (`None`: recorded by an older fairjob).
        why: Option<String>,
        /// Unhonoured past the cool-down: the job keeps running (never killed).
        ignored: bool,
    },
    /// Fetched by `identity`, not yet in its heartbeat.
    Fetched {
        /// The worker process.
        identity: String,
    },
    /// Its place in a plain queue.
    QueuePosition {
        /// The queue.
        queue: String,
        /// 1 = next.
        position: u64,
        /// Jobs in the queue.
        length: u64,
    },
    /// Its place in a sharded queue's inbox.
    InboxPosition {
        /// The queue.
        queue: String,
        /// The job's tenant.
        tenant: Option<String>,
        /// 1 = next to be sorted.
        position: u64,
        /// Entries in the inbox.
        length: u64,
    },
    /// Its place in its tenant's list of a sharded queue.
    ShardPosition {
        /// The queue.
        queue: String,
        /// The job's tenant.
        tenant: Option<String>,
        /// 1 = the tenant's next job.
        position: u64,
        /// Jobs in the tenant's list.
        length: u64,
    },
    /// Its queue is paused.
    QueuePaused {
        /// The queue.
        queue: String,
    },
    /// It was rerouted from its declared queue by one rule.
    Rerouted {
        /// The declared queue.
        original: String,
        /// The tenant.
        tenant: Option<String>,
        /// The job class.
        class: String,
        /// The tenant's jobs counted in the rule's window now.
        count: u64,
        /// The rule's window, seconds.
        window_secs: u64,
        /// The rule's threshold.
        threshold: u64,
    },
    /// Where the tenant's new jobs go now, and when they go back.
    RerouteOutlook {
        /// The tenant.
        tenant: Option<String>,
        /// The declared queue.
        original: String,
        /// The queue new jobs get now.
        next_queue: String,
        /// Seconds until new jobs go back to `original`, when known.
        back_in_secs: Option<u64>,
    },
    /// Its tenant's running limit in the sharded queue is 0.
    TenantPaused {
        /// The queue.
        queue: String,
        /// The tenant.
        tenant: Option<String>,
    },
    /// Its tenant runs as many jobs as its limit allows.
    TenantAtLimit {
        /// The queue.
        queue: String,
        /// Jobs of the tenant running.
        running: u64,
        /// Its running limit.
        limit: u32,
    },
    /// Its tenant's place in the queue's dispatch order.
    DispatchOrder {
        /// The queue.
        queue: String,
        /// The tenant.
        tenant: Option<String>,
        /// 1-based rank.
        rank: u64,
        /// Tenants runnable.
        runnable: u64,
        /// Whether the tenant is under its floor (served first).
        under_floor: bool,
    },
    /// Its tenant's rate on the sharded queue is spent: the tenant is out of
    /// the dispatch order (its pass kept) until its rate allows a start.
    TenantRateWait {
        /// The queue.
        queue: String,
        /// The tenant.
        tenant: Option<String>,
        /// The tenant's rate as people write it (`10/1s`).
        rate: String,
        /// Seconds until the rate allows its next start.
        in_secs: f64,
    },
    /// Its tenant enters the dispatch order at the next fetch.
    EntersDispatchOrder {
        /// The queue.
        queue: String,
        /// The tenant.
        tenant: Option<String>,
    },
    /// It waits for a slot of a slot-limited key.
    SlotWait {
        /// The key.
        key: String,
        /// 1 = released first.
        position: u64,
        /// Jobs waiting for the key.
        waiting: u64,
        /// Slots held.
        running: u64,
        /// The key's limit (runtime, else declared), when known.
        limit: Option<u32>,
        /// The first holders.
        holders: Vec<SlotHolder>,
    },
    /// Its slot-limited key's limit is 0.
    SlotPaused {
        /// The key.
        key: String,
    },
    /// It waits for its rate limiter ("waits for the stripe limiter: 42
    /// ahead, next release in 0.6 s").
    RateWait {
        /// The key.
        key: String,
        /// Jobs released before it.
        ahead: u64,
        /// Jobs waiting for the key.
        waiting: u64,
        /// The rate in force, when known.
        rate: Option<super::RateView>,
        /// Seconds until the key's next release, when one is scheduled.
        next_release_in_secs: Option<f64>,
    },
    /// Its rate limiter is paused (limit 0).
    RatePaused {
        /// The key.
        key: String,
    },
    /// It is scheduled.
    Scheduled {
        /// Due, epoch seconds.
        at: f64,
        /// Seconds until due (negative: overdue).
        due_in_secs: f64,
    },
    /// It waits for its next retry.
    Retry {
        /// The attempt that comes next (1 = the first retry).
        attempt: u32,
        /// Retries allowed.
        max: u32,
        /// Due, epoch seconds.
        at: f64,
        /// Seconds until due (negative: overdue).
        due_in_secs: f64,
    },
    /// It is dead.
    Dead {
        /// Buried, epoch seconds.
        at: f64,
        /// Seconds since.
        ago_secs: f64,
        /// Retries it had.
        retries: u32,
    },
    /// Its last error (in `retry` or `dead`).
    LastError {
        /// The set it is in.
        set: JobSet,
        /// The error's class.
        error_class: Option<String>,
        /// The error's message.
        error_message: Option<String>,
    },
    /// Never enqueued: a unique job whose key `holder` held (a remembered
    /// recent rejection).
    Duplicate {
        /// The jid that held the key.
        holder: String,
        /// The job class.
        class: String,
        /// When it was refused, epoch seconds.
        at: f64,
    },
    /// Not found within the budget; the walk can go on.
    NotFoundYet {
        /// Entries looked at.
        scanned: u64,
        /// Entries there are.
        total: u64,
    },
    /// Found nowhere.
    NotFound {
        /// Entries looked at.
        scanned: u64,
    },
    /// A member of batch `bid` (or a step of workflow `bid`).
    BatchMember {
        /// The batch's id.
        bid: String,
        /// Its description.
        description: String,
        /// Its members that have not run once.
        pending: u64,
        /// Its members in all.
        total: u64,
        /// Whether the batch is a workflow.
        workflow: bool,
        /// The step's name, in a workflow.
        step: Option<String>,
    },
    /// A workflow's step held in no queue until its dependencies succeed;
    /// the end of the last one releases it into its queue.
    WorkflowHeld {
        /// The workflow (its batch's id).
        bid: String,
        /// The step's name.
        step: String,
        /// Dependencies it still waits for (among its first
        /// [`EXPLAIN_STEP_DEPS`](super::EXPLAIN_STEP_DEPS); at most 20 named).
        waiting_for: Vec<String>,
        /// How many it still waits for, in all.
        waiting: u64,
        /// How many dependencies it has.
        dependencies: u64,
    },
}

impl Reason {
    /// The group the JSON twin names it by: `position`, `reroute`,
    /// `paused`, `tenant_limit`, `tenant_rate`, `dispatch_order`, `slot_wait`, `rate_wait`, `scheduled`,
    /// `retry`, `dead`, `running`, `yield`, `fetched`, `duplicate`, `not_found`,
    /// `batch`, `workflow`.
    pub fn kind(&self) -> &'static str {
        match self {
            Reason::Running { .. } => "running",
            Reason::YieldRequested { .. } => "yield",
            Reason::Fetched { .. } => "fetched",
            Reason::QueuePosition { .. }
            | Reason::InboxPosition { .. }
            | Reason::ShardPosition { .. } => "position",
            Reason::QueuePaused { .. } => "paused",
            Reason::Rerouted { .. } | Reason::RerouteOutlook { .. } => "reroute",
            Reason::TenantPaused { .. } | Reason::TenantAtLimit { .. } => "tenant_limit",
            Reason::TenantRateWait { .. } => "tenant_rate",
            Reason::DispatchOrder { .. } | Reason::EntersDispatchOrder { .. } => "dispatch_order",
            Reason::SlotWait { .. } | Reason::SlotPaused { .. } => "slot_wait",
            Reason::RateWait { .. } | Reason::RatePaused { .. } => "rate_wait",
            Reason::Scheduled { .. } => "scheduled",
            Reason::Retry { .. } => "retry",
            Reason::Dead { .. } => "dead",
            Reason::LastError { set, .. } => match set {
                JobSet::Dead => "dead",
                _ => "retry",
            },
            Reason::Duplicate { .. } => "duplicate",
            Reason::NotFoundYet { .. } | Reason::NotFound { .. } => "not_found",
            Reason::BatchMember { .. } => "batch",
            Reason::WorkflowHeld { .. } => "workflow",
        }
    }
}

/// The job found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobSummary {
    /// Its class.
    pub class: String,
    /// Its queue (as the payload says).
    pub queue: String,
    /// Its tenant.
    pub tenant: Option<String>,
    /// Its arguments, as JSON.
    pub args: String,
    /// When it was enqueued.
    pub enqueued_at: Option<f64>,
    /// Retries so far.
    pub retry_count: Option<u32>,
}

/// The answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Explanation {
    /// The jid asked about.
    pub jid: String,
    /// Whether the job was found.
    pub found: bool,
    /// Where it is.
    pub location: Option<Location>,
    /// What it is.
    pub job: Option<JobSummary>,
    /// Why it waits (or where it went).
    pub reasons: Vec<Reason>,
    /// Entries looked at, over this call and the calls it resumes.
    pub scanned: u64,
    /// Entries there are to look at (sizes Redis keeps; sharded queues'
    /// tenant lists are counted as they are walked).
    pub total: u64,
    /// Where to resume, when the budget ran out before the job was found.
    pub next: Option<String>,
    /// An iterable job's progress (cursor, steps, last checkpoint, yields).
    pub iteration: Option<super::IterationView>,
}

/// A place to look, in order.
#[derive(Debug, Clone)]
enum Source {
    Running,
    Set(JobSet),
    List(String),
    Inbox(String),
    Tenants(String),
    Waiters,
    RateWaiters,
}

/// Where a walk stands: source index, offset (list position, ZSCAN or
/// SSCAN cursor), entries looked at so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Cursor {
    source: usize,
    offset: u64,
    scanned: u64,
}

impl Cursor {
    fn parse(s: &str) -> Option<Cursor> {
        let mut it = s.split('.');
        let c = Cursor {
            source: it.next()?.parse().ok()?,
            offset: it.next()?.parse().ok()?,
            scanned: it.next()?.parse().ok()?,
        };
        it.next().is_none().then_some(c)
    }

    fn encode(self) -> String {
        format!("{}.{}.{}", self.source, self.offset, self.scanned)
    }
}

enum Step {
    Found(Location, Vec<u8>),
    /// The source is done; the walk moves on.
    Done,
    /// Out of budget; resume at this offset of the same source.
    Paused(u64),
}

/// Where `jid` stands in the first entries of a waiting list (a slot's or
/// a rate limiter's; 1 = released first), with its payload.
fn find_waiter(entries: &[Vec<u8>], jid: &str) -> Option<(u64, Vec<u8>)> {
    entries.iter().enumerate().find_map(|(i, e)| {
        let f = waiter_fields(e);
        f.first().is_some_and(|j| *j == jid.as_bytes()).then(|| {
            (
                i as u64 + 1,
                f.get(3).map(|p| p.to_vec()).unwrap_or_default(),
            )
        })
    })
}

fn holds_jid(raw: &[u8], jid: &str) -> bool {
    // Cheap byte test first, then a parse to be sure.
    let needle = format!("\"jid\":\"{jid}\"");
    if !raw.windows(needle.len()).any(|w| w == needle.as_bytes())
        && !raw.windows(jid.len()).any(|w| w == jid.as_bytes())
    {
        return false;
    }
    Payload::parse_slice(raw).is_ok_and(|p| p.jid() == jid)
}

impl Inspector {
    /// Explains job `jid` (see the module doc). `tenant` narrows the walk of
    /// sharded queues to that tenant's lists; `cursor` resumes a previous call;
    /// `budget` caps the entries looked at ([`EXPLAIN_BUDGET`] by default).
    pub async fn explain(
        &self,
        jid: &str,
        tenant: Option<&str>,
        cursor: Option<&str>,
        budget: Option<u64>,
        classes: &[ClassInfo],
    ) -> Result<Explanation> {
        let budget = budget
            .unwrap_or(EXPLAIN_BUDGET)
            .clamp(1, EXPLAIN_MAX_BUDGET);
        let (names, sharded, _) = self.queue_names().await?;
        let mut sources = vec![
            Source::Running,
            Source::Set(JobSet::Retry),
            Source::Set(JobSet::Scheduled),
            Source::Set(JobSet::Dead),
        ];
        sources.extend(
            names
                .iter()
                .filter(|q| !sharded.contains(*q))
                .map(|q| Source::List(q.clone())),
        );
        sources.extend(sharded.iter().map(|q| Source::Inbox(q.clone())));
        sources.extend(sharded.iter().map(|q| Source::Tenants(q.clone())));
        sources.push(Source::Waiters);
        sources.push(Source::RateWaiters);
        let total = self.broker.walk_total(&names).await?;
        let mut at = cursor.and_then(Cursor::parse).unwrap_or_default();
        let mut left = budget;
        if cursor.is_none()
            && let Some(r) = self.broker.unique_rejection(jid).await?
        {
            // A refused duplicate was never written anywhere: no walk.
            return Ok(Explanation {
                jid: jid.to_owned(),
                found: false,
                location: None,
                job: None,
                reasons: vec![Reason::Duplicate {
                    holder: r.holder,
                    class: r.class,
                    at: r.at,
                }],
                scanned: 0,
                total,
                next: None,
                iteration: None,
            });
        }
        let mut out = Explanation {
            jid: jid.to_owned(),
            found: false,
            location: None,
            job: None,
            reasons: Vec::new(),
            scanned: at.scanned,
            total,
            next: None,
            iteration: self.iteration(jid).await?,
        };
        if cursor.is_none()
            && let Some((location, raw)) = self.held_step(jid).await?
        {
            // A held workflow step is in no queue: its index says where.
            out.found = true;
            self.explain_found(&mut out, location, &raw, classes)
                .await?;
            return Ok(out);
        }
        while at.source < sources.len() {
            let before = left;
            let step = self
                .explain_step(&sources[at.source], jid, tenant, at.offset, &mut left)
                .await?;
            at.scanned += before - left;
            out.scanned = at.scanned;
            match step {
                Step::Found(location, raw) => {
                    out.found = true;
                    self.explain_found(&mut out, location, &raw, classes)
                        .await?;
                    return Ok(out);
                }
                Step::Done => {
                    at.source += 1;
                    at.offset = 0;
                }
                Step::Paused(offset) => {
                    at.offset = offset;
                    out.next = Some(at.encode());
                    out.reasons.push(Reason::NotFoundYet {
                        scanned: out.scanned,
                        total: out.total.max(out.scanned),
                    });
                    return Ok(out);
                }
            }
        }
        out.reasons.push(Reason::NotFound {
            scanned: out.scanned,
        });
        Ok(out)
    }

    async fn explain_step(
        &self,
        source: &Source,
        jid: &str,
        tenant: Option<&str>,
        offset: u64,
        left: &mut u64,
    ) -> Result<Step> {
        match source {
            Source::Running => {
                let procs = self.processes(Page::first(MAX_READ_ROWS)).await?;
                for p in &procs.rows {
                    *left = left.saturating_sub(p.jobs.len() as u64);
                    if let Some(j) = p.jobs.iter().find(|j| j.jid == jid) {
                        let loc = Location::Running {
                            identity: p.identity.clone(),
                            queue: j.queue.clone(),
                            since: j.run_at,
                        };
                        let raw = serde_json::json!({
                            "class": j.class, "jid": j.jid, "queue": j.queue,
                            "args": serde_json::from_str::<serde_json::Value>(&j.args).unwrap_or_default(),
                            "fair_tenant": j.tenant,
                            (fields::BID): j.bid, (fields::WORKFLOW_STEP): j.workflow_step,
                        });
                        return Ok(Step::Found(loc, raw.to_string().into_bytes()));
                    }
                }
                // Fetched but not (yet) in a heartbeat: the in-progress records.
                for (identity, _) in self.broker.workers_alive().await? {
                    for (_, payload) in self.broker.inflight_entries(&identity).await? {
                        *left = left.saturating_sub(1);
                        if holds_jid(&payload, jid) {
                            return Ok(Step::Found(Location::Fetched { identity }, payload));
                        }
                    }
                }
                Ok(Step::Done)
            }
            Source::Set(set) => {
                let pattern = format!("*\"jid\":\"{}\"*", glob_escape(jid));
                let size = self.broker.set_size(*set).await?;
                let mut cursor = offset;
                loop {
                    if *left == 0 {
                        return Ok(Step::Paused(cursor));
                    }
                    let count = CHUNK.min(*left);
                    let (next, found) = self
                        .broker
                        .set_scan_step(*set, cursor, &pattern, count)
                        .await?;
                    // A step looks at about `count` entries (all of a small set).
                    *left = left.saturating_sub(count.min(size.max(1)));
                    if let Some((raw, at)) = found.into_iter().find(|(m, _)| holds_jid(m, jid)) {
                        let loc = match set {
                            JobSet::Retry => Location::Retry { at },
                            JobSet::Scheduled => Location::Scheduled { at },
                            JobSet::Dead => Location::Dead { at },
                        };
                        return Ok(Step::Found(loc, raw));
                    }
                    cursor = next;
                    if cursor == 0 {
                        return Ok(Step::Done);
                    }
                }
            }
            Source::List(q) | Source::Inbox(q) => {
                let key = self.broker.keys().queue(q);
                let inbox = matches!(source, Source::Inbox(_));
                match self.walk_list(&key, jid, offset, left).await? {
                    Walk::Found(position, length, raw) => {
                        let loc = if inbox {
                            Location::Inbox {
                                queue: q.clone(),
                                position,
                                length,
                            }
                        } else {
                            Location::Queue {
                                queue: q.clone(),
                                position,
                                length,
                            }
                        };
                        Ok(Step::Found(loc, raw))
                    }
                    Walk::End => Ok(Step::Done),
                    Walk::Paused(at) => Ok(Step::Paused(at)),
                }
            }
            Source::Tenants(q) => {
                if let Some(t) = tenant {
                    let key = self.broker.keys().shard(q).tenant_list(Some(t));
                    return Ok(match self.walk_list(&key, jid, offset, left).await? {
                        Walk::Found(position, length, raw) => Step::Found(
                            Location::Shard {
                                queue: q.clone(),
                                tenant: Some(t.to_owned()),
                                position,
                                length,
                            },
                            raw,
                        ),
                        Walk::End => Step::Done,
                        Walk::Paused(at) => Step::Paused(at),
                    });
                }
                // Every tenant, a batch of the tenant set at a time; a batch
                // cut short by the budget is walked again on resume.
                let mut cursor = offset;
                loop {
                    if *left == 0 {
                        return Ok(Step::Paused(cursor));
                    }
                    let (next, batch) = self.broker.tenant_lists_step(q, cursor, 50).await?;
                    for (key, enc) in batch {
                        match self.walk_list(&key, jid, 0, left).await? {
                            Walk::Found(position, length, raw) => {
                                let t = tenant_name(&enc);
                                return Ok(Step::Found(
                                    Location::Shard {
                                        queue: q.clone(),
                                        tenant: t,
                                        position,
                                        length,
                                    },
                                    raw,
                                ));
                            }
                            Walk::End => {}
                            Walk::Paused(_) => return Ok(Step::Paused(cursor)),
                        }
                    }
                    cursor = next;
                    if cursor == 0 {
                        return Ok(Step::Done);
                    }
                }
            }
            Source::Waiters => {
                let mut cursor = offset;
                loop {
                    if *left == 0 {
                        return Ok(Step::Paused(cursor));
                    }
                    let (next, batch) = self.broker.limit_keys_step(cursor, 100).await?;
                    for full in batch {
                        let (entries, waiting) = self.broker.slot_waiters(&full, CHUNK).await?;
                        *left = left.saturating_sub(entries.len() as u64 + 1);
                        if let Some((position, raw)) = find_waiter(&entries, jid) {
                            let location = Location::SlotWait {
                                key: full,
                                position,
                                waiting,
                            };
                            return Ok(Step::Found(location, raw));
                        }
                    }
                    cursor = next;
                    if cursor == 0 {
                        return Ok(Step::Done);
                    }
                }
            }
            Source::RateWaiters => {
                let mut cursor = offset;
                loop {
                    if *left == 0 {
                        return Ok(Step::Paused(cursor));
                    }
                    let (next, batch) = self.broker.rate_keys_step(cursor, 100).await?;
                    for full in batch {
                        let (entries, waiting) = self.broker.rate_waiters(&full, CHUNK).await?;
                        *left = left.saturating_sub(entries.len() as u64 + 1);
                        if let Some((position, raw)) = find_waiter(&entries, jid) {
                            let location = Location::RateWait {
                                key: full,
                                position,
                                waiting,
                            };
                            return Ok(Step::Found(location, raw));
                        }
                    }
                    cursor = next;
                    if cursor == 0 {
                        return Ok(Step::Done);
                    }
                }
            }
        }
    }

    /// Walks a queue list from its next job (the tail) on, from `offset`.
    async fn walk_list(&self, key: &str, jid: &str, offset: u64, left: &mut u64) -> Result<Walk> {
        let length = self.broker.list_len(key).await?;
        let mut pos = offset;
        while pos < length {
            if *left == 0 {
                return Ok(Walk::Paused(pos));
            }
            let n = CHUNK.min(*left).min(length - pos);
            let chunk = self.broker.list_from_tail(key, pos, n).await?;
            *left = left.saturating_sub(n);
            // LRANGE returns head-to-tail; the tail end (last) is next to run.
            for (i, raw) in chunk.iter().rev().enumerate() {
                if holds_jid(raw, jid) {
                    return Ok(Walk::Found(pos + i as u64 + 1, length, raw.clone()));
                }
            }
            pos += n;
        }
        Ok(Walk::End)
    }

    /// Fills in the job and the reasons once it is found.
    async fn explain_found(
        &self,
        out: &mut Explanation,
        location: Location,
        raw: &[u8],
        classes: &[ClassInfo],
    ) -> Result<()> {
        let now = self.time().await?;
        let payload = Payload::parse_slice(raw).ok();
        if let Some(p) = &payload {
            out.job = Some(JobSummary {
                class: p.class(),
                queue: p.queue(),
                tenant: p.tenant(),
                args: p.args().get().to_owned(),
                enqueued_at: p.timestamp("enqueued_at"),
                retry_count: p.retry_count(),
            });
        }
        let tenant = payload.as_ref().and_then(Payload::tenant);
        let paused = self.paused_queues().await?;
        let r = &mut out.reasons;
        let paused_reason = |queue: &String| {
            paused.contains(queue).then(|| Reason::QueuePaused {
                queue: queue.clone(),
            })
        };
        match &location {
            Location::Running {
                identity,
                since,
                queue,
            } => {
                r.push(Reason::Running {
                    identity: identity.clone(),
                    since: *since,
                    elapsed_secs: now - since,
                });
                if let Some(y) = self.broker.yield_request(queue, &out.jid).await? {
                    if let Some(it) = out.iteration.as_mut() {
                        it.yield_asked_at = Some(y.asked_at);
                        it.yield_ignored = y.ignored;
                        it.yield_reason = y.reason.clone();
                    }
                    r.push(Reason::YieldRequested {
                        asked_at: y.asked_at,
                        why: y.reason,
                        ignored: y.ignored,
                    });
                }
            }
            Location::Fetched { identity } => r.push(Reason::Fetched {
                identity: identity.clone(),
            }),
            Location::Queue {
                queue,
                position,
                length,
            } => {
                r.push(Reason::QueuePosition {
                    queue: queue.clone(),
                    position: *position,
                    length: *length,
                });
                r.extend(paused_reason(queue));
                if let Some(p) = &payload {
                    self.reroute_reasons(p, queue, r).await?;
                }
            }
            Location::Inbox {
                queue,
                position,
                length,
            } => {
                r.push(Reason::InboxPosition {
                    queue: queue.clone(),
                    tenant: tenant.clone(),
                    position: *position,
                    length: *length,
                });
                r.extend(paused_reason(queue));
            }
            Location::Shard {
                queue,
                tenant: list_tenant,
                position,
                length,
            } => {
                r.push(Reason::ShardPosition {
                    queue: queue.clone(),
                    tenant: tenant.clone(),
                    position: *position,
                    length: *length,
                });
                r.extend(paused_reason(queue));
                let view = self.shard_tenants(queue, &[list_tenant.as_deref()]).await?;
                if let Some(row) = view.rows.first() {
                    let limit = row.limit.or(view.default_limit);
                    match limit {
                        Some(0) => r.push(Reason::TenantPaused {
                            queue: queue.clone(),
                            tenant: tenant.clone(),
                        }),
                        Some(l) if row.running >= u64::from(l) => r.push(Reason::TenantAtLimit {
                            queue: queue.clone(),
                            running: row.running,
                            limit: l,
                        }),
                        _ => {}
                    }
                    let rate = row.rate.or(view.default_rate);
                    if let (Some(until), Some(rate)) = (row.rate_wait_until, rate) {
                        r.push(Reason::TenantRateWait {
                            queue: queue.clone(),
                            tenant: tenant.clone(),
                            rate: crate::rate::describe_tenant_rate(rate),
                            in_secs: until.saturating_sub(view.now_us) as f64 / 1e6,
                        });
                    }
                    match row.rotation {
                        _ if row.rate_wait_until.is_some() => {}
                        Some(rank) => r.push(Reason::DispatchOrder {
                            queue: queue.clone(),
                            tenant: tenant.clone(),
                            rank,
                            runnable: view.runnable,
                            under_floor: row.under_floor,
                        }),
                        None if limit.is_none_or(|l| row.running < u64::from(l)) => {
                            r.push(Reason::EntersDispatchOrder {
                                queue: queue.clone(),
                                tenant: tenant.clone(),
                            })
                        }
                        None => {}
                    }
                }
            }
            Location::SlotWait {
                key,
                position,
                waiting,
            } => {
                let d: LimitDetail = self.limit_detail(key, 5).await?;
                let declared = class_of_limit(classes, key).and_then(|c| c.concurrency);
                let limit = d.row.limit.or(declared);
                r.push(Reason::SlotWait {
                    key: key.clone(),
                    position: *position,
                    waiting: *waiting,
                    running: d.row.running,
                    limit,
                    holders: d.holders,
                });
                if limit == Some(0) {
                    r.push(Reason::SlotPaused { key: key.clone() });
                }
            }
            Location::RateWait {
                key,
                position,
                waiting,
            } => {
                let page = self
                    .broker
                    .rate_limit_rows(std::slice::from_ref(key))
                    .await?;
                let view = page
                    .rows
                    .first()
                    .map(|row| super::rate_view_of(row, page.now_us));
                let rate = view.as_ref().and_then(|v| v.rate);
                r.push(Reason::RateWait {
                    key: key.clone(),
                    ahead: position.saturating_sub(1),
                    waiting: *waiting,
                    rate,
                    next_release_in_secs: view.and_then(|v| v.next_release_in_secs),
                });
                if rate.is_some_and(|r| r.is_paused()) {
                    r.push(Reason::RatePaused { key: key.clone() });
                }
            }
            Location::Scheduled { at } => r.push(Reason::Scheduled {
                at: *at,
                due_in_secs: *at - now,
            }),
            Location::Retry { at } => {
                let (count, max) = payload
                    .as_ref()
                    .map_or((0, 0), |p| (p.retry_count().unwrap_or(0), p.max_retries()));
                r.push(Reason::Retry {
                    attempt: count + 1,
                    max,
                    at: *at,
                    due_in_secs: *at - now,
                });
                if let Some(p) = &payload {
                    r.push(last_error(p, JobSet::Retry));
                }
            }
            Location::Dead { at } => {
                r.push(Reason::Dead {
                    at: *at,
                    ago_secs: now - at,
                    retries: payload.as_ref().and_then(Payload::retry_count).unwrap_or(0),
                });
                if let Some(p) = &payload {
                    r.push(last_error(p, JobSet::Dead));
                }
            }
            Location::Held { bid, step } => {
                if let Some((row, _)) = self
                    .broker
                    .workflow_step(bid, &out.jid, super::EXPLAIN_STEP_DEPS)
                    .await?
                {
                    let mut waiting_for = row.waiting;
                    waiting_for.truncate(HELD_NAMED);
                    r.push(Reason::WorkflowHeld {
                        bid: bid.clone(),
                        step: step.clone(),
                        waiting_for,
                        waiting: row.waiting_total,
                        dependencies: row.deps_total,
                    });
                }
            }
        }
        // A member of a batch (or a workflow's step): which, and how far it is.
        let member = payload.as_ref().and_then(|p| p.get_str(fields::BID));
        if let Some(bid) = member
            && let Some(s) = self.batch_status(&bid).await?
        {
            r.push(Reason::BatchMember {
                bid,
                description: s.description,
                pending: s.pending,
                total: s.total,
                workflow: s.workflow,
                step: payload
                    .as_ref()
                    .and_then(|p| p.get_str(fields::WORKFLOW_STEP)),
            });
        }
        out.location = Some(location);
        Ok(())
    }

    /// Held workflow step `jid`, from its index key: where it is, and its
    /// payload (its enqueued_at set to 0). `None` when it is not indexed or
    /// no longer held (the walk looks for it); an index key whose batch
    /// expired is deleted.
    async fn held_step(&self, jid: &str) -> Result<Option<(Location, Vec<u8>)>> {
        let Some(bid) = self.broker.workflow_held_bid(jid).await? else {
            return Ok(None);
        };
        let Some((row, payload)) = self.broker.workflow_step(&bid, jid, 0).await? else {
            if self.broker.batch_status(&bid).await?.is_none() {
                self.broker.workflow_unindex(jid).await?;
            }
            return Ok(None);
        };
        match payload {
            Some(split) if row.state == "held" => Ok(Some((
                Location::Held {
                    bid,
                    step: row.name,
                },
                split.replacen('\n', "0", 1).into_bytes(),
            ))),
            _ => Ok(None),
        }
    }

    /// Why a job sits in a reroute queue, and when new jobs go back.
    async fn reroute_reasons(&self, p: &Payload, queue: &str, r: &mut Vec<Reason>) -> Result<()> {
        let Some(original) = p.get_str(fields::ORIGINAL_QUEUE) else {
            return Ok(());
        };
        if original == queue {
            return Ok(());
        }
        let rules: Vec<WireRule> = p.get(fields::FAIR_TENANT_QUEUES).unwrap_or_default();
        let Some(tenant) = p.tenant() else {
            return Ok(());
        };
        if rules.is_empty() {
            return Ok(());
        }
        let state = self
            .reroute_state(&p.class(), &original, &rules, &tenant)
            .await?;
        for rule in state.rules.iter().filter(|x| x.queue == queue) {
            r.push(Reason::Rerouted {
                original: original.clone(),
                tenant: Some(tenant.clone()),
                class: p.class(),
                count: rule.count,
                window_secs: rule.per,
                threshold: rule.threshold,
            });
        }
        r.push(Reason::RerouteOutlook {
            tenant: Some(tenant),
            next_queue: state.next_queue,
            back_in_secs: state.back_in,
            original,
        });
        Ok(())
    }
}

enum Walk {
    Found(u64, u64, Vec<u8>),
    End,
    Paused(u64),
}

fn last_error(p: &Payload, set: JobSet) -> Reason {
    Reason::LastError {
        set,
        error_class: p.get_str("error_class"),
        error_message: p.get_str("error_message"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip() {
        let c = Cursor {
            source: 4,
            offset: 12_000,
            scanned: 31_000,
        };
        assert_eq!(Cursor::parse(&c.encode()), Some(c));
        assert_eq!(Cursor::parse("1.2"), None);
        assert_eq!(Cursor::parse("x.1.2"), None);
    }

    #[test]
    fn jids_are_matched_exactly() {
        let p = br#"{"class":"A","args":[],"jid":"abc123","queue":"q"}"#;
        assert!(holds_jid(p, "abc123"));
        assert!(!holds_jid(p, "abc12"));
        assert!(!holds_jid(b"not json abc123", "abc123"));
    }
}
