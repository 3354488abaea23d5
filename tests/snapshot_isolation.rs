//! A snapshot sees exactly the writes before it, through flushes and compactions.
mod common;

use siltdb::Db;

#[test]
fn snapshot_reads_do_not_change() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open_with(dir.path(), common::small_options()).unwrap();
    for i in 0..300u32 {
        db.insert(format!("k{i:03}"), "v1").unwrap();
    }
    db.remove("k000").unwrap();
    let snap = db.snapshot();
    let before = common::scan_all(snap.iter());
    assert_eq!(before.len(), 299);

    // Overwrite, delete and add, then push everything through flushes and compactions,
    // which must keep the versions the snapshot can see.
    for i in 0..300u32 {
        db.insert(format!("k{i:03}"), "v2").unwrap();
    }
    for i in 0..300u32 {
        if i % 2 == 0 {
            db.remove(format!("k{i:03}")).unwrap();
        }
    }
    db.insert("new", "x").unwrap();
    db.compact().unwrap();

    assert_eq!(
        snap.get("k001").unwrap().map(Vec::from),
        Some(b"v1".to_vec())
    );
    assert_eq!(snap.get("k000").unwrap(), None);
    assert_eq!(
        snap.get("k002").unwrap().map(Vec::from),
        Some(b"v1".to_vec())
    );
    assert_eq!(snap.get("new").unwrap(), None);
    assert_eq!(common::scan_all(snap.iter()), before);
    assert_eq!(snap.prefix("k00").count(), 9);

    assert_eq!(db.get("k001").unwrap().map(Vec::from), Some(b"v2".to_vec()));
    assert_eq!(db.get("k002").unwrap(), None);
    drop(snap);
    // With the snapshot gone, a compaction may drop the old versions.
    db.insert("zz", "1").unwrap();
    db.compact().unwrap();
    assert_eq!(db.iter().count(), 152); // 150 odd keys, "new", "zz"
}
