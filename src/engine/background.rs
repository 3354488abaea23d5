//! Background work: the flush thread (sealed memtables -> L0 tables), the compaction thread
//! (automatic compactions, and the manual ones of [`super::manual`]), the purge thread
//! (deletes obsolete tables and flushed memtables' WALs), the thread of [`super::seal`]
//! (seals full memtables' WALs), and installing a job's result as the new version. Failures
//! are kept as they happened, so the caller that waits on a flush or a manual compaction gets
//! the original error, and corruption found here stops writes with that same
//! [`Error::Corruption`].

use super::{Core, State};
use crate::compaction::{self, picker, JobOutput};
use crate::error::{Error, Result};
use crate::filename;
use crate::iter::KeyRange;
use crate::memtable::Memtable;
use crate::stats::Counters;
use crate::version::{TableHandle, Version, VersionEdit, NUM_LEVELS};
use parking_lot::MutexGuard;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Consecutive failures of background jobs after which writes are refused: writers would
/// otherwise wait forever for room that never comes.
const MAX_BACKGROUND_FAILURES: u32 = 8;

/// What callers waiting on background work need to know.
#[derive(Default)]
pub(super) struct BackgroundStatus {
    /// The last flush failure (cleared by a successful flush).
    pub(super) flush_error: Option<Error>,
    /// Flushes that failed so far.
    pub(super) flush_failures: u64,
    /// The manual compaction requested and not started or not finished: its id and key range.
    pub(super) manual: Option<(u64, KeyRange)>,
    /// The outcome of each manual compaction that finished and whose caller has not taken
    /// it yet, by id (callers may be served in any order: each waits for its own).
    pub(super) manual_results: std::collections::HashMap<u64, Result<()>>,
    /// The ids of the manual compactions whose callers still wait: an outcome is kept only
    /// for them (a caller that left on a stop or a close takes none).
    pub(super) manual_waiting: std::collections::HashSet<u64>,
    /// The running manual compaction ended early because writes had stopped (its error is
    /// the stop's, not a failure of its own).
    pub(super) manual_gave_up: bool,
    pub(super) next_manual: u64,
    /// True while the compaction thread runs a job.
    pub(super) compaction_running: bool,
}

/// A background loop.
type Loop = fn(Arc<Core>);

/// The threads [`Core::start`] spawns: thread name, what it does, its loop.
const THREADS: [(&str, &str, Loop); 4] = [
    ("siltdb-flush", "flush", Core::flush_loop),
    ("siltdb-wal-seal", "WAL seal", Core::seal_loop),
    ("siltdb-compact", "compaction", Core::compaction_loop),
    ("siltdb-purge", "purge", Core::purge_loop),
];

impl Core {
    /// Starts the flush, WAL seal, compaction and purge threads. If one cannot be started, the ones
    /// already running are stopped and the error is returned.
    pub(crate) fn start(self: &Arc<Self>) -> Result<Vec<std::thread::JoinHandle<()>>> {
        let mut threads = Vec::new();
        for (name, what, body) in THREADS {
            let c = self.clone();
            let spawned = std::thread::Builder::new()
                .name(name.into())
                .spawn(move || c.guarded(what, body))
                .map_err(Error::from);
            match spawned {
                Ok(t) => threads.push(t),
                Err(e) => {
                    let _ = self.close(&parking_lot::Mutex::new(threads));
                    return Err(e);
                }
            }
        }
        self.notify_all();
        Ok(threads)
    }

    /// Runs a background loop; if it panics (a bug), writes are refused with the panic message
    /// instead of waiting forever for work that will never finish.
    fn guarded(self: Arc<Self>, what: &str, body: impl FnOnce(Arc<Self>)) {
        let core = self.clone();
        if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(self))) {
            let msg = super::panic_message(&*panic);
            log::error!("{}: {what} thread panicked: {msg}", core.dir.display());
            Counters::add(&core.counters.background_errors, 1);
            let mut st = core.state.lock();
            core.poison(
                &mut st,
                &Error::other(format!("the {what} thread panicked: {msg}")),
            );
            drop(st);
            core.notify_all();
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
                st.tree.version = version;
                after(&mut st);
                if let Some(e) = vs.failure() {
                    // The edit is durable, but the manifest rewrite after it failed: no later
                    // edit can be recorded, so writes stop now (D7), not at the next job.
                    self.poison(&mut st, e);
                }
                self.publish(&st);
                drop(st);
                drop(vs);
                self.notify_all();
                Ok(())
            }
            Err(e) => {
                drop(vs);
                let mut st = self.state.lock();
                self.poison(&mut st, &e);
                Err(e)
            }
        }
    }

    /// A background thread's wait after a failure: `millis` in full, whatever wakes it
    /// meanwhile (writers stalled for its work notify `bg_cv` every 100 ms, which would turn
    /// the backoff into retries that fast), unless the database closes or `cut_short` says.
    fn back_off(
        &self,
        st: &mut MutexGuard<'_, State>,
        millis: u64,
        cut_short: impl Fn(&State) -> bool,
    ) {
        let until = Instant::now() + Duration::from_millis(millis);
        while !st.life.shutting_down
            && !cut_short(st)
            && !self.bg_cv.wait_until(st, until).timed_out()
        {}
    }

    fn flush_loop(self: Arc<Self>) {
        let mut failures = 0u32;
        loop {
            let (imm, active, next_wal) = {
                let mut st = self.state.lock();
                while !st.life.shutting_down
                    && st.tree.imms.is_empty()
                    && !st.tree.mem.wants_growth()
                {
                    self.bg_cv.wait(&mut st);
                }
                if st.life.shutting_down {
                    return;
                }
                let Some(imm) = st.tree.imms.front().cloned() else {
                    // Nothing to flush, and the memtable being written ran low on chunks
                    // made ahead: it grows ahead of itself here, not on the writer's thread.
                    let mem = st.tree.mem.clone();
                    drop(st);
                    mem.grow_itself(self.opts.memtable_size);
                    continue;
                };
                let next_wal = st.tree.imms.get(1).unwrap_or(&st.tree.mem).wal_number();
                // Only for a memtable the writer sealed because it was full (not one sealed
                // early by `Db::flush`), and only when it is the one waiting: with more
                // queued, or writers stopped for them, the flush goes first.
                let full = imm.is_due(self.opts.memtable_size);
                let active = (full && st.tree.imms.len() == 1).then(|| st.tree.mem.clone());
                (imm, active, next_wal)
            };
            // The memtable being written now will likely fill like the one it replaced: its
            // index arrays and chunks are made here, on this thread, rather than by the
            // writer that reaches them.
            if let Some(active) = active {
                active.grow_ahead(&imm, self.opts.memtable_size);
            }
            match self.flush_one(&imm, next_wal) {
                Ok(()) => {
                    failures = 0;
                    // The edit is durable but the rewrite of the oversized manifest after it
                    // failed (writes are stopped): no later edit can be recorded, so a
                    // memtable still queued is not written to a table only to be refused.
                    if self.versions.lock().failure().is_some() {
                        return self.idle_until_shutdown(self.state.lock());
                    }
                }
                Err(Error::Closed) => return,
                Err(e) => {
                    failures += 1;
                    Counters::add(&self.counters.background_errors, 1);
                    log::error!("{}: flush failed: {e}", self.dir.display());
                    // A manifest write that failed reports its I/O error once, and leaves
                    // the manifest refusing edits: a retry would write the whole table
                    // again only to fail to install it. (The versions' lock comes before the
                    // state's, as in `install`.)
                    let manifest_failed = self.versions.lock().failure().is_some();
                    let mut st = self.state.lock();
                    st.bg.flush_error = Some(e.clone());
                    st.bg.flush_failures += 1;
                    if failures >= MAX_BACKGROUND_FAILURES {
                        log::error!("{failures} flushes in a row failed");
                        self.poison(&mut st, &e);
                    }
                    self.done_cv.notify_all();
                    if matches!(e, Error::Poisoned(_)) || manifest_failed {
                        // The manifest cannot take edits any more: flushing is over until
                        // the database is reopened (the data is safe in the WAL).
                        return self.idle_until_shutdown(st);
                    }
                    self.back_off(&mut st, 20u64 << failures.min(6), |_| false);
                }
            }
        }
    }

    /// Parks a background thread whose work is over until the database is reopened (the
    /// manifest takes no more edits) until `close` wakes it.
    fn idle_until_shutdown(&self, mut st: MutexGuard<'_, State>) {
        while !st.life.shutting_down {
            self.bg_cv.wait(&mut st);
        }
    }

    /// Writes `imm` to an L0 table and installs it. The current version (which chooses the
    /// table's filter) is taken only once the WAL is sealed and given up as soon as the filter
    /// is chosen: a version the flush thread held longer could be the last holder of tables
    /// a compaction meanwhile makes obsolete, and keep them on disk past the
    /// `wait_for_compactions` or `compact()` that promised them gone.
    fn flush_one(&self, imm: &Arc<Memtable>, next_wal: u64) -> Result<()> {
        // A memtable goes to a table only once its WAL is sealed (durable whole), and never if
        // the seal failed: a table on disk with writes that a power loss took from the WAL
        // would read as a lost manifest edit at the next open. Its WAL is also queued for
        // removal below, which the seal must not race.
        // (A failed seal stopped writes: flushing is over until a reopen.)
        self.wait_sealed(imm.wal_number())
            .map_err(Error::into_poison)?;
        let numbers = self.file_numbers.clone();
        let ctx = self.job_context(&numbers);
        let version = self.state.lock().tree.version.clone();
        let out = compaction::flush_memtable(&ctx, imm, version, self.read.smallest_snapshot())?;
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
            if st
                .tree
                .imms
                .front()
                .is_some_and(|m| Arc::as_ptr(m) == imm_ptr)
            {
                st.tree.imms.pop_front();
            }
        })?;
        // The new table's handle goes before the flush counts as done: held past that, it
        // could be the last holder of a table that a compaction right after `Db::flush`
        // made obsolete, deleted only after `wait_for_compactions` returned.
        drop(opened);
        Counters::add(&self.counters.flushes, 1);
        Counters::add(&self.counters.bytes_flushed, bytes_written);
        // The WAL goes to the purge thread: its unlink (20-35 ms for a 24 MiB WAL on the VM
        // of docs/benchmarks.md, most of it the kernel dropping its pages) would hold up the
        // next memtable's flush. `Db::flush` and `wait_for_compactions` wait for the purge, so
        // a caller that flushed and compacted still finds no copy of removed data on disk.
        log::info!("flushed {} entries of WAL {}", imm.len(), imm.wal_number());
        // Queued and counted under one hold of the state lock: a close that begins once the
        // purge thread has the WAL finds this flush counted, so a `Db::flush` waiting for it
        // returns Ok rather than `Closed`. (The state lock is taken before the queue's
        // elsewhere too: tables dropped with a version under it.)
        let mut st = self.state.lock();
        self.env
            .obsolete
            .push(filename::wal_path(&self.dir, imm.wal_number()));
        st.tree.flushed += 1;
        st.bg.flush_error = None;
        drop(st);
        self.done_cv.notify_all();
        Ok(())
    }

    fn compaction_loop(self: Arc<Self>) {
        let mut failures = 0u32;
        loop {
            let manual = {
                let mut st = self.state.lock();
                let mut backed_off = failures == 0;
                loop {
                    if st.life.shutting_down {
                        return;
                    }
                    if st.bg.manual.is_some() {
                        if st.life.poisoned.is_none() {
                            break;
                        }
                        // Writes stopped after it was asked for: its caller is told so (or
                        // has been) and it does not run, as an automatic one would not.
                        st.bg.manual = None;
                        self.done_cv.notify_all();
                        continue;
                    }
                    // No automatic compaction once writes are refused: nothing new arrives,
                    // and a corrupt input would only fail again.
                    let due = self.opts.auto_compaction
                        && st.life.poisoned.is_none()
                        && self.needs_compaction(&st.tree.version);
                    if due && backed_off {
                        break;
                    }
                    if due {
                        // After a failure, wait before trying again (a manual compaction
                        // asked for meanwhile goes first).
                        self.back_off(&mut st, 50u64 << failures.min(6), |st| {
                            st.bg.manual.is_some()
                        });
                        backed_off = true;
                        continue;
                    }
                    self.bg_cv.wait(&mut st);
                }
                st.bg.compaction_running = true;
                st.bg.manual.clone()
            };
            let res = match &manual {
                Some((_, range)) => self.run_manual_compaction(range),
                None => self.run_one_compaction(),
            };
            // Record the failure (and stop writes on corruption) in the same hold of the state
            // lock that hands a manual compaction its outcome: its caller, which leaves once
            // writes stop, gets the compaction's own error, not the stop it caused.
            let mut st = self.state.lock();
            match &res {
                Ok(()) => failures = 0,
                Err(Error::Closed) => {}
                // A manual compaction that gave up because writes had stopped meanwhile (see
                // `run_manual_compaction`): nothing of its own failed.
                Err(_) if std::mem::take(&mut st.bg.manual_gave_up) => {}
                Err(e) => {
                    failures += 1;
                    Counters::add(&self.counters.background_errors, 1);
                    log::error!("{}: compaction failed: {e}", self.dir.display());
                    if failures >= MAX_BACKGROUND_FAILURES || e.is_corruption() {
                        if !e.is_corruption() {
                            log::error!("{failures} compactions in a row failed");
                        }
                        self.poison(&mut st, e);
                    }
                }
            }
            st.bg.compaction_running = false;
            if let Some((id, _)) = manual {
                st.bg.manual = None;
                if st.bg.manual_waiting.contains(&id) {
                    st.bg.manual_results.insert(id, res.clone());
                }
            }
            drop(st);
            self.done_cv.notify_all();
            if matches!(res, Err(Error::Closed)) {
                return;
            }
        }
    }

    /// Deletes obsolete files as they are queued (tables by their last holders, WALs by the
    /// flush thread).
    fn purge_loop(self: Arc<Self>) {
        // A panic here (a bug, or a user's file system) leaves the files to the next open,
        // and must not leave `Db::flush` or `wait_for_compactions` waiting for a purge that
        // will never run.
        struct AbandonOnPanic<'a>(&'a Core);
        impl Drop for AbandonOnPanic<'_> {
            fn drop(&mut self) {
                if std::thread::panicking() {
                    self.0.env.obsolete.abandon();
                }
            }
        }
        let _abandon = AbandonOnPanic(&self);
        while !self.read.is_closed() {
            if self.env.obsolete.wait_for_work(Duration::from_millis(100)) {
                self.env.obsolete.purge();
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

    pub(super) fn run_plan(&self, plan: &compaction::Plan, version: &Version) -> Result<()> {
        let numbers = self.file_numbers.clone();
        let ctx = self.job_context(&numbers);
        let smallest = self.read.smallest_snapshot();
        let out = compaction::compact(&ctx, plan, version, smallest)?;
        let JobOutput {
            edit,
            opened,
            bytes_read,
            bytes_written,
            trivial_move,
            tables_dropped_unread,
            // Held until the tables are installed, then given back.
            filter_reservation: _held,
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
        Counters::add(&self.counters.tables_dropped_unread, tables_dropped_unread);
        Counters::add(&self.counters.bytes_compacted_written, bytes_written);
        Ok(())
    }

    /// Waits until no sealed memtable waits for flush, no compaction is due (a manual one
    /// asked for included) or running, and no obsolete file waits for deletion.
    pub(crate) fn wait_for_compactions(&self) -> Result<()> {
        let mut st = self.state.lock();
        loop {
            if st.life.shutting_down || st.life.closed {
                return Err(Error::Closed);
            }
            // A read-only database runs no background work: nothing will change the tree,
            // whatever its levels' scores say.
            if self.opts.read_only {
                return Ok(());
            }
            // `flushed < sealed`: a flush takes its memtable off the queue when it installs
            // its table, and counts itself (and queues its WAL for the purge thread) a moment
            // later.
            let pending = !st.tree.imms.is_empty()
                || st.tree.flushed < st.tree.sealed
                || st.bg.compaction_running
                // A manual compaction asked for and not started yet is due (the compaction
                // thread may not have woken to it).
                || st.bg.manual.is_some()
                || (self.opts.auto_compaction
                    && st.life.poisoned.is_none()
                    && self.needs_compaction(&st.tree.version));
            // Once writes are stopped no compaction runs (and the flushes may be stuck on
            // the manifest): the tree will not settle, whatever is pending.
            if let Some(e) = &st.life.poisoned {
                return Err(e.clone());
            }
            if !pending {
                break;
            }
            self.done_cv.wait_for(&mut st, Duration::from_millis(50));
        }
        drop(st);
        self.wait_for_purge()
    }

    /// Waits until the purge thread has deleted every obsolete file queued so far (or given
    /// up on them: see `ObsoleteFiles::abandon`). Errors: [`Error::Closed`].
    pub(crate) fn wait_for_purge(&self) -> Result<()> {
        while !self.env.obsolete.wait_idle(Duration::from_millis(100)) {
            self.read.check_open()?;
        }
        Ok(())
    }
}
