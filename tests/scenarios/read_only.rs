//! A read-only open sees what another handle wrote (even unflushed), writes nothing, and
//! refuses writes.
use siltdb::{Db, Error};

fn listing(dir: &std::path::Path) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().into_string().unwrap(),
                e.metadata().unwrap().len(),
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn read_only_open_beside_a_writer() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path()).unwrap();
    db.insert("flushed", "1").unwrap();
    db.flush().unwrap();
    db.insert("in-wal", "2").unwrap();
    let before = listing(dir.path());

    let ro = Db::open_read_only(dir.path()).unwrap();
    assert_eq!(
        ro.get("flushed").unwrap().map(Vec::from),
        Some(b"1".to_vec())
    );
    assert_eq!(
        ro.get("in-wal").unwrap().map(Vec::from),
        Some(b"2".to_vec())
    );
    assert_eq!(ro.iter().count(), 2);
    assert!(matches!(
        ro.insert("x", "y"),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(ro.flush(), Err(Error::InvalidArgument(_))));
    assert!(matches!(ro.sync(), Err(Error::InvalidArgument(_))));
    let (v, trace) = ro.get_traced("flushed").unwrap();
    assert_eq!(v.as_deref(), Some(&b"1"[..]));
    assert_eq!(trace.data_block_reads, 1);
    drop(ro);
    assert_eq!(
        listing(dir.path()),
        before,
        "a read-only open must not change any file"
    );

    // The writer was not disturbed.
    db.insert("after", "3").unwrap();
    assert_eq!(
        db.get("in-wal").unwrap().map(Vec::from),
        Some(b"2".to_vec())
    );
}

#[test]
fn read_only_open_of_a_missing_database_fails() {
    let dir = tempfile::tempdir().unwrap();
    assert!(matches!(
        Db::open_read_only(dir.path().join("nope")),
        Err(Error::InvalidArgument(_))
    ));
    assert!(!dir.path().join("nope").exists());
}
