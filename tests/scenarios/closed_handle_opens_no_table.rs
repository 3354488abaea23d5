//! A handle's statistics, table list and size estimates still answer after `close`, from what
//! the handle holds; they open no table file. A table the handle never managed to open (here:
//! every open of it failed while the handle was live) stays unopened: no descriptor of a file
//! another handle may delete outlives the close, and no "missing table" verdict is made up.

use crate::common;

use common::hooked_fs::HookedFs;
use siltdb::fs::{FaultPlan, MemFs, OpKind};
use siltdb::{Db, Options};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[test]
fn a_closed_handle_opens_no_table_for_its_statistics() {
    let mem = MemFs::new();
    let sst_opens = Arc::new(AtomicU64::new(0));
    let counted = sst_opens.clone();
    let fs = HookedFs {
        on_open: Some(Arc::new(move |p: &Path| {
            if p.extension().is_some_and(|e| e == "sst") {
                counted.fetch_add(1, Ordering::SeqCst);
            }
        })),
        ..HookedFs::new(mem.clone())
    };
    let opts = || Options::default().file_system(Arc::new(fs.clone()));
    let db = Db::open_with("/db", opts()).unwrap();
    for i in 0..1000u32 {
        db.insert(format!("key{i:05}"), "value").unwrap();
    }
    db.flush().unwrap();
    db.close().unwrap();

    // Every open of a table fails (EIO) while the database reopens: its one table stays
    // unopened, an error not kept (the next use would try again).
    mem.set_fault(Some(FaultPlan {
        index: 0,
        kinds: vec![OpKind::Open],
        persistent: true,
        path_contains: Some(".sst".into()),
    }));
    let db = Db::open_with("/db", opts()).unwrap();
    assert_eq!(db.stats().open_files, 0);
    mem.set_fault(None);
    db.close().unwrap();

    sst_opens.store(0, Ordering::SeqCst);
    let s = db.stats();
    let tables = db.tables();
    let levels = db.levels();
    // (Called for the table opens it could make, counted below.)
    db.approximate_size(&b"key"[..]..&b"kez"[..]);
    assert_eq!(
        sst_opens.load(Ordering::SeqCst),
        0,
        "a closed handle opened a table file"
    );
    assert_eq!(s.open_files, 0);
    assert_eq!(db.stats().open_files, 0);
    assert_eq!(
        s.broken_tables, 0,
        "no table is called broken after the close"
    );
    // The tree's shape is still what the handle holds.
    assert_eq!(tables.len(), 1);
    assert_eq!(levels.iter().map(|l| l.tables).sum::<usize>(), 1);
}

/// A get that was opening a table's file when another thread closed the handle, destroyed the
/// database and made a new one in its place (numbering starts again, so the name is the new
/// database's table) must not answer from that file: its blocks pass their checksums at the
/// same offsets. The reopened file is checked against the one the handle opened, as a
/// read-only handle's always is (the lock that made the check needless for a writer is gone).
#[test]
fn a_read_that_raced_close_answers_from_no_other_database() {
    use std::sync::atomic::AtomicBool;
    use std::sync::mpsc;
    const TABLES: usize = 20;
    let mem = MemFs::new();
    let armed = Arc::new(AtomicBool::new(false));
    let hit = Arc::new(AtomicBool::new(false));
    let (reached_tx, reached) = mpsc::channel::<()>();
    let (release, release_rx) = mpsc::channel::<()>();
    let release_rx = Arc::new(std::sync::Mutex::new(release_rx));
    let reached_tx = Arc::new(std::sync::Mutex::new(reached_tx));
    let (hook_armed, hook_hit) = (armed.clone(), hit.clone());
    let fs = HookedFs {
        on_open: Some(Arc::new(move |p: &Path| {
            if p.extension().is_some_and(|e| e == "sst") && hook_armed.swap(false, Ordering::SeqCst)
            {
                hook_hit.store(true, Ordering::SeqCst);
                reached_tx.lock().unwrap().send(()).unwrap();
                let released = release_rx
                    .lock()
                    .unwrap()
                    .recv_timeout(Duration::from_secs(60));
                assert!(released.is_ok(), "the test never released the open");
            }
        })),
        ..HookedFs::new(mem.clone())
    };
    // More tables than descriptors kept (at least 16), and no block cache: gets of every
    // table in turn reopen files.
    let opts = || {
        Options::default()
            .file_system(Arc::new(fs.clone()))
            .max_open_files(1)
            .block_cache_size(0)
            .auto_compaction(false)
    };
    let key = |t: usize| format!("t{t:02}k0005");
    let load = |tag: &str| {
        let db = Db::open_with("/db", opts()).unwrap();
        for t in 0..TABLES {
            for i in 0..200 {
                db.insert(format!("t{t:02}k{i:04}"), format!("{tag}-{t}-{i:04}"))
                    .unwrap();
            }
            db.flush().unwrap();
        }
        db
    };
    let db = Arc::new(load("old"));
    // The first get that opens a table file waits in that open.
    armed.store(true, Ordering::SeqCst);
    let reader = {
        let db = db.clone();
        std::thread::spawn(move || {
            for _ in 0..50 {
                for t in 0..TABLES {
                    let got = db.get(key(t));
                    if hit.load(Ordering::SeqCst) {
                        return (t, got);
                    }
                    assert_eq!(
                        got.unwrap().map(Vec::from),
                        Some(format!("old-{t}-0005").into_bytes())
                    );
                }
            }
            panic!("no get reopened a table file");
        })
    };
    // (A reader that failed before it reached the open ends the test with its panic.)
    if reached.recv_timeout(Duration::from_secs(60)).is_err() {
        match reader.join() {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(r) => panic!("the reader ended without waiting in an open: {r:?}"),
        }
    }
    db.close().unwrap();
    Db::destroy_with("/db", opts()).unwrap();
    load("new").close().unwrap();
    release.send(()).unwrap();
    let (t, got) = reader.join().unwrap();
    match got {
        Err(siltdb::Error::Io(_)) => {}
        other => panic!("a closed handle's read of table {t} answered {other:?}"),
    }
}
