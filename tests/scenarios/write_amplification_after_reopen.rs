//! A reopened database's replay writes the WAL's writes into L0 tables, which `Stats` counts
//! as flushes; the user bytes behind them count too, so that the reopened handle's write
//! amplification relates those tables to those writes. Review finding (session 24): they did
//! not, and the first small write after a reopen showed a write amplification of ~10^5.
use siltdb::{Db, Options};

#[test]
fn replayed_writes_count_as_user_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let (keys, value) = (10_000u64, vec![b'v'; 100]);
    {
        let db = Db::open_with(dir.path(), Options::default()).unwrap();
        for i in 0..keys {
            db.insert(format!("key-{i:012}"), &value).unwrap();
        }
        // Close does not flush: the writes stay in the WAL for the next open.
        db.close().unwrap();
    }
    let db = Db::open_with(dir.path(), Options::default()).unwrap();
    let s = db.stats();
    assert!(s.flushes >= 1 && s.bytes_flushed > 0, "{s:?}");
    assert_eq!(s.user_bytes_written, keys * (16 + 100));
    let wa = s.write_amplification();
    assert!((0.3..3.0).contains(&wa), "write amplification {wa}");
    db.insert("one-more", "x").unwrap();
    assert!(db.stats().write_amplification() < 3.0);
}
