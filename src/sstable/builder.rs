//! [`TableBuilder`]: writes one SSTable from entries in internal-key order.
//!
//! Layout: data blocks, then the filter block (if bits per key > 0), the range-deletion block
//! (if the table has range tombstones; the table is then format version 2), the index block,
//! the properties block, and the footer. The file is synced before `finish` returns.
//!
//! Blocks are collected in a buffer of [`WRITE_BUFFER`] bytes and written with one system call
//! per buffer, not one per block. An index entry is the shortest key that separates its block
//! from the next one (LevelDB's `FindShortestSeparator`), not the block's last key, so that
//! the index that every open table keeps in memory stays small.

use super::block::BlockBuilder;
use super::bounds::{table_bounds, TableBounds};
use super::format::{
    put_block_trailer, BlockHandle, BlockKind, Footer, FORMAT_VERSION, RANGE_DEL_FORMAT_VERSION,
};
use super::properties::TableProperties;
use crate::encoding::put_varint;
use crate::error::{io_context, Error, Result};
use crate::filter::{hash_key, FilterBuilder, TableFilter};
use crate::fs::{FileSystem, WritableFile};
use crate::key::{self, ValueKind};
use crate::range_del::Fragments;
use std::path::{Path, PathBuf};

/// Entries between restart points in data blocks. Four, not LevelDB's 16: a point get's
/// binary search over the restart points (whose key prefixes a cached block keeps inline)
/// then leaves at most four entries to walk, about 500 bytes of a block of 100-byte values
/// instead of 2 KB; measured with the block cache holding every block, gets ran 1.12-1.18x
/// faster, for 1.6% more table bytes (`docs/benchmarks.md` section 7). Readers accept any
/// spacing.
const RESTART_INTERVAL: usize = 4;

/// Bytes of finished blocks collected before one write to the file.
pub(crate) const WRITE_BUFFER: usize = 1 << 20;

/// How to build a table.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BuildOptions {
    pub(crate) block_size: usize,
    /// The filter block the table gets.
    pub(crate) filter: TableFilter,
    pub(crate) level: u32,
    /// The WALs (first and last number) an open's replay wrote the table from; `None` for
    /// any other table. Recorded in the properties (tag 16).
    pub(crate) replayed_wals: Option<(u64, u64)>,
}

/// What a finished table is.
#[derive(Clone, Debug)]
pub(crate) struct BuiltTable {
    pub(crate) file_size: u64,
    /// What the manifest records: the ranges over entries and range tombstones.
    pub(crate) bounds: TableBounds,
    /// The table was to get a fuse filter and got a Bloom filter instead.
    pub(crate) fuse_fell_back: bool,
}

/// Writes one table.
#[derive(Debug)]
pub(crate) struct TableBuilder {
    file: Box<dyn WritableFile>,
    path: PathBuf,
    opts: BuildOptions,
    offset: u64,
    buf: Vec<u8>,
    block: BlockBuilder,
    index: BlockBuilder,
    filter: Option<FilterBuilder>,
    props: TableProperties,
    /// The user key of the last entry added (valid once `props.entries > 0`), kept in one
    /// reused buffer: the builder allocates nothing per entry.
    last_user_key: Vec<u8>,
    /// Finished blocks not yet written to the file.
    out: Vec<u8>,
    /// The last key and handle of the previous data block, waiting for the next block's
    /// first key to choose its separator.
    pending_index: Option<(Vec<u8>, BlockHandle)>,
    /// Range tombstones for the range-deletion block.
    range_dels: Fragments,
}

/// The shortest internal key `s` with `last <= s < next` (both internal keys, `last < next`):
/// a user key between the two with the trailer that sorts first, or `last` itself when no
/// shorter key fits.
pub(crate) fn shortest_separator(last: &[u8], next: &[u8]) -> Vec<u8> {
    let (Some((a, _)), Some((b, _))) = (key::decode(last), key::decode(next)) else {
        return last.to_vec();
    };
    let common = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    if common < a.len().min(b.len()) {
        let byte = a[common];
        if byte < 0xff && byte + 1 < b[common] {
            let mut user = a[..=common].to_vec();
            user[common] += 1;
            // `user > a` and `user < b`: every version of `a` sorts before `user`, every
            // version of `b` after it, whatever the trailer; the lookup trailer sorts first.
            if user.len() < a.len() {
                return key::encode(&user, key::lookup_trailer(key::MAX_SEQ));
            }
        }
    }
    last.to_vec()
}

/// Property tag 10 for a filter of `bits` per key: `bits * 1000`, rounded, and at least 1
/// when a filter is built (`bits > 0`).
fn millibits(bits: f64) -> u64 {
    if bits > 0.0 {
        ((bits * 1000.0).round() as u64).max(1)
    } else {
        0
    }
}

impl TableBuilder {
    /// Creates the file at `path`.
    pub(crate) fn create(fs: &dyn FileSystem, path: &Path, opts: BuildOptions) -> Result<Self> {
        let file = fs.create(path).map_err(|e| io_context("create", path, e))?;
        Ok(TableBuilder {
            file,
            path: path.to_path_buf(),
            opts,
            offset: 0,
            buf: Vec::new(),
            block: BlockBuilder::new(RESTART_INTERVAL),
            index: BlockBuilder::new(1),
            filter: (opts.filter.nominal_bits_per_key() > 0.0).then(FilterBuilder::new),
            props: TableProperties {
                // A filter is built for any bits above 0: its figure is at least 1, as the
                // format says 0 only for no filter.
                filter_millibits_per_key: millibits(opts.filter.nominal_bits_per_key()),
                level: u64::from(opts.level),
                replayed_wals: opts.replayed_wals,
                min_seq: u64::MAX,
                ..TableProperties::default()
            },
            last_user_key: Vec::new(),
            out: Vec::with_capacity(WRITE_BUFFER),
            pending_index: None,
            range_dels: Fragments::default(),
        })
    }

    /// Adds an entry. Entries must come in strictly increasing internal-key order.
    pub(crate) fn add(&mut self, ikey: &[u8], value: &[u8]) -> Result<()> {
        let (user, trailer) = key::decode(ikey).ok_or_else(|| {
            Error::InvalidArgument("internal key shorter than its trailer".into())
        })?;
        debug_assert!(
            self.props.entries == 0 || key::cmp_encoded(&self.props.largest, ikey).is_lt(),
            "keys out of order"
        );
        if self.props.entries == 0 || !key::same_user(&self.last_user_key, user) {
            if let Some(f) = self.filter.as_mut() {
                f.add_hash(hash_key(user));
            }
            self.props.user_keys += 1;
            self.props.raw_key_bytes += user.len() as u64;
            self.last_user_key.clear();
            self.last_user_key.extend_from_slice(user);
        }
        if self.props.entries == 0 {
            self.props.smallest = ikey.to_vec();
        }
        if let Some((last, handle)) = self.pending_index.take() {
            self.add_index_entry(&shortest_separator(&last, ikey), handle);
        }
        self.props.largest.clear();
        self.props.largest.extend_from_slice(ikey);
        self.props.entries += 1;
        if key::trailer_kind(trailer) == Some(ValueKind::Delete) {
            self.props.deletions += 1;
        }
        let seq = key::trailer_seq(trailer);
        self.props.min_seq = self.props.min_seq.min(seq);
        self.props.max_seq = self.props.max_seq.max(seq);
        self.props.raw_value_bytes += value.len() as u64;
        self.block.add(ikey, value);
        if self.block.size_estimate() >= self.opts.block_size {
            self.flush_data_block()?;
        }
        Ok(())
    }

    /// Bytes written so far plus the open block.
    pub(crate) fn estimated_size(&self) -> u64 {
        self.offset + self.block.size_estimate() as u64
    }

    fn add_index_entry(&mut self, key: &[u8], handle: BlockHandle) {
        let mut v = Vec::with_capacity(20);
        put_varint(&mut v, handle.offset);
        put_varint(&mut v, handle.size);
        self.index.add(key, &v);
    }

    /// Writes the collected blocks to the file (one system call).
    fn write_out(&mut self) -> Result<()> {
        if !self.out.is_empty() {
            self.file
                .append(&self.out)
                .map_err(|e| io_context("write", &self.path, e))?;
            self.out.clear();
        }
        Ok(())
    }

    /// Entries added so far.
    pub(crate) fn entries(&self) -> u64 {
        self.props.entries
    }

    /// Gives the table these range tombstones (replacing any given before). A table may
    /// hold range tombstones and no entry.
    pub(crate) fn set_range_tombstones(&mut self, f: Fragments) {
        self.range_dels = f;
    }

    fn write_block(
        &mut self,
        contents: Option<&[u8]>,
        kind: BlockKind,
        from_block: bool,
    ) -> Result<BlockHandle> {
        self.buf.clear();
        if from_block {
            if kind == BlockKind::Index {
                self.index.finish_into(&mut self.buf);
            } else {
                self.block.finish_into(&mut self.buf);
            }
        } else if let Some(c) = contents {
            self.buf.extend_from_slice(c);
        }
        let handle = BlockHandle {
            offset: self.offset,
            size: self.buf.len() as u64,
        };
        put_block_trailer(&mut self.buf, 0, kind, self.offset);
        self.out.extend_from_slice(&self.buf);
        self.offset += self.buf.len() as u64;
        if self.out.len() >= WRITE_BUFFER {
            self.write_out()?;
            // The table is synced when it is finished: its bytes may start for the disk now,
            // so that the sync has less left to write (RocksDB's `bytes_per_sync`).
            self.file.start_writeback();
        }
        Ok(handle)
    }

    fn flush_data_block(&mut self) -> Result<()> {
        if self.block.is_empty() {
            return Ok(());
        }
        let last = self.block.last_key().to_vec();
        let handle = self.write_block(None, BlockKind::Data, true)?;
        self.props.data_blocks += 1;
        self.props.data_bytes += handle.size + super::format::BLOCK_TRAILER_LEN as u64;
        self.pending_index = Some((last, handle));
        Ok(())
    }

    /// Writes the remaining blocks and the footer, and syncs the file.
    pub(crate) fn finish(self) -> Result<BuiltTable> {
        let (built, mut file, path) = self.finish_unsynced()?;
        file.sync().map_err(|e| io_context("sync", &path, e))?;
        Ok(built)
    }

    /// [`finish`](Self::finish) without the sync: returns the file (and its path) for the
    /// caller to sync before anything refers to the table.
    pub(crate) fn finish_unsynced(
        mut self,
    ) -> Result<(BuiltTable, Box<dyn WritableFile>, PathBuf)> {
        self.flush_data_block()?;
        if let Some((last, handle)) = self.pending_index.take() {
            // The last block keeps its exact last key: nothing follows it to separate from.
            self.add_index_entry(&last, handle);
        }
        if self.props.entries == 0 {
            self.props.min_seq = 0;
        }
        let mut fuse_fell_back = false;
        let filter = match self.filter.take() {
            Some(f) => {
                let finished = f.finish_as(self.opts.filter);
                fuse_fell_back = finished.fuse_fell_back;
                Some(self.write_block(Some(&finished.block), BlockKind::Filter, false)?)
            }
            None => None,
        };
        let mut version = FORMAT_VERSION;
        if !self.range_dels.is_empty() {
            let block = self.range_dels.encode();
            let h = self.write_block(Some(&block), BlockKind::RangeDel, false)?;
            self.props.range_del_block = Some((h.offset, h.size));
            self.props.range_deletions = self.range_dels.len() as u64;
            version = RANGE_DEL_FORMAT_VERSION;
        }
        let index = self.write_block(None, BlockKind::Index, true)?;
        let props = self.props.encode();
        let properties = self.write_block(Some(&props), BlockKind::Properties, false)?;
        let footer = Footer {
            index,
            filter,
            properties,
            version,
        }
        .encode();
        self.out.extend_from_slice(&footer);
        self.offset += footer.len() as u64;
        self.write_out()?;
        let bounds = table_bounds(&self.props, Some(&self.range_dels));
        let built = BuiltTable {
            file_size: self.offset,
            bounds,
            fuse_fell_back,
        };
        Ok((built, self.file, self.path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::{encode, trailer, ValueKind};
    use std::cmp::Ordering;

    fn ik(user: &[u8], seq: u64) -> Vec<u8> {
        encode(user, trailer(seq, ValueKind::Put))
    }

    #[test]
    fn a_tiny_filter_does_not_read_as_none_in_its_properties() {
        assert_eq!(millibits(0.0), 0);
        assert_eq!(millibits(0.0004), 1);
        assert_eq!(millibits(10.0), 10_000);
        assert_eq!(millibits(7.3456), 7_346);
    }

    #[test]
    fn separators_are_short_and_between() {
        let cases: &[(&[u8], &[u8])] = &[
            (b"abcdefgh", b"abzzzz"),
            (b"abc", b"abd"),
            (b"abc", b"abcd"),
            (b"a\xff\xff", b"b"),
            (b"key0001", b"key0002"),
            (b"\x10\x20\x30\x40", b"\x90"),
            (b"same", b"same"),
        ];
        for &(a, b) in cases {
            let last = ik(a, 5);
            let next = if a == b { ik(b, 4) } else { ik(b, 9) };
            let s = shortest_separator(&last, &next);
            assert_ne!(key::cmp_encoded(&s, &last), Ordering::Less, "{a:?} {b:?}");
            assert_eq!(key::cmp_encoded(&s, &next), Ordering::Less, "{a:?} {b:?}");
            assert!(s.len() <= last.len());
        }
        assert_eq!(
            key::user_key(&shortest_separator(
                &ik(b"\x10\x20\x30\x40", 1),
                &ik(b"\x90", 1)
            )),
            b"\x11"
        );
    }
}
