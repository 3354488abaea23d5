//! A read-only open beside a writer that keeps appending to its WAL (written through a memory
//! map, header last) opens every time and sees every write acknowledged before it began: a
//! record still being copied when the replay reaches it is read again, not called corruption.
use siltdb::{Db, Options};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

fn key(i: u64) -> String {
    format!("key{i:09}")
}

#[test]
fn read_only_opens_during_a_load_see_every_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    // One memtable for the whole load: no seal, no flush, so the replay always reads the live
    // WAL's tail while it grows.
    let db = Db::open_with(dir.path(), Options::default().memtable_size(512 << 20)).unwrap();
    let acked = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (acked, stop) = (acked.clone(), stop.clone());
        std::thread::spawn(move || {
            // A write every ~5 us: the replay catches up with the WAL's end and then reads
            // where the writer is appending.
            let mut i = 0;
            // At most 200,000 writes: every open replays the whole WAL, which grows while it
            // is replayed, so an uncapped load would make each open longer than the last.
            while !stop.load(Ordering::Relaxed) && i < 200_000 {
                db.insert(key(i), "value value value value value").unwrap();
                i += 1;
                acked.store(i, Ordering::Release);
                let t = std::time::Instant::now();
                while t.elapsed() < std::time::Duration::from_micros(5) {
                    std::hint::spin_loop();
                }
            }
        })
    };
    while acked.load(Ordering::Acquire) < 1000 {
        std::thread::yield_now();
    }
    let mut opens = 0;
    while opens < 40 && !writer.is_finished() {
        opens += 1;
        let before = acked.load(Ordering::Acquire);
        let ro = Db::open_read_only(dir.path()).unwrap();
        assert!(
            ro.get(key(before - 1)).unwrap().is_some(),
            "{} was acknowledged before the open",
            key(before - 1)
        );
        assert!(ro.get(key(0)).unwrap().is_some());
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    assert!(opens >= 3, "only {opens} opens ran while the writer wrote");
}

#[test]
fn read_only_opens_while_a_writer_replaces_its_manifest_never_report_corruption() {
    // A writer that reopens again and again writes a new manifest each time and removes the
    // old one: a read-only open that read CURRENT just before must follow it to the new one,
    // not call the database corrupt. (Other failures of such an open are I/O errors: a WAL
    // removed under it.)
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Db::open_with(dir.path(), Options::default().auto_compaction(false)).unwrap();
        for i in 0..100 {
            db.insert(key(i), "v").unwrap();
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (stop, path) = (stop.clone(), dir.path().to_path_buf());
        std::thread::spawn(move || {
            let mut reopens = 0u32;
            while !stop.load(Ordering::Relaxed) && reopens < 2_000 {
                // No compaction: no table is removed under a read-only handle.
                let db = Db::open_with(&path, Options::default().auto_compaction(false)).unwrap();
                db.insert(key(u64::from(reopens)), "w").unwrap();
                drop(db);
                reopens += 1;
            }
            reopens
        })
    };
    let mut opened = 0;
    let mut read = 0;
    for _ in 0..300 {
        match Db::open_read_only(dir.path()) {
            Ok(_) => opened += 1,
            Err(e) => assert!(!e.is_corruption(), "{e:?}"),
        }
        // What `silt db info` reads, the same way.
        match siltdb::inspect::read_manifest(dir.path()) {
            Ok(_) => read += 1,
            Err(e) => assert!(!e.is_corruption(), "{e:?}"),
        }
    }
    stop.store(true, Ordering::Relaxed);
    let reopens = writer.join().unwrap();
    assert!(
        opened > 0 && read > 0 && reopens > 0,
        "{opened} read-only opens, {read} manifest reads, {reopens} reopens"
    );
}
