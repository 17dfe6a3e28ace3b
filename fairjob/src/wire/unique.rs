//! Unique jobs as the derive declares them ([`UniqueOptions`]) and the pure
//! rule that names a unique job's key: [`unique_digest`], the SHA-1 of the
//! class and the key arguments' JSON, so a huge argument is never stored in
//! Redis as part of a key; and [`UniqueSpec`], what a payload carries
//! (`unique_*` fields) for the push and finish scripts.

use std::time::Duration;

use super::{Payload, fields};

/// `#[unique(for = "10m", by(..), until = "..", on_conflict = "..")]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UniqueOptions {
    /// The lock's longest life (its TTL): a crash never holds a key longer.
    pub lock_for: Duration,
    /// The fields that make the key; empty: all arguments.
    pub by: &'static [&'static str],
    /// When the lock is released.
    pub until: UniqueUntil,
    /// What a push that finds the key held does.
    pub on_conflict: OnConflict,
}

/// When a unique lock is released.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UniqueUntil {
    /// Held while the job is queued, scheduled, running and waiting to retry;
    /// released when it succeeds or dies (Sidekiq Enterprise's default).
    #[default]
    Success,
    /// Released when the job starts running.
    Start,
}

impl UniqueUntil {
    /// The payload's `unique_until` value.
    pub fn as_str(self) -> &'static str {
        match self {
            UniqueUntil::Success => "success",
            UniqueUntil::Start => "start",
        }
    }

    /// Reads a payload value; anything unknown is the default.
    pub fn parse(s: &str) -> UniqueUntil {
        match s {
            "start" => UniqueUntil::Start,
            _ => UniqueUntil::Success,
        }
    }
}

/// What a push does when its key is held by another job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnConflict {
    /// The push is refused: `Error::Duplicate { jid }` names the holder.
    #[default]
    Reject,
    /// The holder, while it still waits (queued or scheduled), takes the new
    /// arguments (and, for a scheduled job, the new due time: a debounce);
    /// the push returns the holder's jid. A holder already running (or
    /// waiting to retry) rejects the push.
    Replace,
}

impl OnConflict {
    /// The payload's `unique_on_conflict` value.
    pub fn as_str(self) -> &'static str {
        match self {
            OnConflict::Reject => "reject",
            OnConflict::Replace => "replace",
        }
    }

    /// Reads a payload value; anything unknown is the default.
    pub fn parse(s: &str) -> OnConflict {
        match s {
            "replace" => OnConflict::Replace,
            _ => OnConflict::Reject,
        }
    }
}

/// The key of a unique job: the lowercase hex SHA-1 of the JSON array
/// `[class, key]`, where `key` is the JSON of the key arguments (all of
/// `args`, or the fields named by `by`). Same class and same arguments give
/// the same digest; its length never depends on the arguments.
pub fn unique_digest(class: &str, key_json: &str) -> String {
    let class = serde_json::to_string(class).expect("strings encode");
    let mut h = sha1_smol::Sha1::new();
    h.update(b"[");
    h.update(class.as_bytes());
    h.update(b",");
    h.update(key_json.as_bytes());
    h.update(b"]");
    h.digest().to_string()
}

/// A unique job's lock as its payload describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UniqueSpec {
    /// [`unique_digest`].
    pub digest: String,
    /// The queue whose slot holds the lock.
    pub queue: String,
    /// The lock's TTL.
    pub lock_for: Duration,
    /// When it is released.
    pub until: UniqueUntil,
    /// What a conflicting push does.
    pub on_conflict: OnConflict,
}

impl UniqueSpec {
    /// Writes the `unique_*` fields (the lock's queue is added at push).
    pub fn write(options: &UniqueOptions, digest: String, payload: &mut Payload) {
        payload.set(fields::UNIQUE_DIGEST, digest);
        payload.set(fields::UNIQUE_FOR, options.lock_for.as_secs_f64());
        payload.set(fields::UNIQUE_UNTIL, options.until.as_str());
        if options.on_conflict != OnConflict::Reject {
            payload.set(fields::UNIQUE_ON_CONFLICT, options.on_conflict.as_str());
        }
    }

    /// The lock a payload holds or asks for: `None` without a digest or a
    /// positive `unique_for`. The lock's queue is `unique_queue`, else the
    /// payload's queue.
    pub fn of(payload: &Payload) -> Option<UniqueSpec> {
        let digest = payload.get_str(fields::UNIQUE_DIGEST)?;
        let secs: f64 = payload.get(fields::UNIQUE_FOR)?;
        if digest.is_empty() || !secs.is_finite() || secs <= 0.0 {
            return None;
        }
        Some(UniqueSpec {
            digest,
            queue: payload
                .get_str(fields::UNIQUE_QUEUE)
                .unwrap_or_else(|| payload.queue()),
            lock_for: Duration::from_secs_f64(secs.min(1e9)),
            until: payload
                .get_str(fields::UNIQUE_UNTIL)
                .map_or_else(UniqueUntil::default, |s| UniqueUntil::parse(&s)),
            on_conflict: payload
                .get_str(fields::UNIQUE_ON_CONFLICT)
                .map_or_else(OnConflict::default, |s| OnConflict::parse(&s)),
        })
    }

    /// The lock's TTL in whole milliseconds, at least 1.
    pub fn ttl_ms(&self) -> u64 {
        (self.lock_for.as_millis() as u64).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::value::RawValue;

    #[test]
    fn digest_depends_on_class_and_key_only_and_has_a_fixed_length() {
        let a = unique_digest("Sync", r#"[42]"#);
        assert_eq!(a, unique_digest("Sync", r#"[42]"#));
        assert_ne!(a, unique_digest("Sync", r#"[43]"#));
        assert_ne!(a, unique_digest("Other", r#"[42]"#));
        assert_eq!(a.len(), 40);
        let huge = format!("[\"{}\"]", "x".repeat(1 << 20));
        let h = unique_digest("Sync", &huge);
        assert_eq!(h.len(), 40);
        assert!(h.chars().all(|c| c.is_ascii_hexdigit()));
        // The class is JSON-encoded: no ambiguity between class and key.
        assert_ne!(unique_digest("a\",\"b", "1"), unique_digest("a", "\"b\",1"));
    }

    #[test]
    fn payload_round_trip() {
        let args = RawValue::from_string("[1]".into()).unwrap();
        let mut p = Payload::new("Sync", args, "low");
        assert_eq!(UniqueSpec::of(&p), None);
        let opts = UniqueOptions {
            lock_for: Duration::from_secs(600),
            by: &[],
            until: UniqueUntil::Start,
            on_conflict: OnConflict::Replace,
        };
        UniqueSpec::write(&opts, "abc".into(), &mut p);
        let spec = UniqueSpec::of(&p).unwrap();
        assert_eq!(spec.queue, "low");
        assert_eq!(spec.ttl_ms(), 600_000);
        assert_eq!(spec.until, UniqueUntil::Start);
        assert_eq!(spec.on_conflict, OnConflict::Replace);
        p.set(fields::UNIQUE_QUEUE, "base");
        assert_eq!(UniqueSpec::of(&p).unwrap().queue, "base");
        p.set(fields::UNIQUE_FOR, 0);
        assert_eq!(UniqueSpec::of(&p), None);
    }
}
