//! Sealing a full memtable creates the next WAL, fsyncs the directory and fsyncs the old WAL
//! without holding the database's state lock: while a rotation's directory fsync is held
//! up, `Db::sync` (which needs that lock) and the background threads still run.

use crate::common;

use common::hooked_fs::{hold_dir_sync_of, HeldDirSync};
use siltdb::fs::FileSystem;
use siltdb::Db;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

#[test]
fn a_slow_rotation_fsync_does_not_hold_the_state_lock() {
    // Holds the writer thread's first directory fsync once armed (a rotation's), until the
    // test releases it.
    let HeldDirSync {
        fs,
        armed,
        entered: entered_rx,
        release: release_tx,
    } = hold_dir_sync_of("writer");
    let dir = Path::new("/db");
    let opts = common::small_options()
        .memtable_size(64 << 10)
        .auto_compaction(false)
        .file_system(Arc::new(fs) as Arc<dyn FileSystem>);
    let db = Arc::new(Db::open_with(dir, opts).unwrap());
    armed.store(true, Ordering::SeqCst);
    let w = db.clone();
    let writer = std::thread::Builder::new()
        .name("writer".into())
        .spawn(move || {
            // 2,000 x ~130 bytes: several 64 KiB memtables, so a rotation happens.
            for i in 0..2_000u32 {
                w.insert(format!("key{i:06}"), [b'v'; 100]).unwrap();
            }
        })
        .unwrap();
    entered_rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the writer reached a rotation's directory fsync");
    // The writer is inside the rotation now. `sync` takes the state lock first.
    let (done_tx, done_rx) = mpsc::channel();
    let s = db.clone();
    let syncer = std::thread::spawn(move || {
        let r = s.sync();
        done_tx.send(r.is_ok()).unwrap();
    });
    let synced = done_rx.recv_timeout(Duration::from_secs(10));
    release_tx.send(()).unwrap();
    assert_eq!(
        synced,
        Ok(true),
        "Db::sync waited for a rotation's directory fsync"
    );
    syncer.join().unwrap();
    writer.join().unwrap();
    assert_eq!(db.get("key001999").unwrap().unwrap(), [b'v'; 100]);
    // The sealed memtables are flushed by the background thread, maybe after the writer is
    // done: wait for them before counting.
    db.wait_for_compactions().unwrap();
    assert!(db.stats().flushes >= 1);
}
