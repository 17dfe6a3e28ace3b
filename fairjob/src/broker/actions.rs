//! The operator's actions (dashboard, CLI): pause and resume a queue, act on
//! entries of Sidekiq's `retry`, `schedule` and `dead` sets, and send a worker
//! process Sidekiq's remote signals.
//!
//! Each action is one command where it touches one key. Where it spans two of
//! Sidekiq's sets (`dead` → `retry`, `retry` → `dead`), which live in
//! different Redis Cluster slots, the entry is written to its destination
//! first and removed from its source second: a crash in between leaves it in
//! both (the job may run twice), never in neither. If the source entry turns
//! out to be gone already (another operator or the scheduler took it), the
//! copy is withdrawn again. Payloads move byte for byte, never re-encoded.
//! "Retry now" and "add to queue" make an entry due now; the scheduler then
//! enqueues it through the client middleware (reroute rules, tenant shards),
//! as it does every due entry.

use serde::Serialize;

use super::RedisBroker;
use super::push::ZSet;
use crate::error::Result;

/// At most this many entries one bulk action handles.
pub const MAX_BULK: usize = 1_000;

/// One of Sidekiq's sorted sets of jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum JobSet {
    /// `retry`: failed jobs waiting for their next attempt.
    Retry,
    /// `schedule`: jobs enqueued for later.
    Scheduled,
    /// `dead`: the morgue.
    Dead,
}

impl JobSet {
    /// The set's name in URLs and JSON (`retries`, `scheduled`, `dead`).
    pub fn name(self) -> &'static str {
        match self {
            JobSet::Retry => "retries",
            JobSet::Scheduled => "scheduled",
            JobSet::Dead => "dead",
        }
    }

    /// The actions an entry of this set offers.
    pub fn actions(self) -> &'static [SetAction] {
        match self {
            JobSet::Retry => &[SetAction::RetryNow, SetAction::Delete, SetAction::Kill],
            JobSet::Scheduled => &[SetAction::AddToQueue, SetAction::Delete],
            JobSet::Dead => &[SetAction::RetryNow, SetAction::Delete],
        }
    }
}

/// What to do with an entry of a [`JobSet`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SetAction {
    /// Run it now (a retry, or a dead job once more).
    RetryNow,
    /// Enqueue a scheduled job now.
    AddToQueue,
    /// Remove it.
    Delete,
    /// Move it to `dead`.
    Kill,
}

impl SetAction {
    /// Parses the form value (`retry_now`, `add_to_queue`, `delete`, `kill`).
    pub fn parse(s: &str) -> Option<SetAction> {
        Some(match s {
            "retry_now" | "retry" => SetAction::RetryNow,
            "add_to_queue" | "enqueue" => SetAction::AddToQueue,
            "delete" => SetAction::Delete,
            "kill" => SetAction::Kill,
            _ => return None,
        })
    }

    /// The form value.
    pub fn as_str(self) -> &'static str {
        match self {
            SetAction::RetryNow => "retry_now",
            SetAction::AddToQueue => "add_to_queue",
            SetAction::Delete => "delete",
            SetAction::Kill => "kill",
        }
    }

    /// The button's label.
    pub fn label(self) -> &'static str {
        match self {
            SetAction::RetryNow => "Retry now",
            SetAction::AddToQueue => "Add to queue",
            SetAction::Delete => "Delete",
            SetAction::Kill => "Kill",
        }
    }
}

/// What a bulk action did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Acted {
    /// Entries acted on.
    pub done: u64,
    /// Entries no longer there (taken meanwhile).
    pub gone: u64,
}

impl RedisBroker {
    /// The Redis key of a set.
    pub(super) fn set_key(&self, set: JobSet) -> String {
        match set {
            JobSet::Retry => self.keys.retry(),
            JobSet::Scheduled => self.keys.schedule(),
            JobSet::Dead => self.keys.dead(),
        }
    }

    /// Pauses `queue`: workers stop fetching it (within a couple of seconds;
    /// running jobs finish). Jobs can still be enqueued.
    pub async fn pause_queue(&self, queue: &str) -> Result<()> {
        let _: i64 = self
            .query(redis::cmd("SADD").arg(self.keys.paused()).arg(queue))
            .await?;
        Ok(())
    }

    /// Resumes a paused queue and wakes its idle workers.
    pub async fn resume_queue(&self, queue: &str) -> Result<()> {
        let mut pipe = redis::pipe();
        pipe.srem(self.keys.paused(), queue).ignore();
        for wake in [self.keys.wake(queue), self.keys.shard(queue).wake] {
            pipe.lpush(&wake, "1").ignore().ltrim(&wake, 0, 0).ignore();
        }
        self.pipe::<()>(&pipe).await
    }

    /// The paused queues.
    pub async fn paused_queues(&self) -> Result<Vec<String>> {
        let mut v: Vec<String> = self
            .query(redis::cmd("SMEMBERS").arg(self.keys.paused()))
            .await?;
        v.sort();
        Ok(v)
    }

    /// Applies `action` to entries of `set`, each given by its exact bytes
    /// (at most [`MAX_BULK`] per call; more is refused).
    pub async fn act_on_entries(
        &self,
        set: JobSet,
        action: SetAction,
        entries: &[Vec<u8>],
    ) -> Result<Acted> {
        if entries.len() > MAX_BULK {
            return Err(crate::Error::Config(format!(
                "at most {MAX_BULK} entries per action, not {}",
                entries.len()
            )));
        }
        if !set.actions().contains(&action) {
            return Err(crate::Error::Config(format!(
                "`{}` is not an action of {}",
                action.as_str(),
                set.name()
            )));
        }
        let mut acted = Acted::default();
        if entries.is_empty() {
            return Ok(acted);
        }
        let key = self.set_key(set);
        match (set, action) {
            (_, SetAction::Delete) => {
                let mut pipe = redis::pipe();
                for e in entries {
                    pipe.zrem(&key, e.as_slice());
                }
                let removed: Vec<i64> = self.pipe(&pipe).await?;
                count(&mut acted, removed);
            }
            (JobSet::Retry | JobSet::Scheduled, SetAction::RetryNow | SetAction::AddToQueue) => {
                // Due now, by Redis's clock, if still there (XX adds nothing).
                let now = self.time().await?;
                let mut pipe = redis::pipe();
                for e in entries {
                    pipe.cmd("ZADD")
                        .arg(&key)
                        .arg("XX")
                        .arg("CH")
                        .arg(format!("{now:.6}"))
                        .arg(e.as_slice());
                }
                let changed: Vec<i64> = self.pipe(&pipe).await?;
                // An entry already due (score unchanged) counts as done too.
                let mut pipe = redis::pipe();
                for e in entries {
                    pipe.zscore(&key, e.as_slice());
                }
                let there: Vec<Option<f64>> = self.pipe(&pipe).await?;
                for (c, t) in changed.into_iter().zip(there) {
                    if c > 0 || t.is_some() {
                        acted.done += 1;
                    } else {
                        acted.gone += 1;
                    }
                }
            }
            (JobSet::Dead, SetAction::RetryNow) => {
                // Into `retry`, due now; then out of `dead`.
                let now = self.time().await?;
                let retry = self.keys.retry();
                let mut pipe = redis::pipe();
                for e in entries {
                    pipe.zadd(&retry, e.as_slice(), format!("{now:.6}"))
                        .ignore();
                }
                self.pipe::<()>(&pipe).await?;
                let removed = self.remove_moved(&key, &retry, entries).await?;
                count(&mut acted, removed);
            }
            (JobSet::Retry | JobSet::Scheduled, SetAction::Kill) => {
                // Buried in `dead` (trimmed as Sidekiq trims it); then out of the source.
                for e in entries {
                    let payload = String::from_utf8_lossy(e);
                    self.zset_add(ZSet::Dead, 0.0, &payload, 0).await?;
                }
                let removed = self.remove_moved(&key, &self.keys.dead(), entries).await?;
                count(&mut acted, removed);
            }
            _ => unreachable!("checked against the set's actions"),
        }
        Ok(acted)
    }

    /// The second step of a move: removes `entries` from `source`; an entry
    /// that was already gone is withdrawn from `dest` again.
    async fn remove_moved(
        &self,
        source: &str,
        dest: &str,
        entries: &[Vec<u8>],
    ) -> Result<Vec<i64>> {
        let mut pipe = redis::pipe();
        for e in entries {
            pipe.zrem(source, e.as_slice());
        }
        let removed: Vec<i64> = self.pipe(&pipe).await?;
        let mut pipe = redis::pipe();
        let mut any = false;
        for (e, r) in entries.iter().zip(&removed) {
            if *r == 0 {
                pipe.zrem(dest, e.as_slice()).ignore();
                any = true;
            }
        }
        if any {
            self.pipe::<()>(&pipe).await?;
        }
        Ok(removed)
    }

    /// Sends a worker process one of Sidekiq's remote signals (`TSTP`: quiet,
    /// `TERM`: stop), as Sidekiq's Web UI does; its heartbeat picks it up.
    pub async fn signal_process(&self, identity: &str, signal: ProcessSignal) -> Result<()> {
        let key = self.keys.process_signals(identity);
        let mut pipe = redis::pipe();
        pipe.lpush(&key, signal.as_str())
            .ignore()
            .expire(&key, 60)
            .ignore();
        self.pipe::<()>(&pipe).await
    }
}

fn count(acted: &mut Acted, removed: Vec<i64>) {
    for r in removed {
        if r > 0 {
            acted.done += 1;
        } else {
            acted.gone += 1;
        }
    }
}

/// Sidekiq's remote signals to a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ProcessSignal {
    /// Stop fetching new jobs.
    Quiet,
    /// Shut down.
    Stop,
}

impl ProcessSignal {
    /// The signal's name as Sidekiq writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            ProcessSignal::Quiet => "TSTP",
            ProcessSignal::Stop => "TERM",
        }
    }
}
