//! Sealing a full memtable's WAL (its fsync, sync mark and cut, and the directory fsync that
//! makes the next WAL's name durable) runs on the seal thread, not on the writer that filled
//! the memtable and not under the database's state lock: while the old WAL's fsync is held
//! up, another thread's unsynced insert completes and reads go on. What must be durable waits
//! for it: a `Db::sync` and a synced insert return only once the old WAL is sealed, so that
//! a power loss never keeps the new WAL's synced writes without the old WAL's. A seal that
//! fails stops writes, and the sync waiting for it fails.

use crate::common;

use common::hooked_fs::{hold_sync_of_a, HeldDirSync};
use siltdb::fs::{FaultPlan, FileSystem, MemFs, OpKind};
use siltdb::{Db, Error, WriteOptions};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

/// True if an unsynced insert of `key` made by another thread succeeds within 10 s (the
/// thread is left behind if it does not: the test fails anyway).
fn inserts_from_another_thread(db: &Arc<Db>, key: &'static str, value: &'static str) -> bool {
    let (done_tx, done_rx) = mpsc::channel();
    let w = db.clone();
    let inserter = std::thread::spawn(move || {
        done_tx.send(w.insert(key, value).is_ok()).unwrap();
    });
    let inserted = done_rx.recv_timeout(Duration::from_secs(10)) == Ok(true);
    if inserted {
        inserter.join().unwrap();
    }
    inserted
}

#[test]
fn a_slow_fsync_of_a_rotated_wal_blocks_no_unsynced_writer() {
    // Holds the first WAL fsync once armed (the old WAL's, in the first seal: no write asks
    // for one), until the test releases it.
    let HeldDirSync {
        fs,
        armed,
        entered: entered_rx,
        release: release_tx,
    } = hold_sync_of_a("wal");
    let dir = Path::new("/db");
    let opts = common::small_options()
        .memtable_size(64 << 10)
        .auto_compaction(false)
        .file_system(Arc::new(fs) as Arc<dyn FileSystem>);
    let db = Arc::new(Db::open_with(dir, opts).unwrap());
    armed.store(true, Ordering::SeqCst);
    // 700 x ~130 bytes: one 64 KiB memtable fills, so one rotation happens.
    for i in 0..700u32 {
        db.insert(format!("key{i:06}"), [b'v'; 100]).unwrap();
    }
    entered_rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the seal reached the old WAL's fsync");

    // While that fsync is held: another thread's unsynced insert completes, and reads work.
    assert!(
        inserts_from_another_thread(&db, "other", "unsynced"),
        "an unsynced insert waited for another memtable's WAL fsync"
    );
    assert_eq!(db.get("other").unwrap().as_deref(), Some(&b"unsynced"[..]));
    assert_eq!(db.get("key000000").unwrap().unwrap(), [b'v'; 100]);

    // A sync and a synced insert wait for the old WAL's seal; an unsynced insert does not
    // wait for the waiting sync.
    let (sync_tx, sync_rx) = mpsc::channel();
    let s = db.clone();
    let syncer = std::thread::spawn(move || sync_tx.send(s.sync().is_ok()).unwrap());
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        inserts_from_another_thread(&db, "during", "sync"),
        "an unsynced insert waited for a Db::sync that waits for a seal"
    );
    let (synced_tx, synced_rx) = mpsc::channel();
    let s = db.clone();
    let synced_writer = std::thread::spawn(move || {
        let r = s.insert_with("synced", "v", WriteOptions::default().sync(true));
        synced_tx.send(r.is_ok()).unwrap();
    });
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        sync_rx.try_recv().is_err(),
        "Db::sync returned before the WAL before it was sealed"
    );
    assert!(
        synced_rx.try_recv().is_err(),
        "a synced insert returned before the WAL before it was sealed"
    );
    release_tx.send(()).unwrap();
    assert_eq!(sync_rx.recv_timeout(Duration::from_secs(20)), Ok(true));
    assert_eq!(synced_rx.recv_timeout(Duration::from_secs(20)), Ok(true));
    syncer.join().unwrap();
    synced_writer.join().unwrap();
    assert_eq!(db.get("synced").unwrap().as_deref(), Some(&b"v"[..]));
    db.wait_for_compactions().unwrap();
    assert!(db.stats().flushes >= 1);
}

/// The WALs in `fs`, oldest first.
fn wals(fs: &MemFs, dir: &Path) -> Vec<std::path::PathBuf> {
    let mut w: Vec<_> = fs
        .list(dir)
        .unwrap()
        .into_iter()
        .filter(|n| n.ends_with(".wal"))
        .map(|n| dir.join(n))
        .collect();
    w.sort();
    w
}

/// A `Db::sync` that waited for one seal and then finds the next WAL's seal under way (a
/// second rotation came meanwhile) waits for that one too without the WAL lock: unsynced
/// writers go on.
#[test]
fn a_sync_that_waits_for_two_seals_blocks_no_unsynced_writer() {
    use std::sync::Mutex;
    let mem = MemFs::new();
    // Holds the first fsync of the WAL named in `hold` once armed.
    let hold: Arc<Mutex<Option<std::path::PathBuf>>> = Arc::new(Mutex::new(None));
    let (held, armed, entered_rx, release_tx) = common::hooked_fs::hold_once(|| true);
    let h = hold.clone();
    let fs = common::hooked_fs::HookedFs {
        on_sync: Some(Arc::new(move |p: &Path| {
            if h.lock().unwrap().as_deref() == Some(p) {
                held(p);
            }
        })),
        ..common::hooked_fs::HookedFs::new(mem.clone())
    };
    let dir = Path::new("/db");
    let opts = common::small_options()
        .memtable_size(64 << 10)
        .auto_compaction(false)
        .file_system(Arc::new(fs) as Arc<dyn FileSystem>);
    let db = Arc::new(Db::open_with(dir, opts).unwrap());
    let first = wals(&mem, dir);
    assert_eq!(first.len(), 1);
    *hold.lock().unwrap() = Some(first[0].clone());
    armed.store(true, Ordering::SeqCst);
    // One rotation: the first WAL's seal is held in its fsync.
    for i in 0..700u32 {
        db.insert(format!("key{i:06}"), [b'v'; 100]).unwrap();
    }
    entered_rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the first seal reached its fsync");
    let (sync_tx, sync_rx) = mpsc::channel();
    let s = db.clone();
    let syncer = std::thread::spawn(move || sync_tx.send(s.sync()).unwrap());
    std::thread::sleep(Duration::from_millis(100));
    // A second rotation while the first seal is held: its seal queues behind.
    let mut i = 700u32;
    while wals(&mem, dir).len() < 3 {
        db.insert(format!("key{i:06}"), [b'v'; 100]).unwrap();
        i += 1;
        assert!(i < 5_000, "no second rotation");
    }
    // Hold the second seal's fsync, then let the first seal finish.
    *hold.lock().unwrap() = Some(wals(&mem, dir)[1].clone());
    armed.store(true, Ordering::SeqCst);
    release_tx.send(()).unwrap();
    entered_rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the second seal reached its fsync");
    // The sync woke for the first seal and now waits for the second.
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        sync_rx.try_recv().is_err(),
        "Db::sync returned before the second seal"
    );
    assert!(
        inserts_from_another_thread(&db, "other", "unsynced"),
        "an unsynced insert waited for a Db::sync that waits for a second seal"
    );
    release_tx.send(()).unwrap();
    let synced = sync_rx.recv_timeout(Duration::from_secs(20)).unwrap();
    assert!(synced.is_ok(), "{synced:?}");
    syncer.join().unwrap();
    assert_eq!(db.get("other").unwrap().as_deref(), Some(&b"unsynced"[..]));
}

#[test]
fn a_failed_seal_stops_writes_and_fails_the_sync_that_waits_for_it() {
    let fs = MemFs::new();
    let dir = Path::new("/db");
    let opts = || {
        common::small_options()
            .memtable_size(64 << 10)
            .auto_compaction(false)
            .file_system(Arc::new(fs.clone()) as Arc<dyn FileSystem>)
    };
    let db = Db::open_with(dir, opts()).unwrap();
    let first_wal: Vec<String> = fs
        .list(dir)
        .unwrap()
        .into_iter()
        .filter(|n| n.ends_with(".wal"))
        .collect();
    assert_eq!(first_wal.len(), 1, "{first_wal:?}");
    // The first fsync of that WAL is its seal's, after the rotation: it fails.
    fs.set_fault(Some(FaultPlan {
        index: 0,
        kinds: vec![OpKind::Sync],
        persistent: false,
        path_contains: Some(first_wal[0].clone()),
    }));
    let mut acked = 0u32;
    for i in 0..700u32 {
        match db.insert(format!("key{i:06}"), [b'v'; 100]) {
            Ok(()) => acked += 1,
            Err(e) => {
                assert!(matches!(e, Error::Poisoned(_)), "{e:?}");
                break;
            }
        }
    }
    // The sync waits for the seal and gets its failure (or, once the seal thread reported
    // it, the stop it caused).
    let synced = db.sync();
    assert!(
        matches!(synced, Err(Error::Io(_)) | Err(Error::Poisoned(_))),
        "{synced:?}"
    );
    assert_eq!(fs.faults_injected(), 1);
    fs.set_fault(None);
    assert!(matches!(db.insert("later", "v"), Err(Error::Poisoned(_))));
    // The memtable whose WAL failed its seal is never written to a table: a table of writes
    // the WAL may have lost would outlive them after a power loss.
    std::thread::sleep(Duration::from_millis(300));
    let tables: Vec<String> = fs
        .list(dir)
        .unwrap()
        .into_iter()
        .filter(|n| n.ends_with(".sst"))
        .collect();
    assert!(tables.is_empty(), "{tables:?}");
    assert!(matches!(db.sync(), Err(Error::Poisoned(_))));
    drop(db);
    // The failed fsync lost the old WAL's unsynced bytes (as a kernel may): the database
    // opens, and holds a prefix of the acknowledged writes, never a write after a hole.
    let db = Db::open_with(dir, opts()).expect("open after a failed seal");
    let held = (0..acked)
        .take_while(|&i| db.get(format!("key{i:06}")).unwrap().is_some())
        .count() as u32;
    for i in held..700 {
        assert_eq!(db.get(format!("key{i:06}")).unwrap(), None, "key {i}");
    }
    assert_eq!(db.get("later").unwrap(), None);
}
