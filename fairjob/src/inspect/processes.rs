//! Worker processes as Sidekiq records them (`processes`, each identity's
//! hash and work hash, written by every heartbeat, by fairjob and Ruby
//! Sidekiq alike): a page of processes with their running jobs, each with its
//! tenant and start time.

use serde::Serialize;

use super::{Inspector, Page};
use crate::broker::read::ProcessRecord;
use crate::error::Result;
use crate::wire::{Payload, fields};

/// A job a process is performing.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunningJob {
    /// The process.
    pub identity: String,
    /// The queue it was fetched from.
    pub queue: String,
    /// The class.
    pub class: String,
    /// The jid.
    pub jid: String,
    /// Its tenant.
    pub tenant: Option<String>,
    /// The arguments, as JSON.
    pub args: String,
    /// When it started, epoch seconds.
    pub run_at: f64,
    /// The batch it is a member of.
    pub bid: Option<String>,
    /// Its step's name, when it is a workflow's step.
    pub workflow_step: Option<String>,
    /// An iterable job's progress (cursor, steps, last checkpoint, yields).
    pub iteration: Option<super::IterationView>,
}

/// One worker process.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProcessRow {
    /// `host:pid:random`.
    pub identity: String,
    /// Its host.
    pub hostname: String,
    /// Its pid.
    pub pid: Option<u64>,
    /// Sidekiq's process tag.
    pub tag: String,
    /// What it runs (`fairjob 0.1.0`, or a Sidekiq version).
    pub version: String,
    /// When it started, epoch seconds.
    pub started_at: f64,
    /// Its last heartbeat, epoch seconds.
    pub beat: f64,
    /// Whether it is quiet (fetches nothing new).
    pub quiet: bool,
    /// Jobs running.
    pub busy: u64,
    /// Jobs it runs at once.
    pub concurrency: u64,
    /// Resident memory, KB.
    pub rss_kb: u64,
    /// Its queues, in its order.
    pub queues: Vec<String>,
    /// Its tiers of `(queue, weight)` (weight 0: strict order).
    pub tiers: Vec<Vec<(String, u32)>>,
    /// Its running jobs.
    pub jobs: Vec<RunningJob>,
}

/// A page of processes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProcessPage {
    /// Processes, by identity.
    pub rows: Vec<ProcessRow>,
    /// Busy slots over this page's processes.
    pub busy: u64,
    /// The cursor of the next page, or `None` after the last.
    pub next: Option<u64>,
}

fn tiers_of(info: &serde_json::Value) -> Vec<Vec<(String, u32)>> {
    // fairjob writes its tiers with raw weights; Sidekiq's `weights` are
    // maps of queue → weight (at least 1), one per tier.
    if let Some(t) = info.get("fairjob_tiers").and_then(|t| t.as_array()) {
        return t
            .iter()
            .filter_map(|tier| tier.as_array())
            .map(|tier| {
                tier.iter()
                    .filter_map(|e| {
                        let q = e.get(0)?.as_str()?.to_owned();
                        let w = e.get(1)?.as_u64()? as u32;
                        Some((q, w))
                    })
                    .collect()
            })
            .collect();
    }
    if let Some(w) = info.get("weights").and_then(|w| w.as_array()) {
        return w
            .iter()
            .filter_map(|m| m.as_object())
            .map(|m| {
                m.iter()
                    .map(|(q, w)| (q.clone(), w.as_u64().unwrap_or(0) as u32))
                    .collect()
            })
            .collect();
    }
    let queues: Vec<(String, u32)> = info
        .get("queues")
        .and_then(|q| q.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|q| q.as_str().map(|s| (s.to_owned(), 0)))
                .collect()
        })
        .unwrap_or_default();
    vec![queues]
}

impl Inspector {
    /// One page of live processes (a step of `SSCAN` over `processes`) with
    /// their running jobs; entries whose hash expired are left out.
    pub async fn processes(&self, page: Page) -> Result<ProcessPage> {
        let (records, next) = self.broker.process_records(page).await?;
        let mut rows: Vec<ProcessRow> = records.into_iter().filter_map(process_row).collect();
        // One bounded read per running job of the page: its iterable state
        // (and on a sharded queue, fair yield's request to it).
        let sharded = if rows.iter().any(|r| !r.jobs.is_empty()) {
            self.queue_names().await?.1
        } else {
            Default::default()
        };
        for job in rows.iter_mut().flat_map(|r| r.jobs.iter_mut()) {
            let on_shards = sharded.contains(&job.queue);
            job.iteration = self
                .running_iteration(&job.jid, &job.queue, on_shards)
                .await?;
        }
        Ok(ProcessPage {
            busy: rows.iter().map(|r| r.busy).sum(),
            rows,
            next,
        })
    }
}

/// A process as Sidekiq's records describe it (`None` when its hash expired).
fn process_row(record: ProcessRecord) -> Option<ProcessRow> {
    let info: serde_json::Value = serde_json::from_str(record.info.as_deref()?).unwrap_or_default();
    let id = &record.identity;
    let s = |key: &str| {
        info.get(key)
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_owned()
    };
    let mut jobs: Vec<RunningJob> = record
        .work
        .iter()
        .filter_map(|(_, w)| running_job(id, w))
        .collect();
    jobs.sort_by(|a, b| a.run_at.total_cmp(&b.run_at));
    Some(ProcessRow {
        identity: id.clone(),
        hostname: s("hostname"),
        pid: info.get("pid").and_then(|p| p.as_u64()),
        tag: s("tag"),
        version: s("version"),
        started_at: info
            .get("started_at")
            .and_then(|v| v.as_f64())
            .unwrap_or(0.0),
        beat: record.beat.unwrap_or(0.0),
        quiet: record.quiet.as_deref() == Some("true"),
        busy: record.busy.unwrap_or(jobs.len() as u64),
        concurrency: info
            .get("concurrency")
            .and_then(|v| v.as_u64())
            .unwrap_or(0),
        rss_kb: record.rss_kb.unwrap_or(0),
        queues: info
            .get("queues")
            .and_then(|q| q.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|q| q.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default(),
        tiers: tiers_of(&info),
        jobs,
    })
}

/// One entry of a process's work hash as the job it runs.
fn running_job(identity: &str, work: &str) -> Option<RunningJob> {
    let w: serde_json::Value = serde_json::from_str(work).ok()?;
    // Sidekiq ≥ 7 writes the payload as a JSON string; older as an object.
    let payload = match w.get("payload")? {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let p = Payload::parse_slice(payload.as_bytes()).ok()?;
    Some(RunningJob {
        identity: identity.to_owned(),
        queue: w
            .get("queue")
            .and_then(|q| q.as_str())
            .unwrap_or_default()
            .to_owned(),
        class: p.class(),
        jid: p.jid(),
        tenant: p.tenant(),
        args: p.args().get().to_owned(),
        run_at: w.get("run_at").and_then(|r| r.as_f64()).unwrap_or(0.0),
        bid: p.get_str(fields::BID),
        workflow_step: p.get_str(fields::WORKFLOW_STEP),
        iteration: None,
    })
}

/// The jid of the job an entry of a process's work hash runs.
pub(super) fn running_jid(work: &str) -> Option<String> {
    running_job("", work).map(|j| j.jid)
}
