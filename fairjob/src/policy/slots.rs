//! Slot limits, the concurrent limiter (the twin of
//! `broker/scripts/lib/slots.lua`): at most `limit` jobs of a key run at
//! once; a job that finds no free slot waits in the key's FIFO list (holding
//! no worker) until a slot frees, when as many waiters as there are free
//! slots go back to the front of their queues, each with a slot reserved for
//! it (so no newer job takes it first) until it starts or the reservation
//! runs out. The limit lives in Redis and may change while jobs run (0 pauses
//! the key).
//!
//! A waiter entry is length-prefixed fields (`<len>:<bytes>`), so queue names
//! and payloads may hold any byte: jid, queue name, encoded queue name,
//! payload ([`entry`], [`fields`]); rate limiters' waiters share the format.

use std::collections::{BTreeMap, VecDeque};

/// Appends a length-prefixed field.
fn field(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(bytes.len().to_string().as_bytes());
    out.push(b':');
    out.extend_from_slice(bytes);
}

/// A waiting job's entry: jid, queue, encoded queue, payload.
pub fn entry(jid: &str, queue: &str, encoded_queue: &str, payload: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 256);
    field(&mut out, jid.as_bytes());
    field(&mut out, queue.as_bytes());
    field(&mut out, encoded_queue.as_bytes());
    field(&mut out, payload.as_bytes());
    out
}

/// An entry's fields back (jid, queue, encoded queue, payload); stops at
/// the first malformed one.
pub fn fields(entry: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut rest = entry;
    while let Some(colon) = rest.iter().position(|&b| b == b':') {
        let Some(n) = std::str::from_utf8(&rest[..colon])
            .ok()
            .and_then(|n| n.parse::<usize>().ok())
        else {
            break;
        };
        let body = &rest[colon + 1..];
        if body.len() < n {
            break;
        }
        out.push(body[..n].to_vec());
        rest = &body[n..];
    }
    out
}

/// One key's slots, as its Redis keys hold them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SlotState {
    /// The runtime limit (`limit`; `None`: the declared one).
    pub limit: Option<f64>,
    /// Holders and when each took its slot (ms; `holders`).
    pub holders: BTreeMap<String, u64>,
    /// Slots reserved for released waiters: jid → expiry (ms; `reserved`).
    pub reserved: BTreeMap<String, u64>,
    /// Waiting jobs, first out first (`waiters`).
    pub waiters: VecDeque<Vec<u8>>,
}

impl SlotState {
    /// The limit in force: the runtime one, else `default`.
    pub fn limit_or(&self, default: f64) -> f64 {
        self.limit.unwrap_or(default)
    }

    /// Drops reservations whose waiter never started in time (before
    /// `now`, ms); returns how many remain.
    pub fn reserved_at(&mut self, now: u64) -> usize {
        self.reserved.retain(|_, expiry| *expiry >= now);
        self.reserved.len()
    }

    /// Takes a slot for `holder` (job `jid`) at `now` (ms) if one is free or
    /// was reserved for the job as a released waiter. True when taken.
    pub fn try_take(&mut self, default: f64, holder: &str, jid: &str, now: u64) -> bool {
        let limit = self.limit_or(default);
        let reserved = self.reserved_at(now);
        let mine = self.reserved.remove(jid).is_some();
        if mine || ((self.holders.len() + reserved) as f64) < limit {
            self.holders.insert(holder.to_owned(), now);
            return true;
        }
        false
    }

    /// A job waits for a slot, last in line.
    pub fn park(&mut self, entry: Vec<u8>) {
        self.waiters.push_back(entry);
    }

    /// Moves as many waiters as there are free slots out of the line, each
    /// with a slot reserved for it until `now + ttl` (ms); returns them, in
    /// order (their jobs go to the front of their queues).
    pub fn release_waiters(&mut self, default: f64, ttl: u64, now: u64) -> Vec<Vec<u8>> {
        let mut free =
            self.limit_or(default) - self.holders.len() as f64 - self.reserved_at(now) as f64;
        let mut out = Vec::new();
        while free > 0.0 {
            let Some(e) = self.waiters.pop_front() else {
                break;
            };
            let jid = fields(&e).into_iter().next().unwrap_or_default();
            self.reserved
                .insert(String::from_utf8_lossy(&jid).into_owned(), now + ttl);
            out.push(e);
            free -= 1.0;
        }
        out
    }

    /// A job gives back the slot `holder` held: if it still held it, waiters
    /// move into the freed slots ([`Self::release_waiters`]).
    pub fn release(&mut self, holder: &str, default: f64, ttl: u64, now: u64) -> Vec<Vec<u8>> {
        if self.holders.remove(holder).is_some() {
            return self.release_waiters(default, ttl, now);
        }
        Vec::new()
    }

    /// Sets the runtime limit (`None`: back to the declared one) and
    /// releases as many waiters as that frees.
    pub fn set_limit(
        &mut self,
        limit: Option<f64>,
        default: f64,
        ttl: u64,
        now: u64,
    ) -> Vec<Vec<u8>> {
        self.limit = limit;
        self.release_waiters(default, ttl, now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_length_prefixed() {
        let e = entry("j", "a:b\n c", "a%3Ab%0A%20c", "{}");
        assert_eq!(
            fields(&e),
            vec![
                b"j".to_vec(),
                b"a:b\n c".to_vec(),
                b"a%3Ab%0A%20c".to_vec(),
                b"{}".to_vec()
            ]
        );
        assert_eq!(fields(b"9:short"), Vec::<Vec<u8>>::new());
    }

    #[test]
    fn a_freed_slot_goes_to_the_first_waiter_and_is_kept_for_it() {
        let mut s = SlotState::default();
        assert!(s.try_take(1.0, "h1", "j1", 10));
        assert!(!s.try_take(1.0, "h2", "j2", 10));
        s.park(entry("j2", "q", "q", "p2"));
        s.park(entry("j3", "q", "q", "p3"));
        let out = s.release("h1", 1.0, 100, 20);
        assert_eq!(out.len(), 1);
        assert_eq!(fields(&out[0])[0], b"j2");
        // A newer job finds the slot reserved; the waiter takes it.
        assert!(!s.try_take(1.0, "h4", "j4", 30));
        assert!(s.try_take(1.0, "h2", "j2", 30));
        // A reservation that runs out frees its slot.
        let mut t = SlotState::default();
        t.park(entry("j5", "q", "q", "p5"));
        assert_eq!(t.release_waiters(1.0, 100, 0).len(), 1);
        assert!(!t.try_take(1.0, "h6", "j6", 50));
        assert!(t.try_take(1.0, "h6", "j6", 101));
    }
}
