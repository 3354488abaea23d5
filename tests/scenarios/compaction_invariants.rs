//! Randomized workload with compactions running; after each step the tree's invariants hold:
//! L1+ sorted and non-overlapping, every key's newest version readable, deleted keys stay
//! deleted, no table file on disk that no version references.
use crate::common;

use siltdb::fs::MemFs;
use siltdb::Db;
use std::collections::BTreeMap;
use std::path::Path;

fn check(db: &Db, model: &BTreeMap<Vec<u8>, Vec<u8>>, deleted: &[Vec<u8>]) {
    siltdb::inspect::check_invariants(db).unwrap();
    for (k, v) in model {
        assert_eq!(
            db.get(k).unwrap().as_deref(),
            Some(v.as_slice()),
            "key {k:?}"
        );
    }
    for k in deleted {
        if !model.contains_key(k) {
            assert_eq!(db.get(k).unwrap(), None, "deleted key {k:?} came back");
        }
    }
}

#[test]
fn invariants_hold_between_compactions() {
    let fs = MemFs::new();
    let dir = Path::new("/db");
    let db = Db::open_with(dir, common::mem_options(&fs)).unwrap();
    let mut model = BTreeMap::new();
    let mut deleted = Vec::new();
    let mut rng = common::Rng(2024);
    let mut last_compactions = 0;
    let mut checks = 0;
    for step in 0..40_000u64 {
        let k = format!("k{:04}", rng.below(3000)).into_bytes();
        match rng.below(10) {
            0..=1 => {
                db.remove(&k).unwrap();
                model.remove(&k);
                deleted.push(k);
            }
            _ => {
                let v = format!("v{step}-{}", "x".repeat(rng.below(60) as usize)).into_bytes();
                db.insert(&k, &v).unwrap();
                model.insert(k, v);
            }
        }
        let c = db.stats().compactions;
        if c != last_compactions && step % 50 == 0 {
            last_compactions = c;
            check(&db, &model, &deleted);
            checks += 1;
        }
    }
    db.compact().unwrap();
    check(&db, &model, &deleted);
    let levels = db.levels();
    let nonempty: Vec<usize> = levels
        .iter()
        .filter(|l| l.tables > 0)
        .map(|l| l.level)
        .collect();
    assert_eq!(
        nonempty.len(),
        1,
        "compact() leaves one sorted run: {levels:?}"
    );
    assert!(checks > 20, "only {checks} checks ran");
    assert!(db.stats().compactions > 100);
}
