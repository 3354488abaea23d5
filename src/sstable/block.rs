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
use std::sync::Arc;

/// The most bytes of decoded keys a block built by any siltdb holds per byte of the block: a
/// key is at most the bytes from its restart point to its own end (its shared prefix comes
/// from the keys of that run), so each run of `k` entries decodes into at most `k` times its
/// bytes, and no writer used more than 16 entries a restart (4 since 2026-12-02).
pub(crate) const KEY_BYTES_PER_BLOCK_BYTE: usize = 16;

/// Builds one block.
#[derive(Debug)]
pub(crate) struct BlockBuilder {
    buf: Vec<u8>,
    restarts: Vec<u32>,
    since_restart: usize,
    interval: usize,
    last_key: Vec<u8>,
    entries: usize,
    /// The largest offset a restart point may have: `u32::MAX` (tests set less).
    restart_limit: usize,
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
            restart_limit: u32::MAX as usize,
        }
    }

    /// Adds an entry; keys must arrive in increasing internal-key order. An entry that
    /// starts past 4 GiB (only an index block of a table of many gigabytes with long keys
    /// gets there) is never a restart point, as a restart's offset is a `u32`: from there
    /// on each key is prefix-compressed against the one before, as between the restarts of
    /// a data block, and a seek scans from the last restart.
    pub(crate) fn add(&mut self, key: &[u8], value: &[u8]) {
        let restart = self.since_restart >= self.interval && self.buf.len() <= self.restart_limit;
        let shared = if restart {
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
pub(crate) struct Block(Arc<Parsed>);

/// The parsed form of a block, shared by the block cache and every value handed out of it.
#[derive(Debug)]
pub(crate) struct Parsed {
    data: Bytes,
    entries_end: usize,
    num_restarts: usize,
    /// The first restart offsets, copied next to the fields above: a block-cache hit brings
    /// them into the CPU cache with the reference count it takes, so a seek does not wait on
    /// a second memory load for the restart array at the block's end.
    inline_restarts: [u32; INLINE_RESTARTS],
    /// The first 8 bytes of those restarts' user keys (zero-padded, big-endian), so that the
    /// binary search over the restarts rarely loads a key from the block; valid only if
    /// `prefixes_known`.
    restart_prefixes: [u64; INLINE_RESTARTS],
    prefixes_known: bool,
    /// Every entry was decoded and the keys strictly increase (checked once, when the block
    /// was parsed for the block cache), so a seek need not check the order again.
    ordered: bool,
}

/// Restart offsets kept in [`Parsed::inline_restarts`] (a 4 KiB block of 100-byte values,
/// with a restart every 4th entry, has nine or ten).
const INLINE_RESTARTS: usize = 12;

impl std::ops::Deref for Block {
    type Target = Parsed;
    fn deref(&self) -> &Parsed {
        &self.0
    }
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
        Parsed::new(data).map(|p| Block(Arc::new(p)))
    }

    /// [`parse`](Self::parse), then decodes every entry and checks that the keys strictly
    /// increase: what a block must pass before it is cached, so that the seeks of every later
    /// hit can skip the order check. `None` if anything is malformed.
    pub(crate) fn parse_checked(data: Bytes) -> Option<Block> {
        let mut parsed = Parsed::new(data)?;
        parsed.ordered = SEEK_BUFFERS.with(|bufs| {
            let (key, prev) = &mut *bufs.borrow_mut();
            parsed.check_order(key, prev)
        });
        parsed.ordered.then(|| Block(Arc::new(parsed)))
    }

    /// The value of the first entry at or after (`user_key`, `trailer`), sharing the block's
    /// memory (not copied), with that entry's user key and trailer, and whether the entry
    /// before it holds `user_key`: what a point get needs. `Err(())` if the block is
    /// malformed.
    pub(crate) fn seek_point(&self, user_key: &[u8], trailer: u64) -> Result<PointSeek, ()> {
        SEEK_BUFFERS.with(|bufs| {
            let (key, prev) = &mut *bufs.borrow_mut();
            let (found, before) = self.seek_into(user_key, trailer, key, prev)?;
            let Some(value) = found else {
                return Ok(PointSeek {
                    entry: None,
                    before_is_same_user_key: before,
                });
            };
            let (u, t) = key::decode(key).ok_or(())?;
            let entry = Some(PointEntry {
                same_user_key: u == user_key,
                trailer: t,
                // The value owns a reference to the parsed block, which this get already
                // holds: no second reference count on the block's bytes is touched.
                value: Bytes::from_owner(ValueInBlock {
                    block: self.clone(),
                    range: value,
                }),
            });
            Ok(PointSeek {
                entry,
                before_is_same_user_key: before,
            })
        })
    }
}

/// A value inside a block: keeps the block alive for as long as the value is.
struct ValueInBlock {
    block: Block,
    range: std::ops::Range<usize>,
}

impl AsRef<[u8]> for ValueInBlock {
    fn as_ref(&self) -> &[u8] {
        &self.block.data[self.range.clone()]
    }
}

impl Parsed {
    /// Parses block contents; `None` if the restart array is malformed.
    fn new(data: Bytes) -> Option<Parsed> {
        let n = data.len();
        let num_restarts = u32_at(&data, n.checked_sub(4)?)? as usize;
        let restarts_len = num_restarts.checked_mul(4)?.checked_add(4)?;
        let entries_end = n.checked_sub(restarts_len)?;
        if num_restarts == 0 {
            return None;
        }
        let mut block = Parsed {
            data,
            entries_end,
            num_restarts,
            inline_restarts: [0; INLINE_RESTARTS],
            restart_prefixes: [0; INLINE_RESTARTS],
            prefixes_known: false,
            ordered: false,
        };
        // Every restart offset must point inside the entries area, the first at its start
        // (a seek never compares the entries before the first restart point).
        for i in 0..num_restarts {
            let r = u32_at(&block.data, entries_end + i * 4)?;
            if r as usize > entries_end
                || (r as usize == entries_end && entries_end != 0)
                || (i == 0 && r != 0)
            {
                return None;
            }
            if let Some(slot) = block.inline_restarts.get_mut(i) {
                *slot = r;
            }
        }
        block.prefixes_known = true;
        for i in 0..num_restarts.min(INLINE_RESTARTS) {
            match block.restart_key(i).and_then(key::decode) {
                Some((user_key, _)) => block.restart_prefixes[i] = key::key_prefix(user_key),
                None => {
                    block.prefixes_known = false;
                    break;
                }
            }
        }
        Some(block)
    }

    /// Bytes of the block's contents.
    pub(crate) fn len(&self) -> usize {
        self.data.len()
    }

    fn restart(&self, i: usize) -> Option<usize> {
        if let Some(&r) = self
            .inline_restarts
            .get(i)
            .filter(|_| i < self.num_restarts)
        {
            return Some(r as usize);
        }
        u32_at(&self.data, self.entries_end + i * 4).map(|r| r as usize)
    }

    fn raw_entry(&self, pos: usize) -> Option<RawEntry> {
        let mut r = Reader::new(self.data.get(pos..self.entries_end)?);
        let max_key = key::TRAILER_LEN + crate::batch::MAX_KEY_SIZE;
        let shared = r.varint_len(max_key)?;
        let unshared = r.varint_len(self.entries_end)?;
        // No key is longer than the longest a batch accepts: a longer one would be read, but
        // written again by a compaction with a shared prefix over the limit above, which
        // would make its output unreadable.
        if shared.checked_add(unshared)? > max_key {
            return None;
        }
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

    /// End of the entries area (where the restart array starts).
    pub(crate) fn entries_end(&self) -> usize {
        self.entries_end
    }

    /// True if the block was fully decoded and found in order when it was parsed for the
    /// block cache.
    pub(crate) fn is_ordered(&self) -> bool {
        self.ordered
    }

    /// Decodes the entry at `pos`: `key` must hold the previous entry's key (empty at a
    /// restart) and is turned into this entry's key. Returns the value's position and where
    /// the next entry starts; `None` if the entry is malformed.
    pub(crate) fn entry_at(
        &self,
        pos: usize,
        key: &mut Vec<u8>,
    ) -> Option<(std::ops::Range<usize>, usize)> {
        let e = self.raw_entry(pos)?;
        if e.shared > key.len() {
            return None;
        }
        key.truncate(e.shared);
        key.extend_from_slice(&self.data[e.key_delta]);
        Some((e.value, e.next))
    }

    /// A slice of the block's bytes (shared, not copied).
    pub(crate) fn slice(&self, range: std::ops::Range<usize>) -> Bytes {
        self.data.slice(range)
    }

    /// Decodes every entry in order; `None` if any is malformed or the keys do not strictly
    /// increase (in internal-key order): a block out of order would answer seeks wrongly.
    /// Also `None` if the keys decode into more than [`KEY_BYTES_PER_BLOCK_BYTE`] times the
    /// block's size, which no writer's block does: a crafted one could otherwise decode a
    /// megabyte into gigabytes (each key sharing 64 KiB with the one before).
    pub(crate) fn entries(&self) -> Option<Vec<BlockEntry>> {
        self.entries_within(self.data.len().saturating_mul(KEY_BYTES_PER_BLOCK_BYTE))
    }

    /// [`entries`](Self::entries), and `None` as soon as the decoded keys hold more than
    /// `key_budget` bytes: prefix compression lets a small block decode into keys thousands
    /// of times its size, so a caller that knows a bound for them (the index: each key is at
    /// most its data block's size) checks it before it allocates them.
    pub(crate) fn entries_within(&self, key_budget: usize) -> Option<Vec<BlockEntry>> {
        let mut out: Vec<BlockEntry> = Vec::new();
        let mut pos = 0;
        let mut key: Vec<u8> = Vec::new();
        let mut budget = key_budget;
        while pos < self.entries_end {
            let (value, next) = self.entry_at(pos, &mut key)?;
            budget = budget.checked_sub(key.len())?;
            if out
                .last()
                .is_some_and(|(prev, _)| !key::cmp_encoded(prev, &key).is_lt())
            {
                return None;
            }
            out.push((Bytes::copy_from_slice(&key), self.data.slice(value)));
            pos = next;
        }
        Some(out)
    }

    /// The first entry whose key is at or after (`user_key`, `trailer`) in internal order:
    /// `Ok(None)` if every key is before it, `Err(())` if the block is malformed.
    #[cfg(any(test, fuzzing))]
    pub(crate) fn seek(&self, user_key: &[u8], trailer: u64) -> Result<Option<BlockEntry>, ()> {
        let (mut key, mut prev) = (Vec::new(), Vec::new());
        Ok(self
            .seek_into(user_key, trailer, &mut key, &mut prev)?
            .0
            .map(|v| (Bytes::from(key), self.data.slice(v))))
    }

    /// Decodes every entry (without allocating) and checks that the keys strictly increase
    /// and that the restart points, in order, each start an entry.
    fn check_order(&self, key: &mut Vec<u8>, prev: &mut Vec<u8>) -> bool {
        key.clear();
        prev.clear();
        let mut pos = 0;
        // The restart points, in order, each at the start of an entry.
        let mut restart = 0;
        while pos < self.entries_end {
            if self.restart(restart) == Some(pos) {
                restart += 1;
            }
            let Some((_, next)) = self.entry_at(pos, key) else {
                return false;
            };
            if key::decode(key).is_none() || (pos > 0 && !key::cmp_encoded(prev, key).is_lt()) {
                return false;
            }
            prev.clone_from(key);
            pos = next;
        }
        self.entries_end == 0 || restart == self.num_restarts
    }

    /// The seek itself: leaves the found entry's full key in `key` and returns its value's
    /// position (`None` past the last entry), with whether the entry just before that
    /// position holds `user_key` too (`None` if the position is the block's first). `key`
    /// and `prev` are scratch buffers, reused across seeks so that walking a block allocates
    /// nothing.
    fn seek_into(
        &self,
        user_key: &[u8],
        trailer: u64,
        key: &mut Vec<u8>,
        prev: &mut Vec<u8>,
    ) -> SeekResult {
        let cmp = |k: &[u8]| -> Result<Ordering, ()> {
            let (u, t) = key::decode(k).ok_or(())?;
            Ok(key::cmp_parts(u, t, user_key, trailer))
        };
        // Largest restart whose key is before the target. The inline key prefixes decide
        // most steps without loading the restart key from the block.
        let target = key::key_prefix(user_key);
        let (mut lo, mut hi) = (0usize, self.num_restarts);
        while hi - lo > 1 {
            let mid = (lo + hi) / 2;
            let known = match self.restart_prefixes.get(mid) {
                Some(p) if self.prefixes_known && *p != target => Some(p.cmp(&target)),
                _ => None,
            };
            let ord = match known {
                Some(o) => o,
                None => cmp(self.restart_key(mid).ok_or(())?)?,
            };
            if ord == Ordering::Less {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        let mut pos = self.restart(lo).ok_or(())?;
        // Touch every cache line of the restart interval up front: the loads are independent,
        // so a block that is cold in the CPU cache (a block-cache hit) costs about one memory
        // latency here instead of one per entry walked.
        let end = if hi < self.num_restarts {
            self.restart(hi).unwrap_or(self.entries_end)
        } else {
            self.entries_end
        };
        let mut touched = 0u8;
        for p in (pos..end).step_by(64) {
            touched ^= self.data[p];
        }
        std::hint::black_box(touched);
        key.clear();
        prev.clear();
        // Whether the last entry walked past holds `user_key`: a newer version of it.
        let mut after_same = None;
        while pos < self.entries_end {
            let (value, next) = self.entry_at(pos, key).ok_or(())?;
            // The keys this seek walks past must increase, or the answer could be wrong.
            if !self.ordered && !prev.is_empty() && !key::cmp_encoded(prev, key).is_lt() {
                return Err(());
            }
            let (u, t) = key::decode(key).ok_or(())?;
            if key::cmp_parts(u, t, user_key, trailer) != Ordering::Less {
                return Ok((Some(value), after_same));
            }
            after_same = Some(u == user_key);
            if !self.ordered {
                prev.clone_from(key);
            }
            pos = next;
        }
        Ok((None, after_same))
    }
}

/// What [`Block::seek_into`] returns: the found entry's value position, and whether the entry
/// before it holds the user key sought.
type SeekResult = Result<(Option<std::ops::Range<usize>>, Option<bool>), ()>;

/// What [`Block::seek_point`] found.
pub(crate) struct PointSeek {
    /// The first entry at or after the key sought; `None` if every entry is before it.
    pub(crate) entry: Option<PointEntry>,
    /// Whether the entry just before that position (the block's last entry if `entry` is
    /// `None`) holds the user key sought, which makes it a version newer than the read's;
    /// `None` if the position is the block's first.
    pub(crate) before_is_same_user_key: Option<bool>,
}

/// The entry [`Block::seek_point`] found.
pub(crate) struct PointEntry {
    /// The entry's user key is the one looked up.
    pub(crate) same_user_key: bool,
    /// The entry's trailer (sequence number and kind).
    pub(crate) trailer: u64,
    /// The entry's value, sharing the block's memory.
    pub(crate) value: Bytes,
}

thread_local! {
    /// Scratch key buffers of [`Block::seek_point`], one pair per thread.
    static SEEK_BUFFERS: std::cell::RefCell<(Vec<u8>, Vec<u8>)> =
        const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
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
    fn entries_past_the_last_offset_a_restart_can_hold_are_prefix_compressed_and_read_back() {
        let mut b = BlockBuilder::new(1);
        b.restart_limit = 200;
        let keys: Vec<Vec<u8>> = (0..40u8)
            .map(|i| key::encode(&[b'k', b'e', b'y', i], key::trailer(1, ValueKind::Put)))
            .collect();
        for k in &keys {
            b.add(k, b"value");
        }
        let mut out = Vec::new();
        b.finish_into(&mut out);
        let block = Block::parse_checked(Bytes::from(out)).unwrap();
        // Every entry up to offset 200 starts a restart, none after; all read back in order.
        let restarts = (0..).take_while(|&i| block.restart(i).is_some()).count();
        assert!(restarts > 1 && restarts < keys.len(), "{restarts} restarts");
        let read: Vec<Bytes> = block
            .entries_within(usize::MAX)
            .unwrap()
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(read, keys);
        let last = keys.last().unwrap();
        let (found, _) = block
            .seek(&last[..4], key::trailer(1, ValueKind::Put))
            .unwrap()
            .unwrap();
        assert_eq!(&found[..], &last[..]);
    }

    #[test]
    fn a_block_whose_keys_decode_past_sixteen_times_its_size_is_refused() {
        // 100 keys of 60,001 bytes that differ in their last byte, all in one restart run
        // (no writer makes runs this long): ~60 KB of block, 6 MB of keys.
        let long = |interval: usize, n: u8| {
            let mut b = BlockBuilder::new(interval);
            for i in 0..n {
                let mut u = vec![b'k'; 60_000];
                u.push(i);
                b.add(&key::encode(&u, key::trailer(1, ValueKind::Put)), b"v");
            }
            let mut out = Vec::new();
            b.finish_into(&mut out);
            Block::parse(Bytes::from(out)).unwrap()
        };
        let forged = long(1000, 100);
        assert!(forged.entries_within(usize::MAX).is_some());
        assert!(forged.entries().is_none());
        // The same keys in runs of 16 (the longest any writer used) decode within the bound.
        assert_eq!(long(16, 100).entries().unwrap().len(), 100);
    }

    #[test]
    fn a_key_longer_than_any_batch_accepts_is_malformed() {
        let longest = key::TRAILER_LEN + crate::batch::MAX_KEY_SIZE;
        for (len, ok) in [(longest, true), (longest + 1, false)] {
            let mut b = BlockBuilder::new(4);
            b.add(&vec![b'k'; len], b"v");
            let mut out = Vec::new();
            b.finish_into(&mut out);
            let block = Block::parse(Bytes::from(out)).unwrap();
            assert_eq!(block.entries().is_some(), ok, "{len}");
        }
    }

    #[test]
    fn entries_within_stops_at_the_key_budget() {
        let mut b = BlockBuilder::new(16);
        let keys: Vec<Vec<u8>> = (0..10u8)
            .map(|i| {
                let mut u = vec![b'k'; 1000];
                u.push(i);
                key::encode(&u, key::trailer(1, ValueKind::Put))
            })
            .collect();
        for k in &keys {
            b.add(k, b"v");
        }
        let mut raw = Vec::new();
        b.finish_into(&mut raw);
        let block = Block::parse(Bytes::from(raw)).unwrap();
        let total: usize = keys.iter().map(Vec::len).sum();
        assert!(block.len() < total / 5, "prefix compression");
        assert_eq!(block.entries_within(total).unwrap().len(), 10);
        assert!(block.entries_within(total - 1).is_none());
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
    fn restart_arrays_a_seek_would_misread_are_rejected() {
        // Eight entries, a restart point every fourth: restarts at entries 0 and 4.
        let names: Vec<String> = (0..8).map(|i| format!("key{i}")).collect();
        let keys: Vec<(&[u8], u64)> = names.iter().map(|k| (k.as_bytes(), 1)).collect();
        let good = build(&keys, 4);
        let raw = good.0.data.clone();
        let n = raw.len();
        let restarts_at = n - 4 - 2 * 4;
        let second = u32::from_le_bytes(raw[restarts_at + 4..restarts_at + 8].try_into().unwrap());
        let forged = |first: u32, second: u32| {
            let mut b = raw.to_vec();
            b[restarts_at..restarts_at + 4].copy_from_slice(&first.to_le_bytes());
            b[restarts_at + 4..restarts_at + 8].copy_from_slice(&second.to_le_bytes());
            Bytes::from(b)
        };
        assert!(Block::parse_checked(forged(0, second)).is_some());
        // The first restart moved to entry 4: a seek for keys 0..=3 would start there and
        // answer "absent". Refused by every parse.
        assert!(Block::parse(forged(second, second)).is_none());
        assert!(Block::parse_checked(forged(second, second)).is_none());
        // The second restart inside an entry, or repeating the first: a seek could decode
        // made-up entries from it. Refused before the block is cached, where the whole block
        // is decoded anyway (a get without a block cache checks only the first restart).
        assert!(Block::parse_checked(forged(0, second + 1)).is_none());
        assert!(Block::parse_checked(forged(0, 0)).is_none());
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
            // Never admitted to the block cache.
            assert!(
                Block::parse_checked(block.data.clone()).is_none(),
                "{keys:?}"
            );
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
            let checked = Block::parse_checked(block.data.clone()).unwrap();
            prop_assert!(checked.ordered && !block.ordered);
            let want = keys.iter().find(|k| k.as_slice() >= probe.as_slice()).cloned();
            for b in [&block, &checked] {
                let got = b.seek(&probe, lookup_trailer(5)).unwrap().map(|(k, _)| key::user_key(&k).to_vec());
                prop_assert_eq!(&got, &want);
                let point = b.seek_point(&probe, lookup_trailer(5)).unwrap();
                prop_assert_eq!(point.entry.is_some(), want.is_some());
                // Every key has one version: the entry before is never the key sought.
                prop_assert!(point.before_is_same_user_key != Some(true));
                if let (Some(p), Some(w)) = (point.entry, &want) {
                    prop_assert_eq!(p.same_user_key, w == &probe);
                    let i = keys.iter().position(|k| k == w).unwrap();
                    let v = format!("v{i}");
                    prop_assert_eq!(&p.value[..], v.as_bytes());
                }
            }
        }
    }
}
