//! Regressions (review findings 4 and 5): a flush that keeps failing makes `flush()` return an
//! error, and writers waiting for room get an error instead of waiting forever.
use siltdb::fs::{FaultPlan, FileSystem, MemFs, OpKind};
use siltdb::{Db, Error, Options};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Runs `f` on a thread of its own and returns its result, failing the test if it takes
/// longer than `limit` (a hang would otherwise hang the test run).
fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit)
        .unwrap_or_else(|e| panic!("no answer within {limit:?}: {e}"))
}

fn failing_tables(fs: &MemFs) {
    fs.set_fault(Some(FaultPlan {
        persistent: true,
        path_contains: Some(".sst".into()),
        ..FaultPlan::nth(OpKind::Create, 0)
    }));
}

/// A database in "/db" on `fs` whose writers stall after one immutable memtable of 4 KiB,
/// with table files failing to be created from now on.
fn stalling_db(fs: &MemFs) -> Db {
    let opts = Options::default()
        .file_system(Arc::new(fs.clone()) as Arc<dyn FileSystem>)
        .memtable_size(4 << 10)
        .max_immutable_memtables(1);
    let db = Db::open_with(Path::new("/db"), opts).unwrap();
    failing_tables(fs);
    db
}

#[test]
fn flush_returns_when_every_attempt_fails() {
    let fs = MemFs::new();
    let dir = Path::new("/db");
    let db = Db::open_with(
        dir,
        Options::default().file_system(Arc::new(fs.clone()) as Arc<dyn FileSystem>),
    )
    .unwrap();
    db.insert("k", "v").unwrap();
    failing_tables(&fs);
    // The flushes run on a thread of their own, so that a hang fails the test (after 30 s)
    // instead of hanging it.
    let (first, second) = within(Duration::from_secs(30), {
        let db = db.clone();
        // A second flush while the first memtable still waits also returns.
        move || (db.flush(), db.flush())
    });
    assert!(matches!(first, Err(Error::Io(_))), "{first:?}");
    assert!(matches!(second, Err(Error::Io(_))), "{second:?}");
    assert!(db.stats().background_errors >= 1);
    assert_eq!(
        db.get("k").unwrap().map(Vec::from),
        Some(b"v".to_vec()),
        "the data stays readable"
    );
}

#[test]
fn writers_get_an_error_instead_of_waiting_forever() {
    let fs = MemFs::new();
    let db = stalling_db(&fs);
    let failed = within(Duration::from_secs(60), {
        let db = db.clone();
        move || {
            for i in 0..100_000u32 {
                if let Err(e) = db.insert(format!("k{i:06}"), [0u8; 100]) {
                    return Some(e);
                }
            }
            None
        }
    });
    assert!(matches!(failed, Some(Error::Poisoned(_))), "{failed:?}");
    drop(db);
    // Nothing acknowledged was lost: reopen without faults replays the WALs.
    fs.set_fault(None);
    let db = Db::open_with(
        "/db",
        Options::default().file_system(Arc::new(fs.clone()) as Arc<dyn FileSystem>),
    )
    .unwrap();
    assert!(db.get("k000000").unwrap().is_some());
}

#[test]
fn a_short_outage_with_stalled_writers_does_not_stop_writes() {
    // Table files cannot be created for 1.5 s while a writer is stalled for the flush: the
    // flush retries on its backoff (40, 80, 160 ... ms: at most six failures in 1.5 s),
    // not each time the stalled writer wakes it, so writes are never refused and go on
    // once the outage ends.
    let fs = MemFs::new();
    let db = stalling_db(&fs);
    let writer = {
        let db = db.clone();
        std::thread::spawn(move || -> Result<(), Error> {
            for i in 0..2_000u32 {
                db.insert(format!("k{i:06}"), [0u8; 100])?;
            }
            Ok(())
        })
    };
    std::thread::sleep(Duration::from_millis(1500));
    let failed_during = db.stats().background_errors;
    fs.set_fault(None);
    writer.join().unwrap().unwrap();
    assert!((1..8).contains(&failed_during), "{failed_during} failures");
    db.flush().unwrap();
    assert!(db.get("k001999").unwrap().is_some());
    assert!(db.get("k000000").unwrap().is_some());
}
