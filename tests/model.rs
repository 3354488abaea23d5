//! Model test: random operation histories against a `BTreeMap`, on tiny sizes so that
//! flushes and compactions happen constantly, with reopens and process-crash reopens.
mod common;

use proptest::prelude::*;
use siltdb::fs::{CrashImageOptions, MemFs};
use siltdb::{Db, WriteBatch};
use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::Path;

#[derive(Debug, Clone)]
enum Op {
    Insert(u8, Vec<u8>),
    Remove(u8),
    Batch(Vec<(u8, Option<Vec<u8>>)>),
    Get(u8),
    Range(u8, u8, bool),
    Flush,
    Compact,
    Reopen,
    CrashReopen,
    SnapshotCheck,
}

fn key(k: u8) -> Vec<u8> {
    // Key 0 is the empty key.
    if k == 0 {
        Vec::new()
    } else {
        format!("key{k:03}").into_bytes()
    }
}

fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        8 => proptest::collection::vec(any::<u8>(), 0..24),
        1 => proptest::collection::vec(any::<u8>(), 300..900),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let k = 0u8..60;
    prop_oneof![
        30 => (k.clone(), value()).prop_map(|(k, v)| Op::Insert(k, v)),
        10 => k.clone().prop_map(Op::Remove),
        6 => proptest::collection::vec((k.clone(), proptest::option::of(value())), 1..12).prop_map(Op::Batch),
        15 => k.clone().prop_map(Op::Get),
        6 => (k.clone(), k, any::<bool>()).prop_map(|(a, b, r)| Op::Range(a, b, r)),
        2 => Just(Op::Flush),
        1 => Just(Op::Compact),
        1 => Just(Op::Reopen),
        1 => Just(Op::CrashReopen),
        2 => Just(Op::SnapshotCheck),
    ]
}

fn check_range(db: &Db, model: &BTreeMap<Vec<u8>, Vec<u8>>, a: &[u8], b: &[u8], rev: bool) {
    let want: Vec<(Vec<u8>, Vec<u8>)> = if a <= b {
        model
            .range::<[u8], _>((Bound::Included(a), Bound::Excluded(b)))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    } else {
        Vec::new()
    };
    let mut got = if rev {
        common::scan_all(db.range(a..b).rev())
    } else {
        common::scan_all(db.range(a..b))
    };
    if rev {
        got.reverse();
    }
    assert_eq!(got, want, "range {a:?}..{b:?} rev={rev}");
}

/// Runs `ops` against the engine and the model, with a block cache of `cache` bytes (0: off).
fn run(ops: Vec<Op>, cache: u64) {
    let mut fs = MemFs::new();
    let dir = Path::new("/db");
    let open = |fs: &MemFs| {
        Db::open_with(dir, common::mem_options(fs).block_cache_size(cache)).expect("open")
    };
    let mut db = open(&fs);
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    for op in ops {
        match op {
            Op::Insert(k, v) => {
                db.insert(key(k), &v).unwrap();
                model.insert(key(k), v);
            }
            Op::Remove(k) => {
                db.remove(key(k)).unwrap();
                model.remove(&key(k));
            }
            Op::Batch(ops) => {
                let mut b = WriteBatch::new();
                for (k, v) in &ops {
                    match v {
                        Some(v) => {
                            b.insert(key(*k), v);
                        }
                        None => {
                            b.remove(key(*k));
                        }
                    }
                }
                db.write(b).unwrap();
                for (k, v) in ops {
                    match v {
                        Some(v) => model.insert(key(k), v),
                        None => model.remove(&key(k)),
                    };
                }
            }
            Op::Get(k) => assert_eq!(
                db.get(key(k)).unwrap().map(Vec::from),
                model.get(&key(k)).cloned(),
                "get {k}"
            ),
            Op::Range(a, b, rev) => check_range(&db, &model, &key(a), &key(b), rev),
            Op::Flush => db.flush().unwrap(),
            Op::Compact => {
                db.compact().unwrap();
                siltdb::inspect::check_invariants(&db).unwrap();
            }
            Op::Reopen => {
                drop(db);
                db = open(&fs);
            }
            Op::CrashReopen => {
                // A process crash: the OS keeps every acknowledged write.
                let image = fs.crash_image(CrashImageOptions::PROCESS_CRASH);
                drop(db);
                fs = image;
                db = open(&fs);
            }
            Op::SnapshotCheck => {
                let snap = db.snapshot();
                db.insert(key(1), b"after snapshot").unwrap();
                assert_eq!(
                    snap.get(key(1)).unwrap().map(Vec::from),
                    model.get(&key(1)).cloned()
                );
                let scanned = common::scan_all(snap.iter());
                let want: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                assert_eq!(scanned, want, "snapshot scan");
                model.insert(key(1), b"after snapshot".to_vec());
            }
        }
    }
    let want: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(common::scan_all(db.iter()), want);
    let mut rev = common::scan_all(db.iter().rev());
    rev.reverse();
    assert_eq!(rev, want);
    siltdb::inspect::check_invariants(&db).unwrap();
    drop(db);
    let db = open(&fs);
    assert_eq!(common::scan_all(db.iter()), want, "after final reopen");
}

fn cases() -> u32 {
    std::env::var("SILT_MODEL_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(48)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]
    #[test]
    fn engine_matches_btreemap(ops in proptest::collection::vec(op(), 1..300), cached in any::<bool>()) {
        // Half the cases read through a block cache small enough to evict, half without one.
        run(ops, if cached { 16 << 10 } else { 0 });
    }
}

#[test]
fn long_history_with_thousands_of_compactions() {
    // One long deterministic history: enough writes to run many flushes and compactions.
    let fs = MemFs::new();
    let dir = Path::new("/db");
    let db = common::open_mem(&fs, dir);
    let mut model = BTreeMap::new();
    let mut rng = common::Rng(7);
    for i in 0..60_000u64 {
        let k = format!("{:05}", rng.below(5000)).into_bytes();
        if rng.below(5) == 0 {
            db.remove(&k).unwrap();
            model.remove(&k);
        } else {
            let v = format!("{i}").into_bytes();
            db.insert(&k, &v).unwrap();
            model.insert(k, v);
        }
    }
    let s = db.stats();
    assert!(s.compactions >= 300, "only {} compactions", s.compactions);
    for (k, v) in &model {
        assert_eq!(db.get(k).unwrap().as_deref(), Some(v.as_slice()));
    }
    let want: Vec<_> = model.into_iter().collect();
    assert_eq!(common::scan_all(db.iter()), want);
    siltdb::inspect::check_invariants(&db).unwrap();
}
