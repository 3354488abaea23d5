//! A snapshot's get that passes a memtable or table holding only versions written after the
//! snapshot counts that filter's "maybe" as right: read amplification stays exact for
//! snapshot reads, with no phantom false positives.
use siltdb::{Db, Options, TableOutcome};

#[test]
fn newer_only_versions_are_not_filter_false_positives() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open_with(
        dir.path(),
        Options::default()
            .bloom_bits_per_key(10.0)
            .auto_compaction(false),
    )
    .unwrap();
    let key = |i: u32| format!("k{i:04}");
    for i in 0..500 {
        db.insert(key(i), "old").unwrap();
    }
    db.flush().unwrap();
    // One write the snapshot sees goes into the next table too: that table is not skipped
    // as wholly newer than the snapshot.
    db.insert("a", "seen").unwrap();
    let snap = db.snapshot();
    // Three newer versions of each key with values large enough that a block holds only a
    // few entries: the versions of a key straddle block boundaries, and the last key's
    // versions end the table.
    for round in 0..3u8 {
        for i in 0..500 {
            db.insert(key(i), vec![round; 1500]).unwrap();
        }
    }
    db.flush().unwrap();
    // A table wholly newer than the snapshot, which its gets skip, and a newer version still
    // in the memtable.
    for i in 0..500 {
        db.insert(key(i), "newer").unwrap();
    }
    db.flush().unwrap();
    for i in 0..500 {
        db.insert(key(i), "newest").unwrap();
    }
    assert_eq!(db.levels()[0].tables, 3);

    let before = db.stats();
    for i in 0..500 {
        assert_eq!(snap.get(key(i)).unwrap().as_deref(), Some(&b"old"[..]));
    }
    let s = db.stats();
    let d = |f: fn(&siltdb::Stats) -> u64| f(&s) - f(&before);
    assert_eq!(d(|s| s.gets), 500);
    assert_eq!(d(|s| s.memtable_filter_false_positives), 0);
    assert_eq!(d(|s| s.memtable_hits), 0);
    assert_eq!(d(|s| s.tables_considered), 1000);
    // Both tables hold every key: every "maybe" is right.
    assert_eq!(d(|s| s.filter_false_positives), 0);
    assert_eq!(d(|s| s.filter_true_positives), 1000);
    // One block per table, except for the last key in the middle table: its newer versions
    // end the table, so the index alone shows the table holds nothing older.
    assert_eq!(d(|s| s.data_block_reads), 999);

    for i in [0, 1, 250, 498, 499] {
        let (v, trace) = snap.get_traced(key(i)).unwrap();
        assert_eq!(v.as_deref(), Some(&b"old"[..]));
        let outcomes: Vec<TableOutcome> = trace.tables.iter().map(|t| t.outcome).collect();
        assert_eq!(
            outcomes,
            [
                TableOutcome::OutOfRange,
                TableOutcome::NewerOnly,
                TableOutcome::Found
            ],
            "key {i}"
        );
        assert_eq!(trace.tables[1].block_reads, u64::from(i != 499));
    }
    // A key the snapshot never saw and nothing holds is still a plain miss; one written
    // after the snapshot reads as absent, with no false positive.
    db.insert("k0000a", "late").unwrap();
    let before = db.stats();
    assert_eq!(snap.get("k0000a").unwrap(), None);
    let s = db.stats();
    assert_eq!(
        s.memtable_filter_false_positives,
        before.memtable_filter_false_positives
    );
    // The latest read sees the newest versions.
    assert_eq!(db.get(key(7)).unwrap().as_deref(), Some(&b"newest"[..]));
}
