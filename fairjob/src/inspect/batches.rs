//! Batches as operators see them (`worker batches`, the dashboard's
//! `/batches`), and as a running job reads its own ([`BatchStatus`], through
//! `Client::batch_status`): a page of the newest batches with their counts,
//! state, fire times and callback queues, and one batch with some of its
//! failed members.
//!
//! Bounded: the listing reads the newest [`BATCH_ROWS`] entries of the
//! batches' index (`ZRANGE REV`) and one [`RedisBroker::batch_status`] per
//! entry (a hash of about 25 fields, set sizes, one `HSCAN` page of
//! failures); an entry whose batch expired is taken out of the index
//! (`batches_unlist`) and not shown. No set of members is ever read whole.
//!
//! [`RedisBroker::batch_status`]: crate::broker::RedisBroker::batch_status

use std::collections::HashMap;

use serde::Serialize;

use super::Inspector;
use crate::broker::BatchRow;
use crate::error::Result;
use crate::policy::batch::Event;

/// Batches a listing shows at most: the newest ones (the metrics sampler's
/// `fairjob_batches_open` counts among them; its description says 50).
pub const BATCH_ROWS: usize = 50;

/// Failed members a batch's detail shows at most (one `HSCAN` page).
pub const BATCH_FAILURES: usize = 100;

/// A batch as Redis holds it now.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[non_exhaustive]
pub struct BatchStatus {
    /// The batch's id.
    pub bid: String,
    /// Its description.
    pub description: String,
    /// The tenant its callbacks run in ('' for none).
    pub tenant: String,
    /// Members ever added.
    pub total: u64,
    /// Members that have not run once.
    pub pending: u64,
    /// Members that have not succeeded.
    pub unsucceeded: u64,
    /// Failed members that have not succeeded since.
    pub failures: u64,
    /// Some of them (at most about 100): jid and failure.
    pub failed_jids: Vec<(String, String)>,
    /// Members committed and not pushed yet.
    pub staged: u64,
    /// Whether it is a workflow (its members are named steps).
    pub workflow: bool,
    /// A workflow's steps held now, waiting for their dependencies in no
    /// queue (0 for a plain batch).
    pub held: u64,
    /// Committed (open) rather than still staging.
    pub committed: bool,
    /// When it was created, and when each event fired (epoch seconds).
    pub created_at: f64,
    /// When `complete` fired.
    pub complete_at: Option<f64>,
    /// When `success` fired.
    pub success_at: Option<f64>,
    /// When `death` fired.
    pub death_at: Option<f64>,
}

impl BatchStatus {
    /// When `event` fired.
    pub fn fired_at(&self, event: Event) -> Option<f64> {
        match event {
            Event::Complete => self.complete_at,
            Event::Success => self.success_at,
            Event::Death => self.death_at,
        }
    }
}

/// Where a batch is in its life (`death` is apart: [`BatchView::died`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BatchState {
    /// Being committed: its members are not runnable yet.
    Staging,
    /// Committed; some member has not run once.
    Open,
    /// `complete` fired: every member has run once.
    Complete,
    /// `success` fired: every member has succeeded.
    Success,
}

impl BatchState {
    /// The state's name (`staging`, `open`, `complete`, `success`).
    pub fn as_str(self) -> &'static str {
        match self {
            BatchState::Staging => "staging",
            BatchState::Open => "open",
            BatchState::Complete => "complete",
            BatchState::Success => "success",
        }
    }

    /// Whether `complete` has fired.
    pub fn is_complete(self) -> bool {
        matches!(self, BatchState::Complete | BatchState::Success)
    }
}

/// A batch's callback: the event and the queue its job goes to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BatchCallback {
    /// `complete`, `success` or `death`.
    pub event: &'static str,
    /// The callback job's queue.
    pub queue: String,
}

/// One batch, as the listing and the detail show it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BatchView {
    /// Its stored facts (`failed_jids` is empty in a listing).
    #[serde(flatten)]
    pub status: BatchStatus,
    /// Where it is in its life.
    pub state: BatchState,
    /// Whether `death` fired (a member died).
    pub died: bool,
    /// When its commit flipped it open.
    pub opened_at: Option<f64>,
    /// Its callbacks, in the order events fire ([`Event::ALL`]).
    pub callbacks: Vec<BatchCallback>,
}

/// The newest batches.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BatchesView {
    /// At most [`BATCH_ROWS`], newest first.
    pub rows: Vec<BatchView>,
    /// Listed entries whose data had expired, taken out of the listing now.
    pub unlisted: usize,
    /// How many the listing reads at most.
    pub limit: usize,
}

/// A batch's status from its stored row.
fn status_of(bid: &str, row: BatchRow) -> BatchStatus {
    let f: HashMap<String, String> = row.fields.into_iter().collect();
    let num = |k: &str| f.get(k).and_then(|v| v.parse::<f64>().ok());
    BatchStatus {
        bid: bid.to_owned(),
        description: f.get("desc").cloned().unwrap_or_default(),
        tenant: f.get("tenant").cloned().unwrap_or_default(),
        total: num("total").unwrap_or(0.0) as u64,
        pending: row.pending,
        unsucceeded: row.unsucceeded,
        failures: row.failed,
        failed_jids: row.failed_some,
        staged: row.staged,
        workflow: f.contains_key("wf"),
        held: num("held").unwrap_or(0.0).max(0.0) as u64,
        committed: f.get("state").map(String::as_str) == Some("open"),
        created_at: num("created_at").unwrap_or(0.0),
        complete_at: num("complete_at"),
        success_at: num("success_at"),
        death_at: num("death_at"),
    }
}

/// The view of a batch from its stored row.
fn view_of(bid: &str, row: BatchRow) -> BatchView {
    let callbacks: Vec<BatchCallback> = Event::ALL
        .into_iter()
        .filter_map(|e| {
            let field = format!("cbn:{}", e.as_str());
            let queue = row.fields.iter().find(|(k, _)| *k == field)?.1.clone();
            Some(BatchCallback {
                event: e.as_str(),
                queue,
            })
        })
        .collect();
    let opened_at = row
        .fields
        .iter()
        .find(|(k, _)| k == "opened_at")
        .and_then(|(_, v)| v.parse().ok());
    let mut status = status_of(bid, row);
    status.failed_jids.sort();
    status.failed_jids.truncate(BATCH_FAILURES);
    let state = if !status.committed {
        BatchState::Staging
    } else if status.success_at.is_some() {
        BatchState::Success
    } else if status.complete_at.is_some() {
        BatchState::Complete
    } else {
        BatchState::Open
    };
    BatchView {
        died: status.death_at.is_some(),
        state,
        opened_at,
        callbacks,
        status,
    }
}

impl Inspector {
    /// Batch `bid`'s status; `None` when there is no such batch.
    pub async fn batch_status(&self, bid: &str) -> Result<Option<BatchStatus>> {
        Ok(self
            .broker
            .batch_status(bid)
            .await?
            .map(|row| status_of(bid, row)))
    }

    /// One batch with up to [`BATCH_FAILURES`] failed members; `None` when
    /// there is no such batch (or its data expired).
    pub async fn batch(&self, bid: &str) -> Result<Option<BatchView>> {
        Ok(self
            .broker
            .batch_status(bid)
            .await?
            .map(|row| view_of(bid, row)))
    }

    /// The newest batches, at most `n` (capped at [`BATCH_ROWS`]); listed
    /// batches whose data expired are taken out of the listing.
    pub async fn batches(&self, n: usize) -> Result<BatchesView> {
        let limit = n.clamp(1, BATCH_ROWS);
        let listed = self.broker.batches_newest(limit).await?;
        let reads = listed.iter().map(|(bid, _)| self.broker.batch_status(bid));
        let rows = futures_util::future::try_join_all(reads).await?;
        let mut gone = Vec::new();
        let mut views = Vec::with_capacity(listed.len());
        for ((bid, _), row) in listed.into_iter().zip(rows) {
            match row {
                Some(row) => {
                    let mut v = view_of(&bid, row);
                    v.status.failed_jids.clear();
                    views.push(v);
                }
                None => gone.push(bid),
            }
        }
        self.broker.batches_unlist(&gone).await?;
        Ok(BatchesView {
            rows: views,
            unlisted: gone.len(),
            limit,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(fields: &[(&str, &str)]) -> BatchRow {
        BatchRow {
            fields: fields
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            pending: 2,
            unsucceeded: 3,
            failed: 1,
            failed_some: vec![("j2".into(), "E: b".into()), ("j1".into(), "E: a".into())],
            staged: 0,
        }
    }

    #[test]
    fn the_open_batches_gauge_says_how_many_it_counts_among() {
        assert_eq!(BATCH_ROWS, 50, "fairjob::metrics::describe says 50");
    }

    #[test]
    fn states_fire_times_and_callbacks_from_the_stored_row() {
        let staging = view_of("b", row(&[("state", "staging"), ("created_at", "5")]));
        assert_eq!(staging.state, BatchState::Staging);
        assert!(staging.callbacks.is_empty() && staging.opened_at.is_none());
        let open = view_of(
            "b",
            row(&[
                ("state", "open"),
                ("desc", "<d>"),
                ("tenant", "t:{x}"),
                ("total", "7"),
                ("opened_at", "6.5"),
                ("cbn:success", "done_q"),
                ("cbn:death", "alerts"),
                ("death_at", "8"),
            ]),
        );
        assert_eq!(open.state, BatchState::Open);
        assert!(open.died && !open.state.is_complete());
        assert_eq!(
            (open.status.total, open.status.description.as_str()),
            (7, "<d>")
        );
        assert_eq!(open.opened_at, Some(6.5));
        let cbs: Vec<(&str, &str)> = open
            .callbacks
            .iter()
            .map(|c| (c.event, c.queue.as_str()))
            .collect();
        assert_eq!(cbs, [("death", "alerts"), ("success", "done_q")]);
        assert_eq!(open.status.failed_jids[0].0, "j1", "failures by jid");
        let done = view_of(
            "b",
            row(&[
                ("state", "open"),
                ("complete_at", "9"),
                ("success_at", "10"),
            ]),
        );
        assert_eq!(done.state, BatchState::Success);
        assert_eq!(done.status.fired_at(Event::Complete), Some(9.0));
        let complete = view_of("b", row(&[("state", "open"), ("complete_at", "9")]));
        assert_eq!(complete.state, BatchState::Complete);
        assert!(complete.state.is_complete());
    }
}
