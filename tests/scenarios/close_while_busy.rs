//! `close` while the database is busy. Called while a writer is starting a new WAL (a full
//! memtable's rotation, which creates the file without the state lock), it waits for that
//! rotation to end, and seals the old WAL, before it syncs the WAL and lets go of the
//! directory: no file is created or synced after `close` returned, and every acknowledged
//! write is there on the next open. Called while another thread closes, it waits for that
//! close and returns the same outcome (an error from the final WAL sync included).

use crate::common;

use common::hooked_fs::{hold_once, hold_wal_create_of, HeldWalCreate, HookedFs};
use siltdb::fs::{FaultPlan, FileSystem, MemFs, OpKind};
use siltdb::{Db, Error};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::Duration;

#[test]
fn close_during_a_rotation_waits_for_it_and_keeps_every_acknowledged_write() {
    let HeldWalCreate {
        fs,
        armed,
        entered,
        release,
    } = hold_wal_create_of("writer");
    let dir = Path::new("/db");
    let opts = || {
        common::small_options()
            .memtable_size(64 << 10)
            .auto_compaction(false)
            .file_system(Arc::new(fs.clone()) as Arc<dyn FileSystem>)
    };
    let db = Arc::new(Db::open_with(dir, opts()).unwrap());
    armed.store(true, Ordering::SeqCst);
    let w = db.clone();
    let writer = std::thread::Builder::new()
        .name("writer".into())
        .spawn(move || {
            // ~130 bytes a write: the first 64 KiB memtable fills within 600 writes.
            for i in 0..2_000u32 {
                if let Err(e) = w.insert(format!("key{i:06}"), [b'v'; 100]) {
                    return (i, Some(e));
                }
            }
            (2_000, None)
        })
        .unwrap();
    entered
        .recv_timeout(Duration::from_secs(20))
        .expect("the writer reached a rotation's creation of the next WAL");
    let (done_tx, done_rx) = mpsc::channel();
    let c = db.clone();
    let closer = std::thread::spawn(move || done_tx.send(c.close()).unwrap());
    // The rotation is held: `close` must still be waiting for it.
    assert!(
        done_rx.recv_timeout(Duration::from_millis(500)).is_err(),
        "close returned while a rotation was creating the next WAL"
    );
    let files_before = fs.list(dir).unwrap();
    release.send(()).unwrap();
    let closed = done_rx
        .recv_timeout(Duration::from_secs(20))
        .expect("close returned once the rotation ended");
    assert!(closed.is_ok(), "{closed:?}");
    let mut files_at_close = fs.list(dir).unwrap();
    closer.join().unwrap();
    let (acked, err) = writer.join().unwrap();
    assert!(matches!(err, Some(Error::Closed)), "{err:?}");
    assert!(acked > 0 && acked < 2_000, "{acked}");
    // The held rotation created its WAL before `close` returned, and nothing came or went
    // after that.
    std::thread::sleep(Duration::from_millis(300));
    let mut files_after = fs.list(dir).unwrap();
    files_at_close.sort();
    files_after.sort();
    assert_eq!(files_at_close, files_after);
    let new: Vec<&String> = files_after
        .iter()
        .filter(|f| !files_before.contains(f))
        .collect();
    assert!(
        new.len() == 1 && new[0].ends_with(".wal"),
        "{files_before:?} -> {files_after:?}"
    );
    // Every acknowledged write comes back.
    drop(db);
    let db = Db::open_with(dir, opts()).unwrap();
    for i in 0..acked {
        assert_eq!(
            db.get(format!("key{i:06}")).unwrap().as_deref(),
            Some(&[b'v'; 100][..]),
            "key{i:06}"
        );
    }
    assert_eq!(db.get(format!("key{acked:06}")).unwrap(), None);
}

#[test]
fn a_close_called_while_another_runs_returns_its_outcome() {
    // Holds the first fsync of a file once armed (the final WAL sync of `close`), which the
    // fault plan then fails.
    let (hook, armed, entered, release) = hold_once(|| true);
    let fs = HookedFs {
        on_sync: Some(hook),
        ..HookedFs::new(MemFs::new())
    };
    let opts = common::small_options()
        .auto_compaction(false)
        .file_system(Arc::new(fs.clone()) as Arc<dyn FileSystem>);
    let db = Arc::new(Db::open_with(Path::new("/db"), opts).unwrap());
    db.insert("key", "value").unwrap();
    fs.inner.set_fault(Some(FaultPlan {
        index: 0,
        kinds: vec![OpKind::Sync],
        persistent: false,
        path_contains: Some(".wal".into()),
    }));
    let (first, second_rx, second_thread) = two_closes(&db, &armed, &entered);
    release.send(()).unwrap();
    let first = first.join().unwrap();
    let second = second_rx.recv_timeout(Duration::from_secs(20)).unwrap();
    second_thread.join().unwrap();
    assert_eq!(fs.inner.faults_injected(), 1);
    assert!(matches!(first, Err(Error::Io(_))), "{first:?}");
    assert!(matches!(second, Err(Error::Io(_))), "{second:?}");
    // Once closed, closing again is a no-op.
    assert!(db.close().is_ok());
}

/// A file system whose directory lock takes `delay` to let go (a slow unlock), to show what
/// runs before and after the close releases it.
#[derive(Debug)]
struct SlowUnlockFs {
    inner: HookedFs,
    delay: Duration,
    /// The lock panics when it is dropped (after letting go of the real one).
    panics: bool,
}

#[derive(Debug)]
struct SlowLock {
    inner: Option<Box<dyn siltdb::fs::FileLock>>,
    delay: Duration,
    panics: bool,
}

impl siltdb::fs::FileLock for SlowLock {}

impl Drop for SlowLock {
    fn drop(&mut self) {
        std::thread::sleep(self.delay);
        self.inner.take();
        if self.panics {
            panic!("the file system's lock panics when it is let go");
        }
    }
}

impl FileSystem for SlowUnlockFs {
    fn create(&self, path: &Path) -> std::io::Result<Box<dyn siltdb::fs::WritableFile>> {
        self.inner.create(path)
    }
    fn open(&self, path: &Path) -> std::io::Result<Arc<dyn siltdb::fs::RandomAccessFile>> {
        self.inner.open(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        self.inner.rename(from, to)
    }
    fn remove(&self, path: &Path) -> std::io::Result<()> {
        self.inner.remove(path)
    }
    fn list(&self, dir: &Path) -> std::io::Result<Vec<String>> {
        self.inner.list(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> std::io::Result<()> {
        self.inner.create_dir_all(dir)
    }
    fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
        self.inner.sync_dir(dir)
    }
    fn sync_file(&self, path: &Path) -> std::io::Result<()> {
        self.inner.sync_file(path)
    }
    fn lock(&self, path: &Path) -> std::io::Result<Box<dyn siltdb::fs::FileLock>> {
        Ok(Box::new(SlowLock {
            inner: Some(self.inner.lock(path)?),
            delay: self.delay,
            panics: self.panics,
        }))
    }
    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }
}

#[test]
fn a_close_that_waited_for_another_returns_once_the_directory_is_unlocked() {
    // The first close is held at its final WAL sync; a second waits for it. When the second
    // returns, the directory must be free: its caller may reopen at once. (It returned as
    // soon as the first marked itself done, before the lock was let go: a reopen then failed
    // with `Locked`, here for the 300 ms the unlock takes.)
    let (hook, armed, entered, release) = hold_once(|| true);
    let inner = MemFs::new();
    let fs = SlowUnlockFs {
        inner: HookedFs {
            on_sync: Some(hook),
            ..HookedFs::new(inner.clone())
        },
        delay: Duration::from_millis(300),
        panics: false,
    };
    let opts = common::small_options()
        .auto_compaction(false)
        .file_system(Arc::new(fs) as Arc<dyn FileSystem>);
    let db = Arc::new(Db::open_with(Path::new("/db"), opts).unwrap());
    db.insert("key", "value").unwrap();
    let (first, second_rx, second_thread) = two_closes(&db, &armed, &entered);
    release.send(()).unwrap();
    let second = second_rx.recv_timeout(Duration::from_secs(20)).unwrap();
    assert!(second.is_ok(), "{second:?}");
    let reopened = Db::open_with(Path::new("/db"), common::mem_options(&inner));
    assert!(reopened.is_ok(), "{:?}", reopened.err());
    assert_eq!(
        reopened.unwrap().get("key").unwrap().map(Vec::from),
        Some(b"value".to_vec())
    );
    second_thread.join().unwrap();
    assert!(first.join().unwrap().is_ok());
}

#[test]
fn a_panic_inside_close_ends_the_close_instead_of_hanging_the_drop() {
    // A user's file system panics in the final WAL sync. The panic reaches the caller of
    // `close`; the close still ends (it hung: the drop of the handle while the panic unwound
    // called `close` again, which waited for the first to finish) and lets go of the lock.
    let (db, inner, armed) = open_with_a_sync_that_panics();
    armed.store(true, Ordering::SeqCst);
    close_panics_then_ends(db);
    armed.store(false, Ordering::SeqCst);
    reopens_with_the_key(&inner);
}

/// Review finding (session 24): the drop of the last handle on a thread that was already
/// unwinding a panic let the panic of its `close` (a user's file system panicking in the
/// final WAL sync) escape the drop: a panic while panicking, which aborts the process, this
/// test binary with it. The drop now logs it, and the thread's own panic goes on.
#[test]
fn a_panic_inside_close_while_the_thread_unwinds_does_not_abort() {
    let (db, inner, armed) = open_with_a_sync_that_panics();
    armed.store(true, Ordering::SeqCst);
    let joined = std::thread::spawn(move || {
        let _db = db;
        panic!("the application panics");
    })
    .join();
    let payload = joined.expect_err("the thread panicked");
    assert_eq!(
        payload.downcast_ref::<&str>(),
        Some(&"the application panics")
    );
    armed.store(false, Ordering::SeqCst);
    reopens_with_the_key(&inner);
}

/// A database on a `MemFs` (returned too) holding "key", whose file system panics in every
/// fsync of a file being written once the returned flag is set.
fn open_with_a_sync_that_panics() -> (Db, MemFs, Arc<std::sync::atomic::AtomicBool>) {
    let armed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let inner = MemFs::new();
    let fs = HookedFs {
        on_sync: Some({
            let armed = armed.clone();
            Arc::new(move |_: &Path| {
                if armed.load(Ordering::SeqCst) {
                    panic!("the file system panics in sync");
                }
            })
        }),
        ..HookedFs::new(inner.clone())
    };
    let opts = common::small_options()
        .auto_compaction(false)
        .file_system(Arc::new(fs) as Arc<dyn FileSystem>);
    let db = Db::open_with(Path::new("/db"), opts).unwrap();
    db.insert("key", "value").unwrap();
    (db, inner, armed)
}

/// Closes `db` (a close that panics) on a thread, then closes it again and drops it: the
/// first close's panic reaches its caller, the second close is a no-op, and all of it returns
/// (a close left marked as running made the others wait forever).
fn close_panics_then_ends(db: Db) {
    let (done_tx, done_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let closed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| db.close()));
        let again = db.close();
        drop(db);
        done_tx.send((closed.is_err(), again)).unwrap();
    });
    let (panicked, again) = done_rx
        .recv_timeout(Duration::from_secs(20))
        .expect("close and drop returned");
    assert!(panicked);
    // Closing a closed database is a no-op.
    assert!(again.is_ok(), "{again:?}");
}

/// The database in `inner` reopens (its lock was let go) with the key the test wrote.
fn reopens_with_the_key(inner: &MemFs) {
    let reopened = Db::open_with(Path::new("/db"), common::mem_options(inner)).unwrap();
    assert_eq!(
        reopened.get("key").unwrap().map(Vec::from),
        Some(b"value".to_vec())
    );
}

/// Review finding (session 22): only the first part of `close` ran inside its panic guard. A
/// panic in the drops after it (the user's WAL files, table files, directory lock) left the
/// close marked as running for good: every later `close`, and the drop of the handle, waited
/// forever.
#[test]
fn a_panic_as_close_lets_go_of_the_lock_ends_the_close() {
    let inner = MemFs::new();
    let fs = SlowUnlockFs {
        inner: HookedFs::new(inner.clone()),
        delay: Duration::ZERO,
        panics: true,
    };
    let opts = common::small_options()
        .auto_compaction(false)
        .file_system(Arc::new(fs) as Arc<dyn FileSystem>);
    let db = Db::open_with(Path::new("/db"), opts).unwrap();
    db.insert("key", "value").unwrap();
    close_panics_then_ends(db);
    reopens_with_the_key(&inner);
}

/// A close held at its final WAL sync (`armed` set, `entered` signalled by the hold), and a
/// second close called meanwhile, asserted not to return while the first is held: the first
/// close's thread, the channel of the second's outcome, and the second's thread.
fn two_closes(
    db: &Arc<Db>,
    armed: &std::sync::atomic::AtomicBool,
    entered: &mpsc::Receiver<()>,
) -> (
    std::thread::JoinHandle<siltdb::Result<()>>,
    mpsc::Receiver<siltdb::Result<()>>,
    std::thread::JoinHandle<()>,
) {
    armed.store(true, Ordering::SeqCst);
    let first = {
        let db = db.clone();
        std::thread::spawn(move || db.close())
    };
    entered
        .recv_timeout(Duration::from_secs(20))
        .expect("the first close reached the final WAL sync");
    let (second_tx, second_rx) = mpsc::channel();
    let (calling_tx, calling_rx) = mpsc::channel();
    let second_thread = {
        let db = db.clone();
        std::thread::spawn(move || {
            calling_tx.send(()).unwrap();
            second_tx.send(db.close()).unwrap()
        })
    };
    calling_rx.recv_timeout(Duration::from_secs(20)).unwrap();
    assert!(
        second_rx.recv_timeout(Duration::from_millis(300)).is_err(),
        "a second close returned while the first was held"
    );
    (first, second_rx, second_thread)
}
