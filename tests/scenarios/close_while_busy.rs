//! `close` while the database is busy. Called while a writer is starting a new WAL (a full
//! memtable's rotation, which creates the file and fsyncs the directory without the state
//! lock), it waits for that rotation to end before it syncs the WAL and lets go of the
//! directory: no file is created or synced after `close` returned, and every acknowledged
//! write is there on the next open. Called while another thread closes, it waits for that
//! close and returns the same outcome (an error from the final WAL sync included).

use crate::common;

use common::hooked_fs::{hold_dir_sync_of, hold_once, HeldDirSync, HookedFs};
use siltdb::fs::{FaultPlan, FileSystem, MemFs, OpKind};
use siltdb::{Db, Error};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::Duration;

#[test]
fn close_during_a_rotation_waits_for_it_and_keeps_every_acknowledged_write() {
    let HeldDirSync {
        fs,
        armed,
        entered,
        release,
    } = hold_dir_sync_of("writer");
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
        .expect("the writer reached a rotation's directory fsync");
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
    closer.join().unwrap();
    let (acked, err) = writer.join().unwrap();
    assert!(matches!(err, Some(Error::Closed)), "{err:?}");
    assert!(acked > 0 && acked < 2_000, "{acked}");
    // The rotation's WAL was created before the hold; nothing came or went after `close`.
    let mut files_after = fs.list(dir).unwrap();
    let mut files_before = files_before;
    files_before.sort();
    files_after.sort();
    assert_eq!(files_before, files_after);
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
        inner: MemFs::new(),
        on_open: None,
        on_remove: None,
        on_sync_dir: None,
        on_sync: Some(hook),
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
    armed.store(true, Ordering::SeqCst);
    let first = {
        let db = db.clone();
        std::thread::spawn(move || db.close())
    };
    entered
        .recv_timeout(Duration::from_secs(20))
        .expect("the first close reached the final WAL sync");
    let (second_tx, second_rx) = mpsc::channel();
    let second_thread = {
        let db = db.clone();
        std::thread::spawn(move || second_tx.send(db.close()).unwrap())
    };
    assert!(
        second_rx.recv_timeout(Duration::from_millis(300)).is_err(),
        "a second close returned while the first was syncing the WAL"
    );
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
