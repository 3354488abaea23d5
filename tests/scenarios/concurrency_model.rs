//! Issue 7, test 7: several threads doing random inserts, removes, gets, scans and snapshots
//! on a shared set of keys while flushes and compactions run. Checks: every read returns a
//! value that some write made, and none older than the last write to that key completed
//! before the read started; a snapshot's answers never change; scans are sorted, without
//! duplicates, and hold only written values.
//!
//! Writers to one key are serialized (striped locks), so each key's writes are totally ordered
//! by a global counter; reads take no lock. Sizes: `SILT_CONC_OPS` per writer (default 20000).
use crate::common;

use parking_lot::Mutex;
use siltdb::Db;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

const KEYS: u64 = 128;

fn key(k: u64) -> Vec<u8> {
    format!("key{k:03}").into_bytes()
}

/// Per key: the log of writes in order, as (ts, is_remove), and the latest completed one.
struct KeyState {
    lock: Mutex<()>,
    log: Mutex<Vec<(u64, bool)>>,
    completed: Mutex<(u64, bool)>,
}

fn ts_of(v: &[u8]) -> u64 {
    std::str::from_utf8(v).unwrap()[..16].parse().unwrap()
}

struct Shared {
    keys: Vec<KeyState>,
    clock: AtomicU64,
    stop: AtomicBool,
    violations: Mutex<Vec<String>>,
}

impl Shared {
    fn violation(&self, s: String) {
        let mut v = self.violations.lock();
        if v.len() < 10 {
            v.push(s);
        }
    }

    /// Checks one read of key `k` that began when the latest completed write was `floor`.
    fn check_read(&self, k: u64, floor: (u64, bool), got: Option<&[u8]>, what: &str) {
        let ks = &self.keys[k as usize];
        let log = ks.log.lock();
        match got {
            Some(v) => {
                let ts = ts_of(v);
                if !log.iter().any(|&(t, rem)| t == ts && !rem) {
                    self.violation(format!("{what} key{k:03}: value ts {ts} was never written"));
                } else if ts < floor.0 || (ts == floor.0 && floor.1) {
                    self.violation(format!(
                        "{what} key{k:03}: stale value ts {ts}, write {floor:?} had completed"
                    ));
                }
            }
            None => {
                // Fine if the floor write was a removal, the key was never written, or a
                // removal after the floor began while the read ran.
                let ok = floor.0 == 0 || floor.1 || log.iter().any(|&(t, rem)| rem && t > floor.0);
                if !ok {
                    self.violation(format!(
                        "{what} key{k:03}: missing, but write {floor:?} had completed"
                    ));
                }
            }
        }
    }
}

#[test]
fn concurrent_readers_writers_snapshots_and_compactions() {
    let ops: u64 = std::env::var("SILT_CONC_OPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open_with(dir.path(), common::small_options()).unwrap();
    let shared = Arc::new(Shared {
        keys: (0..KEYS)
            .map(|_| KeyState {
                lock: Mutex::new(()),
                log: Mutex::new(Vec::new()),
                completed: Mutex::new((0, false)),
            })
            .collect(),
        clock: AtomicU64::new(1),
        stop: AtomicBool::new(false),
        violations: Mutex::new(Vec::new()),
    });
    let mut writers = Vec::new();
    for w in 0..2u64 {
        let (db, sh) = (db.clone(), shared.clone());
        writers.push(std::thread::spawn(move || {
            let mut rng = common::Rng(w + 100);
            for _ in 0..ops {
                let k = rng.below(KEYS);
                let ks = &sh.keys[k as usize];
                let _g = ks.lock.lock();
                let ts = sh.clock.fetch_add(1, Ordering::SeqCst);
                let remove = rng.below(5) == 0;
                ks.log.lock().push((ts, remove));
                if remove {
                    db.remove(key(k)).unwrap();
                } else {
                    db.insert(
                        key(k),
                        format!("{ts:016}-w{w}-{}", "p".repeat(rng.below(80) as usize)),
                    )
                    .unwrap();
                }
                *ks.completed.lock() = (ts, remove);
            }
        }));
    }
    let mut readers = Vec::new();
    for r in 0..2u64 {
        let (db, sh) = (db.clone(), shared.clone());
        readers.push(std::thread::spawn(move || {
            let mut rng = common::Rng(r + 200);
            let (mut gets, mut scans, mut snaps) = (0u64, 0u64, 0u64);
            while !sh.stop.load(Ordering::Relaxed) {
                match rng.below(10) {
                    0 => {
                        // Scan: floors taken before it starts.
                        let floors: Vec<(u64, bool)> =
                            sh.keys.iter().map(|k| *k.completed.lock()).collect();
                        let all: Vec<(Vec<u8>, Vec<u8>)> = db.iter().map(|x| x.unwrap()).collect();
                        if !all.windows(2).all(|w| w[0].0 < w[1].0) {
                            sh.violation("scan not sorted or has duplicates".into());
                        }
                        let got: BTreeMap<Vec<u8>, Vec<u8>> = all.into_iter().collect();
                        for k in 0..KEYS {
                            sh.check_read(
                                k,
                                floors[k as usize],
                                got.get(&key(k)).map(|v| v.as_slice()),
                                "scan",
                            );
                        }
                        scans += 1;
                    }
                    1 => {
                        // Snapshot: read, let writes happen, read again: identical.
                        let snap = db.snapshot();
                        let first: Vec<(Vec<u8>, Vec<u8>)> =
                            snap.iter().map(|x| x.unwrap()).collect();
                        let some: Vec<Option<Vec<u8>>> = (0..8)
                            .map(|k| snap.get(key(k)).unwrap().map(Vec::from))
                            .collect();
                        std::thread::sleep(std::time::Duration::from_millis(2));
                        let again: Vec<(Vec<u8>, Vec<u8>)> =
                            snap.iter().map(|x| x.unwrap()).collect();
                        let some_again: Vec<Option<Vec<u8>>> = (0..8)
                            .map(|k| snap.get(key(k)).unwrap().map(Vec::from))
                            .collect();
                        if first != again || some != some_again {
                            sh.violation("a snapshot's answers changed".into());
                        }
                        snaps += 1;
                    }
                    _ => {
                        let k = rng.below(KEYS);
                        let floor = *sh.keys[k as usize].completed.lock();
                        let got = db.get(key(k)).unwrap();
                        sh.check_read(k, floor, got.as_deref(), "get");
                        gets += 1;
                    }
                }
            }
            (gets, scans, snaps)
        }));
    }
    for w in writers {
        w.join().unwrap();
    }
    shared.stop.store(true, Ordering::Relaxed);
    let mut totals = (0, 0, 0);
    for r in readers {
        let (g, s, n) = r.join().unwrap();
        totals = (totals.0 + g, totals.1 + s, totals.2 + n);
    }
    let stats = db.stats();
    let violations = shared.violations.lock().clone();
    println!(
        "concurrency: writes={} gets={} scans={} snapshots={} flushes={} compactions={} violations={}",
        2 * ops, totals.0, totals.1, totals.2, stats.flushes, stats.compactions, violations.len()
    );
    assert!(
        stats.compactions > 0,
        "compactions must run during the test"
    );
    assert!(violations.is_empty(), "{violations:#?}");
    siltdb::inspect::check_invariants(&db).unwrap();
}
