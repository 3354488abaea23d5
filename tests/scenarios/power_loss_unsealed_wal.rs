//! A power loss while a full memtable's WAL is being sealed. The seal thread fsyncs the old
//! WAL while writers already append to the new one, and the kernel may write the new WAL's
//! pages back first: a power loss can then keep writes of the new WAL and lose the end of the
//! old one. Every write of the new WAL was unsynced (no fsync of a WAL returns before the WAL
//! before it is sealed), so the history ends where the old WAL ends: the database opens (D5)
//! and holds a prefix (D2), and the new WAL's writes are dropped. A sync mark in the new WAL
//! proves its fsync returned, which never happens before the old WAL is whole: then the lost
//! end is damage, and the open fails with `Error::Corruption` (D6).

use crate::common;

use common::hooked_fs::{hold_sync_of_a, HeldDirSync};
use siltdb::fs::{CrashImageOptions, FileSystem, MemFs};
use siltdb::{Db, Error, Options};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

const DIR: &str = "/db";
const KEYS: u32 = 700;

fn options(fs: Arc<dyn FileSystem>) -> Options {
    common::small_options()
        .memtable_size(64 << 10)
        .auto_compaction(false)
        .file_system(fs)
}

fn key(i: u32) -> String {
    format!("key{i:06}")
}

/// The WALs in `fs`, oldest first.
fn wals(fs: &MemFs) -> Vec<PathBuf> {
    let mut w: Vec<PathBuf> = fs
        .list(Path::new(DIR))
        .unwrap()
        .into_iter()
        .filter(|n| n.ends_with(".wal"))
        .map(|n| Path::new(DIR).join(n))
        .collect();
    w.sort();
    w
}

/// Loads `KEYS` keys (one memtable rotation at 64 KiB) and takes an image of the moment when
/// the older WAL is still on disk, then cuts the last 1,000 bytes (its seal's mark and some
/// records) off that WAL. Without `sync_after`, the seal is held in the old WAL's fsync
/// (so no table holds its writes yet) and the image is a process crash's: the new WAL's
/// unsynced records are there, and the cut is what a power loss before that fsync can leave.
/// With `sync_after`, two `Db::sync` calls after the load (which wait for the seal) put a
/// durable sync mark in the new WAL, the flush thread is held in its table fsync and the image is a power
/// loss's: cutting the sealed WAL then makes damage. Returns the image and the number of
/// writes the shortened WAL still holds whole.
fn image_with_a_shortened_older_wal(sync_after: bool) -> (MemFs, u32) {
    let file = if sync_after { "sst" } else { "wal" };
    let HeldDirSync {
        fs,
        armed,
        entered,
        release,
    } = hold_sync_of_a(file);
    let mem = fs.inner.clone();
    let db = Db::open_with(DIR, options(Arc::new(fs))).unwrap();
    armed.store(true, Ordering::SeqCst);
    for i in 0..KEYS {
        db.insert(key(i), [b'v'; 100]).unwrap();
    }
    if sync_after {
        // The mark appended after the first fsync is made durable by the second.
        db.sync().unwrap();
        db.sync().unwrap();
    }
    entered
        .recv_timeout(Duration::from_secs(20))
        .expect("the thread reached the held fsync");
    let image = mem.crash_image(if sync_after {
        CrashImageOptions::POWER_LOSS
    } else {
        CrashImageOptions::PROCESS_CRASH
    });
    release.send(()).unwrap();
    drop(db);
    let w = wals(&image);
    assert_eq!(w.len(), 2, "{w:?}");
    let mut older = image.read_file(&w[0]).unwrap();
    older.truncate(older.len() - 1_000);
    image.write_file(&w[0], &older).unwrap();
    // What the shortened WAL still holds: open a copy holding only it.
    let alone = image.crash_image(CrashImageOptions::PROCESS_CRASH);
    alone.remove(&w[1]).unwrap();
    let db = Db::open_with(DIR, options(Arc::new(alone))).unwrap();
    let held = (0..KEYS)
        .take_while(|&i| db.get(key(i)).unwrap().is_some())
        .count() as u32;
    (image, held)
}

#[test]
fn a_wal_that_lost_its_end_before_its_seal_ends_the_history() {
    let (image, held) = image_with_a_shortened_older_wal(false);
    assert!((100..KEYS - 100).contains(&held), "{held}");
    let db = Db::open_with(DIR, options(Arc::new(image.clone()))).expect("open");
    for i in 0..KEYS {
        let got = db.get(key(i)).unwrap();
        assert_eq!(
            got.is_some(),
            i < held,
            "key {i} (the older WAL holds {held})"
        );
    }
    // Two ends counted: the shortened WAL's torn tail, and the newer WAL's dropped records.
    assert_eq!(db.stats().wal_torn_tails, 2);
    // The database goes on from there, and a second open sees the same.
    db.insert("after", "reopen").unwrap();
    drop(db);
    let db = Db::open_with(DIR, options(Arc::new(image))).unwrap();
    assert_eq!(db.get(key(held)).unwrap(), None);
    assert!(db.get(key(held - 1)).unwrap().is_some());
    assert_eq!(db.get("after").unwrap().as_deref(), Some(&b"reopen"[..]));
}

#[test]
fn a_sync_mark_after_a_wal_that_lost_its_end_is_corruption() {
    let (image, _) = image_with_a_shortened_older_wal(true);
    let newer = wals(&image)[1].clone();
    let err = Db::open_with(DIR, options(Arc::new(image))).unwrap_err();
    assert!(
        matches!(&err, Error::Corruption { file, .. } if *file == newer),
        "{err:?}"
    );
}

#[test]
fn a_torn_tail_after_the_end_of_the_history_is_not_counted_again() {
    let (image, held) = image_with_a_shortened_older_wal(false);
    let open_counts = |image: &MemFs| {
        let db = Db::open_with(
            DIR,
            options(Arc::new(
                image.crash_image(CrashImageOptions::PROCESS_CRASH),
            )),
        )
        .expect("open");
        assert_eq!(db.get(key(held)).unwrap(), None);
        assert!(db.get(key(held - 1)).unwrap().is_some());
        let s = db.stats();
        (s.wal_torn_tails, s.wal_torn_bytes)
    };
    let before = open_counts(&image);
    // The newer WAL, whose records the end of the history drops, also loses the end of its
    // last record (a torn tail of its own): it is part of what that end dropped, not a
    // third end.
    let newer = wals(&image)[1].clone();
    let mut bytes = image.read_file(&newer).unwrap();
    bytes.truncate(bytes.len() - 10);
    image.write_file(&newer, &bytes).unwrap();
    assert_eq!(open_counts(&image), before);
    assert_eq!(before.0, 2);
}
