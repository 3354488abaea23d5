//! Leveled shape: L0 is compacted at its trigger, levels respect their targets, outputs are
//! split at the target table size, non-overlapping tables move down without rewriting. On
//! the in-memory file system: the shape does not depend on the disk, and a real one's fsyncs
//! (hundreds of flushes here) made this file take ~19 s of CI time.
use crate::common;

use siltdb::fs::{FileSystem, MemFs};
use siltdb::{Db, Options};
use std::path::Path;
use std::sync::Arc;

/// Opens a new database on its own in-memory file system.
fn open(opts: Options) -> Db {
    let fs = Arc::new(MemFs::new()) as Arc<dyn FileSystem>;
    Db::open_with(Path::new("/db"), opts.file_system(fs)).unwrap()
}

#[test]
fn levels_follow_their_targets_and_tables_are_split() {
    let opts = Options::default()
        .memtable_size(16 << 10)
        .level_base_size(64 << 10)
        .target_table_size(16 << 10)
        .l0_compaction_trigger(4);
    let db = open(opts);
    let mut rng = common::Rng(5);
    for _ in 0..30_000 {
        let k = format!("{:016x}", rng.next());
        db.insert(k, [7u8; 40]).unwrap();
    }
    db.flush().unwrap();
    // Let background compaction finish.
    db.wait_for_compactions().unwrap();
    let levels = db.levels();
    assert!(levels[0].tables < 4, "{levels:?}");
    for l in 1..6 {
        let target = (64u64 << 10) * 10u64.pow(l as u32 - 1);
        assert!(
            levels[l].bytes <= target + (20 << 10),
            "L{l} over target: {levels:?}"
        );
    }
    let deepest = levels.iter().rposition(|l| l.tables > 0).unwrap();
    assert!(deepest >= 2, "expected at least 3 levels: {levels:?}");
    // Output tables are split near the target size (last table of a run may be smaller).
    assert!(levels[deepest].tables as u64 >= levels[deepest].bytes / (20 << 10));
    siltdb::inspect::check_invariants(&db).unwrap();
    let s = db.stats();
    assert!(s.compactions > 0 && s.bytes_compacted_written > 0 && s.bytes_compacted_read > 0);
    assert!(s.write_amplification() > 1.0);
}

#[test]
fn sequential_keys_move_down_without_rewriting() {
    let opts = Options::default()
        .memtable_size(8 << 10)
        .level_base_size(32 << 10)
        .target_table_size(8 << 10)
        .l0_compaction_trigger(1)
        .l0_slowdown_trigger(8)
        .l0_stop_trigger(12);
    let db = open(opts);
    for i in 0..20_000u32 {
        db.insert(format!("{i:08}"), [1u8; 20]).unwrap();
    }
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();
    let s = db.stats();
    assert!(s.trivial_moves > 0, "{s:?}");
    siltdb::inspect::check_invariants(&db).unwrap();
    assert_eq!(db.iter().count(), 20_000);
}

#[test]
fn writers_wait_at_the_stop_trigger_instead_of_failing() {
    let opts = common::small_options()
        .l0_compaction_trigger(1)
        .l0_slowdown_trigger(1)
        .l0_stop_trigger(2)
        .max_immutable_memtables(1);
    let db = open(opts);
    // L0's table count, sampled while the writer runs: the trigger must hold throughout, not
    // only once the load is over.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let (db, done) = (db.clone(), done.clone());
        std::thread::spawn(move || {
            let mut most = 0;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                most = most.max(db.levels()[0].tables);
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
            most
        })
    };
    let mut rng = common::Rng(11);
    for _ in 0..20_000 {
        db.insert(format!("{:016x}", rng.next()), [3u8; 50])
            .unwrap();
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let most = sampler.join().unwrap();
    assert!(most <= 3, "L0 held {most} tables during the load");
    let s = db.stats();
    assert!(s.write_slowdowns > 0, "{s:?}");
    // Writers waited, not only slowed down (`write_stops` counts waits at the L0 stop trigger
    // and for the one sealed memtable's slot alike); L0 held at most the stop trigger's two
    // tables plus the one sealed memtable's is what shows the trigger held.
    assert!(s.write_stops > 0, "{s:?}");
    assert!(db.levels()[0].tables <= 3, "{:?}", db.levels()[0]);
    assert_eq!(db.iter().count(), 20_000);
}

/// `Stats::write_stops` counts stops, not the rounds of waiting in one (a stopped writer wakes
/// every 100 ms to look again: one stop of a second counted about ten). Here the one flush is
/// held in its table's fsync while the writer fills the next memtable: one stop, however long.
#[test]
fn a_long_stop_counts_once() {
    use common::hooked_fs::HookedFs;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;
    let held = Arc::new(AtomicBool::new(true));
    let hold = held.clone();
    let fs = HookedFs {
        on_sync: Some(Arc::new(move |p: &Path| {
            if p.extension().is_some_and(|e| e == "sst") {
                let deadline = std::time::Instant::now() + Duration::from_secs(60);
                while hold.load(Ordering::SeqCst) && std::time::Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        })),
        ..HookedFs::new(MemFs::new())
    };
    // About 7 writes fill a 1 KiB memtable (each counts 16 + 50 + 72 bytes).
    let opts = Options::default()
        .memtable_size(1 << 10)
        .max_immutable_memtables(1)
        .file_system(Arc::new(fs) as Arc<dyn FileSystem>);
    let db = Arc::new(Db::open_with(Path::new("/db"), opts).unwrap());
    let writer = {
        let db = db.clone();
        std::thread::spawn(move || {
            // The first memtable is sealed (its flush held), the second fills and stops the
            // writer; after the release the rest fit in a third.
            for i in 0..20u32 {
                db.insert(format!("{i:016}"), [5u8; 50]).unwrap();
            }
        })
    };
    // Stopped, then several rounds of waiting (100 ms each).
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while db.stats().write_stops == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the writer never stopped"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(450));
    assert!(
        !writer.is_finished(),
        "the writer went on while the flush was held"
    );
    held.store(false, Ordering::SeqCst);
    writer.join().unwrap();
    let s = db.stats();
    assert_eq!(s.write_stops, 1, "{s:?}");
    assert!(s.write_stall_micros >= 400_000, "{s:?}");
}
