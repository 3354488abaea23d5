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

/// Every (key, value) of a database, in order.
type Contents = Vec<(Vec<u8>, Vec<u8>)>;

/// A MemFs holding a database whose only WAL (~1.5 MB, never flushed) replays into many
/// tables with a 128 KiB memtable, with every write it acknowledged.
fn unflushed_database() -> (MemFs, Contents) {
    let fs = MemFs::new();
    let db = Db::open_with(Path::new("/db"), opts(&fs, 64 << 20)).unwrap();
    for i in 0..12_000u32 {
        db.insert(key(i), format!("value-{i}-{}", "x".repeat(100)))
            .unwrap();
    }
    let want: Contents = db.iter().map(|r| r.unwrap()).collect();
    let image = fs.crash_image(CrashImageOptions::PROCESS_CRASH);
    drop(db);
    (image, want)
}

fn tables_in(fs: &MemFs) -> Vec<String> {
    common::mem_tables(fs, Path::new("/db"))
}

/// An open that fails after replay wrote its tables, writing its new manifest (a full disk,
/// say), removes them: they were handed over before that step and stayed, and each retry
/// added a set.
#[test]
fn an_open_that_fails_writing_its_manifest_leaves_no_tables_behind() {
    use siltdb::fs::{FaultPlan, OpKind};
    let (fs, want) = unflushed_database();
    for _ in 0..2 {
        fs.set_fault(Some(FaultPlan {
            index: 0,
            kinds: vec![OpKind::Create],
            persistent: true,
            path_contains: Some("MANIFEST".into()),
        }));
        assert!(Db::open_with("/db", opts(&fs, 128 << 10)).is_err());
        assert!(fs.faults_injected() > 0);
        assert_eq!(tables_in(&fs), Vec::<String>::new());
    }
    fs.set_fault(None);
    let db = Db::open_with("/db", opts(&fs, 128 << 10)).unwrap();
    let got: Vec<(Vec<u8>, Vec<u8>)> = db.iter().map(|r| r.unwrap()).collect();
    assert_eq!(got, want);
}

/// The tables of a replay a crash cut short (before its manifest edit) are removed by the
/// next open before its own replay writes a table: left until the end of that open, they
/// took the room it needed, and an open that failed for a full disk failed again.
#[test]
fn tables_of_a_replay_cut_short_go_before_the_next_replay_writes() {
    use crate::common::hooked_fs::HookedFs;
    use std::sync::atomic::{AtomicBool, Ordering};
    let (fs, want) = unflushed_database();
    // Every state of the file system during a recovery; the last one with the old manifest
    // alone and replay's tables written is a crash just before the new manifest.
    let manifests = |f: &MemFs| {
        f.list(Path::new("/db"))
            .unwrap()
            .iter()
            .filter(|n| n.starts_with("MANIFEST-"))
            .count()
    };
    let before = manifests(&fs);
    let last = Arc::new(std::sync::Mutex::new((None, false)));
    let keep = last.clone();
    fs.set_crash_hook(
        1,
        Some(Arc::new(move |p: siltdb::fs::CrashPoint| {
            // Until the new manifest appears (the old one goes later, at the open's end).
            let mut kept = keep.lock().unwrap();
            if manifests(&p.fs) > before {
                kept.1 = true;
            } else if !kept.1 {
                kept.0 = Some(p.fs);
            }
        })),
    );
    drop(Db::open_with("/db", opts(&fs, 128 << 10)).unwrap());
    fs.set_crash_hook(0, None);
    let crashed = last
        .lock()
        .unwrap()
        .0
        .take()
        .expect("a point before the new manifest")
        .crash_image(CrashImageOptions::POWER_LOSS);
    let leftovers = tables_in(&crashed);
    assert!(leftovers.len() >= 4, "{leftovers:?}");
    // With the WAL damaged since (a flipped bit, valid records after it), the open fails,
    // and the leftovers stay: they may be the only intact copy of its writes.
    let damaged = crashed.crash_image(CrashImageOptions::PROCESS_CRASH);
    let wal = damaged
        .list(Path::new("/db"))
        .unwrap()
        .into_iter()
        .find(|n| n.ends_with(".wal"))
        .map(|n| Path::new("/db").join(n))
        .unwrap();
    let mut bytes = damaged.read_file(&wal).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x10;
    damaged.write_file(&wal, &bytes).unwrap();
    let err = Db::open_with("/db", opts(&damaged, 128 << 10)).unwrap_err();
    assert!(err.is_corruption(), "{err:?}");
    assert_eq!(tables_in(&damaged), leftovers);
    // Reopen: when replay syncs its first table, none of the leftovers may be there.
    let early = Arc::new(AtomicBool::new(true));
    let hooked = {
        let (inner, early, leftovers) = (crashed.clone(), early.clone(), leftovers.clone());
        HookedFs {
            on_sync: Some(Arc::new(move |p: &Path| {
                if p.extension().is_some_and(|e| e == "sst")
                    && leftovers
                        .iter()
                        .any(|l| inner.exists(&Path::new("/db").join(l)))
                {
                    early.store(false, Ordering::Relaxed);
                }
            })),
            ..HookedFs::new(crashed.clone())
        }
    };
    let db = Db::open_with(
        "/db",
        opts(&crashed, 128 << 10).file_system(Arc::new(hooked) as Arc<dyn FileSystem>),
    )
    .unwrap();
    assert!(
        early.load(Ordering::Relaxed),
        "a leftover outlived the first new table"
    );
    let got: Vec<(Vec<u8>, Vec<u8>)> = db.iter().map(|r| r.unwrap()).collect();
    assert_eq!(got, want);
    let now = tables_in(&crashed);
    assert!(leftovers.iter().all(|l| !now.contains(l)), "{now:?}");
}
