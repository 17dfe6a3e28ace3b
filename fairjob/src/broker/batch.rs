//! Batches (`crate::batch`): a batch's members are staged in chunks
//! (`batch_stage.lua`), invisible until `batch_commit.lua` flips the batch
//! open; then each staged member is pushed with `push` from the batch's
//! staged set (a `Src`), so a member is pushed once however often a push is
//! repeated. A member's end leaves the batch's sets in its exit's own script
//! on one server (`finish.lua`, `shard_finish.lua` with `Holds::batch`); on a
//! Redis Cluster the batch's keys are in another slot, and `batch_end` is a
//! step of its own right after the exit. The rules are `policy::batch`, their
//! Lua twin `scripts/lib/batch.lua`. In testing mode the operations a
//! client, a running job and a member's exit use answer from the memory
//! store (`memory/batches.rs`, the same rules); the listing, the sweep's and
//! a cluster's operations need Redis.

use redis::Value;

use super::RedisBroker;
use super::scripts::{
    BATCH_ADD, BATCH_COMMIT, BATCH_END, BATCH_STAGE, WORKFLOW_STAGE, WORKFLOW_WORK,
};
use crate::error::Result;
use crate::policy::batch::{Event, Outcome};
use crate::wire::encoding::encode;

/// How long staged members wait for their batch's commit before they expire.
pub const STAGING_TTL_SECS: u64 = 3600;

/// What a commit's flip found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Committed {
    /// Opened now; the events an empty batch fired at once.
    Opened(Vec<Event>),
    /// It was open already (a repeated commit).
    AlreadyOpen,
    /// Its staging expired (or it was never staged).
    Gone,
    /// A child batch's parent is gone.
    ParentGone,
    /// A child batch's parent fired `complete`: it takes no more.
    ParentFinished,
}

/// What adding a member to an open batch found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Added {
    /// Registered and staged: push it from the staged set.
    Staged,
    /// The batch fired `complete`.
    Finished,
    /// No such batch.
    Gone,
}

/// A batch's staged members, as a sweep finds them (`batch_staged`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Staged {
    /// Open: up to the asked number of staged members and their payloads.
    Open(Vec<(String, String)>),
    /// Still staging: its creator may yet commit it.
    Staging,
    /// Gone (expired, or never staged).
    Gone,
}

/// A batch's stored facts, raw (`batch_status`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BatchRow {
    /// The hash's fields (state, desc, tenant, total, times…).
    pub fields: Vec<(String, String)>,
    /// Members that have not run once.
    pub pending: u64,
    /// Members that have not succeeded.
    pub unsucceeded: u64,
    /// Failed members not succeeded since.
    pub failed: u64,
    /// Some failed members (at most about 100) and their failures.
    pub failed_some: Vec<(String, String)>,
    /// Members staged and not pushed yet.
    pub staged: u64,
}

/// A workflow step as `workflow_stage.lua` stages it.
#[derive(Debug, Clone, Default)]
pub struct StagedStep {
    /// Its jid.
    pub jid: String,
    /// Its name.
    pub name: String,
    /// Its payload (a held step's split at its enqueued_at value by a newline).
    pub payload: String,
    /// Held until its dependencies are met.
    pub held: bool,
    /// Its policy for a failed dependency (`cancel`, `continue`, `ignore`).
    pub policy: String,
    /// Its queue's name, and whether that queue is tenant-sharded.
    pub queue: String,
    /// Whether its queue is tenant-sharded.
    pub sharded: bool,
    /// Its dependencies.
    pub deps: Vec<String>,
    /// Per-dependency policies.
    pub edges: Vec<(String, String)>,
}

/// A comma-separated list of encoded names, decoded.
pub(super) fn decode_list(list: Option<String>) -> Vec<String> {
    list.unwrap_or_default()
        .split(',')
        .filter(|s| !s.is_empty())
        .filter_map(crate::wire::encoding::decode)
        .collect()
}

fn events(v: Value) -> Vec<Event> {
    match v {
        Value::Array(items) => items
            .into_iter()
            .filter_map(|i| match i {
                Value::BulkString(b) => Event::parse(&String::from_utf8_lossy(&b)),
                Value::SimpleString(s) => Event::parse(&s),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

impl RedisBroker {
    /// Stages members (jid, payload) of batch `bid` before its commit, in one
    /// call: each is a member from now on, and nothing is runnable. False
    /// when the batch is no longer staging.
    pub async fn batch_stage(
        &self,
        bid: &str,
        description: &str,
        tenant: &str,
        members: &[(String, String)],
        now: f64,
    ) -> Result<bool> {
        #[cfg(feature = "testing")]
        if let Some(store) = self.memory() {
            return Ok(store.batch_stage(&self.keys.batch(bid), description, tenant, members, now));
        }
        let mut inv = BATCH_STAGE.call();
        inv.key(self.keys.batch(bid));
        inv.arg(format!("{now:.6}"))
            .arg(STAGING_TTL_SECS)
            .arg(description)
            .arg(tenant);
        for (jid, payload) in members {
            inv.arg(jid).arg(payload);
        }
        let done: i64 = self.invoke(&inv).await?;
        Ok(done == 1)
    }

    /// Stages steps of workflow `bid` before its commit, in one call (see
    /// `workflow_stage.lua`; the caller gives the steps in name order). False
    /// when it is no longer staging.
    pub async fn workflow_stage(
        &self,
        bid: &str,
        description: &str,
        tenant: &str,
        steps: &[StagedStep],
        now: f64,
    ) -> Result<bool> {
        #[cfg(feature = "testing")]
        if let Some(store) = self.memory() {
            return Ok(store.workflow_stage(
                &self.keys.batch(bid),
                description,
                tenant,
                steps,
                now,
            ));
        }
        let mut inv = WORKFLOW_STAGE.call();
        inv.key(self.keys.batch(bid));
        inv.arg(format!("{now:.6}"))
            .arg(STAGING_TTL_SECS)
            .arg(description)
            .arg(tenant)
            .arg(bid)
            .arg(self.keys.workflow_held_prefix());
        for s in steps {
            inv.arg(&s.jid)
                .arg(encode(&s.name))
                .arg(&s.name)
                .arg(&s.payload)
                .arg(if s.held { "1" } else { "0" })
                .arg(&s.policy)
                .arg(self.keys.queue(&s.queue))
                .arg(self.wake_key(&s.queue, s.sharded))
                .arg(&s.queue)
                .arg(s.deps.len());
            for d in &s.deps {
                inv.arg(encode(d));
            }
            inv.arg(s.edges.len());
            for (d, pol) in &s.edges {
                inv.arg(encode(d)).arg(pol);
            }
        }
        let done: i64 = self.invoke(&inv).await?;
        Ok(done == 1)
    }

    /// Tells workflow `bid`'s steps what a member's exit left for later
    /// (more dependents than one script call's budget): `workflow_work.lua`
    /// until nothing is left. Returns the events fired meanwhile. A process
    /// that dies before the end leaves the rest to the next step's end in the
    /// workflow (each end works through what is left first).
    pub async fn workflow_drain(&self, bid: &str, clock_offset: i64) -> Result<Vec<Event>> {
        #[cfg(feature = "testing")]
        if self.memory().is_some() {
            // The memory store tells every dependent in the end's own step.
            return Ok(Vec::new());
        }
        let mut fired = Vec::new();
        loop {
            let mut inv = WORKFLOW_WORK.call();
            inv.key(self.keys.batch(bid));
            inv.arg(clock_offset);
            let v: Value = self.invoke(&inv).await?;
            let Value::Array(mut items) = v else {
                return Ok(fired);
            };
            let left = match items.first() {
                Some(Value::Int(n)) => *n,
                _ => 0,
            };
            if !items.is_empty() {
                items.remove(0);
            }
            fired.extend(events(Value::Array(items)));
            if left <= 0 {
                return Ok(fired);
            }
        }
    }

    /// A workflow's steps: (name, state), and a step's failed dependencies
    /// it continued past, from its hash (at most `n` steps read).
    pub async fn workflow_steps(
        &self,
        bid: &str,
        n: usize,
    ) -> Result<Vec<(String, String, Vec<String>)>> {
        #[cfg(feature = "testing")]
        if let Some(store) = self.memory() {
            return Ok(store.workflow_steps(&self.keys.batch(bid), n));
        }
        let w = format!("{}:wf", self.keys.batch(bid));
        // Bounded: at most `n` names, in HSCAN steps.
        let mut fields: Vec<(String, String)> = Vec::new();
        let mut cursor = 0u64;
        loop {
            let (next, page): (u64, Vec<(String, String)>) = self
                .query(
                    redis::cmd("HSCAN")
                        .arg(&w)
                        .arg(cursor)
                        .arg("MATCH")
                        .arg("n:*")
                        .arg("COUNT")
                        .arg(1000),
                )
                .await?;
            fields.extend(page);
            cursor = next;
            if cursor == 0 || fields.len() >= n {
                break;
            }
        }
        fields.truncate(n);
        if fields.is_empty() {
            return Ok(Vec::new());
        }
        // Each step's state and failed dependencies, in one HMGET.
        let mut get = redis::cmd("HMGET");
        get.arg(&w);
        for (field, _) in &fields {
            let e = &field[2..];
            get.arg(format!("s:{e}")).arg(format!("fd:{e}"));
        }
        let values: Vec<Option<String>> = self.query(&get).await?;
        let mut values = values.into_iter();
        let mut out: Vec<_> = fields
            .into_iter()
            .map(|(_, name)| {
                let state = values.next().flatten().unwrap_or_default();
                (name, state, decode_list(values.next().flatten()))
            })
            .collect();
        out.sort();
        Ok(out)
    }

    /// Records step `name`'s result (JSON) in workflow `bid`.
    pub async fn workflow_record(&self, bid: &str, name: &str, json: &str) -> Result<()> {
        #[cfg(feature = "testing")]
        if let Some(store) = self.memory() {
            store.workflow_record(&self.keys.batch(bid), name, json);
            return Ok(());
        }
        self.query(
            redis::cmd("HSET")
                .arg(format!("{}:results", self.keys.batch(bid)))
                .arg(name)
                .arg(json),
        )
        .await
    }

    /// Step `name`'s recorded result in workflow `bid`.
    pub async fn workflow_result(&self, bid: &str, name: &str) -> Result<Option<String>> {
        #[cfg(feature = "testing")]
        if let Some(store) = self.memory() {
            return Ok(store.workflow_result(&self.keys.batch(bid), name));
        }
        self.query(
            redis::cmd("HGET")
                .arg(format!("{}:results", self.keys.batch(bid)))
                .arg(name),
        )
        .await
    }

    /// The dependencies step `name` of workflow `bid` continued past when
    /// they failed (`on_dependency_failure = continue`).
    pub async fn workflow_failed_deps(&self, bid: &str, name: &str) -> Result<Vec<String>> {
        #[cfg(feature = "testing")]
        if let Some(store) = self.memory() {
            return Ok(store.workflow_failed_deps(&self.keys.batch(bid), name));
        }
        let failed: Option<String> = self
            .query(
                redis::cmd("HGET")
                    .arg(format!("{}:wf", self.keys.batch(bid)))
                    .arg(format!("fd:{}", encode(name))),
            )
            .await?;
        Ok(decode_list(failed))
    }

    /// Lists batch `bid` (created at `now`; a batch listed already keeps
    /// its time) for views and marks it as releasing, before its flip: a
    /// worker's sweep pushes the staged members of an open batch its
    /// committer left.
    pub async fn batch_listed(&self, bid: &str, now: f64) -> Result<()> {
        #[cfg(feature = "testing")]
        if self.memory().is_some() {
            // Nothing to list: the listing serves the views and the sweep,
            // which testing mode has not.
            return Ok(());
        }
        let mut listing = redis::cmd("ZADD");
        listing.arg(self.keys.batches()).arg("NX").arg(now).arg(bid);
        let mut releasing = redis::cmd("ZADD");
        releasing
            .arg(self.keys.batches_releasing())
            .arg(now)
            .arg(bid);
        if self.is_cluster() {
            // Two slots: one command each.
            self.query::<()>(&listing).await?;
            return self.query(&releasing).await;
        }
        let mut pipe = redis::pipe();
        pipe.add_command(listing)
            .ignore()
            .add_command(releasing)
            .ignore();
        self.pipe(&pipe).await
    }

    /// Flips batch `bid` open: its callbacks' fields stored, its data kept
    /// `keep_secs` after `success`; an empty batch fires at once. A child
    /// batch (`parent`: the parent's bid) joins its parent in the same step
    /// (one server only: see `batch_in_script`).
    pub async fn batch_commit(
        &self,
        bid: &str,
        keep_secs: u64,
        callbacks: &[(String, String)],
        parent: Option<&str>,
        clock_offset: i64,
    ) -> Result<Committed> {
        #[cfg(feature = "testing")]
        if let Some(store) = self.memory() {
            let parent = parent.map(|p| (self.keys.batch(p), crate::policy::batch::kid_id(bid)));
            let (committed, pushed) = store.batch_commit(
                &self.keys.batch(bid),
                keep_secs,
                callbacks,
                parent.as_ref().map(|(p, k)| (p.as_str(), k.as_str())),
                clock_offset,
            );
            store.notify(pushed).await?;
            return Ok(committed);
        }
        let mut inv = BATCH_COMMIT.call();
        inv.key(self.keys.batch(bid));
        inv.arg(clock_offset).arg(keep_secs);
        for (f, v) in callbacks {
            inv.arg(f).arg(v);
        }
        if let Some(parent) = parent {
            inv.arg("@parent")
                .arg(self.keys.batch(parent))
                .arg(crate::policy::batch::kid_id(bid));
        }
        let v: Value = self.invoke(&inv).await?;
        Ok(match v {
            Value::Int(0) => Committed::Gone,
            Value::Int(-1) => Committed::ParentGone,
            Value::Int(-2) => Committed::ParentFinished,
            Value::Int(_) => Committed::AlreadyOpen,
            v => Committed::Opened(events(v)),
        })
    }

    /// Adds member `jid` to open batch `bid` (from a running member).
    pub async fn batch_add(&self, bid: &str, jid: &str, payload: &str, now: f64) -> Result<Added> {
        #[cfg(feature = "testing")]
        if let Some(store) = self.memory() {
            return Ok(store.batch_add(&self.keys.batch(bid), jid, payload, now));
        }
        let mut inv = BATCH_ADD.call();
        inv.key(self.keys.batch(bid));
        inv.arg(format!("{now:.6}")).arg(jid).arg(payload);
        let r: String = self.invoke(&inv).await?;
        Ok(match r.as_str() {
            "ok" => Added::Staged,
            "finished" => Added::Finished,
            _ => Added::Gone,
        })
    }

    /// The staged set a batch's members are pushed from (a `Src` record).
    pub fn batch_staged_record(&self, bid: &str) -> String {
        format!("{}:staged", self.keys.batch(bid))
    }

    /// Forgets pushed members' stored payloads (their staged entries went
    /// with their push); when none is left staged, the batch leaves the
    /// releasing set.
    pub async fn batch_released(&self, bid: &str, jids: &[String]) -> Result<()> {
        #[cfg(feature = "testing")]
        if let Some(store) = self.memory() {
            store.batch_released(&self.keys.batch(bid), jids);
            return Ok(());
        }
        let b = self.keys.batch(bid);
        if !jids.is_empty() {
            let _: i64 = self
                .query(redis::cmd("HDEL").arg(format!("{b}:payloads")).arg(jids))
                .await?;
        }
        let left: u64 = self
            .query(redis::cmd("ZCARD").arg(format!("{b}:staged")))
            .await?;
        if left == 0 {
            let _: i64 = self
                .query(
                    redis::cmd("ZREM")
                        .arg(self.keys.batches_releasing())
                        .arg(bid),
                )
                .await?;
        }
        Ok(())
    }

    /// Batches flipped before `before` (epoch seconds) that may still have
    /// staged members, at most `n`.
    pub async fn batches_releasing(&self, before: f64, n: usize) -> Result<Vec<String>> {
        self.query(
            redis::cmd("ZRANGE")
                .arg(self.keys.batches_releasing())
                .arg("-inf")
                .arg(before)
                .arg("BYSCORE")
                .arg("LIMIT")
                .arg(0)
                .arg(n),
        )
        .await
    }

    /// Up to `n` staged members of batch `bid` and their payloads, when it
    /// is open (a batch still staging has nothing to push yet; a gone one,
    /// nothing at all).
    pub async fn batch_staged(&self, bid: &str, n: usize) -> Result<Staged> {
        let b = self.keys.batch(bid);
        let state: Option<String> = self.query(redis::cmd("HGET").arg(&b).arg("state")).await?;
        match state.as_deref() {
            None => return Ok(Staged::Gone),
            Some("open") => {}
            Some(_) => return Ok(Staged::Staging),
        }
        let jids: Vec<String> = self
            .query(
                redis::cmd("ZRANGE")
                    .arg(format!("{b}:staged"))
                    .arg(0)
                    .arg(n.max(1) - 1),
            )
            .await?;
        if jids.is_empty() {
            return Ok(Staged::Open(Vec::new()));
        }
        let payloads: Vec<Option<String>> = self
            .query(redis::cmd("HMGET").arg(format!("{b}:payloads")).arg(&jids))
            .await?;
        Ok(Staged::Open(
            jids.into_iter()
                .zip(payloads)
                .filter_map(|(j, p)| p.map(|p| (j, p)))
                .collect(),
        ))
    }

    /// Takes a batch out of the releasing set (gone, or nothing staged).
    pub async fn batch_unlist_releasing(&self, bid: &str) -> Result<()> {
        #[cfg(feature = "testing")]
        if self.memory().is_some() {
            // Nothing is listed (see `batch_listed`).
            return Ok(());
        }
        self.query(
            redis::cmd("ZREM")
                .arg(self.keys.batches_releasing())
                .arg(bid),
        )
        .await
    }

    /// The set a cluster's fired callbacks wait in (a `Src` record).
    pub fn batch_due_record(&self, bid: &str) -> String {
        format!("{}:due", self.keys.batch(bid))
    }

    /// Batch `bid`'s stored callback for `event`: its payload split at its
    /// enqueued_at value by a newline (`None`: it has none).
    pub async fn batch_callback(&self, bid: &str, event: &str) -> Result<Option<String>> {
        self.query(
            redis::cmd("HGET")
                .arg(self.keys.batch(bid))
                .arg(format!("cb:{event}")),
        )
        .await
    }

    /// Whether a member's end is written by its exit's script (one server);
    /// on a Redis Cluster the caller writes it with [`Self::batch_end`].
    pub(crate) fn batch_in_script(&self) -> bool {
        !self.is_cluster()
    }

    /// A member's end as a step of its own (a Redis Cluster, after the
    /// exit): it leaves the batch's sets; returns the events it fired.
    pub async fn batch_end(
        &self,
        bid: &str,
        jid: &str,
        outcome: Outcome,
        failure: &str,
        clock_offset: i64,
    ) -> Result<Vec<Event>> {
        #[cfg(feature = "testing")]
        if let Some(store) = self.memory() {
            let (fired, pushed) =
                store.batch_end(&self.keys.batch(bid), jid, outcome, failure, clock_offset);
            store.notify(pushed).await?;
            return Ok(fired);
        }
        let mut inv = BATCH_END.call();
        inv.key(self.keys.batch(bid));
        inv.arg(jid)
            .arg(outcome.as_str())
            .arg(failure)
            .arg(clock_offset);
        let v: Value = self.invoke(&inv).await?;
        Ok(events(v))
    }

    /// A batch's stored facts; `None` when there is no such batch.
    pub async fn batch_status(&self, bid: &str) -> Result<Option<BatchRow>> {
        #[cfg(feature = "testing")]
        if let Some(store) = self.memory() {
            return Ok(store.batch_status(&self.keys.batch(bid)));
        }
        let b = self.keys.batch(bid);
        let mut pipe = redis::pipe();
        pipe.cmd("HGETALL")
            .arg(&b)
            .cmd("SCARD")
            .arg(format!("{b}:pending"))
            .cmd("SCARD")
            .arg(format!("{b}:jids"))
            .cmd("HLEN")
            .arg(format!("{b}:failed"))
            .cmd("HSCAN")
            .arg(format!("{b}:failed"))
            .arg(0)
            .arg("COUNT")
            .arg(100)
            .cmd("ZCARD")
            .arg(format!("{b}:staged"));
        type Row = (
            Vec<(String, String)>,
            u64,
            u64,
            u64,
            (String, Vec<(String, String)>),
            u64,
        );
        let (fields, pending, unsucceeded, failed, (_, failed_some), staged): Row =
            self.pipe(&pipe).await?;
        if fields.is_empty() {
            return Ok(None);
        }
        Ok(Some(BatchRow {
            fields,
            pending,
            unsucceeded,
            failed,
            failed_some,
            staged,
        }))
    }

    /// Deletes held step `jid`'s index key (its batch expired holding it).
    pub async fn workflow_unindex(&self, jid: &str) -> Result<()> {
        self.query(redis::cmd("DEL").arg(self.keys.workflow_held(jid)))
            .await
    }
}
