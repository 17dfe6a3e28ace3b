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
        let record = self.broker().keys().staged();
        let now = now_f64();
        let mut out: Vec<Result<StagedPush>> = Vec::with_capacity(jobs.len());
        let mut specs = Vec::new();
        let mut at = Vec::new();
        for job in jobs {
            let jid = job.jid();
            let class = job.class();
            let Some(job) = self.run_chain(job).await? else {
                self.broker().drop_claim(&record, jid.as_bytes()).await?;
                out.push(Ok(StagedPush::Stopped));
                continue;
            };
            let src = Src {
                record: record.clone(),
                member: jid,
                once: None,
            };
            match self.prepare(job, now, Some(src)) {
                Ok((spec, _, _)) => {
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
        Ok(out)
    }
}
