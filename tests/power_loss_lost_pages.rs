//! A power loss that keeps a later page of the WAL and loses an earlier one. Background
//! writeback writes a file's dirty pages in no promised order (Linux resumes a file where its
//! last pass stopped and wraps around), so the unsynced end of a WAL can come back with a
//! page of zeros followed by good records. That is not corruption: nothing after the lost page
//! was synced, and D2 allows a power loss to take the unsynced writes, as a suffix. The
//! database must open (D5) and hold a prefix of the history at or after the last sync. A lost
//! page in front of a synced write, or of a `sync`, cannot come from a power loss (the fsync
//! wrote it) and stays corruption (D6).
//!
//! The history run checks every k-th file-system operation of the `crash_power_loss.rs`
//! workload under the `UnsyncedData::LostPages` model, two page choices each, with and without
//! the unsynced directory entries. Sizes: `SILT_CRASH_OPS` (default 1500), `SILT_CRASH_EVERY`
//! (default 6).
mod common;

use siltdb::fs::{CrashImageOptions, FileSystem, MemFs, UnsyncedData};
use siltdb::{Db, Error, Options, WriteOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The `crash_power_loss.rs` workload, history `seed`, every crash point checked under two
/// `LostPages` images; every 40th also crashed again at each file-system operation of the
/// recovery from a `LostPages` image (a crash while replaying a WAL with a page lost in it).
fn lost_pages_run(seed: u64, name: &str) {
    let r = common::crash::run_models_synced_by(
        seed,
        common::env_u64("SILT_CRASH_OPS", 1500),
        common::env_u64("SILT_CRASH_EVERY", 6),
        common::env_u64("SILT_RECOVERY_EVERY", 40),
        common::crash::Shard::ALL,
        common::crash::SyncBy::DbSync,
        |n| {
            (0..2)
                .map(|k| CrashImageOptions {
                    unsynced_data: UnsyncedData::LostPages { seed: n * 2 + k },
                    keep_unsynced_dir_entries: k == 1,
                })
                .collect()
        },
        |n| CrashImageOptions {
            unsynced_data: UnsyncedData::LostPages { seed: n * 2 + 1 },
            keep_unsynced_dir_entries: false,
        },
    );
    println!("{}", r.card(name));
    assert!(
        r.crash_points >= 300,
        "too few crash points: {}",
        r.crash_points
    );
    assert_eq!(r.problems(), 0, "{}", r.first_problem.unwrap_or_default());
}

#[test]
fn power_loss_with_pages_lost_out_of_order() {
    lost_pages_run(21, "power loss, pages lost out of order");
}

#[test]
fn power_loss_with_pages_lost_out_of_order_from_long_wals() {
    // 64 KiB memtables: each WAL spans ~16 pages, so most images lose a page in the middle of
    // the unsynced end of one.
    lost_pages_run(
        common::crash::LARGE_MEMTABLE_SEEDS + 1,
        "power loss, pages lost out of order, 64 KiB memtables",
    );
}

const DIR: &str = "/db";

/// One WAL for the whole test (no rotation), 100-byte values: ~40 records a 4 KiB page.
fn options(fs: &MemFs) -> Options {
    Options::default()
        .memtable_size(8 << 20)
        .file_system(Arc::new(fs.clone()) as Arc<dyn FileSystem>)
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}

fn value(i: u32) -> Vec<u8> {
    let mut v = format!("value of {i:06} ").into_bytes();
    v.resize(100, b'a' + (i % 26) as u8);
    v
}

/// The only WAL of the database in `fs`.
fn the_wal(fs: &MemFs) -> PathBuf {
    let wals: Vec<PathBuf> = fs
        .list(Path::new(DIR))
        .unwrap()
        .into_iter()
        .filter(|name| name.ends_with(".wal"))
        .map(|name| Path::new(DIR).join(name))
        .collect();
    assert_eq!(wals.len(), 1, "{wals:?}");
    wals[0].clone()
}

/// A power-loss image of `fs` in which every byte reached the disk except 4 KiB page `page` of
/// the WAL, which reads as zeros.
fn image_losing_page(fs: &MemFs, page: usize) -> MemFs {
    let image = fs.crash_image(CrashImageOptions::PROCESS_CRASH);
    let wal = the_wal(&image);
    let mut bytes = image.read_file(&wal).unwrap();
    assert!(bytes.len() > (page + 2) * 4096, "the WAL is too short");
    bytes[page * 4096..(page + 1) * 4096].fill(0);
    image.write_file(&wal, &bytes).unwrap();
    image
}

/// Inserts keys `keys` with their values, unsynced.
fn load(db: &Db, keys: std::ops::Range<u32>) {
    for i in keys {
        db.insert(key(i), value(i)).unwrap();
    }
}

/// Opening the database in `image` fails with `Error::Corruption`.
fn assert_corrupt(image: &MemFs) {
    let err = Db::open_with(DIR, options(image)).unwrap_err();
    assert!(matches!(err, Error::Corruption { .. }), "{err:?}");
}

/// How many of keys `0..n` the database holds, checking that they are a prefix with their
/// values.
fn prefix_held(db: &Db, n: u32) -> u32 {
    let held = (0..n)
        .take_while(|&i| db.get(key(i)).unwrap().is_some())
        .count() as u32;
    for i in 0..n {
        let got = db.get(key(i)).unwrap();
        if i < held {
            assert_eq!(got.as_deref(), Some(&value(i)[..]), "key {i}");
        } else {
            assert_eq!(got, None, "key {i} after a hole at {held}");
        }
    }
    held
}

#[test]
fn a_lost_page_in_the_unsynced_tail_cuts_the_log_there() {
    let fs = MemFs::new();
    let db = Db::open_with(DIR, options(&fs)).unwrap();
    load(&db, 0..400);
    let image = image_losing_page(&fs, 3);
    drop(db);
    let db = Db::open_with(DIR, options(&image)).expect("open after the power loss");
    let held = prefix_held(&db, 400);
    // Records are ~130 bytes: the writes wholly in pages 0..3 survive, nothing after.
    assert!(
        (3 * 4096 / 140..=3 * 4096 / 120).contains(&(held as usize)),
        "{held}"
    );
    assert_eq!(db.stats().wal_torn_tails, 1);
    assert!(db.stats().wal_torn_bytes > 4096);
    // The database goes on from there, and a second open sees the same.
    db.insert(b"after", b"reopen").unwrap();
    drop(db);
    let db = Db::open_with(DIR, options(&image)).unwrap();
    assert_eq!(prefix_held(&db, 400), held);
    assert_eq!(db.get(b"after").unwrap().as_deref(), Some(&b"reopen"[..]));
}

#[test]
fn a_lost_page_before_a_synced_write_is_corruption() {
    let fs = MemFs::new();
    let db = Db::open_with(DIR, options(&fs)).unwrap();
    for i in 0..400 {
        let sync = i == 300;
        db.insert_with(key(i), value(i), WriteOptions::new().sync(sync))
            .unwrap();
    }
    // Page 3 was written by the fsync of write 300: a power loss cannot have lost it.
    let before = image_losing_page(&fs, 3);
    // A page lost after the synced write is a power loss again.
    let after = image_losing_page(&fs, 11);
    drop(db);
    assert_corrupt(&before);
    let db = Db::open_with(DIR, options(&after)).expect("open");
    let held = prefix_held(&db, 400);
    assert!((301..400).contains(&held), "{held}");
}

#[test]
fn a_lost_page_before_a_sync_call_is_corruption() {
    let fs = MemFs::new();
    let db = Db::open_with(DIR, options(&fs)).unwrap();
    load(&db, 0..200);
    db.sync().unwrap();
    load(&db, 200..400);
    assert_corrupt(&image_losing_page(&fs, 2));
    let db2 = Db::open_with(DIR, options(&image_losing_page(&fs, 8))).expect("open");
    let held = prefix_held(&db2, 400);
    assert!((200..400).contains(&held), "{held}");
    drop(db2);
    // A closed database's WAL is synced whole: any lost page is corruption.
    drop(db);
    assert_corrupt(&image_losing_page(&fs, 8));
}

#[test]
fn a_flipped_bit_in_the_unsynced_tail_is_still_corruption() {
    let fs = MemFs::new();
    let db = Db::open_with(DIR, options(&fs)).unwrap();
    load(&db, 0..400);
    let image = fs.crash_image(CrashImageOptions::PROCESS_CRASH);
    drop(db);
    let wal = the_wal(&image);
    let clean = image.read_file(&wal).unwrap();
    // One bit of a value in page 3, which a power loss does not do.
    for at in [3 * 4096 + 100, 3 * 4096 + 1000, 3 * 4096 + 4000] {
        let mut bytes = clean.clone();
        bytes[at] ^= 0x10;
        image.write_file(&wal, &bytes).unwrap();
        let err = Db::open_with(DIR, options(&image)).unwrap_err();
        assert!(matches!(err, Error::Corruption { .. }), "{at}: {err:?}");
    }
}

/// The WAL of a crash image of `fs` with the header checksum word of the record holding key
/// `i` zeroed: what writeback leaves when it writes the record's page between the writer's
/// store of the header's first 12 bytes and its store of that word (the writer stores the
/// payload first), and the power fails before the page's newer version reaches the disk.
fn image_with_half_stored_header(fs: &MemFs, i: u32) -> MemFs {
    let image = fs.crash_image(CrashImageOptions::PROCESS_CRASH);
    let wal = the_wal(&image);
    let mut bytes = image.read_file(&wal).unwrap();
    let k = key(i);
    let at = bytes
        .windows(k.len())
        .position(|w| w == &k[..])
        .expect("the key is in the WAL");
    // payload := first_seq u64 | count u32 | kind u8 | key_len varint (1 byte) | key ...,
    // after a 16-byte header whose last 4 bytes are the header checksum.
    let header = at - 14 - 16;
    assert_ne!(bytes[header + 12..header + 16], [0, 0, 0, 0]);
    bytes[header + 12..header + 16].fill(0);
    image.write_file(&wal, &bytes).unwrap();
    image
}

/// The exception D5 had until session 27: a record header caught half-stored by writeback,
/// with later records on disk, read as corruption and the database did not open.
#[test]
fn a_header_half_stored_by_writeback_cuts_the_log_there() {
    let fs = MemFs::new();
    let db = Db::open_with(DIR, options(&fs)).unwrap();
    load(&db, 0..400);
    let image = image_with_half_stored_header(&fs, 200);
    drop(db);
    let db = Db::open_with(DIR, options(&image)).expect("open after the power loss");
    assert_eq!(prefix_held(&db, 400), 200);
    assert_eq!(db.stats().wal_torn_tails, 1);
    // The database goes on from there.
    db.insert(b"after", b"reopen").unwrap();
    drop(db);
    let db = Db::open_with(DIR, options(&image)).unwrap();
    assert_eq!(prefix_held(&db, 400), 200);
    assert_eq!(db.get(b"after").unwrap().as_deref(), Some(&b"reopen"[..]));
}

/// A write synced after the record means an fsync wrote its header whole: a half-stored one
/// is damage, as before.
#[test]
fn a_header_half_stored_before_a_synced_write_is_corruption() {
    let fs = MemFs::new();
    let db = Db::open_with(DIR, options(&fs)).unwrap();
    for i in 0..400 {
        db.insert_with(key(i), value(i), WriteOptions::new().sync(i == 300))
            .unwrap();
    }
    let before = image_with_half_stored_header(&fs, 200);
    let after = image_with_half_stored_header(&fs, 350);
    drop(db);
    assert_corrupt(&before);
    let db = Db::open_with(DIR, options(&after)).expect("open");
    assert_eq!(prefix_held(&db, 400), 350);
}
