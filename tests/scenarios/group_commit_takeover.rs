//! The queue of writers when a synced group is taken over, split, closed or failed: a leader
//! that waits for its synced group is relieved by the writer whose arrival makes the group
//! whole, and that writer leads even when its own batch does not fit in the group (groups stop
//! at 1 MiB of batches). Every writer gets exactly one answer: none hangs when the database is
//! closed or an fsync fails while writers are queued and a leader is gathering, nor when
//! synced and unsynced writers and flushes are mixed; every write that was acknowledged
//! survives a power loss (a synced one) and the last one of each writer wins; after a failed
//! fsync nothing more is acknowledged.

use crate::common;

use common::hooked_fs::HookedFs;
use siltdb::fs::{CrashImageOptions, FaultPlan, FileSystem, MemFs, OpKind};
use siltdb::{Db, Error, Options, WriteBatch};
use std::path::Path;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

const THREADS: u64 = 8;

/// A file system whose fsyncs take `millis`: long enough that the writers a synced group
/// released are all queued again before the next group's fsync would end.
fn slow_sync(mem: &MemFs, millis: u64) -> Arc<dyn FileSystem> {
    Arc::new(HookedFs {
        on_sync: Some(Arc::new(move |_: &Path| {
            std::thread::sleep(Duration::from_millis(millis))
        })),
        ..HookedFs::new(mem.clone())
    })
}

fn open(fs: Arc<dyn FileSystem>) -> Db {
    let opts = Options::default()
        .sync_writes(true)
        .auto_compaction(false)
        .file_system(fs);
    Db::open_with(Path::new("/db"), opts).unwrap()
}

/// Collects `n` answers from writer threads; a writer that sends none within a minute is a
/// hang, and the test fails instead of waiting forever.
fn answers<T>(rx: &mpsc::Receiver<T>, n: u64) -> Vec<T> {
    (0..n)
        .map(|_| {
            rx.recv_timeout(Duration::from_secs(60))
                .expect("a writer got no answer (the write queue hung)")
        })
        .collect()
}

/// Drops `db` and opens what a power loss now would leave of `mem`.
fn reopen_after_power_loss(mem: &MemFs, db: Arc<Db>) -> Db {
    let image = mem.crash_image(CrashImageOptions::POWER_LOSS);
    drop(db);
    open(Arc::new(image))
}

/// What one writer thread saw: how many of its writes were acknowledged, and the error that
/// stopped it (if any).
struct Writer {
    thread: u64,
    acked: u64,
    stopped_by: Option<Error>,
}

/// Runs `THREADS` synced writers, each writing keys `w{t}-{i}` until a write fails or it has
/// written `limit`, and collects what each saw. A writer that neither finishes nor fails
/// within a minute is a hang: the test fails instead of waiting forever.
fn run_writers(db: &Arc<Db>, limit: u64, while_writing: impl FnOnce()) -> Vec<Writer> {
    let (tx, rx) = mpsc::channel();
    for t in 0..THREADS {
        let db = db.clone();
        let tx = tx.clone();
        std::thread::spawn(move || {
            let mut acked = 0;
            let mut stopped_by = None;
            for i in 0..limit {
                match db.insert(format!("w{t}-{i:05}"), format!("v{t}-{i}")) {
                    Ok(()) => acked += 1,
                    Err(e) => {
                        stopped_by = Some(e);
                        break;
                    }
                }
            }
            let _ = tx.send(Writer {
                thread: t,
                acked,
                stopped_by,
            });
        });
    }
    drop(tx);
    while_writing();
    let mut seen = answers(&rx, THREADS);
    seen.sort_by_key(|w| w.thread);
    seen
}

/// Every acknowledged write of `seen` reads back from `db`.
fn assert_acknowledged_present(db: &Db, seen: &[Writer]) {
    for w in seen {
        for i in 0..w.acked {
            let t = w.thread;
            assert_eq!(
                db.get(format!("w{t}-{i:05}")).unwrap().as_deref(),
                Some(format!("v{t}-{i}").as_bytes()),
                "acknowledged write {i} of writer {t} is missing"
            );
        }
    }
}

#[test]
fn batches_too_large_for_one_group_are_led_by_whoever_completes_the_group() {
    // Eight writers, each batch 320 KiB: a 1 MiB group holds three of them, so the writer
    // whose arrival completes a gathered group is usually not in it, and leads it anyway.
    const ROUNDS: u64 = 6;
    const PER_BATCH: u64 = 32;
    let mem = MemFs::new();
    let db = Arc::new(open(slow_sync(&mem, 2)));
    let before = db.stats();
    let (tx, rx) = mpsc::channel();
    for t in 0..THREADS {
        let db = db.clone();
        let tx = tx.clone();
        std::thread::spawn(move || {
            for r in 0..ROUNDS {
                let mut b = WriteBatch::new();
                for j in 0..PER_BATCH {
                    b.insert(
                        format!("big{t}-{r}-{j:02}"),
                        vec![(t * 7 + r + j) as u8; 10 << 10],
                    );
                }
                db.write(b).unwrap();
            }
            let _ = tx.send(t);
        });
    }
    drop(tx);
    answers(&rx, THREADS);
    let after = db.stats();
    let groups = after.write_groups - before.write_groups;
    let syncs = after.wal_syncs - before.wal_syncs;
    let batches = THREADS * ROUNDS;
    // At least 16 groups: none holds more than three batches.
    assert!(
        groups * 3 >= batches,
        "{batches} batches in {groups} groups"
    );
    assert!(syncs <= groups, "{syncs} fsyncs for {groups} groups");

    let db = reopen_after_power_loss(&mem, db);
    for t in 0..THREADS {
        for r in 0..ROUNDS {
            for j in 0..PER_BATCH {
                let v = db.get(format!("big{t}-{r}-{j:02}")).unwrap();
                assert_eq!(
                    v.as_deref(),
                    Some(&vec![(t * 7 + r + j) as u8; 10 << 10][..])
                );
            }
        }
    }
}

#[test]
fn closing_while_synced_groups_gather_answers_every_writer() {
    let mem = MemFs::new();
    let db = Arc::new(open(slow_sync(&mem, 3)));
    let before = db.stats().write_groups;
    let seen = run_writers(&db, u64::MAX, || {
        // Let groups form and gather, then close under them. More than THREADS groups
        // started (they run one at a time, and each is counted as it starts) means at least
        // THREADS committed, so at least THREADS writes acknowledged, however slowly the
        // writers start.
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while db.stats().write_groups - before <= THREADS && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(20));
        db.close().unwrap();
    });
    for w in &seen {
        assert!(
            matches!(w.stopped_by, Some(Error::Closed)),
            "writer {} stopped by {:?}",
            w.thread,
            w.stopped_by
        );
    }
    assert!(
        seen.iter().map(|w| w.acked).sum::<u64>() >= THREADS,
        "some groups were committed before the close"
    );
    // Every acknowledged write was synced: it survives a power loss after the close.
    let db = reopen_after_power_loss(&mem, db);
    assert_acknowledged_present(&db, &seen);
}

#[test]
fn a_failed_fsync_fails_its_group_and_every_write_after_it() {
    let mem = MemFs::new();
    let db = Arc::new(open(slow_sync(&mem, 1)));
    let before = db.stats();
    // The 30th fsync of a WAL from here on fails, while eight writers keep synced groups
    // going (one fsync, then the device works again: it must not matter).
    mem.set_fault(Some(FaultPlan {
        path_contains: Some(".wal".into()),
        ..FaultPlan::nth(OpKind::Sync, 29)
    }));
    let seen = run_writers(&db, 2_000, || {});
    assert_eq!(mem.faults_injected(), 1);
    // The failed group's writers get the fsync's error, every later writer the stop.
    for w in &seen {
        assert!(
            matches!(w.stopped_by, Some(Error::Io(_) | Error::Poisoned(_))),
            "writer {} stopped by {:?}",
            w.thread,
            w.stopped_by
        );
    }
    assert!(seen
        .iter()
        .any(|w| matches!(w.stopped_by, Some(Error::Io(_)))));
    // 29 good fsyncs acknowledged at most 29 groups of at most 8 writes each.
    let acked: u64 = seen.iter().map(|w| w.acked).sum();
    assert!(acked <= 29 * THREADS, "{acked} writes acknowledged");
    let syncs = db.stats().wal_syncs - before.wal_syncs;
    assert_eq!(syncs, 29, "fsyncs that succeeded");
    // Nothing is acknowledged after the failure, and a close reports it again.
    assert!(matches!(db.insert("after", "x"), Err(Error::Poisoned(_))));
    assert!(db.close().is_err());

    mem.set_fault(None);
    let db = reopen_after_power_loss(&mem, db);
    assert_acknowledged_present(&db, &seen);
}

#[test]
fn synced_and_unsynced_writers_and_flushes_mixed_are_all_answered_in_order() {
    // Sixteen writers, every other one synced, and a thread that flushes now and then: synced
    // leaders gather while unsynced writes and seals queue behind them, writers of either kind
    // complete gathered groups, and seals split them. Each writer overwrites its own key with
    // an increasing counter, so a reader after the run (and after a power loss, for the
    // synced writers) must see each writer's last acknowledged value.
    const WRITERS: u64 = 16;
    const PER_WRITER: u64 = 150;
    let mem = MemFs::new();
    let fs = slow_sync(&mem, 1);
    let opts = Options::default().auto_compaction(false).file_system(fs);
    let db = Arc::new(Db::open_with(Path::new("/db"), opts).unwrap());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flusher = {
        let (db, stop) = (db.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut flushes = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                db.flush().unwrap();
                flushes += 1;
                std::thread::sleep(Duration::from_millis(3));
            }
            flushes
        })
    };
    let (tx, rx) = mpsc::channel();
    for t in 0..WRITERS {
        let (db, tx) = (db.clone(), tx.clone());
        std::thread::spawn(move || {
            let sync = t % 2 == 0;
            for i in 1..=PER_WRITER {
                let opts = siltdb::WriteOptions::new().sync(sync);
                db.insert_with(format!("own{t:02}"), i.to_be_bytes(), opts)
                    .unwrap();
            }
            let _ = tx.send(t);
        });
    }
    drop(tx);
    answers(&rx, WRITERS);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(flusher.join().unwrap() >= 1);
    for t in 0..WRITERS {
        assert_eq!(
            db.get(format!("own{t:02}")).unwrap().as_deref(),
            Some(&PER_WRITER.to_be_bytes()[..]),
            "writer {t}"
        );
    }
    // After a power loss each synced writer's last value is there (its own fsync covered
    // it); an unsynced writer's value is one it wrote, or none.
    let db = reopen_after_power_loss(&mem, db);
    for t in 0..WRITERS {
        let got = db.get(format!("own{t:02}")).unwrap();
        if t % 2 == 0 {
            assert_eq!(got.as_deref(), Some(&PER_WRITER.to_be_bytes()[..]));
        } else if let Some(v) = got {
            let n = u64::from_be_bytes(v.as_ref().try_into().unwrap());
            assert!((1..=PER_WRITER).contains(&n), "writer {t} read {n}");
        }
    }
}
