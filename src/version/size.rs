//! What a version occupies: the bytes of table files a key range spans, estimated from the
//! tables' in-memory indexes without reading a data block, and the memory its tables pin
//! (filters and indexes).
//!
//! A table's data blocks come first in its file and in key order, so the bytes a key range
//! spans in one table are the distance between the offsets of the blocks where the range
//! starts and ends (LevelDB's `ApproximateOffsetOf`). The table's filter, index, properties
//! and footer are shared out in proportion, so that the whole key range of a table counts
//! exactly its file size.

use super::{TableHandle, Version};
use crate::iter::KeyRange;
use crate::key;
use std::ops::Bound;

impl Version {
    /// Bytes of table files holding keys in `range`: exact for whole tables, to within a data
    /// block at each end of the range for the tables it cuts.
    pub(crate) fn approximate_size(&self, range: &KeyRange) -> u64 {
        if range.is_empty() {
            return 0;
        }
        self.levels
            .iter()
            .flatten()
            .filter(|t| range.overlaps(t.meta.smallest_user(), t.meta.largest_user()))
            .map(|t| table_span(t, range))
            .fold(0, u64::saturating_add)
    }

    /// Bytes of table files in the version.
    pub(crate) fn table_bytes(&self) -> u64 {
        self.levels
            .iter()
            .flatten()
            .map(|t| t.meta.size)
            .fold(0, u64::saturating_add)
    }

    /// Bytes of memory pinned by the filters and by the indexes of the version's tables.
    pub(crate) fn pinned_bytes(&self) -> (u64, u64) {
        let mut filters = 0u64;
        let mut indexes = 0u64;
        for t in self.levels.iter().flatten() {
            filters += t.filter_bytes() as u64;
            indexes += t.reader().map_or(0, |r| r.index_memory_bytes()) as u64;
        }
        (filters, indexes)
    }
}

/// The bytes of `t` that `range` spans (the caller checked that it overlaps the table).
fn table_span(t: &TableHandle, range: &KeyRange) -> u64 {
    // A table that cannot be opened has no index to look at: count all of it.
    let Ok(reader) = t.reader() else {
        return t.meta.size;
    };
    let index = reader.index();
    let data_end = index.last().map_or(0, |e| e.handle.end());
    if data_end == 0 {
        // No data block: a table of range tombstones alone, which the range overlaps. Its
        // bytes are its tombstones: count all of it, as for a table inside the range.
        return t.meta.size;
    }
    // The offset of the block where `k` would be: the first whose last key is at or after it.
    let offset_of = |k: &[u8]| {
        let i = index.partition_point(|e| key::user_key(&e.last_key) < k);
        index.get(i).map_or(data_end, |e| e.handle.offset)
    };
    let start = match &range.lo {
        Bound::Included(k) | Bound::Excluded(k) if !range.above_lo(t.meta.smallest_user()) => {
            offset_of(k)
        }
        _ => 0,
    };
    let end = match &range.hi {
        Bound::Included(k) | Bound::Excluded(k) if !range.below_hi(t.meta.largest_user()) => {
            offset_of(k)
        }
        _ => data_end,
    };
    let span = end.saturating_sub(start);
    (u128::from(span) * u128::from(t.meta.size) / u128::from(data_end)) as u64
}
