//! A workflow's steps as Redis keeps them, for the views
//! (`inspect::workflow`, explain): a page in name order through the places
//! `workflow_stage.lua` writes (`o:<k>` in the workflow's hash), one step by
//! jid, and the held steps' index (jid → bid). A few `HMGET`s per page; no
//! scan of the workflow's hash.

use super::RedisBroker;
use crate::broker::batch::decode_list;
use crate::error::Result;

impl RedisBroker {
    /// A page of workflow `bid`'s steps in name order: from the `from`-th
    /// (0-based) at most `n`, each with its first `deps` dependencies (see
    /// [`StepRow`]). Bounded: one `HMGET` of the page's places, one of its
    /// steps' fields, one of their first dependencies and one of which of
    /// those a held step still waits for; no scan.
    pub async fn workflow_page(
        &self,
        bid: &str,
        from: u64,
        n: usize,
        deps: usize,
    ) -> Result<StepPage> {
        let w = format!("{}:wf", self.keys.batch(bid));
        let mut get = redis::cmd("HMGET");
        get.arg(&w).arg("steps");
        for k in from + 1..=from + n as u64 {
            get.arg(format!("o:{k}"));
        }
        let places: Vec<Option<String>> = self.query(&get).await?;
        let mut places = places.into_iter();
        let total = places
            .next()
            .flatten()
            .and_then(|t| t.parse().ok())
            .unwrap_or(0);
        let steps: Vec<String> = places.flatten().collect();
        Ok(StepPage {
            total,
            rows: self.step_rows(&w, &steps, deps).await?,
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
            for f in ["jid", "n", "s", "dn", "wn", "fd"] {
                get.arg(format!("{f}:{e}"));
            }
        }
        let values: Vec<Option<String>> = self.query(&get).await?;
        let mut values = values.into_iter();
        let mut rows = Vec::with_capacity(steps.len());
        let mut listed = Vec::with_capacity(steps.len());
        for e in steps {
            let mut next = || values.next().flatten();
            let (jid, name, state, dn, wn, fd) = (next(), next(), next(), next(), next(), next());
            let Some(state) = state else { continue };
            let count = |v: Option<String>| v.and_then(|v| v.parse::<i64>().ok()).unwrap_or(0);
            let deps_total = count(dn).max(0) as u64;
            rows.push(StepRow {
                name: name.unwrap_or_else(|| crate::wire::encoding::decode(e).unwrap_or_default()),
                jid: jid.unwrap_or_default(),
                state,
                deps: Vec::new(),
                deps_total,
                waiting: Vec::new(),
                waiting_total: count(wn).max(0) as u64,
                failed_deps: decode_list(fd),
            });
            listed.push((e, deps_total.min(deps as u64)));
        }
        // Their first dependencies, in one HMGET.
        let mut get = redis::cmd("HMGET");
        get.arg(w);
        let mut asked = 0;
        for (e, n) in &listed {
            for i in 1..=*n {
                get.arg(format!("d:{e}:{i}"));
                asked += 1;
            }
        }
        if asked == 0 {
            return Ok(rows);
        }
        let names: Vec<Option<String>> = self.query(&get).await?;
        let mut names = names.into_iter();
        let mut encoded: Vec<Vec<String>> = Vec::with_capacity(rows.len());
        for (row, (_, n)) in rows.iter_mut().zip(&listed) {
            let these: Vec<String> = (0..*n).filter_map(|_| names.next().flatten()).collect();
            row.deps = these
                .iter()
                .filter_map(|d| crate::wire::encoding::decode(d))
                .collect();
            encoded.push(these);
        }
        // Which of them each held step still waits for, in one HMGET.
        let mut get = redis::cmd("HMGET");
        get.arg(w);
        let mut asked = 0;
        for ((row, (e, _)), these) in rows.iter().zip(&listed).zip(&encoded) {
            if row.state == "held" {
                for d in these {
                    get.arg(format!("we:{e}:{d}"));
                    asked += 1;
                }
            }
        }
        if asked == 0 {
            return Ok(rows);
        }
        let waits: Vec<Option<String>> = self.query(&get).await?;
        let mut waits = waits.into_iter();
        for (row, these) in rows.iter_mut().zip(&encoded) {
            if row.state != "held" {
                continue;
            }
            row.waiting = these
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
    /// Its first dependencies (as many as asked), in declaration order.
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
