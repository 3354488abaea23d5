//! A snapshot sees exactly the writes before it, through flushes and compactions.
use crate::common;

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

#[test]
fn a_snapshot_range_with_an_inclusive_end_sees_old_versions_in_the_next_blocks() {
    // Versions of one key fill several 256-byte blocks, newest first: a snapshot that sees
    // only the oldest must find it in the last of them, scanning up to and including the key,
    // forward and backward, before and after a compaction.
    let dir = tempfile::tempdir().unwrap();
    let opts = siltdb::Options::default()
        .block_size(256)
        .auto_compaction(false);
    let db = Db::open_with(dir.path(), opts).unwrap();
    db.insert("a", "x").unwrap();
    db.insert("k", [1u8; 300]).unwrap();
    let snap = db.snapshot();
    db.insert("k", [2u8; 300]).unwrap();
    db.insert("k", [3u8; 300]).unwrap();
    db.insert("z", "x").unwrap();
    db.flush().unwrap();
    let want = vec![
        (b"a".to_vec(), b"x".to_vec()),
        (b"k".to_vec(), vec![1u8; 300]),
    ];
    for round in ["flushed", "compacted"] {
        assert_eq!(
            snap.get("k").unwrap().as_deref(),
            Some(&[1u8; 300][..]),
            "{round}"
        );
        for got in [
            common::scan_all(snap.range(..="k")),
            common::scan_all(snap.range("a"..="k")),
            {
                let mut v = common::scan_all(snap.range("a"..="k").rev());
                v.reverse();
                v
            },
        ] {
            assert_eq!(got, want, "{round}");
        }
        assert_eq!(
            common::scan_all(snap.range("k"..="k")),
            want[1..].to_vec(),
            "{round}"
        );
        // The database's own view: the newest version.
        assert_eq!(
            common::scan_all(db.range("k"..="k")),
            vec![(b"k".to_vec(), vec![3u8; 300])],
            "{round}"
        );
        db.compact().unwrap();
    }
}
