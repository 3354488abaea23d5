//! Versions: which tables make up the tree, level by level.
//!
//! A [`Version`] is immutable and reference counted; readers and iterators hold the version
//! they started with, which keeps its tables' files alive. A table removed by a later version
//! is marked obsolete; when the last version holding it is dropped, its file is queued for
//! deletion by background work ([`obsolete::ObsoleteFiles`]).

pub(crate) mod edit;
pub(crate) mod obsolete;
pub(crate) mod set;
mod shape;
mod size;

pub use edit::{FileMeta, VersionEdit, NUM_LEVELS};

use crate::cache::TableCache;
use crate::error::{io_context, Error, Result};
use crate::filename;
use crate::fs::FileSystem;
use crate::iter::{ChunkSource, Chunked, KeyRange};
use crate::sstable::iter::{table_iter, TableIter};
use crate::sstable::{table_bounds, BlockCache, CacheUse, TableCaches, TableReader};
use obsolete::ObsoleteFiles;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

/// What every table of a database shares: where the files are, the caches it reads through,
/// and the queue its file goes to once it is obsolete.
#[derive(Debug)]
pub(crate) struct TableEnv {
    pub(crate) dir: PathBuf,
    pub(crate) caches: TableCaches,
    pub(crate) obsolete: Arc<ObsoleteFiles>,
    /// Tables that were to get a fuse or Ribbon filter and got a Bloom filter because no seed
    /// built one (`Stats::filter_fuse_fallbacks`).
    pub(crate) fuse_fallbacks: std::sync::atomic::AtomicU64,
    /// Filter bytes that running jobs (a flush and a compaction may run at once) plan to
    /// write and no version holds yet, under `Options::filter_memory_limit`: each job leaves
    /// room for the others' (see `compaction::bits::filter_for_new_table`).
    pub(crate) filter_bytes_planned: Arc<std::sync::atomic::AtomicU64>,
}

impl TableEnv {
    /// The environment of the tables in `dir`, with no block cache and a table cache of
    /// `max_open_files` descriptors.
    #[cfg(test)]
    pub(crate) fn new(
        fs: Arc<dyn FileSystem>,
        dir: &Path,
        max_open_files: usize,
        blocks: Option<BlockCache>,
    ) -> Arc<TableEnv> {
        TableEnv::with_mode(fs, dir, max_open_files, blocks, false)
    }

    /// As [`new`](Self::new), for a read-only handle if `read_only`.
    pub(crate) fn with_mode(
        fs: Arc<dyn FileSystem>,
        dir: &Path,
        max_open_files: usize,
        blocks: Option<BlockCache>,
        read_only: bool,
    ) -> Arc<TableEnv> {
        Arc::new(TableEnv {
            dir: dir.to_path_buf(),
            obsolete: ObsoleteFiles::new(fs.clone()),
            fuse_fallbacks: std::sync::atomic::AtomicU64::new(0),
            filter_bytes_planned: Arc::default(),
            caches: TableCaches {
                fs,
                files: Arc::new(TableCache::new(max_open_files)),
                blocks,
                read_only,
            },
        })
    }
}

/// A table of the tree: its manifest metadata and its open reader.
#[derive(Debug)]
pub(crate) struct TableHandle {
    pub(crate) meta: FileMeta,
    /// The open reader (footer, index, filter and properties in memory).
    table: OnceLock<Arc<TableReader>>,
    /// Why the table cannot be opened, for good (corruption, a missing file): reported again
    /// on each use. A transient failure (out of descriptors, another I/O error) is not kept:
    /// the next use tries again.
    broken: Mutex<Option<Error>>,
    path: PathBuf,
    env: Arc<TableEnv>,
    obsolete: AtomicBool,
}

impl TableHandle {
    /// Opens the table. A table that cannot be opened for good is kept as broken: every read
    /// that needs it fails with the error, and the rest of the tree stays readable. So is one
    /// that is not the table the manifest describes (another size, key range, sequence range
    /// or entry count than its properties: a table copied or renamed over it).
    pub(crate) fn open(env: &Arc<TableEnv>, meta: FileMeta) -> Arc<TableHandle> {
        let path = filename::table_path(&env.dir, meta.number);
        let handle = Arc::new(TableHandle {
            meta,
            table: OnceLock::new(),
            broken: Mutex::new(None),
            path,
            env: env.clone(),
            obsolete: AtomicBool::new(false),
        });
        if let Err(e) = handle.reader() {
            log::error!("table {} cannot be opened: {e}", handle.path.display());
        }
        handle
    }

    /// The open reader, or the error that keeps it from opening.
    pub(crate) fn reader(&self) -> Result<&Arc<TableReader>> {
        self.reader_opening().map(|(t, _)| t)
    }

    /// [`reader`](Self::reader), and the bytes this call read to open the table: 0 unless
    /// the table was not open yet (its open at the database's open failed) and this call
    /// opened it, which a get counts as its own read.
    pub(crate) fn reader_opening(&self) -> Result<(&Arc<TableReader>, u64)> {
        if let Some(t) = self.table.get() {
            return Ok((t, 0));
        }
        let mut broken = self.broken.lock();
        if let Some(e) = &*broken {
            return Err(e.clone());
        }
        if let Some(t) = self.table.get() {
            return Ok((t, 0));
        }
        // A closed handle's statistics and sizes still ask for its tables: one never opened
        // stays unopened (no descriptor of a file another handle may delete, no "missing"
        // verdict on a table that handle deleted).
        if self.env.caches.files.is_closed() {
            return Err(Error::Closed);
        }
        let opened = TableReader::open_cached(&self.env.caches, &self.path).and_then(|t| {
            match match_manifest(&t, &self.meta) {
                Ok(()) => Ok(t),
                // A read-only handle takes no lock: the database may have been destroyed and
                // made again under it, and a new table now has this one's name. As for a table
                // whose file was replaced after it was opened: an I/O error, not kept (the
                // next use looks again), not corruption for the handle's life.
                Err(mismatch) if self.env.caches.read_only => Err(io_context(
                    "open",
                    &self.path,
                    io::Error::other(format!(
                        "the file is not the table this read-only handle's manifest lists \
                         (replaced since it read the manifest?): {mismatch}"
                    )),
                )),
                Err(mismatch) => Err(mismatch),
            }
        });
        match opened {
            Ok(t) => {
                let bytes = t.open_bytes();
                Ok((self.table.get_or_init(|| Arc::new(t)), bytes))
            }
            // A read-only handle's writer may delete a table after the handle read the
            // manifest: a missing table is then an I/O error, not corruption.
            Err(Error::Io(e))
                if e.kind() == io::ErrorKind::NotFound && self.env.caches.read_only =>
            {
                // The writer may have deleted it (compacted away) after this handle read the
                // manifest: the promised I/O error, and not kept (the next use looks again).
                Err(io_context(
                    "open",
                    &self.path,
                    io::Error::new(
                        io::ErrorKind::NotFound,
                        "a table the manifest listed when this read-only handle opened is gone \
                         (deleted by the writer since, or lost)",
                    ),
                ))
            }
            Err(Error::Io(e)) if e.kind() == io::ErrorKind::NotFound => {
                // A table the manifest lists but the directory lacks: the database is damaged.
                let e = Error::corruption(&self.path, 0, "table listed in the manifest is missing");
                *broken = Some(e.clone());
                Err(e)
            }
            Err(e @ Error::Corruption { .. }) => {
                let e = self.size_mismatch().unwrap_or(e);
                *broken = Some(e.clone());
                Err(e)
            }
            Err(e) => Err(e),
        }
    }

    /// For a table that failed to open: if its file is not the size the manifest records, the
    /// error that says so, at the offset where the two part (a file cut short fails on
    /// whatever its last bytes happen to be, a footer's magic number most often).
    fn size_mismatch(&self) -> Option<Error> {
        let size = self.env.caches.fs.open(&self.path).ok()?.len();
        (size != self.meta.size).then(|| {
            Error::corruption(
                &self.path,
                size.min(self.meta.size),
                format!(
                    "file of {size} bytes, the manifest says {}: {}",
                    self.meta.size,
                    if size < self.meta.size {
                        "cut short"
                    } else {
                        "bytes appended or another file"
                    }
                ),
            )
        })
    }

    /// True if the table is open (its reader is in memory): asking it reads no file to open
    /// it.
    pub(crate) fn is_open(&self) -> bool {
        self.table.get().is_some()
    }

    /// True if the table cannot be opened for good.
    pub(crate) fn is_broken(&self) -> bool {
        self.broken.lock().is_some()
    }

    /// Queues the file for deletion once no version holds this table any more.
    pub(crate) fn mark_obsolete(&self) {
        self.obsolete.store(true, Ordering::Release);
    }

    pub(crate) fn number(&self) -> u64 {
        self.meta.number
    }

    /// Bytes of filter held in memory.
    pub(crate) fn filter_bytes(&self) -> usize {
        self.table
            .get()
            .and_then(|t| t.filter().map(|f| f.memory_bytes()))
            .unwrap_or(0)
    }
}

/// Checks that `t` is the table `meta` describes: siltdb records a table's size and
/// properties in the manifest exactly as it wrote them.
fn match_manifest(t: &TableReader, meta: &FileMeta) -> Result<()> {
    let b = table_bounds(t.properties(), t.range_dels().map(|f| &**f));
    let mismatch = if t.file_size() != meta.size {
        Some(format!(
            "file of {} bytes, the manifest says {}",
            t.file_size(),
            meta.size
        ))
    } else if (b.entries, b.min_seq, b.max_seq) != (meta.entries, meta.min_seq, meta.max_seq) {
        Some(format!(
            "{} entries in sequence numbers {}..={}, the manifest says {} in {}..={}",
            b.entries, b.min_seq, b.max_seq, meta.entries, meta.min_seq, meta.max_seq
        ))
    } else if b.smallest[..] != meta.smallest[..] || b.largest[..] != meta.largest[..] {
        Some("key range differs from the manifest's".to_string())
    } else {
        None
    };
    match mismatch {
        Some(what) => Err(Error::corruption(
            t.path(),
            0,
            format!("not the table the manifest lists: {what}"),
        )),
        None => Ok(()),
    }
}

impl Drop for TableHandle {
    fn drop(&mut self) {
        if self.obsolete.load(Ordering::Acquire) {
            // Close the descriptor before the file goes (the reader may outlive this handle
            // only inside a scan that holds it, and then it closes its own on drop).
            if let Some(t) = self.table.get() {
                self.env.caches.files.forget(t.cache_id());
            }
            self.env.obsolete.push(std::mem::take(&mut self.path));
        }
    }
}

/// The tables of the tree at one point in time.
#[derive(Debug, Clone, Default)]
pub(crate) struct Version {
    /// L0 newest first; L1 and below sorted by key, not overlapping.
    pub(crate) levels: [Vec<Arc<TableHandle>>; NUM_LEVELS],
}

impl Version {
    /// The version after `edit`. Added tables come from `opened` (new files) or, for tables
    /// moved between levels, from this version.
    pub(crate) fn apply(&self, edit: &VersionEdit, opened: &[Arc<TableHandle>]) -> Result<Version> {
        let mut by_number: HashMap<u64, Arc<TableHandle>> = HashMap::new();
        for level in &self.levels {
            for t in level {
                by_number.insert(t.number(), t.clone());
            }
        }
        for t in opened {
            by_number.insert(t.number(), t.clone());
        }
        let mut next = self.clone();
        for &(level, number) in &edit.deleted {
            let l = &mut next.levels[level as usize];
            let before = l.len();
            l.retain(|t| t.number() != number);
            if l.len() == before {
                return Err(Error::InvalidArgument(format!(
                    "version edit deletes table {number} which is not in L{level}"
                )));
            }
        }
        for (level, meta) in &edit.added {
            let t = by_number.get(&meta.number).cloned().ok_or_else(|| {
                Error::InvalidArgument(format!("version edit adds unknown table {}", meta.number))
            })?;
            next.levels[*level as usize].push(t);
        }
        next.sort_levels();
        Ok(next)
    }

    pub(crate) fn sort_levels(&mut self) {
        self.levels[0].sort_by_key(|t| std::cmp::Reverse((t.meta.max_seq, t.meta.number)));
        for level in self.levels.iter_mut().skip(1) {
            level.sort_by(|a, b| crate::key::cmp_encoded(&a.meta.smallest, &b.meta.smallest));
        }
    }

    /// The index of the one table of level `level >= 1` whose range may hold `user_key`: the
    /// first table whose largest key is at or after it (its smallest key may still be after
    /// the key).
    pub(crate) fn candidate_index(&self, level: usize, user_key: &[u8]) -> Option<usize> {
        let tables = &self.levels[level];
        let i = tables.partition_point(|t| t.meta.largest_user() < user_key);
        (i < tables.len()).then_some(i)
    }

    /// Tables of `level` whose user-key range intersects `[lo, hi]`.
    pub(crate) fn overlapping(&self, level: usize, lo: &[u8], hi: &[u8]) -> Vec<Arc<TableHandle>> {
        self.levels[level]
            .iter()
            .filter(|t| t.meta.largest_user() >= lo && t.meta.smallest_user() <= hi)
            .cloned()
            .collect()
    }

    /// Total file bytes in `level`.
    pub(crate) fn level_bytes(&self, level: usize) -> u64 {
        // Sizes come from the manifest, each bounded (2^40) but not their number: saturate.
        self.levels[level]
            .iter()
            .map(|t| t.meta.size)
            .fold(0, u64::saturating_add)
    }

    /// Every table number in the version.
    pub(crate) fn live_numbers(&self) -> Vec<u64> {
        self.levels.iter().flatten().map(|t| t.number()).collect()
    }

    /// Checks that L1 and deeper levels are sorted and do not overlap.
    pub(crate) fn check_invariants(&self) -> std::result::Result<(), String> {
        for (l, tables) in self.levels.iter().enumerate().skip(1) {
            for w in tables.windows(2) {
                if w[0].meta.largest_user() >= w[1].meta.smallest_user() {
                    return Err(format!(
                        "L{l}: table {} [{:?}..{:?}] overlaps table {} [{:?}..{:?}]",
                        w[0].number(),
                        w[0].meta.smallest_user(),
                        w[0].meta.largest_user(),
                        w[1].number(),
                        w[1].meta.smallest_user(),
                        w[1].meta.largest_user()
                    ));
                }
            }
        }
        Ok(())
    }
}

/// The tables of one sorted level, loaded as chunks of a [`Chunked`] walk.
pub(crate) struct LevelTables {
    tables: Vec<Arc<TableHandle>>,
    range: KeyRange,
    cache: CacheUse,
}

impl ChunkSource for LevelTables {
    type Chunk = TableIter;

    fn skippable(&self, i: usize, below: &[u8], seq: crate::key::SeqNo) -> bool {
        // `max_seq` counts the table's own range tombstones too: a table holding the
        // tombstone is loaded, and skips inside by its entries' sequence numbers.
        self.tables
            .get(i)
            .is_some_and(|t| t.meta.max_seq < seq && t.meta.largest_user() < below)
    }

    fn skippable_back(&self, i: usize, from: &[u8], seq: crate::key::SeqNo) -> bool {
        self.tables
            .get(i)
            .is_some_and(|t| t.meta.max_seq < seq && t.meta.smallest_user() >= from)
    }

    fn load(&mut self, i: usize) -> Result<TableIter> {
        let reader = self.tables[i].reader()?.clone();
        Ok(table_iter(reader, self.range.clone(), self.cache))
    }
}

/// Entries of one table in `range`.
pub(crate) fn table_entries(
    t: &TableHandle,
    range: KeyRange,
    cache: CacheUse,
) -> Result<TableIter> {
    Ok(table_iter(t.reader()?.clone(), range, cache))
}

/// Entries of a sorted run of tables (a level of L1+, or compaction inputs) in `range`.
pub(crate) fn level_entries(
    tables: &[Arc<TableHandle>],
    range: KeyRange,
    cache: CacheUse,
) -> Chunked<LevelTables> {
    let tables: Vec<Arc<TableHandle>> = tables
        .iter()
        .filter(|t| range.overlaps(t.meta.smallest_user(), t.meta.largest_user()))
        .cloned()
        .collect();
    let n = tables.len();
    Chunked::new(
        LevelTables {
            tables,
            range,
            cache,
        },
        0,
        n,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::MemFs;
    use crate::key::{encode, trailer, ValueKind};
    use crate::sstable::{BuildOptions, TableBuilder};
    use bytes::Bytes;

    /// A table file `/db/000005.sst` and the manifest record of it.
    fn table(fs: &MemFs) -> FileMeta {
        let dir = Path::new("/db");
        fs.create_dir_all(dir).unwrap();
        let opts = BuildOptions {
            block_size: 4096,
            filter: crate::filter::TableFilter::Bloom { bits_per_key: 10.0 },
            level: 0,
            replayed_wals: None,
        };
        let mut b = TableBuilder::create(fs, &filename::table_path(dir, 5), opts).unwrap();
        for (k, seq) in [(&b"a"[..], 4), (b"m", 2), (b"z", 3)] {
            b.add(&encode(k, trailer(seq, ValueKind::Put)), b"v")
                .unwrap();
        }
        let built = b.finish().unwrap();
        FileMeta::new(5, built.file_size, &built.bounds)
    }

    #[test]
    fn a_table_unlike_its_manifest_record_is_broken() {
        let mem = MemFs::new();
        let fs: Arc<dyn FileSystem> = Arc::new(mem.clone());
        let meta = table(&mem);
        let env = TableEnv::new(fs, Path::new("/db"), 16, None);
        let open = |m: &FileMeta| TableHandle::open(&env, m.clone());
        assert!(!open(&meta).is_broken());
        let changes: [fn(&mut FileMeta); 6] = [
            |m| m.size += 1,
            |m| m.entries -= 1,
            |m| m.min_seq -= 1,
            |m| m.max_seq += 1,
            |m| m.smallest = Bytes::from(encode(b"0", trailer(4, ValueKind::Put))),
            |m| m.largest = Bytes::from(encode(b"zz", trailer(3, ValueKind::Put))),
        ];
        for (i, f) in changes.iter().enumerate() {
            let mut m = meta.clone();
            f(&mut m);
            let t = open(&m);
            assert!(t.is_broken(), "case {i}");
            match t.reader() {
                Err(Error::Corruption { file, .. }) => {
                    assert_eq!(file, filename::table_path(Path::new("/db"), 5))
                }
                other => panic!("case {i}: {other:?}"),
            }
        }
    }
}
