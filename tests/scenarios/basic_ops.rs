//! Insert, get, contains_key, remove, empty keys and values, on a fresh database.
use crate::common;

use siltdb::{Db, Options};

#[test]
fn insert_get_remove() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path()).unwrap();
    assert_eq!(db.get("missing").unwrap(), None);
    db.insert("k1", "v1").unwrap();
    db.insert(b"k2", b"v2").unwrap();
    db.insert(vec![0u8, 1, 2], vec![9u8; 1000]).unwrap();
    assert_eq!(db.get("k1").unwrap().as_deref(), Some(&b"v1"[..]));
    assert_eq!(db.get("k2").unwrap().map(Vec::from), Some(b"v2".to_vec()));
    assert_eq!(db.get([0u8, 1, 2]).unwrap().unwrap().len(), 1000);
    assert!(db.contains_key("k1").unwrap());
    db.remove("k1").unwrap();
    assert!(!db.contains_key("k1").unwrap());
    assert_eq!(db.get("k1").unwrap(), None);
    db.remove("never-written").unwrap();
    assert_eq!(db.stats().gets, 7);
}

#[test]
fn empty_key_and_empty_value_round_trip_through_every_layer() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open_with(dir.path(), Options::default()).unwrap();
    db.insert("", "empty key").unwrap();
    db.insert("empty value", "").unwrap();
    assert_eq!(
        db.get("").unwrap().map(Vec::from),
        Some(b"empty key".to_vec())
    );
    assert_eq!(
        db.get("empty value").unwrap().map(Vec::from),
        Some(Vec::new())
    );
    db.flush().unwrap();
    assert_eq!(
        db.get("").unwrap().map(Vec::from),
        Some(b"empty key".to_vec())
    );
    drop(db);
    let db = Db::open(dir.path()).unwrap();
    assert_eq!(
        db.get("").unwrap().map(Vec::from),
        Some(b"empty key".to_vec())
    );
    assert_eq!(
        db.get("empty value").unwrap().map(Vec::from),
        Some(Vec::new())
    );
    let all = common::scan_all(db.iter());
    assert_eq!(all[0].0, b"");
    db.compact().unwrap();
    assert_eq!(
        db.get("").unwrap().map(Vec::from),
        Some(b"empty key".to_vec())
    );
}

#[test]
fn db_is_clone_send_sync() {
    fn check<T: Clone + Send + Sync>() {}
    check::<Db>();
}

#[test]
fn close_is_idempotent_and_later_calls_fail() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path()).unwrap();
    db.insert("a", "1").unwrap();
    let other = db.clone();
    db.close().unwrap();
    db.close().unwrap();
    assert!(matches!(other.insert("b", "2"), Err(siltdb::Error::Closed)));
    drop(db);
    drop(other);
    let db = Db::open(dir.path()).unwrap();
    assert_eq!(db.get("a").unwrap().map(Vec::from), Some(b"1".to_vec()));
}
