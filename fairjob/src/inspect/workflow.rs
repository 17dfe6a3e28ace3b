//! A workflow as operators see it (`worker workflow WID`, the dashboard's
//! `/workflows/{wid}`): its batch's facts and a page of its steps in name
//! order, each with its state (held — waiting for the dependencies it names
//! —, queued, running, retrying, done, failed, cancelled), its jid and its
//! dependencies.
//!
//! Bounded: the batch's status read ([`Inspector::batch`]) and a page of at
//! most [`MAX_STEP_ROWS`] steps: a range of the workflow's list of steps in
//! name order (written at staging), then one `HMGET` of those steps' fields
//! and one of what the held ones still wait for
//! ([`RedisBroker::workflow_page`]); a step shows its first [`STEP_DEPS`]
//! dependencies and which of those it still waits for, with how many it
//! waits for in all. A 10,000-step workflow is read a page at a time, never
//! whole.
//!
//! **Running.** Redis keeps a step `queued` from its release until its end
//! (the exit writes done, failed or retrying); the view calls a queued or
//! retrying step *running* when its jid is among the jobs that live worker
//! processes report in their heartbeats (Sidekiq's work hashes, rewritten at
//! every beat), the same place explain looks first. One page of processes
//! (at most [`MAX_READ_ROWS`]) is read, and only when the page has a queued
//! or retrying step. A step that started since its worker's last beat still
//! shows queued, and one that just ended may show running until the next.
//!
//! [`RedisBroker::workflow_page`]: crate::broker::RedisBroker::workflow_page

use std::collections::HashMap;

use serde::Serialize;

use super::{BatchView, Inspector, MAX_READ_ROWS, Page};
use crate::broker::StepRow;
use crate::error::Result;
use crate::policy::workflow::StepState;

/// Steps a workflow page shows by default.
pub const STEP_ROWS: usize = 100;

/// Steps a workflow page shows at most.
pub const MAX_STEP_ROWS: usize = 500;

/// Dependencies a step of a page shows at most (and names among them those
/// it still waits for).
pub const STEP_DEPS: usize = 20;

/// Dependencies explain reads of one held step (to name those it waits
/// for): all those Redis keeps for the views, a step's first 100.
pub const EXPLAIN_STEP_DEPS: usize = 100;

/// A step's state as the view shows it: Redis's state, with *running* told
/// from *queued* by the workers' heartbeats (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    /// Waiting for dependencies, in no queue.
    Held,
    /// In its queue.
    Queued,
    /// Being performed (its jid is in a live worker's heartbeat).
    Running,
    /// Failed, waiting in `retry`.
    Retrying,
    /// Succeeded.
    Done,
    /// Died or was discarded.
    Failed,
    /// Cancelled because a dependency failed.
    Cancelled,
}

impl StepStatus {
    /// The state's name (`held`, `queued`, `running`, `retrying`, `done`,
    /// `failed`, `cancelled`).
    pub fn as_str(self) -> &'static str {
        match self {
            StepStatus::Held => "held",
            StepStatus::Queued => "queued",
            StepStatus::Running => "running",
            StepStatus::Retrying => "retrying",
            StepStatus::Done => "done",
            StepStatus::Failed => "failed",
            StepStatus::Cancelled => "cancelled",
        }
    }

    fn of(state: StepState) -> StepStatus {
        match state {
            StepState::Held => StepStatus::Held,
            StepState::Queued => StepStatus::Queued,
            StepState::Retrying => StepStatus::Retrying,
            StepState::Done => StepStatus::Done,
            StepState::Failed => StepStatus::Failed,
            StepState::Cancelled => StepStatus::Cancelled,
        }
    }
}

/// One step of a workflow.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepView {
    /// Its name.
    pub name: String,
    /// Its jid.
    pub jid: String,
    /// Its state.
    pub state: StepStatus,
    /// The worker process running it (state `running`).
    pub running_on: Option<String>,
    /// Its first dependencies (at most [`STEP_DEPS`] on a page), as declared.
    pub dependencies: Vec<String>,
    /// How many dependencies it has.
    pub dependencies_total: u64,
    /// Those of `dependencies` a held step still waits for (not yet
    /// succeeded, nor failed under `continue` or `ignore`).
    pub waiting_for: Vec<String>,
    /// How many dependencies a held step still waits for, in all.
    pub waiting_total: u64,
    /// The failed dependencies it continued past (`continue`).
    pub continued_past: Vec<String>,
}

impl StepView {
    /// The view of a stored step (`None`: a state this version does not know).
    pub(crate) fn of(row: StepRow) -> Option<StepView> {
        let state = StepStatus::of(StepState::parse(&row.state)?);
        let held = state == StepStatus::Held;
        Some(StepView {
            name: row.name,
            jid: row.jid,
            state,
            running_on: None,
            dependencies: row.deps,
            dependencies_total: row.deps_total,
            waiting_for: if held { row.waiting } else { Vec::new() },
            waiting_total: if held { row.waiting_total } else { 0 },
            continued_past: row.failed_deps,
        })
    }
}

/// A workflow and a page of its steps.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkflowView {
    /// Its batch's facts (counts, state, fire times, callbacks; some failed
    /// or cancelled steps with their failures).
    pub batch: BatchView,
    /// Steps it has.
    pub total: u64,
    /// The page's first step's place in name order (0-based).
    pub from: u64,
    /// Steps a page shows.
    pub limit: usize,
    /// The page's steps, in name order.
    pub steps: Vec<StepView>,
    /// Where the next page starts (`None` after the last).
    pub next: Option<u64>,
    /// Where the previous page starts (`None` on the first).
    pub prev: Option<u64>,
}

impl Inspector {
    /// Workflow `wid` with a page of its steps from the `from`-th (0-based,
    /// in name order), at most `limit` (capped at [`MAX_STEP_ROWS`]); `None`
    /// when there is no such batch (or its data expired) or it is not a
    /// workflow.
    pub async fn workflow(
        &self,
        wid: &str,
        from: u64,
        limit: usize,
    ) -> Result<Option<WorkflowView>> {
        let Some(batch) = self.batch(wid).await? else {
            return Ok(None);
        };
        if !batch.status.workflow {
            return Ok(None);
        }
        let limit = limit.clamp(1, MAX_STEP_ROWS);
        let page = self
            .broker
            .workflow_page(wid, from, limit, STEP_DEPS)
            .await?;
        let mut steps: Vec<StepView> = page.rows.into_iter().filter_map(StepView::of).collect();
        self.mark_running(&mut steps).await?;
        let end = from.saturating_add(limit as u64);
        Ok(Some(WorkflowView {
            batch,
            total: page.total,
            from,
            limit,
            steps,
            next: (end < page.total).then_some(end),
            prev: (from > 0).then(|| from.saturating_sub(limit as u64)),
        }))
    }

    /// Queued and retrying steps whose jid a live worker's heartbeat reports
    /// become `running` (one page of processes, read only when needed).
    async fn mark_running(&self, steps: &mut [StepView]) -> Result<()> {
        if !steps
            .iter()
            .any(|s| matches!(s.state, StepStatus::Queued | StepStatus::Retrying))
        {
            return Ok(());
        }
        let procs = self.processes_running(Page::first(MAX_READ_ROWS)).await?;
        for s in steps
            .iter_mut()
            .filter(|s| matches!(s.state, StepStatus::Queued | StepStatus::Retrying))
        {
            if let Some(identity) = procs.get(&s.jid) {
                s.state = StepStatus::Running;
                s.running_on = Some(identity.clone());
            }
        }
        Ok(())
    }

    /// The jids the processes of one page report running, and where.
    async fn processes_running(&self, page: Page) -> Result<HashMap<String, String>> {
        let (records, _) = self.broker.process_records(page).await?;
        Ok(records
            .iter()
            .flat_map(|r| {
                r.work
                    .iter()
                    .filter_map(|(_, w)| super::processes::running_jid(w))
                    .map(|jid| (jid, r.identity.clone()))
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(state: &str) -> StepRow {
        StepRow {
            name: "load".into(),
            jid: "j1".into(),
            state: state.into(),
            deps: vec!["a".into(), "b".into()],
            deps_total: 3,
            waiting: vec!["b".into()],
            waiting_total: 2,
            failed_deps: vec![],
        }
    }

    #[test]
    fn a_held_step_names_what_it_waits_for_and_others_do_not() {
        let held = StepView::of(row("held")).unwrap();
        assert_eq!(held.state, StepStatus::Held);
        assert_eq!((held.waiting_for.len(), held.waiting_total), (1, 2));
        let done = StepView::of(row("done")).unwrap();
        assert!(done.waiting_for.is_empty() && done.waiting_total == 0);
        assert_eq!(done.dependencies, ["a", "b"]);
        assert!(StepView::of(row("weird")).is_none());
        for s in ["held", "queued", "retrying", "done", "failed", "cancelled"] {
            assert_eq!(StepView::of(row(s)).unwrap().state.as_str(), s);
        }
    }
}
