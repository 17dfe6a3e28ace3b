//! Pushes for a relay that moves jobs from another store into Redis (the
//! `fairjob-postgres` pump): stage the jids, remember that they are staged,
//! then push each through the middleware chain and reroute rules as a direct
//! push would. A push whose staged jid is gone was already made, so a relay
//! that crashed after the push and before noting it pushes nothing twice.

use std::time::{SystemTime, UNIX_EPOCH};

use super::push::count_reroute;
use super::{Client, PushJob};
use crate::broker::{Pushed, Src};
use crate::error::Result;
use crate::wire::now_f64;

/// What became of a staged push.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StagedPush {
    /// Pushed now.
    Pushed,
    /// Not pushed: its staged jid was gone (pushed earlier) or never staged.
    AlreadyPushed,
    /// A client middleware stopped it.
    Stopped,
}

impl Client {
    /// Stages `jids` for [`Client::push_staged`] (those already staged are left as they are).
    pub async fn stage_pushes(&self, jids: &[String]) -> Result<()> {
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let record = self.broker().keys().staged();
        self.broker().stage_claims(&record, jids, now_ms).await
    }

    /// Pushes a job staged with [`Client::stage_pushes`], once: the push and
    /// the removal of its staged jid are one step on one Redis node with plain
    /// queues (on a cluster or to a tenant-sharded queue, two steps, the push
    /// first: a crash between them may push it once more).
    pub async fn push_staged(&self, job: PushJob) -> Result<StagedPush> {
        let jid = job.jid();
        let record = self.broker().keys().staged();
        let Some(job) = self.run_chain(job).await? else {
            self.broker().drop_claim(&record, jid.as_bytes()).await?;
            return Ok(StagedPush::Stopped);
        };
        let src = Src {
            record,
            member: jid,
            once: None,
        };
        Ok(match self.push_one(job, Some(src)).await? {
            Some(_) => StagedPush::Pushed,
            None => StagedPush::AlreadyPushed,
        })
    }

    /// [`Client::push_staged`] for many jobs, in script calls of a bounded
    /// size sent together: one result per job, in order (a job's own fault,
    /// such as its size, is its own `Err`; Redis failing fails the whole call).
    pub async fn push_staged_many(&self, jobs: Vec<PushJob>) -> Result<Vec<Result<StagedPush>>> {
        Ok(self.push_staged_with(jobs, false).await?.0)
    }

    /// Pushes `jobs` once each without staging them: each push marks its
    /// jid in its queue's slot in the push's own step (a `ZADD NX` that is
    /// also the check), so a relay may push it again (its note that it
    /// pushed never written: a crash, a transaction rolled back) and the job
    /// is still pushed once — on one node and on a cluster, to plain and
    /// tenant-sharded queues alike, in bounded script calls sent together.
    /// The relay forgets the marks with [`Client::forget_push_marks`] once
    /// it has noted the pushes (a mark left by a crash expires after a
    /// week). One result per job, in order, as [`Client::push_staged_many`].
    pub async fn push_staged_marked(
        &self,
        jobs: Vec<PushJob>,
    ) -> Result<(Vec<Result<StagedPush>>, PushMarks)> {
        self.push_staged_with(jobs, true).await
    }

    /// Forgets the marks of [`Client::push_staged_marked`].
    pub async fn forget_push_marks(&self, marks: &PushMarks) -> Result<()> {
        self.broker().forget_pushed(&marks.0).await
    }

    async fn push_staged_with(
        &self,
        jobs: Vec<PushJob>,
        mark: bool,
    ) -> Result<(Vec<Result<StagedPush>>, PushMarks)> {
        let mut marks = PushMarks::default();
        let record = self.broker().keys().staged();
        let now = now_f64();
        let mut out: Vec<Result<StagedPush>> = Vec::with_capacity(jobs.len());
        let mut specs = Vec::new();
        let mut at = Vec::new();
        for job in jobs {
            let jid = job.jid();
            let class = job.class();
            let Some(job) = self.run_chain(job).await? else {
                if !mark {
                    self.broker().drop_claim(&record, jid.as_bytes()).await?;
                }
                out.push(Ok(StagedPush::Stopped));
                continue;
            };
            // Marked pushes need no staged jid: the mark is their guard.
            let once = mark.then(|| jid.clone());
            let src = (!mark).then(|| Src {
                record: record.clone(),
                member: jid,
                once: None,
            });
            match self.prepare(job, now, src) {
                Ok((mut spec, _, _)) => {
                    if let Some(jid) = once {
                        marks
                            .0
                            .push((spec.candidates[0].queue.clone(), jid.clone()));
                        spec.once = Some(jid);
                    }
                    at.push((out.len(), class));
                    specs.push(spec);
                    out.push(Ok(StagedPush::Pushed));
                }
                Err(e) => out.push(Err(e)),
            }
        }
        let pushed = self.broker().push(&specs, self.clock_offset()).await?;
        for ((spec, (i, class)), p) in specs.iter().zip(at).zip(pushed) {
            out[i] = Ok(match p {
                Pushed::To(c) => {
                    if c > 0 {
                        count_reroute(class, &spec.candidates[c].queue);
                    }
                    StagedPush::Pushed
                }
                Pushed::Replaced(_) => StagedPush::Pushed,
                Pushed::SourceGone => StagedPush::AlreadyPushed,
                Pushed::Duplicate(holder) => {
                    out[i] = Err(crate::Error::Duplicate { jid: holder });
                    continue;
                }
            });
        }
        Ok((out, marks))
    }
}

/// The marks [`Client::push_staged_marked`] left: (queue, jid).
#[derive(Debug, Clone, Default)]
pub struct PushMarks(Vec<(String, String)>);

impl PushMarks {
    /// How many.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// None left.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// How a job a relay keeps ended, as a worker records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RelayEnd {
    /// Succeeded (or was discarded: Sidekiq keeps neither).
    Done,
    /// Went to the dead set.
    Dead,
}

impl RelayEnd {
    /// The word stored in the completion list.
    pub fn as_str(self) -> &'static str {
        match self {
            RelayEnd::Done => "done",
            RelayEnd::Dead => "dead",
        }
    }

    /// A completion-list entry: `<state> <jid>`.
    pub fn entry(self, jid: &str) -> String {
        format!("{} {jid}", self.as_str())
    }

    /// Parses a completion-list entry (`None` for a malformed one).
    pub fn parse(entry: &str) -> Option<(RelayEnd, String)> {
        let (state, jid) = entry.split_once(' ')?;
        let end = match state {
            "done" => RelayEnd::Done,
            "dead" => RelayEnd::Dead,
            _ => return None,
        };
        (!jid.is_empty()).then(|| (end, jid.to_owned()))
    }
}

/// A relay's epoch, its fenced staging and the completions of jobs it keeps
/// (fairjob-postgres' "Postgres stays the truth" mode).
/// Ends read from the relay's completion list by [`Client::peek_relay_ends`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RelayEndsRead {
    /// The entries as read (malformed ones too), for the trim.
    entries: Vec<String>,
    /// The ends parsed from them, in order.
    pub ends: Vec<(RelayEnd, String)>,
}

impl RelayEndsRead {
    /// How many entries were read (malformed ones too).
    pub fn entries_read(&self) -> usize {
        self.entries.len()
    }
}

impl Client {
    /// The relay's epoch in Redis: `candidate` is written when there is none;
    /// returns the epoch Redis holds. A relay that remembered another epoch
    /// knows Redis lost data (or another relay started a new epoch).
    pub async fn relay_epoch(&self, candidate: &str) -> Result<String> {
        self.broker().relay_epoch(candidate).await
    }

    /// The relay's epoch as Redis holds it (`None`: gone), writing nothing.
    pub async fn relay_epoch_read(&self) -> Result<Option<String>> {
        self.broker().relay_epoch_read().await
    }

    /// Records that kept jobs ended (what a worker does after acking or
    /// burying a job marked with [`crate::wire::fields::PG_TRUTH`]).
    pub async fn record_relay_ends(&self, ends: &[(RelayEnd, String)]) -> Result<()> {
        let entries: Vec<String> = ends.iter().map(|(e, jid)| e.entry(jid)).collect();
        let jids: Vec<String> = ends.iter().map(|(_, jid)| jid.clone()).collect();
        self.broker().relay_completed(&entries, &jids).await
    }

    /// Reads up to `n` recorded ends from the head of the completion list,
    /// taking none: once they are stored elsewhere,
    /// [`Client::trim_relay_ends`] removes them. A reader killed in between
    /// loses nothing (the next read sees them again); malformed entries are
    /// skipped with a warning (and removed with the others).
    pub async fn peek_relay_ends(&self, n: usize) -> Result<RelayEndsRead> {
        let entries = self.broker().relay_peek_completed(n).await?;
        let ends = entries
            .iter()
            .filter_map(|e| {
                let parsed = RelayEnd::parse(e);
                if parsed.is_none() {
                    tracing::warn!(entry = %e, "malformed entry in the relay's completion list skipped");
                }
                parsed
            })
            .collect();
        Ok(RelayEndsRead { entries, ends })
    }

    /// Removes the ends `read` found from the completion list, if its head
    /// still holds exactly them; false when another reader removed them
    /// first (its copy of them is the same).
    pub async fn trim_relay_ends(&self, read: &RelayEndsRead) -> Result<bool> {
        Ok(self.broker().relay_trim_completed(&read.entries).await? == read.entries.len())
    }

    /// Records kept jobs as live in Redis (after their push).
    pub async fn mark_relay_live(&self, jids: &[String]) -> Result<()> {
        self.broker().relay_mark_live(jids).await
    }

    /// The jids among `jids` that Redis does not hold as live kept jobs.
    pub async fn relay_missing(&self, jids: &[String]) -> Result<Vec<String>> {
        let found = self.broker().relay_live_members(jids).await?;
        Ok(jids
            .iter()
            .zip(found)
            .filter(|(_, f)| !f)
            .map(|(j, _)| j.clone())
            .collect())
    }

    /// Ends recorded and not drained yet.
    pub async fn relay_ends_waiting(&self) -> Result<u64> {
        self.broker().relay_completed_len().await
    }
}

#[cfg(test)]
mod tests {
    use super::RelayEnd;

    #[test]
    fn a_completion_entry_round_trips_and_junk_is_refused() {
        let e = RelayEnd::Dead.entry("abc 123");
        assert_eq!(
            RelayEnd::parse(&e),
            Some((RelayEnd::Dead, "abc 123".into()))
        );
        assert_eq!(
            RelayEnd::parse("done x"),
            Some((RelayEnd::Done, "x".into()))
        );
        assert_eq!(RelayEnd::parse("done "), None);
        assert_eq!(RelayEnd::parse("later x"), None);
        assert_eq!(RelayEnd::parse("nospace"), None);
    }
}
