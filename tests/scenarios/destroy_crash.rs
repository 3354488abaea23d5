//! A crash in the middle of `Db::destroy` (`docs/durability.md`, D5's exception): at every
//! file-system operation of a destroy, under a power loss, a process crash and a power loss
//! that keeps the unsynced directory entries, the directory either opens as the whole
//! database (every write it held, none lost: the destroy never happened) or is refused, and a
//! second `destroy` then finishes the job, after which an open makes an empty database. It
//! never opens as part of the database.
use siltdb::fs::{CrashImageOptions, CrashPoint, FileSystem, MemFs, UnsyncedData};
use siltdb::{Db, Options};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

const DIR: &str = "/db";

fn options(fs: &MemFs) -> Options {
    Options::default()
        .file_system(Arc::new(fs.clone()) as Arc<dyn FileSystem>)
        .memtable_size(8 << 10)
        .target_table_size(8 << 10)
        .level_base_size(32 << 10)
}

fn key(i: u32) -> Vec<u8> {
    format!("key-{i:06}").into_bytes()
}

fn value(i: u32) -> Vec<u8> {
    format!("value-{i}-{}", "v".repeat((i % 50) as usize)).into_bytes()
}

/// Every entry of the database in `fs`, if it opens (without creating one).
fn contents(fs: &MemFs) -> Result<BTreeMap<Vec<u8>, Vec<u8>>, siltdb::Error> {
    let db = Db::open_with(DIR, options(fs).create_if_missing(false))?;
    let mut all = BTreeMap::new();
    for entry in db.iter() {
        let (k, v) = entry?;
        all.insert(k.to_vec(), v.to_vec());
    }
    Ok(all)
}

#[test]
fn a_crash_during_destroy_leaves_the_whole_database_or_one_that_destroy_finishes() {
    let fs = MemFs::new();
    let mut want = BTreeMap::new();
    {
        let db = Db::open_with(DIR, options(&fs)).unwrap();
        for i in 0..3000u32 {
            db.insert(key(i), value(i)).unwrap();
            want.insert(key(i), value(i));
        }
        db.wait_for_compactions().unwrap();
        // Some writes only in the WAL too (synced by the close).
        for i in 3000..3100u32 {
            db.insert(key(i), value(i)).unwrap();
            want.insert(key(i), value(i));
        }
    }
    assert_eq!(
        contents(&fs.crash_image(CrashImageOptions::POWER_LOSS)).unwrap(),
        want
    );

    let points: Arc<Mutex<Vec<CrashPoint>>> = Arc::default();
    let seen = points.clone();
    fs.set_crash_hook(1, Some(Arc::new(move |p| seen.lock().unwrap().push(p))));
    Db::destroy_with(DIR, options(&fs)).unwrap();
    fs.set_crash_hook(0, None);
    let points = std::mem::take(&mut *points.lock().unwrap());
    assert!(points.len() >= 10, "only {} crash points", points.len());

    let models = [
        CrashImageOptions::POWER_LOSS,
        CrashImageOptions::PROCESS_CRASH,
        CrashImageOptions {
            unsynced_data: UnsyncedData::Drop,
            keep_unsynced_dir_entries: true,
        },
    ];
    let (mut whole, mut refused) = (0, 0);
    for p in &points {
        for mode in models {
            let image = p.fs.crash_image(mode);
            match contents(&image) {
                Ok(found) => {
                    assert_eq!(found, want, "op {} {mode:?}: opened as part of it", p.op);
                    whole += 1;
                }
                Err(_) => {
                    // Refused: a second destroy finishes, and the directory is then a new,
                    // empty database.
                    refused += 1;
                    Db::destroy_with(DIR, options(&image)).unwrap();
                    let db = Db::open_with(DIR, options(&image)).unwrap();
                    assert_eq!(db.iter().count(), 0, "op {} {mode:?}", p.op);
                }
            }
        }
    }
    println!(
        "{} crash points x {} models: {whole} opened whole, {refused} refused, then destroyed",
        points.len(),
        models.len()
    );
    // Both outcomes happened: the crash points cover the destroy from before its first
    // removal to after its last.
    assert!(whole > 0 && refused > 0, "whole {whole}, refused {refused}");
}
