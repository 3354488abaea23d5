//! A batch is applied whole: readers never see half of it, and a crash keeps all or none.
use crate::common;

use siltdb::fs::{CrashImageOptions, FileSystem, MemFs};
use siltdb::{Db, WriteBatch};
use std::path::Path;

#[test]
fn batch_survives_reopen_whole() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Db::open(dir.path()).unwrap();
        db.insert("old", "x").unwrap();
        let mut b = WriteBatch::new();
        for i in 0..500u32 {
            b.insert(format!("b{i:03}"), format!("{i}"));
        }
        b.remove("old");
        db.write(b).unwrap();
    }
    let db = Db::open(dir.path()).unwrap();
    assert_eq!(db.prefix("b").count(), 500);
    assert_eq!(db.get("old").unwrap(), None);
}

#[test]
fn a_torn_batch_is_recovered_not_at_all() {
    let fs = MemFs::new();
    let dir = Path::new("/db");
    let db = common::open_mem(&fs, dir);
    db.insert("before", "1").unwrap();
    let wal_name = fs
        .list(dir)
        .unwrap()
        .into_iter()
        .find(|n| n.ends_with(".wal"))
        .unwrap();
    let wal = dir.join(wal_name);
    let start = fs.read_file(&wal).unwrap().len();
    let mut b = WriteBatch::new();
    for i in 0..50u32 {
        b.insert(format!("batch{i:02}"), "v");
    }
    db.write(b).unwrap();
    let image = fs.crash_image(CrashImageOptions::PROCESS_CRASH);
    drop(db);
    let full = image.read_file(&wal).unwrap();
    // Cut the batch's record at every length: never a partial batch.
    for end in start..full.len() {
        let img = image.crash_image(CrashImageOptions::PROCESS_CRASH);
        img.write_file(&wal, &full[..end]).unwrap();
        let db = common::open_mem(&img, dir);
        let n = db.prefix("batch").count();
        assert!(n == 0, "cut at {end}: {n} of 50 batch keys recovered");
        assert_eq!(
            db.get("before").unwrap().map(Vec::from),
            Some(b"1".to_vec())
        );
    }
    let db = common::open_mem(&image, dir);
    assert_eq!(db.prefix("batch").count(), 50);
}

#[test]
fn concurrent_readers_never_see_half_a_batch() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open_with(dir.path(), common::small_options()).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Set once the reader has checked once: the writer starts then.
    let started = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let db = db.clone();
        let (stop, started) = (stop.clone(), started.clone());
        std::thread::spawn(move || {
            let mut checks = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // Every batch writes the same round number to a and b.
                let snap = db.snapshot();
                let a = snap.get("a").unwrap();
                let b = snap.get("b").unwrap();
                assert_eq!(a, b, "snapshot saw half a batch");
                let scan: Vec<_> = common::scan_all(db.range("a"..="b"));
                // Before the first batch neither key exists; after it, both.
                match scan.len() {
                    0 => assert!(a.is_none()),
                    2 => assert_eq!(scan[0].1, scan[1].1, "scan saw half a batch"),
                    n => panic!("scan saw {n} of the batch's 2 keys"),
                }
                checks += 1;
                started.store(true, std::sync::atomic::Ordering::Release);
            }
            checks
        })
    };
    // (A reader that panicked before its first check ends the wait: its join below fails.)
    while !started.load(std::sync::atomic::Ordering::Acquire) && !reader.is_finished() {
        std::thread::yield_now();
    }
    for round in 0..3000u32 {
        let mut b = WriteBatch::new();
        b.insert("a", round.to_string());
        b.insert("b", round.to_string());
        db.write(b).unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(reader.join().unwrap() > 0);
}
