//! "Why is job X still waiting?": where one job is, found by its jid, and
//! the reasons it waits, as sentences an operator reads ("position 1,204 in
//! `reports_throttled`", "tenant at its running limit 3/3 in `conversions`",
//! "5th waiter for `WebhookJob:42`, held by …", "scheduled …, retry 3 of 25",
//! "running on host:pid since …").
//!
//! Redis keeps no index by jid, so finding a job is a walk, done only when
//! asked and bounded: each call looks at most at `budget` entries, cheapest
//! places first (running jobs, then `retry`, `schedule` and `dead` with a
//! server-side `ZSCAN MATCH`, then each queue from its next job on, sharded
//! queues' inboxes and tenant lists, then slot waiters), and returns a cursor
//! to resume from, with how far it got ("scanned 10,000 of 1.2M").

use serde::Serialize;

use super::classes::ClassInfo;
use super::format::{format_count, format_duration, format_time, ordinal};
use super::limits::{LimitDetail, waiter_fields};
use super::queues::class_of_limit;
use crate::broker::RedisBroker;
use crate::broker::actions::JobSet;
use crate::broker::keys::glob_escape;
use crate::error::Result;
use crate::wire::{Payload, WireRule, fields};

/// Entries one call looks at by default.
pub const EXPLAIN_BUDGET: u64 = 20_000;

/// The most entries one call may look at.
pub const EXPLAIN_MAX_BUDGET: u64 = 1_000_000;

/// List entries read per `LRANGE`.
const CHUNK: u64 = 1_000;

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
}

/// One reason, with a machine-readable kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reason {
    /// `position`, `reroute`, `paused`, `tenant_limit`, `dispatch_order`,
    /// `slot_wait`, `scheduled`, `retry`, `dead`, `running`, `fetched`,
    /// `not_found`.
    pub kind: &'static str,
    /// The sentence.
    pub text: String,
}

fn reason(kind: &'static str, text: impl Into<String>) -> Reason {
    Reason {
        kind,
        text: text.into(),
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

impl RedisBroker {
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
        let total = self.explain_total(&names).await?;
        let mut at = cursor.and_then(Cursor::parse).unwrap_or_default();
        let mut left = budget;
        let mut out = Explanation {
            jid: jid.to_owned(),
            found: false,
            location: None,
            job: None,
            reasons: Vec::new(),
            scanned: at.scanned,
            total,
            next: None,
        };
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
                    out.reasons.push(reason(
                        "not_found",
                        format!(
                            "not found yet: scanned {} of {} entries; continue to look further",
                            format_count(out.scanned),
                            format_count(out.total.max(out.scanned))
                        ),
                    ));
                    return Ok(out);
                }
            }
        }
        out.reasons.push(reason(
            "not_found",
            format!(
                "not found in any queue, tenant list, slot wait list, `retry`, `schedule`, `dead` \
                 or running job ({} entries scanned): it has finished (fairjob keeps no record of \
                 finished jobs), or was deleted, or the jid is wrong",
                format_count(out.scanned)
            ),
        ));
        Ok(out)
    }

    /// The sizes Redis keeps of the places a walk looks at.
    async fn explain_total(&self, names: &[String]) -> Result<u64> {
        let mut pipe = redis::pipe();
        pipe.zcard(self.keys.retry())
            .zcard(self.keys.schedule())
            .zcard(self.keys.dead());
        for q in names {
            pipe.llen(self.keys.queue(q));
        }
        let sizes: Vec<u64> = self.pipe(&pipe).await?;
        Ok(sizes.iter().sum())
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
                let procs = self.processes(super::Page::first(super::WEB_PAGE)).await?;
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
                        });
                        return Ok(Step::Found(loc, raw.to_string().into_bytes()));
                    }
                }
                // Fetched but not (yet) in a heartbeat: the in-progress records.
                for (identity, _) in self.workers_alive().await? {
                    for (_, payload) in self.inflight_entries(&identity).await? {
                        *left = left.saturating_sub(1);
                        if holds_jid(&payload, jid) {
                            return Ok(Step::Found(Location::Fetched { identity }, payload));
                        }
                    }
                }
                Ok(Step::Done)
            }
            Source::Set(set) => {
                let key = self.set_key(*set);
                let pattern = format!("*\"jid\":\"{}\"*", glob_escape(jid));
                let size: u64 = self.query(redis::cmd("ZCARD").arg(&key)).await?;
                let mut cursor = offset;
                loop {
                    if *left == 0 {
                        return Ok(Step::Paused(cursor));
                    }
                    let count = CHUNK.min(*left);
                    let (next, found): (u64, Vec<(Vec<u8>, f64)>) = self
                        .query(
                            redis::cmd("ZSCAN")
                                .arg(&key)
                                .arg(cursor)
                                .arg("MATCH")
                                .arg(&pattern)
                                .arg("COUNT")
                                .arg(count),
                        )
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
                let key = self.keys.queue(q);
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
                let sk = self.keys.shard(q);
                if let Some(t) = tenant {
                    let key = sk.tenant_list(Some(t));
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
                    let (next, batch): (u64, Vec<String>) =
                        self.sscan(&sk.tenants, cursor, 50).await?;
                    for enc in batch {
                        let key = format!("{}{}", sk.shard_prefix, enc);
                        match self.walk_list(&key, jid, 0, left).await? {
                            Walk::Found(position, length, raw) => {
                                let t = super::shards::tenant_name(&enc);
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
                    let (next, batch): (u64, Vec<String>) = self
                        .sscan(&self.keys.limits_registry(), cursor, 100)
                        .await?;
                    for enc in batch {
                        let Some(full) = crate::broker::keys::decode(&enc) else {
                            continue;
                        };
                        let lk = self.keys.limit(&full);
                        let entries: Vec<Vec<u8>> = self
                            .query(
                                redis::cmd("LRANGE")
                                    .arg(&lk.waiters)
                                    .arg(0)
                                    .arg(CHUNK as i64 - 1),
                            )
                            .await?;
                        *left = left.saturating_sub(entries.len() as u64 + 1);
                        for (i, e) in entries.iter().enumerate() {
                            let f = waiter_fields(e);
                            if f.first().is_some_and(|j| *j == jid.as_bytes()) {
                                let waiting: u64 =
                                    self.query(redis::cmd("LLEN").arg(&lk.waiters)).await?;
                                let raw = f.get(3).map(|p| p.to_vec()).unwrap_or_default();
                                return Ok(Step::Found(
                                    Location::SlotWait {
                                        key: full,
                                        position: i as u64 + 1,
                                        waiting,
                                    },
                                    raw,
                                ));
                            }
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
        let length: u64 = self.query(redis::cmd("LLEN").arg(key)).await?;
        let mut pos = offset;
        while pos < length {
            if *left == 0 {
                return Ok(Walk::Paused(pos));
            }
            let n = CHUNK.min(*left).min(length - pos);
            // Position p (0 = next) is index -(p + 1).
            let start = -((pos + n) as i64);
            let stop = -((pos + 1) as i64);
            let chunk: Vec<Vec<u8>> = self
                .query(redis::cmd("LRANGE").arg(key).arg(start).arg(stop))
                .await?;
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
        let who = tenant.as_deref().unwrap_or("(no tenant)").to_owned();
        let paused = self.paused_queues().await?;
        let r = &mut out.reasons;
        match &location {
            Location::Running {
                identity, since, ..
            } => r.push(reason(
                "running",
                format!(
                    "running on {identity} since {} ({})",
                    format_time(*since),
                    format_duration(now - since)
                ),
            )),
            Location::Fetched { identity } => r.push(reason(
                "fetched",
                format!(
                    "fetched by {identity}: starting (taking a slot, or just started and not yet in \
                     its heartbeat)"
                ),
            )),
            Location::Queue {
                queue,
                position,
                length,
            } => {
                r.push(reason(
                    "position",
                    format!(
                        "position {} of {} in `{queue}`: {} job(s) will be fetched before it",
                        format_count(*position),
                        format_count(*length),
                        format_count(position - 1)
                    ),
                ));
                if paused.contains(queue) {
                    r.push(reason(
                        "paused",
                        format!("`{queue}` is paused: workers do not fetch it until it is resumed"),
                    ));
                }
                if let Some(p) = &payload {
                    self.reroute_reasons(p, queue, &who, r).await?;
                }
            }
            Location::Inbox {
                queue,
                position,
                length,
            } => {
                r.push(reason(
                    "position",
                    format!(
                        "position {} of {} in the inbox of sharded queue `{queue}`: the next fetches \
                         sort it into {who}'s list",
                        format_count(*position),
                        format_count(*length)
                    ),
                ));
                if paused.contains(queue) {
                    r.push(reason("paused", format!("`{queue}` is paused")));
                }
            }
            Location::Shard {
                queue,
                tenant,
                position,
                length,
            } => {
                r.push(reason(
                    "position",
                    format!(
                        "position {} of {} in {who}'s list of sharded queue `{queue}`",
                        format_count(*position),
                        format_count(*length)
                    ),
                ));
                if paused.contains(queue) {
                    r.push(reason(
                        "paused",
                        format!("`{queue}` is paused: workers do not fetch it until it is resumed"),
                    ));
                }
                let view = self.shard_tenants(queue, &[tenant.as_deref()]).await?;
                if let Some(row) = view.rows.first() {
                    let limit = row.limit.or(view.default_limit);
                    match limit {
                        Some(0) => r.push(reason(
                            "tenant_limit",
                            format!("{who} is paused in `{queue}`: its running limit is 0"),
                        )),
                        Some(l) if row.running >= u64::from(l) => r.push(reason(
                            "tenant_limit",
                            format!(
                                "tenant at its running limit {}/{l} in `{queue}`: its next job starts when one of its running jobs ends",
                                row.running
                            ),
                        )),
                        _ => {}
                    }
                    match row.rotation {
                        Some(rank) => r.push(reason(
                            "dispatch_order",
                            format!(
                                "{who} is {} in `{queue}`'s dispatch order ({} tenants runnable{})",
                                ordinal(rank),
                                view.runnable,
                                if row.under_floor { "; under its floor, so served first" } else { "" }
                            ),
                        )),
                        None if limit.is_none_or(|l| row.running < u64::from(l)) => r.push(reason(
                            "dispatch_order",
                            format!("{who} enters `{queue}`'s dispatch order at the next fetch"),
                        )),
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
                let held: Vec<String> = d
                    .holders
                    .iter()
                    .map(|h| {
                        format!(
                            "{} on {} since {}",
                            h.jid.as_deref().unwrap_or("?"),
                            h.identity,
                            format_time(h.since_ms as f64 / 1000.0)
                        )
                    })
                    .collect();
                r.push(reason(
                    "slot_wait",
                    format!(
                        "{} waiter for `{key}` ({waiting} waiting; {} of {} slots held{}{})",
                        ordinal(*position),
                        d.row.running,
                        limit.map_or_else(|| "?".to_owned(), |l| l.to_string()),
                        if held.is_empty() { String::new() } else { format!(", by {}", held.join(", ")) },
                        if d.row.running as usize > held.len() { ", …" } else { "" }
                    ),
                ));
                if limit == Some(0) {
                    r.push(reason("slot_wait", format!("`{key}` is paused: its limit is 0")));
                }
            }
            Location::Scheduled { at } => r.push(reason(
                "scheduled",
                format!("scheduled for {} ({})", format_time(*at), relative(*at - now)),
            )),
            Location::Retry { at } => {
                let (count, max) = payload
                    .as_ref()
                    .map_or((0, 0), |p| (p.retry_count().unwrap_or(0), p.max_retries()));
                r.push(reason(
                    "retry",
                    format!(
                        "retry {} of {max} scheduled for {} ({})",
                        count + 1,
                        format_time(*at),
                        relative(*at - now)
                    ),
                ));
                if let Some(p) = &payload {
                    r.push(reason("retry", last_error(p)));
                }
            }
            Location::Dead { at } => {
                let retried = payload.as_ref().and_then(Payload::retry_count).unwrap_or(0);
                r.push(reason(
                    "dead",
                    format!(
                        "dead since {} ({} ago) after {retried} retries: it runs again only when \
                         retried by hand",
                        format_time(*at),
                        format_duration(now - at)
                    ),
                ));
                if let Some(p) = &payload {
                    r.push(reason("dead", last_error(p)));
                }
            }
        }
        out.location = Some(location);
        Ok(())
    }

    /// Why a job sits in a reroute queue, and when new jobs go back.
    async fn reroute_reasons(
        &self,
        p: &Payload,
        queue: &str,
        who: &str,
        r: &mut Vec<Reason>,
    ) -> Result<()> {
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
            r.push(reason(
                "reroute",
                format!(
                    "rerouted from `{original}`: {who} enqueued {} {} in the {} window (threshold {})",
                    format_count(rule.count),
                    p.class(),
                    format_duration(rule.per as f64),
                    format_count(rule.threshold)
                ),
            ));
        }
        r.push(reason(
            "reroute",
            match (state.back_in, state.next_queue == original) {
                (_, true) => format!("new jobs of {who} already go to `{original}` again"),
                (Some(s), false) => format!(
                    "new jobs of {who} go to `{}` now, and back to `{original}` in {}",
                    state.next_queue,
                    format_duration(s as f64)
                ),
                (None, false) => format!("new jobs of {who} go to `{}` now", state.next_queue),
            },
        ));
        Ok(())
    }
}

enum Walk {
    Found(u64, u64, Vec<u8>),
    End,
    Paused(u64),
}

fn relative(secs: f64) -> String {
    if secs >= 0.0 {
        format!("in {}", format_duration(secs))
    } else {
        format!(
            "due {} ago; the scheduler enqueues it at its next poll",
            format_duration(-secs)
        )
    }
}

fn last_error(p: &Payload) -> String {
    format!(
        "last error: {}: {}",
        p.get_str("error_class").unwrap_or_else(|| "?".into()),
        p.get_str("error_message").unwrap_or_default()
    )
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
