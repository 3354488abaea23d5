//! Group commit of synced writes: with fsyncs as slow as a slow disk's (4 ms each), eight
//! threads writing with `sync_writes(true)` share fsyncs, most groups holding every writer (the
//! leader waits, at most until two fsync times after the last synced group, for the writers
//! that group released to queue again); a lone synced writer pays one fsync per write; and
//! every acknowledged synced write is durable.

use crate::common;

use common::hooked_fs::HookedFs;
use siltdb::fs::{CrashImageOptions, FileSystem, MemFs};
use siltdb::{Db, Options};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

fn slow_sync_fs(mem: &MemFs) -> HookedFs {
    HookedFs {
        inner: mem.clone(),
        on_open: None,
        on_remove: None,
        on_sync_dir: None,
        on_sync: Some(Arc::new(|_: &Path| {
            std::thread::sleep(Duration::from_millis(4))
        })),
        on_lock: None,
        open_with: None,
    }
}

fn open(mem: &MemFs) -> Db {
    let opts = Options::default()
        .sync_writes(true)
        .auto_compaction(false)
        .file_system(Arc::new(slow_sync_fs(mem)) as Arc<dyn FileSystem>);
    Db::open_with(Path::new("/db"), opts).unwrap()
}

#[test]
fn eight_synced_writers_share_fsyncs_and_a_lone_writer_pays_one_each() {
    const THREADS: u64 = 8;
    const PER_THREAD: u64 = 60;
    let mem = MemFs::new();
    let db = Arc::new(open(&mem));
    let before = db.stats();
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let db = db.clone();
            s.spawn(move || {
                for i in 0..PER_THREAD {
                    db.insert(format!("t{t}-{i:03}"), format!("v{t}-{i}"))
                        .unwrap();
                }
            });
        }
    });
    let after = db.stats();
    let writes = THREADS * PER_THREAD;
    let syncs = after.wal_syncs - before.wal_syncs;
    let groups = after.write_groups - before.write_groups;
    assert!(
        syncs >= 1 && syncs <= groups,
        "{syncs} fsyncs, {groups} groups"
    );
    // Two cohorts taking turns (a group forming while the other one's fsync runs) would
    // average 4 writes per fsync; gathered groups hold all 8 most of the time.
    assert!(
        syncs * 6 <= writes,
        "{writes} synced writes took {syncs} fsyncs ({groups} groups)"
    );

    // A lone writer: one group and one fsync per write.
    let before = db.stats();
    for i in 0..20u32 {
        db.insert(format!("lone{i:02}"), "x").unwrap();
    }
    let after = db.stats();
    assert_eq!(after.write_groups - before.write_groups, 20);
    assert_eq!(after.wal_syncs - before.wal_syncs, 20);
    // Each of those fsyncs slept 4 ms, and their time is counted.
    assert!(
        after.wal_sync_micros - before.wal_sync_micros >= 20 * 4_000,
        "{} us in 20 fsyncs",
        after.wal_sync_micros - before.wal_sync_micros
    );
    // `Db::sync`'s fsync is counted the same way.
    db.sync().unwrap();
    let synced = db.stats();
    assert_eq!(synced.wal_syncs - after.wal_syncs, 1);
    assert!(synced.wal_sync_micros - after.wal_sync_micros >= 4_000);

    // Every acknowledged write survives a power loss.
    let image = mem.crash_image(CrashImageOptions::POWER_LOSS);
    drop(db);
    let db = open(&image);
    for t in 0..THREADS {
        for i in 0..PER_THREAD {
            assert_eq!(
                db.get(format!("t{t}-{i:03}")).unwrap().as_deref(),
                Some(format!("v{t}-{i}").as_bytes())
            );
        }
    }
    assert_eq!(db.get("lone19").unwrap().as_deref(), Some(&b"x"[..]));
}
