//! Redis Cluster's hash slots, computed on the client: which part of a key
//! Redis hashes and the slot it lands in. Used to group keys that one script
//! touches and to check that a queue's keys share one slot.

/// The part of a key Redis Cluster hashes: the content of the first `{…}` when
/// it is not empty, otherwise the whole key.
pub fn hash_part(key: &str) -> &str {
    if let Some(open) = key.find('{')
        && let Some(len) = key[open + 1..].find('}')
        && len > 0
    {
        return &key[open + 1..open + 1 + len];
    }
    key
}

/// The Redis Cluster hash slot of a key: CRC16 (XMODEM) of its
/// [`hash_part`], modulo 16384.
pub fn cluster_slot(key: &str) -> u16 {
    let mut crc: u16 = 0;
    for &b in hash_part(key).as_bytes() {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_part_follows_redis_cluster() {
        assert_eq!(hash_part("queue:a"), "queue:a");
        assert_eq!(hash_part("x{ab}y{cd}"), "ab");
        assert_eq!(hash_part("x{}y{cd}"), "x{}y{cd}");
        assert_eq!(hash_part("x{ab"), "x{ab");
        assert_eq!(hash_part("x}{ab}"), "ab");
    }

    #[test]
    fn cluster_slots_match_redis() {
        // `CLUSTER KEYSLOT foo` is 12182 (the Redis Cluster specification's example).
        assert_eq!(cluster_slot("foo"), 12182);
        assert_eq!(cluster_slot("queue:default"), 6705);
        assert_eq!(cluster_slot("fairjob:{queue:default}:ready"), 6705);
        assert_eq!(cluster_slot(""), 0);
    }
}
