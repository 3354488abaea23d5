//! Over-limit keys and values are `InvalidArgument` and nothing is written; bad options too.
use siltdb::{Db, Error, Options, WriteBatch, MAX_KEY_SIZE, MAX_VALUE_SIZE};

#[test]
fn oversized_key_or_value_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path()).unwrap();
    let big_key = vec![b'k'; MAX_KEY_SIZE + 1];
    assert!(matches!(
        db.insert(&big_key, "v"),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        db.remove(&big_key),
        Err(Error::InvalidArgument(_))
    ));
    // A read of a key no write accepts is a wrong argument too (it answered "absent").
    assert!(matches!(db.get(&big_key), Err(Error::InvalidArgument(_))));
    assert!(matches!(
        db.contains_key(&big_key),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        db.get_traced(&big_key),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        db.snapshot().get(&big_key),
        Err(Error::InvalidArgument(_))
    ));
    let big_value = vec![0u8; MAX_VALUE_SIZE + 1];
    assert!(matches!(
        db.insert("k", &big_value),
        Err(Error::InvalidArgument(_))
    ));
    let mut b = WriteBatch::new();
    b.insert("ok", "1");
    b.insert(&big_key, "2");
    assert!(matches!(db.write(b), Err(Error::InvalidArgument(_))));
    assert_eq!(
        db.get("ok").unwrap(),
        None,
        "a rejected batch writes nothing"
    );
    // The limits themselves are accepted.
    db.insert(vec![b'k'; MAX_KEY_SIZE], "max key").unwrap();
    assert_eq!(
        db.get(vec![b'k'; MAX_KEY_SIZE]).unwrap().map(Vec::from),
        Some(b"max key".to_vec())
    );
    assert_eq!(db.stats().user_bytes_written, (MAX_KEY_SIZE + 7) as u64);
    drop(db);
    let db = Db::open(dir.path()).unwrap();
    assert_eq!(db.get("ok").unwrap(), None);
    assert_eq!(db.iter().count(), 1);
}

#[test]
fn bad_options_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    for opts in [
        Options::default().bloom_bits_per_key(-3.0),
        Options::default().memtable_size(1),
        Options::default().memtable_size(usize::MAX),
        Options::default().target_table_size((64 << 30) + 1),
        Options::default().target_table_size(u64::MAX),
        Options::default().block_size(10),
        Options::default().l0_compaction_trigger(0),
        Options::default().max_manifest_size(0),
        Options::default().max_manifest_size(1023),
        Options::default().max_manifest_size((64 << 30) + 1),
    ] {
        assert!(matches!(
            Db::open_with(dir.path(), opts),
            Err(Error::InvalidArgument(_))
        ));
    }
    let missing = dir.path().join("nothing-here");
    assert!(matches!(
        Db::open_with(&missing, Options::default().create_if_missing(false)),
        Err(Error::InvalidArgument(_))
    ));
}
