//! Sidekiq's process records as Redis holds them (`processes`, each
//! identity's hash and work hash, written by every heartbeat, by fairjob and
//! Ruby Sidekiq alike): a page of raw records. The view that reads them is
//! `inspect::processes`.

use super::{MAX_READ_ROWS, Page};
use crate::broker::RedisBroker;
use crate::error::Result;

/// One process's record: the fields of its hash and its work hash.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessRecord {
    /// `host:pid:random`.
    pub identity: String,
    /// Its `info` JSON (`None`: the hash expired).
    pub info: Option<String>,
    /// Its `busy` field.
    pub busy: Option<u64>,
    /// Its last heartbeat, epoch seconds.
    pub beat: Option<f64>,
    /// Its `quiet` field.
    pub quiet: Option<String>,
    /// Its `rss` field, KB.
    pub rss_kb: Option<u64>,
    /// Its work hash: slot → JSON of the running job.
    pub work: Vec<(String, String)>,
}

impl RedisBroker {
    /// One page of process records (a step of `SSCAN` over `processes`), by
    /// identity, and the cursor of the next page.
    pub async fn process_records(&self, page: Page) -> Result<(Vec<ProcessRecord>, Option<u64>)> {
        let k = &self.keys;
        let (next, mut ids): (u64, Vec<String>) = self
            .sscan(
                &k.processes(),
                page.cursor,
                page.count.clamp(1, MAX_READ_ROWS),
            )
            .await?;
        ids.sort();
        ids.dedup();
        let mut out = Vec::with_capacity(ids.len());
        if !ids.is_empty() {
            let mut pipe = redis::pipe();
            for id in &ids {
                pipe.cmd("HMGET")
                    .arg(k.process(id))
                    .arg(&["info", "busy", "beat", "quiet", "rss"]);
                pipe.hgetall(&k.process_work(id)[0]);
            }
            type Hash = (
                Option<String>,
                Option<u64>,
                Option<f64>,
                Option<String>,
                Option<u64>,
            );
            let found: Vec<(Hash, Vec<(String, String)>)> = self.pipe(&pipe).await?;
            for (identity, ((info, busy, beat, quiet, rss_kb), work)) in ids.into_iter().zip(found)
            {
                out.push(ProcessRecord {
                    identity,
                    info,
                    busy,
                    beat,
                    quiet,
                    rss_kb,
                    work,
                });
            }
        }
        Ok((out, (next != 0).then_some(next)))
    }
}
