//! [`Db`]: the public handle. Every method is a thin door into the engine
//! ([`crate::engine`]) or the read path ([`crate::read`]); the machinery lives there.

use crate::batch::{check_sizes, WriteBatch};
use crate::engine::Core;
use crate::error::{Error, Result};
use crate::options::Options;
use crate::scan::{self, Iter};
use crate::snapshot::Snapshot;
use crate::stats::{LevelStats, ReadTrace, Stats, TableInfo};
use crate::value::Value;
use crate::write_options::WriteOptions;
use parking_lot::Mutex;
use std::ops::RangeBounds;
use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;

/// An embedded key-value store. Cheap to clone (an `Arc` inside); every clone is the same
/// database, usable from many threads at once.
///
/// Dropping the last handle closes the database like [`close`](Db::close), ignoring errors.
#[derive(Clone)]
pub struct Db {
    handle: Arc<Handle>,
}

struct Handle {
    core: Arc<Core>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        // `close` ends even when a user's file system panics in it, and then lets the panic
        // go on. A drop made while this thread already unwinds must not: a second panic
        // would abort the process. It is logged instead.
        let closed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.core.close(&self.threads)
        }));
        match closed {
            Ok(Ok(())) => {}
            Ok(Err(e)) => log::warn!("{}: error while closing: {e}", self.core.dir().display()),
            Err(payload) if std::thread::panicking() => log::error!(
                "{}: close panicked while the thread was already panicking: {}",
                self.core.dir().display(),
                crate::engine::panic_message(&*payload)
            ),
            Err(payload) => std::panic::resume_unwind(payload),
        }
    }
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db")
            .field("dir", &self.handle.core.dir())
            .finish()
    }
}

impl Db {
    /// Opens (creating if missing) the database in directory `path` with default
    /// [`Options`].
    ///
    /// Errors: [`Error::Locked`] if the directory is open elsewhere, [`Error::Corruption`] if
    /// its files are damaged, [`Error::Io`] on I/O failure.
    pub fn open(path: impl AsRef<Path>) -> Result<Db> {
        Db::open_with(path, Options::default())
    }

    /// Opens the database in `path` read-only: no lock is taken, nothing is written (the
    /// WALs are replayed into memory, all of it kept, in memtables sealed where a writer's
    /// replay would write a table: at `memtable_size` or `target_table_size` bytes, whichever
    /// is smaller, or 14 Mi entries), no background thread runs, and every write returns
    /// [`Error::InvalidArgument`]. Safe on a database that another process has open; if that
    /// process removes files while this handle reads them, reads fail with [`Error::Io`]
    /// rather than answer wrongly. An open that finds a WAL it listed removed (the writer
    /// flushed it meanwhile) starts again, at most 8 times. Shorthand for `open_with(path,
    /// Options::default().read_only(true))`.
    ///
    /// Errors: as [`open_with`](Db::open_with), except that it never returns
    /// [`Error::Locked`], and a directory without a database is [`Error::InvalidArgument`].
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Db> {
        Db::open_with(path, Options::default().read_only(true))
    }

    /// Opens the database in `path` with `opts`: takes the directory lock, replays the
    /// manifest and the WALs (cutting a torn WAL tail, which [`Stats::wal_torn_tails`]
    /// counts), writes the recovered writes to an L0 table, removes files the manifest does not
    /// reference, and starts the background threads.
    ///
    /// Errors: [`Error::InvalidArgument`] for bad options (or a missing database with
    /// `create_if_missing(false)`, or an existing one with `error_if_exists(true)`),
    /// [`Error::Locked`], [`Error::Corruption`] for damaged files (a WAL record that fails its
    /// checksum with valid records after it, a bad manifest or `CURRENT`), [`Error::Io`].
    pub fn open_with(path: impl AsRef<Path>, opts: Options) -> Result<Db> {
        opts.validate()?;
        let dir = path.as_ref().to_path_buf();
        let read_only = opts.read_only;
        let core = Arc::new(Core::open(dir, opts)?);
        let threads = if read_only { Vec::new() } else { core.start()? };
        Ok(Db {
            handle: Arc::new(Handle {
                core,
                threads: Mutex::new(threads),
            }),
        })
    }

    /// The engine, for [`crate::inspect`].
    pub(crate) fn core(&self) -> &Arc<Core> {
        &self.handle.core
    }

    /// Inserts `key` -> `value`, replacing any earlier value. Durable as
    /// [`Options::sync_writes`](crate::Options::sync_writes) says; see
    /// [`insert_with`](Db::insert_with) to choose per write.
    ///
    /// Errors: [`Error::InvalidArgument`] for a key over 64 KiB or a value over 256 MiB
    /// (nothing is written), or on a database opened with [`Db::open_read_only`];
    /// [`Error::Io`] if the WAL write fails (writes stop then). Once writes are stopped (a
    /// failed WAL, manifest or sync write; repeated background flush or compaction failures; a
    /// background thread's panic), [`Error::Poisoned`], or the [`Error::Corruption`] a
    /// background compaction found, until the database is reopened. [`Error::Closed`] after
    /// [`close`](Db::close). [`Error::InvalidArgument`] also when the database's sequence
    /// numbers are exhausted (2^56 writes; not reachable in practice).
    pub fn insert(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        self.insert_with(key, value, WriteOptions::default())
    }

    /// [`insert`](Db::insert) with a per-write choice of durability.
    ///
    /// Errors: as [`insert`](Db::insert).
    pub fn insert_with(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        opts: WriteOptions,
    ) -> Result<()> {
        let (key, value) = (key.as_ref(), value.as_ref());
        check_sizes(key, value).map_err(Error::InvalidArgument)?;
        self.write_with(WriteBatch::one_insert(key, value), opts)
    }

    /// Removes `key` (writes a tombstone). Removing an absent key is not an error.
    ///
    /// Errors: as [`insert`](Db::insert).
    pub fn remove(&self, key: impl AsRef<[u8]>) -> Result<()> {
        self.remove_with(key, WriteOptions::default())
    }

    /// [`remove`](Db::remove) with a per-write choice of durability.
    ///
    /// Errors: as [`insert`](Db::insert).
    pub fn remove_with(&self, key: impl AsRef<[u8]>, opts: WriteOptions) -> Result<()> {
        let key = key.as_ref();
        check_sizes(key, &[]).map_err(Error::InvalidArgument)?;
        self.write_with(WriteBatch::one_remove(key), opts)
    }

    /// Removes every key in `range` (any [`RangeBounds`], as [`range`](Db::range) takes) with
    /// one range tombstone: one WAL record and one memtable entry however many keys the range
    /// holds. Gets, scans and snapshots taken later see none of those keys; snapshots taken
    /// before still see them. Compaction drops the covered versions and, at the bottom of the
    /// tree, the tombstone itself. Durable as [`insert`](Db::insert).
    ///
    /// Errors: [`Error::InvalidArgument`] for a range that holds no key (`a..a`, or inverted
    /// such as `b..a`) or a bound over 64 KiB (nothing is written); otherwise as
    /// [`insert`](Db::insert).
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = siltdb::Db::open(dir.path())?;
    /// for i in 0..100 {
    ///     db.insert(format!("log:{i:04}"), "entry")?;
    /// }
    /// db.remove_range("log:0000".."log:0090")?; // one WAL record
    /// assert_eq!(db.iter().count(), 10);
    /// assert!(db.remove_range("b".."a").is_err()); // inverted: InvalidArgument
    /// # Ok::<(), siltdb::Error>(())
    /// ```
    pub fn remove_range<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Result<()> {
        self.remove_range_with(range, WriteOptions::default())
    }

    /// [`remove_range`](Db::remove_range) with a per-write choice of durability.
    ///
    /// Errors: as [`remove_range`](Db::remove_range).
    pub fn remove_range_with<K: AsRef<[u8]>, R: RangeBounds<K>>(
        &self,
        range: R,
        opts: WriteOptions,
    ) -> Result<()> {
        let mut b = WriteBatch::new();
        b.remove_range(range);
        self.write_with(b, opts)
    }

    /// Applies every operation of `batch` atomically: all become visible at once, and after a
    /// crash either all of them or none are recovered. An empty batch writes nothing (with
    /// `sync_writes` on it still fsyncs the WAL, as [`sync`](Db::sync) does). Durable as
    /// [`Options::sync_writes`](crate::Options::sync_writes) says.
    ///
    /// Errors: [`Error::InvalidArgument`] if the batch holds an over-limit key or value, more
    /// than [`MAX_BATCH_OPS`](crate::MAX_BATCH_OPS) operations or
    /// [`MAX_BATCH_SIZE`](crate::MAX_BATCH_SIZE) bytes, or an empty range (nothing is
    /// written); otherwise as [`insert`](Db::insert).
    pub fn write(&self, batch: WriteBatch) -> Result<()> {
        self.write_with(batch, WriteOptions::default())
    }

    /// [`write`](Db::write) with a per-write choice of durability: with
    /// [`WriteOptions::sync`]`(true)` the WAL is fsynced before this returns, so the batch
    /// survives a power loss even when `sync_writes` is off (concurrent writers share one
    /// fsync); with `sync(false)` it is not, even when `sync_writes` is on. An empty batch
    /// that asks for a sync fsyncs the WAL all the same, so that the writes before it are
    /// durable when it returns.
    ///
    /// Errors: as [`write`](Db::write); a failed fsync is [`Error::Io`] and stops writes
    /// ([`Error::Poisoned`] after it).
    pub fn write_with(&self, batch: WriteBatch, opts: WriteOptions) -> Result<()> {
        if let Some(why) = &batch.invalid {
            return Err(Error::InvalidArgument(why.clone()));
        }
        if batch.is_empty() {
            return self.core().write_empty(opts);
        }
        self.core().write(batch, opts)
    }

    /// The value of `key`, or `None`. The [`Value`] shares the cached block it was found in
    /// (nothing is copied), or, from a memtable, a value over 16 KiB (a smaller one is copied
    /// out, so that it does not keep the memtable's 64 KiB chunk alive); it derefs to `[u8]`.
    ///
    /// Errors: [`Error::InvalidArgument`] for a key over [`MAX_KEY_SIZE`](crate::MAX_KEY_SIZE)
    /// (no write accepts one), [`Error::Corruption`] if a block the read needs is damaged
    /// (never a wrong answer), [`Error::Io`], [`Error::Closed`].
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Value>> {
        let read = self.core().read_path();
        read.check_open()?;
        Ok(read.get(key.as_ref(), None, None)?.map(Value::from_bytes))
    }

    /// True if `key` has a value. Errors as [`get`](Db::get).
    pub fn contains_key(&self, key: impl AsRef<[u8]>) -> Result<bool> {
        let read = self.core().read_path();
        read.check_open()?;
        Ok(read.get(key.as_ref(), None, None)?.is_some())
    }

    /// The same read as [`get`](Db::get), with a [`ReadTrace`] of what it did per table.
    ///
    /// Errors: as [`get`](Db::get).
    pub fn get_traced(&self, key: impl AsRef<[u8]>) -> Result<(Option<Value>, ReadTrace)> {
        let (v, trace) = self.core().read_path().get_traced(key.as_ref(), None)?;
        Ok((v.map(Value::from_bytes), trace))
    }

    /// Entries with keys in `range`, ascending (or descending with `.rev()`), as of the moment
    /// of the call: later writes are not seen. Items are `Result`s: a damaged block ends the
    /// iteration with an error.
    ///
    /// Errors (as items): [`Error::Corruption`] for a damaged block, [`Error::Io`],
    /// [`Error::Closed`] once the database is closed. Bounds of any length are accepted.
    pub fn range<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Iter {
        let read = self.core().read_path();
        let (state, seq) = read.read_point();
        scan::new_iter(read.clone(), state, seq, scan::bounds(&range))
    }

    /// Entries whose keys start with `prefix`, as [`range`](Db::range).
    pub fn prefix(&self, prefix: impl AsRef<[u8]>) -> Iter {
        let read = self.core().read_path();
        let (state, seq) = read.read_point();
        scan::new_iter(
            read.clone(),
            state,
            seq,
            scan::prefix_bounds(prefix.as_ref()),
        )
    }

    /// Every entry, as [`range`](Db::range).
    pub fn iter(&self) -> Iter {
        self.range::<&[u8], _>(..)
    }

    /// A consistent view of the database as of now, for gets and scans; it does not see later
    /// writes. Compaction keeps the versions it needs until it is dropped.
    pub fn snapshot(&self) -> Snapshot {
        let read = self.core().read_path();
        let seq = read.register_snapshot();
        Snapshot::new(read.clone(), seq)
    }

    /// Seals the memtable and waits until it (and any memtable sealed before it) is written
    /// to an L0 table and recorded in the manifest: durable on return.
    ///
    /// Errors: [`Error::Io`] if the flush fails (it is retried in the background; the data
    /// stays in the WAL); once writes are stopped, the error that stopped them, as for
    /// [`insert`](Db::insert) ([`Error::Poisoned`] or [`Error::Corruption`]);
    /// [`Error::Closed`]; [`Error::InvalidArgument`] on a database opened with
    /// [`Db::open_read_only`].
    pub fn flush(&self) -> Result<()> {
        self.core().flush()
    }

    /// Makes every write so far durable against power loss (fsyncs the WAL).
    ///
    /// Errors: [`Error::Io`]; a failed sync stops writes ([`Error::Poisoned`] for later
    /// writes and syncs); once writes are stopped, the error that stopped them, as for
    /// [`insert`](Db::insert); [`Error::Closed`]; [`Error::InvalidArgument`] on a database
    /// opened with [`Db::open_read_only`].
    pub fn sync(&self) -> Result<()> {
        self.core().sync_wal()
    }

    /// Flushes the memtable, then compacts every level down into the deepest level that holds
    /// data (at least L1), rewriting every table: shorthand for `compact_range(..)`.
    /// Afterwards, if no [`Snapshot`] is alive, every key has one version on disk and no
    /// tombstone is left. Returns when done.
    ///
    /// Errors: as [`compact_range`](Db::compact_range).
    pub fn compact(&self) -> Result<()> {
        self.compact_range::<&[u8], _>(..)
    }

    /// Flushes the memtable, then compacts the tables whose keys overlap `range`, level by level
    /// down to the deepest level that holds data, and rewrites the tables of that level the
    /// steps above did not: no table is moved without being rewritten, so overwritten
    /// versions and tombstones that no live [`Snapshot`] can see are dropped and outputs are
    /// cut at [`Options::target_table_size`]. Tables that do not overlap the range are left
    /// as they are, except tables of a lower level that overlap a table being merged into it
    /// (they are merged too). Returns when done and the files it made obsolete are deleted
    /// (those no iterator or read in progress still uses; a [`Snapshot`] holds no file: it
    /// reads the tree as it is when it reads). Below L0 it goes in steps of at most 25 ×
    /// [`Options::target_table_size`] of input each (a table and the tables below it that it
    /// overlaps, when larger, in a step of their own); automatic compaction waits meanwhile,
    /// except that after each step L0 is compacted into L1 if it holds
    /// [`Options::l0_compaction_trigger`] tables (with automatic compaction on), so that writes
    /// made while a long manual compaction runs are not stopped at
    /// [`Options::l0_stop_trigger`] until it ends. A range
    /// that holds no key (`a..a`, inverted, strictly between a key and its successor, or below
    /// the empty key) compacts nothing: after the flush it returns `Ok`. An obsolete file
    /// whose deletion fails stays until the next open
    /// ([`Stats::obsolete_delete_failures`](crate::Stats::obsolete_delete_failures)).
    ///
    /// Errors: [`Error::Corruption`] if an input table is damaged (one of the range's, or an
    /// L0 table of a compaction of L0 between two steps), [`Error::Io`],
    /// [`Error::InvalidArgument`] on a read-only handle, [`Error::Poisoned`] (or the
    /// corruption that stopped writes) if writes stop before or while it runs: it then ends
    /// at its next step, leaving the steps done so far in place, [`Error::Closed`] if the
    /// database is closed meanwhile (it ends after the step under way).
    pub fn compact_range<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Result<()> {
        self.flush()?;
        self.core().compact_range(scan::bounds(&range))
    }

    /// Bytes on disk that the keys in `range` occupy in tables, estimated from the tables'
    /// in-memory indexes without reading any data block: exact for tables wholly inside the
    /// range (their file sizes), to within one data block at each end of the range for the
    /// tables it cuts. On a settled tree (after [`compact`](Db::compact)) that is within a few
    /// percent of the true figure for any range spanning more than a handful of blocks.
    /// Counts every version and tombstone on disk; writes still in memtables are not
    /// counted (flush first to include them). 0 for an empty range or one that holds no key.
    pub fn approximate_size<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> u64 {
        let range = scan::bounds(&range);
        self.core()
            .read_path()
            .load()
            .version
            .approximate_size(&range)
    }

    /// Bytes on disk of every file the database lives in now: the tables of the current tree,
    /// the WALs not yet flushed, the live manifest and `CURRENT`. Files waiting for deletion
    /// (compaction inputs an iterator or a read in progress still uses) are not counted.
    ///
    /// Errors: [`Error::Io`] if the directory cannot be listed or a file opened; on a
    /// read-only handle, [`Error::Corruption`] if `CURRENT` no longer names a manifest.
    pub fn disk_size(&self) -> Result<u64> {
        self.core().disk_size()
    }

    /// Removes the database in directory `path`: every file whose name siltdb uses (tables,
    /// WALs, manifests, `CURRENT`, `LOCK`, temporaries), and nothing else; the directory
    /// itself and any other file in it stay. A directory that does not exist is not an error.
    /// Shorthand for `destroy_with(path, Options::default())`.
    ///
    /// Errors: [`Error::Locked`] if the database is open (a read-only open takes no lock: its
    /// reads fail with [`Error::Io`] once the files are gone), [`Error::Io`].
    pub fn destroy(path: impl AsRef<Path>) -> Result<()> {
        Db::destroy_with(path, Options::default())
    }

    /// [`destroy`](Db::destroy) on the file system of `opts` (the other options are not used).
    ///
    /// Errors: as [`destroy`](Db::destroy).
    pub fn destroy_with(path: impl AsRef<Path>, opts: Options) -> Result<()> {
        crate::engine::destroy::destroy(opts.file_system.as_ref(), path.as_ref())
    }

    /// Waits until no sealed memtable waits for flush and no level is over its compaction
    /// target (with `auto_compaction` on), so that the tree has settled: for benchmarks and
    /// tests that want a stable shape. On return every memtable sealed before the call is in
    /// an L0 table (or below), counted in [`Stats::flushes`], and its WAL is deleted; the files
    /// compactions made obsolete are deleted too, unless an iterator or a read in progress
    /// still uses them (a [`Snapshot`] holds no file). A read-only database runs no background work: it returns at once.
    ///
    /// Errors: [`Error::Closed`]; the poison error once writes are stopped (by a failed WAL
    /// or manifest write, or corruption a compaction found): no compaction runs then, so the
    /// tree will not settle.
    pub fn wait_for_compactions(&self) -> Result<()> {
        self.core().wait_for_compactions()
    }

    /// Cumulative counters, the memory the database pins now, and the current shape of the
    /// tree in [`Stats::levels`].
    pub fn stats(&self) -> Stats {
        let core = self.core();
        let mut s = core.counters().snapshot();
        core.memory_use(&mut s);
        let rs = core.read_path().load();
        s.levels = rs.version.level_stats();
        s.broken_tables = rs.version.broken_tables();
        s.obsolete_delete_failures = core.table_env().obsolete.failures();
        let files = &core.table_env().caches.files;
        s.table_opens = files.opens();
        s.open_files = files.open_files() as u64;
        s.filter_fuse_fallbacks = core
            .table_env()
            .fuse_fallbacks
            .load(std::sync::atomic::Ordering::Relaxed);
        s.memtable_filter_bytes = std::iter::once(&rs.mem)
            .chain(rs.imms.iter())
            .map(|m| m.filter_bytes() as u64)
            .sum();
        s
    }

    /// Every table of the current tree (L0 newest first, deeper levels by key), with its
    /// filter's memory and predicted false-positive rate. A consistent snapshot: safe while
    /// compactions run.
    pub fn tables(&self) -> Vec<TableInfo> {
        self.core().read_path().load().version.table_infos()
    }

    /// The shape of the tree: per level its tables, bytes, filter memory and bits per key.
    pub fn levels(&self) -> Vec<LevelStats> {
        self.core().read_path().load().version.level_stats()
    }

    /// Stops the background threads (a running compaction is abandoned at its next step, and
    /// the tables it wrote are deleted by the close; a running flush is finished first, so
    /// close waits for it), syncs the WAL and releases the directory lock. Nothing is
    /// flushed: the WAL is replayed on the next open. Every handle, iterator and snapshot of
    /// this database fails with [`Error::Closed`] afterwards (reads, writes, scans, snapshots;
    /// [`stats`](Db::stats), [`tables`](Db::tables), [`levels`](Db::levels) and
    /// [`approximate_size`](Db::approximate_size) still answer from what the handle holds, and
    /// [`disk_size`](Db::disk_size) from the directory as it is then). A write that is starting a new
    /// WAL (a full memtable's rotation) when `close` is called finishes that first, so no file
    /// is created or synced after `close` returns. Closing again is a no-op; a `close` called
    /// while another thread closes waits for it and returns the same outcome, once the
    /// directory lock is released (so that its caller may reopen at once).
    ///
    /// Errors: [`Error::Io`] if the final WAL sync fails, or if an earlier append or fsync of
    /// the WAL failed (that failure is returned again: the writes after it may not be durable).
    /// If the file system panics, the panic reaches this call's caller, the database is closed
    /// all the same (lock released), and a `close` that waited for this one gets an error.
    pub fn close(&self) -> Result<()> {
        self.handle.core.close(&self.handle.threads)
    }

    /// The directory of the database.
    pub fn path(&self) -> &Path {
        self.core().dir()
    }
}
