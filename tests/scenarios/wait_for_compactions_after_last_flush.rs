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

#[test]
fn waiting_for_compactions_waits_for_the_last_flush_to_remove_its_wal() {
    let mem = MemFs::new();
    let armed = Arc::new(AtomicBool::new(false));
    let (entered_tx, entered_rx) = mpsc::channel::<String>();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let (entered_tx, release_rx) = (Mutex::new(entered_tx), Mutex::new(release_rx));
    let hook_armed = armed.clone();
    let fs = HookedFs {
        inner: mem.clone(),
        on_open: None,
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
        on_sync_dir: None,
        on_sync: None,
    };
    let dir = Path::new("/db");
    let opts = common::small_options()
        .memtable_size(1 << 20)
        .auto_compaction(false)
        .file_system(Arc::new(fs) as Arc<dyn FileSystem>);
    let db = Arc::new(Db::open_with(dir, opts).unwrap());
    for i in 0..100u32 {
        db.insert(format!("key{i:04}"), [b'v'; 50]).unwrap();
    }
    armed.store(true, Ordering::SeqCst);
    // `flush` seals the memtable and waits for the flush thread; the purge thread stops in
    // the WAL's removal, after the table is installed.
    let flusher = {
        let db = db.clone();
        std::thread::spawn(move || db.flush())
    };
    let wal = entered_rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the flush thread reached the WAL's removal");
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
