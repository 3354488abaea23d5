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
