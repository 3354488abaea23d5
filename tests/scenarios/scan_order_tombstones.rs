//! Scans are ascending (descending from the back), skip tombstones, respect bounds, and mix
//! memtable and table sources correctly.
use crate::common;

use siltdb::{Db, Options};

fn kv(k: &str, v: &str) -> (Vec<u8>, Vec<u8>) {
    (k.as_bytes().to_vec(), v.as_bytes().to_vec())
}

#[test]
fn order_bounds_prefix_and_tombstones() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open_with(dir.path(), Options::default().auto_compaction(false)).unwrap();
    for k in ["b", "d", "f", "h"] {
        db.insert(k, "t1").unwrap();
    }
    db.flush().unwrap();
    db.insert("a", "m").unwrap();
    db.insert("d", "m").unwrap(); // overrides a table value
    db.remove("f").unwrap(); // hides a table value
    db.insert("g", "m").unwrap();
    db.flush().unwrap();
    db.insert("c", "mem").unwrap();
    db.remove("h").unwrap();

    let all = common::scan_all(db.iter());
    let want = vec![
        kv("a", "m"),
        kv("b", "t1"),
        kv("c", "mem"),
        kv("d", "m"),
        kv("g", "m"),
    ];
    assert_eq!(all, want);
    let mut rev = common::scan_all(db.iter().rev());
    rev.reverse();
    assert_eq!(rev, want);

    assert_eq!(
        common::scan_all(db.range("b".."d")),
        vec![kv("b", "t1"), kv("c", "mem")]
    );
    assert_eq!(common::scan_all(db.range("b"..="d")).len(), 3);
    assert_eq!(common::scan_all(db.range("e"..)), vec![kv("g", "m")]);
    assert_eq!(common::scan_all(db.range(.."b")), vec![kv("a", "m")]);
    assert!(common::scan_all(db.range("x".."a")).is_empty());
    db.insert("pre1", "1").unwrap();
    db.insert("pre2", "2").unwrap();
    db.insert("pref", "3").unwrap();
    db.insert("prf", "4").unwrap();
    assert_eq!(db.prefix("pre").count(), 3);
    assert_eq!(db.prefix("pre").next_back().unwrap().unwrap().0, b"pref");
}

#[test]
fn both_ends_meet_without_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open_with(dir.path(), common::small_options()).unwrap();
    for i in 0..3000u32 {
        db.insert(format!("{i:05}"), format!("{i}")).unwrap();
        if i.is_multiple_of(7) {
            db.remove(format!("{:05}", i / 2)).unwrap();
        }
    }
    let expect: Vec<_> = common::scan_all(db.iter());
    // Alternate ends in a fixed pattern and stitch the halves together.
    let mut it = db.iter();
    let (mut front, mut back) = (Vec::new(), Vec::new());
    let mut step = 0u32;
    loop {
        step += 1;
        let item = if step.is_multiple_of(3) {
            it.next_back()
        } else {
            it.next()
        };
        match item {
            Some(r) => {
                if step.is_multiple_of(3) {
                    back.push(r.unwrap())
                } else {
                    front.push(r.unwrap())
                }
            }
            None => {
                if it.next().is_none() && it.next_back().is_none() {
                    break;
                }
            }
        }
    }
    back.reverse();
    front.extend(back);
    assert_eq!(front, expect);
}

#[test]
fn scan_sees_a_point_in_time() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open_with(dir.path(), common::small_options()).unwrap();
    for i in 0..500u32 {
        db.insert(format!("{i:04}"), "before").unwrap();
    }
    let it = db.iter();
    for i in 0..1000u32 {
        db.insert(format!("{i:04}"), "after").unwrap();
    }
    db.flush().unwrap();
    let seen = common::scan_all(it);
    assert_eq!(seen.len(), 500);
    assert!(seen.iter().all(|(_, v)| v == b"before"));
}
