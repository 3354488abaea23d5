//! Sealing a full memtable's WAL off the writers' path: after a rotation has put the next WAL
//! in place, the seal thread syncs the directory (so that the new WAL's name is durable) and
//! seals the old WAL (fsync, sync mark, cut back to its records, fsync), while writers append
//! to the new one. Seals complete oldest first: a flush that needs its WAL sealed may run a
//! queued seal itself, and each WAL's fsyncs wait for the seal before it. Once the seals are
//! done, the seal thread also makes the WAL the next rotation starts (the *spare*,
//! [`Core::make_spare_wal`]), so that a rotation only swaps it in.
//!
//! What keeps a power loss to a prefix of the history: the new WAL follows the old one's seal
//! ([`WalWriter::follow`]), so no fsync of the new WAL (a synced write, `Db::sync`, its own
//! seal, `close`) returns before the old WAL is durable whole. A power loss before that may
//! keep pages of the new WAL and lose the end of the old one; every write in the new WAL is
//! then unsynced, and recovery ends the history where the old WAL ends (`docs/durability.md`).
//! A seal that fails stops writes (D7), as a failed fsync of the WAL always did; the synced
//! writes and syncs waiting for it get its error.

use super::Core;
use crate::error::{io_context, Error, Result};
use crate::filename;
use crate::wal::{WalSeal, WalWriter};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A WAL waiting to be sealed, and where its outcome goes.
pub(super) struct SealJob {
    wal: WalWriter,
    seal: Arc<WalSeal>,
}

impl Drop for SealJob {
    /// A job dropped unfinished (a panic in the seal thread) still answers its waiters, with
    /// an error, instead of leaving them waiting forever. After a normal seal this does
    /// nothing: only the first outcome counts.
    fn drop(&mut self) {
        self.seal
            .complete(Err(Error::other("the seal of a WAL was abandoned")));
    }
}

/// The WALs waiting for their seal, oldest first, and the seal of every WAL whose memtable is
/// not flushed yet (the flush writes the memtable only once its WAL is sealed, and never if
/// the seal failed).
#[derive(Default)]
pub(super) struct SealQueue {
    jobs: VecDeque<SealJob>,
    by_wal: HashMap<u64, Arc<WalSeal>>,
    /// No one will run a queued seal any more (the seal thread panicked, or `close` did while
    /// it ran the last ones): a seal queued from now on is answered with an error at once.
    abandoned: bool,
    /// The WAL the next rotation starts, made ahead by the seal thread (see
    /// [`Core::make_spare_wal`]): numbered above the live WAL when it is made, and a rotation
    /// starts it only if it still is.
    spare: Option<WalWriter>,
    /// A rotation of a full memtable queued its old WAL's seal (and took the spare, or found
    /// none): the seal thread makes the next spare once the seals queued are done.
    want_spare: bool,
}

impl SealQueue {
    /// Queues the seal of `wal` (numbered `number`), whose outcome goes to `seal` (which the
    /// next WAL follows). An abandoned queue gives the job back instead, for the caller to
    /// drop once it has let go of the state lock (the drop answers the seal with an error,
    /// and closes the WAL): no synced write or `Db::sync` waits for it forever.
    #[must_use = "a job given back must be dropped, after the state lock"]
    pub(super) fn push(
        &mut self,
        wal: WalWriter,
        number: u64,
        seal: Arc<WalSeal>,
    ) -> Option<SealJob> {
        self.by_wal.insert(number, seal.clone());
        let job = SealJob { wal, seal };
        if self.abandoned {
            return Some(job);
        }
        self.jobs.push_back(job);
        // A rotation of a full memtable: the next WAL is made ahead once this seal is done
        // (not before: the seal, which writers' fsyncs wait for, goes first).
        self.want_spare = true;
        None
    }

    /// The spare WAL, if there is one, for a rotation to start.
    pub(super) fn take_spare(&mut self) -> Option<WalWriter> {
        self.spare.take()
    }

    /// A spare WAL is wanted and none is there, and no seal is under way (a flush may run one
    /// on its own thread): a spare made during a seal would meet its fsyncs in the file
    /// system's journal, as the rotation's own WAL did.
    fn spare_due(&self) -> bool {
        self.want_spare
            && self.spare.is_none()
            && self.jobs.is_empty()
            && self.by_wal.values().all(|s| s.is_complete())
    }

    /// Marks the queue abandoned and returns the jobs still in it, for the caller to drop
    /// (which answers each with an error) once it has let go of the state lock.
    fn abandon(&mut self) -> VecDeque<SealJob> {
        self.abandoned = true;
        std::mem::take(&mut self.jobs)
    }
}

impl Core {
    /// The seal thread: seals queued WALs in order until the database closes (and the queue
    /// is empty).
    pub(super) fn seal_loop(self: Arc<Self>) {
        // A panic in a seal (a bug, or a user's file system) answers the job it ran with an
        // error as the job unwinds; this answers the jobs still queued behind it, and any
        // queued later, whose waiters would otherwise wait forever.
        struct AnswerQueuedOnPanic<'a>(&'a Core);
        impl Drop for AnswerQueuedOnPanic<'_> {
            fn drop(&mut self) {
                if std::thread::panicking() {
                    self.0.abandon_seals();
                }
            }
        }
        let _answer = AnswerQueuedOnPanic(&self);
        loop {
            let job = {
                let mut st = self.state.lock();
                loop {
                    if let Some(job) = st.seals.jobs.pop_front() {
                        break Some(job);
                    }
                    if st.life.shutting_down {
                        return;
                    }
                    // Not while a rotation runs (its own WAL may be numbered either side
                    // of the spare's, and its seal's fsyncs would meet the spare's
                    // allocation), nor for a database that takes no writes.
                    if st.seals.spare_due() && !st.life.rotating && self.writable(&st).is_ok() {
                        st.seals.want_spare = false;
                        break None;
                    }
                    self.bg_cv.wait(&mut st);
                }
            };
            match job {
                Some(job) => self.seal(job),
                None => self.make_spare_wal(),
            }
        }
    }

    /// Makes the WAL that the next rotation starts, on the seal thread after the seals queued
    /// before: created, and its first window allocated (and zeroed) by its helper
    /// ([`WalWriter::expect_appends`]) while the live memtable fills. Without it the rotation
    /// creates the file, and the writer's first append waits for that allocation, which
    /// meets the old WAL's seal in the file system's journal: up to ~3 ms a rotation, 3.3-15.7
    /// ms per 1M sequential inserts on the VM of `docs/benchmarks.md` (0.19-0.37 ms with it).
    /// Kept only if it is numbered above the live WAL and no rotation is under way (one that
    /// found no spare creates its own WAL, numbered below this one or above it), so that WALs
    /// are still started in the order of their numbers;
    /// otherwise, or if the database is closing or refusing writes, its file is removed.
    /// A spare that cannot be made is not an error (the next rotation creates its WAL as
    /// without one): a failure to create it is logged.
    fn make_spare_wal(&self) {
        let number = self.file_numbers.fetch_add(1, Ordering::SeqCst);
        let path = filename::wal_path(&self.dir, number);
        let made = filename::check_new_number(&self.dir, number).and_then(|_| {
            let mut wal = WalWriter::create(self.fs.as_ref(), &path, number, self.opts.log_writes)?;
            wal.expect_appends();
            Ok(wal)
        });
        let wal = match made {
            Ok(wal) => wal,
            Err(e) => {
                log::warn!("{}: no WAL made ahead: {e}", self.dir.display());
                return;
            }
        };
        let mut st = self.state.lock();
        if self.writable(&st).is_ok()
            && !st.life.rotating
            && st.seals.spare.is_none()
            && number > st.tree.mem.wal_number()
        {
            st.seals.spare = Some(wal);
            return;
        }
        drop(st);
        self.discard_spare_wal(wal);
    }

    /// Removes the spare WAL, if there is one: `close`, once the seal thread has stopped.
    pub(super) fn remove_spare_wal(&self) {
        let spare = self.state.lock().seals.spare.take();
        if let Some(spare) = spare {
            self.discard_spare_wal(spare);
        }
    }

    /// Removes a spare WAL that no rotation will start (it holds no record).
    fn discard_spare_wal(&self, wal: WalWriter) {
        let path = wal.path().to_path_buf();
        drop(wal);
        if let Err(e) = self.fs.remove(&path) {
            log::warn!("{}: could not remove an unused WAL: {e}", path.display());
        }
    }

    /// Seals every queued WAL on this thread: `close`, after the seal thread stopped, for a
    /// rotation that ended after it; a flush that needs its WAL sealed.
    pub(super) fn run_queued_seals(&self) {
        loop {
            let job = self.state.lock().seals.jobs.pop_front();
            match job {
                Some(job) => self.seal(job),
                None => return,
            }
        }
    }

    /// Answers every queued seal, and every seal queued from now on, with an error: no thread
    /// will run them (the seal thread panicked, or `close` did while running them).
    pub(super) fn abandon_seals(&self) {
        let jobs = self.state.lock().seals.abandon();
        drop(jobs);
    }

    /// Syncs the directory (so that the next WAL's name is durable), then seals `old`
    /// (fsync, sync mark, cut, fsync): on the seal thread, or inline for `Db::flush`.
    pub(super) fn seal_wal(&self, old: &mut WalWriter) -> Result<()> {
        self.fs
            .sync_dir(&self.dir)
            .map_err(|e| io_context("sync directory", &self.dir, e))?;
        old.finish()
    }

    /// Seals a queued WAL. A failure stops writes; either way the outcome goes to the waiters.
    fn seal(&self, mut job: SealJob) {
        let res = self.seal_wal(&mut job.wal);
        if let Err(e) = &res {
            let mut st = self.state.lock();
            self.poison(&mut st, e);
        }
        job.seal.complete(res);
        self.notify_all();
    }

    /// Waits until WAL `number` is sealed, if it was given to the seal thread (a flush, before
    /// it writes that WAL's memtable to a table), sealing the queued WALs on this thread if
    /// the seal thread has not taken them (it may have stopped for `close`). Seals that run on
    /// two threads at once still complete in order: each WAL's fsyncs wait for the seal
    /// before it.
    ///
    /// Errors: the seal's failure (which already stopped writes), for every call: the flush
    /// must not write a table of writes its WAL may have lost, which a power loss before the
    /// manifest edit would leave as a table no WAL accounts for.
    pub(super) fn wait_sealed(&self, number: u64) -> Result<()> {
        let seal = self.state.lock().seals.by_wal.get(&number).cloned();
        let Some(seal) = seal else {
            return Ok(());
        };
        self.run_queued_seals();
        seal.wait()?;
        self.state.lock().seals.by_wal.remove(&number);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::{FileSystem, MemFs};
    use crate::options::LogWrites;
    use std::path::Path;

    fn writer(fs: &MemFs, number: u64) -> WalWriter {
        let path = Path::new("/db").join(format!("{number:06}.wal"));
        WalWriter::create(fs, &path, number, LogWrites::Syscall).unwrap()
    }

    /// Once abandoned (the seal thread panicked), a queue answers the seals it held, and
    /// every seal queued later, with an error at once: no waiter waits for a seal no thread
    /// will run.
    #[test]
    fn an_abandoned_queue_answers_held_and_later_seals_with_an_error() {
        let fs = MemFs::new();
        fs.create_dir_all(Path::new("/db")).unwrap();
        let mut q = SealQueue::default();
        let (a, b) = (Arc::new(WalSeal::default()), Arc::new(WalSeal::default()));
        assert!(q.push(writer(&fs, 1), 1, a.clone()).is_none());
        assert!(q.push(writer(&fs, 2), 2, b.clone()).is_none());
        assert!(!a.is_complete() && !b.is_complete());
        drop(q.abandon());
        assert!(a.wait().is_err() && b.wait().is_err());
        let later = Arc::new(WalSeal::default());
        let given_back = q.push(writer(&fs, 3), 3, later.clone());
        assert!(given_back.is_some() && !later.is_complete());
        drop(given_back);
        assert!(later.is_complete());
        assert!(later.wait().is_err());
        assert!(q.jobs.is_empty());
        // The flush of the memtable of WAL 3 still finds its (failed) seal.
        assert!(q.by_wal.get(&3).is_some_and(|s| s.wait().is_err()));
    }

    /// A queued seal asks for the next spare, which is due only once no seal is queued or
    /// under way and the last one was taken.
    #[test]
    fn a_spare_is_made_after_the_seals_and_once_the_last_was_taken() {
        let fs = MemFs::new();
        fs.create_dir_all(Path::new("/db")).unwrap();
        let mut q = SealQueue::default();
        assert!(q.take_spare().is_none());
        q.spare = Some(writer(&fs, 6));
        assert!(q.take_spare().is_some_and(|w| w.number() == 6));
        assert!(q.spare.is_none());
        assert!(!q.spare_due());
        let seal = Arc::new(WalSeal::default());
        assert!(q.push(writer(&fs, 6), 6, seal.clone()).is_none());
        assert!(q.want_spare && !q.spare_due(), "a seal is queued");
        let job = q.jobs.pop_front().unwrap();
        assert!(!q.spare_due(), "a seal is under way");
        seal.complete(Ok(()));
        drop(job);
        assert!(q.spare_due());
        q.spare = Some(writer(&fs, 8));
        assert!(!q.spare_due(), "a spare is there");
    }
}
