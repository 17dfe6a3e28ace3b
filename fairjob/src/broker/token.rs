//! The records a fetched job leaves in Redis and reads back: its in-progress
//! [`Token`], the [`SlotHold`] of a slot-limited job, and a promoted job's
//! source entry ([`Src`]).

use super::keys;

/// A fetched job's token in the in-progress record: `<seq>|<queue>[|<tenant>]`,
/// each part encoded, so the record alone says where the job goes back to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    /// The field name in the in-progress hash.
    pub raw: String,
    /// The queue the job was fetched from.
    pub queue: String,
    /// For a sharded queue, the encoded tenant of its shard (`""` = no tenant).
    pub tenant: Option<String>,
}

impl Token {
    /// Parses a token; `None` for a field fairjob did not write.
    pub fn parse(raw: &str) -> Option<Token> {
        let mut parts = raw.split('|');
        let seq = parts.next()?;
        if seq.is_empty() || !seq.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let queue = keys::decode(parts.next()?)?;
        let tenant = parts.next().map(str::to_owned);
        if parts.next().is_some() {
            return None;
        }
        Some(Token {
            raw: raw.to_owned(),
            queue,
            tenant,
        })
    }

    /// True for a job of a tenant-sharded queue (its record lives in the queue's slot).
    pub fn is_sharded(&self) -> bool {
        self.tenant.is_some()
    }
}

/// A slot held by a running job: released when the job leaves the in-progress record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotHold {
    /// `<Class>:<key>` or `group:<group>:<key>`.
    pub full_key: String,
    /// `<identity>|<token>`.
    pub holder: String,
    /// The declared limit, used while no runtime limit is set.
    pub default_limit: u32,
}

impl SlotHold {
    /// The value kept in the worker's slot record: `<default>|<full key>`.
    pub fn record(&self) -> String {
        format!("{}|{}", self.default_limit, self.full_key)
    }

    /// Reads a slot record value back.
    pub fn from_record(identity: &str, token: &str, value: &str) -> Option<SlotHold> {
        let (default, key) = value.split_once('|')?;
        Some(SlotHold {
            full_key: key.to_owned(),
            holder: format!("{identity}|{token}"),
            default_limit: default.parse().ok()?,
        })
    }
}

/// A promoted job's entry in a promoting record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Src {
    /// The promoting record (`Keys::promoting`).
    pub record: String,
    /// The entry (the payload as it was in `schedule` or `retry`).
    pub member: String,
    /// Where the source is in another cluster slot than the queue (a sharded
    /// queue, a cluster), a member unique to this push (a periodic job's jid)
    /// marked in the queue's slot in the push's own step: a repeat of the push
    /// after a crash before the claim was dropped pushes nothing.
    pub once: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip() {
        let t = Token::parse("12|conv%3Aersions|ac%20me").unwrap();
        assert_eq!(t.queue, "conv:ersions");
        assert_eq!(t.tenant.as_deref(), Some("ac%20me"));
        assert_eq!(Token::parse("7|default").unwrap().tenant, None);
        assert_eq!(
            Token::parse("7|default|").unwrap().tenant.as_deref(),
            Some("")
        );
        assert!(Token::parse("x|default").is_none());
        assert!(Token::parse("garbage").is_none());
    }

    #[test]
    fn slot_records_round_trip() {
        let h = SlotHold {
            full_key: "A:k|x".into(),
            holder: "id|7|q".into(),
            default_limit: 3,
        };
        let back = SlotHold::from_record("id", "7|q", &h.record()).unwrap();
        assert_eq!(back, h);
    }
}
