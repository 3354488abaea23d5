//! The WAL on the real file system is written through a memory map, allocated ahead of the
//! writer: a copy of the database taken while it runs (what a process crash leaves: the page
//! cache) has a WAL that ends in zeros, and it opens with every write and no torn tail. A
//! sealed or closed WAL is cut back to its records. `LogWrites::Syscall` turns the map off.
#![cfg(target_os = "linux")]

use siltdb::inspect::{read_log, LogEnd};
use siltdb::{Db, LogWrites, Options};
use std::path::Path;

fn wal_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "wal"))
        .collect();
    out.sort();
    out
}

/// Copies every file of `from` into `to` (the image a `kill -9` would leave: no close, no
/// sync, the page cache as it is).
fn copy_dir(from: &Path, to: &Path) {
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, to.join(p.file_name().unwrap())).unwrap();
    }
}

fn key(i: u32) -> String {
    format!("key{i:06}")
}

#[test]
fn a_running_databases_wal_ends_in_zeros_and_reopens_whole() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path()).unwrap();
    for i in 0..2000u32 {
        db.insert(key(i), format!("value {i}")).unwrap();
    }
    let wals = wal_files(dir.path());
    assert_eq!(wals.len(), 1);
    let raw = std::fs::read(&wals[0]).unwrap();
    let written = raw.iter().rposition(|&b| b != 0).unwrap() + 1;
    assert!(
        raw.len() >= (1 << 20) && written < raw.len(),
        "a WAL allocated ahead: {} bytes, the last non-zero at {written}",
        raw.len()
    );

    let image = tempfile::tempdir().unwrap();
    copy_dir(dir.path(), image.path());
    let copy = Db::open(image.path()).unwrap();
    for i in 0..2000u32 {
        assert_eq!(
            copy.get(key(i)).unwrap().map(Vec::from),
            Some(format!("value {i}").into_bytes()),
            "{}",
            key(i)
        );
    }
    let s = copy.stats();
    assert_eq!((s.wal_torn_tails, s.wal_torn_bytes), (0, 0));
    drop(copy);
    drop(db);
}

#[test]
fn sealed_and_closed_wals_are_cut_back_to_their_records() {
    let dir = tempfile::tempdir().unwrap();
    // A memtable small enough that the load seals several; no flush, so sealed WALs stay
    // until their memtables are flushed (some may be flushed and removed meanwhile).
    let opts = Options::default().memtable_size(64 << 10);
    let db = Db::open_with(dir.path(), opts.clone()).unwrap();
    for i in 0..5000u32 {
        db.insert(key(i), format!("value {i}")).unwrap();
    }
    db.close().unwrap();
    let wals = wal_files(dir.path());
    assert!(!wals.is_empty());
    for wal in wals {
        let len = std::fs::metadata(&wal).unwrap().len();
        let (records, end) = read_log(&wal).unwrap();
        assert_eq!(end, LogEnd::Clean, "{}", wal.display());
        let records_end = records.last().map_or(0, |r| r.offset + r.len);
        assert_eq!(
            records_end,
            len,
            "{} keeps bytes after its records",
            wal.display()
        );
        // A sealed or closed WAL ends with the sync mark written after its last fsync.
        if let Some(last) = records.last() {
            assert_eq!(last.payload.len(), 12);
            assert_eq!(last.payload[8..12], [0, 0, 0, 0]);
        }
    }
    let db = Db::open_with(dir.path(), opts).unwrap();
    assert_eq!(db.iter().count(), 5000);
    assert_eq!(db.stats().wal_torn_tails, 0);
}

#[test]
fn log_writes_syscall_appends_with_write_and_leaves_no_zero_tail() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options::default().log_writes(LogWrites::Syscall);
    let db = Db::open_with(dir.path(), opts.clone()).unwrap();
    for i in 0..2000u32 {
        db.insert(key(i), format!("value {i}")).unwrap();
    }
    // While the database runs, the WAL holds its records and nothing more.
    let wals = wal_files(dir.path());
    assert_eq!(wals.len(), 1);
    let (records, end) = read_log(&wals[0]).unwrap();
    assert_eq!(end, LogEnd::Clean);
    let records_end = records.last().map_or(0, |r| r.offset + r.len);
    assert_eq!(records_end, std::fs::metadata(&wals[0]).unwrap().len());
    assert_eq!(records.len(), 2000);
    let image = tempfile::tempdir().unwrap();
    copy_dir(dir.path(), image.path());
    drop(db);
    // A mapped database reopens a WAL written this way, and the other way round.
    let copy = Db::open(image.path()).unwrap();
    assert_eq!(copy.iter().count(), 2000);
    assert_eq!(copy.stats().wal_torn_tails, 0);
    drop(copy);
    let again = Db::open_with(image.path(), opts).unwrap();
    assert_eq!(again.iter().count(), 2000);
}
