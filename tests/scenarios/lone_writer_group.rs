//! An unsynced write that finds no leader leads at once without queueing (the single-writer
//! fast path). Writers that arrive while it is busy (here: held in a memtable rotation's
//! creation of the next WAL) queue behind it and join its group: none is acknowledged before that
//! group is written, every write is readable, and the late ones add no group of their own.

use crate::common;

use common::hooked_fs::{hold_wal_create_of, HeldWalCreate};
use siltdb::fs::FileSystem;
use siltdb::Db;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const WRITES: u64 = 2_000;
const LATE: usize = 3;

#[test]
fn writers_that_queue_behind_a_lone_leader_join_its_group() {
    // Holds the writer thread's first creation of a WAL once armed (a rotation's, which the
    // lone writer's own round runs before it takes its group), until released.
    let HeldWalCreate {
        fs,
        armed,
        entered: entered_rx,
        release: release_tx,
    } = hold_wal_create_of("writer");
    let opts = common::small_options()
        .memtable_size(64 << 10)
        .auto_compaction(false)
        .file_system(Arc::new(fs) as Arc<dyn FileSystem>);
    let db = Arc::new(Db::open_with(Path::new("/db"), opts).unwrap());
    armed.store(true, Ordering::SeqCst);
    let w = db.clone();
    let writer = std::thread::Builder::new()
        .name("writer".into())
        .spawn(move || {
            // ~130 bytes each: several 64 KiB memtables, so a rotation happens.
            for i in 0..WRITES {
                w.insert(format!("key{i:06}"), format!("v{i}")).unwrap();
            }
        })
        .unwrap();
    entered_rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the writer reached a rotation's creation of the next WAL");
    // The writer leads alone and is inside its rotation: these writers find a leader, queue
    // and wait.
    let started = Arc::new(AtomicUsize::new(0));
    let late: Vec<_> = (0..LATE)
        .map(|t| {
            let (db, started) = (db.clone(), started.clone());
            std::thread::spawn(move || {
                started.fetch_add(1, Ordering::SeqCst);
                db.insert(format!("late{t}"), "x").unwrap();
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    while started.load(Ordering::SeqCst) < LATE && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    // Time for them to reach the queue (they need the state lock, which the rotation does
    // not hold, and nothing else): a second, far more than a thread that has started needs.
    // None can be acknowledged before the leader's round is done.
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        late.iter().all(|h| !h.is_finished()),
        "a queued write finished early"
    );
    release_tx.send(()).unwrap();
    for h in late {
        h.join().unwrap();
    }
    writer.join().unwrap();

    for i in [0, WRITES / 2, WRITES - 1] {
        assert_eq!(
            db.get(format!("key{i:06}")).unwrap().as_deref(),
            Some(format!("v{i}").as_bytes())
        );
    }
    for t in 0..LATE {
        assert_eq!(
            db.get(format!("late{t}")).unwrap().as_deref(),
            Some(&b"x"[..])
        );
    }
    // The three late writes rode in the held write's group: one group per lone write.
    let stats = db.stats();
    assert_eq!(stats.write_groups, WRITES);
}
