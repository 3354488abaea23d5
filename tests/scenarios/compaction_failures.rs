//! A failed flush or compaction keeps its inputs and is counted; corruption found while
//! compacting stops writes instead of spreading.
use crate::common;

use siltdb::fs::{FaultPlan, FileSystem, MemFs, OpKind};
use siltdb::{Db, Error, Options};
use std::path::Path;
use std::sync::Arc;

fn opts(fs: &MemFs) -> Options {
    Options::default()
        .file_system(Arc::new(fs.clone()) as Arc<dyn FileSystem>)
        .auto_compaction(false)
}

#[test]
fn failed_table_write_keeps_inputs_and_is_retried() {
    let fs = MemFs::new();
    let dir = Path::new("/db");
    let db = Db::open_with(dir, opts(&fs)).unwrap();
    for i in 0..100u32 {
        db.insert(format!("k{i}"), "v").unwrap();
    }
    // Fail the creation of the flush's table once (create #0 is the new WAL, #1 the table).
    fs.set_fault(Some(FaultPlan::nth(OpKind::Create, 1)));
    let r = db.flush();
    // The flush either reports the failure or succeeds on its retry; either way nothing is lost.
    if let Err(e) = &r {
        assert!(matches!(e, Error::Io(_)), "{e:?}");
    }
    fs.set_fault(None);
    db.flush().unwrap();
    assert!(db.stats().background_errors >= 1);
    assert_eq!(db.iter().count(), 100);
    db.insert("after", "ok").unwrap();
    siltdb::inspect::check_invariants(&db).unwrap();
    drop(db);
    let db = Db::open_with(dir, opts(&fs)).unwrap();
    assert_eq!(db.iter().count(), 101);
}

#[test]
fn failed_compaction_keeps_inputs() {
    let fs = MemFs::new();
    let dir = Path::new("/db");
    let db = Db::open_with(dir, opts(&fs)).unwrap();
    for t in 0..3u32 {
        for i in 0..200u32 {
            db.insert(format!("k{i:04}"), format!("{t}")).unwrap();
        }
        db.flush().unwrap();
    }
    let before: Vec<_> = common::scan_all(db.iter());
    fs.set_fault(Some(FaultPlan::nth(OpKind::Sync, 0)));
    let failed = db.compact();
    assert!(matches!(failed, Err(Error::Io(_))), "{failed:?}");
    fs.set_fault(None);
    assert!(db.stats().background_errors >= 1);
    assert_eq!(db.levels()[0].tables, 3, "inputs kept");
    assert_eq!(common::scan_all(db.iter()), before);
    siltdb::inspect::check_invariants(&db).unwrap();
    db.compact().unwrap();
    assert_eq!(db.levels()[0].tables, 0);
    assert_eq!(common::scan_all(db.iter()), before);
}

#[test]
fn corruption_found_by_compaction_stops_writes() {
    let fs = MemFs::new();
    let dir = Path::new("/db");
    let db = Db::open_with(dir, opts(&fs)).unwrap();
    for t in 0..2u32 {
        for i in 0..500u32 {
            db.insert(format!("k{i:04}"), format!("value-{t}-{i}"))
                .unwrap();
        }
        db.flush().unwrap();
    }
    // Damage the first data block of one table.
    let table = fs
        .list(dir)
        .unwrap()
        .into_iter()
        .find(|n| n.ends_with(".sst"))
        .unwrap();
    let path = dir.join(&table);
    let mut bytes = fs.read_file(&path).unwrap();
    bytes[10] ^= 0xff;
    fs.write_file(&path, &bytes).unwrap();
    // The compaction thread's corruption reaches the caller as the same `Corruption`, naming
    // the damaged table, not as a message copied into another variant.
    match db.compact() {
        Err(Error::Corruption { file, .. }) => assert_eq!(file, path),
        other => panic!("compaction of a damaged table must fail with Corruption, got {other:?}"),
    }
    match db.insert("x", "y") {
        Err(Error::Corruption { file, .. }) => assert_eq!(file, path),
        other => panic!("writes must stop after corruption, got {other:?}"),
    }
    // The tree will not settle: no compaction runs once writes are stopped.
    match db.wait_for_compactions() {
        Err(Error::Corruption { file, .. }) => assert_eq!(file, path),
        other => panic!("wait_for_compactions must report the stop, got {other:?}"),
    }
    // Reads that do not need the damaged block still work.
    assert!(db.get("k0499").unwrap().is_some());
}
