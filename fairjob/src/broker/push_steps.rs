//! Pushes whose writes span two cluster slots, made in steps whose order
//! keeps the guarantees: a push on Redis Cluster (reroute windows in their
//! slots, then per queue); a promoted or claimed job whose claim is in
//! another slot than its queue (pushed first, claim dropped after; a
//! periodic job's once mark in the queue's slot); a scheduled unique job on
//! a cluster (its lock first, then its `schedule` entry).

use redis::Value;

use super::RedisBroker;
use super::push::{
    Candidate, PushSpec, Pushed, RerouteSpec, When, budget_ranges, push_cost, pushed,
};
use super::scripts::{Call, WINDOW};
use super::unique::UniqueLock;
use crate::error::Result;

impl RedisBroker {
    /// A push in Redis Cluster mode, where every script stays in one slot:
    /// (1) each reroute window chooses its jobs' queues (`window.lua`, in the
    /// window's slot); (2) promoted jobs go one by one through the two-step
    /// path (push, then drop the claim); (3) the rest are pushed with one
    /// `push.lua` call per queue and budget, in the queue's slot, jobs of one
    /// queue in order. The commit point of every job is its push; a crash
    /// after (1) only counts a job the caller will push again.
    pub(super) async fn push_cluster(
        &self,
        jobs: &[PushSpec],
        clock_offset: i64,
    ) -> Result<Vec<Pushed>> {
        // (1) Queue choices.
        let mut chosen = vec![0usize; jobs.len()];
        let mut windows: Vec<(&RerouteSpec, Vec<usize>)> = Vec::new();
        for (i, job) in jobs.iter().enumerate() {
            if let Some(r) = &job.reroute {
                match windows
                    .iter_mut()
                    .find(|(w, _)| w.window_key == r.window_key)
                {
                    Some((_, idx)) => idx.push(i),
                    None => windows.push((r, vec![i])),
                }
            }
        }
        if !windows.is_empty() {
            let calls: Vec<Call<'_>> = windows
                .iter()
                .map(|(w, idx)| {
                    let mut inv = WINDOW.call();
                    inv.key(&w.window_key).arg(clock_offset);
                    let maxw = idx
                        .iter()
                        .filter_map(|&i| jobs[i].reroute.as_ref())
                        .map(|r| r.max_window_secs)
                        .max()
                        .unwrap_or(w.max_window_secs);
                    inv.arg(maxw);
                    for &i in idx {
                        let r = jobs[i].reroute.as_ref().expect("rerouted");
                        inv.arg(&r.member).arg(r.rules.len());
                        for (threshold, per) in &r.rules {
                            inv.arg(*threshold).arg(*per);
                        }
                    }
                    inv
                })
                .collect();
            let replies: Vec<Vec<usize>> = self.invoke_all(&calls).await?;
            for ((_, idx), got) in windows.iter().zip(replies) {
                for (&i, c) in idx.iter().zip(got) {
                    chosen[i] = c.saturating_sub(1).min(jobs[i].candidates.len() - 1);
                }
            }
        }
        let resolved: Vec<PushSpec> = jobs
            .iter()
            .zip(&chosen)
            .map(|(job, &c)| PushSpec {
                src: job.src.clone(),
                reroute: None,
                before: job.before.clone(),
                after: job.after.clone(),
                candidates: vec![job.candidates[c].clone()],
                unique: job.unique.clone(),
                once: job.once.clone(),
            })
            .collect();
        // A unique job rerouted to another queue: its lock (in its own
        // queue's slot) is taken first, in a step of its own, and the job
        // pushed without it (a crash in between leaves the lock until its
        // TTL; a replacing push finds no waiting holder there: refused).
        let mut resolved = resolved;
        let mut refused: Vec<Option<Pushed>> = vec![None; jobs.len()];
        for (i, job) in resolved.iter_mut().enumerate() {
            if chosen[i] == 0 || job.src.is_some() {
                continue;
            }
            let Some(u) = job.unique.take() else {
                continue;
            };
            if let super::unique::Taken::Held { holder, .. } = self.unique_take_alone(&u).await? {
                refused[i] = Some(Pushed::Duplicate(holder));
            }
        }
        // (2) Promoted jobs, and (3) the rest grouped per queue.
        let mut out = vec![Pushed::SourceGone; jobs.len()];
        let mut per_queue: Vec<(&Candidate, Vec<usize>)> = Vec::new();
        for (i, job) in resolved.iter().enumerate() {
            if let Some(r) = &refused[i] {
                out[i] = r.clone();
                continue;
            }
            if job.src.is_some() {
                let got = self
                    .push_promoted(std::slice::from_ref(job), clock_offset)
                    .await?;
                out[i] = match got[0].clone() {
                    Pushed::To(_) => Pushed::To(chosen[i]),
                    other => other,
                };
                continue;
            }
            let c = &job.candidates[0];
            match per_queue
                .iter_mut()
                .find(|(q, _)| q.queue == c.queue && q.sharded == c.sharded)
            {
                Some((_, idx)) => idx.push(i),
                None => per_queue.push((c, vec![i])),
            }
        }
        let mut calls = Vec::new();
        let mut plain_queues = Vec::new();
        for (c, idx) in &per_queue {
            if !c.sharded {
                plain_queues.push(c.queue.as_str());
            }
            for r in budget_ranges(idx.iter().map(|&i| push_cost(&resolved[i], false))) {
                let part: Vec<PushSpec> = idx[r].iter().map(|&i| resolved[i].clone()).collect();
                calls.push(self.push_script(&part, clock_offset));
            }
        }
        if !plain_queues.is_empty() {
            // Sidekiq's `queues` set is in a slot of its own: registered first.
            let _: i64 = self
                .query(
                    redis::cmd("SADD")
                        .arg(self.keys.queues())
                        .arg(&plain_queues),
                )
                .await?;
        }
        let replies: Vec<Vec<Value>> = self.invoke_all(&calls).await?;
        let mut replies = replies.into_iter().flatten();
        for (_, idx) in &per_queue {
            for &i in idx {
                let reply = replies.next().map(pushed).transpose()?;
                out[i] = match reply {
                    Some(Pushed::To(_)) | None => Pushed::To(chosen[i]),
                    Some(other) => other,
                };
            }
        }
        Ok(out)
    }

    /// Promotes scheduled or retried jobs bound for a sharded queue (or any
    /// queue in cluster mode). The promoting record is one of Sidekiq's global
    /// keys, outside the queue's cluster slot, so the push and the removal
    /// from the record are two steps:
    /// the push first (a crash between them re-promotes the job once its
    /// promotion lease expires: a duplicate, never a loss), and a job whose
    /// record entry is already gone (another poller took it) is not pushed.
    pub(super) async fn push_promoted(
        &self,
        jobs: &[PushSpec],
        clock_offset: i64,
    ) -> Result<Vec<Pushed>> {
        let mut out = Vec::with_capacity(jobs.len());
        for job in jobs {
            let Some(src) = &job.src else {
                let chosen: Vec<Value> = self
                    .invoke(&self.push_script(std::slice::from_ref(job), clock_offset))
                    .await?;
                for c in chosen {
                    out.push(pushed(c)?);
                }
                continue;
            };
            let there: Option<f64> = self
                .query(
                    redis::cmd("ZSCORE")
                        .arg(&src.record)
                        .arg(src.member.as_bytes()),
                )
                .await?;
            if there.is_none() {
                out.push(Pushed::SourceGone);
                continue;
            }
            // A promoted job is never refused: its lock was taken when it
            // was first pushed, and the claim is dropped below whatever the
            // push says, so the push takes no lock.
            // A claim that asks for it is marked as pushed in the queue's
            // slot in the push's own step, so a repeat after a crash before
            // the drop below pushes nothing.
            let unsourced = PushSpec {
                src: None,
                unique: None,
                once: src.once.clone(),
                ..job.clone()
            };
            let chosen: Vec<Pushed> = self
                .invoke::<Vec<Value>>(
                    &self.push_script(std::slice::from_ref(&unsourced), clock_offset),
                )
                .await?
                .into_iter()
                .map(pushed)
                .collect::<Result<_>>()?;
            // With `wait_replicas` in a cluster, the push reaches the queue
            // primary's replicas before the claim (on another primary) is
            // dropped. On one node replication keeps the order of the two
            // writes, and `push` waits once at the end.
            if self.is_cluster()
                && self.options.wait_replicas > 0
                && let Some(Pushed::To(c)) = chosen.first()
                && let Some(c) = unsourced.candidates.get(*c)
            {
                self.wait_replicated(&[self.keys.queue(&c.queue)]).await?;
            }
            // The commit point: the job is in its queue; dropping the claim
            // only stops a second promotion.
            self.drop_claim(&src.record, src.member.as_bytes()).await?;
            if let Some(member) = &src.once {
                // The claim is gone: the mark has done its work.
                let _: i64 = self
                    .query(
                        redis::cmd("ZREM")
                            .arg(self.keys.pushed(&unsourced.candidates[0].queue))
                            .arg(member),
                    )
                    .await?;
            }
            out.extend(chosen);
        }
        Ok(out)
    }

    /// [`Self::schedule`] of unique jobs on Redis Cluster, where a lock (in
    /// its queue's slot) and `schedule` (a slot of its own) are two steps, one
    /// entry at a time: the lock first (`unique_take.lua`), then the entry; a
    /// replacing push whose holder waits in `schedule` takes it out, puts
    /// the new payload (under the holder's jid) in, and records it in the
    /// lock. A crash between the steps leaves the lock held by a job never
    /// written, until its TTL: never two jobs of a key.
    pub(super) async fn schedule_unique_cluster(
        &self,
        entries: &[(When, String, Option<UniqueLock>)],
        clock_offset: i64,
    ) -> Result<Vec<Pushed>> {
        let mut out = Vec::with_capacity(entries.len());
        for (when, payload, unique) in entries {
            let alone = |payload: String| vec![(*when, payload, None)];
            let Some(u) = unique else {
                self.schedule_in_one_step(&alone(payload.clone()), clock_offset)
                    .await?;
                out.push(Pushed::To(0));
                continue;
            };
            match self.unique_take_alone(u).await? {
                super::unique::Taken::Ok => {
                    if let Err(e) = self
                        .schedule_in_one_step(&alone(payload.clone()), clock_offset)
                        .await
                    {
                        self.unique_release(&u.key(), Some(&u.jid)).await?;
                        return Err(e);
                    }
                    if u.replace {
                        self.unique_waits_as(u, &u.jid, payload).await?;
                    }
                    out.push(Pushed::To(0));
                }
                super::unique::Taken::Held {
                    holder,
                    waiting: Some(waiting),
                } if u.replace => {
                    let removed: i64 = self
                        .query(
                            redis::cmd("ZREM")
                                .arg(self.keys.schedule())
                                .arg(waiting.as_bytes()),
                        )
                        .await?;
                    if removed == 0 {
                        out.push(Pushed::Duplicate(holder));
                        continue;
                    }
                    let replaced = super::unique::swap_jid(payload, &u.jid, &holder);
                    self.schedule_in_one_step(&alone(replaced.clone()), clock_offset)
                        .await?;
                    self.unique_waits_as(u, &holder, &replaced).await?;
                    out.push(Pushed::Replaced(holder));
                }
                super::unique::Taken::Held { holder, .. } => out.push(Pushed::Duplicate(holder)),
            }
        }
        Ok(out)
    }
}
