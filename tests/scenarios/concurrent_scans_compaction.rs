//! Scans and gets from several threads while a writer and compactions run: every scan is
//! sorted, free of duplicates, and consistent with one point in time.
use crate::common;

use siltdb::{Db, WriteBatch};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

#[test]
fn scans_stay_consistent_under_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open_with(dir.path(), common::small_options()).unwrap();
    const N: u32 = 400;
    // Every round rewrites all keys with the round number in one batch; a consistent scan
    // sees a single round everywhere.
    let write_round = |db: &Db, round: u32| {
        let mut b = WriteBatch::new();
        for i in 0..N {
            b.insert(format!("key{i:04}"), format!("{round:06}"));
        }
        db.write(b).unwrap();
    };
    write_round(&db, 0);
    let stop = Arc::new(AtomicBool::new(false));
    let mut readers = Vec::new();
    for t in 0..3u32 {
        let (db, stop) = (db.clone(), stop.clone());
        readers.push(std::thread::spawn(move || {
            let mut scans = 0;
            while !stop.load(Ordering::Relaxed) {
                let items = if t == 1 {
                    let mut v = common::scan_all(db.iter().rev());
                    v.reverse();
                    v
                } else {
                    common::scan_all(db.iter())
                };
                assert_eq!(items.len(), N as usize, "scan lost or duplicated keys");
                assert!(items.windows(2).all(|w| w[0].0 < w[1].0), "scan not sorted");
                let round = &items[0].1;
                assert!(items.iter().all(|(_, v)| v == round), "scan mixed rounds");
                let snap = db.snapshot();
                let a = snap.get("key0000").unwrap();
                let b = snap.get(format!("key{:04}", N - 1)).unwrap();
                assert_eq!(a, b, "snapshot mixed rounds");
                scans += 1;
            }
            scans
        }));
    }
    for round in 1..400u32 {
        write_round(&db, round);
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        assert!(r.join().unwrap() > 0);
    }
    assert!(db.stats().compactions > 5, "{:?}", db.stats());
    siltdb::inspect::check_invariants(&db).unwrap();
}
