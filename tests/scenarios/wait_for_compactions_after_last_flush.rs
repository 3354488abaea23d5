//! `Db::wait_for_compactions` and `Db::flush` return only once the last flush is done, not
//! when its table is installed: a flush takes its memtable off the queue when it installs the
//! table, and only then counts itself and queues the memtable's WAL, which the purge thread
//! removes. Here that removal is held while both run: neither may return until the WAL is
//! gone and the flush counted.

use crate::common;

use common::hooked_fs::HookedFs;
use siltdb::fs::{FileSystem, MemFs};
use siltdb::Db;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

/// A database on a `MemFs` whose next WAL removal, once armed, tells `entered` the WAL's
/// name and waits for `release` (or 20 s); 100 writes in its memtable.
struct HeldRemoval {
    db: Arc<Db>,
    mem: MemFs,
    armed: Arc<AtomicBool>,
    entered: mpsc::Receiver<String>,
    release: mpsc::Sender<()>,
}

fn held_removal() -> HeldRemoval {
    let mem = MemFs::new();
    let armed = Arc::new(AtomicBool::new(false));
    let (entered_tx, entered) = mpsc::channel::<String>();
    let (release, release_rx) = mpsc::channel::<()>();
    let (entered_tx, release_rx) = (Mutex::new(entered_tx), Mutex::new(release_rx));
    let hook_armed = armed.clone();
    let fs = HookedFs {
        on_remove: Some(Arc::new(move |p: &Path| {
            let wal = p.extension().is_some_and(|e| e == "wal");
            if wal && hook_armed.swap(false, Ordering::SeqCst) {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                entered_tx.lock().unwrap().send(name).unwrap();
                let _ = release_rx
                    .lock()
                    .unwrap()
                    .recv_timeout(Duration::from_secs(20));
            }
        })),
        ..HookedFs::new(mem.clone())
    };
    let opts = common::small_options()
        .memtable_size(1 << 20)
        .auto_compaction(false)
        .file_system(Arc::new(fs) as Arc<dyn FileSystem>);
    let db = Arc::new(Db::open_with(Path::new(DIR), opts).unwrap());
    for i in 0..100u32 {
        db.insert(format!("key{i:04}"), [b'v'; 50]).unwrap();
    }
    HeldRemoval {
        db,
        mem,
        armed,
        entered,
        release,
    }
}

const DIR: &str = "/db";

#[test]
fn waiting_for_compactions_waits_for_the_last_flush_to_remove_its_wal() {
    let HeldRemoval {
        db,
        mem,
        armed,
        entered: entered_rx,
        release: release_tx,
    } = held_removal();
    let dir = Path::new(DIR);
    armed.store(true, Ordering::SeqCst);
    let flusher = {
        let db = db.clone();
        std::thread::spawn(move || db.flush())
    };
    let wal = entered_rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the purge thread reached the WAL's removal");
    assert!(mem.exists(&dir.join(&wal)));
    let (done_tx, done_rx) = mpsc::channel();
    let waiter = {
        let db = db.clone();
        std::thread::spawn(move || done_tx.send(db.wait_for_compactions()).unwrap())
    };
    // While the removal is held, the wait goes on (it would have returned at once when the
    // memtable left the queue).
    assert_eq!(
        done_rx.recv_timeout(Duration::from_millis(300)).err(),
        Some(mpsc::RecvTimeoutError::Timeout),
        "wait_for_compactions returned while the last flush was unfinished"
    );
    assert!(
        !flusher.is_finished(),
        "flush returned before the flushed memtable's WAL was removed"
    );
    release_tx.send(()).unwrap();
    let waited = done_rx
        .recv_timeout(Duration::from_secs(20))
        .expect("wait_for_compactions returned after the flush finished");
    assert!(waited.is_ok(), "{waited:?}");
    // What it promised: the flush is counted and its WAL is gone.
    assert_eq!(db.stats().flushes, 1);
    assert!(!mem.exists(&dir.join(&wal)));
    waiter.join().unwrap();
    flusher.join().unwrap().unwrap();
    assert_eq!(db.get("key0099").unwrap().unwrap(), [b'v'; 50]);
}

/// A close while `Db::flush` waits for the flushed memtable's WAL to be removed does not make
/// that flush fail (its table is durable), and the WAL is gone when the close returns.
#[test]
fn a_close_while_flush_waits_for_the_wal_removal_leaves_the_flush_ok() {
    let HeldRemoval {
        db,
        mem,
        armed,
        entered,
        release,
    } = held_removal();
    armed.store(true, Ordering::SeqCst);
    let flusher = {
        let db = db.clone();
        std::thread::spawn(move || db.flush())
    };
    let wal = entered
        .recv_timeout(Duration::from_secs(20))
        .expect("the purge thread reached the WAL's removal");
    // The close waits for the purge thread, which is held: it runs on its own thread.
    let closer = {
        let db = db.clone();
        std::thread::spawn(move || db.close())
    };
    let flushed = flusher.join().unwrap();
    assert!(flushed.is_ok(), "{flushed:?}");
    release.send(()).unwrap();
    closer.join().unwrap().unwrap();
    assert!(!mem.exists(&Path::new(DIR).join(&wal)));
    // The flushed writes are in a table: a reopen finds them with no WAL to replay.
    drop(db);
    let db = Db::open_with(DIR, common::small_options().file_system(Arc::new(mem))).unwrap();
    assert_eq!(db.get("key0099").unwrap().unwrap(), [b'v'; 50]);
}
