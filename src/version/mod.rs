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

pub use edit::{FileMeta, VersionEdit, NUM_LEVELS};

use crate::error::{Error, Result};
use crate::filename;
use crate::fs::FileSystem;
use crate::iter::{ChunkSource, Chunked, KeyRange};
use crate::sstable::iter::{table_iter, TableIter};
use crate::sstable::TableReader;
use obsolete::ObsoleteFiles;
use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A table of the tree: its manifest metadata and its open reader.
#[derive(Debug)]
pub(crate) struct TableHandle {
    pub(crate) meta: FileMeta,
    /// The open reader, or the error that kept it from opening (reported again on each use).
    table: std::result::Result<Arc<TableReader>, Error>,
    path: PathBuf,
    /// Where the file goes once the table is obsolete and unreferenced.
    reaper: Arc<ObsoleteFiles>,
    obsolete: AtomicBool,
}

impl TableHandle {
    /// Opens the table. A table that cannot be opened is kept as broken: every read that needs
    /// it fails with the error, and the rest of the tree stays readable.
    pub(crate) fn open(
        fs: &Arc<dyn FileSystem>,
        dir: &Path,
        meta: FileMeta,
        reaper: &Arc<ObsoleteFiles>,
    ) -> Arc<TableHandle> {
        let path = filename::table_path(dir, meta.number);
        let table = match TableReader::open(fs.as_ref(), &path) {
            Ok(t) => Ok(Arc::new(t)),
            Err(Error::Io(e)) if e.kind() == io::ErrorKind::NotFound => {
                // A table the manifest lists but the directory lacks: the database is damaged.
                let e = Error::corruption(&path, 0, "table listed in the manifest is missing");
                log::error!("{e}");
                Err(e)
            }
            Err(e) => {
                log::error!("table {} cannot be opened: {e}", path.display());
                Err(e)
            }
        };
        Arc::new(TableHandle {
            meta,
            table,
            path,
            reaper: reaper.clone(),
            obsolete: AtomicBool::new(false),
        })
    }

    /// The open reader, or the error that kept it from opening.
    pub(crate) fn reader(&self) -> Result<&Arc<TableReader>> {
        self.table.as_ref().map_err(Error::clone)
    }

    /// True if the table could not be opened.
    pub(crate) fn is_broken(&self) -> bool {
        self.table.is_err()
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
        match &self.table {
            Ok(t) => t.filter().map_or(0, |f| f.memory_bytes()),
            Err(_) => 0,
        }
    }
}

impl Drop for TableHandle {
    fn drop(&mut self) {
        if self.obsolete.load(Ordering::Acquire) {
            self.reaper.push(std::mem::take(&mut self.path));
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
        self.levels[level].iter().map(|t| t.meta.size).sum()
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
}

impl ChunkSource for LevelTables {
    type Chunk = TableIter;
    fn load(&mut self, i: usize) -> Result<TableIter> {
        let reader = self.tables[i].reader()?.clone();
        Ok(table_iter(reader, self.range.clone()))
    }
}

/// Entries of one table in `range`.
pub(crate) fn table_entries(t: &TableHandle, range: KeyRange) -> Result<TableIter> {
    Ok(table_iter(t.reader()?.clone(), range))
}

/// Entries of a sorted run of tables (a level of L1+, or compaction inputs) in `range`.
pub(crate) fn level_entries(tables: &[Arc<TableHandle>], range: KeyRange) -> Chunked<LevelTables> {
    let tables: Vec<Arc<TableHandle>> = tables
        .iter()
        .filter(|t| range.overlaps(t.meta.smallest_user(), t.meta.largest_user()))
        .cloned()
        .collect();
    let n = tables.len();
    Chunked::new(LevelTables { tables, range }, 0, n)
}
