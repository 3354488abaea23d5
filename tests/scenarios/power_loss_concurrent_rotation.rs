//! Power loss while several writers fill memtables that rotate every few KiB: every image
//! must reopen, hold each writer's writes as a prefix of what that writer wrote (no holes),
//! and keep every write that asked for a sync and was acknowledged before the image, and
//! every write of any writer acknowledged before such a synced write began (an fsync covers
//! every earlier write, in whichever WAL a rotation left it).

use crate::common;

use siltdb::fs::{CrashImageOptions, FileSystem, MemFs};
use siltdb::{Db, WriteOptions};
use std::path::Path;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const WRITERS: usize = 4;
const PER_WRITER: i64 = 400;

fn key(t: usize, i: i64) -> String {
    format!("w{t}-{i:06}")
}

#[test]
fn power_loss_images_during_concurrent_rotations_are_prefixes() {
    let dir = Path::new("/db");
    let fs = MemFs::new();
    // 4 KiB memtables: a rotation every ~30 writes, under four concurrent writers.
    let db = Arc::new(Db::open_with(dir, common::mem_options(&fs)).unwrap());
    let atomics =
        || -> Arc<Vec<AtomicI64>> { Arc::new((0..WRITERS).map(|_| AtomicI64::new(-1)).collect()) };
    // The last write of each writer acknowledged so far, and the last that a returned synced
    // write covers (its own writer's, or another's acknowledged before it began).
    let (acked, synced) = (atomics(), atomics());
    // Images taken so far: each writer waits halfway for three, so that a fast machine, which
    // does all the writes in a few milliseconds, still has images from the middle of the run.
    let taken = Arc::new(AtomicUsize::new(0));
    let mut writers = Vec::new();
    for t in 0..WRITERS {
        let (db, acked, synced, taken) = (db.clone(), acked.clone(), synced.clone(), taken.clone());
        writers.push(std::thread::spawn(move || {
            for i in 0..PER_WRITER {
                if i == PER_WRITER / 2 {
                    let deadline = Instant::now() + Duration::from_secs(20);
                    while taken.load(Ordering::SeqCst) < 3 && Instant::now() < deadline {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
                // Writer 0 syncs every 10th write, writer 1 every 25th; the others never do.
                let sync = (t == 0 && i % 10 == 9) || (t == 1 && i % 25 == 24);
                let before: Vec<i64> = acked.iter().map(|a| a.load(Ordering::SeqCst)).collect();
                db.insert_with(key(t, i), format!("v{i}"), WriteOptions::new().sync(sync))
                    .unwrap();
                acked[t].store(i, Ordering::SeqCst);
                if sync {
                    for (u, b) in before.into_iter().enumerate() {
                        synced[u].fetch_max(b, Ordering::SeqCst);
                    }
                    synced[t].fetch_max(i, Ordering::SeqCst);
                }
            }
        }));
    }
    let mut images = Vec::new();
    while images.len() < 40 && !writers.iter().all(|w| w.is_finished()) {
        // What was acknowledged as synced before the image is taken must be in it.
        let floor: Vec<i64> = synced.iter().map(|s| s.load(Ordering::SeqCst)).collect();
        images.push((floor, fs.crash_image(CrashImageOptions::POWER_LOSS)));
        taken.store(images.len(), Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(2));
    }
    for w in writers {
        w.join().unwrap();
    }
    assert!(images.len() >= 3, "only {} images", images.len());
    let mut lost_something = false;
    for (n, (floor, image)) in images.iter().enumerate() {
        let opts =
            common::small_options().file_system(Arc::new(image.clone()) as Arc<dyn FileSystem>);
        let db2 = Db::open_with(dir, opts).unwrap_or_else(|e| panic!("image {n}: {e:?}"));
        for (t, &synced_floor) in floor.iter().enumerate() {
            // The writer's writes present, in order: they must be 0..p with nothing missing.
            let mut p = 0i64;
            while p < PER_WRITER && db2.get(key(t, p)).unwrap().is_some() {
                p += 1;
            }
            for i in p..PER_WRITER {
                assert!(
                    db2.get(key(t, i)).unwrap().is_none(),
                    "image {n}: writer {t} has write {i} but not write {p}"
                );
            }
            assert!(
                p > synced_floor,
                "image {n}: writer {t}'s write {synced_floor}, covered by a sync, lost (kept {p})"
            );
            if p < PER_WRITER {
                lost_something = true;
            }
        }
    }
    // The images were taken while writes went on: some unsynced writes were really at risk.
    assert!(lost_something);
}
