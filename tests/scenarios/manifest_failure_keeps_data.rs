//! Regression (review finding 1): a manifest sync that fails during a flush must not delete
//! the new table, because the edit may already be on disk. Whatever a crash then keeps, the
//! reopened database has every acknowledged write.

use siltdb::fs::{CrashImageOptions, FaultPlan, FileSystem, MemFs, OpKind};
use siltdb::{Db, Error, Options};
use std::path::Path;
use std::sync::Arc;

fn opts(fs: &MemFs) -> Options {
    Options::default()
        .file_system(Arc::new(fs.clone()) as Arc<dyn FileSystem>)
        .auto_compaction(false)
}

#[test]
fn failed_manifest_sync_in_a_flush_loses_nothing() {
    for image in [
        CrashImageOptions::PROCESS_CRASH,
        CrashImageOptions::POWER_LOSS,
    ] {
        let fs = MemFs::new();
        let dir = Path::new("/db");
        let db = Db::open_with(dir, opts(&fs)).unwrap();
        for i in 0..300u32 {
            db.insert(format!("k{i:03}"), format!("v{i}")).unwrap();
        }
        // Syncs in a flush: the old WAL (at seal), the table, then the manifest edit.
        fs.set_fault(Some(FaultPlan {
            path_contains: Some("MANIFEST".into()),
            ..FaultPlan::nth(OpKind::Sync, 0)
        }));
        assert!(db.flush().is_err());
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
