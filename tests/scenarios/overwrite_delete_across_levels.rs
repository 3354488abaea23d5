//! The newest version wins wherever the versions live: memtable, L0 tables, deeper levels.
use crate::common;

use siltdb::{Db, Options};

#[test]
fn newest_version_wins_across_memtable_and_tables() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open_with(dir.path(), Options::default().auto_compaction(false)).unwrap();
    db.insert("k", "v1").unwrap();
    db.insert("gone", "x").unwrap();
    db.flush().unwrap(); // L0 table 1
    db.insert("k", "v2").unwrap();
    db.remove("gone").unwrap();
    db.flush().unwrap(); // L0 table 2: newer
    assert_eq!(db.get("k").unwrap().map(Vec::from), Some(b"v2".to_vec()));
    assert_eq!(
        db.get("gone").unwrap(),
        None,
        "tombstone in a newer table hides the older value"
    );
    db.insert("k", "v3").unwrap(); // memtable over both tables
    assert_eq!(db.get("k").unwrap().map(Vec::from), Some(b"v3".to_vec()));
    db.remove("k").unwrap();
    assert_eq!(
        db.get("k").unwrap(),
        None,
        "tombstone in the memtable hides table values"
    );
    db.insert("gone", "back").unwrap();
    assert_eq!(
        db.get("gone").unwrap().map(Vec::from),
        Some(b"back".to_vec())
    );
    db.compact().unwrap();
    assert_eq!(db.levels()[0].tables, 0);
    assert_eq!(db.get("k").unwrap(), None);
    assert_eq!(
        db.get("gone").unwrap().map(Vec::from),
        Some(b"back".to_vec())
    );
    let all = common::scan_all(db.iter());
    assert_eq!(all, vec![(b"gone".to_vec(), b"back".to_vec())]);
}

#[test]
fn deleted_keys_stay_deleted_after_compaction_to_the_bottom() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open_with(dir.path(), common::small_options()).unwrap();
    for i in 0..2000u32 {
        db.insert(format!("key{i:05}"), format!("value{i}"))
            .unwrap();
    }
    db.compact().unwrap();
    for i in (0..2000u32).step_by(3) {
        db.remove(format!("key{i:05}")).unwrap();
    }
    db.flush().unwrap();
    // Old values sit in deeper levels; the tombstones must keep hiding them as they move down.
    db.compact().unwrap();
    for i in 0..2000u32 {
        let got = db.get(format!("key{i:05}")).unwrap().map(Vec::from);
        if i % 3 == 0 {
            assert_eq!(got, None, "key{i:05} resurrected");
        } else {
            assert_eq!(got, Some(format!("value{i}").into_bytes()));
        }
    }
    assert_eq!(db.iter().count(), 2000 - 667);
    siltdb::inspect::check_invariants(&db).unwrap();
}
