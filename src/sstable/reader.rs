//! [`TableReader`]: an open SSTable with its footer, index and filter in memory.
//!
//! Opening a table reads and verifies the footer, the index block, the filter block, the
//! range-deletion block (its tombstones stay in memory, fragmented) and the properties block;
//! any checksum or decoding failure is [`Error::Corruption`] naming the file and offset. After that, a point lookup costs at most one data-block read, and none if the
//! filter says "definitely not".
//!
//! A table of a database reads its file through the table cache (the descriptor is opened on
//! demand and may be closed when `max_open_files` are open) and its data blocks through the
//! block cache; a table opened by a tool holds its own descriptor and uses no cache.
//! Compaction reads bypass the block cache and read ahead in large pieces ([`Readahead`]).

use super::block::{Block, BlockEntry};
use super::block_cache::BlockCache;
use super::format::{
    block_crc, BlockHandle, BlockKind, Footer, BLOCK_TRAILER_LEN, FOOTER_LEN,
    RANGE_DEL_FORMAT_VERSION,
};
use super::properties::TableProperties;
use crate::cache::TableCache;
use crate::encoding::Reader;
use crate::error::{io_context, Error, Result};
use crate::filter::{self, Filter};
use crate::fs::{FileIdentity, FileSystem, RandomAccessFile};
use crate::key::{self, SeqNo, ValueKind};
use crate::range_del::Fragments;
use bytes::Bytes;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The largest properties block a table holds: two keys of at most 65,545 bytes (a range
/// tombstone's unbounded end, 65,537 bytes, and its trailer) and a few dozen numbers, with
/// room to spare.
const MAX_PROPERTIES_BLOCK: u64 = 1 << 20;

/// The largest data block a table holds: `block_size` (at most 16 MiB) and the one entry
/// that passed it (a key of 64 KiB and a value of 256 MiB), with room for its lengths and
/// the restart array.
const MAX_DATA_BLOCK: u64 =
    (16 << 20) + (crate::batch::MAX_KEY_SIZE + crate::batch::MAX_VALUE_SIZE) as u64 + (1 << 20);
/// What one operation on tables cost: data blocks it needed (from the cache or a file), bytes
/// read from files, and block-cache hits and misses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ReadCost {
    pub(crate) blocks: u64,
    pub(crate) bytes: u64,
    pub(crate) cache_hits: u64,
    pub(crate) cache_misses: u64,
}

/// Bytes a compaction reads from a table file at once.
pub(crate) const READAHEAD_BYTES: u64 = 2 << 20;

/// How a read uses the block cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CacheUse {
    /// Look blocks up, and offer the ones read from the file (gets and scans).
    Fill,
    /// Neither look up nor insert (compaction: its blocks are read once, and must not push
    /// the hot set out).
    Bypass,
}

/// The caches of a database's tables.
#[derive(Clone, Debug)]
pub(crate) struct TableCaches {
    pub(crate) fs: Arc<dyn FileSystem>,
    pub(crate) files: Arc<TableCache>,
    pub(crate) blocks: Option<BlockCache>,
    /// The tables of a read-only handle, whose directory another process owns: a
    /// descriptor the table cache reopens must be of the file first opened
    /// ([`RandomAccessFile::identity`]). A writer holds the directory lock, so nothing
    /// replaces its tables, and it does not pay for (or trip over) that check (a
    /// modification time set again by a tool, `touch` or a backup's `utime`, changes an
    /// identity without changing the file) until it is closed and the lock released.
    pub(crate) read_only: bool,
}

/// Where a table's bytes come from.
#[derive(Debug)]
enum Source {
    /// A descriptor this reader holds for its whole life (tools, tests).
    Pinned(Arc<dyn RandomAccessFile>),
    /// The table cache, which opens the file on demand.
    Cached(TableCaches),
}

/// A window of a table file read in one piece, from which a sequential reader (compaction)
/// takes its blocks.
#[derive(Debug, Default)]
pub(crate) struct Readahead {
    offset: u64,
    buf: Bytes,
}

/// One index entry: a separator key of a data block and where the block is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexEntry {
    /// An internal key (user key ++ trailer) at or after the block's last key and before the
    /// next block's first key: the block's exact last key in tables written before shortened
    /// separators, and always for the last block (see `docs/format.md`).
    pub last_key: Bytes,
    /// The block.
    pub handle: BlockHandle,
}

/// What a table says about a key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum TableLookup {
    /// The newest version at or below the read's sequence is a value, written at this
    /// sequence number.
    Value(Bytes, SeqNo),
    /// ... is a tombstone, written at this sequence number.
    Deleted(SeqNo),
    /// The table holds versions of the key, all newer than the read's sequence number (a
    /// snapshot read, or a write that raced the get): nothing visible, but the filter's
    /// "maybe" was right.
    Newer,
    /// The table holds no version of the key.
    Absent,
}

/// One block of a table, as [`TableReader::blocks`] lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockInfo {
    /// What the block holds.
    pub kind: BlockKind,
    /// Where its contents are (the 5-byte trailer follows them).
    pub handle: BlockHandle,
}

/// One entry of a table, as the inspection API returns it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableEntry {
    /// The user key.
    pub key: Vec<u8>,
    /// The write's sequence number.
    pub seq: u64,
    /// True for a tombstone (then `value` is empty).
    pub tombstone: bool,
    /// The value.
    pub value: Vec<u8>,
}

/// Every entry of a table in order, one data block at a time (see [`TableReader::entries`]).
#[derive(Debug)]
pub struct TableEntries<'a> {
    table: &'a TableReader,
    block: usize,
    buf: std::vec::IntoIter<BlockEntry>,
    failed: bool,
}

impl Iterator for TableEntries<'_> {
    type Item = Result<TableEntry>;

    fn next(&mut self) -> Option<Result<TableEntry>> {
        if self.failed {
            return None;
        }
        loop {
            if let Some((k, v)) = self.buf.next() {
                let offset = self.table.index[self.block - 1].handle.offset;
                let bad = |detail: String| Error::corruption(&self.table.path, offset, detail);
                let entry = match key::decode(&k) {
                    None => Err(bad("data block: key shorter than its trailer".into())),
                    // Only puts and deletes are written; get and scan refuse any other kind,
                    // so a tool must not show one as a tombstone.
                    Some((user, t)) => match key::trailer_kind(t) {
                        Some(kind) => Ok(TableEntry {
                            key: user.to_vec(),
                            seq: key::trailer_seq(t),
                            tombstone: kind != ValueKind::Put,
                            value: v.to_vec(),
                        }),
                        None => Err(bad(format!("data block: unknown value kind {}", t as u8))),
                    },
                };
                self.failed = entry.is_err();
                return Some(entry);
            }
            if self.block >= self.table.index.len() {
                return None;
            }
            let mut cost = ReadCost::default();
            match self.table.data_block_entries(self.block, &mut cost) {
                Ok(entries) => self.buf = entries.into_iter(),
                Err(e) => {
                    self.failed = true;
                    return Some(Err(e));
                }
            }
            self.block += 1;
        }
    }
}

/// An open table.
#[derive(Debug)]
pub struct TableReader {
    source: Source,
    /// Unique for the life of the process: the block and table caches' key.
    id: u64,
    path: PathBuf,
    file_size: u64,
    /// The identity of the file first opened ([`RandomAccessFile::identity`]): a descriptor
    /// the table cache reopens must be of the same file.
    identity: Option<FileIdentity>,
    footer: Footer,
    index: Vec<IndexEntry>,
    /// The first 8 bytes of each index entry's user key, big-endian and zero-padded: the
    /// binary search of a get runs over this contiguous array (a few cache lines) and looks at
    /// an entry's full key only on a tie.
    index_prefixes: Vec<u64>,
    filter: Option<Filter>,
    properties: TableProperties,
    /// The range tombstones; `None` for a table without any (every get checks this first).
    range_dels: Option<Arc<Fragments>>,
    /// Bytes the open read: the footer, and the properties, index, filter and range-deletion
    /// blocks with their trailers.
    open_bytes: u64,
}

impl TableReader {
    /// Opens and verifies the table at `path`, holding its file open.
    ///
    /// Errors: [`Error::Io`] if it cannot be read (of kind `OutOfMemory` for a block larger
    /// than the memory the allocator grants), [`Error::Corruption`] naming the offset of a bad
    /// footer, index, filter or properties block, or of one larger than any table holds.
    pub fn open(fs: &dyn FileSystem, path: &Path) -> Result<TableReader> {
        let file = fs.open(path).map_err(|e| io_context("open", path, e))?;
        TableReader::open_source(Source::Pinned(file), path)
    }

    /// Opens and verifies a table of a database, reading through its caches.
    pub(crate) fn open_cached(caches: &TableCaches, path: &Path) -> Result<TableReader> {
        TableReader::open_source(Source::Cached(caches.clone()), path)
    }

    fn open_source(source: Source, path: &Path) -> Result<TableReader> {
        let id = super::block_cache::next_table_id();
        let file = match &source {
            Source::Pinned(f) => f.clone(),
            Source::Cached(c) => c
                .files
                .file(id, c.fs.as_ref(), path)
                .map_err(|e| io_context("open", path, e))?,
        };
        let file_size = file.len();
        let identity = file.identity();
        let corrupt = |offset: u64, detail: String| Error::corruption(path, offset, detail);
        let footer = (|| {
            if file_size < FOOTER_LEN as u64 {
                return Err(corrupt(
                    0,
                    format!(
                        "file of {file_size} bytes is too short to be an SSTable (the footer alone is {FOOTER_LEN})"
                    ),
                ));
            }
            let footer_at = file_size - FOOTER_LEN as u64;
            let mut fbuf = [0u8; FOOTER_LEN];
            file.read_exact_at(&mut fbuf, footer_at)
                .map_err(|e| io_context("read", path, e))?;
            Footer::decode(&fbuf).map_err(|e| corrupt(footer_at + e.field_offset(), e.to_string()))
        })();
        drop(file);
        let footer = match footer {
            Ok(f) => f,
            Err(e) => {
                // No reader owns the descriptor the table cache opened for it (a reader's
                // drop closes it): close it here, or each failed open would keep one.
                if let Source::Cached(c) = &source {
                    c.files.forget(id);
                }
                return Err(e);
            }
        };
        let mut reader = TableReader {
            source,
            id,
            path: path.to_path_buf(),
            file_size,
            identity,
            footer,
            index: Vec::new(),
            index_prefixes: Vec::new(),
            filter: None,
            properties: TableProperties::default(),
            range_dels: None,
            open_bytes: 0,
        };
        let mut cost = ReadCost::default();
        let props_raw = reader.read_block(footer.properties, BlockKind::Properties, &mut cost)?;
        reader.properties = TableProperties::decode(&props_raw)
            .map_err(|d| corrupt(footer.properties.offset, format!("properties block: {d}")))?;
        // Every entry takes bytes: a count above the file size is damage, and bounding it
        // bounds everything derived from it (the filter's key count, statistics).
        if reader.properties.entries > file_size {
            return Err(corrupt(
                footer.properties.offset,
                format!(
                    "properties block: {} entries in a file of {file_size} bytes",
                    reader.properties.entries
                ),
            ));
        }
        let index_raw = reader.read_block(footer.index, BlockKind::Index, &mut cost)?;
        reader.index = reader.decode_index(index_raw)?;
        reader.index_prefixes = reader
            .index
            .iter()
            .map(|e| key_prefix(key::user_key(&e.last_key)))
            .collect();
        if let Some(h) = footer.filter {
            let raw = reader.read_block(h, BlockKind::Filter, &mut cost)?;
            let f = filter::decode(&raw)
                .map_err(|e| corrupt(h.offset.saturating_add(e.offset), e.detail))?;
            // A filter over no keys answers "absent" for every key: in a table with keys (or
            // with data blocks, which hold them, whatever its properties say) it would hide
            // them all (no writer makes one: a table's filter holds a hash for each of its
            // user keys).
            if matches!(f, Filter::Empty)
                && (reader.properties.user_keys > 0 || !reader.index.is_empty())
            {
                return Err(corrupt(
                    h.offset,
                    format!(
                        "filter over no keys in a table of {} user keys",
                        reader.properties.user_keys
                    ),
                ));
            }
            // The filter holds one hash per distinct user key (fewer if neighbours collide).
            if f.keys() > reader.properties.user_keys {
                return Err(corrupt(
                    h.offset,
                    format!(
                        "filter over {} keys in a table of {} user keys",
                        f.keys(),
                        reader.properties.user_keys
                    ),
                ));
            }
            if let Filter::Unknown(why) = &f {
                log::warn!(
                    "{}: filter not used ({why}); reads of this table skip filtering",
                    path.display()
                );
            }
            reader.filter = Some(f);
        }
        reader.range_dels = reader.read_range_dels(&mut cost)?;
        reader.open_bytes = FOOTER_LEN as u64 + cost.bytes;
        // After every block was read within bounds: how they fit together.
        reader.check_layout()?;
        reader.check_index_against_properties()?;
        Ok(reader)
    }

    /// The range-deletion block, which a version 2 table has and a version 1 table does not,
    /// decoded and checked against the properties.
    fn read_range_dels(&self, cost: &mut ReadCost) -> Result<Option<Arc<Fragments>>> {
        let p = &self.properties;
        let has_block = self.footer.version >= RANGE_DEL_FORMAT_VERSION;
        let Some((offset, size)) = p.range_del_block else {
            if has_block {
                return Err(Error::corruption(
                    &self.path,
                    self.footer.properties.offset,
                    "properties block: a version 2 table without a range-deletion block",
                ));
            }
            return Ok(None);
        };
        if !has_block {
            return Err(Error::corruption(
                &self.path,
                self.footer.properties.offset,
                "properties block: a range-deletion block in a version 1 table",
            ));
        }
        let h = BlockHandle { offset, size };
        self.check_handle(h, BlockKind::RangeDel)?;
        let raw = self.read_block(h, BlockKind::RangeDel, cost)?;
        let f = Fragments::decode(&raw).map_err(|d| {
            Error::corruption(&self.path, offset, format!("range-deletion block: {d}"))
        })?;
        if f.len() as u64 != p.range_deletions {
            return Err(Error::corruption(
                &self.path,
                offset,
                format!(
                    "range-deletion block holds {} tombstones, the properties say {}",
                    f.len(),
                    p.range_deletions
                ),
            ));
        }
        Ok(Some(Arc::new(f)))
    }

    fn decode_index(&self, raw: Bytes) -> Result<Vec<IndexEntry>> {
        let at = self.footer.index.offset;
        let bad = |d: &str| Error::corruption(&self.path, at, format!("index block: {d}"));
        let block = Block::parse(raw).ok_or_else(|| bad("malformed restart array"))?;
        let data_end = self.data_end();
        // An index key is at most as long as its data block (the block's last key, or a
        // shorter separator; a block starts at a restart point, and each key is a prefix of
        // the one before plus the bytes its entry stores), so together the keys
        // hold at most the file's size: more is a forged block whose prefix compression
        // would otherwise expand into gigabytes here, at every open of the table.
        let budget = usize::try_from(data_end).unwrap_or(usize::MAX);
        let entries = block
            .entries_within(budget)
            .ok_or_else(|| bad("malformed entry, or keys longer than their data blocks"))?;
        let mut out = Vec::with_capacity(entries.len());
        for (k, v) in entries {
            let mut r = Reader::new(&v);
            let handle = match (r.varint(), r.varint()) {
                (Some(offset), Some(size)) => BlockHandle { offset, size },
                _ => return Err(bad("malformed block handle")),
            };
            if handle.checked_end().is_none_or(|e| e > data_end) {
                return Err(bad("data block handle points past the data area"));
            }
            if key::decode(&k).is_none() {
                return Err(bad("key shorter than its trailer"));
            }
            if k.len() as u64 > handle.size {
                return Err(bad("key longer than its data block"));
            }
            if let Some(prev) = out.last() {
                let prev: &IndexEntry = prev;
                if !key::cmp_encoded(&prev.last_key, &k).is_lt() {
                    return Err(bad("keys out of order"));
                }
            }
            out.push(IndexEntry {
                last_key: k,
                handle,
            });
        }
        Ok(out)
    }

    /// The blocks tile the file in the order the builder writes them: data blocks from offset
    /// 0, each starting where the one before ends, then the filter (if any), the index, the
    /// properties and the footer. So no handle can point at another block (whose checksum,
    /// bound to its own offset, would pass), overlap one, or leave bytes unaccounted for.
    fn check_layout(&self) -> Result<()> {
        let f = &self.footer;
        let blocks = self.index.iter().map(|e| (BlockKind::Data, e.handle));
        let range_del = self
            .properties
            .range_del_block
            .map(|(offset, size)| (BlockKind::RangeDel, BlockHandle { offset, size }));
        let meta = [
            f.filter.map(|h| (BlockKind::Filter, h)),
            range_del,
            Some((BlockKind::Index, f.index)),
            Some((BlockKind::Properties, f.properties)),
        ];
        let mut next = 0u64;
        for (kind, h) in blocks.chain(meta.into_iter().flatten()) {
            let end = self.check_handle(h, kind)?;
            if h.offset != next {
                return Err(Error::corruption(
                    &self.path,
                    h.offset,
                    format!(
                        "{} block at offset {} where the block before it ends at {next}",
                        kind.name(),
                        h.offset
                    ),
                ));
            }
            next = end;
        }
        if next != self.data_end() {
            return Err(Error::corruption(
                &self.path,
                next,
                format!(
                    "{} bytes between the last block and the footer",
                    self.data_end().saturating_sub(next)
                ),
            ));
        }
        Ok(())
    }

    /// The index and the properties describe the same entries: one data block per index
    /// entry, none exactly when there are no entries, and the last index key (the last key of
    /// the last block) is the largest key, at or after the smallest.
    fn check_index_against_properties(&self) -> Result<()> {
        let p = &self.properties;
        let bad = |d: String| {
            Error::corruption(
                &self.path,
                self.footer.index.offset,
                format!("index block disagrees with the properties: {d}"),
            )
        };
        let blocks = u64::try_from(self.index.len()).unwrap_or(u64::MAX);
        if blocks != p.data_blocks || (blocks == 0) != (p.entries == 0) {
            return Err(bad(format!(
                "{blocks} data blocks, the properties say {} blocks of {} entries",
                p.data_blocks, p.entries
            )));
        }
        if let Some(last) = self.index.last() {
            if last.last_key[..] != p.largest[..]
                || key::cmp_encoded(&p.smallest, &last.last_key).is_gt()
            {
                return Err(bad("the key range differs".into()));
            }
        }
        Ok(())
    }

    /// Offset where the footer starts: no block may reach past it.
    fn data_end(&self) -> u64 {
        self.file_size - FOOTER_LEN as u64
    }

    /// The open file: the pinned one, or the table cache's (opened now if it was closed).
    fn file(&self) -> Result<Arc<dyn RandomAccessFile>> {
        match &self.source {
            Source::Pinned(f) => Ok(f.clone()),
            Source::Cached(c) => {
                let f = c
                    .files
                    .file(self.id, c.fs.as_ref(), &self.path)
                    .map_err(|e| io_context("open", &self.path, e))?;
                // A descriptor the cache closed is reopened by name: the name may now be
                // another file's (the database destroyed and made again under a read-only
                // handle, a backup restored), whose blocks would pass their checksums at the
                // same offsets. Fail the read rather than answer from it. A writer's handle
                // holds the directory lock, which rules that out, until it is closed: a read
                // that raced the close opens the file after the lock is gone.
                if (c.read_only || c.files.is_closed())
                    && (f.len() != self.file_size || f.identity() != self.identity)
                {
                    c.files.forget(self.id);
                    return Err(io_context(
                        "reopen",
                        &self.path,
                        io::Error::other(format!(
                            "the file was replaced since the table was opened ({} bytes, \
                             {} when opened)",
                            f.len(),
                            self.file_size
                        )),
                    ));
                }
                Ok(f)
            }
        }
    }

    /// Checks that block `h` (with its trailer) lies inside the data area.
    fn check_handle(&self, h: BlockHandle, kind: BlockKind) -> Result<u64> {
        // Blocks no writer makes this large are refused before memory is taken for them (a
        // forged handle within a large or sparse file would otherwise be read whole).
        let largest = match kind {
            BlockKind::Properties => MAX_PROPERTIES_BLOCK,
            BlockKind::Data => MAX_DATA_BLOCK,
            BlockKind::Index | BlockKind::Filter | BlockKind::RangeDel => u64::MAX,
        };
        if h.size > largest {
            return Err(Error::corruption(
                &self.path,
                h.offset,
                format!(
                    "{} block of {} bytes, larger than any table holds ({largest})",
                    kind.name(),
                    h.size
                ),
            ));
        }
        match h.checked_end() {
            Some(end) if end <= self.data_end() => Ok(end),
            _ => Err(Error::corruption(
                &self.path,
                h.offset,
                format!(
                    "{} block handle (offset {}, size {}) reaches past the end of the data ({})",
                    kind.name(),
                    h.offset,
                    h.size,
                    self.data_end()
                ),
            )),
        }
    }

    /// Reads a block and checks its trailer.
    pub(crate) fn read_block(
        &self,
        h: BlockHandle,
        kind: BlockKind,
        cost: &mut ReadCost,
    ) -> Result<Bytes> {
        let end = self.check_handle(h, kind)?;
        // `check_handle` bounds it by the file size, which a read of it has to fit in memory.
        let raw = self.read_range(h.offset, end, cost)?;
        self.verify_raw(raw, h, kind)
    }

    /// Reads the bytes `start..end` of the file (bounded by the file size by the caller) with
    /// one call, counting them in `cost`.
    fn read_range(&self, start: u64, end: u64, cost: &mut ReadCost) -> Result<Bytes> {
        let len = usize::try_from(end - start).map_err(|_| {
            Error::corruption(
                &self.path,
                start,
                "read larger than this machine can address",
            )
        })?;
        // A forged handle can ask for as much as the file's (perhaps sparse) size: an error
        // if the memory cannot be had, rather than the allocator's abort.
        let mut buf = Vec::new();
        buf.try_reserve_exact(len).map_err(|_| {
            Error::Io(Arc::new(std::io::Error::new(
                std::io::ErrorKind::OutOfMemory,
                format!(
                    "{}: a block of {len} bytes at offset {start} does not fit in memory",
                    self.path.display()
                ),
            )))
        })?;
        buf.resize(len, 0);
        self.file()?
            .read_exact_at(&mut buf, start)
            .map_err(|e| io_context("read", &self.path, e))?;
        cost.bytes += len as u64;
        Ok(Bytes::from(buf))
    }

    /// Checks the trailer of `raw` (a block's contents and its 5-byte trailer) and returns
    /// the contents.
    fn verify_raw(&self, raw: Bytes, h: BlockHandle, kind: BlockKind) -> Result<Bytes> {
        let corrupt = |offset: u64, detail: String| Error::corruption(&self.path, offset, detail);
        let n = raw.len() - BLOCK_TRAILER_LEN;
        let stored_kind = raw[n];
        let stored = u32::from_le_bytes([raw[n + 1], raw[n + 2], raw[n + 3], raw[n + 4]]);
        let check = !crate::sabotage::planted(crate::sabotage::Bug::IgnoreBlockChecksum);
        if check && block_crc(&raw[..n], stored_kind, h.offset) != stored {
            return Err(corrupt(
                h.offset,
                format!("{} block checksum mismatch", kind.name()),
            ));
        }
        if stored_kind != kind as u8 {
            return Err(corrupt(
                h.offset + h.size,
                format!("expected a {} block, found kind {stored_kind}", kind.name()),
            ));
        }
        Ok(raw.slice(..n))
    }

    fn parse_data(&self, raw: Bytes, offset: u64) -> Result<Block> {
        Block::parse(raw).ok_or_else(|| {
            Error::corruption(&self.path, offset, "data block: malformed restart array")
        })
    }

    /// The data block at index position `i`, parsed: from the block cache, or read from the
    /// file (and offered to the cache once its checksum and restart array check out; a block
    /// that fails them is never cached).
    pub(crate) fn data_block(&self, i: usize, cost: &mut ReadCost) -> Result<Block> {
        let h = self.index[i].handle;
        cost.blocks += 1;
        let cache = match &self.source {
            Source::Cached(c) => c.blocks.as_ref(),
            Source::Pinned(_) => None,
        };
        if let Some(c) = cache {
            if let Some(b) = c.get(self.id, h.offset) {
                cost.cache_hits += 1;
                return Ok(b);
            }
            cost.cache_misses += 1;
        }
        let raw = self.read_block(h, BlockKind::Data, cost)?;
        let Some(c) = cache else {
            return self.parse_data(raw, h.offset);
        };
        // A block is cached only once all of it has been decoded and found in order.
        let block = Block::parse_checked(raw).ok_or_else(|| {
            Error::corruption(&self.path, h.offset, "data block: malformed entry")
        })?;
        c.insert(self.id, h.offset, block.clone());
        Ok(block)
    }

    /// The data block at index position `i` for a sequential reader: from `ahead` if it holds
    /// the block, else from one read of up to [`READAHEAD_BYTES`] starting at the block.
    /// Never touches the block cache.
    pub(crate) fn data_block_ahead(
        &self,
        i: usize,
        ahead: &mut Readahead,
        cost: &mut ReadCost,
    ) -> Result<Block> {
        let h = self.index[i].handle;
        let end = self.check_handle(h, BlockKind::Data)?;
        cost.blocks += 1;
        let held = h.offset >= ahead.offset && end <= ahead.offset + ahead.buf.len() as u64;
        if !held {
            let want = (end - h.offset).max(READAHEAD_BYTES);
            let read_end = h.offset.saturating_add(want).min(self.data_end());
            *ahead = Readahead {
                offset: h.offset,
                buf: self.read_range(h.offset, read_end, cost)?,
            };
        }
        let start = (h.offset - ahead.offset) as usize;
        let raw = ahead.buf.slice(start..start + (end - h.offset) as usize);
        let contents = self.verify_raw(raw, h, BlockKind::Data)?;
        self.parse_data(contents, h.offset)
    }

    /// The key the block cache and the table cache know this table by.
    pub(crate) fn cache_id(&self) -> u64 {
        self.id
    }

    /// Decodes every entry of data block `i` (through the block cache).
    pub(crate) fn data_block_entries(
        &self,
        i: usize,
        cost: &mut ReadCost,
    ) -> Result<Vec<BlockEntry>> {
        let block = self.data_block(i, cost)?;
        self.entries_in_range(&block, i)
    }

    /// The entries of data block `i`, checked to lie where the index says: after the previous
    /// block's index key (block 0 starts at the table's smallest key), up to and including this
    /// block's index key, which is the block's last key or a shorter separator after it
    /// (`docs/format.md`). Otherwise a get, which the index routes, and a scan, which reads
    /// every entry, would disagree.
    fn entries_in_range(&self, block: &Block, i: usize) -> Result<Vec<BlockEntry>> {
        let offset = self.index[i].handle.offset;
        let bad = |d: &str| Error::corruption(&self.path, offset, format!("data block: {d}"));
        let entries = block
            .entries()
            .ok_or_else(|| bad("malformed entry or keys out of order"))?;
        let (Some((first, _)), Some((last, _))) = (entries.first(), entries.last()) else {
            return Err(bad("no entries"));
        };
        if !self.block_starts_right(i, first) || !self.block_ends_right(i, last) {
            return Err(bad("keys outside the range the index gives the block"));
        }
        Ok(entries)
    }

    /// Whether `first`, the first key of data block `i`, lies after the previous block's
    /// index key (block 0: equals the table's smallest key).
    pub(crate) fn block_starts_right(&self, i: usize, first: &[u8]) -> bool {
        match i.checked_sub(1) {
            Some(prev) => key::cmp_encoded(&self.index[prev].last_key, first).is_lt(),
            None => first == &self.properties.smallest[..],
        }
    }

    /// Whether `k`, a key of data block `i`, is at most the block's index key.
    pub(crate) fn within_block(&self, i: usize, k: &[u8]) -> bool {
        !key::cmp_encoded(k, &self.index[i].last_key).is_gt()
    }

    /// Whether `last`, the last key of data block `i`, ends the block where the index says:
    /// within it, and exactly at it for the table's last block.
    pub(crate) fn block_ends_right(&self, i: usize, last: &[u8]) -> bool {
        if i + 1 == self.index.len() {
            last == &self.index[i].last_key[..]
        } else {
            self.within_block(i, last)
        }
    }

    /// The position of the one data block that may hold (`user_key`, `t`): the first block
    /// whose index key is at or after it; `None` past the last block. Zero-padded prefixes
    /// order like the keys they start (ties go to the full key), so comparing prefixes first
    /// gives the same answer as comparing whole keys.
    fn block_for(&self, user_key: &[u8], t: u64) -> Option<usize> {
        let want = key_prefix(user_key);
        let mut lo = 0usize;
        let mut hi = self.index.len();
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let before = match self.index_prefixes[mid].cmp(&want) {
                std::cmp::Ordering::Less => true,
                std::cmp::Ordering::Greater => false,
                std::cmp::Ordering::Equal => {
                    let (u, tr) = key::decode(&self.index[mid].last_key).unwrap_or((&[], 0));
                    key::cmp_parts(u, tr, user_key, t).is_lt()
                }
            };
            if before {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        (lo < self.index.len()).then_some(lo)
    }

    /// Looks `user_key` up as of `seq`, reading at most one data block. Does not consult the
    /// filter: the caller does, with the hash it computed once for the whole get.
    pub(crate) fn get(
        &self,
        user_key: &[u8],
        seq: SeqNo,
        cost: &mut ReadCost,
    ) -> Result<TableLookup> {
        let t = key::lookup_trailer(seq);
        let Some(i) = self.block_for(user_key, t) else {
            return Ok(self.newer_before_block(self.index.len(), user_key));
        };
        let block = self.data_block(i, cost)?;
        self.lookup_in(&block, i, user_key, t)
    }

    /// [`get`](Self::get) if it needs no file read: `None` when the block it needs is not in
    /// the block cache (nothing is counted then; the caller goes on with `get`).
    pub(crate) fn get_cached(
        &self,
        user_key: &[u8],
        seq: SeqNo,
        cost: &mut ReadCost,
    ) -> Option<Result<TableLookup>> {
        let t = key::lookup_trailer(seq);
        let Some(i) = self.block_for(user_key, t) else {
            return Some(Ok(self.newer_before_block(self.index.len(), user_key)));
        };
        let Source::Cached(c) = &self.source else {
            return None;
        };
        let block = c
            .blocks
            .as_ref()?
            .get(self.id, self.index[i].handle.offset)?;
        cost.blocks += 1;
        cost.cache_hits += 1;
        Some(self.lookup_in(&block, i, user_key, t))
    }

    /// What data block `i` says about (`user_key`, `t`).
    fn lookup_in(&self, block: &Block, i: usize, user_key: &[u8], t: u64) -> Result<TableLookup> {
        let offset = self.index[i].handle.offset;
        let seek = block
            .seek_point(user_key, t)
            .map_err(|()| Error::corruption(&self.path, offset, "data block: malformed entry"))?;
        // A seek that walked no entry and found none: the block has no entries, which no
        // writer produces (the index would send no key to it). Taking it for "absent" would
        // let the get answer from an older table.
        if seek.entry.is_none() && seek.before_is_same_user_key.is_none() {
            return Err(Error::corruption(
                &self.path,
                offset,
                "data block: no entries",
            ));
        }
        Ok(match seek.entry {
            Some(e) if e.same_user_key => match key::trailer_kind(e.trailer) {
                Some(ValueKind::Put) => TableLookup::Value(e.value, key::trailer_seq(e.trailer)),
                Some(ValueKind::Delete) => TableLookup::Deleted(key::trailer_seq(e.trailer)),
                None => {
                    return Err(Error::corruption(
                        &self.path,
                        offset,
                        format!("data block: unknown value kind {}", e.trailer as u8),
                    ))
                }
            },
            // The entry just before the position found (in this block, or the previous
            // block's last) decides whether the table holds only newer versions.
            _ => match seek.before_is_same_user_key {
                Some(true) => TableLookup::Newer,
                Some(false) => TableLookup::Absent,
                None => self.newer_before_block(i, user_key),
            },
        })
    }

    /// [`TableLookup::Newer`] if the entry before data block `i` (the last of block `i - 1`;
    /// the table's last entry when `i` is past the last block) is a version of `user_key`,
    /// else [`TableLookup::Absent`]. An index key that is a separator (section 5.3 of
    /// `docs/format.md`) means no: a lookup that a separator sends past a block never
    /// wants that block's last user key.
    fn newer_before_block(&self, i: usize, user_key: &[u8]) -> TableLookup {
        let last = i.checked_sub(1).and_then(|b| self.index.get(b));
        match last.and_then(|e| key::decode(&e.last_key)) {
            Some((u, tr)) if u == user_key && key::trailer_kind(tr).is_some() => TableLookup::Newer,
            _ => TableLookup::Absent,
        }
    }

    /// Bytes the open of this table read (its footer and the blocks it keeps in memory).
    pub(crate) fn open_bytes(&self) -> u64 {
        self.open_bytes
    }

    /// The table's range tombstones; `None` if it has none.
    pub(crate) fn range_dels(&self) -> Option<&Arc<Fragments>> {
        self.range_dels.as_ref()
    }

    /// The table's range tombstones as (start, end, sequence number) triples, one per
    /// fragment and sequence number, in key order (`end = None`: to the end of the key
    /// space). Empty for a table without any.
    pub fn range_tombstones(&self) -> Vec<(Vec<u8>, Option<Vec<u8>>, u64)> {
        self.range_dels
            .iter()
            .flat_map(|f| f.tombstones())
            .map(|t| (t.start.to_vec(), t.end.map(|e| e.to_vec()), t.seq))
            .collect()
    }

    /// The table's filter; `None` if it was written without one.
    pub fn filter(&self) -> Option<&Filter> {
        self.filter.as_ref()
    }

    /// The table's properties.
    pub fn properties(&self) -> &TableProperties {
        &self.properties
    }

    /// The footer.
    pub fn footer(&self) -> &Footer {
        &self.footer
    }

    /// The in-memory index.
    pub fn index(&self) -> &[IndexEntry] {
        &self.index
    }

    /// Bytes of memory the in-memory index pins: its entries, their keys, and the array of
    /// key prefixes the lookup searches.
    pub fn index_memory_bytes(&self) -> usize {
        let keys: usize = self.index.iter().map(|e| e.last_key.len()).sum();
        self.index.capacity() * std::mem::size_of::<IndexEntry>()
            + keys
            + self.index_prefixes.capacity() * std::mem::size_of::<u64>()
    }

    /// File size in bytes.
    pub fn file_size(&self) -> u64 {
        self.file_size
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Opens a table file on the real file system (for tools).
    ///
    /// Errors: as [`open`](TableReader::open).
    pub fn open_file(path: &Path) -> Result<TableReader> {
        TableReader::open(&crate::fs::OsFs, path)
    }

    /// Every block of the table in file order: data blocks, filter, range deletions, index,
    /// properties.
    pub fn blocks(&self) -> Vec<BlockInfo> {
        let mut out: Vec<BlockInfo> = self
            .index
            .iter()
            .map(|e| BlockInfo {
                kind: BlockKind::Data,
                handle: e.handle,
            })
            .collect();
        if let Some(h) = self.footer.filter {
            out.push(BlockInfo {
                kind: BlockKind::Filter,
                handle: h,
            });
        }
        if let Some((offset, size)) = self.properties.range_del_block {
            out.push(BlockInfo {
                kind: BlockKind::RangeDel,
                handle: BlockHandle { offset, size },
            });
        }
        out.push(BlockInfo {
            kind: BlockKind::Index,
            handle: self.footer.index,
        });
        out.push(BlockInfo {
            kind: BlockKind::Properties,
            handle: self.footer.properties,
        });
        out.sort_by_key(|b| b.handle.offset);
        out
    }

    /// Reads a block, checks its checksum and, for data blocks, decodes every entry and checks
    /// that every restart point starts an entry and the keys strictly increase (what a block
    /// must pass before the block cache keeps it: a seek trusts the restart points).
    ///
    /// Errors: [`Error::Corruption`] naming the file and offset of what is wrong.
    pub fn verify_block(&self, block: &BlockInfo) -> Result<()> {
        let mut cost = ReadCost::default();
        let raw = self.read_block(block.handle, block.kind, &mut cost)?;
        if block.kind == BlockKind::Data {
            let parsed = Block::parse(raw.clone()).ok_or_else(|| {
                Error::corruption(
                    &self.path,
                    block.handle.offset,
                    "data block: malformed restart array",
                )
            })?;
            Block::parse_checked(raw).ok_or_else(|| {
                Error::corruption(
                    &self.path,
                    block.handle.offset,
                    "data block: a restart point that starts no entry, or keys out of order",
                )
            })?;
            parsed.entries().ok_or_else(|| {
                Error::corruption(
                    &self.path,
                    block.handle.offset,
                    "data block: malformed entry",
                )
            })?;
        }
        Ok(())
    }

    /// Every entry (all versions and tombstones) in internal-key order. Items are `Result`s:
    /// a block that fails its checksum or does not decode, or holds an entry whose kind is
    /// neither put nor delete, ends the iteration with [`Error::Corruption`] naming the
    /// block's offset; a failed read ends it with [`Error::Io`].
    pub fn entries(&self) -> TableEntries<'_> {
        TableEntries {
            table: self,
            block: 0,
            buf: Vec::new().into_iter(),
            failed: false,
        }
    }

    /// The newest version of `user_key` in this table, if any (reads at most one block).
    ///
    /// Errors: [`Error::Corruption`] if that block is damaged, [`Error::Io`] if it cannot be
    /// read.
    pub fn find(&self, user_key: &[u8]) -> Result<Option<TableEntry>> {
        let mut cost = ReadCost::default();
        Ok(match self.get(user_key, key::MAX_SEQ, &mut cost)? {
            TableLookup::Value(v, seq) => Some(TableEntry {
                key: user_key.to_vec(),
                seq,
                tombstone: false,
                value: v.to_vec(),
            }),
            TableLookup::Deleted(seq) => Some(TableEntry {
                key: user_key.to_vec(),
                seq,
                tombstone: true,
                value: Vec::new(),
            }),
            TableLookup::Newer | TableLookup::Absent => None,
        })
    }

    /// Smallest user key.
    pub fn smallest_user_key(&self) -> &[u8] {
        key::user_key(&self.properties.smallest)
    }

    /// Largest user key.
    pub fn largest_user_key(&self) -> &[u8] {
        key::user_key(&self.properties.largest)
    }
}

/// The first 8 bytes of `user_key` as a big-endian number, zero-padded: `a <= b` implies
/// `key_prefix(a) <= key_prefix(b)`.
#[inline]
fn key_prefix(user_key: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = user_key.len().min(8);
    b[..n].copy_from_slice(&user_key[..n]);
    u64::from_be_bytes(b)
}

impl Drop for TableReader {
    fn drop(&mut self) {
        // The table is gone from every version: close its descriptor now rather than when
        // the table cache gets round to evicting it.
        if let Source::Cached(c) = &self.source {
            c.files.forget(self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encoding::put_varint;
    use crate::fs::MemFs;
    use crate::sstable::block::BlockBuilder;
    use crate::sstable::format::put_block_trailer;
    use crate::sstable::{BuildOptions, TableBuilder};

    const PATH: &str = "/t/000001.sst";

    #[test]
    fn a_table_that_fails_to_open_leaves_no_descriptor_in_the_table_cache() {
        let fs = MemFs::new();
        let whole = table_bytes(&fs);
        let caches = TableCaches {
            fs: Arc::new(fs.clone()),
            files: Arc::new(TableCache::new(16)),
            blocks: None,
            read_only: false,
        };
        // Too short for a footer, a damaged footer, a damaged block behind a good footer.
        let mut bad_footer = whole.clone();
        let n = bad_footer.len();
        bad_footer[n - 1] ^= 0xff;
        // (The block just before the footer, which an open reads.)
        let mut bad_block = whole.clone();
        bad_block[n - FOOTER_LEN - 10] ^= 0xff;
        for (what, bytes) in [
            ("short", &whole[..10]),
            ("footer", &bad_footer[..]),
            ("block", &bad_block[..]),
        ] {
            fs.write_file(Path::new(PATH), bytes).unwrap();
            for _ in 0..3 {
                let e = TableReader::open_cached(&caches, Path::new(PATH)).unwrap_err();
                assert!(e.is_corruption(), "{what}: {e:?}");
                assert_eq!(caches.files.open_files(), 0, "{what}");
            }
        }
        // A good one holds its descriptor until it is dropped.
        fs.write_file(Path::new(PATH), &whole).unwrap();
        let r = TableReader::open_cached(&caches, Path::new(PATH)).unwrap();
        assert_eq!(caches.files.open_files(), 1);
        drop(r);
        assert_eq!(caches.files.open_files(), 0);
    }

    /// A table of 200 entries in several data blocks, with a filter.
    fn table_bytes(fs: &MemFs) -> Vec<u8> {
        build_table(fs, |i| {
            (key::trailer(i + 1, ValueKind::Put), b"value".to_vec())
        })
    }

    /// Every entry of `t` (and the error that ended the scan), from the front or the back.
    fn scan_all(t: &Arc<TableReader>, backwards: bool) -> Vec<Result<crate::iter::Entry>> {
        let it = crate::sstable::iter::table_iter(
            t.clone(),
            crate::iter::KeyRange::all(),
            CacheUse::Fill,
        );
        if backwards {
            it.rev().collect()
        } else {
            it.collect()
        }
    }

    /// The bytes of table [`PATH`] (256-byte blocks, a Bloom filter): 200 entries `key0000`
    /// ... `key0199`, entry `i` with the trailer and value `entry(i)` gives.
    fn build_table(fs: &MemFs, entry: impl Fn(u64) -> (u64, Vec<u8>)) -> Vec<u8> {
        fs.create_dir_all(Path::new("/t")).unwrap();
        let opts = BuildOptions {
            block_size: 256,
            filter: crate::filter::TableFilter::Bloom { bits_per_key: 10.0 },
            level: 0,
            replayed_wals: None,
        };
        let mut b = TableBuilder::create(fs, Path::new(PATH), opts).unwrap();
        for i in 0..200u64 {
            let (trailer, value) = entry(i);
            let k = key::encode(format!("key{i:04}").as_bytes(), trailer);
            b.add(&k, &value).unwrap();
        }
        b.finish().unwrap();
        fs.read_file(Path::new(PATH)).unwrap()
    }

    #[test]
    fn an_entry_of_unknown_kind_is_corruption_for_gets_and_scans() {
        // A table whose checksums are right but one entry's kind byte is 2 (only 0 and 1
        // exist): what only a writer bug or a hand-made file gives. A get of that key and a
        // scan over it (which compaction also uses) must both call it corruption, never treat
        // the entry as a value or skip it.
        let fs = MemFs::new();
        build_table(&fs, |i| {
            let t = if i == 100 {
                ((i + 1) << 8) | 2
            } else {
                key::trailer(i + 1, ValueKind::Put)
            };
            (t, b"value".to_vec())
        });
        let t = Arc::new(TableReader::open(&fs, Path::new(PATH)).unwrap());
        let mut cost = ReadCost::default();
        let get = |k: &str, cost: &mut ReadCost| t.get(k.as_bytes(), key::MAX_SEQ, cost);
        assert!(matches!(
            get("key0050", &mut cost).unwrap(),
            TableLookup::Value(..)
        ));
        assert!(get("key0100", &mut cost).unwrap_err().is_corruption());
        for backwards in [false, true] {
            let items = scan_all(&t, backwards);
            let first_err = items.iter().position(|r| r.is_err()).expect("an error");
            assert!(items[first_err].as_ref().unwrap_err().is_corruption());
            assert_eq!(first_err, items.len() - 1, "the scan stops at the error");
            if !backwards {
                // Every entry of the blocks before the bad one came out first.
                assert!(first_err > 0 && first_err <= 100, "{first_err}");
            }
        }
    }

    #[test]
    fn an_entry_of_unknown_kind_is_corruption_for_entries() {
        // The same table (checksums right, one entry of kind 2): `silt sst verify` and
        // `sst dump` read it through `entries`, which must stop with corruption naming the
        // data block, as a get and a scan do, never show the entry as a tombstone.
        let fs = MemFs::new();
        let bad_trailer: u64 = (101 << 8) | 2;
        build_table(&fs, |i| {
            let t = if i == 100 {
                bad_trailer
            } else {
                key::trailer(i + 1, ValueKind::Put)
            };
            (t, b"value".to_vec())
        });
        let t = TableReader::open(&fs, Path::new(PATH)).unwrap();
        // The block that holds the entry: the first whose index key is at or after it.
        let bad_key = key::encode(b"key0100", bad_trailer);
        let block = t
            .index()
            .iter()
            .find(|e| key::cmp_encoded(&e.last_key, &bad_key).is_ge())
            .expect("a block holds key0100")
            .handle
            .offset;
        let items: Vec<Result<TableEntry>> = t.entries().collect();
        let (last, good) = items.split_last().expect("some items");
        assert!(good.iter().all(|r| r.as_ref().is_ok_and(|e| !e.tombstone)));
        // The entries before it, in its block too, come out first.
        assert_eq!(good.len(), 100);
        assert!(
            matches!(last, Err(Error::Corruption { file, offset, .. })
                if file.as_path() == Path::new(PATH) && *offset == block),
            "{last:?}"
        );
    }

    #[test]
    fn verify_reports_a_restart_point_inside_an_entry() {
        // A data block whose second restart point is moved one byte into its entry, the
        // checksum made right: it parses (every restart is inside the entries) and decodes
        // front to back, but a seek that starts at that restart reads garbage, so `verify`
        // (which `silt sst verify` runs) must report it.
        let fs = MemFs::new();
        build_table(&fs, |k| {
            (key::trailer(k + 1, ValueKind::Put), vec![b'v'; 8])
        });
        let t = TableReader::open(&fs, Path::new(PATH)).unwrap();
        let info = t
            .blocks()
            .into_iter()
            .find(|b| b.kind == BlockKind::Data)
            .expect("a data block");
        t.verify_block(&info).unwrap();
        let mut bytes = fs.read_file(Path::new(PATH)).unwrap();
        let (at, size) = (info.handle.offset as usize, info.handle.size as usize);
        let count_at = at + size - 4;
        let n = u32::from_le_bytes(bytes[count_at..count_at + 4].try_into().unwrap()) as usize;
        assert!(n >= 2, "{n} restarts");
        let second = count_at - 4 * n + 4;
        let r = u32::from_le_bytes(bytes[second..second + 4].try_into().unwrap());
        bytes[second..second + 4].copy_from_slice(&(r + 1).to_le_bytes());
        let crc = crate::sstable::format::block_crc(
            &bytes[at..at + size],
            BlockKind::Data as u8,
            info.handle.offset,
        );
        bytes[at + size + 1..at + size + 5].copy_from_slice(&crc.to_le_bytes());
        fs.write_file(Path::new(PATH), &bytes).unwrap();
        let t = TableReader::open(&fs, Path::new(PATH)).unwrap();
        let e = t.verify_block(&info).unwrap_err();
        assert!(
            matches!(&e, Error::Corruption { offset, .. } if *offset == info.handle.offset),
            "{e:?}"
        );
    }

    #[test]
    fn a_data_block_with_no_entries_is_corruption_for_gets() {
        // A data block forged into one with no entries (its restart array alone, every
        // restart at 0), its checksum made right: siltdb writes no such block. A get must not
        // read it as "absent" for the keys the index sends to it (a review feared it would:
        // its first restart points at no entry, so the seek finds it malformed, with the
        // block cache and without).
        let fs = MemFs::new();
        // Such a block is its restart array alone, so its size must be a multiple of 4: try
        // value lengths until some data block's is.
        let (mut bytes, i, h, probe) = (1..16usize)
            .find_map(|value_len| {
                build_table(&fs, |k| {
                    (key::trailer(k + 1, ValueKind::Put), vec![b'v'; value_len])
                });
                let t = TableReader::open(&fs, Path::new(PATH)).unwrap();
                let (i, e) = t
                    .index()
                    .iter()
                    .enumerate()
                    .find(|(i, e)| *i > 0 && e.handle.size % 4 == 0 && e.handle.size >= 8)?;
                let probe = key::user_key(&e.last_key).to_vec();
                Some((fs.read_file(Path::new(PATH)).unwrap(), i, e.handle, probe))
            })
            .expect("a data block whose size is a multiple of 4");
        assert!(i > 0);
        let (at, size) = (h.offset as usize, h.size as usize);
        bytes[at..at + size].fill(0);
        let restarts = (size / 4 - 1) as u32;
        bytes[at + size - 4..at + size].copy_from_slice(&restarts.to_le_bytes());
        let crc = crate::sstable::format::block_crc(
            &bytes[at..at + size],
            BlockKind::Data as u8,
            h.offset,
        );
        bytes[at + size + 1..at + size + 5].copy_from_slice(&crc.to_le_bytes());
        fs.write_file(Path::new(PATH), &bytes).unwrap();
        for blocks in [None, Some(BlockCache::new(1 << 20))] {
            let caches = TableCaches {
                fs: Arc::new(fs.clone()),
                files: Arc::new(TableCache::new(16)),
                blocks,
                read_only: false,
            };
            let t = TableReader::open_cached(&caches, Path::new(PATH)).unwrap();
            let mut cost = ReadCost::default();
            let e = t.get(&probe, key::MAX_SEQ, &mut cost).unwrap_err();
            assert!(e.is_corruption(), "{e:?}");
        }
    }

    #[test]
    fn a_data_block_of_its_restart_array_alone_is_corruption() {
        // Review finding (session 22): the smallest empty block, one restart at 0 and no
        // entries (8 bytes, what `BlockBuilder` gives for no entries; no writer writes one),
        // checksummed, in place of data block `i`. Its seek walks no entry and answers
        // "every entry is before the key", which a get took for "absent" and went on to older
        // tables. The test above forges a larger block, whose restart keys fail the seek.
        let fs = MemFs::new();
        let bytes = table_bytes(&fs);
        let t = TableReader::open(&fs, Path::new(PATH)).unwrap();
        let i = t.index().len() / 2;
        drop(t);
        // Its index key is longer than 8 bytes, which the open refuses: a block holds its
        // last key. (Only an index key of 8 bytes, the empty user key's, could lead to it.)
        splice_data_block(&fs, &bytes, i, &[0, 0, 0, 0, 1, 0, 0, 0]);
        let e = TableReader::open(&fs, Path::new(PATH)).unwrap_err();
        assert!(e.is_corruption(), "{e:?}");
        // And a get that reads such a block calls it corruption, not "absent".
        fs.write_file(Path::new(PATH), &bytes).unwrap();
        let t = TableReader::open(&fs, Path::new(PATH)).unwrap();
        let empty = Block::parse(Bytes::from_static(&[0, 0, 0, 0, 1, 0, 0, 0])).unwrap();
        for j in [0, i] {
            let e = t
                .lookup_in(&empty, j, b"key0000", key::lookup_trailer(key::MAX_SEQ))
                .unwrap_err();
            let at = t.index()[j].handle.offset;
            assert!(
                matches!(&e, Error::Corruption { offset, .. } if *offset == at),
                "{e:?}"
            );
        }
    }

    #[test]
    fn a_filter_over_no_keys_in_a_table_with_keys_is_corruption() {
        // The filter's key count forged to 0 with both checksums made right again: such a
        // filter would say "absent" for every key of the table. Also with the properties'
        // user-key count forged to 0 (as a table written before that count has it): the
        // table's data blocks still give it away.
        for user_keys_zeroed in [false, true] {
            let fs = MemFs::new();
            let mut bytes = table_bytes(&fs);
            let good = TableReader::open(&fs, Path::new(PATH)).unwrap();
            let h = good.footer().filter.expect("a filter");
            drop(good);
            if user_keys_zeroed {
                // (Refused on its own: the filter holds more keys than the table claims.)
                let r = rewrite(&fs, &bytes, keep, |p| p.user_keys = 0);
                assert!(r.unwrap_err().is_corruption());
                bytes = fs.read_file(Path::new(PATH)).unwrap();
            }
            let (at, size) = (h.offset as usize, h.size as usize);
            {
                let block = &mut bytes[at..at + size];
                let t = block.len() - crate::filter::TRAILER_LEN;
                block[t + 16..t + 24].fill(0);
                crate::filter::reseal(block);
            }
            let crc = crate::sstable::format::block_crc(
                &bytes[at..at + size],
                BlockKind::Filter as u8,
                h.offset,
            );
            bytes[at + size + 1..at + size + 5].copy_from_slice(&crc.to_le_bytes());
            fs.write_file(Path::new(PATH), &bytes).unwrap();
            let e = TableReader::open(&fs, Path::new(PATH)).unwrap_err();
            assert!(
                e.is_corruption(),
                "user keys zeroed {user_keys_zeroed}: {e:?}"
            );
        }
    }

    /// Rewrites the index block (with `handles` changed) and the properties block of a table,
    /// with valid checksums and footer: damage that only the decoders' checks can catch.
    /// Appends `contents` to `out` as a block of `kind` with its trailer, at its offset in
    /// `out`; returns its handle.
    fn put_block(out: &mut Vec<u8>, kind: BlockKind, contents: &[u8]) -> BlockHandle {
        let start = out.len();
        out.extend_from_slice(contents);
        put_block_trailer(out, start, kind, start as u64);
        BlockHandle {
            offset: start as u64,
            size: contents.len() as u64,
        }
    }

    fn rewrite(
        fs: &MemFs,
        bytes: &[u8],
        handle: impl Fn(usize, BlockHandle) -> BlockHandle,
        props: impl Fn(&mut TableProperties),
    ) -> Result<TableReader> {
        let entry = |i: usize, e: &IndexEntry| (e.last_key.to_vec(), handle(i, e.handle));
        rewrite_index(fs, bytes, 1, entry, props)
    }

    /// [`rewrite`] with every index entry's key and handle from `entry`, in an index block
    /// with a restart every `interval` entries.
    fn rewrite_index(
        fs: &MemFs,
        bytes: &[u8],
        interval: usize,
        entry: impl Fn(usize, &IndexEntry) -> (Vec<u8>, BlockHandle),
        props: impl Fn(&mut TableProperties),
    ) -> Result<TableReader> {
        fs.write_file(Path::new(PATH), bytes).unwrap();
        let t = TableReader::open(fs, Path::new(PATH)).unwrap();
        let f = *t.footer();
        let mut out = bytes[..usize::try_from(f.index.offset).unwrap()].to_vec();
        let mut index = BlockBuilder::new(interval);
        for (i, e) in t.index().iter().enumerate() {
            let (k, h) = entry(i, e);
            let mut v = Vec::new();
            put_varint(&mut v, h.offset);
            put_varint(&mut v, h.size);
            index.add(&k, &v);
        }
        let mut index_bytes = Vec::new();
        index.finish_into(&mut index_bytes);
        let index_h = put_block(&mut out, BlockKind::Index, &index_bytes);
        let mut p = t.properties().clone();
        props(&mut p);
        let props_h = put_block(&mut out, BlockKind::Properties, &p.encode());
        let footer = Footer {
            index: index_h,
            properties: props_h,
            ..f
        };
        out.extend_from_slice(&footer.encode());
        fs.write_file(Path::new(PATH), &out).unwrap();
        TableReader::open(fs, Path::new(PATH))
    }

    /// Rewrites table [`PATH`] from `bytes` with data block `i`'s contents replaced by
    /// `contents`: the blocks after it move, each with its trailer made right for its new
    /// offset, and the index, properties and footer follow. Returns the block's new handle.
    fn splice_data_block(fs: &MemFs, bytes: &[u8], i: usize, contents: &[u8]) -> BlockHandle {
        fs.write_file(Path::new(PATH), bytes).unwrap();
        let t = TableReader::open(fs, Path::new(PATH)).unwrap();
        let f = *t.footer();
        let old = |h: BlockHandle| {
            let at = usize::try_from(h.offset).unwrap();
            &bytes[at..at + usize::try_from(h.size).unwrap()]
        };
        let mut out = Vec::new();
        let mut index = BlockBuilder::new(1);
        let mut spliced = None;
        for (j, e) in t.index().iter().enumerate() {
            let h = put_block(
                &mut out,
                BlockKind::Data,
                if j == i { contents } else { old(e.handle) },
            );
            if j == i {
                spliced = Some(h);
            }
            let mut v = Vec::new();
            put_varint(&mut v, h.offset);
            put_varint(&mut v, h.size);
            index.add(&e.last_key, &v);
        }
        let mut p = t.properties().clone();
        p.data_bytes = out.len() as u64;
        assert!(p.range_del_block.is_none(), "moves no range-deletion block");
        let filter = f
            .filter
            .map(|h| put_block(&mut out, BlockKind::Filter, old(h)));
        let mut index_bytes = Vec::new();
        index.finish_into(&mut index_bytes);
        let index = put_block(&mut out, BlockKind::Index, &index_bytes);
        let properties = put_block(&mut out, BlockKind::Properties, &p.encode());
        let footer = Footer {
            index,
            filter,
            properties,
            ..f
        };
        out.extend_from_slice(&footer.encode());
        fs.write_file(Path::new(PATH), &out).unwrap();
        spliced.expect("block i exists")
    }

    fn keep(_: usize, h: BlockHandle) -> BlockHandle {
        h
    }

    #[test]
    fn index_keys_longer_than_their_blocks_are_corruption() {
        // Review finding (session 22): separators of 60,000 bytes (`key0010` + zeros sorts
        // between `key0010` and `key0011`, so the table is otherwise consistent) in an
        // index block that prefix-compresses them to a few bytes each. Every open decoded
        // them whole: with more blocks, a small forged file expanded into gigabytes.
        let fs = MemFs::new();
        let bytes = table_bytes(&fs);
        let last = TableReader::open(&fs, Path::new(PATH))
            .unwrap()
            .index()
            .len()
            - 1;
        let long = |i: usize, e: &IndexEntry| {
            let (user, trailer) = key::decode(&e.last_key).unwrap();
            let k = if i < last {
                let mut u = user.to_vec();
                u.resize(60_000, 0);
                key::encode(&u, trailer)
            } else {
                e.last_key.to_vec()
            };
            (k, e.handle)
        };
        for interval in [1, 1_000] {
            let e = rewrite_index(&fs, &bytes, interval, long, |_| {}).unwrap_err();
            assert!(
                matches!(&e, Error::Corruption { file, .. } if file.ends_with(PATH)),
                "{e:?}"
            );
        }
        // The same separators cut to a length their blocks hold open as before.
        let short = |i: usize, e: &IndexEntry| {
            let (user, trailer) = key::decode(&e.last_key).unwrap();
            let mut u = user.to_vec();
            if i < last {
                u.push(0);
            }
            (key::encode(&u, trailer), e.handle)
        };
        let t = rewrite_index(&fs, &bytes, 1_000, short, |_| {}).unwrap();
        assert_eq!(t.entries().count(), 200);
    }

    #[test]
    fn a_faithful_rewrite_opens() {
        let fs = MemFs::new();
        let bytes = table_bytes(&fs);
        let t = rewrite(&fs, &bytes, keep, |_| {}).unwrap();
        assert!(t.index().len() > 3);
        assert_eq!(t.entries().count(), 200);
    }

    #[test]
    fn block_handles_that_overflow_are_corruption() {
        let fs = MemFs::new();
        let bytes = table_bytes(&fs);
        for bad in [
            BlockHandle {
                offset: 0,
                size: u64::MAX - 2,
            },
            BlockHandle {
                offset: u64::MAX - 1,
                size: 10,
            },
            BlockHandle {
                offset: u64::MAX,
                size: u64::MAX,
            },
        ] {
            let r = rewrite(&fs, &bytes, |i, h| if i == 1 { bad } else { h }, |_| {});
            assert!(r.unwrap_err().is_corruption(), "{bad:?}");
        }
    }

    #[test]
    fn index_disagreeing_with_the_properties_is_corruption() {
        let fs = MemFs::new();
        let bytes = table_bytes(&fs);
        let cases: [fn(&mut TableProperties); 5] = [
            |p| p.data_blocks += 1,
            |p| p.data_blocks = 0,
            |p| p.largest = key::encode(b"key0150", key::trailer(151, ValueKind::Put)),
            |p| p.smallest = key::encode(b"zzz", key::trailer(1, ValueKind::Put)),
            |p| {
                p.entries = 0;
                p.deletions = 0;
                p.user_keys = 0;
            },
        ];
        for (i, f) in cases.iter().enumerate() {
            let r = rewrite(&fs, &bytes, keep, f);
            assert!(r.unwrap_err().is_corruption(), "case {i}");
        }
    }

    #[test]
    fn handles_that_break_the_layout_are_corruption() {
        let fs = MemFs::new();
        let bytes = table_bytes(&fs);
        // Each handle below passes the bounds check; only the layout tells them apart.
        let cases: [fn(usize, BlockHandle) -> BlockHandle; 4] = [
            // Block 1 points at block 2 (whose checksum is valid at its own offset).
            |i, h| {
                if i == 1 {
                    BlockHandle {
                        offset: h.end(),
                        ..h
                    }
                } else {
                    h
                }
            },
            // Block 0 starts late.
            |i, h| {
                if i == 0 {
                    BlockHandle {
                        offset: 1,
                        size: h.size - 1,
                    }
                } else {
                    h
                }
            },
            // Block 2 is shorter than it is (a gap before block 3).
            |i, h| {
                if i == 2 {
                    BlockHandle {
                        size: h.size - 1,
                        ..h
                    }
                } else {
                    h
                }
            },
            // Block 1 repeats block 0.
            |i, h| {
                if i == 1 {
                    BlockHandle { offset: 0, ..h }
                } else {
                    h
                }
            },
        ];
        for (i, f) in cases.iter().enumerate() {
            let r = rewrite(&fs, &bytes, f, |_| {});
            assert!(r.unwrap_err().is_corruption(), "case {i}");
        }
    }

    #[test]
    fn gets_tell_newer_only_versions_from_absent_keys_at_every_block_boundary() {
        // Keys with one to four versions in blocks of two or three entries: versions of a
        // key straddle block boundaries, and keys far apart get shortened separators.
        let fs = MemFs::new();
        fs.create_dir_all(Path::new("/t")).unwrap();
        let opts = BuildOptions {
            block_size: 48,
            filter: crate::filter::TableFilter::Bloom { bits_per_key: 10.0 },
            level: 0,
            replayed_wals: None,
        };
        let mut b = TableBuilder::create(&fs, Path::new(PATH), opts).unwrap();
        // Each user key with its versions, oldest first (a value, or `None` for a tombstone).
        type Versions = Vec<(SeqNo, Option<Vec<u8>>)>;
        let mut model: Vec<(Vec<u8>, Versions)> = Vec::new();
        let mut seq = 0;
        for i in 0..60u64 {
            let user = format!("k{:04}x", i * 37).into_bytes();
            let mut versions = Vec::new();
            for v in 0..=(i % 4) {
                seq += 1;
                let value = (v % 3 != 2).then(|| format!("v{i}.{v}").into_bytes());
                versions.push((seq, value));
            }
            // Internal order: newest first.
            for (s, value) in versions.iter().rev() {
                let kind = if value.is_some() {
                    ValueKind::Put
                } else {
                    ValueKind::Delete
                };
                let v = value.clone().unwrap_or_default();
                b.add(&key::encode(&user, key::trailer(*s, kind)), &v)
                    .unwrap();
            }
            model.push((user, versions));
        }
        b.finish().unwrap();
        let t = TableReader::open(&fs, Path::new(PATH)).unwrap();
        assert!(t.index().len() > 20, "{} blocks", t.index().len());
        let separators = t
            .index()
            .iter()
            .filter(|e| key::decode(&e.last_key).unwrap().1 == key::lookup_trailer(key::MAX_SEQ))
            .count();
        assert!(separators > 0, "some index keys are shortened separators");
        // Probes: every key, every index key's user key, and keys between the keys.
        let mut probes: Vec<Vec<u8>> = model.iter().map(|(u, _)| u.clone()).collect();
        probes.extend(
            t.index()
                .iter()
                .map(|e| key::user_key(&e.last_key).to_vec()),
        );
        probes.extend(
            (0..60 * 37)
                .step_by(5)
                .map(|i| format!("k{i:04}").into_bytes()),
        );
        probes.push(b"zzz".to_vec());
        let mut newer_seen = 0;
        for probe in &probes {
            let versions = model
                .iter()
                .find(|(u, _)| u == probe)
                .map_or(&[][..], |(_, v)| &v[..]);
            for read_seq in (0..=seq + 1).chain([key::MAX_SEQ]) {
                let want = match versions.iter().rev().find(|(s, _)| *s <= read_seq) {
                    Some((s, Some(v))) => TableLookup::Value(Bytes::from(v.clone()), *s),
                    Some((s, None)) => TableLookup::Deleted(*s),
                    None if versions.is_empty() => TableLookup::Absent,
                    None => TableLookup::Newer,
                };
                newer_seen += usize::from(want == TableLookup::Newer);
                let mut cost = ReadCost::default();
                let got = t.get(probe, read_seq, &mut cost).unwrap();
                assert_eq!(
                    got,
                    want,
                    "{} at {read_seq}",
                    String::from_utf8_lossy(probe)
                );
            }
        }
        assert!(newer_seen > 1000, "{newer_seen}");
    }

    #[test]
    fn index_keys_that_misplace_a_block_are_found_when_it_is_read() {
        let fs = MemFs::new();
        let bytes = table_bytes(&fs);
        fs.write_file(Path::new(PATH), &bytes).unwrap();
        let t = TableReader::open(&fs, Path::new(PATH)).unwrap();
        let mut cost = ReadCost::default();
        for i in 0..t.index().len() {
            t.data_block_entries(i, &mut cost).unwrap();
        }
        // Index keys shifted so that block 1 claims keys up to block 2's last one: the table
        // opens (the keys still ascend). Block 1's entries still lie at or below its index key
        // (an index key may be a separator after the block's last key), but block 2's first
        // keys are not after block 1's index key: reading block 2 is corruption.
        let mut index = t.index().to_vec();
        index[1].last_key = index[2].last_key.clone();
        index[2].last_key = Bytes::from(key::encode(
            &key::user_key(&index[2].last_key)
                .iter()
                .chain(b"\0")
                .copied()
                .collect::<Vec<u8>>(),
            key::trailer(1, ValueKind::Put),
        ));
        let mut moved = t;
        moved.index_prefixes = index
            .iter()
            .map(|e| key_prefix(key::user_key(&e.last_key)))
            .collect();
        moved.index = index;
        assert!(moved.data_block_entries(0, &mut cost).is_ok());
        assert!(moved.data_block_entries(1, &mut cost).is_ok());
        assert!(moved
            .data_block_entries(2, &mut cost)
            .unwrap_err()
            .is_corruption());
        // A scan, which decodes blocks entry by entry, finds it too, from either end, after
        // the entries before it.
        let moved = Arc::new(moved);
        for backwards in [false, true] {
            let items = scan_all(&moved, backwards);
            let first_err = items.iter().position(|r| r.is_err()).unwrap();
            assert!(items[first_err].as_ref().unwrap_err().is_corruption());
            assert_eq!(first_err + 1, items.len(), "the scan stops at the error");
            if !backwards {
                assert!(first_err > 0, "blocks 0 and 1 are read first");
            }
        }
    }

    #[test]
    fn counts_the_file_cannot_hold_are_corruption() {
        let fs = MemFs::new();
        let bytes = table_bytes(&fs);
        // More entries than bytes.
        let r = rewrite(&fs, &bytes, keep, |p| p.entries = 1 << 40);
        assert!(r.unwrap_err().is_corruption());
        // A filter over more keys than the table has (its checksums are intact: the
        // properties changed).
        let r = rewrite(&fs, &bytes, keep, |p| p.user_keys = 199);
        assert!(r.unwrap_err().is_corruption());
        assert!(rewrite(&fs, &bytes, keep, |p| p.user_keys = 200).is_ok());
    }

    /// Review finding (session 24): a scan's range-tombstone skips trust a table's recorded
    /// sequence range, and nothing checked the entries against it. An entry outside it is
    /// corruption, from either end.
    #[test]
    fn an_entry_outside_the_recorded_sequence_range_is_corruption() {
        let fs = MemFs::new();
        let bytes = table_bytes(&fs);
        // Entries carry sequence numbers 1 ..= 200.
        for (min, max) in [(1, 150), (2, 200)] {
            let t = Arc::new(
                rewrite(&fs, &bytes, keep, |p| {
                    p.min_seq = min;
                    p.max_seq = max;
                })
                .unwrap(),
            );
            for backwards in [false, true] {
                let all = scan_all(&t, backwards);
                let last = all.last().unwrap();
                assert!(
                    last.as_ref().is_err_and(|e| e.is_corruption()),
                    "{min}..={max} backwards {backwards}: {} entries, then {:?}",
                    all.len(),
                    last.as_ref().err()
                );
            }
        }
        let t = Arc::new(rewrite(&fs, &bytes, keep, |_| {}).unwrap());
        assert_eq!(scan_all(&t, false).len(), 200);
        assert!(scan_all(&t, true).iter().all(|e| e.is_ok()));
    }

    #[test]
    fn properties_past_max_seq_are_corruption() {
        let fs = MemFs::new();
        let bytes = table_bytes(&fs);
        let r = rewrite(&fs, &bytes, keep, |p| p.max_seq = key::MAX_SEQ + 1);
        assert!(r.unwrap_err().is_corruption());
    }
}
