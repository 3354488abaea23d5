//! A sequential load never rewrites data: each flush's L0 table is disjoint from the others,
//! so L0 tables move into L1 together without a merge (and L1 tables move on down), and the
//! tree stays valid.

use crate::common;

use siltdb::fs::MemFs;
use siltdb::{inspect, Db};
use std::path::Path;

#[test]
fn sequential_keys_move_down_without_rewrites() {
    let fs = MemFs::new();
    let dir = Path::new("/db");
    let db = Db::open_with(dir, common::mem_options(&fs)).unwrap();
    let n = 6_000u32;
    for i in 0..n {
        db.insert(format!("key{i:08}"), format!("value{i}"))
            .unwrap();
    }
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();
    let s = db.stats();
    assert!(s.trivial_moves > 0);
    assert!(s.flushes > 10);
    // Every compaction was a move: nothing was read back or rewritten.
    assert_eq!(s.bytes_compacted_written, 0, "{s:?}");
    assert!(db.levels()[0].tables < s.flushes as usize);
    inspect::check_invariants(&db).unwrap();
    for i in (0..n).step_by(7) {
        assert_eq!(
            db.get(format!("key{i:08}")).unwrap().unwrap(),
            format!("value{i}").as_bytes()
        );
    }
    assert_eq!(db.iter().count(), n as usize);
}

#[test]
fn overlapping_l0_tables_are_still_merged() {
    let fs = MemFs::new();
    let dir = Path::new("/db");
    let db = Db::open_with(dir, common::mem_options(&fs)).unwrap();
    // Every flush spans the whole key range: L0 tables overlap and must be merged.
    for round in 0..20u32 {
        for i in 0..200u32 {
            db.insert(format!("key{:08}", i * 20 + round), format!("v{round}"))
                .unwrap();
        }
    }
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();
    assert!(db.stats().bytes_compacted_written > 0);
    inspect::check_invariants(&db).unwrap();
    assert_eq!(db.iter().count(), 4_000);
}
