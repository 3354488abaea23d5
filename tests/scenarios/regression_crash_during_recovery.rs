//! Regression (review of the recovery checks, finding 2): a process crash leaves WAL records
//! only in the page cache; the next open replays them into a synced L0 table; a power loss
//! then strikes before the manifest edit is synced. The unsynced WAL tail is gone but the
//! table survives, and the orphan check took it for a lost manifest edit: the database would
//! not open. Recovery now fsyncs the replayed WALs before writing the table.
use siltdb::fs::{CrashImageOptions, CrashPoint, FileSystem, MemFs};
use siltdb::{Db, Options};
use std::sync::{Arc, Mutex};

fn options(fs: &MemFs) -> Options {
    Options::default().file_system(Arc::new(fs.clone()) as Arc<dyn FileSystem>)
}

#[test]
fn power_loss_during_recovery_of_unsynced_wal_data_opens() {
    let fs = MemFs::new();
    let db = Db::open_with("/db", options(&fs)).unwrap();
    db.insert("synced", "1").unwrap();
    db.sync().unwrap();
    for i in 0..50u32 {
        db.insert(format!("unsynced-{i:02}"), "2").unwrap();
    }
    // A process crash: the unsynced records are still in the page cache.
    let crashed = fs.crash_image(CrashImageOptions::PROCESS_CRASH);
    drop(db);
    let points: Arc<Mutex<Vec<CrashPoint>>> = Arc::new(Mutex::new(Vec::new()));
    let sink = points.clone();
    crashed.set_crash_hook(
        1,
        Some(Arc::new(move |p: CrashPoint| sink.lock().unwrap().push(p))),
    );
    drop(Db::open_with("/db", options(&crashed)).unwrap());
    crashed.set_crash_hook(0, None);
    let points = std::mem::take(&mut *points.lock().unwrap());
    assert!(points.len() > 5);
    // A power loss at every step of that recovery: always opens, keeps the synced write, and
    // holds a prefix of the unsynced ones.
    for p in &points {
        let img = p.fs.crash_image(CrashImageOptions::POWER_LOSS);
        let db = Db::open_with("/db", options(&img)).unwrap_or_else(|e| panic!("op {}: {e}", p.op));
        assert_eq!(
            db.get("synced").unwrap().map(Vec::from),
            Some(b"1".to_vec()),
            "op {}",
            p.op
        );
        let n = db.prefix("unsynced-").count();
        let expect: Vec<Vec<u8>> = (0..n)
            .map(|i| format!("unsynced-{i:02}").into_bytes())
            .collect();
        let got: Vec<Vec<u8>> = db.prefix("unsynced-").map(|r| r.unwrap().0).collect();
        assert_eq!(got, expect, "op {}: a prefix of the unsynced writes", p.op);
    }
}
