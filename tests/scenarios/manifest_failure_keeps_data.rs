//! Regression (review finding 1): a manifest sync that fails during a flush must not delete
//! the new table, because the edit may already be on disk. Whatever a crash then keeps, the
//! reopened database has every acknowledged write.

use crate::common::hooked_fs::HookedFs;
use siltdb::fs::{CrashImageOptions, FaultPlan, FileSystem, MemFs, OpKind};
use siltdb::{Db, Error, Options};
use std::path::Path;
use std::sync::Arc;

fn opts(fs: &MemFs) -> Options {
    Options::default()
        .file_system(Arc::new(fs.clone()) as Arc<dyn FileSystem>)
        .auto_compaction(false)
}

/// Opens a database on `fs`, writes 300 keys and flushes them with the manifest's first sync
/// failing; asserts that the flush failed.
fn flush_with_failing_manifest_sync(fs: &MemFs, dir: &Path) -> Db {
    let db = Db::open_with(dir, opts(fs)).unwrap();
    for i in 0..300u32 {
        db.insert(format!("k{i:03}"), format!("v{i}")).unwrap();
    }
    // Syncs in a flush: the old WAL (at seal), the table, then the manifest edit.
    fs.set_fault(Some(FaultPlan {
        path_contains: Some("MANIFEST".into()),
        ..FaultPlan::nth(OpKind::Sync, 0)
    }));
    assert!(db.flush().is_err());
    db
}

#[test]
fn failed_manifest_sync_in_a_flush_loses_nothing() {
    for image in [
        CrashImageOptions::PROCESS_CRASH,
        CrashImageOptions::POWER_LOSS,
    ] {
        let fs = MemFs::new();
        let dir = Path::new("/db");
        let db = flush_with_failing_manifest_sync(&fs, dir);
        assert!(matches!(db.insert("after", "x"), Err(Error::Poisoned(_))));
        assert_eq!(fs.faults_injected(), 1);
        let crashed = fs.crash_image(image);
        drop(db);
        let db = Db::open_with(dir, opts(&crashed)).unwrap();
        for i in 0..300u32 {
            assert_eq!(
                db.get(format!("k{i:03}")).unwrap().map(Vec::from),
                Some(format!("v{i}").into_bytes()),
                "{image:?}"
            );
        }
        siltdb::inspect::check_invariants(&db).unwrap();
    }
}

/// Review finding (session 21): the manifest refuses edits after a failed write, so the flush
/// thread must not retry the flush: that wrote the whole memtable to a second table, only to
/// fail to install it too.
#[test]
fn a_flush_whose_manifest_write_failed_is_not_written_again() {
    let fs = MemFs::new();
    let dir = Path::new("/db");
    let db = flush_with_failing_manifest_sync(&fs, dir);
    // A retry came after a back-off of ~40 ms; give it far longer than that.
    std::thread::sleep(std::time::Duration::from_millis(400));
    let tables = fs
        .list(dir)
        .unwrap()
        .into_iter()
        .filter(|n| n.ends_with(".sst"))
        .count();
    assert_eq!(tables, 1, "the failed flush's table, and no second one");
    assert_eq!(db.stats().background_errors, 1);
    assert!(matches!(db.wait_for_compactions(), Err(Error::Poisoned(_))));
}

/// A table key of about 60 KiB: a flush's manifest edit records the table's first and last
/// key, so each flush below grows the manifest by ~120 KiB.
fn big_key(i: u32, last: bool) -> Vec<u8> {
    let mut k = format!("t{i:04}{}", if last { 'z' } else { 'a' }).into_bytes();
    k.resize(60_000, b'.');
    k
}

/// Review finding (session 17): once the manifest passes 16 MiB, the edit that took it there
/// is followed by a rewrite into a new manifest. If that rewrite fails, the edit is durable
/// and its flush succeeds, but no later edit can be recorded: writes must stop at once (D7),
/// not be acknowledged until the next flush finds out.
#[test]
fn failed_manifest_rewrite_stops_writes_at_once() {
    let fs = MemFs::new();
    let dir = Path::new("/db");
    let db = Db::open_with(dir, opts(&fs)).unwrap();
    // The open wrote its manifest; the next `create` of one is the rewrite.
    fs.set_fault(Some(FaultPlan {
        path_contains: Some("MANIFEST".into()),
        ..FaultPlan::nth(OpKind::Create, 0)
    }));
    let mut flushed = 0u32;
    loop {
        assert!(flushed < 400, "the manifest never reached its rewrite size");
        db.insert(big_key(flushed, false), "first").unwrap();
        db.insert(big_key(flushed, true), "last").unwrap();
        let res = db.flush();
        flushed += 1;
        if fs.faults_injected() > 0 {
            // The flush whose edit crossed the size wrote its table and its edit; its caller
            // may see `Ok` (the flush is done) or the stop, whichever it looks at first.
            assert!(matches!(res, Ok(()) | Err(Error::Poisoned(_))), "{res:?}");
            break;
        }
        res.unwrap();
    }
    assert!(flushed > 100, "{flushed}");
    assert!(matches!(db.insert("after", "x"), Err(Error::Poisoned(_))));
    assert!(matches!(db.flush(), Err(Error::Poisoned(_))));
    // Reads go on.
    assert_eq!(
        db.get(big_key(0, true)).unwrap().map(Vec::from),
        Some(b"last".to_vec())
    );
    drop(db);
    // Every acknowledged write is there after a reopen, and nothing refused is.
    let db = Db::open_with(dir, opts(&fs)).unwrap();
    for i in 0..flushed {
        assert_eq!(
            db.get(big_key(i, false)).unwrap().map(Vec::from),
            Some(b"first".to_vec())
        );
        assert_eq!(
            db.get(big_key(i, true)).unwrap().map(Vec::from),
            Some(b"last".to_vec())
        );
    }
    assert_eq!(db.get("after").unwrap(), None);
    siltdb::inspect::check_invariants(&db).unwrap();
}

/// Review finding (session 23): after the flush whose edit was followed by the failed
/// rewrite, the flush thread went on to the next sealed memtable, wrote and synced its whole
/// table, and only then had its edit refused: a table for nothing, left for the next open to
/// remove. The flush thread stops at the failure. Here two memtables are sealed while the
/// first one's flush is held in its table's fsync, and that flush's edit is the one that
/// takes the manifest past its rewrite size.
#[test]
fn no_table_is_written_after_a_failed_manifest_rewrite() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;
    let mem = MemFs::new();
    let dir = Path::new("/db");
    let held = Arc::new(AtomicBool::new(false));
    let reached = Arc::new(AtomicBool::new(false));
    let (hold, reach) = (held.clone(), reached.clone());
    let fs = HookedFs {
        on_sync: Some(Arc::new(move |p: &Path| {
            if p.extension().is_some_and(|e| e == "sst") {
                reach.store(hold.load(Ordering::SeqCst), Ordering::SeqCst);
                let deadline = std::time::Instant::now() + Duration::from_secs(60);
                while hold.load(Ordering::SeqCst) && std::time::Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
        })),
        ..HookedFs::new(mem.clone())
    };
    // One big-key write fills a memtable: the next write seals it.
    let db = Db::open_with(
        dir,
        Options::default()
            .file_system(Arc::new(fs) as Arc<dyn FileSystem>)
            .auto_compaction(false)
            .memtable_size(1024),
    )
    .unwrap();
    let manifest_len = || {
        let names = mem.list(dir).unwrap();
        let name = names.iter().find(|n| n.starts_with("MANIFEST-")).unwrap();
        mem.open(&dir.join(name)).unwrap().len()
    };
    let tables_on_disk = || {
        let names = mem.list(dir).unwrap();
        names.iter().filter(|n| n.ends_with(".sst")).count()
    };
    // Flush one table per round until the next edit will take the manifest past 16 MiB.
    let mut i = 0u32;
    let mut last = manifest_len();
    loop {
        assert!(i < 400, "the manifest never neared its rewrite size");
        db.insert(big_key(i, false), "v").unwrap();
        db.flush().unwrap();
        i += 1;
        let now = manifest_len();
        let step = now - last;
        last = now;
        if now + step > 16 << 20 {
            break;
        }
    }
    // The rewrite fails; two memtables are sealed while the first one's table is held.
    mem.set_fault(Some(FaultPlan {
        path_contains: Some("MANIFEST".into()),
        ..FaultPlan::nth(OpKind::Create, 0)
    }));
    held.store(true, Ordering::SeqCst);
    for k in 0..3 {
        db.insert(big_key(i + k, false), "v").unwrap();
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !reached.load(Ordering::SeqCst) {
        assert!(
            std::time::Instant::now() < deadline,
            "the flush never reached its fsync"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    let before = tables_on_disk();
    held.store(false, Ordering::SeqCst);
    let _ = db.wait_for_compactions();
    // (That returns once writes stop; a flush thread going on would write its table now.)
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(mem.faults_injected(), 1, "the rewrite was not reached");
    assert!(matches!(db.insert("after", "x"), Err(Error::Poisoned(_))));
    // The held flush's table is the only one written since (and the manifest lists it).
    assert_eq!(
        tables_on_disk(),
        before,
        "a table was written after the failure"
    );
    assert_eq!(db.tables().len(), tables_on_disk());
}
