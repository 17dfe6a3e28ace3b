//! The ledger: `LedgerJob` and `ProbeJob` append `start <jid> <pid>` and `end
//! <jid> <pid>` lines to a file per worker process in `$FAIRJOB_TEST_LEDGER`, a
//! directory outside the Redis under test, so a test can tell which process
//! ran what even when Redis lost or repeated something.

use std::collections::{BTreeSet, HashMap};

use crate::{TempDir, temp_dir};

/// The keys of `map` with more than one entry.
fn more_than_once(map: &HashMap<String, Vec<u32>>) -> BTreeSet<String> {
    map.iter()
        .filter(|(_, p)| p.len() > 1)
        .map(|(j, _)| j.clone())
        .collect()
}

/// A fresh, empty directory for one test's ledger, removed on drop.
pub fn ledger_dir(tag: &str) -> TempDir {
    temp_dir(&format!("ledger-{tag}"))
}

/// Reads every ledger file in `dir`: lines `start|end <jid> <pid>`.
fn read_ledger(dir: &std::path::Path) -> Vec<(String, String, u32)> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if let Ok(text) = std::fs::read_to_string(e.path()) {
                for line in text.lines() {
                    let mut parts = line.split(' ');
                    if let (Some(kind), Some(jid), Some(pid)) =
                        (parts.next(), parts.next(), parts.next())
                    {
                        out.push((kind.to_owned(), jid.to_owned(), pid.parse().unwrap_or(0)));
                    }
                }
            }
        }
    }
    out
}

/// A ledger summarised per jid: the pids that wrote `start` and `end`, in file order.
#[derive(Debug, Default, Clone)]
pub struct Ledger {
    /// jid → pids that started it (one entry per start).
    pub starts: HashMap<String, Vec<u32>>,
    /// jid → pids that ended it (one entry per end).
    pub ends: HashMap<String, Vec<u32>>,
}

impl Ledger {
    /// Reads every ledger file in `dir`.
    pub fn read(dir: &std::path::Path) -> Ledger {
        let mut l = Ledger::default();
        for (kind, jid, pid) in read_ledger(dir) {
            match kind.as_str() {
                "start" => l.starts.entry(jid).or_default().push(pid),
                "end" => l.ends.entry(jid).or_default().push(pid),
                _ => {}
            }
        }
        l
    }

    /// How many times `jid` started.
    pub fn started(&self, jid: &str) -> usize {
        self.starts.get(jid).map_or(0, Vec::len)
    }

    /// How many times `jid` ended.
    pub fn ended(&self, jid: &str) -> usize {
        self.ends.get(jid).map_or(0, Vec::len)
    }

    /// Number of jids with at least one `end`.
    pub fn jobs_ended(&self) -> usize {
        self.ends.len()
    }

    /// Jids that started (on any pid) more than once.
    pub fn started_more_than_once(&self) -> BTreeSet<String> {
        more_than_once(&self.starts)
    }

    /// Jids that ended more than once (duplicate completions).
    pub fn ended_more_than_once(&self) -> BTreeSet<String> {
        more_than_once(&self.ends)
    }

    /// The jids of `jids` that never ended.
    pub fn not_ended<'a>(&self, jids: &'a [String]) -> Vec<&'a String> {
        jids.iter().filter(|j| self.ended(j) == 0).collect()
    }

    /// Jids started on one of `pids` and not (yet) ended there: in flight on them.
    pub fn in_flight_on(&self, pids: &[u32]) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for (jid, starters) in &self.starts {
            for pid in pids {
                let s = starters.iter().filter(|p| *p == pid).count();
                let e = self
                    .ends
                    .get(jid)
                    .map_or(0, |v| v.iter().filter(|p| *p == pid).count());
                if s > e {
                    out.insert(jid.clone());
                }
            }
        }
        out
    }

    /// Jids started on `pid` (at least once).
    pub fn started_on(&self, pid: u32) -> BTreeSet<String> {
        self.starts
            .iter()
            .filter(|(_, p)| p.contains(&pid))
            .map(|(j, _)| j.clone())
            .collect()
    }
}

/// The lines with a time (`start|end <id> <pid> <unix ms>`, written by
/// [`crate::jobs::WfLedgerJob`]): `(kind, id, pid, ms)`, by file.
pub fn timed_ledger(dir: &std::path::Path) -> Vec<(String, String, u32, u128)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let text = std::fs::read_to_string(e.path()).unwrap_or_default();
        for line in text.lines() {
            let parts: Vec<&str> = line.split(' ').collect();
            if let [kind, id, pid, ms] = parts[..]
                && let (Ok(pid), Ok(ms)) = (pid.parse(), ms.parse())
            {
                out.push((kind.to_owned(), id.to_owned(), pid, ms));
            }
        }
    }
    out
}

/// Per jid, the steps the iterable test jobs wrote (`step <jid>:<n>:<seq>
/// <pid>`), in ledger order, as `(step, run)` where a run is `pid/seq` (a
/// token's sequence number is unique within one process only).
pub fn step_ledger(
    dir: &std::path::Path,
) -> std::collections::BTreeMap<String, Vec<(u64, String)>> {
    let mut out: std::collections::BTreeMap<String, Vec<(u64, String)>> = Default::default();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let text = std::fs::read_to_string(e.path()).unwrap_or_default();
        for line in text.lines() {
            let mut parts = line.split(' ');
            if parts.next() != Some("step") {
                continue;
            }
            let (Some(id), Some(pid)) = (parts.next(), parts.next()) else {
                continue;
            };
            let mut id = id.split(':');
            let (Some(jid), Some(n), Some(seq)) = (id.next(), id.next(), id.next()) else {
                continue;
            };
            let Ok(n) = n.parse() else { continue };
            out.entry(jid.to_owned())
                .or_default()
                .push((n, format!("{pid}/{seq}")));
        }
    }
    out
}
