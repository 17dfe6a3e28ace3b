//! Sidekiq's `retry`, `schedule` and `dead` sets, a page at a time, with a
//! tenant column and filters by class, tenant, queue and error class.
//!
//! Without a filter a page is one `ZRANGE` by rank. A filter cannot use an
//! index (Redis has none over payloads), so it is a bounded, resumable scan in
//! rank order: each call looks at most at `budget` entries from `cursor`, and
//! says how far it got ("scanned 5,000 of 1.2M"); the next call resumes there.
//! An entry is named by its score and jid (Sidekiq Web's `<score>-<jid>`),
//! which [`Inspector::find_entries`] turns back into its exact bytes.

use serde::Serialize;

use super::{Inspector, JobSet, MAX_READ_ROWS};
use crate::error::Result;
use crate::wire::Payload;

/// Entries one filtered call looks at, at most.
pub const SCAN_BUDGET: usize = 5_000;

/// Entries read per `ZRANGE` of a scan.
const CHUNK: usize = 500;

/// Which entries a listing keeps (every given field must match exactly).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct JobFilter {
    /// The job class.
    pub class: Option<String>,
    /// The tenant.
    pub tenant: Option<String>,
    /// The queue.
    pub queue: Option<String>,
    /// The error class (`error_class`).
    pub error: Option<String>,
}

impl JobFilter {
    /// True when nothing is filtered.
    pub fn is_empty(&self) -> bool {
        self.class.is_none()
            && self.tenant.is_none()
            && self.queue.is_none()
            && self.error.is_none()
    }

    fn keeps(&self, e: &JobEntry) -> bool {
        fn eq(want: &Option<String>, have: Option<&str>) -> bool {
            want.as_deref().is_none_or(|w| have == Some(w))
        }
        eq(&self.class, Some(&e.class))
            && eq(&self.tenant, e.tenant.as_deref())
            && eq(&self.queue, Some(&e.queue))
            && eq(&self.error, e.error_class.as_deref())
    }
}

/// One entry of a set.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobEntry {
    /// `<score>|<jid>`: names the entry for an action.
    pub key: String,
    /// The score: when it is due (retry, scheduled) or was buried (dead), epoch seconds.
    pub at: f64,
    /// The jid.
    pub jid: String,
    /// The job class.
    pub class: String,
    /// Its queue.
    pub queue: String,
    /// Its tenant.
    pub tenant: Option<String>,
    /// The arguments, as JSON.
    pub args: String,
    /// The last error's class.
    pub error_class: Option<String>,
    /// The last error's message.
    pub error_message: Option<String>,
    /// Retries so far.
    pub retry_count: Option<u32>,
    /// Retries allowed.
    pub max_retries: u32,
    /// When it last failed.
    pub failed_at: Option<f64>,
    /// When it was enqueued.
    pub enqueued_at: Option<f64>,
    /// Whether the entry is not a job fairjob could read (shown raw in `args`).
    pub malformed: bool,
}

/// One page of a set.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobPage {
    /// The set.
    pub set: JobSet,
    /// Entries in the set (`ZCARD`).
    pub total: u64,
    /// This page's entries.
    pub rows: Vec<JobEntry>,
    /// Where this page started (rank).
    pub cursor: u64,
    /// Where the next page starts, or `None` at the end.
    pub next: Option<u64>,
    /// For a filtered listing: entries looked at so far (ranks up to here).
    pub scanned: Option<u64>,
}

impl JobEntry {
    /// Decodes one member of a set.
    pub fn decode(member: &[u8], score: &str) -> JobEntry {
        let at = score.parse().unwrap_or(0.0);
        match Payload::parse_slice(member) {
            Ok(p) => {
                let jid = p.jid();
                JobEntry {
                    key: format!("{score}|{jid}"),
                    at,
                    jid,
                    class: p.class(),
                    queue: p.queue(),
                    tenant: p.tenant(),
                    args: p.args().get().to_owned(),
                    error_class: p.get_str("error_class"),
                    error_message: p.get_str("error_message"),
                    retry_count: p.retry_count(),
                    max_retries: p.max_retries(),
                    failed_at: p.timestamp("failed_at"),
                    enqueued_at: p.timestamp("enqueued_at"),
                    malformed: false,
                }
            }
            Err(_) => {
                let text = String::from_utf8_lossy(member).into_owned();
                // A malformed entry fairjob buried keeps its jid-less bytes in
                // a JSON wrapper; either way it is named by score alone.
                let jid = serde_json::from_slice::<serde_json::Value>(member)
                    .ok()
                    .and_then(|v| v.get("jid").and_then(|j| j.as_str()).map(str::to_owned))
                    .unwrap_or_default();
                JobEntry {
                    key: format!("{score}|{jid}"),
                    at,
                    jid,
                    class: "(malformed)".to_owned(),
                    queue: String::new(),
                    tenant: None,
                    args: text.chars().take(500).collect(),
                    error_class: None,
                    error_message: None,
                    retry_count: None,
                    max_retries: 0,
                    failed_at: None,
                    enqueued_at: None,
                    malformed: true,
                }
            }
        }
    }
}

impl Inspector {
    /// One page of `set`: without a filter, `count` entries (at most
    /// [`MAX_READ_ROWS`]) from rank `cursor`; with one, the matches among at most
    /// `budget` entries (at most [`SCAN_BUDGET`]; 0 reads only the size)
    /// from rank `cursor`.
    pub async fn jobs_page(
        &self,
        set: JobSet,
        filter: &JobFilter,
        cursor: u64,
        count: usize,
        budget: usize,
    ) -> Result<JobPage> {
        let count = count.clamp(1, MAX_READ_ROWS);
        let total = self.broker.set_size(set).await?;
        let mut rows = Vec::new();
        if filter.is_empty() {
            let found = self.broker.set_range(set, cursor, count).await?;
            rows.extend(found.iter().map(|(m, s)| JobEntry::decode(m, s)));
            let end = cursor + found.len() as u64;
            return Ok(JobPage {
                set,
                total,
                rows,
                cursor,
                next: (found.len() == count && end < total).then_some(end),
                scanned: None,
            });
        }
        let budget = budget.min(SCAN_BUDGET) as u64;
        let mut pos = cursor;
        let mut next = None;
        while pos < cursor + budget {
            let n = CHUNK.min((cursor + budget - pos) as usize);
            let found = self.broker.set_range(set, pos, n).await?;
            if found.is_empty() {
                break;
            }
            let mut stopped = false;
            for (i, (m, s)) in found.iter().enumerate() {
                let e = JobEntry::decode(m, s);
                if filter.keeps(&e) {
                    rows.push(e);
                    if rows.len() == count {
                        next = Some(pos + i as u64 + 1);
                        stopped = true;
                        break;
                    }
                }
            }
            if stopped {
                break;
            }
            pos += found.len() as u64;
            if found.len() < n {
                break;
            }
        }
        let scanned = next.unwrap_or(pos).min(total);
        if next.is_none() && pos < total {
            next = Some(pos);
        }
        Ok(JobPage {
            set,
            total,
            rows,
            cursor,
            next: next.filter(|n| *n < total),
            scanned: Some(scanned),
        })
    }

    /// The exact bytes of entries named by `<score>|<jid>` keys (one
    /// `ZRANGE … BYSCORE` of that score each); keys no longer there are left out.
    pub async fn find_entries(&self, set: JobSet, keys: &[String]) -> Result<Vec<Vec<u8>>> {
        let named: Vec<(&str, &str)> = keys.iter().filter_map(|k| k.split_once('|')).collect();
        let scores: Vec<&str> = named.iter().map(|(score, _)| *score).collect();
        let found = self.broker.set_members_at(set, &scores).await?;
        let mut out = Vec::new();
        for ((score, jid), members) in named.iter().zip(found) {
            for m in members {
                let e = JobEntry::decode(&m, score);
                if e.jid == *jid && !out.contains(&m) {
                    out.push(m);
                }
            }
        }
        Ok(out)
    }

    /// The entries of `set` matching `filter` among at most `budget` from
    /// the start (for "act on all"), at most `max` of them.
    pub async fn matching_entries(
        &self,
        set: JobSet,
        filter: &JobFilter,
        max: usize,
        budget: usize,
    ) -> Result<(Vec<Vec<u8>>, u64)> {
        let mut out = Vec::new();
        let mut pos = 0u64;
        while (pos as usize) < budget && out.len() < max {
            let found = self.broker.set_range(set, pos, CHUNK).await?;
            if found.is_empty() {
                break;
            }
            for (m, s) in &found {
                if out.len() < max && (filter.is_empty() || filter.keeps(&JobEntry::decode(m, s))) {
                    out.push(m.clone());
                }
            }
            pos += found.len() as u64;
            if found.len() < CHUNK {
                break;
            }
        }
        Ok((out, pos))
    }
}
