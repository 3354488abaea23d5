//! A binary fuse filter build that fails for every seed gives its table a Bloom filter of the
//! same size and counts it in `Stats::filter_fuse_fallbacks`; the flush succeeds and every
//! answer stays right. The failure can be forced only in the `--cfg siltdb_sabotage` build
//! (`.ci/run`'s checked profile), and the switch is process-wide, hence a file of its own.
#![cfg(siltdb_sabotage)]

mod common;

use common::small_options;
use siltdb::sabotage::{clear, plant, Bug};
use siltdb::{Db, FilterPolicy, LevelFilter};

fn key(i: u64) -> Vec<u8> {
    format!("key{i:08}").into_bytes()
}

#[test]
fn failed_fuse_builds_fall_back_to_bloom_and_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    let opts = small_options()
        .filter_policy(FilterPolicy::Levels(vec![LevelFilter::Fuse {
            fingerprint_bits: 8,
        }]))
        .auto_compaction(false);
    let db = Db::open_with(dir.path(), opts).unwrap();
    plant(Bug::FuseBuildFails);
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
    assert!(db.tables().iter().any(|t| t.filter_kind == "fuse8"));
    assert_eq!(db.stats().filter_fuse_fallbacks, s.filter_fuse_fallbacks);
    for i in 0..4000 {
        assert_eq!(
            db.get(key(i)).unwrap().as_deref(),
            Some(&i.to_le_bytes()[..])
        );
        assert_eq!(db.get(format!("key{i:08}-")).unwrap(), None);
    }
}
