//! Filter policies end to end: an explicit per-level vector, Monkey's spread over levels, and
//! the filter memory limit (smaller filters, largest levels first, never none). The vector and
//! the limit run on the in-memory file system (filter sizes do not depend on the disk, and a
//! real one's fsyncs, hundreds of flushes a load, made this file take ~16 s of CI time);
//! Monkey's average runs on disk as it always has (how its tree settles depends on how fast
//! flushes are against compactions, and its bound was set on disk).
use crate::common;

use siltdb::fs::{FileSystem, MemFs};
use siltdb::{Db, FilterPolicy, Options};
use std::path::Path;
use std::sync::Arc;

fn shaped(opts: Options) -> Options {
    opts.memtable_size(16 << 10)
        .level_base_size(64 << 10)
        .target_table_size(16 << 10)
        .block_size(1024)
}

fn fill(db: &Db, n: u64) {
    let mut rng = common::Rng(31);
    for _ in 0..n {
        db.insert(format!("{:016x}", rng.next()), [5u8; 40])
            .unwrap();
    }
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();
}

/// `n` keys loaded into a database on its own in-memory file system, compactions done.
fn load(opts: Options, n: u64) -> Db {
    let fs = Arc::new(MemFs::new()) as Arc<dyn FileSystem>;
    let db = Db::open_with(Path::new("/db"), shaped(opts).file_system(fs)).unwrap();
    fill(&db, n);
    db
}

/// The same on disk, in a temporary directory.
fn load_on_disk(opts: Options, n: u64) -> (tempfile::TempDir, Db) {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open_with(dir.path(), shaped(opts)).unwrap();
    fill(&db, n);
    (dir, db)
}

#[test]
fn per_level_vector_sets_bits_by_level() {
    // A tree of two levels whatever the timing (with background compaction, how many
    // tables end where they were built depends on how flushes race compactions): a load
    // compacted whole into the deepest level, then more keys flushed into L0.
    let db = load(
        Options::default()
            .filter_policy(FilterPolicy::PerLevel(vec![14.0, 12.0, 6.0]))
            .auto_compaction(false),
        20_000,
    );
    db.compact().unwrap();
    fill(&db, 2_000);
    assert!(db.levels()[0].tables > 1, "{:?}", db.levels());
    // A Bloom filter takes whole 512-bit lines: a table of n keys built at b bits per key has
    // between b and b + 512/n (tables of 100 keys or more: a flush here holds 128, a
    // compaction cuts at ~250). A table keeps its filter when a compaction moves it down
    // unchanged, so it may carry the bits of any level above its own.
    let vector = [14.0, 12.0, 6.0];
    let mut checked = std::collections::BTreeSet::new();
    for t in db.tables().into_iter().filter(|t| t.entries >= 100) {
        let fits = |want: f64| {
            t.filter_bits_per_key >= want && t.filter_bits_per_key < want + 512.0 / t.entries as f64
        };
        assert!((0..=t.level).any(|l| fits(vector[l.min(2)])), "{t:?}");
        if fits(vector[t.level.min(2)]) {
            checked.insert(t.level.min(2));
        }
    }
    // Tables at their own level's bits in at least two of the vector's levels.
    assert!(checked.len() >= 2, "levels checked: {checked:?}");
}

#[test]
fn monkey_gives_small_levels_more_bits() {
    let (_d, db) = load_on_disk(
        Options::default().filter_policy(FilterPolicy::Monkey { bits_per_key: 10.0 }),
        40_000,
    );
    let levels: Vec<_> = db
        .levels()
        .into_iter()
        .filter(|l| l.tables > 0 && l.level > 0)
        .collect();
    assert!(levels.len() >= 2, "{levels:?}");
    let last = levels.last().unwrap();
    let first = &levels[0];
    assert!(first.bits_per_key > last.bits_per_key + 2.0, "{levels:?}");
    // The whole tree stays near the budget of 10 bits per key (L0's transient tables are not
    // charged to it), give or take what Monkey cannot control: a Bloom filter takes whole
    // 512-bit lines (up to 512 bits more per table: ~2 bits per key with this test's tables
    // of ~240 keys), and a table moved down unchanged keeps the bits of the level it was built
    // for (more of them when compactions lag the load: a fixed upper bound of 11.5 failed in
    // CI at 11.55 while runs alone measured 10.5-11.2). A policy that gave every level the
    // small levels' bits would be far above.
    let (bytes, keys, tables): (u64, u64, u64) = levels.iter().fold((0, 0, 0), |(b, k, t), l| {
        (b + l.filter_bytes, k + l.filter_keys, t + l.tables as u64)
    });
    let avg = bytes as f64 * 8.0 / keys as f64;
    let lines = 512.0 * tables as f64 / keys as f64;
    println!("monkey average {avg:.2} bits/key (line rounding up to {lines:.2}), {levels:?}");
    assert!(
        avg >= 8.5 && avg < 10.0 + lines + 0.75,
        "average {avg} bits/key, line rounding up to {lines}"
    );
}

#[test]
fn memory_limit_shrinks_filters_but_never_removes_them() {
    // Room for about 4 bits per key over the whole tree.
    let n = 40_000u64;
    let limit = n * 4 / 8;
    for policy in [
        FilterPolicy::Uniform { bits_per_key: 10.0 },
        FilterPolicy::Monkey { bits_per_key: 10.0 },
    ] {
        let db = load(
            Options::default()
                .filter_policy(policy.clone())
                .filter_memory_limit(limit),
            n,
        );
        let tables = db.tables();
        let total: u64 = tables.iter().map(|t| t.filter_bytes).sum();
        // Tables written before the tree grew may hold a little more; the limit holds within
        // the rounding of filters to whole cache lines.
        assert!(
            total <= limit + limit / 4,
            "{policy:?}: {total} bytes of filters, limit {limit}"
        );
        assert!(
            tables.iter().all(|t| t.filter_bits_per_key >= 1.0),
            "{policy:?}: a table lost its filter"
        );
        let unlimited = load(Options::default().filter_policy(policy.clone()), n);
        let free: u64 = unlimited.tables().iter().map(|t| t.filter_bytes).sum();
        assert!(
            free > total * 2,
            "{policy:?}: limit had no effect ({free} vs {total})"
        );
        // Reads stay correct with smaller filters.
        let mut rng = common::Rng(31);
        for _ in 0..1000 {
            assert!(db.get(format!("{:016x}", rng.next())).unwrap().is_some());
        }
    }
}
