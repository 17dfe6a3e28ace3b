//! Whether Redis takes writes now, and if not why: the view behind the
//! dashboard's banner and the health endpoints' "degraded" (see the README's
//! "When Redis says no"). Built from the broker's raw [`ServerFacts`] by a
//! pure rule ([`refusal_of`]); [`Refusal::sentence`] says it for a person
//! (the dashboard's banner, `/readyz` beside a worker, the CLI), and
//! [`Inspector::readiness`] is the answer of every `/readyz`.

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
    /// The sentence of why Redis refuses writes.
    pub fn sentence(&self) -> String {
        match self {
            Refusal::Busy => "Redis is busy running a long script (BUSY): nothing runs until it ends or SCRIPT KILL stops it".to_owned(),
            Refusal::Loading => "Redis is loading its dataset (LOADING): jobs wait until it is done".to_owned(),
            Refusal::ReadOnlyReplica => "Redis is a read-only replica (READONLY): point clients and workers at the primary".to_owned(),
            Refusal::OutOfMemory { used, max } => format!(
                "Redis is out of memory (OOM, {} of {} MB used): new jobs are refused while workers drain the queues; free memory or raise maxmemory",
                used / (1024 * 1024),
                max / (1024 * 1024)
            ),
            Refusal::WritesStopped => "Redis refuses writes after a failed snapshot (MISCONF): check its disk and dir; writes resume after the next good save".to_owned(),
            Refusal::Unreachable => "Redis cannot be reached".to_owned(),
        }
    }

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

/// What `/readyz` answers about Redis ([`Inspector::readiness`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    /// It answers and takes writes: 200 `ready`.
    Ready,
    /// It answers but refuses writes (read-only replica, out of memory,
    /// writes stopped after a failed save): 200 `degraded: <sentence>`.
    Degraded(Refusal),
    /// It does not answer, or answers only with an error (unreachable, busy,
    /// loading): 503 with what it said.
    Unavailable(String),
}

impl Readiness {
    /// `/readyz`'s HTTP status: 200, or 503 when Redis is unavailable.
    pub fn status(&self) -> u16 {
        match self {
            Readiness::Unavailable(_) => 503,
            _ => 200,
        }
    }

    /// `/readyz`'s body.
    pub fn text(&self) -> String {
        match self {
            Readiness::Ready => "ready\n".to_owned(),
            Readiness::Degraded(r) => format!("degraded: {}\n", r.sentence()),
            Readiness::Unavailable(why) => format!("{why}\n"),
        }
    }
}

impl Inspector {
    /// Redis's readiness for `/readyz`: a PING, then whether it refuses
    /// writes, within a second.
    pub async fn readiness(&self) -> Readiness {
        let refusal = async {
            self.ping().await?;
            self.redis_refusal().await
        };
        match tokio::time::timeout(std::time::Duration::from_secs(1), refusal).await {
            Ok(Ok(None)) => Readiness::Ready,
            Ok(Ok(Some(r))) => Readiness::Degraded(r),
            Ok(Err(e)) => Readiness::Unavailable(format!("redis unavailable: {e}")),
            Err(_) => {
                Readiness::Unavailable("redis unreachable: no answer within a second".to_owned())
            }
        }
    }

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
