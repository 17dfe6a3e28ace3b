//! The one encoding of data (tenant id, queue name, limit key, identity) in
//! fairjob's own key names: percent-encoding of every byte outside
//! `[A-Za-z0-9-._~]`. Injective and reversible; the Lua scripts that build a
//! shard key from a tenant use the same rule (`fj_encode` in
//! `broker/scripts/lib/common.lua`).

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};

/// Bytes kept as they are by [`encode`]: ASCII letters, digits and `-._~`.
const KEEP: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Encodes a piece of data for use inside one of fairjob's own keys.
pub fn encode(data: &str) -> String {
    utf8_percent_encode(data, KEEP).to_string()
}

/// Reverses [`encode`].
pub fn decode(encoded: &str) -> Option<String> {
    percent_decode_str(encoded)
        .decode_utf8()
        .ok()
        .map(|s| s.into_owned())
}
