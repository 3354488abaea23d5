//! The engine under [`Db`](crate::Db): the state shared by the write path, the background
//! threads and the read path, and the rules for stopping writes and closing.
//!
//! One job per module: [`recovery`] opens a directory (manifest, WAL replay, orphan checks),
//! [`write`] runs the write queue (group commit, memtable rotation, `flush`, `sync`),
//! [`seal`] seals a full memtable's WAL off the writers' path,
//! [`background`] runs the flush, compaction and purge threads, [`manual`] runs manual
//! compactions, [`footprint`] measures the disk and memory the database uses, [`destroy`]
//! removes a closed database's files, [`invariants`] checks the tree for tests and tools. Reads go through [`ReadPath`], which the engine feeds and which
//! knows nothing of it.
//!
//! Locks, in the order they may be taken: `versions`, then `state`; `wal` (the WAL and the live
//! memtable with its writer, `LiveLog`) without `state`, by the group-commit leader that has
//! released `state` first, by `sync` and by `close`; under `wal` the leader takes only the
//! memtable's own locks (its spare chunks, its range tombstones' writer), which no one holds
//! while taking another, and waits for the previous WAL's seal (`WalSeal`, whose seal thread
//! never takes `wal`); a writer's own waiter (`write::Waiter`) last, alone or under `state`.

mod background;
pub(crate) mod destroy;
mod footprint;
mod invariants;
mod manual;
mod recovery;
mod seal;
mod write;

use crate::compaction::JobContext;
use crate::error::{Error, Result};
use crate::fs::{FileLock, FileSystem};
use crate::memtable::{MemWriter, Memtable};
use crate::options::Options;
use crate::read::{ReadPath, ReadState};
use crate::stats::Counters;
use crate::version::set::VersionSet;
use crate::version::{TableEnv, TableHandle, Version};
use crate::wal::WalWriter;
use background::BackgroundStatus;
use parking_lot::{Condvar, Mutex};
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use write::WriteQueue;

/// The memtables and the version: what the write path fills and background work drains.
struct MemtableSet {
    mem: Arc<Memtable>,
    /// Sealed memtables, oldest first.
    imms: VecDeque<Arc<Memtable>>,
    version: Arc<Version>,
    /// Memtables sealed so far, and flushed so far (for `flush` to wait on).
    sealed: u64,
    flushed: u64,
}

/// Whether the database takes writes, and whether it is closing.
#[derive(Default)]
struct Lifecycle {
    /// Why writes are refused, if they are: the failure itself (see [`Error::into_poison`]).
    poisoned: Option<Error>,
    shutting_down: bool,
    /// `close` has begun (on some thread).
    closing: bool,
    closed: bool,
    /// A leader is starting a new WAL without the state lock (`seal_memtable`): `close`
    /// waits for it, so that no file is created or synced after the handle let go of the
    /// directory.
    rotating: bool,
    /// What the `close` that ran returned, for a `close` called meanwhile on another thread.
    close_error: Option<Error>,
}

/// Everything guarded by the engine mutex, grouped by who uses it.
struct State {
    /// The write queue (write path only).
    writes: WriteQueue,
    /// Memtables and version (write path seals, flush drains, compaction installs).
    tree: MemtableSet,
    /// Status of flush and compaction work, for the callers that wait on it.
    bg: BackgroundStatus,
    /// WALs waiting for their seal (write path queues, the seal thread drains).
    seals: seal::SealQueue,
    life: Lifecycle,
}

/// The engine shared by handles and background threads.
pub(crate) struct Core {
    dir: PathBuf,
    fs: Arc<dyn FileSystem>,
    opts: Options,
    read: Arc<ReadPath>,
    state: Mutex<State>,
    /// A queued writer may lead now, or its write is done.
    /// A writer waiting for memtable room may go on.
    room_cv: Condvar,
    /// Background threads have work.
    bg_cv: Condvar,
    /// A flush or compaction finished (for `flush`, `compact` and `wait_for_compactions`).
    done_cv: Condvar,
    /// The WAL being written and the memtable beside it (`None` read-only and once closed).
    wal: Mutex<Option<LiveLog>>,
    versions: Mutex<VersionSet>,
    file_numbers: Arc<AtomicU64>,
    counters: Arc<Counters>,
    lock: Mutex<Option<Box<dyn FileLock>>>,
    /// Tables being written by running jobs (see [`JobContext::pending_outputs`]).
    pending_outputs: Mutex<BTreeSet<u64>>,
    /// Every table handle alive, current or held by an old reader, by number.
    tables: Mutex<HashMap<u64, Weak<TableHandle>>>,
    /// What the tables share: caches, the obsolete-file queue.
    env: Arc<TableEnv>,
}

/// What a write group's leader writes to, under one lock: the WAL and the memtable that takes
/// the same writes (the same one as `MemtableSet::mem`: a rotation replaces both), with the
/// memtable's one writer, so that an insert takes no lock of its own.
pub(super) struct LiveLog {
    pub(super) wal: WalWriter,
    pub(super) mem: Arc<Memtable>,
    pub(super) writer: MemWriter,
}

impl Core {
    /// Opens the database in `dir` (see [`recovery`]) and builds the engine around it. The
    /// background threads are started by [`start`](Self::start).
    pub(crate) fn open(dir: PathBuf, opts: Options) -> Result<Core> {
        let closed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let r = recovery::recover(&dir, &opts, &closed)?;
        let counters = r.counters.clone();
        let version = r.versions.current();
        let tables = version
            .levels
            .iter()
            .flatten()
            .map(|t| (t.number(), Arc::downgrade(t)))
            .collect();
        let read = Arc::new(ReadPath::new(
            ReadState {
                mem: r.mem.clone(),
                imms: r.imms.iter().rev().cloned().collect(),
                version: version.clone(),
            },
            r.last_seq,
            counters.clone(),
            closed,
        ));
        let live = match r.wal {
            Some(wal) => Some(LiveLog {
                wal,
                mem: r.mem.clone(),
                writer: r
                    .mem
                    .take_writer()
                    .ok_or_else(|| Error::other("the new memtable's writer was taken"))?,
            }),
            None => None,
        };
        let state = State {
            writes: WriteQueue::new(r.last_seq),
            tree: MemtableSet {
                mem: r.mem,
                imms: r.imms.into(),
                version,
                sealed: 0,
                flushed: 0,
            },
            bg: BackgroundStatus::default(),
            seals: seal::SealQueue::default(),
            life: Lifecycle::default(),
        };
        Ok(Core {
            dir,
            fs: opts.file_system.clone(),
            opts,
            read,
            state: Mutex::new(state),
            room_cv: Condvar::new(),
            bg_cv: Condvar::new(),
            done_cv: Condvar::new(),
            wal: Mutex::new(live),
            file_numbers: r.versions.file_numbers(),
            env: r.versions.table_env().clone(),
            versions: Mutex::new(r.versions),
            counters,
            lock: Mutex::new(r.lock),
            pending_outputs: Mutex::new(BTreeSet::new()),
            tables: Mutex::new(tables),
        })
    }

    /// The read path, for gets, scans and snapshots.
    pub(crate) fn read_path(&self) -> &Arc<ReadPath> {
        &self.read
    }

    /// The database directory.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// What the tables share: the caches.
    pub(crate) fn table_env(&self) -> &Arc<TableEnv> {
        &self.env
    }

    /// Cumulative counters.
    pub(crate) fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Stops the background threads (joining `threads`), waits for a memtable rotation under
    /// way, syncs the WAL, removes the WAL made ahead for the next rotation (if any), deletes
    /// the files still queued as obsolete and releases the directory lock. A call made while
    /// another thread closes waits for it and returns what it returns; a call after that is a
    /// no-op.
    pub(crate) fn close(&self, threads: &Mutex<Vec<JoinHandle<()>>>) -> Result<()> {
        {
            let mut st = self.state.lock();
            if st.life.closed {
                return Ok(());
            }
            if st.life.closing {
                // Another thread closes: its outcome is this call's too.
                while !st.life.closed {
                    self.done_cv.wait(&mut st);
                }
                return st.life.close_error.clone().map_or(Ok(()), Err);
            }
            st.life.closing = true;
            st.life.shutting_down = true;
            self.read.closed.store(true, Ordering::SeqCst);
        }
        self.notify_all();
        // A panic below (in a user's file system) still ends the close, with an error: a call
        // waiting for it, and the drop of the last handle while the panic unwinds, would
        // otherwise wait forever. The panic then goes on in this thread.
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.close_threads_and_files(threads)
        }));
        // The rest drops the user's files and directory lock, whose `Drop` may panic too.
        let released = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // After a panic in the seals `close` ran, the ones behind it are answered (with
            // an error) here; normally none is left.
            self.abandon_seals();
            self.env.obsolete.close();
            self.env.caches.files.close_all();
            // The directory lock goes before the close counts as done: a call that waited
            // for this one may reopen the directory as soon as it returns.
            *self.lock.lock() = None;
        }));
        let res = match (&ran, &released) {
            (Err(payload), _) | (Ok(_), Err(payload)) => Err(Error::other(format!(
                "close panicked: {}",
                panic_message(&**payload)
            ))),
            (Ok(res), Ok(())) => res.clone(),
        };
        {
            let mut st = self.state.lock();
            st.life.closed = true;
            st.life.close_error = res.as_ref().err().cloned();
        }
        self.notify_all();
        match (ran, released) {
            (Err(payload), _) | (Ok(_), Err(payload)) => std::panic::resume_unwind(payload),
            (Ok(res), Ok(())) => res,
        }
    }

    /// The body of [`close`](Self::close): joins the background threads, waits for a WAL
    /// rotation under way, seals the WALs still waiting for it, syncs and closes the WAL,
    /// deletes the obsolete files.
    fn close_threads_and_files(&self, threads: &Mutex<Vec<JoinHandle<()>>>) -> Result<()> {
        self.env.obsolete.wake();
        for t in threads.lock().drain(..) {
            let _ = t.join();
        }
        // A rotation that ended after the seal thread stopped left its old WAL to seal (and a
        // `Db::flush` sealing inline may wait for it).
        self.run_queued_seals();
        // A leader that was starting a new WAL finishes that first (no leader starts one now
        // that writes are refused): the WAL taken below is then the newest.
        {
            let mut st = self.state.lock();
            while st.life.rotating {
                self.done_cv.wait(&mut st);
            }
        }
        // Or it did so while this waited.
        self.run_queued_seals();
        // Take the WAL away so that a leader still inside `lead` fails with `Closed` instead of
        // appending after the final sync.
        let wal = self.wal.lock().take();
        let res = match wal {
            Some(mut live) => live.wal.finish(),
            None => Ok(()),
        };
        // The WAL made ahead for a rotation that will not come (the seal thread, which makes
        // it, has stopped).
        self.remove_spare_wal();
        self.env.obsolete.purge();
        res
    }

    fn notify_all(&self) {
        self.state.lock().writes.poke_gatherer();
        self.room_cv.notify_all();
        self.bg_cv.notify_all();
        self.done_cv.notify_all();
    }

    /// Makes the memtables and version in `st` what new reads see.
    fn publish(&self, st: &State) {
        self.read.publish(ReadState {
            mem: st.tree.mem.clone(),
            imms: st.tree.imms.iter().rev().cloned().collect(),
            version: st.tree.version.clone(),
        });
    }

    fn check_writable(&self) -> Result<()> {
        let st = self.state.lock();
        self.writable(&st)
    }

    fn writable(&self, st: &State) -> Result<()> {
        if st.life.shutting_down || st.life.closed {
            return Err(Error::Closed);
        }
        if self.opts.read_only {
            return Err(Error::InvalidArgument(
                "the database was opened read-only".into(),
            ));
        }
        if let Some(e) = &st.life.poisoned {
            return Err(e.clone());
        }
        Ok(())
    }

    /// Stops writes because of `cause` (the first cause wins).
    fn poison(&self, st: &mut State, cause: &Error) {
        // A write or sync that met `close` taking the WAL: writes are refused as closed
        // already, and nothing failed (no error to log, no cause to keep).
        if st.life.poisoned.is_none() && !matches!(cause, Error::Closed) {
            log::error!("{}: refusing further writes: {cause}", self.dir.display());
            st.life.poisoned = Some(cause.clone().into_poison());
        }
        // A leader gathering a synced group stops waiting.
        st.writes.poke_gatherer();
    }

    fn job_context<'a>(&'a self, numbers: &'a AtomicU64) -> JobContext<'a> {
        JobContext {
            fs: &self.fs,
            dir: &self.dir,
            opts: &self.opts,
            file_numbers: numbers,
            shutting_down: &self.read.closed,
            pending_outputs: &self.pending_outputs,
            env: &self.env,
            replayed_wals: None,
        }
    }
}

/// The message a panic carried (`panic!` with a literal or a format string), for the error
/// that stops writes after it.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}
