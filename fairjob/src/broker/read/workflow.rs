//! A workflow's steps as Redis keeps them, for the views
//! (`inspect::workflow`, explain): a page in name order through the list of
//! steps `workflow_stage.lua` writes (`:steps`, an `LRANGE` of the page), one
//! step by jid, and the held steps' index (jid → bid). Three round trips per
//! page; no scan of the workflow's hash.

use super::RedisBroker;
use crate::broker::batch::decode_list;
use crate::error::Result;

impl RedisBroker {
    /// A page of workflow `bid`'s steps in name order: from the `from`-th
    /// (0-based) at most `n`, each with its first `deps` dependencies (see
    /// [`StepRow`]). Bounded: the list's length and the page's range of it,
    /// one `HMGET` of the page's steps' fields and one of which of their
    /// first dependencies a held step still waits for; no scan.
    pub async fn workflow_page(
        &self,
        bid: &str,
        from: u64,
        n: usize,
        deps: usize,
    ) -> Result<StepPage> {
        let b = self.keys.batch(bid);
        let from = from.min(i64::MAX as u64 - n as u64);
        let mut pipe = redis::pipe();
        pipe.cmd("LLEN")
            .arg(format!("{b}:steps"))
            .cmd("LRANGE")
            .arg(format!("{b}:steps"))
            .arg(from)
            .arg(from + n.max(1) as u64 - 1);
        let (total, steps): (u64, Vec<String>) = self.pipe(&pipe).await?;
        Ok(StepPage {
            total,
            rows: self.step_rows(&format!("{b}:wf"), &steps, deps).await?,
        })
    }

    /// Workflow `bid`'s step of jid `jid` with its first `deps` dependencies,
    /// and its payload while it is held (split at its enqueued_at value by a
    /// newline); `None` when the workflow has no such step.
    pub async fn workflow_step(
        &self,
        bid: &str,
        jid: &str,
        deps: usize,
    ) -> Result<Option<(StepRow, Option<String>)>> {
        let b = self.keys.batch(bid);
        let w = format!("{b}:wf");
        let mut pipe = redis::pipe();
        pipe.cmd("HGET")
            .arg(&w)
            .arg(format!("name:{jid}"))
            .cmd("HGET")
            .arg(format!("{b}:payloads"))
            .arg(jid);
        let (step, payload): (Option<String>, Option<String>) = self.pipe(&pipe).await?;
        let Some(step) = step else {
            return Ok(None);
        };
        let row = self.step_rows(&w, &[step], deps).await?.pop();
        Ok(row.map(|r| (r, payload)))
    }

    /// The bid of held workflow step `jid`, from its index key (written when
    /// it was staged held, deleted when it was released or cancelled).
    pub async fn workflow_held_bid(&self, jid: &str) -> Result<Option<String>> {
        self.query(redis::cmd("GET").arg(self.keys.workflow_held(jid)))
            .await
    }

    /// The rows of steps `steps` (encoded names) of the workflow whose
    /// steps hash is `w`, in that order (a step without a state is left out).
    async fn step_rows(&self, w: &str, steps: &[String], deps: usize) -> Result<Vec<StepRow>> {
        if steps.is_empty() {
            return Ok(Vec::new());
        }
        let mut get = redis::cmd("HMGET");
        get.arg(w);
        for e in steps {
            for f in ["jid", "n", "s", "d", "dn", "wn", "fd"] {
                get.arg(format!("{f}:{e}"));
            }
        }
        let values: Vec<Option<String>> = self.query(&get).await?;
        let mut values = values.into_iter();
        let mut rows = Vec::with_capacity(steps.len());
        // Per row: its step and its first dependencies, encoded.
        let mut asked: Vec<(&String, Vec<String>)> = Vec::with_capacity(steps.len());
        for e in steps {
            let mut next = || values.next().flatten();
            let (jid, name, state, declared, dn, wn, fd) =
                (next(), next(), next(), next(), next(), next(), next());
            let Some(state) = state else { continue };
            let count = |v: Option<String>| v.and_then(|v| v.parse::<i64>().ok());
            let kept: Vec<String> = declared
                .unwrap_or_default()
                .split(',')
                .filter(|d| !d.is_empty())
                .map(str::to_owned)
                .collect();
            let deps_total = count(dn).map_or(kept.len() as u64, |n| n.max(0) as u64);
            let first: Vec<String> = kept.into_iter().take(deps).collect();
            rows.push(StepRow {
                name: name.unwrap_or_else(|| crate::wire::encoding::decode(e).unwrap_or_default()),
                jid: jid.unwrap_or_default(),
                state,
                deps: first
                    .iter()
                    .filter_map(|d| crate::wire::encoding::decode(d))
                    .collect(),
                deps_total,
                waiting: Vec::new(),
                waiting_total: count(wn).unwrap_or(0).max(0) as u64,
                failed_deps: decode_list(fd),
            });
            asked.push((e, first));
        }
        // Which of them each held step still waits for, in one HMGET.
        let mut get = redis::cmd("HMGET");
        get.arg(w);
        let mut any = false;
        for (row, (e, first)) in rows.iter().zip(&asked) {
            if row.state == "held" {
                for d in first {
                    get.arg(format!("we:{e}:{d}"));
                    any = true;
                }
            }
        }
        if !any {
            return Ok(rows);
        }
        let waits: Vec<Option<String>> = self.query(&get).await?;
        let mut waits = waits.into_iter();
        for (row, (_, first)) in rows.iter_mut().zip(&asked) {
            if row.state != "held" {
                continue;
            }
            row.waiting = first
                .iter()
                .zip(waits.by_ref())
                .filter(|(_, w)| w.is_some())
                .filter_map(|(d, _)| crate::wire::encoding::decode(d))
                .collect();
        }
        Ok(rows)
    }
}

/// A workflow step as Redis keeps it, raw (`workflow_page`, `workflow_step`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepRow {
    /// Its name.
    pub name: String,
    /// Its jid.
    pub jid: String,
    /// Its stored state (`held`, `queued`, `retrying`, `done`, `failed`,
    /// `cancelled`).
    pub state: String,
    /// Its first dependencies (as many as asked, of the first 100 Redis
    /// keeps), in declaration order.
    pub deps: Vec<String>,
    /// How many dependencies it has.
    pub deps_total: u64,
    /// Those of `deps` a held step still waits for.
    pub waiting: Vec<String>,
    /// How many dependencies it still waits for (all of them, not only
    /// among `deps`).
    pub waiting_total: u64,
    /// The failed dependencies it continued past.
    pub failed_deps: Vec<String>,
}

/// A page of a workflow's steps (`workflow_page`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepPage {
    /// Steps the workflow has.
    pub total: u64,
    /// The page's steps, in name order.
    pub rows: Vec<StepRow>,
}
