//! [`TableCache`]: the open file descriptors of tables, at most `max_open_files` of them.
//!
//! Every live table keeps its footer, index and filter in memory (that is what lets a get skip
//! a table with zero I/O); only its file descriptor is closed when the cache is full, and
//! reopened on demand. Opening is single-flight: threads that need the same closed table wait
//! for one open instead of each opening it. Running out of descriptors (`EMFILE`, `ENFILE`) is
//! transient: the cache sheds a quarter of its descriptors and retries with a short backoff,
//! and reports [`io::Error`] only if that keeps failing.

use crate::fs::{FileSystem, RandomAccessFile};
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Tries of an open that fails for lack of descriptors before giving up.
const OPEN_TRIES: u32 = 8;

/// Open table files by table id.
pub(crate) struct TableCache {
    files: quick_cache::sync::Cache<u64, Arc<dyn RandomAccessFile>>,
    capacity: usize,
    opens: AtomicU64,
}

impl std::fmt::Debug for TableCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableCache")
            .field("capacity", &self.capacity)
            .field("open", &self.files.len())
            .finish()
    }
}

/// True for the errors that mean "no descriptor left" (this process's or the system's).
pub(crate) fn out_of_descriptors(e: &io::Error) -> bool {
    const EMFILE: i32 = 24;
    const ENFILE: i32 = 23;
    matches!(e.raw_os_error(), Some(EMFILE | ENFILE))
}

impl TableCache {
    /// A cache of at most `capacity` open files (at least 1).
    pub(crate) fn new(capacity: usize) -> TableCache {
        let capacity = capacity.max(1);
        TableCache {
            files: quick_cache::sync::Cache::new(capacity),
            capacity,
            opens: AtomicU64::new(0),
        }
    }

    /// The most descriptors the cache keeps open.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Descriptors open now.
    pub(crate) fn open_files(&self) -> usize {
        self.files.len()
    }

    /// Files opened so far (first opens and reopens after eviction).
    pub(crate) fn opens(&self) -> u64 {
        self.opens.load(Ordering::Relaxed)
    }

    /// The open file of table `id` at `path`, opening it (once, however many threads ask) if
    /// it is not open.
    pub(crate) fn file(
        &self,
        id: u64,
        fs: &dyn FileSystem,
        path: &Path,
    ) -> io::Result<Arc<dyn RandomAccessFile>> {
        self.files.get_or_insert_with(&id, || self.open(fs, path))
    }

    fn open(&self, fs: &dyn FileSystem, path: &Path) -> io::Result<Arc<dyn RandomAccessFile>> {
        let mut tries = 0;
        loop {
            match fs.open(path) {
                Ok(f) => {
                    self.opens.fetch_add(1, Ordering::Relaxed);
                    return Ok(f);
                }
                Err(e) if out_of_descriptors(&e) && tries + 1 < OPEN_TRIES => {
                    tries += 1;
                    log::warn!(
                        "opening {}: {e}; closing a quarter of the {} cached table files and retrying",
                        path.display(),
                        self.files.len()
                    );
                    self.shed();
                    std::thread::sleep(Duration::from_millis(1 << tries));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Closes about a quarter of the cached descriptors (at least one).
    fn shed(&self) {
        let n = (self.files.len() / 4).max(1);
        let victims: Vec<u64> = self.files.iter().take(n).map(|(id, _)| id).collect();
        for id in victims {
            self.files.remove(&id);
        }
    }

    /// Closes the descriptor of table `id` (its table is gone).
    pub(crate) fn forget(&self, id: u64) {
        self.files.remove(&id);
    }
}
