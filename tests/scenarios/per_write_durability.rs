//! Per-write durability (`Db::write_with` and `WriteOptions`): a write that asked for a sync
//! survives a power loss even with `sync_writes` off; one that did not may be lost, but a
//! power loss keeps a prefix of the history (no hole, no torn batch). With `sync_writes` on,
//! a write that opts out is not synced on its own, and the history still comes back as a
//! prefix.

use crate::common;

use common::history::{self, judge, op, read_state, torn_batches, Verdict};
use siltdb::fs::{CrashImageOptions, FileSystem, MemFs};
use siltdb::{Db, Durability, WriteOptions};
use std::path::Path;
use std::sync::Arc;

fn reopen(image: &MemFs, dir: &Path) -> Db {
    let opts = common::small_options().file_system(Arc::new(image.clone()) as Arc<dyn FileSystem>);
    Db::open_with(dir, opts).expect("open after power loss")
}

/// Runs `n` ops of history `seed`, syncing the ones `sync_at` picks, and checks a power-loss
/// image after every op. Returns how many images lost unsynced writes.
fn run(seed: u64, n: u64, sync_writes: bool, sync_at: impl Fn(u64) -> Option<bool>) -> u64 {
    let dir = Path::new("/db");
    let fs = MemFs::new();
    let db = Db::open_with(dir, common::mem_options(&fs).sync_writes(sync_writes)).unwrap();
    let mut last_synced: Option<u64> = None;
    let mut lossy_images = 0;
    for i in 0..n {
        let opts = match sync_at(i) {
            Some(s) => WriteOptions::new().sync(s),
            None => WriteOptions::default(),
        };
        op(seed, i).run_with(&db, opts).unwrap();
        if opts.durability == Durability::Sync
            || (opts.durability == Durability::Default && sync_writes)
        {
            last_synced = Some(i);
        }
        let image = fs.crash_image(CrashImageOptions::POWER_LOSS);
        let db2 = reopen(&image, dir);
        let state = read_state(&db2).unwrap();
        match judge(seed, i + 1, &state) {
            Verdict::Prefix(p) => {
                if let Some(s) = last_synced {
                    assert!(p > s, "op {s} was synced but the image holds only {p} ops");
                }
                if p < i + 1 {
                    lossy_images += 1;
                }
            }
            other => panic!("after op {i}: {other:?}"),
        }
        assert_eq!(torn_batches(seed, i + 1, &state), 0);
        drop(db2);
    }
    lossy_images
}

#[test]
fn a_synced_write_survives_power_loss_with_sync_writes_off() {
    // Every fifth op asks for a sync; the others follow `sync_writes(false)`.
    let lossy = run(11, 120, false, |i| (i % 5 == 4).then_some(true));
    // The unsynced writes after each synced one are really at risk: the check above is not
    // vacuous.
    assert!(lossy > 0);
}

#[test]
fn opting_out_of_sync_with_sync_writes_on_loses_only_a_suffix() {
    // Every op but each seventh opts out of the database-wide sync.
    let lossy = run(12, 120, true, |i| (i % 7 != 6).then_some(false));
    assert!(lossy > 0);
}

#[test]
fn the_history_survives_as_a_prefix_across_memtable_rotations() {
    // Tiny memtables (small_options): the ops cross many WAL rotations; syncs are rare.
    let lossy = run(13, 300, false, |i| (i % 50 == 49).then_some(true));
    assert!(lossy > 0);
    assert!(history::model(13, 300).len() > 100);
}

#[test]
fn an_empty_batch_that_asks_for_a_sync_makes_the_writes_before_it_durable() {
    let dir = Path::new("/db");
    for sync_writes in [false, true] {
        let fs = MemFs::new();
        let db = Db::open_with(dir, common::mem_options(&fs).sync_writes(sync_writes)).unwrap();
        db.write_with(
            {
                let mut b = siltdb::WriteBatch::new();
                b.insert("unsynced", "v");
                b
            },
            WriteOptions::new().sync(false),
        )
        .unwrap();
        // Not synced yet: a power loss drops it.
        let image = fs.crash_image(CrashImageOptions::POWER_LOSS);
        assert_eq!(reopen(&image, dir).get("unsynced").unwrap(), None);
        // An empty batch that asks for a sync (explicitly, or through `sync_writes`).
        let opts = if sync_writes {
            WriteOptions::default()
        } else {
            WriteOptions::new().sync(true)
        };
        db.write_with(siltdb::WriteBatch::new(), opts).unwrap();
        let image = fs.crash_image(CrashImageOptions::POWER_LOSS);
        assert_eq!(
            reopen(&image, dir).get("unsynced").unwrap().as_deref(),
            Some(&b"v"[..]),
            "sync_writes {sync_writes}"
        );
        // One that does not ask for one syncs nothing.
        db.write_with(
            {
                let mut b = siltdb::WriteBatch::new();
                b.insert("later", "v");
                b
            },
            WriteOptions::new().sync(false),
        )
        .unwrap();
        db.write_with(siltdb::WriteBatch::new(), WriteOptions::new().sync(false))
            .unwrap();
        let image = fs.crash_image(CrashImageOptions::POWER_LOSS);
        assert_eq!(reopen(&image, dir).get("later").unwrap(), None);
    }
}
