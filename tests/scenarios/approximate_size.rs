//! `approximate_size` on a settled tree: exact for the whole key space, within 10% of the
//! true share for ranges, 0 for an empty range and for ranges that hold no key.
use crate::common;

use siltdb::{Db, Options};

const N: u32 = 20_000;

fn key(i: u32) -> String {
    format!("key-{i:011}") // 16 bytes
}

#[test]
fn estimates_follow_the_keys_in_the_range() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options::default()
        .memtable_size(256 << 10)
        .target_table_size(128 << 10)
        .auto_compaction(false);
    let db = Db::open_with(dir.path(), opts).unwrap();
    let mut rng = common::Rng(14);
    // Random order, so that the flushed tables overlap and the compaction has work to do.
    let mut order: Vec<u32> = (0..N).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    for &i in &order {
        db.insert(key(i), [b'v'; 100]).unwrap();
    }
    db.compact().unwrap();
    let total: u64 = db.tables().iter().map(|t| t.bytes).sum();
    assert!(db.tables().len() >= 10, "{:?}", db.levels());

    assert_eq!(db.approximate_size::<&str, _>(..), total);
    assert_eq!(db.approximate_size(key(0)..), total);
    assert_eq!(db.approximate_size(..=key(N - 1)), total);
    // Every key has the same size, so the true figure is the range's share of the keys.
    for (a, b) in [
        (0, 2_000),
        (5_000, 15_000),
        (1_234, 4_321),
        (18_000, N),
        (9_000, 9_500),
    ] {
        let truth = total as f64 * f64::from(b - a) / f64::from(N);
        let est = db.approximate_size(key(a)..key(b)) as f64;
        assert!(
            (est - truth).abs() <= truth * 0.10,
            "{a}..{b}: estimated {est}, true {truth:.0}"
        );
    }

    assert_eq!(db.approximate_size(key(5)..key(5)), 0, "empty range");
    assert_eq!(db.approximate_size(key(9)..key(3)), 0, "reversed range");
    assert_eq!(db.approximate_size("a".."k"), 0, "below every key");
    assert_eq!(db.approximate_size("z"..), 0, "above every key");
    // Between two adjacent keys: nothing, though both sit in one block.
    let gap = format!("{}x", key(100));
    assert_eq!(db.approximate_size(gap.as_str()..key(101).as_str()), 0);
}

#[test]
fn an_empty_database_has_no_size() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path()).unwrap();
    db.insert("only-in-the-memtable", "v").unwrap();
    assert_eq!(db.approximate_size::<&str, _>(..), 0);
}

/// A table of range tombstones alone (a range removal flushed) has no data block; its bytes
/// still count, all of them for a range that overlaps it (review, session 24: it counted 0).
#[test]
fn a_table_of_range_tombstones_alone_counts_its_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open_with(dir.path(), Options::default().auto_compaction(false)).unwrap();
    for i in 0..1000 {
        db.insert(key(i), [b'v'; 100]).unwrap();
    }
    db.flush().unwrap();
    db.remove_range(key(100)..key(200)).unwrap();
    db.flush().unwrap();
    let tables = db.tables();
    assert_eq!(tables.len(), 2);
    let tombstones = tables
        .iter()
        .find(|t| t.entries == t.range_deletions)
        .unwrap();
    assert!(tombstones.bytes > 0);
    let total: u64 = tables.iter().map(|t| t.bytes).sum();
    assert_eq!(db.approximate_size::<&str, _>(..), total);
    // A range inside the removal's: the whole tombstone table, and part of the other.
    let inside = db.approximate_size(key(120)..key(150));
    assert!(inside >= tombstones.bytes, "{inside}");
    assert!(inside < total, "{inside}");
}
