//! Whether Redis takes writes now, and if not why: the view behind the
//! dashboard's banner and the health endpoints' "degraded" (see the README's
//! "When Redis says no"). Built from the broker's raw [`ServerFacts`] by a
//! pure rule ([`refusal_of`]); the sentences are the dashboard's.

use serde::Serialize;

use super::Inspector;
use crate::broker::read::ServerFacts;
use crate::error::{Error, Result};

/// Why Redis refuses writes now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Refusal {
    /// A long script or function blocks it (`BUSY`).
    Busy,
    /// It is loading its dataset (`LOADING`).
    Loading,
    /// It is a read-only replica (`READONLY`).
    ReadOnlyReplica,
    /// It is out of memory under `noeviction` (`OOM`): used and limit, bytes.
    OutOfMemory {
        /// `used_memory`.
        used: u64,
        /// `maxmemory`.
        max: u64,
    },
    /// Its last snapshot failed and it stops writes until one works (`MISCONF`).
    WritesStopped,
    /// It cannot be reached.
    Unreachable,
}

impl Refusal {
    /// The label of `fairjob_redis_errors_total` for this refusal.
    pub fn kind(&self) -> &'static str {
        match self {
            Refusal::Busy => "busy",
            Refusal::Loading => "loading",
            Refusal::ReadOnlyReplica => "readonly",
            Refusal::OutOfMemory { .. } => "oom",
            Refusal::WritesStopped => "misconf",
            Refusal::Unreachable => "unreachable",
        }
    }
}

/// The refusal the facts show, if any. A failed snapshot counts when the
/// server says it stops writes then, or cannot say (`CONFIG` refused).
pub fn refusal_of(f: &ServerFacts) -> Option<Refusal> {
    if f.loading {
        return Some(Refusal::Loading);
    }
    if f.replica {
        return Some(Refusal::ReadOnlyReplica);
    }
    if f.bgsave_failed && f.stops_writes_on_failed_save.unwrap_or(true) {
        return Some(Refusal::WritesStopped);
    }
    if f.maxmemory > 0 && f.used_memory >= f.maxmemory && f.maxmemory_policy == "noeviction" {
        return Some(Refusal::OutOfMemory {
            used: f.used_memory,
            max: f.maxmemory,
        });
    }
    None
}

/// The refusal an error shows, when reading the facts failed with one.
fn refusal_in(e: &Error) -> Option<Refusal> {
    match e {
        Error::Busy(_) => Some(Refusal::Busy),
        Error::Loading(_) => Some(Refusal::Loading),
        Error::Unreachable { .. } | Error::Connection(_) => Some(Refusal::Unreachable),
        _ => None,
    }
}

impl Inspector {
    /// Whether Redis refuses writes now, and why (`None`: it takes them).
    pub async fn redis_refusal(&self) -> Result<Option<Refusal>> {
        match self.broker.server_facts().await {
            Ok(f) => Ok(refusal_of(&f)),
            Err(e) => refusal_in(&e).map(Some).ok_or(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_fact_names_its_refusal() {
        let ok = ServerFacts {
            maxmemory_policy: "noeviction".into(),
            used_memory: 10,
            ..ServerFacts::default()
        };
        assert_eq!(refusal_of(&ok), None);
        let with = |f: fn(&mut ServerFacts)| {
            let mut x = ok.clone();
            f(&mut x);
            refusal_of(&x)
        };
        assert_eq!(with(|f| f.loading = true), Some(Refusal::Loading));
        assert_eq!(with(|f| f.replica = true), Some(Refusal::ReadOnlyReplica));
        assert_eq!(
            with(|f| f.bgsave_failed = true),
            Some(Refusal::WritesStopped)
        );
        assert_eq!(
            with(|f| {
                f.bgsave_failed = true;
                f.stops_writes_on_failed_save = Some(false);
            }),
            None,
            "a failed save that does not stop writes"
        );
        assert_eq!(
            with(|f| f.maxmemory = 5),
            Some(Refusal::OutOfMemory { used: 10, max: 5 })
        );
        assert_eq!(
            with(|f| {
                f.maxmemory = 5;
                f.maxmemory_policy = "allkeys-lru".into();
            }),
            None,
            "an evicting Redis deletes instead of refusing (the overview warns)"
        );
        assert_eq!(refusal_in(&Error::Busy("BUSY".into())), Some(Refusal::Busy));
    }
}
