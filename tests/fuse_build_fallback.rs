//! A binary fuse or Ribbon filter build that fails for every seed gives its table a Bloom
//! filter of the same size and counts it in `Stats::filter_fuse_fallbacks`; the flush
//! succeeds and every answer stays right. The failure can be forced only in the `--cfg
//! siltdb_sabotage` build (`.ci/run`'s release test build), and the switch is process-wide,
//! hence a file of its own and one test for both kinds.
#![cfg(siltdb_sabotage)]

mod common;

use common::small_options;
use siltdb::sabotage::{clear, plant, Bug};
use siltdb::{Db, FilterPolicy, LevelFilter, Options};

fn key(i: u64) -> Vec<u8> {
    format!("key{i:08}").into_bytes()
}

/// Writes one table with `bug` planted and one without, under `kind` everywhere: the first
/// gets a Bloom filter and is counted, the second gets `kind_name`; every answer is right.
fn falls_back(opts: Options, kind: LevelFilter, bug: Bug, kind_name: &str) {
    let dir = tempfile::tempdir().unwrap();
    let opts = opts
        .filter_policy(FilterPolicy::Levels(vec![kind]))
        .auto_compaction(false);
    let db = Db::open_with(dir.path(), opts).unwrap();
    plant(bug);
    for i in 0..3000 {
        db.insert(key(i), i.to_le_bytes()).unwrap();
    }
    db.flush().unwrap();
    clear();
    let s = db.stats();
    assert!(s.filter_fuse_fallbacks >= 1, "{}", s.filter_fuse_fallbacks);
    assert!(db.tables().iter().all(|t| t.filter_kind == "bloom"));
    for i in 3000..4000 {
        db.insert(key(i), i.to_le_bytes()).unwrap();
    }
    db.flush().unwrap();
    assert!(db.tables().iter().any(|t| t.filter_kind == kind_name));
    assert_eq!(db.stats().filter_fuse_fallbacks, s.filter_fuse_fallbacks);
    for i in 0..4000 {
        assert_eq!(
            db.get(key(i)).unwrap().as_deref(),
            Some(&i.to_le_bytes()[..])
        );
        assert_eq!(db.get(format!("key{i:08}-")).unwrap(), None);
    }
}

#[test]
fn failed_fuse_and_ribbon_builds_fall_back_to_bloom_and_are_counted() {
    falls_back(
        small_options(),
        LevelFilter::Fuse {
            fingerprint_bits: 8,
        },
        Bug::FuseBuildFails,
        "fuse8",
    );
    // Ribbon in tables of a few thousand keys: below a few hundred a table gets Bloom by
    // design, not as a fallback.
    falls_back(
        small_options()
            .memtable_size(256 << 10)
            .target_table_size(256 << 10),
        LevelFilter::Ribbon { bits_per_key: 7.0 },
        Bug::RibbonBuildFails,
        "ribbon",
    );
}
