//! The WAL a rotation starts is made ahead: once a full memtable's rotation has queued the old
//! WAL's seal, the seal thread (after that seal) creates the next WAL, so that the next
//! rotation only puts it in place. The spare is numbered above the live WAL and holds no
//! record; `close` removes it, and an open after a crash that left it replays it as the
//! empty WAL it is and removes it, losing nothing.

use crate::common;

use siltdb::fs::{CrashImageOptions, FileSystem, MemFs};
use siltdb::{Db, Options, WriteOptions};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

const DIR: &str = "/db";

fn options(fs: &MemFs) -> Options {
    common::small_options()
        .memtable_size(64 << 10)
        .auto_compaction(false)
        .file_system(Arc::new(fs.clone()) as Arc<dyn FileSystem>)
}

fn key(i: u32) -> String {
    format!("key{i:06}")
}

fn size(fs: &MemFs, name: &str) -> usize {
    fs.read_file(&Path::new(DIR).join(name)).unwrap().len()
}

/// Polls (up to 20 s) until the newest WAL is empty and the one below it is not: the spare
/// made ahead, above the live WAL that took writes. Returns the spare's name.
fn wait_for_spare(fs: &MemFs) -> Option<String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let wals = common::mem_files(fs, Path::new(DIR), ".wal");
        if let [.., live, spare] = wals.as_slice() {
            if size(fs, spare) == 0 && size(fs, live) > 0 {
                return Some(spare.clone());
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    None
}

/// Inserts from key `from` on until the WAL `name` holds records (a rotation started it);
/// returns the next key to insert.
fn insert_until_written(db: &Db, fs: &MemFs, name: &str, from: u32) -> u32 {
    let mut i = from;
    while size(fs, name) == 0 {
        db.insert(key(i), [b'v'; 100]).unwrap();
        i += 1;
        assert!(i < from + 5_000, "no rotation started {name}");
    }
    i
}

/// Loads keys until the first memtable is flushed, writes one more (so that the live WAL
/// holds a record) and waits for the spare; returns the next key to insert and the spare.
fn load_until_spare(db: &Db, fs: &MemFs) -> (u32, String) {
    let mut n = 0;
    while db.stats().flushes == 0 {
        db.insert(key(n), [b'v'; 100]).unwrap();
        n += 1;
        assert!(n < 5_000, "no flush");
    }
    db.insert(key(n), [b'v'; 100]).unwrap();
    let spare = wait_for_spare(fs).expect("a WAL made ahead after the first rotation");
    (n + 1, spare)
}

#[test]
fn a_rotation_starts_the_wal_made_ahead_and_close_removes_the_next() {
    let fs = MemFs::new();
    let db = Db::open_with(DIR, options(&fs)).unwrap();
    // Before any rotation there is no spare: the WAL the open started is the only one.
    assert_eq!(common::mem_files(&fs, Path::new(DIR), ".wal").len(), 1);
    let (mut n, first) = load_until_spare(&db, &fs);
    // The next rotation starts that very file, and a new spare is made above it.
    n = insert_until_written(&db, &fs, &first, n);
    db.insert(key(n), [b'v'; 100]).unwrap();
    n += 1;
    let second = wait_for_spare(&fs).expect("a WAL made ahead after the second rotation");
    assert!(second > first, "{second} after {first}");
    drop(db);
    // Closed: the spare is gone, the WAL that took writes stays.
    let wals = common::mem_files(&fs, Path::new(DIR), ".wal");
    assert!(!wals.contains(&second), "{wals:?}");
    assert!(wals.iter().all(|w| size(&fs, w) > 0), "{wals:?}");
    let db = Db::open_with(DIR, options(&fs)).unwrap();
    for i in 0..n {
        assert!(db.get(key(i)).unwrap().is_some(), "key {i}");
    }
}

#[test]
fn a_crash_that_leaves_a_wal_made_ahead_loses_nothing() {
    for crash in [
        CrashImageOptions::PROCESS_CRASH,
        CrashImageOptions::POWER_LOSS,
    ] {
        let fs = MemFs::new();
        let db = Db::open_with(DIR, options(&fs)).unwrap();
        let (n, spare) = load_until_spare(&db, &fs);
        // Every write made durable, so that a power loss keeps them all.
        db.sync().unwrap();
        let image = fs.crash_image(crash);
        drop(db);
        // A process crash keeps the spare; a power loss may lose its name too (no directory
        // fsync followed its creation yet).
        if crash == CrashImageOptions::PROCESS_CRASH {
            assert!(common::mem_files(&image, Path::new(DIR), ".wal").contains(&spare));
        }
        let db = Db::open_with(DIR, options(&image)).unwrap();
        for i in 0..n {
            assert!(db.get(key(i)).unwrap().is_some(), "key {i} after {crash:?}");
        }
        // The open replayed the empty spare and removed it with the other old WALs.
        let wals = common::mem_files(&image, Path::new(DIR), ".wal");
        assert!(!wals.contains(&spare), "{wals:?}");
        // And the database goes on.
        db.insert("after", "crash").unwrap();
        drop(db);
        let db = Db::open_with(DIR, options(&image)).unwrap();
        assert_eq!(db.get("after").unwrap().as_deref(), Some(&b"crash"[..]));
        assert!(db.get(key(n - 1)).unwrap().is_some());
    }
}

/// A synced write into the WAL that was the spare survives a power loss with every write
/// before it: its fsync waited for the old WAL's seal, whose directory fsync made the
/// spare's name durable.
#[test]
fn a_synced_write_into_the_wal_made_ahead_survives_a_power_loss() {
    let fs = MemFs::new();
    let db = Db::open_with(DIR, options(&fs)).unwrap();
    let (mut n, spare) = load_until_spare(&db, &fs);
    // The next rotation starts the spare; then one synced write into it.
    n = insert_until_written(&db, &fs, &spare, n);
    db.insert_with(key(n), [b's'; 100], WriteOptions::new().sync(true))
        .unwrap();
    n += 1;
    let image = fs.crash_image(CrashImageOptions::POWER_LOSS);
    drop(db);
    assert!(common::mem_files(&image, Path::new(DIR), ".wal").contains(&spare));
    let db = Db::open_with(DIR, options(&image)).unwrap();
    for i in 0..n {
        assert!(db.get(key(i)).unwrap().is_some(), "key {i} of {n}");
    }
    assert_eq!(
        db.get(key(n - 1)).unwrap().as_deref(),
        Some(&[b's'; 100][..])
    );
}
