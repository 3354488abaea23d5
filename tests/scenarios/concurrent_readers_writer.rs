//! Many threads read while one writes: every read returns a value that was written, never
//! older than what was acknowledged before the read began.
use crate::common;

use siltdb::Db;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

#[test]
fn readers_see_monotonic_acknowledged_values() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open_with(dir.path(), common::small_options()).unwrap();
    const KEYS: u64 = 64;
    // acked[k] = highest round acknowledged for key k.
    let acked: Arc<Vec<AtomicU64>> = Arc::new((0..KEYS).map(|_| AtomicU64::new(0)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let mut readers = Vec::new();
    for t in 0..4u64 {
        let (db, acked, stop) = (db.clone(), acked.clone(), stop.clone());
        readers.push(std::thread::spawn(move || {
            let mut rng = common::Rng(t);
            let mut reads = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let k = rng.below(KEYS);
                let floor = acked[k as usize].load(Ordering::Acquire);
                let got = db.get(format!("key{k:02}")).unwrap();
                let round: u64 = match got {
                    Some(v) => String::from_utf8(v.into_vec()).unwrap().parse().unwrap(),
                    None => 0,
                };
                assert!(
                    round >= floor,
                    "key{k:02}: read round {round}, acknowledged {floor}"
                );
                if reads.is_multiple_of(50) {
                    let scan = common::scan_all(db.iter());
                    assert!(
                        scan.windows(2).all(|w| w[0].0 < w[1].0),
                        "scan out of order"
                    );
                }
                reads += 1;
            }
            reads
        }));
    }
    let mut rng = common::Rng(99);
    for round in 1..=20_000u64 {
        let k = rng.below(KEYS);
        db.insert(format!("key{k:02}"), round.to_string()).unwrap();
        acked[k as usize].fetch_max(round, Ordering::Release);
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        assert!(r.join().unwrap() > 0);
    }
    // Flushes and compactions run in the background: let them finish before counting.
    db.wait_for_compactions().unwrap();
    let s = db.stats();
    assert!(s.flushes > 10 && s.compactions > 0, "{s:?}");
    siltdb::inspect::check_invariants(&db).unwrap();
}
