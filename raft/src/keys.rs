//! Where siltdb-raft keeps what inside a node's one siltdb database.
//!
//! | key | value |
//! |---|---|
//! | `l` + index (8 bytes, big-endian) | a log entry (JSON) |
//! | `m/committed` | the committed log id (JSON) |
//! | `m/purged` | the last purged log id (JSON) |
//! | `m/vote` | the vote (JSON) |
//! | `s/applied` | the state machine's last applied log id and membership (JSON) |
//! | `d` + user key | a replicated value |
//!
//! Big-endian indexes sort in log order, so the log is one contiguous key range: a read of
//! entries is one range scan, and truncating or purging it is one range delete. The data is
//! one range too, so a snapshot is a scan of it and installing one starts with one range
//! delete. The prefixes are distinct single bytes: no range overlaps another.

/// The first byte of every log entry's key.
pub const LOG_PREFIX: u8 = b'l';
/// The key of the vote.
pub const VOTE: &[u8] = b"m/vote";
/// The key of the last purged log id.
pub const PURGED: &[u8] = b"m/purged";
/// The key of the committed log id.
pub const COMMITTED: &[u8] = b"m/committed";
/// The key of the state machine's last applied log id and membership.
pub const APPLIED: &[u8] = b"s/applied";
/// The first byte of every replicated data key.
pub const DATA_PREFIX: u8 = b'd';

/// The key of the log entry at `index`.
pub fn log_key(index: u64) -> [u8; 9] {
    let mut k = [0u8; 9];
    k[0] = LOG_PREFIX;
    k[1..].copy_from_slice(&index.to_be_bytes());
    k
}

/// The end (exclusive) of the whole log's key range: the smallest key after every `l` key.
pub fn log_end() -> [u8; 1] {
    [LOG_PREFIX + 1]
}

/// The log index a log key holds, or `None` if `key` is not a log key.
pub fn log_index(key: &[u8]) -> Option<u64> {
    if key.len() != 9 || key[0] != LOG_PREFIX {
        return None;
    }
    let mut b = [0u8; 8];
    b.copy_from_slice(&key[1..]);
    Some(u64::from_be_bytes(b))
}

/// The database key of the user key `key`.
pub fn data_key(key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 1);
    k.push(DATA_PREFIX);
    k.extend_from_slice(key);
    k
}

/// The end (exclusive) of the data's key range.
pub fn data_end() -> [u8; 1] {
    [DATA_PREFIX + 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_keys_sort_in_index_order_and_round_trip() {
        let idx = [0u64, 1, 255, 256, 1 << 40, u64::MAX];
        for w in idx.windows(2) {
            assert!(log_key(w[0]) < log_key(w[1]));
        }
        for i in idx {
            assert_eq!(log_index(&log_key(i)), Some(i));
            assert!(log_key(i).as_slice() < log_end().as_slice());
        }
        assert_eq!(log_index(b"m/vote"), None);
        assert_eq!(log_index(&data_key(b"12345678")), None);
    }

    #[test]
    fn prefixes_do_not_overlap() {
        let data = data_key(b"\xff\xff");
        assert!(data.as_slice() < data_end().as_slice());
        assert!(data_end().as_slice() <= log_key(0).as_slice());
        assert!(log_end().as_slice() <= VOTE);
        assert!(COMMITTED < APPLIED && PURGED < APPLIED && VOTE < APPLIED);
    }
}
