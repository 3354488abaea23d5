//! Walking a table's entries in a key range, from both ends, one data block at a time.

use super::reader::{CacheUse, ReadCost, Readahead, TableReader};
use crate::error::{Error, Result};
use crate::iter::{ChunkSource, Chunked, Entry, KeyRange, RangeFilter};
use crate::key;
use std::ops::Bound;
use std::sync::Arc;

/// Loads data blocks of one table as chunks: through the block cache (scans), or read ahead
/// in large pieces around it (compaction).
pub(crate) struct TableBlocks {
    table: Arc<TableReader>,
    cache: CacheUse,
    ahead: Readahead,
}

impl ChunkSource for TableBlocks {
    type Chunk = std::vec::IntoIter<Result<Entry>>;

    fn load(&mut self, i: usize) -> Result<Self::Chunk> {
        let mut cost = ReadCost::default();
        let entries = match self.cache {
            CacheUse::Fill => self.table.data_block_entries(i, &mut cost)?,
            CacheUse::Bypass => {
                self.table
                    .data_block_entries_ahead(i, &mut self.ahead, &mut cost)?
            }
        };
        let offset = self.table.index()[i].handle.offset;
        let path = self.table.path();
        let out: Vec<Result<Entry>> = entries
            .into_iter()
            .map(|(k, v)| {
                Entry::from_encoded(k, v).ok_or_else(|| {
                    Error::corruption(path, offset, "data block: key shorter than its trailer")
                })
            })
            .collect();
        Ok(out.into_iter())
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
    let end = match &range.hi {
        Bound::Included(hi) | Bound::Excluded(hi) => {
            let i = index.partition_point(|e| key::user_key(&e.last_key) < &hi[..]);
            (i + 1).min(index.len())
        }
        Bound::Unbounded => index.len(),
    };
    let blocks = TableBlocks {
        table,
        cache,
        ahead: Readahead::default(),
    };
    RangeFilter::new(Chunked::new(blocks, start, end), range)
}
