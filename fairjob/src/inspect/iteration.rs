//! An iterable job's progress as its `it-{jid}` hash records it: the saved
//! cursor, steps done, runs, runtime, last checkpoint, yields and whether it
//! was cancelled. Shown by explain and the busy page.

use serde::Serialize;

use super::Inspector;
use crate::error::Result;

/// An iterable job's progress (`None` from [`Inspector::iteration`] when
/// the job has no saved state: not iterable, not started, or complete).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct IterationView {
    /// The saved cursor, as JSON.
    pub cursor: Option<String>,
    /// Steps done up to the last checkpoint.
    pub steps: u64,
    /// Runs so far (Sidekiq's `ex`).
    pub executions: u64,
    /// Seconds run up to the last checkpoint (Sidekiq's `rt`).
    pub runtime: f64,
    /// The last checkpoint, epoch seconds.
    pub last_checkpoint: Option<f64>,
    /// Times it yielded (shutdown, slice, request).
    pub yields: u64,
    /// It was cancelled.
    pub cancelled: bool,
    /// When fair yield asked the running job to yield (epoch seconds), if it
    /// did and the job has not yielded yet.
    pub yield_asked_at: Option<f64>,
    /// That request is unhonoured past the cool-down (the job keeps running).
    pub yield_ignored: bool,
    /// Why it was asked (`share`, `floor`, `burst`).
    pub yield_reason: Option<String>,
}

/// The view of a raw `it-{jid}` hash (`None` when empty).
pub fn iteration_view(fields: &[(String, String)]) -> Option<IterationView> {
    if fields.is_empty() {
        return None;
    }
    let mut v = IterationView::default();
    for (k, val) in fields {
        match k.as_str() {
            "c" => v.cursor = Some(val.clone()),
            "s" => v.steps = val.parse().unwrap_or(0),
            "ex" => v.executions = val.parse().unwrap_or(0),
            "rt" => v.runtime = val.parse().unwrap_or(0.0),
            "at" => v.last_checkpoint = val.parse().ok(),
            "y" => v.yields = val.parse().unwrap_or(0),
            "cancelled" => v.cancelled = true,
            _ => {}
        }
    }
    Some(v)
}

impl Inspector {
    /// The progress of iterable job `jid`, if it has saved state.
    pub async fn iteration(&self, jid: &str) -> Result<Option<IterationView>> {
        Ok(iteration_view(&self.broker.iteration_read(jid).await?))
    }

    /// The progress of iterable job `jid` running from `queue`, with fair
    /// yield's request to it when the queue is sharded.
    pub async fn running_iteration(
        &self,
        jid: &str,
        queue: &str,
        sharded: bool,
    ) -> Result<Option<IterationView>> {
        let Some(mut v) = self.iteration(jid).await? else {
            return Ok(None);
        };
        if sharded && let Some(r) = self.broker.yield_request(queue, jid).await? {
            v.yield_asked_at = Some(r.asked_at);
            v.yield_ignored = r.ignored;
            v.yield_reason = r.reason;
        }
        Ok(Some(v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields() {
        let f = |k: &str, v: &str| (k.to_owned(), v.to_owned());
        assert_eq!(iteration_view(&[]), None);
        let v = iteration_view(&[
            f("ex", "3"),
            f("c", "41"),
            f("rt", "12.5"),
            f("s", "42"),
            f("at", "1700000000.5"),
            f("y", "2"),
            f("f", "7|media"),
        ])
        .unwrap();
        assert_eq!(v.cursor.as_deref(), Some("41"));
        assert_eq!((v.steps, v.executions, v.yields), (42, 3, 2));
        assert_eq!(v.last_checkpoint, Some(1_700_000_000.5));
        assert!(!v.cancelled);
        assert!(iteration_view(&[f("cancelled", "1")]).unwrap().cancelled);
    }
}
