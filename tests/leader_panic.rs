//! A write group's leader that panics (a bug) does not leave the other writers waiting for a
//! leader forever: its own thread panics, writes stop with an error for every writer of its
//! group and of the queue and for every later write, nothing more is acknowledged, and a
//! reopen has every write that was.
//!
//! The panic is planted (`Bug::LeaderPanics`: the leader panics right after appending its
//! group to the WAL), which exists only in a build with `RUSTFLAGS="--cfg siltdb_sabotage"`;
//! `.ci/run` runs this test in that build. Elsewhere this file compiles to nothing.
#![cfg(siltdb_sabotage)]

use siltdb::fs::{FileSystem, MemFs};
use siltdb::sabotage::{self, Bug};
use siltdb::{Db, Error, Options};
use std::path::Path;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

const THREADS: u64 = 6;

/// The planted bug is process-wide: the tests of this file take turns.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn open(mem: &MemFs) -> Db {
    let opts = Options::default()
        .auto_compaction(false)
        .file_system(Arc::new(mem.clone()) as Arc<dyn FileSystem>);
    Db::open_with(Path::new("/db"), opts).unwrap()
}

/// How one writer thread ended: its acknowledged writes, and either the error that stopped
/// it or `None` if it panicked (it was the leader when the bug fired).
struct Ended {
    thread: u64,
    acked: u64,
    error: Option<Error>,
}

#[test]
fn a_panicking_leader_stops_writes_without_hanging_anyone() {
    let _serial = serial();
    let mem = MemFs::new();
    let db = Arc::new(open(&mem));
    sabotage::clear();
    let (tx, rx) = mpsc::channel();
    let barrier = Arc::new(std::sync::Barrier::new(THREADS as usize + 1));
    for t in 0..THREADS {
        let (db, tx, barrier) = (db.clone(), tx.clone(), barrier.clone());
        std::thread::spawn(move || {
            let mut acked = 0u64;
            let mut i = 0u64;
            let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| loop {
                if i == 200 {
                    // Every writer has 200 acknowledged writes before the bug is planted.
                    barrier.wait();
                    barrier.wait();
                }
                match db.insert(format!("k{t}-{i:05}"), format!("v{t}-{i}")) {
                    Ok(()) => acked += 1,
                    Err(e) => return e,
                }
                i += 1;
            }));
            let _ = tx.send(Ended {
                thread: t,
                acked,
                error: run.ok(),
            });
        });
    }
    drop(tx);
    barrier.wait();
    sabotage::plant(Bug::LeaderPanics);
    barrier.wait();
    let mut ended: Vec<Ended> = (0..THREADS)
        .map(|_| {
            rx.recv_timeout(Duration::from_secs(60))
                .expect("a writer got no answer after the leader panicked (the queue hung)")
        })
        .collect();
    ended.sort_by_key(|e| e.thread);
    sabotage::clear();

    // Exactly one leader panicked; every other writer got the stop, naming the panic.
    let panicked = ended.iter().filter(|e| e.error.is_none()).count();
    assert_eq!(panicked, 1, "writers that panicked");
    for e in ended.iter().filter(|e| e.error.is_some()) {
        let Some(Error::Poisoned(cause)) = &e.error else {
            panic!("writer {} stopped by {:?}", e.thread, e.error);
        };
        assert!(matches!(**cause, Error::Io(_)), "cause {cause:?}");
    }
    // Nothing more is acknowledged, on any thread, and reads still work.
    assert!(matches!(db.insert("after", "x"), Err(Error::Poisoned(_))));
    assert_eq!(db.get("k0-00000").unwrap().as_deref(), Some(&b"v0-0"[..]));

    // A reopen has every acknowledged write (the panicking group's may be there too: it
    // reached the WAL, and was never acknowledged).
    let _ = db.close();
    drop(db);
    let db = open(&mem);
    for e in &ended {
        for i in 0..e.acked {
            let t = e.thread;
            assert_eq!(
                db.get(format!("k{t}-{i:05}")).unwrap().as_deref(),
                Some(format!("v{t}-{i}").as_bytes()),
                "acknowledged write {i} of writer {t}"
            );
        }
        assert!(e.acked >= 200);
    }
    db.insert("after-reopen", "y").unwrap();
}

/// The single-writer case: a write that led alone, unqueued, panics in its own thread, and
/// writes stop for it as for a group's leader.
#[test]
fn a_lone_leader_that_panics_stops_writes() {
    let _serial = serial();
    let mem = MemFs::new();
    let db = open(&mem);
    sabotage::clear();
    for i in 0..100u32 {
        db.insert(format!("k{i:03}"), "v").unwrap();
    }
    sabotage::plant(Bug::LeaderPanics);
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| db.insert("k100", "v")));
    sabotage::clear();
    assert!(run.is_err(), "the lone leader's write did not panic");
    assert!(matches!(db.insert("after", "x"), Err(Error::Poisoned(_))));
    assert_eq!(db.get("k099").unwrap().as_deref(), Some(&b"v"[..]));
    let _ = db.close();
    drop(db);
    let db = open(&mem);
    for i in 0..100u32 {
        assert_eq!(
            db.get(format!("k{i:03}")).unwrap().as_deref(),
            Some(&b"v"[..])
        );
    }
    db.insert("after-reopen", "y").unwrap();
}
