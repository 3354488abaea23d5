//! Walking a table's entries in a key range, from both ends, one data block at a time, each
//! block decoded entry by entry as the walk needs it.

use super::block::Block;
use super::reader::{CacheUse, ReadCost, Readahead, TableReader};
use crate::error::{Error, Result};
use crate::iter::{ChunkSource, Chunked, Entry, InternalIter, KeyRange, RangeFilter};
use crate::key::{self, SeqNo};
use bytes::{Bytes, BytesMut};
use std::collections::VecDeque;
use std::ops::Bound;
use std::sync::Arc;

/// Loads data blocks of one table as chunks: through the block cache (scans), or read ahead
/// in large pieces around it (compaction).
pub(crate) struct TableBlocks {
    table: Arc<TableReader>,
    cache: CacheUse,
    ahead: Readahead,
    /// The range's lower bound (a user key) and the block it falls in: the front of that
    /// block skips, without copying them out, the entries below it.
    lo: Option<(Bytes, usize)>,
}

impl ChunkSource for TableBlocks {
    type Chunk = BlockCursor;

    fn skippable(&self, i: usize, below: &[u8], seq: SeqNo) -> bool {
        // The index key is the block's last key or a separator above it.
        self.table.properties().max_seq < seq
            && self
                .table
                .index()
                .get(i)
                .is_some_and(|e| key::user_key(&e.last_key) < below)
    }

    fn skippable_back(&self, i: usize, from: &[u8], seq: SeqNo) -> bool {
        // Every key of block `i` is at or above the previous block's index key (its last key,
        // or a separator below this block's first key), and those of block 0 at or above the
        // table's smallest key.
        let lowest = match i.checked_sub(1) {
            None => Some(self.table.properties().smallest.as_slice()),
            Some(p) => self.table.index().get(p).map(|e| &e.last_key[..]),
        };
        self.table.properties().max_seq < seq
            && i < self.table.index().len()
            && lowest
                .and_then(key::decode)
                .is_some_and(|(user_key, _)| user_key >= from)
    }

    fn load(&mut self, i: usize) -> Result<BlockCursor> {
        let mut cost = ReadCost::default();
        let block = match self.cache {
            CacheUse::Fill => self.table.data_block(i, &mut cost)?,
            CacheUse::Bypass => self.table.data_block_ahead(i, &mut self.ahead, &mut cost)?,
        };
        Ok(BlockCursor {
            block,
            table: self.table.clone(),
            i,
            pos: 0,
            key: Vec::new(),
            prev: Vec::new(),
            decoded: 0,
            rest: None,
            finished: false,
            skip_below: self
                .lo
                .as_ref()
                .filter(|(_, b)| *b == i)
                .map(|(k, _)| k.clone()),
            keys: BytesMut::new(),
        })
    }
}

/// The entries of one data block, decoded one at a time as the front asks for them (a scan
/// that stops after a few entries decodes and copies only those). The back end, when asked,
/// decodes what is left at once. Checks as it goes what decoding the whole block would check:
/// every entry well formed, keys strictly increasing, the first key after the previous
/// block's index key (or the table's smallest key), every key at most this block's index key,
/// and the last block ending exactly at it.
pub(crate) struct BlockCursor {
    block: Block,
    table: Arc<TableReader>,
    i: usize,
    /// Where the next entry from the front starts.
    pos: usize,
    /// The key of the entry last decoded, and of the one before it.
    key: Vec<u8>,
    prev: Vec<u8>,
    decoded: usize,
    /// Once the back end is used: the entries not yet taken, decoded.
    rest: Option<VecDeque<Result<Entry>>>,
    finished: bool,
    /// Entries whose user key is below this are checked but not returned.
    skip_below: Option<Bytes>,
    /// The user keys handed out, copied one after another into a small shared buffer (a new
    /// one when it is full) rather than one allocation each: see [`own_key`].
    keys: BytesMut,
}

/// Bytes of one buffer of [`BlockCursor::keys`]: about 60 keys of 16 bytes, and no more
/// memory than a quarter of a block for a caller who keeps one key.
const KEY_CHUNK: usize = 1024;

/// `user_key` as an entry's own `Bytes`: a slice of `keys` ([`crate::chunk::copy_into`]). A
/// compaction decodes every entry of its inputs, and a `malloc` and `free` per key (from
/// another thread's arena, as often as not) were a visible part of its time.
fn own_key(keys: &mut BytesMut, user_key: &[u8]) -> Bytes {
    crate::chunk::copy_into(keys, KEY_CHUNK, user_key)
}

impl BlockCursor {
    fn bad(&mut self, detail: &str) -> Option<Result<Entry>> {
        self.finished = true;
        let offset = self.table.index()[self.i].handle.offset;
        Some(Err(Error::corruption(
            self.table.path(),
            offset,
            format!("data block: {detail}"),
        )))
    }

    /// The next entry from the front, decoded from the block.
    fn decode_next(&mut self) -> Option<Result<Entry>> {
        loop {
            if self.finished {
                return None;
            }
            if self.pos >= self.block.entries_end() {
                self.finished = true;
                if self.decoded == 0 {
                    return self.bad("no entries");
                }
                if !self.table.block_ends_right(self.i, &self.key) {
                    return self.bad("keys outside the range the index gives the block");
                }
                return None;
            }
            std::mem::swap(&mut self.key, &mut self.prev);
            self.key.clone_from(&self.prev);
            let Some((value, next)) = self.block.entry_at(self.pos, &mut self.key) else {
                return self.bad("malformed entry or keys out of order");
            };
            let Some((user_key, trailer)) = key::decode(&self.key) else {
                return self.bad("key shorter than its trailer");
            };
            if key::trailer_kind(trailer).is_none() {
                // Every entry is a put or a delete (0 or 1); a scan or a compaction must not
                // carry another kind along as if it were a value.
                return self.bad("entry with an unknown value kind");
            }
            // A range tombstone's skip passes over blocks and tables by their recorded
            // sequence range: an entry outside it would be dropped unseen, not reported.
            let p = self.table.properties();
            if !(p.min_seq..=p.max_seq).contains(&key::trailer_seq(trailer)) {
                return self.bad("entry with a sequence number outside the table's range");
            }
            if self.decoded > 0
                && !self.block.is_ordered()
                && !key::cmp_encoded(&self.prev, &self.key).is_lt()
            {
                return self.bad("malformed entry or keys out of order");
            }
            let starts_right = self.decoded > 0 || self.table.block_starts_right(self.i, &self.key);
            if !starts_right || !self.table.within_block(self.i, &self.key) {
                return self.bad("keys outside the range the index gives the block");
            }
            self.pos = next;
            self.decoded += 1;
            if let Some(lo) = &self.skip_below {
                if user_key < &lo[..] {
                    continue;
                }
                self.skip_below = None;
            }
            return Some(Ok(Entry {
                user_key: own_key(&mut self.keys, user_key),
                trailer,
                value: self.block.slice(value),
            }));
        }
    }
}

impl Iterator for BlockCursor {
    type Item = Result<Entry>;

    fn next(&mut self) -> Option<Result<Entry>> {
        match &mut self.rest {
            Some(rest) => rest.pop_front(),
            None => self.decode_next(),
        }
    }
}

impl InternalIter for BlockCursor {
    fn skip_front_to(&mut self, key: &[u8], seq: SeqNo) -> Result<()> {
        if self.table.properties().max_seq >= seq {
            return Ok(());
        }
        match &mut self.rest {
            Some(rest) => {
                while rest
                    .front()
                    .is_some_and(|e| e.as_ref().is_ok_and(|e| e.user_key[..] < *key))
                {
                    rest.pop_front();
                }
            }
            None => {
                if self.skip_below.as_ref().is_none_or(|s| s[..] < *key) {
                    self.skip_below = Some(Bytes::copy_from_slice(key));
                }
            }
        }
        Ok(())
    }

    fn skip_back_to(&mut self, from: &[u8], seq: SeqNo) -> Result<()> {
        if self.table.properties().max_seq >= seq {
            return Ok(());
        }
        // Only what the back end has decoded can be dropped from the back; a block not yet
        // walked from there is decoded whole by its first `next_back`.
        if let Some(rest) = &mut self.rest {
            while rest
                .back()
                .is_some_and(|e| e.as_ref().is_ok_and(|e| e.user_key[..] >= *from))
            {
                rest.pop_back();
            }
        }
        Ok(())
    }
}

impl DoubleEndedIterator for BlockCursor {
    fn next_back(&mut self) -> Option<Result<Entry>> {
        if self.rest.is_none() {
            let mut rest = VecDeque::new();
            while let Some(item) = self.decode_next() {
                let failed = item.is_err();
                rest.push_back(item);
                if failed {
                    // The error comes out first, from either end.
                    let e = rest.pop_back();
                    self.rest = Some(VecDeque::new());
                    return e;
                }
            }
            self.rest = Some(rest);
        }
        self.rest.as_mut()?.pop_back()
    }
}

/// The entries of `table` whose user keys are in `range`, in internal-key order.
pub(crate) type TableIter = RangeFilter<Chunked<TableBlocks>>;

/// An iterator over the entries of `table` inside `range`, reading only the blocks that can
/// hold them.
pub(crate) fn table_iter(table: Arc<TableReader>, range: KeyRange, cache: CacheUse) -> TableIter {
    let index = table.index();
    let start = match &range.lo {
        Bound::Included(lo) | Bound::Excluded(lo) => {
            index.partition_point(|e| key::user_key(&e.last_key) < &lo[..])
        }
        Bound::Unbounded => 0,
    };
    // The last block to read: the first whose index key is past the bound. For an
    // inclusive bound that is past `hi` itself: a block may end with a version of `hi` whose
    // older versions start the next block (or the next few), and a reader at an older
    // sequence number needs those.
    let end = match &range.hi {
        Bound::Excluded(hi) => {
            let i = index.partition_point(|e| key::user_key(&e.last_key) < &hi[..]);
            (i + 1).min(index.len())
        }
        Bound::Included(hi) => {
            let i = index.partition_point(|e| key::user_key(&e.last_key) <= &hi[..]);
            (i + 1).min(index.len())
        }
        Bound::Unbounded => index.len(),
    };
    let lo = match &range.lo {
        Bound::Included(lo) | Bound::Excluded(lo) if start < end => Some((lo.clone(), start)),
        _ => None,
    };
    let blocks = TableBlocks {
        table,
        cache,
        ahead: Readahead::default(),
        lo,
    };
    RangeFilter::new(Chunked::new(blocks, start, end), range)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_keys_are_exact_and_share_small_buffers() {
        let mut keys = BytesMut::new();
        let want = |i: usize| format!("key-{i:08}").into_bytes();
        let owned: Vec<Bytes> = (0..500).map(|i| own_key(&mut keys, &want(i))).collect();
        for (i, k) in owned.iter().enumerate() {
            assert_eq!(k[..], want(i)[..]);
        }
        // Consecutive keys sit one after another, except where a buffer filled up.
        let adjacent = owned
            .windows(2)
            .filter(|w| w[0].as_ptr() as usize + w[0].len() == w[1].as_ptr() as usize)
            .count();
        assert!(adjacent >= 499 - 500 * 12 / KEY_CHUNK - 1, "{adjacent}");
        // A key larger than a buffer gets a buffer of its own size, and empty keys work.
        let big = vec![9u8; KEY_CHUNK * 3];
        assert_eq!(own_key(&mut keys, &big)[..], big[..]);
        assert!(own_key(&mut keys, b"").is_empty());
        assert_eq!(own_key(&mut keys, b"after")[..], b"after"[..]);
        drop(keys);
        assert_eq!(owned[0][..], want(0)[..]);
    }
}
