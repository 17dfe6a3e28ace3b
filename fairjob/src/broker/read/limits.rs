//! Slot-limited keys: limit, running, reserved, waiting, a page at a time.

use serde::Serialize;

use super::{MAX_READ_ROWS, Page};
use crate::broker::RedisBroker;
use crate::error::Result;

/// One slot-limited key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LimitRow {
    /// `<Class>:<key>` or `group:<group>:<key>`.
    pub key: String,
    /// The runtime limit, if one is set (otherwise the job's declared default applies).
    pub limit: Option<u32>,
    /// Slots held.
    pub running: u64,
    /// Slots reserved for released waiters not started yet.
    pub reserved: u64,
    /// Jobs in the lock-wait list.
    pub waiting: u64,
}

/// One page of slot-limited keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LimitPage {
    /// Rows, by key.
    pub rows: Vec<LimitRow>,
    /// The cursor of the next page, or `None` after the last.
    pub next: Option<u64>,
}

impl RedisBroker {
    /// One page of slot-limited keys with their state.
    pub async fn limits(&self, page: Page) -> Result<LimitPage> {
        let k = &self.keys;
        let (next, keys) = self
            .registry_step(
                &k.limits_registry(),
                page.cursor,
                page.count.clamp(1, MAX_READ_ROWS),
            )
            .await?;
        let mut rows = Vec::with_capacity(keys.len());
        if !keys.is_empty() {
            let mut pipe = redis::pipe();
            for full in &keys {
                let lk = k.limit(full);
                pipe.get(&lk.limit)
                    .zcard(&lk.holders)
                    .hlen(&lk.reserved)
                    .llen(&lk.waiters);
            }
            let found: Vec<(Option<u32>, u64, u64, u64)> = self.pipe(&pipe).await?;
            for (key, (limit, running, reserved, waiting)) in keys.into_iter().zip(found) {
                rows.push(LimitRow {
                    key,
                    limit,
                    running,
                    reserved,
                    waiting,
                });
            }
        }
        Ok(LimitPage {
            rows,
            next: (next != 0).then_some(next),
        })
    }
}

/// A job holding a slot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SlotHolder {
    /// The worker process.
    pub identity: String,
    /// The job, while its in-progress record still holds it.
    pub jid: Option<String>,
    /// Its class.
    pub class: Option<String>,
    /// Its tenant.
    pub tenant: Option<String>,
    /// When it took the slot, epoch ms.
    pub since_ms: u64,
}

/// A job waiting for a slot (FIFO order).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SlotWaiter {
    /// The jid.
    pub jid: String,
    /// The queue it goes back to when released.
    pub queue: String,
    /// Its class.
    pub class: Option<String>,
    /// Its tenant.
    pub tenant: Option<String>,
}

/// One slot-limited key with its holders and first waiters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LimitDetail {
    /// The counts.
    pub row: LimitRow,
    /// Holders, longest held first (at most the `n` asked for).
    pub holders: Vec<SlotHolder>,
    /// Waiters, next released first (at most the `n` asked for).
    pub waiters: Vec<SlotWaiter>,
}

/// The fields of a lock-wait list entry (`<len>:<bytes>` each): jid, queue,
/// encoded queue, payload.
pub(crate) fn waiter_fields(e: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < e.len() {
        let Some(colon) = e[i..].iter().position(|b| *b == b':') else {
            break;
        };
        let Some(n) = std::str::from_utf8(&e[i..i + colon])
            .ok()
            .and_then(|s| s.parse::<usize>().ok())
        else {
            break;
        };
        let start = i + colon + 1;
        let end = (start + n).min(e.len());
        out.push(&e[start..end]);
        i = end;
    }
    out
}

/// A lock-wait list entry as a [`SlotWaiter`].
pub(crate) fn parse_waiter(e: &[u8]) -> Option<SlotWaiter> {
    let f = waiter_fields(e);
    let jid = String::from_utf8_lossy(f.first()?).into_owned();
    let queue = String::from_utf8_lossy(f.get(1)?).into_owned();
    let payload = f
        .get(3)
        .and_then(|p| crate::wire::Payload::parse_slice(p).ok());
    Some(SlotWaiter {
        jid,
        queue,
        class: payload.as_ref().map(|p| p.class()),
        tenant: payload.as_ref().and_then(|p| p.tenant()),
    })
}

impl RedisBroker {
    /// One slot-limited key: its counts, its first `n` holders (with the jid
    /// each holder's in-progress record names) and first `n` waiters.
    pub async fn limit_detail(&self, full_key: &str, n: usize) -> Result<LimitDetail> {
        let n = n.clamp(1, super::MAX_READ_ROWS);
        let lk = self.keys.limit(full_key);
        let mut pipe = redis::pipe();
        pipe.get(&lk.limit)
            .zcard(&lk.holders)
            .hlen(&lk.reserved)
            .llen(&lk.waiters)
            .zrange_withscores(&lk.holders, 0, n as isize - 1)
            .lrange(&lk.waiters, 0, n as isize - 1);
        type Found = (Option<u32>, u64, u64, u64, Vec<(String, f64)>, Vec<Vec<u8>>);
        let (limit, running, reserved, waiting, holders, waiters): Found = self.pipe(&pipe).await?;
        let mut out = Vec::with_capacity(holders.len());
        let mut pipe = redis::pipe();
        let mut asked = Vec::new();
        for (holder, since) in &holders {
            let (identity, token) = holder.split_once('|').unwrap_or((holder.as_str(), ""));
            if let Some(t) = crate::broker::Token::parse(token) {
                let record = self.inflight_of(identity, &t);
                pipe.hget(record, token);
                asked.push(out.len());
            }
            out.push(SlotHolder {
                identity: identity.to_owned(),
                jid: None,
                class: None,
                tenant: None,
                since_ms: *since as u64,
            });
        }
        if !asked.is_empty() {
            let payloads: Vec<Option<Vec<u8>>> = self.pipe(&pipe).await?;
            for (i, p) in asked.into_iter().zip(payloads) {
                if let Some(p) = p.and_then(|p| crate::wire::Payload::parse_slice(&p).ok()) {
                    out[i].jid = Some(p.jid());
                    out[i].class = Some(p.class());
                    out[i].tenant = p.tenant();
                }
            }
        }
        Ok(LimitDetail {
            row: LimitRow {
                key: full_key.to_owned(),
                limit,
                running,
                reserved,
                waiting,
            },
            holders: out,
            waiters: waiters.iter().filter_map(|e| parse_waiter(e)).collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiter_entries_parse_with_any_bytes() {
        let e = b"3:abc7:q:u e|x5:q%3Au2:{}";
        let f = waiter_fields(e);
        assert_eq!(f, vec![&b"abc"[..], b"q:u e|x", b"q%3Au", b"{}"]);
        assert_eq!(parse_waiter(b"1:j1:q1:q2:{}").unwrap().queue, "q");
    }
}
