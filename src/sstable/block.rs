//! Blocks of sorted entries with prefix-compressed keys and restart points.
//!
//! ```text
//! entry    := shared varint | unshared varint | value_len varint | key[shared..] | value
//! block    := entry* | restart u32 LE * num_restarts | num_restarts u32 LE
//! ```
//!
//! Every `restart_interval`-th entry stores its whole key (`shared = 0`) and its offset is
//! listed in the restart array, so a seek binary-searches the restarts and then scans at most
//! one interval.

use crate::encoding::{put_u32, put_varint, u32_at, Reader};
use crate::key;
use bytes::Bytes;
use std::cmp::Ordering;

/// Builds one block.
#[derive(Debug)]
pub(crate) struct BlockBuilder {
    buf: Vec<u8>,
    restarts: Vec<u32>,
    since_restart: usize,
    interval: usize,
    last_key: Vec<u8>,
    entries: usize,
}

impl BlockBuilder {
    pub(crate) fn new(interval: usize) -> Self {
        BlockBuilder {
            buf: Vec::new(),
            restarts: vec![0],
            since_restart: 0,
            interval: interval.max(1),
            last_key: Vec::new(),
            entries: 0,
        }
    }

    /// Adds an entry; keys must arrive in increasing internal-key order.
    pub(crate) fn add(&mut self, key: &[u8], value: &[u8]) {
        let shared = if self.since_restart >= self.interval {
            self.restarts.push(self.buf.len() as u32);
            self.since_restart = 0;
            0
        } else {
            self.last_key
                .iter()
                .zip(key)
                .take_while(|(a, b)| a == b)
                .count()
        };
        put_varint(&mut self.buf, shared as u64);
        put_varint(&mut self.buf, (key.len() - shared) as u64);
        put_varint(&mut self.buf, value.len() as u64);
        self.buf.extend_from_slice(&key[shared..]);
        self.buf.extend_from_slice(value);
        self.last_key.clear();
        self.last_key.extend_from_slice(key);
        self.since_restart += 1;
        self.entries += 1;
    }

    /// Bytes the finished block would take.
    pub(crate) fn size_estimate(&self) -> usize {
        self.buf.len() + self.restarts.len() * 4 + 4
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.entries == 0
    }

    /// The last key added.
    pub(crate) fn last_key(&self) -> &[u8] {
        &self.last_key
    }

    /// Appends the finished block to `out` and resets the builder.
    pub(crate) fn finish_into(&mut self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.buf);
        for &r in &self.restarts {
            put_u32(out, r);
        }
        put_u32(out, self.restarts.len() as u32);
        self.buf.clear();
        self.restarts.clear();
        self.restarts.push(0);
        self.since_restart = 0;
        self.last_key.clear();
        self.entries = 0;
    }
}

/// A parsed block: its contents and where the restart array starts.
#[derive(Clone, Debug)]
pub(crate) struct Block {
    data: Bytes,
    entries_end: usize,
    num_restarts: usize,
}

/// One decoded entry: the full key and the value (a slice of the block).
pub(crate) type BlockEntry = (Bytes, Bytes);

struct RawEntry {
    shared: usize,
    key_delta: std::ops::Range<usize>,
    value: std::ops::Range<usize>,
    next: usize,
}

impl Block {
    /// Parses block contents; `None` if the restart array is malformed.
    pub(crate) fn parse(data: Bytes) -> Option<Block> {
        let n = data.len();
        let num_restarts = u32_at(&data, n.checked_sub(4)?)? as usize;
        let restarts_len = num_restarts.checked_mul(4)?.checked_add(4)?;
        let entries_end = n.checked_sub(restarts_len)?;
        if num_restarts == 0 {
            return None;
        }
        let block = Block {
            data,
            entries_end,
            num_restarts,
        };
        // Every restart offset must point inside the entries area.
        for i in 0..num_restarts {
            let r = block.restart(i)?;
            if r > entries_end || (r == entries_end && entries_end != 0) {
                return None;
            }
        }
        Some(block)
    }

    /// Bytes of the block's contents.
    pub(crate) fn len(&self) -> usize {
        self.data.len()
    }

    fn restart(&self, i: usize) -> Option<usize> {
        u32_at(&self.data, self.entries_end + i * 4).map(|r| r as usize)
    }

    fn raw_entry(&self, pos: usize) -> Option<RawEntry> {
        let mut r = Reader::new(self.data.get(pos..self.entries_end)?);
        let shared = r.varint_len(key::TRAILER_LEN + crate::batch::MAX_KEY_SIZE)?;
        let unshared = r.varint_len(self.entries_end)?;
        let vlen = r.varint_len(self.entries_end)?;
        let start = pos + r.pos();
        let kend = start.checked_add(unshared)?;
        let vend = kend.checked_add(vlen)?;
        if vend > self.entries_end {
            return None;
        }
        Some(RawEntry {
            shared,
            key_delta: start..kend,
            value: kend..vend,
            next: vend,
        })
    }

    /// The full key of the entry at a restart point.
    fn restart_key(&self, i: usize) -> Option<&[u8]> {
        let e = self.raw_entry(self.restart(i)?)?;
        (e.shared == 0).then(|| &self.data[e.key_delta])
    }

    /// Decodes every entry in order; `None` if any is malformed or the keys do not strictly
    /// increase (in internal-key order): a block out of order would answer seeks wrongly.
    pub(crate) fn entries(&self) -> Option<Vec<BlockEntry>> {
        let mut out: Vec<BlockEntry> = Vec::new();
        let mut pos = 0;
        let mut key: Vec<u8> = Vec::new();
        while pos < self.entries_end {
            let e = self.raw_entry(pos)?;
            if e.shared > key.len() {
                return None;
            }
            key.truncate(e.shared);
            key.extend_from_slice(&self.data[e.key_delta.clone()]);
            if out
                .last()
                .is_some_and(|(prev, _)| !key::cmp_encoded(prev, &key).is_lt())
            {
                return None;
            }
            out.push((Bytes::copy_from_slice(&key), self.data.slice(e.value)));
            pos = e.next;
        }
        Some(out)
    }

    /// The first entry whose key is at or after (`user_key`, `trailer`) in internal order:
    /// `Ok(None)` if every key is before it, `Err(())` if the block is malformed.
    pub(crate) fn seek(&self, user_key: &[u8], trailer: u64) -> Result<Option<BlockEntry>, ()> {
        let cmp = |k: &[u8]| -> Result<Ordering, ()> {
            let (u, t) = key::decode(k).ok_or(())?;
            Ok(key::cmp_parts(u, t, user_key, trailer))
        };
        // Largest restart whose key is before the target.
        let (mut lo, mut hi) = (0usize, self.num_restarts);
        while hi - lo > 1 {
            let mid = (lo + hi) / 2;
            let k = self.restart_key(mid).ok_or(())?;
            if cmp(k)? == Ordering::Less {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        let mut pos = self.restart(lo).ok_or(())?;
        let mut key: Vec<u8> = Vec::new();
        let mut prev: Vec<u8> = Vec::new();
        while pos < self.entries_end {
            let e = self.raw_entry(pos).ok_or(())?;
            if e.shared > key.len() {
                return Err(());
            }
            key.truncate(e.shared);
            key.extend_from_slice(&self.data[e.key_delta.clone()]);
            // The keys this seek walks past must increase, or the answer could be wrong.
            if !prev.is_empty() && !key::cmp_encoded(&prev, &key).is_lt() {
                return Err(());
            }
            if cmp(&key)? != Ordering::Less {
                return Ok(Some((Bytes::from(key), self.data.slice(e.value))));
            }
            prev.clone_from(&key);
            pos = e.next;
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::{encode, lookup_trailer, trailer, ValueKind};
    use proptest::prelude::*;

    fn build(keys: &[(&[u8], u64)], interval: usize) -> Block {
        let mut b = BlockBuilder::new(interval);
        for (i, (k, seq)) in keys.iter().enumerate() {
            b.add(
                &encode(k, trailer(*seq, ValueKind::Put)),
                format!("v{i}").as_bytes(),
            );
        }
        let mut out = Vec::new();
        b.finish_into(&mut out);
        Block::parse(Bytes::from(out)).unwrap()
    }

    #[test]
    fn seek_and_entries() {
        let keys: Vec<(&[u8], u64)> = vec![
            (b"apple", 5),
            (b"apple", 3),
            (b"applesauce", 9),
            (b"banana", 1),
            (b"cherry", 2),
        ];
        for interval in [1, 2, 16] {
            let block = build(&keys, interval);
            let all = block.entries().unwrap();
            assert_eq!(all.len(), 5);
            assert_eq!(key::user_key(&all[2].0), b"applesauce");
            assert_eq!(&all[4].1[..], b"v4");
            let (k, v) = block.seek(b"apple", lookup_trailer(4)).unwrap().unwrap();
            assert_eq!(key::decode(&k).unwrap().1 >> 8, 3);
            assert_eq!(&v[..], b"v1");
            let (k, _) = block.seek(b"b", lookup_trailer(100)).unwrap().unwrap();
            assert_eq!(key::user_key(&k), b"banana");
            assert!(block.seek(b"zebra", lookup_trailer(100)).unwrap().is_none());
            let (k, _) = block.seek(b"", lookup_trailer(0)).unwrap().unwrap();
            assert_eq!(key::user_key(&k), b"apple");
        }
    }

    #[test]
    fn malformed_blocks_are_rejected() {
        assert!(Block::parse(Bytes::new()).is_none());
        assert!(Block::parse(Bytes::from_static(&[0, 0, 0, 0])).is_none());
        assert!(Block::parse(Bytes::from_static(&[9, 0, 0, 0, 1, 0, 0, 0])).is_none());
        // Entry claiming a value longer than the block.
        let mut raw = vec![0u8, 9, 100];
        raw.extend_from_slice(b"key\x01\x00\x00\x00\x00\x00\x00\x00");
        raw.extend_from_slice(&0u32.to_le_bytes());
        raw.extend_from_slice(&1u32.to_le_bytes());
        let b = Block::parse(Bytes::from(raw)).unwrap();
        assert!(b.entries().is_none());
        assert!(b.seek(b"a", 0).is_err());
    }

    #[test]
    fn keys_out_of_order_are_rejected() {
        let put = |k: &[u8], seq| encode(k, trailer(seq, ValueKind::Put));
        for keys in [
            vec![put(b"b", 1), put(b"a", 1)],
            vec![put(b"a", 1), put(b"a", 1)],
            vec![put(b"a", 1), put(b"a", 2)], // newer versions come first
        ] {
            // One restart interval, so that a seek walks the keys in stored order.
            let mut b = BlockBuilder::new(16);
            for k in &keys {
                b.add(k, b"v");
            }
            let mut out = Vec::new();
            b.finish_into(&mut out);
            let block = Block::parse(Bytes::from(out)).unwrap();
            assert!(block.entries().is_none(), "{keys:?}");
            assert!(block.seek(b"z", lookup_trailer(9)).is_err(), "{keys:?}");
        }
    }

    proptest! {
        #[test]
        fn parse_and_seek_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200), k in proptest::collection::vec(any::<u8>(), 0..8)) {
            if let Some(b) = Block::parse(Bytes::from(bytes)) {
                let _ = b.entries();
                let _ = b.seek(&k, lookup_trailer(7));
            }
        }

        #[test]
        fn seek_finds_first_at_or_after(mut keys in proptest::collection::btree_set(proptest::collection::vec(any::<u8>(), 0..6), 1..60), probe in proptest::collection::vec(any::<u8>(), 0..6), interval in 1usize..20) {
            let keys: Vec<Vec<u8>> = std::mem::take(&mut keys).into_iter().collect();
            let refs: Vec<(&[u8], u64)> = keys.iter().map(|k| (k.as_slice(), 1)).collect();
            let block = build(&refs, interval);
            let got = block.seek(&probe, lookup_trailer(5)).unwrap().map(|(k, _)| key::user_key(&k).to_vec());
            let want = keys.iter().find(|k| k.as_slice() >= probe.as_slice()).cloned();
            prop_assert_eq!(got, want);
        }
    }
}
