//! Range tombstones across the levels of a real tree: a tombstone in L1 hides values that
//! live in L3 even where the L1 table's filter says "definitely not"; compaction carries it
//! down without losing it, drops what it covers, and drops it at the bottom; a snapshot taken
//! before keeps seeing everything.
use crate::common;

use siltdb::fs::MemFs;
use siltdb::{Db, TableOutcome};
use std::path::Path;

fn k(i: u32) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}

fn v(i: u32) -> Vec<u8> {
    format!("value-{i:06}-{}", "x".repeat(80)).into_bytes()
}

const N: u32 = 24_000;

/// A tree whose data reaches L3 (small sizes), settled, then reopened with levels so large
/// that only L0 -> L1 compactions run: what lands in L1 stays there.
fn deep_tree(fs: &MemFs) -> Db {
    let dir = Path::new("/db");
    let db = common::open_mem(fs, dir);
    for i in 0..N {
        db.insert(k(i), v(i)).unwrap();
    }
    db.flush().unwrap();
    common::settle(&db);
    db.wait_for_compactions().unwrap();
    let levels = db.levels();
    assert!(levels[3].tables > 0, "no data reached L3: {levels:?}");
    drop(db);
    Db::open_with(
        dir,
        common::mem_options(fs)
            .level_base_size(1 << 30)
            .l0_compaction_trigger(2),
    )
    .unwrap()
}

/// Table numbers of the tables at `level` holding range tombstones.
fn tombstone_tables(db: &Db, level: usize) -> Vec<u64> {
    db.tables()
        .iter()
        .filter(|t| t.level == level && t.range_deletions > 0)
        .map(|t| t.table_id)
        .collect()
}

/// Puts the range remove of `lo..hi` into L1: it is flushed, then more small L0 tables make
/// L0 -> L1 compactions run until L0 is empty. Returns the number of small tables written.
fn remove_into_l1(db: &Db, lo: u32, hi: u32) -> usize {
    db.remove_range(k(lo)..k(hi)).unwrap();
    let mut extra = 0;
    while extra == 0 || db.levels()[0].tables > 0 {
        assert!(extra < 20, "L0 does not drain: {:?}", db.levels());
        db.insert(format!("zz-after-{extra:02}"), "x").unwrap();
        db.flush().unwrap();
        extra += 1;
        common::settle(db);
        db.wait_for_compactions().unwrap();
    }
    assert!(!tombstone_tables(db, 1).is_empty(), "{:?}", db.tables());
    extra
}

#[test]
fn l1_tombstone_hides_l3_values_behind_a_filter_negative() {
    let fs = MemFs::new();
    let db = deep_tree(&fs);
    let before = db.snapshot();
    let (lo, hi) = (5_000, 15_000);
    remove_into_l1(&db, lo, hi);
    let l1 = tombstone_tables(&db, 1);
    let l3: Vec<_> = db.tables().into_iter().filter(|t| t.level == 3).collect();
    // Keys that live in L3 only, inside the range: the L1 table's filter does not know them.
    let mut filter_negatives = 0;
    for i in (lo..hi).step_by(7) {
        let key = k(i);
        if !l3.iter().any(|t| t.smallest <= key && key <= t.largest) {
            continue;
        }
        let (got, trace) = db.get_traced(&key).unwrap();
        assert_eq!(got, None, "{i}: a value under a range tombstone came back");
        assert!(trace.range_covered, "{i}: {trace:?}");
        let visit = trace.tables.last().unwrap();
        assert!(
            l1.contains(&visit.table_id) && visit.level == 1,
            "{i}: {trace:?}"
        );
        assert_eq!(visit.outcome, TableOutcome::RangeDeleted);
        if visit.block_reads == 0 {
            filter_negatives += 1;
        }
        // The value is still there below, as a snapshot from before shows.
        assert_eq!(before.get(&key).unwrap().map(Vec::from), Some(v(i)));
    }
    assert!(
        filter_negatives > 100,
        "only {filter_negatives} keys were hidden behind a filter negative"
    );
    // Keys outside the range are untouched; scans skip exactly the range.
    assert_eq!(db.get(k(lo - 1)).unwrap().map(Vec::from), Some(v(lo - 1)));
    assert_eq!(db.get(k(hi)).unwrap().map(Vec::from), Some(v(hi)));
    let keys: Vec<Vec<u8>> = db
        .range(k(lo - 2)..k(hi + 2))
        .map(|r| r.unwrap().0)
        .collect();
    assert_eq!(keys, vec![k(lo - 2), k(lo - 1), k(hi), k(hi + 1)]);
    let s = db.stats();
    assert!(
        s.range_tombstone_checks > 0 && s.range_tombstone_covered > 0,
        "{s:?}"
    );
    siltdb::inspect::check_invariants(&db).unwrap();
}

#[test]
fn compaction_carries_the_tombstone_down_and_drops_it_at_the_bottom() {
    let fs = MemFs::new();
    let db = deep_tree(&fs);
    let (lo, hi) = (2_000, 20_000);
    let extra = remove_into_l1(&db, lo, hi) as u32;
    // A snapshot from here sees the range as removed; compaction must not change that while
    // the tombstone moves L1 -> L2 -> L3.
    db.insert(k(10_000), "newer than the tombstone").unwrap();
    let size_before = db.disk_size().unwrap();
    db.compact().unwrap();
    for i in (0..N).step_by(97) {
        let want = if i == 10_000 {
            Some(b"newer than the tombstone".to_vec())
        } else if (lo..hi).contains(&i) {
            None
        } else {
            Some(v(i))
        };
        assert_eq!(db.get(k(i)).unwrap().map(Vec::from), want, "key {i}");
    }
    assert_eq!(db.iter().count() as u32, N - (hi - lo) + 1 + extra);
    // At the bottom with no snapshot, the tombstone and what it covered are gone.
    assert!(
        db.tables().iter().all(|t| t.range_deletions == 0),
        "{:?}",
        db.tables()
    );
    let size_after = db.disk_size().unwrap();
    assert!(
        size_after < size_before / 2,
        "{size_before} -> {size_after} bytes"
    );
    siltdb::inspect::check_invariants(&db).unwrap();
}

#[test]
fn a_snapshot_keeps_what_it_saw_through_compaction() {
    let fs = MemFs::new();
    let db = deep_tree(&fs);
    let snap = db.snapshot();
    let extra = remove_into_l1(&db, 0, N);
    db.compact().unwrap();
    assert_eq!(db.iter().count(), extra);
    for i in (0..N).step_by(331) {
        assert_eq!(snap.get(k(i)).unwrap().map(Vec::from), Some(v(i)));
    }
    assert_eq!(snap.iter().count() as u32, N);
    // The tombstone is kept while the snapshot lives, and dropped after.
    assert!(db.tables().iter().any(|t| t.range_deletions > 0));
    drop(snap);
    db.compact().unwrap();
    assert!(db.tables().iter().all(|t| t.range_deletions == 0));
    assert_eq!(db.iter().count(), extra);
    siltdb::inspect::check_invariants(&db).unwrap();
}

#[test]
fn nested_purges_flush_one_sequence_number_per_piece_unless_a_snapshot_needs_more() {
    // A log purged again and again: every purge covers all the earlier ones, so piece j of
    // the 300 pieces is covered by purges j+1..=300.
    let fs = MemFs::new();
    let opts = common::mem_options(&fs)
        .memtable_size(4 << 20)
        .l0_compaction_trigger(4);
    let db = Db::open_with(Path::new("/db"), opts).unwrap();
    for i in 0..3_000u32 {
        db.insert(k(i), "entry").unwrap();
    }
    for i in 1..=150u32 {
        db.remove_range(..k(i * 10)).unwrap();
    }
    let snap = db.snapshot();
    for i in 151..=300u32 {
        db.remove_range(..k(i * 10)).unwrap();
    }
    db.flush().unwrap();
    // Kept: every purge above the snapshot, and the newest at or below it (purge 150) in the
    // pieces it covers: 150 * 151 + (150 + 149 + ... + 1).
    let tables = db.tables();
    assert_eq!(tables.len(), 1, "{tables:?}");
    assert_eq!(tables[0].range_deletions, 150 * 151 + 150 * 151 / 2);
    assert_eq!(snap.iter().count(), 3_000 - 1_500);
    drop(snap);
    // Without a snapshot: one sequence number per piece.
    db.remove_range(..k(5)).unwrap();
    db.remove_range(..k(3_000)).unwrap();
    db.flush().unwrap();
    let newest = db.tables().into_iter().max_by_key(|t| t.table_id).unwrap();
    assert_eq!(newest.range_deletions, 2, "{newest:?}");
    assert_eq!(db.iter().count(), 0);
    siltdb::inspect::check_invariants(&db).unwrap();
}
