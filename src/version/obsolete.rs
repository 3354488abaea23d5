//! [`ObsoleteFiles`]: the queue of files waiting to be deleted by background work: tables that
//! no version references any more and no reader holds, and the WALs of flushed memtables.
//!
//! The last holder of an obsolete table is often a user thread finishing a get or dropping an
//! iterator. It only queues the path; the engine's purge thread does the `unlink`, so a user
//! thread never pays for a file-system operation it did not ask for. Files still queued when
//! the database closes are deleted by `close`; a table whose last holder is dropped after the
//! close stays on disk until the next open removes every file the manifest does not reference.

use crate::fs::FileSystem;
use parking_lot::{Condvar, Mutex};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Default)]
struct Queue {
    paths: Vec<PathBuf>,
    /// Paths taken by a purge that has not finished deleting them.
    in_flight: Vec<PathBuf>,
    /// No purge will run any more: paths queued from now on stay for the next open.
    closed: bool,
}

/// Obsolete files (tables, flushed WALs) waiting for deletion.
#[derive(Debug)]
pub(crate) struct ObsoleteFiles {
    fs: Arc<dyn FileSystem>,
    queue: Mutex<Queue>,
    /// Signalled when a path is queued and when a purge finishes.
    changed: Condvar,
    /// Deletions that failed (each file stays until the next open removes it).
    failures: AtomicU64,
}

impl ObsoleteFiles {
    pub(crate) fn new(fs: Arc<dyn FileSystem>) -> Arc<ObsoleteFiles> {
        Arc::new(ObsoleteFiles {
            fs,
            queue: Mutex::new(Queue::default()),
            changed: Condvar::new(),
            failures: AtomicU64::new(0),
        })
    }

    /// Queues `path` for deletion.
    pub(crate) fn push(&self, path: PathBuf) {
        let mut q = self.queue.lock();
        if q.closed {
            log::info!("{} is obsolete; the next open removes it", path.display());
            return;
        }
        q.paths.push(path);
        drop(q);
        self.changed.notify_all();
    }

    /// Deletes every queued file; returns how many were queued. Errors are logged and
    /// counted ([`failures`](Self::failures)), not retried: a file that cannot be removed now
    /// is removed by the next open (which deletes every file the manifest does not list).
    pub(crate) fn purge(&self) -> usize {
        let batch = {
            let mut q = self.queue.lock();
            let batch = std::mem::take(&mut q.paths);
            q.in_flight.extend(batch.iter().cloned());
            batch
        };
        for path in &batch {
            match self.fs.remove(path) {
                Ok(()) => log::info!("removed obsolete file {}", path.display()),
                // Already gone: nothing is left behind.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    self.failures.fetch_add(1, Ordering::Relaxed);
                    log::warn!(
                        "could not remove obsolete file {} (the next open removes it): {e}",
                        path.display()
                    );
                }
            }
        }
        if !batch.is_empty() {
            let mut q = self.queue.lock();
            q.in_flight.retain(|p| !batch.contains(p));
            drop(q);
            self.changed.notify_all();
        }
        batch.len()
    }

    /// Deletions that failed so far.
    pub(crate) fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    /// Waits up to `timeout` for a file to be queued; true if one is.
    pub(crate) fn wait_for_work(&self, timeout: Duration) -> bool {
        let mut q = self.queue.lock();
        if q.paths.is_empty() {
            self.changed.wait_for(&mut q, timeout);
        }
        !q.paths.is_empty()
    }

    /// Waits until nothing is queued or being deleted (for `wait_for_compactions`), up to
    /// `timeout`; true if the queue drained.
    pub(crate) fn wait_idle(&self, timeout: Duration) -> bool {
        self.wait_gone(|_| true, timeout)
    }

    /// Waits until no path for which `which` is true is queued or being deleted, up to
    /// `timeout`; true if none is.
    pub(crate) fn wait_gone(&self, which: impl Fn(&Path) -> bool, timeout: Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        let mut q = self.queue.lock();
        while q.paths.iter().chain(q.in_flight.iter()).any(|p| which(p)) {
            if self.changed.wait_until(&mut q, deadline).timed_out() {
                return false;
            }
        }
        true
    }

    /// True if `path` waits for deletion or is being deleted.
    pub(crate) fn is_pending(&self, path: &Path) -> bool {
        let q = self.queue.lock();
        q.paths.iter().chain(q.in_flight.iter()).any(|p| p == path)
    }

    /// Gives up on every queued file, and on every one queued later, leaving them for the
    /// next open (the purge thread panicked): waiters for the queue to drain return.
    pub(crate) fn abandon(&self) {
        let mut q = self.queue.lock();
        q.closed = true;
        q.paths.clear();
        q.in_flight.clear();
        drop(q);
        self.changed.notify_all();
    }

    /// Stops accepting paths: later ones are left for the next open.
    pub(crate) fn close(&self) {
        self.queue.lock().closed = true;
        self.changed.notify_all();
    }

    /// Wakes a purge thread waiting in [`wait_for_work`](Self::wait_for_work).
    pub(crate) fn wake(&self) {
        self.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::MemFs;

    #[test]
    fn queued_files_are_deleted_by_purge_not_by_push() {
        let mem = MemFs::new();
        mem.create_dir_all(Path::new("/d")).unwrap();
        mem.write_file(Path::new("/d/000001.sst"), b"x").unwrap();
        mem.write_file(Path::new("/d/000002.sst"), b"y").unwrap();
        let q = ObsoleteFiles::new(Arc::new(mem.clone()));
        q.push(PathBuf::from("/d/000001.sst"));
        assert!(
            mem.exists(Path::new("/d/000001.sst")),
            "push must not delete"
        );
        assert!(q.is_pending(Path::new("/d/000001.sst")));
        assert!(q.wait_for_work(Duration::ZERO));
        assert!(!q.wait_idle(Duration::from_millis(1)));
        assert!(!q.wait_gone(|p| p.ends_with("000001.sst"), Duration::ZERO));
        assert!(q.wait_gone(|p| p.ends_with("000002.sst"), Duration::ZERO));
        assert_eq!(q.purge(), 1);
        assert!(!mem.exists(Path::new("/d/000001.sst")));
        assert!(!q.is_pending(Path::new("/d/000001.sst")));
        assert!(q.wait_idle(Duration::ZERO));
        // After close, paths are left for the next open.
        q.close();
        q.push(PathBuf::from("/d/000002.sst"));
        assert_eq!(q.purge(), 0);
        assert!(mem.exists(Path::new("/d/000002.sst")));
    }

    /// After the purge thread gave up (a panic), waiting for the queue to drain returns at
    /// once, and the files stay for the next open.
    #[test]
    fn an_abandoned_queue_is_idle_and_keeps_its_files() {
        let mem = MemFs::new();
        mem.create_dir_all(Path::new("/d")).unwrap();
        mem.write_file(Path::new("/d/000001.wal"), b"x").unwrap();
        let q = ObsoleteFiles::new(Arc::new(mem.clone()));
        q.push(PathBuf::from("/d/000001.wal"));
        assert!(!q.wait_idle(Duration::from_millis(1)));
        q.abandon();
        assert!(q.wait_idle(Duration::ZERO));
        q.push(PathBuf::from("/d/000001.wal"));
        assert!(q.wait_idle(Duration::ZERO));
        assert_eq!(q.purge(), 0);
        assert!(mem.exists(Path::new("/d/000001.wal")));
    }
}
