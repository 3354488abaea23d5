//! An obsolete table whose deletion fails (the file system refuses the `unlink`) stays on
//! disk until the next open removes it, and `Stats::obsolete_delete_failures` says so: it was
//! only logged, and `compact` returned as if the space were reclaimed (review, session 24).
use crate::common;

use siltdb::fs::{FaultPlan, FileSystem, MemFs, OpKind};
use siltdb::Db;
use std::path::Path;

fn tables_on_disk(fs: &MemFs) -> usize {
    let names = fs.list(Path::new("/db")).unwrap();
    names.iter().filter(|n| n.ends_with(".sst")).count()
}

#[test]
fn a_failed_delete_is_counted_and_the_next_open_removes_the_file() {
    let fs = MemFs::new();
    let opts = || common::mem_options(&fs).auto_compaction(false);
    let db = Db::open_with("/db", opts()).unwrap();
    for round in 0..3 {
        for i in 0..200u32 {
            db.insert(format!("k{i:04}"), format!("v{round}")).unwrap();
        }
        db.flush().unwrap();
    }
    assert_eq!(db.stats().obsolete_delete_failures, 0);
    fs.set_fault(Some(FaultPlan {
        path_contains: Some(".sst".into()),
        ..FaultPlan::nth(OpKind::Remove, 0)
    }));
    db.compact().unwrap();
    assert_eq!(fs.faults_injected(), 1);
    fs.set_fault(None);
    assert_eq!(db.stats().obsolete_delete_failures, 1);
    // One of the three compacted tables is still there, beside the tree's own.
    assert_eq!(tables_on_disk(&fs), db.tables().len() + 1);
    db.close().unwrap();
    let db = Db::open_with("/db", opts()).unwrap();
    assert_eq!(tables_on_disk(&fs), db.tables().len());
    assert_eq!(db.get("k0007").unwrap().as_deref(), Some(&b"v2"[..]));
}
