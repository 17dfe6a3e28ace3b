//! [`ScriptClock`]: a frozen clock for the scripts, for tests that compare
//! what the scripts do with what a model does at the same instant
//! (`tests/tests/twins.rs`).

/// The scripts' clock, frozen by the test: after [`ScriptClock::install`],
/// every script of this process reads its time from a key the test sets
/// ([`ScriptClock::key_for`]) instead of Redis's `TIME` (falling back to
/// `TIME` where the key is unset). Nothing else in the scripts differs: the
/// clock is the one include the scripts read the time through.
#[derive(Debug, Clone, Copy)]
pub struct ScriptClock;

impl ScriptClock {
    /// Builds every script of this process with the frozen clock. Call it
    /// before anything talks to Redis.
    ///
    /// # Panics
    ///
    /// When a script was already built with Redis's clock.
    pub fn install() {
        crate::broker::freeze_clock(include_str!("frozen_clock.lua"));
    }

    /// The key holding the frozen time (µs, as a decimal integer) for the
    /// scripts whose first key is `key`: it names `key`'s hash tag (or the
    /// whole key), so it lives in `key`'s Redis Cluster slot.
    pub fn key_for(key: &str) -> String {
        let tag = key
            .find('{')
            .and_then(|s| {
                let rest = &key[s + 1..];
                rest.find('}').filter(|e| *e > 0).map(|e| &rest[..e])
            })
            .unwrap_or(key);
        format!("fairjob-test-clock{{{tag}}}")
    }
}
