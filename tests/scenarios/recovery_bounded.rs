//! Recovery of a WAL many times larger than `memtable_size` flushes as it replays: it writes
//! several L0 tables, none larger than about a memtable, and answers as before the crash.

use crate::common;

use siltdb::fs::{CrashImageOptions, FileSystem, MemFs};
use siltdb::{Db, Options};
use std::path::Path;
use std::sync::Arc;

fn opts(fs: &MemFs, memtable: usize) -> Options {
    Options::default()
        .memtable_size(memtable)
        .target_table_size(64 << 10)
        .auto_compaction(false)
        .file_system(Arc::new(fs.clone()) as Arc<dyn FileSystem>)
}

fn key(i: u32) -> Vec<u8> {
    format!("key{:08}", i.wrapping_mul(2_654_435_761) % 1_000_000).into_bytes()
}

#[test]
fn a_large_wal_replays_into_several_bounded_tables() {
    let dir = Path::new("/db");
    let fs = MemFs::new();
    // A memtable of 64 MiB: nothing is flushed while writing ~1.5 MiB.
    let db = Db::open_with(dir, opts(&fs, 64 << 20)).unwrap();
    let n = 12_000u32;
    for i in 0..n {
        db.insert(key(i), format!("value-{i}-{}", "x".repeat(100)))
            .unwrap();
        if i % 3 == 0 {
            db.remove(key(i / 2)).unwrap();
        }
    }
    assert_eq!(db.stats().flushes, 0);
    let want: Vec<(Vec<u8>, Vec<u8>)> = db.iter().map(|r| r.unwrap()).collect();
    assert!(want.len() > 5_000);
    // Process crash: the WAL is all there is.
    let image = fs.crash_image(CrashImageOptions::PROCESS_CRASH);
    drop(db);

    // Reopen with a 128 KiB memtable: the ~1.5 MiB WAL must become many L0 tables.
    let db = Db::open_with(dir, opts(&image, 128 << 10)).unwrap();
    let l0 = db.levels()[0].tables;
    assert!(l0 >= 8, "only {l0} L0 tables");
    for t in db.tables() {
        assert!(
            t.bytes <= 200 << 10,
            "table {} has {} bytes",
            t.table_id,
            t.bytes
        );
    }
    let got: Vec<(Vec<u8>, Vec<u8>)> = db.iter().map(|r| r.unwrap()).collect();
    assert_eq!(got, want);
    // Point reads agree too, including the removed keys.
    for i in (0..n).step_by(97) {
        let k = key(i);
        let expect = want.iter().find(|(wk, _)| *wk == k).map(|(_, v)| v.clone());
        assert_eq!(db.get(&k).unwrap().map(|v| v.to_vec()), expect);
    }
    // And a second crash right after the recovery reopens to the same answers.
    let again = image.crash_image(CrashImageOptions::POWER_LOSS);
    drop(db);
    let db = Db::open_with(dir, opts(&again, 128 << 10)).unwrap();
    let got: Vec<(Vec<u8>, Vec<u8>)> = db.iter().map(|r| r.unwrap()).collect();
    assert_eq!(got, want);
}

#[test]
fn an_open_that_fails_during_replay_leaves_no_tables_behind() {
    // A WAL of ~1 MB with a damaged record at ~70% of it, valid ones after: replay writes
    // several L0 tables (64 KiB memtables) before it meets the damage, and the open fails
    // with corruption. The tables it wrote go with it, however often the open is retried.
    let dir = tempfile::tempdir().unwrap();
    let big = || Options::default().memtable_size(64 << 20);
    {
        let db = Db::open_with(dir.path(), big()).unwrap();
        for i in 0..8_000u32 {
            db.insert(key(i), format!("value-{i}-{}", "x".repeat(100)))
                .unwrap();
        }
        db.close().unwrap();
    }
    let wal = common::files_with_ext(dir.path(), "wal").pop().unwrap();
    let mut bytes = std::fs::read(&wal).unwrap();
    assert!(bytes.len() > 900_000, "{}", bytes.len());
    let at = bytes.len() * 7 / 10;
    bytes[at] ^= 0x55;
    std::fs::write(&wal, &bytes).unwrap();
    let small = || {
        Options::default()
            .memtable_size(64 << 10)
            .auto_compaction(false)
    };
    for _ in 0..2 {
        let err = match Db::open_with(dir.path(), small()) {
            Ok(_) => panic!("a damaged record with valid ones after it must fail the open"),
            Err(e) => e,
        };
        assert!(err.is_corruption(), "{err:?}");
        assert_eq!(
            common::files_with_ext(dir.path(), "sst"),
            Vec::<std::path::PathBuf>::new()
        );
    }
}
