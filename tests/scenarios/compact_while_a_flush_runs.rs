//! `Db::compact` returns once the tables it made obsolete are deleted, unless a reader still
//! holds them. A flush running meanwhile (of writes made while the compaction ran) is no such
//! reader: it needs the tree's shape only to choose its table's filter, and lets go of it
//! before it writes the table. Here that flush is held in its table's fsync across the end of
//! the compaction: the compacted tables must still be gone when `compact` returns.

use crate::common;

use common::hooked_fs::{hold_once, HookedFs};
use siltdb::fs::{FileSystem, MemFs};
use siltdb::Db;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::Duration;

fn thread_is(name: &str) -> bool {
    std::thread::current().name() == Some(name)
}

#[test]
fn a_flush_in_progress_keeps_no_compacted_table_on_disk() {
    let mem = MemFs::new();
    // The compaction is held in its directory sync (before its manifest edit), the flush in
    // its table's fsync.
    let (compact_hold, compact_armed, compact_entered, compact_release) =
        hold_once(|| thread_is("siltdb-compact"));
    let (flush_hold, flush_armed, flush_entered, flush_release) =
        hold_once(|| thread_is("siltdb-flush"));
    let fs = HookedFs {
        on_sync_dir: Some(compact_hold),
        on_sync: Some(Arc::new(move |p: &Path| {
            if p.extension().is_some_and(|e| e == "sst") {
                flush_hold(p);
            }
        })),
        ..HookedFs::new(mem.clone())
    };
    let dir = Path::new("/db");
    let opts = common::small_options()
        .memtable_size(64 << 10)
        .auto_compaction(false)
        .file_system(Arc::new(fs) as Arc<dyn FileSystem>);
    let db = Arc::new(Db::open_with(dir, opts).unwrap());
    for round in 0..3u32 {
        for i in 0..100u32 {
            db.insert(format!("k{i:04}"), format!("v{round}-{i}"))
                .unwrap();
        }
        db.flush().unwrap();
    }
    let before = common::mem_tables(&mem, dir);
    assert_eq!(before.len(), 3, "{before:?}");
    // A scan holds the tables across the compaction; it lets go before `compact` returns.
    let mut scan = db.iter();
    assert!(scan.next().is_some());

    compact_armed.store(true, Ordering::SeqCst);
    let compactor = {
        let db = db.clone();
        std::thread::spawn(move || db.compact())
    };
    compact_entered
        .recv_timeout(Duration::from_secs(20))
        .expect("the compaction reached its directory sync");
    // Writes meanwhile, and their flush, which starts while the compacted tables are still
    // the tree's and is held in its table's fsync.
    for i in 0..50u32 {
        db.insert(format!("n{i:04}"), "new").unwrap();
    }
    flush_armed.store(true, Ordering::SeqCst);
    let flusher = {
        let db = db.clone();
        std::thread::spawn(move || db.flush())
    };
    flush_entered
        .recv_timeout(Duration::from_secs(20))
        .expect("the flush reached its table's fsync");
    compact_release.send(()).unwrap();
    drop(scan);
    let (done_tx, done_rx) = mpsc::channel();
    std::thread::spawn(move || done_tx.send(compactor.join().unwrap()).unwrap());
    let compacted = done_rx
        .recv_timeout(Duration::from_secs(20))
        .expect("compact returned while the flush is held");
    assert!(compacted.is_ok(), "{compacted:?}");
    let after = common::mem_tables(&mem, dir);
    for name in &before {
        assert!(
            !after.contains(name),
            "{name} was compacted and released but is still on disk: {after:?}"
        );
    }
    flush_release.send(()).unwrap();
    flusher.join().unwrap().unwrap();
    assert_eq!(db.get("k0099").unwrap().as_deref(), Some(&b"v2-99"[..]));
    assert_eq!(db.get("n0049").unwrap().as_deref(), Some(&b"new"[..]));
}
