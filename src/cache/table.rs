//! [`TableCache`]: the open file descriptors of tables, at most `max_open_files` of them.
//!
//! Every live table keeps its footer, index and filter in memory (that is what lets a get skip
//! a table with zero I/O); only its file descriptor is closed when the cache is full, and
//! reopened on demand. Opening is single-flight: threads that need the same closed table wait
//! for one open instead of each opening it. Running out of descriptors (`EMFILE`, `ENFILE`) is
//! transient: the cache sheds a quarter of its descriptors and retries with a short backoff,
//! and reports [`io::Error`] only if that keeps failing.

use crate::fs::{FileSystem, RandomAccessFile};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Tries of an open that fails for lack of descriptors before giving up.
const OPEN_TRIES: u32 = 8;

/// Open table files by table id.
pub(crate) struct TableCache {
    files: quick_cache::sync::Cache<u64, Arc<dyn RandomAccessFile>>,
    capacity: usize,
    opens: AtomicU64,
    /// Set by [`close_all`](Self::close_all): no descriptor is cached after it.
    closed: AtomicBool,
    /// The last failed open of each table, for the threads that waited for it (see
    /// [`file`](Self::file)); entries older than [`FAILURE_KEPT`] are dropped.
    failures: Mutex<HashMap<u64, Failure>>,
}

/// A failed open: when it ended, and its error.
struct Failure {
    at: Instant,
    os_error: Option<i32>,
    kind: io::ErrorKind,
    message: String,
}

impl Failure {
    fn error(&self) -> io::Error {
        match self.os_error {
            Some(code) => io::Error::from_raw_os_error(code),
            None => io::Error::new(self.kind, self.message.clone()),
        }
    }
}

/// How long a failed open is kept for the threads that waited for it: longer than any wait
/// for one open (its retries sleep about a quarter of a second in all).
const FAILURE_KEPT: Duration = Duration::from_secs(10);

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
    /// A cache of at most `capacity` open files (at least 1), in one shard: `quick_cache`
    /// gives each of its shards `ceil(capacity / shards)` entries, so its default of four
    /// shards per CPU let the total pass `capacity` (1,024 for 1,000 on eight CPUs) and closed
    /// files of a full shard while others had room (as many live tables as `capacity` kept
    /// reopening some). A file is looked up once per block read from disk (a system call
    /// anyway), so one shard's lock costs nothing that matters.
    pub(crate) fn new(capacity: usize) -> TableCache {
        let capacity = capacity.max(1);
        let options = quick_cache::OptionsBuilder::new()
            .estimated_items_capacity(capacity)
            .weight_capacity(capacity as u64)
            .shards(1)
            .build();
        let files = match options {
            Ok(o) => quick_cache::sync::Cache::with_options(
                o,
                Default::default(),
                Default::default(),
                Default::default(),
            ),
            // Only a capacity left unset is refused, and both are set above.
            Err(_) => quick_cache::sync::Cache::new(capacity),
        };
        TableCache {
            files,
            capacity,
            opens: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            failures: Mutex::new(HashMap::new()),
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
    /// it is not open. Threads that waited for an open that failed get its error without
    /// trying again themselves (with no descriptor left, each try sheds descriptors and sleeps
    /// a quarter of a second in all: one after another, the last of many readers waited for
    /// all of them); a call made after the failure tries again. After
    /// [`close_all`](Self::close_all), a read still running (it raced the close) gets a
    /// descriptor of its own, closed when the read lets go of it.
    pub(crate) fn file(
        &self,
        id: u64,
        fs: &dyn FileSystem,
        path: &Path,
    ) -> io::Result<Arc<dyn RandomAccessFile>> {
        if self.is_closed() {
            return self.open(fs, path);
        }
        if let Some(file) = self.files.get(&id) {
            return Ok(file);
        }
        let asked = Instant::now();
        let file = self.files.get_or_insert_with(&id, || {
            // quick_cache hands a failed open's slot to the next thread waiting for it.
            if let Some(f) = self.failures.lock().get(&id) {
                if f.at >= asked {
                    return Err(f.error());
                }
            }
            self.open(fs, path)
                .inspect_err(|e| self.record_failure(id, e))
        })?;
        // A close that began meanwhile may have cleared the cache before this insert: take
        // it out again. (The flag is set before the clear, so one of the two sees the other.)
        if self.is_closed() {
            self.files.remove(&id);
        }
        Ok(file)
    }

    fn record_failure(&self, id: u64, e: &io::Error) {
        let now = Instant::now();
        let mut failures = self.failures.lock();
        failures.retain(|_, f| now.duration_since(f.at) < FAILURE_KEPT);
        failures.insert(
            id,
            Failure {
                at: now,
                os_error: e.raw_os_error(),
                kind: e.kind(),
                message: e.to_string(),
            },
        );
    }

    /// True once [`close_all`](Self::close_all) ran: the database is closed.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
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

    /// Closes every cached descriptor, and caches none from now on (the database is closed: a
    /// handle kept after `close` must not hold files another handle deletes, or their space).
    pub(crate) fn close_all(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.files.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::{FileLock, MemFs, WritableFile};
    use std::sync::atomic::AtomicU32;

    /// A `MemFs` whose next `failures` opens fail with EMFILE.
    #[derive(Debug)]
    struct Exhausted {
        inner: MemFs,
        failures: AtomicU32,
    }

    impl FileSystem for Exhausted {
        fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
            self.inner.create(path)
        }
        fn open(&self, path: &Path) -> io::Result<Arc<dyn RandomAccessFile>> {
            if self
                .failures
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
            {
                return Err(io::Error::from_raw_os_error(24));
            }
            self.inner.open(path)
        }
        fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
            self.inner.rename(from, to)
        }
        fn remove(&self, path: &Path) -> io::Result<()> {
            self.inner.remove(path)
        }
        fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
            self.inner.list(dir)
        }
        fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
            self.inner.create_dir_all(dir)
        }
        fn sync_dir(&self, dir: &Path) -> io::Result<()> {
            self.inner.sync_dir(dir)
        }
        fn sync_file(&self, path: &Path) -> io::Result<()> {
            self.inner.sync_file(path)
        }
        fn lock(&self, path: &Path) -> io::Result<Box<dyn FileLock>> {
            self.inner.lock(path)
        }
        fn exists(&self, path: &Path) -> bool {
            self.inner.exists(path)
        }
    }

    fn setup(failures: u32) -> (Exhausted, TableCache) {
        let inner = MemFs::new();
        inner.create_dir_all(Path::new("/d")).unwrap();
        for i in 0..8 {
            inner
                .write_file(&Path::new("/d").join(format!("{i}.sst")), b"x")
                .unwrap();
        }
        let fs = Exhausted {
            inner,
            failures: AtomicU32::new(failures),
        };
        (fs, TableCache::new(4))
    }

    #[test]
    fn as_many_tables_as_the_capacity_stay_open() {
        // With quick_cache's own sharding, 100 descriptors were split over shards of 50 (on
        // two CPUs; 32 each on eight), and a shard that drew more than its share of the 100
        // ids closed some while another had room: the second pass reopened files.
        let fs = MemFs::new();
        fs.create_dir_all(Path::new("/d")).unwrap();
        let cache = TableCache::new(100);
        let path = |i: u64| Path::new("/d").join(format!("{i}.sst"));
        for i in 0..100u64 {
            fs.write_file(&path(i), b"x").unwrap();
        }
        for _ in 0..2 {
            for i in 0..100u64 {
                cache.file(i, &fs, &path(i)).unwrap();
            }
        }
        assert_eq!(cache.opens(), 100);
        assert_eq!(cache.open_files(), 100);
        // One more table closes one descriptor: never more than the capacity open.
        fs.write_file(&path(100), b"x").unwrap();
        cache.file(100, &fs, &path(100)).unwrap();
        assert_eq!(cache.open_files(), 100);
    }

    #[test]
    fn running_out_of_descriptors_sheds_and_retries() {
        let (fs, cache) = setup(0);
        for i in 0..4u64 {
            cache
                .file(i, &fs, Path::new(&format!("/d/{i}.sst")))
                .unwrap();
        }
        assert_eq!(cache.open_files(), 4);
        // Three EMFILEs in a row: the cache closes some descriptors and the open succeeds.
        fs.failures.store(3, Ordering::SeqCst);
        let f = cache.file(9, &fs, Path::new("/d/5.sst")).unwrap();
        assert_eq!(f.len(), 1);
        assert!(cache.open_files() <= 4);
        assert_eq!(cache.opens(), 5);
    }

    #[test]
    fn persistent_exhaustion_is_an_io_error_and_not_remembered() {
        let (fs, cache) = setup(100);
        let e = match cache.file(1, &fs, Path::new("/d/1.sst")) {
            Err(e) => e,
            Ok(_) => panic!("opened with no descriptors left"),
        };
        assert!(out_of_descriptors(&e));
        // Once descriptors are back, the same table opens: nothing marked it broken.
        fs.failures.store(0, Ordering::SeqCst);
        assert!(cache.file(1, &fs, Path::new("/d/1.sst")).is_ok());
    }

    /// Review finding (session 23): quick_cache hands a failed open's slot to the next
    /// waiting thread, which ran the whole shed-and-retry loop again: the k-th of many readers
    /// of one table waited k quarter-seconds, and every one of them shed descriptors.
    #[test]
    fn threads_waiting_for_a_failed_open_share_its_error() {
        let (fs, cache) = setup(1_000);
        let fs = Arc::new(fs);
        let cache = Arc::new(cache);
        let readers = 6;
        let start = Arc::new(std::sync::Barrier::new(readers));
        let threads: Vec<_> = (0..readers)
            .map(|_| {
                let (fs, cache, start) = (fs.clone(), cache.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    match cache.file(1, fs.as_ref(), Path::new("/d/1.sst")) {
                        Err(e) => assert!(out_of_descriptors(&e), "{e}"),
                        Ok(_) => panic!("opened with no descriptors left"),
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let tries = 1_000 - fs.failures.load(Ordering::SeqCst);
        // One open's tries (a reader that came after the failure may make its own): before,
        // each of the six made all of its own, 48.
        assert!(tries <= 2 * OPEN_TRIES, "{tries} tries to open");
    }

    #[test]
    fn after_close_all_a_read_gets_a_descriptor_of_its_own_and_none_is_cached() {
        let (fs, cache) = setup(0);
        let path = Path::new("/d/1.sst");
        cache.file(1, &fs, path).unwrap();
        assert_eq!(cache.open_files(), 1);
        cache.close_all();
        assert!(cache.is_closed());
        assert_eq!(cache.open_files(), 0);
        let f = cache.file(1, &fs, path).unwrap();
        assert_eq!(f.len(), 1);
        assert_eq!(
            cache.open_files(),
            0,
            "a descriptor was cached after the close"
        );
        assert_eq!(cache.opens(), 2);
    }
}
