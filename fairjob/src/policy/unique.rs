//! Unique jobs' locks (the twin of `broker/scripts/lib/unique.lua`): one lock
//! per key, held by one jid until it is released by that jid (when the job
//! succeeds or dies, or at its start for `until = "start"`) or its
//! `unique_for` runs out; with `on_conflict = replace` the lock also records
//! where its holder waits, so a newer push can take the holder's place.

/// A held lock: the jid holding it, when it expires (epoch seconds) and, for
/// replace, the holder's payload as it waits.
#[derive(Debug, Clone, PartialEq)]
pub struct Lock {
    /// The jid that holds the key.
    pub jid: String,
    /// When the lock expires (epoch seconds).
    pub expires_at: f64,
    /// Where the holder waits (replace mode): its payload as stored.
    pub waiting: Option<String>,
}

/// `unique_take`: takes the lock at `slot` for `jid` at `now` (epoch
/// seconds) for `ttl_ms`. `None` when taken (or already held by `jid`: its
/// life is not restarted), else the jid that holds it.
pub fn take(slot: &mut Option<Lock>, jid: &str, ttl_ms: u64, now: f64) -> Option<String> {
    if let Some(l) = slot.as_ref()
        && l.expires_at > now
    {
        return (l.jid != jid).then(|| l.jid.clone());
    }
    *slot = Some(Lock {
        jid: jid.to_owned(),
        expires_at: now + ttl_ms as f64 / 1000.0,
        waiting: None,
    });
    None
}

/// `unique_release`: drops the lock if `jid` holds it (`None`: whoever
/// does). True when released.
pub fn release(slot: &mut Option<Lock>, jid: Option<&str>, now: f64) -> bool {
    let held = slot
        .as_ref()
        .is_some_and(|l| l.expires_at > now && jid.is_none_or(|j| l.jid == j));
    if held {
        *slot = None;
    }
    held
}

/// `unique_swap_jid`: `payload` with its `"jid":"<from>"` made `<to>` (jids
/// are hex, so the first such text is the field).
pub fn swap_jid(payload: &str, from: &str, to: &str) -> String {
    let pat = format!("\"jid\":\"{from}\"");
    payload.replacen(&pat, &format!("\"jid\":\"{to}\""), 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_is_held_by_one_jid_until_released_by_it_or_expired() {
        let mut slot = None;
        assert_eq!(take(&mut slot, "a", 1000, 10.0), None);
        assert_eq!(take(&mut slot, "a", 1000, 10.5), None);
        assert_eq!(take(&mut slot, "b", 1000, 10.5), Some("a".to_owned()));
        assert!(!release(&mut slot, Some("b"), 10.5));
        assert!(release(&mut slot, Some("a"), 10.5));
        assert_eq!(take(&mut slot, "b", 1000, 10.5), None);
        // Expired: anyone takes it.
        assert_eq!(take(&mut slot, "c", 1000, 12.0), None);
        assert_eq!(slot.as_ref().map(|l| l.jid.as_str()), Some("c"));
    }

    #[test]
    fn the_jid_swap_changes_the_jid_field_only() {
        assert_eq!(
            swap_jid(r#"{"jid":"aa","args":["jid"]}"#, "aa", "bb"),
            r#"{"jid":"bb","args":["jid"]}"#
        );
    }
}
