//! [`Db`]: the public handle, and the engine core under it.
//!
//! Writes: a queue of writers; the one at the front (the leader) takes a group of queued
//! batches, appends them to the WAL as one record (one fsync for all of them when
//! `sync_writes` is on), inserts them into the memtable and publishes their sequence numbers.
//! A full memtable is sealed, a new WAL started, and the flush thread turns it into an L0
//! table; the compaction thread keeps the levels in shape.
//!
//! Reads: a get loads the current [`ReadState`] (memtables and version, one atomic pointer,
//! no lock), hashes the key once, and walks memtables, L0 newest first, then one table per
//! deeper level, asking each table's in-memory filter before touching its file.

use crate::batch::{check_sizes, WriteBatch, MAX_KEY_SIZE};
use crate::compaction::{self, picker, JobContext, JobOutput};
use crate::error::{io_context, Error, Result};
use crate::filename::{self, FileKind};
use crate::filter::hash_key;
use crate::fs::{FileLock, FileSystem};
use crate::key::{SeqNo, ValueKind, MAX_SEQ};
use crate::memtable::{Lookup, Memtable};
use crate::options::Options;
use crate::scan::{self, Iter};
use crate::snapshot::Snapshot;
use crate::sstable::{ReadCost, TableLookup};
use crate::stats::{
    Counters, GetCounters, LevelStats, ReadTrace, Stats, TableInfo, TableOutcome, TableVisit,
};
use crate::version::set::{self as vset, VersionSet};
use crate::version::{TableHandle, Version, VersionEdit, NUM_LEVELS};
use crate::wal::{self, WalWriter};
use arc_swap::ArcSwap;
use bytes::Bytes;
use parking_lot::{Condvar, Mutex, MutexGuard};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

/// Most bytes of queued batches one leader commits in one WAL record.
const MAX_GROUP_BYTES: usize = 1 << 20;

/// Consecutive failures of background jobs after which writes are refused: writers would
/// otherwise wait forever for room that never comes.
const MAX_BACKGROUND_FAILURES: u32 = 8;

/// What a read sees: the memtables and the version, swapped atomically as a whole.
#[derive(Debug)]
pub(crate) struct ReadState {
    pub(crate) mem: Arc<Memtable>,
    /// Sealed memtables waiting for flush, newest first.
    pub(crate) imms: Vec<Arc<Memtable>>,
    pub(crate) version: Arc<Version>,
}

enum PendingKind {
    Write(WriteBatch),
    /// Seal the memtable even if it is not full (for `flush`).
    Seal,
}

struct Pending {
    id: u64,
    kind: PendingKind,
}

/// The outcome of a queued write, kept until its writer collects it.
enum Outcome {
    Ok,
    Err(Error),
}

/// Everything guarded by the database mutex.
struct State {
    queue: VecDeque<Pending>,
    next_id: u64,
    leader_active: bool,
    results: BTreeMap<u64, Outcome>,
    mem: Arc<Memtable>,
    /// Sealed memtables, oldest first.
    imms: VecDeque<Arc<Memtable>>,
    version: Arc<Version>,
    last_seq: SeqNo,
    /// Memtables sealed so far, and flushed so far (for `flush` to wait on).
    sealed: u64,
    flushed: u64,
    flush_error: Option<String>,
    /// Flushes that failed so far.
    flush_failures: u64,
    /// Why writes are refused, if they are.
    poisoned: Option<PoisonReason>,
    shutting_down: bool,
    closed: bool,
    manual_compaction: Option<u64>,
    manual_done: u64,
    manual_error: Option<(u64, String)>,
    next_manual: u64,
    /// True while the compaction thread runs a job.
    compaction_running: bool,
}

#[derive(Clone, Debug)]
enum PoisonReason {
    Io(String),
    Corruption {
        file: PathBuf,
        offset: u64,
        detail: String,
    },
}

impl PoisonReason {
    fn to_error(&self) -> Error {
        match self {
            PoisonReason::Io(m) => Error::Poisoned(m.clone()),
            PoisonReason::Corruption {
                file,
                offset,
                detail,
            } => Error::Corruption {
                file: file.clone(),
                offset: *offset,
                detail: format!("writes are stopped: a background job found corruption: {detail}"),
            },
        }
    }
}

/// The engine shared by handles, iterators, snapshots and background threads.
pub(crate) struct Core {
    dir: PathBuf,
    fs: Arc<dyn FileSystem>,
    opts: Options,
    read_state: ArcSwap<ReadState>,
    state: Mutex<State>,
    writer_cv: Condvar,
    room_cv: Condvar,
    bg_cv: Condvar,
    done_cv: Condvar,
    wal: Mutex<Option<WalWriter>>,
    versions: Mutex<VersionSet>,
    file_numbers: Arc<AtomicU64>,
    visible_seq: AtomicU64,
    snapshots: Mutex<BTreeMap<SeqNo, usize>>,
    pub(crate) counters: Counters,
    shutting_down: AtomicBool,
    lock: Mutex<Option<Box<dyn FileLock>>>,
    /// Tables being written by running jobs (see [`JobContext::pending_outputs`]).
    pending_outputs: Mutex<BTreeSet<u64>>,
    /// Every table handle alive, current or held by an old reader, by number.
    tables: Mutex<HashMap<u64, Weak<TableHandle>>>,
}

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
        if let Err(e) = close_core(&self.core, &self.threads) {
            log::warn!("{}: error while closing: {e}", self.core.dir.display());
        }
    }
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db")
            .field("dir", &self.handle.core.dir)
            .finish()
    }
}

fn close_core(core: &Arc<Core>, threads: &Mutex<Vec<JoinHandle<()>>>) -> Result<()> {
    {
        let mut st = core.state.lock();
        if st.closed {
            return Ok(());
        }
        st.shutting_down = true;
        core.shutting_down.store(true, Ordering::SeqCst);
    }
    core.notify_all();
    for t in threads.lock().drain(..) {
        let _ = t.join();
    }
    // Take the WAL away so that a leader still inside `lead` fails with `Closed` instead of
    // appending after the final sync.
    let res = match core.wal.lock().take() {
        Some(mut w) => w.sync(),
        None => Ok(()),
    };
    core.state.lock().closed = true;
    core.notify_all();
    *core.lock.lock() = None;
    res
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
    /// WALs are replayed into memory), no background thread runs, and every write returns
    /// [`Error::InvalidArgument`]. Safe on a database that another process has open; if that
    /// process removes files while this handle reads them, reads fail with [`Error::Io`]
    /// rather than answer wrongly. Shorthand for `open_with(path,
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
    /// `create_if_missing(false)`), [`Error::Locked`], [`Error::Corruption`] for damaged
    /// files (a WAL record that fails its checksum with valid records after it, a bad
    /// manifest or `CURRENT`), [`Error::Io`].
    pub fn open_with(path: impl AsRef<Path>, opts: Options) -> Result<Db> {
        opts.validate()?;
        let dir = path.as_ref().to_path_buf();
        let read_only = opts.read_only;
        let core = Arc::new(Core::open(dir, opts)?);
        let mut threads = Vec::new();
        if read_only {
            return Ok(Db {
                handle: Arc::new(Handle {
                    core,
                    threads: Mutex::new(threads),
                }),
            });
        }
        let c = core.clone();
        threads.push(
            std::thread::Builder::new()
                .name("siltdb-flush".into())
                .spawn(move || c.clone().guarded("flush", |c| c.flush_loop()))
                .map_err(Error::Io)?,
        );
        let c = core.clone();
        threads.push(
            std::thread::Builder::new()
                .name("siltdb-compact".into())
                .spawn(move || c.clone().guarded("compaction", |c| c.compaction_loop()))
                .map_err(Error::Io)?,
        );
        core.notify_all();
        Ok(Db {
            handle: Arc::new(Handle {
                core,
                threads: Mutex::new(threads),
            }),
        })
    }

    pub(crate) fn core(&self) -> &Arc<Core> {
        &self.handle.core
    }

    /// Inserts `key` -> `value`, replacing any earlier value.
    ///
    /// Errors: [`Error::InvalidArgument`] for a key over 64 KiB or a value over 256 MiB
    /// (nothing is written), [`Error::Poisoned`] after an earlier WAL or manifest failure,
    /// [`Error::Closed`], [`Error::Io`].
    pub fn insert(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        let (key, value) = (key.as_ref(), value.as_ref());
        check_sizes(key, value).map_err(Error::InvalidArgument)?;
        let mut b = WriteBatch::new();
        b.insert(key, value);
        self.write(b)
    }

    /// Removes `key` (writes a tombstone). Removing an absent key is not an error.
    ///
    /// Errors: as [`insert`](Db::insert).
    pub fn remove(&self, key: impl AsRef<[u8]>) -> Result<()> {
        let key = key.as_ref();
        check_sizes(key, &[]).map_err(Error::InvalidArgument)?;
        let mut b = WriteBatch::new();
        b.remove(key);
        self.write(b)
    }

    /// Applies every operation of `batch` atomically: all become visible at once, and after a
    /// crash either all of them or none are recovered. An empty batch is a no-op.
    ///
    /// Errors: [`Error::InvalidArgument`] if the batch holds an over-limit key or value
    /// (nothing is written); otherwise as [`insert`](Db::insert).
    pub fn write(&self, batch: WriteBatch) -> Result<()> {
        if let Some(why) = &batch.invalid {
            return Err(Error::InvalidArgument(why.clone()));
        }
        if batch.is_empty() {
            return self.core().check_writable();
        }
        self.core().submit(PendingKind::Write(batch))
    }

    /// The value of `key`, or `None`.
    ///
    /// Errors: [`Error::Corruption`] if a block the read needs is damaged (never a wrong
    /// answer), [`Error::Io`].
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        let core = self.core();
        core.check_open()?;
        Ok(core.get_at(key.as_ref(), None, None)?.map(|b| b.to_vec()))
    }

    /// True if `key` has a value. Errors as [`get`](Db::get).
    pub fn contains_key(&self, key: impl AsRef<[u8]>) -> Result<bool> {
        let core = self.core();
        core.check_open()?;
        Ok(core.get_at(key.as_ref(), None, None)?.is_some())
    }

    /// The same read as [`get`](Db::get), with a [`ReadTrace`] of what it did per table.
    pub fn get_traced(&self, key: impl AsRef<[u8]>) -> Result<(Option<Vec<u8>>, ReadTrace)> {
        let core = self.core();
        core.check_open()?;
        let mut trace = ReadTrace::default();
        let v = core.get_at(key.as_ref(), None, Some(&mut trace))?;
        Ok((v.map(|b| b.to_vec()), trace))
    }

    /// Entries with keys in `range`, ascending (or descending with `.rev()`), as of the moment
    /// of the call: later writes are not seen. Items are `Result`s: a damaged block ends the
    /// iteration with an error.
    pub fn range<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Iter {
        let core = self.core();
        let (state, seq) = core.read_point();
        scan::new_iter(core.clone(), state, seq, scan::bounds(&range), None)
    }

    /// Entries whose keys start with `prefix`, as [`range`](Db::range).
    pub fn prefix(&self, prefix: impl AsRef<[u8]>) -> Iter {
        let core = self.core();
        let (state, seq) = core.read_point();
        scan::new_iter(
            core.clone(),
            state,
            seq,
            scan::prefix_bounds(prefix.as_ref()),
            None,
        )
    }

    /// Every entry, as [`range`](Db::range).
    pub fn iter(&self) -> Iter {
        self.range::<&[u8], _>(..)
    }

    /// A consistent view of the database as of now, for gets and scans; it does not see later
    /// writes. Compaction keeps the versions it needs until it is dropped.
    pub fn snapshot(&self) -> Snapshot {
        let core = self.core();
        let seq = core.register_snapshot();
        Snapshot::new(core.clone(), seq)
    }

    /// Seals the memtable and waits until it (and any memtable sealed before it) is written
    /// to an L0 table and recorded in the manifest: durable on return.
    ///
    /// Errors: [`Error::Io`] if the flush fails (it is retried in the background; the data
    /// stays in the WAL), [`Error::Poisoned`], [`Error::Closed`].
    pub fn flush(&self) -> Result<()> {
        self.core().flush()
    }

    /// Makes every write so far durable against power loss (fsyncs the WAL).
    ///
    /// Errors: [`Error::Io`]; a failed sync poisons the database ([`Error::Poisoned`] for
    /// later writes).
    pub fn sync(&self) -> Result<()> {
        self.core().sync_wal()
    }

    /// Flushes the memtable, then compacts every level down into the deepest level that holds
    /// data (at least L1), leaving one sorted run. Returns when done.
    ///
    /// Errors: [`Error::Corruption`] if an input table is damaged, [`Error::Io`],
    /// [`Error::Closed`].
    pub fn compact(&self) -> Result<()> {
        self.flush()?;
        self.core().compact_all()
    }

    /// Waits until no sealed memtable waits for flush and no level is over its compaction
    /// target (with `auto_compaction` on), so that the tree has settled: for benchmarks and
    /// tests that want a stable shape.
    ///
    /// Errors: [`Error::Closed`]; the poison error if background work stopped writes.
    pub fn wait_for_compactions(&self) -> Result<()> {
        self.core().wait_for_compactions()
    }

    /// Cumulative counters, and the current shape of the tree in [`Stats::levels`].
    pub fn stats(&self) -> Stats {
        let core = self.core();
        let mut s = core.counters.snapshot();
        let rs = core.read_state.load();
        s.levels = level_stats(&rs.version);
        s.broken_tables = rs
            .version
            .levels
            .iter()
            .flatten()
            .filter(|t| t.is_broken())
            .count() as u64;
        s
    }

    /// Every table of the current tree (L0 newest first, deeper levels by key), with its
    /// filter's memory and predicted false-positive rate. A consistent snapshot: safe while
    /// compactions run.
    pub fn tables(&self) -> Vec<TableInfo> {
        let rs = self.core().read_state.load();
        version_tables_by_level(&rs.version)
            .map(|(level, t)| {
                let filter = t.reader().ok().and_then(|r| r.filter().cloned());
                TableInfo {
                    level,
                    table_id: t.number(),
                    bytes: t.meta.size,
                    entries: t.meta.entries,
                    smallest: t.meta.smallest_user().to_vec(),
                    largest: t.meta.largest_user().to_vec(),
                    filter_bytes: filter.as_ref().map_or(0, |f| f.memory_bytes() as u64),
                    filter_bits_per_key: filter.as_ref().map_or(0.0, |f| f.bits_per_key()),
                    predicted_fpr: filter.as_ref().map_or(1.0, |f| f.predicted_fpr()),
                }
            })
            .collect()
    }

    /// The shape of the tree: per level its tables, bytes, filter memory and bits per key.
    pub fn levels(&self) -> Vec<LevelStats> {
        level_stats(&self.core().read_state.load().version)
    }

    /// Stops the background threads (a running flush or compaction is abandoned and cleaned
    /// up on the next open), syncs the WAL and releases the directory lock. Nothing is
    /// flushed: the WAL is replayed on the next open. Every handle, iterator and snapshot of
    /// this database fails with [`Error::Closed`] afterwards. Closing twice is a no-op.
    ///
    /// Errors: [`Error::Io`] if the final WAL sync fails.
    pub fn close(&self) -> Result<()> {
        close_core(&self.handle.core, &self.handle.threads)
    }

    /// The directory of the database.
    pub fn path(&self) -> &Path {
        &self.core().dir
    }

    /// Checks the invariants of the tree (L1+ sorted and not overlapping; every table file in
    /// the directory referenced by the current version) and returns a description of the
    /// first violation. For tests and the CLI.
    #[doc(hidden)]
    pub fn check_invariants(&self) -> std::result::Result<(), String> {
        self.core().check_invariants()
    }
}

fn level_stats(v: &Version) -> Vec<LevelStats> {
    v.levels
        .iter()
        .enumerate()
        .map(|(level, tables)| {
            let mut s = LevelStats {
                level,
                tables: tables.len(),
                ..LevelStats::default()
            };
            let mut fpr_sum = 0.0;
            let mut fpr_max: f64 = 0.0;
            for t in tables {
                s.bytes += t.meta.size;
                s.entries += t.meta.entries;
                s.filter_bytes += t.filter_bytes() as u64;
                if let Ok(r) = t.reader() {
                    s.filter_keys += r.properties().user_keys;
                    let fpr = r.filter().map_or(1.0, |f| f.predicted_fpr());
                    fpr_sum += fpr;
                    fpr_max = fpr_max.max(fpr);
                }
            }
            if s.filter_keys > 0 {
                s.bits_per_key = s.filter_bytes as f64 * 8.0 / s.filter_keys as f64;
            }
            // An absent key meets every L0 table, and one table of a deeper level (the
            // average table, weighted by keys, is what a uniform absent key meets).
            s.expected_fpr = if level == 0 {
                fpr_sum
            } else if tables.is_empty() {
                0.0
            } else {
                weighted_level_fpr(tables)
            };
            s
        })
        .collect()
}

fn weighted_level_fpr(tables: &[Arc<TableHandle>]) -> f64 {
    let mut num = 0.0;
    let mut den = 0.0;
    for t in tables {
        let w = t.meta.entries.max(1) as f64;
        let fpr = t
            .reader()
            .ok()
            .and_then(|r| r.filter().map(|f| f.predicted_fpr()))
            .unwrap_or(1.0);
        num += w * fpr;
        den += w;
    }
    if den == 0.0 {
        0.0
    } else {
        num / den
    }
}

impl Core {
    fn open(dir: PathBuf, opts: Options) -> Result<Core> {
        let fs = opts.file_system.clone();
        let exists = fs.exists(&dir.join(filename::CURRENT));
        if !exists && (opts.read_only || !opts.create_if_missing) {
            return Err(Error::InvalidArgument(format!(
                "no database in {}{}",
                dir.display(),
                if opts.read_only {
                    " (a read-only open never creates one)"
                } else {
                    " and create_if_missing is false"
                }
            )));
        }
        let lock = if opts.read_only {
            None
        } else {
            fs.create_dir_all(&dir)
                .map_err(|e| io_context("create directory", &dir, e))?;
            Some(fs.lock(&dir.join(filename::LOCK)).map_err(|e| {
                if e.kind() == std::io::ErrorKind::WouldBlock {
                    Error::Locked
                } else {
                    io_context("lock", &dir.join(filename::LOCK), e)
                }
            })?)
        };
        let files = vset::list_files(fs.as_ref(), &dir)?;
        let mut versions = match vset::read_current(fs.as_ref(), &dir)? {
            Some(number) => {
                let st = vset::replay_manifest(fs.as_ref(), &dir, number)?;
                VersionSet::from_state(fs.clone(), &dir, &st)
            }
            None => {
                if let Some((name, _)) = files
                    .iter()
                    .find(|(_, k)| matches!(k, FileKind::Table(_) | FileKind::Wal(_)))
                {
                    return Err(Error::corruption(
                        &dir.join(filename::CURRENT),
                        0,
                        format!("CURRENT is missing but the directory holds {name}"),
                    ));
                }
                log::info!("creating a new database in {}", dir.display());
                VersionSet::new_empty(fs.clone(), &dir)
            }
        };
        for (_, k) in &files {
            if let FileKind::Table(n)
            | FileKind::Wal(n)
            | FileKind::Manifest(n)
            | FileKind::Temp(n) = k
            {
                versions.mark_file_number_used(*n);
            }
        }

        // Replay the WALs that the manifest does not cover, oldest first.
        let counters = Counters::default();
        let log_number = versions.log_number();
        let mut wals: Vec<u64> = files
            .iter()
            .filter_map(|(_, k)| match k {
                FileKind::Wal(n) if *n >= log_number => Some(*n),
                _ => None,
            })
            .collect();
        wals.sort_unstable();
        let recovered = Memtable::new(0);
        let mut last_seq = versions.last_sequence();
        for &n in &wals {
            let path = filename::wal_path(&dir, n);
            let tail = wal::replay(fs.as_ref(), &path, n, |batch| {
                // Sequence numbers continue across the manifest and the WALs without a gap;
                // a gap means writes were lost (a WAL, or a manifest edit that retired one).
                if !batch.ops.is_empty() && batch.first_seq > last_seq + 1 {
                    return Err(Error::corruption(
                        &path,
                        batch.offset,
                        format!(
                            "sequence numbers {}..{} are missing before this record: a WAL or a manifest edit was lost",
                            last_seq + 1,
                            batch.first_seq - 1
                        ),
                    ));
                }
                let mut seq = batch.first_seq;
                for op in batch.ops {
                    recovered.insert(op.key, seq, op.kind, op.value);
                    seq += 1;
                }
                last_seq = last_seq.max(seq.saturating_sub(1));
                Ok(())
            })?;
            if let Some(at) = tail.torn_at {
                log::warn!(
                    "{}: cut a torn tail of {} bytes at offset {at}",
                    path.display(),
                    tail.dropped_bytes
                );
                Counters::add(&counters.wal_torn_tails, 1);
                Counters::add(&counters.wal_torn_bytes, tail.dropped_bytes);
            }
            log::info!("{}: replayed", path.display());
        }

        Self::check_orphans(fs.as_ref(), &dir, &files, &versions, last_seq)?;

        let shutting_down = AtomicBool::new(false);
        let pending_outputs = Mutex::new(BTreeSet::new());
        let (mem, wal_writer) = if opts.read_only {
            // Nothing is written: the replayed writes stay in memory.
            (Arc::new(recovered), None)
        } else {
            // The replayed WALs may hold bytes a crash left only in the page cache. Make them
            // durable before their contents go to a table: otherwise a power loss during this
            // open could leave a synced table holding writes that the WALs no longer hold.
            for &n in &wals {
                let path = filename::wal_path(&dir, n);
                fs.sync_file(&path)
                    .map_err(|e| io_context("sync", &path, e))?;
            }
            let new_wal = Self::recover_for_writing(
                &fs,
                &dir,
                &opts,
                &mut versions,
                &recovered,
                last_seq,
                &counters,
                &shutting_down,
                &pending_outputs,
            )?;
            let wal_path = filename::wal_path(&dir, new_wal);
            let writer = WalWriter::create(fs.as_ref(), &wal_path, new_wal)?;
            fs.sync_dir(&dir)
                .map_err(|e| io_context("sync directory", &dir, e))?;
            Self::remove_unreferenced(fs.as_ref(), &dir, &versions, new_wal)?;
            (Arc::new(Memtable::new(new_wal)), Some(writer))
        };

        let version = versions.current();
        let file_numbers = versions.file_numbers();
        let tables = version_tables(&version)
            .map(|t| (t.number(), Arc::downgrade(t)))
            .collect();
        let state = State {
            queue: VecDeque::new(),
            next_id: 0,
            leader_active: false,
            results: BTreeMap::new(),
            mem: mem.clone(),
            imms: VecDeque::new(),
            version: version.clone(),
            last_seq,
            sealed: 0,
            flushed: 0,
            flush_error: None,
            flush_failures: 0,
            poisoned: None,
            shutting_down: false,
            closed: false,
            manual_compaction: None,
            manual_done: 0,
            manual_error: None,
            next_manual: 0,
            compaction_running: false,
        };
        Ok(Core {
            read_state: ArcSwap::from_pointee(ReadState {
                mem,
                imms: Vec::new(),
                version,
            }),
            dir,
            fs,
            opts,
            state: Mutex::new(state),
            writer_cv: Condvar::new(),
            room_cv: Condvar::new(),
            bg_cv: Condvar::new(),
            done_cv: Condvar::new(),
            wal: Mutex::new(wal_writer),
            versions: Mutex::new(versions),
            file_numbers,
            visible_seq: AtomicU64::new(last_seq),
            snapshots: Mutex::new(BTreeMap::new()),
            counters,
            shutting_down,
            lock: Mutex::new(lock),
            pending_outputs,
            tables: Mutex::new(tables),
        })
    }

    /// Starts a fresh manifest for this session, writes the replayed writes to an L0 table
    /// and records that the old WALs are no longer needed. Returns the number of the WAL to
    /// write to next.
    #[allow(clippy::too_many_arguments)]
    fn recover_for_writing(
        fs: &Arc<dyn FileSystem>,
        dir: &Path,
        opts: &Options,
        versions: &mut VersionSet,
        recovered: &Memtable,
        last_seq: SeqNo,
        counters: &Counters,
        shutting_down: &AtomicBool,
        pending_outputs: &Mutex<BTreeSet<u64>>,
    ) -> Result<u64> {
        versions.write_new_manifest()?;
        let new_wal = versions.new_file_number();
        let numbers = versions.file_numbers();
        let ctx = JobContext {
            fs,
            dir,
            opts,
            file_numbers: &numbers,
            shutting_down,
            pending_outputs,
        };
        let out = compaction::flush_memtable(&ctx, recovered, &versions.current())?;
        let mut edit = out.edit;
        edit.log_number = Some(new_wal);
        edit.last_sequence = Some(last_seq);
        versions.log_and_apply(edit, &out.opened)?;
        pending_outputs.lock().clear();
        if out.bytes_written > 0 {
            Counters::add(&counters.flushes, 1);
            Counters::add(&counters.bytes_flushed, out.bytes_written);
            log::info!("recovered {} entries into an L0 table", recovered.len());
        }
        Ok(new_wal)
    }

    /// Tables on disk that the manifest does not list are outputs of jobs that never committed,
    /// and go. But one that holds writes newer than anything the manifest and the WALs record
    /// is evidence of a lost manifest edit: deleting it would lose those writes for good.
    fn check_orphans(
        fs: &dyn FileSystem,
        dir: &Path,
        files: &[(String, FileKind)],
        versions: &VersionSet,
        last_seq: SeqNo,
    ) -> Result<()> {
        let live: HashSet<u64> = versions.current().live_numbers().into_iter().collect();
        for (name, kind) in files {
            let FileKind::Table(n) = kind else { continue };
            if live.contains(n) {
                continue;
            }
            let path = dir.join(name);
            // One that does not open was cut short by a crash: nothing to account for.
            if let Ok(t) = crate::sstable::TableReader::open(fs, &path) {
                let p = t.properties();
                if p.entries > 0 && p.max_seq > last_seq {
                    return Err(Error::corruption(
                        &path,
                        0,
                        format!(
                            "table is not in the manifest but holds writes up to sequence {} \
                             while the manifest and WALs end at {last_seq}: a manifest edit was lost",
                            p.max_seq
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Removes the files the manifest does not reference: old WALs and manifests,
    /// temporaries, and tables left by jobs that never committed.
    fn remove_unreferenced(
        fs: &dyn FileSystem,
        dir: &Path,
        versions: &VersionSet,
        wal: u64,
    ) -> Result<()> {
        let live: HashSet<u64> = versions.current().live_numbers().into_iter().collect();
        let current_manifest = versions.manifest_number();
        for (name, kind) in vset::list_files(fs, dir)? {
            let obsolete = match kind {
                FileKind::Table(n) => !live.contains(&n),
                FileKind::Wal(n) => n != wal,
                FileKind::Manifest(n) => Some(n) != current_manifest,
                FileKind::Temp(_) => true,
                FileKind::Current | FileKind::Lock => false,
            };
            if obsolete {
                match fs.remove(&dir.join(&name)) {
                    Ok(()) => log::info!("removed {name}: not referenced by the manifest"),
                    Err(e) => log::warn!("could not remove {name}: {e}"),
                }
            }
        }
        Ok(())
    }

    /// Runs a background loop; if it panics (a bug), writes are refused with the panic message
    /// instead of waiting forever for work that will never finish.
    fn guarded(self: Arc<Self>, what: &str, body: impl FnOnce(Arc<Self>)) {
        let core = self.clone();
        if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(self))) {
            let msg = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            log::error!("{}: {what} thread panicked: {msg}", core.dir.display());
            Counters::add(&core.counters.background_errors, 1);
            let mut st = core.state.lock();
            core.poison(
                &mut st,
                PoisonReason::Io(format!("the {what} thread panicked: {msg}")),
            );
            drop(st);
            core.notify_all();
        }
    }

    fn notify_all(&self) {
        self.writer_cv.notify_all();
        self.room_cv.notify_all();
        self.bg_cv.notify_all();
        self.done_cv.notify_all();
    }

    fn publish(&self, st: &State) {
        self.read_state.store(Arc::new(ReadState {
            mem: st.mem.clone(),
            imms: st.imms.iter().rev().cloned().collect(),
            version: st.version.clone(),
        }));
    }

    pub(crate) fn load_read_state(&self) -> Arc<ReadState> {
        self.read_state.load_full()
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.shutting_down.load(Ordering::Acquire)
    }

    fn check_open(&self) -> Result<()> {
        if self.is_closed() {
            Err(Error::Closed)
        } else {
            Ok(())
        }
    }

    fn check_writable(&self) -> Result<()> {
        let st = self.state.lock();
        self.writable(&st)
    }

    fn writable(&self, st: &State) -> Result<()> {
        if st.shutting_down || st.closed {
            return Err(Error::Closed);
        }
        if self.opts.read_only {
            return Err(Error::InvalidArgument(
                "the database was opened read-only".into(),
            ));
        }
        if let Some(p) = &st.poisoned {
            return Err(p.to_error());
        }
        Ok(())
    }

    fn poison(&self, st: &mut State, reason: PoisonReason) {
        if st.poisoned.is_none() {
            log::error!(
                "{}: refusing further writes: {reason:?}",
                self.dir.display()
            );
            st.poisoned = Some(reason);
        }
    }

    // ---------------------------------------------------------------- writes

    fn submit(&self, kind: PendingKind) -> Result<()> {
        let mut st = self.state.lock();
        self.writable(&st)?;
        let id = st.next_id;
        st.next_id += 1;
        st.queue.push_back(Pending { id, kind });
        loop {
            if let Some(outcome) = st.results.remove(&id) {
                return match outcome {
                    Outcome::Ok => Ok(()),
                    Outcome::Err(e) => Err(e),
                };
            }
            if !st.leader_active && st.queue.front().is_some_and(|p| p.id == id) {
                break;
            }
            self.writer_cv.wait(&mut st);
        }
        st.leader_active = true;
        let res = self.lead(&mut st);
        st.leader_active = false;
        self.writer_cv.notify_all();
        let outcome = st.results.remove(&id);
        drop(st);
        match (res, outcome) {
            (Err(e), _) => Err(e),
            (Ok(()), Some(Outcome::Err(e))) => Err(e),
            (Ok(()), _) => Ok(()),
        }
    }

    /// Runs one group as leader. Holds the state lock except while writing the WAL.
    fn lead(&self, st: &mut MutexGuard<'_, State>) -> Result<()> {
        let seal = matches!(st.queue.front().map(|p| &p.kind), Some(PendingKind::Seal));
        if let Err(e) = self.make_room(st, seal) {
            // Fail the leader's own request only; others retry as leaders.
            if let Some(p) = st.queue.pop_front() {
                st.results.insert(p.id, Outcome::Err(e));
            }
            return Ok(());
        }
        if seal {
            if let Some(p) = st.queue.pop_front() {
                st.results.insert(p.id, Outcome::Ok);
            }
            return Ok(());
        }
        // Gather a group of writes.
        let mut group: Vec<(u64, WriteBatch)> = Vec::new();
        let mut bytes = 0usize;
        while let Some(front) = st.queue.front() {
            let PendingKind::Write(b) = &front.kind else {
                break;
            };
            if !group.is_empty() && bytes + b.ops.len() > MAX_GROUP_BYTES {
                break;
            }
            bytes += b.ops.len();
            let Some(Pending {
                id,
                kind: PendingKind::Write(b),
            }) = st.queue.pop_front()
            else {
                break;
            };
            group.push((id, b));
        }
        let count: u64 = group.iter().map(|(_, b)| u64::from(b.count)).sum();
        let first_seq = st.last_seq + 1;
        if first_seq + count > MAX_SEQ {
            let e = Error::InvalidArgument("sequence numbers exhausted".into());
            for (id, _) in group {
                st.results.insert(id, Outcome::Err(clone_error(&e)));
            }
            return Ok(());
        }
        let mem = st.mem.clone();
        let result = MutexGuard::unlocked(st, || -> Result<()> {
            let mut wal = self.wal.lock();
            let w = wal.as_mut().ok_or(Error::Closed)?;
            let parts: Vec<&[u8]> = group.iter().map(|(_, b)| b.ops.as_slice()).collect();
            w.append(first_seq, count as u32, &parts)?;
            if self.opts.sync_writes {
                w.sync()?;
            }
            drop(wal);
            let mut seq = first_seq;
            for (_, b) in &group {
                let ops = wal::decode_ops(&b.ops, b.count).ok_or_else(|| {
                    Error::InvalidArgument("write batch encoding is damaged".into())
                })?;
                for op in ops {
                    let value = match op.kind {
                        ValueKind::Put => Bytes::copy_from_slice(op.value),
                        ValueKind::Delete => Bytes::new(),
                    };
                    mem.insert(Bytes::copy_from_slice(op.key), seq, op.kind, value);
                    seq += 1;
                }
            }
            Ok(())
        });
        match result {
            Ok(()) => {
                st.last_seq = first_seq + count - 1;
                self.visible_seq.store(st.last_seq, Ordering::Release);
                let user_bytes: u64 = group.iter().map(|(_, b)| b.user_bytes).sum();
                Counters::add(&self.counters.user_bytes_written, user_bytes);
                for (id, _) in group {
                    st.results.insert(id, Outcome::Ok);
                }
            }
            Err(e) => {
                // The WAL may hold part of the record: never acknowledge, never retry.
                st.last_seq = first_seq + count - 1;
                self.poison(st, PoisonReason::Io(e.to_string()));
                for (id, _) in group {
                    st.results.insert(id, Outcome::Err(clone_error(&e)));
                }
            }
        }
        Ok(())
    }

    /// Makes sure the memtable has room (sealing it if full, or if `force`), waiting while
    /// too many memtables wait for flush or L0 is at the stop trigger.
    fn make_room(&self, st: &mut MutexGuard<'_, State>, mut force: bool) -> Result<()> {
        let mut slowed = false;
        loop {
            self.writable(st)?;
            let l0 = st.version.levels[0].len();
            if self.opts.auto_compaction && !slowed && l0 >= self.opts.l0_slowdown_trigger {
                slowed = true;
                Counters::add(&self.counters.write_slowdowns, 1);
                MutexGuard::unlocked(st, || std::thread::sleep(Duration::from_millis(1)));
                continue;
            }
            if !force && st.mem.approx_bytes() < self.opts.memtable_size {
                return Ok(());
            }
            if force && st.mem.is_empty() {
                return Ok(());
            }
            if st.imms.len() >= self.opts.max_immutable_memtables
                || (self.opts.auto_compaction && l0 >= self.opts.l0_stop_trigger)
            {
                Counters::add(&self.counters.write_stops, 1);
                self.bg_cv.notify_all();
                self.room_cv.wait_for(st, Duration::from_millis(100));
                continue;
            }
            self.seal_memtable(st)?;
            force = false;
        }
    }

    fn seal_memtable(&self, st: &mut MutexGuard<'_, State>) -> Result<()> {
        let number = self.file_numbers.fetch_add(1, Ordering::SeqCst);
        let path = filename::wal_path(&self.dir, number);
        let res = (|| -> Result<()> {
            let new_wal = WalWriter::create(self.fs.as_ref(), &path, number)?;
            self.fs
                .sync_dir(&self.dir)
                .map_err(|e| io_context("sync directory", &self.dir, e))?;
            let mut wal = self.wal.lock();
            if let Some(old) = wal.as_mut() {
                // Sync the old WAL so that a power loss keeps a prefix of the history: the
                // new WAL may be synced later while the old one is not.
                old.sync()?;
            }
            *wal = Some(new_wal);
            Ok(())
        })();
        if let Err(e) = res {
            self.poison(st, PoisonReason::Io(e.to_string()));
            return Err(e);
        }
        let old = std::mem::replace(&mut st.mem, Arc::new(Memtable::new(number)));
        st.imms.push_back(old);
        st.sealed += 1;
        self.publish(st);
        self.bg_cv.notify_all();
        Ok(())
    }

    fn flush(&self) -> Result<()> {
        self.submit(PendingKind::Seal)?;
        let mut st = self.state.lock();
        let target = st.sealed;
        let failures_before = st.flush_failures;
        while st.flushed < target {
            if st.shutting_down || st.closed {
                return Err(Error::Closed);
            }
            if let Some(p) = &st.poisoned {
                return Err(p.to_error());
            }
            if st.flush_failures > failures_before {
                let msg = st.flush_error.clone().unwrap_or_default();
                return Err(Error::Io(std::io::Error::other(msg)));
            }
            self.done_cv.wait_for(&mut st, Duration::from_millis(100));
        }
        Ok(())
    }

    fn sync_wal(&self) -> Result<()> {
        self.check_writable()?;
        let res = match self.wal.lock().as_mut() {
            Some(w) => w.sync(),
            None => Err(Error::Closed),
        };
        if let Err(e) = &res {
            let mut st = self.state.lock();
            self.poison(&mut st, PoisonReason::Io(e.to_string()));
        }
        res
    }

    // ---------------------------------------------------------------- reads

    /// The read state and the sequence number of a read at this moment. The state is loaded
    /// first: every version it holds was built with a smallest snapshot at or below the
    /// sequence number read after it, so no version the read can see was dropped.
    pub(crate) fn read_point(&self) -> (Arc<ReadState>, SeqNo) {
        let state = self.read_state.load_full();
        let seq = self.visible_seq.load(Ordering::Acquire);
        (state, seq)
    }

    /// The point read behind every get: at `seq` (a snapshot), or at the latest write.
    pub(crate) fn get_at(
        &self,
        key: &[u8],
        seq: Option<SeqNo>,
        mut trace: Option<&mut ReadTrace>,
    ) -> Result<Option<Bytes>> {
        let rs = self.read_state.load();
        let seq = seq.unwrap_or_else(|| self.visible_seq.load(Ordering::Acquire));
        let mut g = GetCounters::default();
        let res = self.get_in(&rs, key, seq, &mut g, trace.as_deref_mut());
        self.counters.record_get(&g);
        if let Some(t) = trace {
            t.data_block_reads = g.data_block_reads;
            t.bytes_read = g.bytes_read;
            t.memtable_hit = g.memtable_hit;
        }
        res
    }

    fn get_in(
        &self,
        rs: &ReadState,
        key: &[u8],
        seq: SeqNo,
        g: &mut GetCounters,
        mut trace: Option<&mut ReadTrace>,
    ) -> Result<Option<Bytes>> {
        if key.len() > MAX_KEY_SIZE {
            return Ok(None);
        }
        for mem in std::iter::once(&rs.mem).chain(rs.imms.iter()) {
            if let Some(t) = trace.as_deref_mut() {
                t.memtables_searched += 1;
            }
            match mem.get(key, seq) {
                Lookup::Value(v) => {
                    g.memtable_hit = true;
                    return Ok(Some(v));
                }
                Lookup::Deleted => {
                    g.memtable_hit = true;
                    return Ok(None);
                }
                Lookup::Absent => {}
            }
        }
        let hash = hash_key(key);
        let v = &rs.version;
        for t in &v.levels[0] {
            if let Some(found) = self.probe_table(t, 0, key, hash, seq, g, trace.as_deref_mut())? {
                return Ok(found);
            }
        }
        for level in 1..NUM_LEVELS {
            if let Some(t) = v.candidate_in_level(level, key) {
                if let Some(found) =
                    self.probe_table(t, level, key, hash, seq, g, trace.as_deref_mut())?
                {
                    return Ok(found);
                }
            }
        }
        Ok(None)
    }

    /// Asks one table. `Some(answer)` ends the get; `None` goes on to the next table.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn probe_table(
        &self,
        t: &TableHandle,
        level: usize,
        key: &[u8],
        hash: u64,
        seq: SeqNo,
        g: &mut GetCounters,
        trace: Option<&mut ReadTrace>,
    ) -> Result<Option<Option<Bytes>>> {
        let visit = |outcome, cost: ReadCost, trace: Option<&mut ReadTrace>| {
            if let Some(tr) = trace {
                tr.tables.push(TableVisit {
                    level,
                    table_id: t.number(),
                    outcome,
                    block_reads: cost.blocks,
                    bytes_read: cost.bytes,
                });
            }
        };
        if key < t.meta.smallest_user() || key > t.meta.largest_user() || t.meta.min_seq > seq {
            visit(TableOutcome::OutOfRange, ReadCost::default(), trace);
            return Ok(None);
        }
        g.tables_considered += 1;
        let reader = t.reader()?;
        let filtered = match reader.filter() {
            Some(f) => {
                g.filter_probes += 1;
                if !f.may_contain_hash(hash) {
                    g.filter_negatives += 1;
                    visit(TableOutcome::FilterNegative, ReadCost::default(), trace);
                    return Ok(None);
                }
                true
            }
            None => false,
        };
        let mut cost = ReadCost::default();
        let found = reader.get(key, seq, &mut cost);
        g.data_block_reads += cost.blocks;
        g.bytes_read += cost.bytes;
        match found? {
            TableLookup::Value(v) => {
                g.filter_true_positives += u64::from(filtered);
                visit(TableOutcome::Found, cost, trace);
                Ok(Some(Some(v)))
            }
            TableLookup::Deleted => {
                g.filter_true_positives += u64::from(filtered);
                visit(TableOutcome::Tombstone, cost, trace);
                Ok(Some(None))
            }
            TableLookup::Absent => {
                let outcome = if filtered {
                    g.filter_false_positives += 1;
                    TableOutcome::FalsePositive
                } else {
                    TableOutcome::NotFound
                };
                visit(outcome, cost, trace);
                Ok(None)
            }
        }
    }

    // ---------------------------------------------------------------- snapshots

    pub(crate) fn register_snapshot(&self) -> SeqNo {
        let mut snaps = self.snapshots.lock();
        let seq = self.visible_seq.load(Ordering::Acquire);
        *snaps.entry(seq).or_insert(0) += 1;
        seq
    }

    pub(crate) fn release_snapshot(&self, seq: SeqNo) {
        let mut snaps = self.snapshots.lock();
        if let Some(c) = snaps.get_mut(&seq) {
            *c -= 1;
            if *c == 0 {
                snaps.remove(&seq);
            }
        }
    }

    fn smallest_snapshot(&self) -> SeqNo {
        let snaps = self.snapshots.lock();
        let visible = self.visible_seq.load(Ordering::Acquire);
        snaps.keys().next().copied().unwrap_or(visible).min(visible)
    }

    // ---------------------------------------------------------------- background

    fn job_context<'a>(&'a self, numbers: &'a AtomicU64) -> JobContext<'a> {
        JobContext {
            fs: &self.fs,
            dir: &self.dir,
            opts: &self.opts,
            file_numbers: numbers,
            shutting_down: &self.shutting_down,
            pending_outputs: &self.pending_outputs,
        }
    }

    /// Commits a job's edit and publishes the new version. Holds the version-set lock across
    /// both so that versions are published in the order they were made.
    fn install(
        &self,
        edit: VersionEdit,
        opened: &[Arc<TableHandle>],
        after: impl FnOnce(&mut State),
    ) -> Result<()> {
        let mut vs = self.versions.lock();
        let res = vs.log_and_apply(edit, opened);
        if res.is_ok() {
            let mut tables = self.tables.lock();
            tables.retain(|_, w| w.strong_count() > 0);
            let mut pending = self.pending_outputs.lock();
            for t in opened {
                pending.remove(&t.number());
                tables.insert(t.number(), Arc::downgrade(t));
            }
        }
        // On failure the outputs stay on disk and stay listed as pending: the edit may have
        // reached the disk, so they may be referenced; the next open removes them if not.
        match res {
            Ok(version) => {
                let mut st = self.state.lock();
                st.version = version;
                after(&mut st);
                self.publish(&st);
                drop(st);
                drop(vs);
                self.notify_all();
                Ok(())
            }
            Err(e) => {
                drop(vs);
                let mut st = self.state.lock();
                self.poison(&mut st, PoisonReason::Io(e.to_string()));
                Err(e)
            }
        }
    }

    fn flush_loop(self: Arc<Self>) {
        let mut failures = 0u32;
        loop {
            let (imm, next_wal, version) = {
                let mut st = self.state.lock();
                while !st.shutting_down && st.imms.is_empty() {
                    self.bg_cv.wait(&mut st);
                }
                if st.shutting_down {
                    return;
                }
                let Some(imm) = st.imms.front().cloned() else {
                    continue;
                };
                let next_wal = st.imms.get(1).unwrap_or(&st.mem).wal_number();
                (imm, next_wal, st.version.clone())
            };
            match self.flush_one(&imm, next_wal, &version) {
                Ok(()) => failures = 0,
                Err(Error::Closed) => return,
                Err(e) => {
                    failures += 1;
                    Counters::add(&self.counters.background_errors, 1);
                    log::error!("{}: flush failed: {e}", self.dir.display());
                    let mut st = self.state.lock();
                    st.flush_error = Some(format!("flush failed: {e}"));
                    st.flush_failures += 1;
                    if failures >= MAX_BACKGROUND_FAILURES {
                        self.poison(
                            &mut st,
                            PoisonReason::Io(format!(
                                "{failures} flushes in a row failed; the last: {e}"
                            )),
                        );
                    }
                    self.done_cv.notify_all();
                    if matches!(e, Error::Poisoned(_)) {
                        // The manifest cannot take edits any more: flushing is over until
                        // the database is reopened (the data is safe in the WAL).
                        while !st.shutting_down {
                            self.bg_cv.wait(&mut st);
                        }
                        return;
                    }
                    let wait = Duration::from_millis(20u64 << failures.min(6));
                    self.bg_cv.wait_for(&mut st, wait);
                }
            }
        }
    }

    fn flush_one(&self, imm: &Arc<Memtable>, next_wal: u64, version: &Version) -> Result<()> {
        let numbers = self.file_numbers.clone();
        let ctx = self.job_context(&numbers);
        let out = compaction::flush_memtable(&ctx, imm, version)?;
        let JobOutput {
            mut edit,
            opened,
            bytes_written,
            ..
        } = out;
        edit.log_number = Some(next_wal);
        if crate::sabotage::planted(crate::sabotage::Bug::DeleteWalBeforeManifestSync) {
            let _ = self
                .fs
                .remove(&filename::wal_path(&self.dir, imm.wal_number()));
        }
        let imm_ptr = Arc::as_ptr(imm);
        self.install(edit, &opened, |st| {
            if st.imms.front().is_some_and(|m| Arc::as_ptr(m) == imm_ptr) {
                st.imms.pop_front();
            }
            st.flushed += 1;
            st.flush_error = None;
        })?;
        Counters::add(&self.counters.flushes, 1);
        Counters::add(&self.counters.bytes_flushed, bytes_written);
        let wal = filename::wal_path(&self.dir, imm.wal_number());
        match self.fs.remove(&wal) {
            Ok(()) => log::info!("flushed {} entries; removed {}", imm.len(), wal.display()),
            Err(e) => log::warn!("could not remove {}: {e}", wal.display()),
        }
        Ok(())
    }

    fn compaction_loop(self: Arc<Self>) {
        let mut failures = 0u32;
        loop {
            let manual = {
                let mut st = self.state.lock();
                let mut backed_off = failures == 0;
                loop {
                    if st.shutting_down {
                        return;
                    }
                    if st.manual_compaction.is_some() {
                        break;
                    }
                    // No automatic compaction once writes are refused: nothing new arrives,
                    // and a corrupt input would only fail again.
                    let due = self.opts.auto_compaction
                        && st.poisoned.is_none()
                        && self.needs_compaction(&st.version);
                    if due && backed_off {
                        break;
                    }
                    if due {
                        // After a failure, wait before trying again.
                        self.bg_cv
                            .wait_for(&mut st, Duration::from_millis(50u64 << failures.min(6)));
                        backed_off = true;
                        continue;
                    }
                    self.bg_cv.wait(&mut st);
                }
                st.compaction_running = true;
                st.manual_compaction
            };
            let res = match manual {
                Some(_) => self.run_manual_compaction(),
                None => self.run_one_compaction(),
            };
            // Record the failure (and stop writes on corruption) before anyone waiting on a
            // manual compaction is told it ended.
            match &res {
                Ok(()) => failures = 0,
                Err(Error::Closed) => {}
                Err(e) => {
                    failures += 1;
                    Counters::add(&self.counters.background_errors, 1);
                    log::error!("{}: compaction failed: {e}", self.dir.display());
                    if failures >= MAX_BACKGROUND_FAILURES {
                        let mut st = self.state.lock();
                        self.poison(
                            &mut st,
                            PoisonReason::Io(format!(
                                "{failures} compactions in a row failed; the last: {e}"
                            )),
                        );
                    }
                    if let Error::Corruption {
                        file,
                        offset,
                        detail,
                    } = e
                    {
                        let mut st = self.state.lock();
                        self.poison(
                            &mut st,
                            PoisonReason::Corruption {
                                file: file.clone(),
                                offset: *offset,
                                detail: detail.clone(),
                            },
                        );
                    }
                }
            }
            self.state.lock().compaction_running = false;
            self.done_cv.notify_all();
            if let Some(id) = manual {
                let mut st = self.state.lock();
                st.manual_compaction = None;
                st.manual_done = id;
                if let Err(e) = &res {
                    st.manual_error = Some((id, e.to_string()));
                }
                self.done_cv.notify_all();
            }
            if matches!(res, Err(Error::Closed)) {
                return;
            }
        }
    }

    fn needs_compaction(&self, v: &Version) -> bool {
        picker::scores(v, &self.opts).iter().any(|&s| s >= 1.0)
    }

    fn run_one_compaction(&self) -> Result<()> {
        let plan = {
            let vs = self.versions.lock();
            let version = vs.current();
            let pointers: Vec<Vec<u8>> = (0..NUM_LEVELS)
                .map(|l| vs.compact_pointer(l).to_vec())
                .collect();
            match picker::pick(&version, &self.opts, &pointers) {
                Some(p) => (p, version),
                None => return Ok(()),
            }
        };
        self.run_plan(&plan.0, &plan.1)
    }

    fn run_plan(&self, plan: &compaction::Plan, version: &Version) -> Result<()> {
        let numbers = self.file_numbers.clone();
        let ctx = self.job_context(&numbers);
        let smallest = self.smallest_snapshot();
        let out = compaction::compact(&ctx, plan, version, smallest)?;
        let JobOutput {
            edit,
            opened,
            bytes_read,
            bytes_written,
            trivial_move,
        } = out;
        log::info!(
            "compacted L{} ({} tables) + L{} ({} tables) -> {} tables{}",
            plan.level,
            plan.inputs.len(),
            plan.output_level(),
            plan.next_inputs.len(),
            edit.added.len(),
            if trivial_move { " (moved)" } else { "" }
        );
        self.install(edit, &opened, |_| {})?;
        Counters::add(&self.counters.compactions, 1);
        Counters::add(&self.counters.trivial_moves, u64::from(trivial_move));
        Counters::add(&self.counters.bytes_compacted_read, bytes_read);
        Counters::add(&self.counters.bytes_compacted_written, bytes_written);
        Ok(())
    }

    fn run_manual_compaction(&self) -> Result<()> {
        let deepest = {
            let v = self.versions.lock().current();
            (1..NUM_LEVELS)
                .rev()
                .find(|&l| !v.levels[l].is_empty())
                .unwrap_or(1)
        };
        for level in 0..deepest {
            loop {
                let (plan, version) = {
                    let vs = self.versions.lock();
                    let v = vs.current();
                    match picker::whole_level(&v, &self.opts, level) {
                        Some(p) => (p, v),
                        None => break,
                    }
                };
                self.run_plan(&plan, &version)?;
            }
        }
        Ok(())
    }

    fn wait_for_compactions(&self) -> Result<()> {
        let mut st = self.state.lock();
        loop {
            if st.shutting_down || st.closed {
                return Err(Error::Closed);
            }
            let pending = !st.imms.is_empty()
                || st.compaction_running
                || (self.opts.auto_compaction
                    && st.poisoned.is_none()
                    && self.needs_compaction(&st.version));
            if !pending {
                return Ok(());
            }
            if let Some(p) = &st.poisoned {
                return Err(p.to_error());
            }
            self.done_cv.wait_for(&mut st, Duration::from_millis(50));
        }
    }

    fn compact_all(&self) -> Result<()> {
        let mut st = self.state.lock();
        self.writable(&st)?;
        st.next_manual += 1;
        let id = st.next_manual;
        while st.manual_compaction.is_some() {
            self.done_cv.wait_for(&mut st, Duration::from_millis(100));
            if st.shutting_down {
                return Err(Error::Closed);
            }
        }
        st.manual_compaction = Some(id);
        self.bg_cv.notify_all();
        while st.manual_done < id {
            if st.shutting_down {
                return Err(Error::Closed);
            }
            self.done_cv.wait_for(&mut st, Duration::from_millis(100));
        }
        match &st.manual_error {
            Some((eid, msg)) if *eid == id => Err(Error::Io(std::io::Error::other(msg.clone()))),
            _ => Ok(()),
        }
    }

    fn check_invariants(&self) -> std::result::Result<(), String> {
        // An obsolete table's file is removed just after its last handle goes away, so an
        // orphan seen once may be a deletion in flight: only one that stays is a leak.
        let mut last = Ok(());
        for _ in 0..50 {
            last = self.check_invariants_once();
            match &last {
                Err(e) if e.contains("no version references it") => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => return last,
            }
        }
        last
    }

    fn check_invariants_once(&self) -> std::result::Result<(), String> {
        let vs = self.versions.lock();
        let v = vs.current();
        v.check_invariants()?;
        let live: HashSet<u64> = v.live_numbers().into_iter().collect();
        let files = vset::list_files(self.fs.as_ref(), &self.dir).map_err(|e| e.to_string())?;
        let pending = self.pending_outputs.lock().clone();
        let tables = self.tables.lock();
        for (name, kind) in files {
            if let FileKind::Table(n) = kind {
                // A table may be on disk outside the current version only while a job is
                // writing it or while a reader of an older version still holds it.
                let held = tables.get(&n).is_some_and(|w| w.strong_count() > 0);
                if !live.contains(&n) && !pending.contains(&n) && !held {
                    let mut live: Vec<u64> = live.iter().copied().collect();
                    live.sort_unstable();
                    return Err(format!(
                        "table {name} is on disk but no version references it \
                         (current version: {live:?}, being written: {pending:?})"
                    ));
                }
            }
        }
        Ok(())
    }
}

fn version_tables_by_level(v: &Version) -> impl Iterator<Item = (usize, &Arc<TableHandle>)> {
    v.levels
        .iter()
        .enumerate()
        .flat_map(|(l, ts)| ts.iter().map(move |t| (l, t)))
}

fn version_tables(v: &Version) -> impl Iterator<Item = &Arc<TableHandle>> {
    v.levels.iter().flatten()
}

/// A copy of an error for each writer of a failed group.
fn clone_error(e: &Error) -> Error {
    match e {
        Error::Io(io) => Error::Io(std::io::Error::new(io.kind(), io.to_string())),
        Error::Corruption {
            file,
            offset,
            detail,
        } => Error::Corruption {
            file: file.clone(),
            offset: *offset,
            detail: detail.clone(),
        },
        Error::InvalidArgument(m) => Error::InvalidArgument(m.clone()),
        Error::Locked => Error::Locked,
        Error::Poisoned(m) => Error::Poisoned(m.clone()),
        Error::Closed => Error::Closed,
    }
}
