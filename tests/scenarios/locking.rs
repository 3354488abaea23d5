//! A directory open in one `Db` cannot be opened again until it is closed.
use siltdb::{Db, Error};

#[test]
fn second_open_is_locked_until_the_first_closes() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path()).unwrap();
    assert!(matches!(Db::open(dir.path()), Err(Error::Locked)));
    let clone = db.clone();
    drop(db);
    assert!(
        matches!(Db::open(dir.path()), Err(Error::Locked)),
        "a clone keeps it open"
    );
    drop(clone);
    Db::open(dir.path()).unwrap();
}

#[test]
fn close_releases_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path()).unwrap();
    db.close().unwrap();
    let again = Db::open(dir.path()).unwrap();
    again.insert("a", "b").unwrap();
}
