//! Per-get counters count what answered: a get answered by a memtable's range tombstone alone
//! is a memtable hit like one answered by a version there, and a get refused for an oversized
//! key is no get (it would lower every per-get mean).
use siltdb::{Db, Error, Options};

#[test]
fn a_memtable_range_tombstone_answers_as_a_memtable_hit() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open_with(dir.path(), Options::default().auto_compaction(false)).unwrap();
    // A table below, holding both keys, that the gets must not reach.
    db.insert("k1", "old").unwrap();
    db.insert("k2", "old").unwrap();
    db.flush().unwrap();
    db.insert("k1", "v").unwrap();
    db.remove_range("k0".."k9").unwrap();
    let before = db.stats();
    // k1: a version in the memtable older than the tombstone; k2: the tombstone alone.
    assert_eq!(db.get("k1").unwrap(), None);
    assert_eq!(db.get("k2").unwrap(), None);
    let s = db.stats();
    assert_eq!(s.gets - before.gets, 2);
    assert_eq!(s.memtable_hits - before.memtable_hits, 2);
    assert_eq!(s.tables_considered - before.tables_considered, 0);
}

#[test]
fn a_get_refused_for_its_key_is_not_counted() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path()).unwrap();
    db.insert("k", "v").unwrap();
    let before = db.stats().gets;
    let huge = vec![b'k'; siltdb::MAX_KEY_SIZE + 1];
    assert!(matches!(db.get(&huge), Err(Error::InvalidArgument(_))));
    assert!(matches!(
        db.snapshot().get(&huge),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(db.stats().gets, before);
    assert!(db.get("k").unwrap().is_some());
    assert_eq!(db.stats().gets, before + 1);
}
