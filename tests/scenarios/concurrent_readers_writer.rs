//! Many threads read while one writes: every read returns a value that was written, never
//! older than what was acknowledged before the read began, nor than what the same reader
//! read of that key before.
use crate::common;

use siltdb::Db;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

#[test]
fn readers_see_monotonic_acknowledged_values() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open_with(dir.path(), common::small_options()).unwrap();
    const KEYS: u64 = 64;
    // acked[k] = highest round acknowledged for key k.
    let acked: Arc<Vec<AtomicU64>> = Arc::new((0..KEYS).map(|_| AtomicU64::new(0)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    // Readers that have read once: the writer starts when all have.
    let started = Arc::new(AtomicUsize::new(0));
    const READERS: usize = 4;
    let mut readers = Vec::new();
    for t in 0..READERS as u64 {
        let (db, acked, stop, started) = (db.clone(), acked.clone(), stop.clone(), started.clone());
        readers.push(std::thread::spawn(move || {
            let mut rng = common::Rng(t);
            let mut reads = 0u64;
            // The newest round this reader has read of each key.
            let mut seen = vec![0u64; KEYS as usize];
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
                assert!(
                    round >= seen[k as usize],
                    "key{k:02}: read round {round} after round {}",
                    seen[k as usize]
                );
                seen[k as usize] = round;
                if reads == 0 {
                    started.fetch_add(1, Ordering::Release);
                }
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
    // (A reader that panicked before its first read ends the wait: its join below fails.)
    while started.load(Ordering::Acquire) < READERS && !readers.iter().any(|r| r.is_finished()) {
        std::thread::yield_now();
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
