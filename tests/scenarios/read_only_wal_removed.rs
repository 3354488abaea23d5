//! A read-only open beside a writer lists the directory and reads the manifest before it
//! replays the WALs. If the writer flushes a memtable in between and its purge thread removes
//! that memtable's WAL, the manifest this open read is older than the flush: the open starts
//! again and sees the flushed writes in their table, instead of failing on the missing WAL.

use crate::common;

use common::hooked_fs::{hold_once, HookedFs};
use siltdb::fs::MemFs;
use siltdb::{Db, Options};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

#[test]
fn a_wal_removed_before_a_read_only_open_replays_it_restarts_the_open() {
    let mem = MemFs::new();
    // Holds the read-only opener's first open of a WAL: after its listing and manifest read.
    let (hold, armed, entered, release) =
        hold_once(|| std::thread::current().name() == Some("read-only-open"));
    let fs = HookedFs {
        on_open: Some(Arc::new(move |p: &std::path::Path| {
            if p.extension().is_some_and(|e| e == "wal") {
                hold(p);
            }
        })),
        ..HookedFs::new(mem.clone())
    };
    let opts = || Options::default().file_system(Arc::new(fs.clone()));
    let db = Db::open_with("/db", opts()).unwrap();
    for i in 0..100u32 {
        db.insert(format!("before{i:03}"), "v").unwrap();
    }
    armed.store(true, Ordering::SeqCst);
    let ro_opts = opts().read_only(true);
    let opener = std::thread::Builder::new()
        .name("read-only-open".into())
        .spawn(move || Db::open_with("/db", ro_opts))
        .unwrap();
    entered
        .recv_timeout(Duration::from_secs(20))
        .expect("the read-only open reached the WAL");
    // The writer flushes the WAL the open listed; `flush` returns once it is removed.
    let wals_before: Vec<String> = wals(&mem);
    db.flush().unwrap();
    let wals_after = wals(&mem);
    assert!(
        wals_before.iter().any(|w| !wals_after.contains(w)),
        "the flush removed a WAL: {wals_before:?} -> {wals_after:?}"
    );
    db.insert("after", "v").unwrap();
    release.send(()).unwrap();
    let ro = opener
        .join()
        .unwrap()
        .expect("the read-only open starts again rather than fail on the removed WAL");
    for i in 0..100u32 {
        assert_eq!(
            ro.get(format!("before{i:03}")).unwrap().as_deref(),
            Some(&b"v"[..]),
            "before{i:03}"
        );
    }
    assert_eq!(ro.get("after").unwrap().as_deref(), Some(&b"v"[..]));
    assert_eq!(ro.stats().wal_torn_tails, 0);
}

fn wals(mem: &MemFs) -> Vec<String> {
    use siltdb::fs::FileSystem;
    mem.list(std::path::Path::new("/db"))
        .unwrap()
        .into_iter()
        .filter(|n| n.ends_with(".wal"))
        .collect()
}
