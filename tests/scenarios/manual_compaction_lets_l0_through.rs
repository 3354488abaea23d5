//! A manual compaction goes down in steps of bounded input, and between two steps the
//! compaction thread compacts L0 once it holds `l0_compaction_trigger` tables: the flushes of
//! writes made while a long manual compaction runs do not pile up in L0 until writers stop.
//! Here the compaction thread is held in the first step's directory sync (before its
//! manifest edit) while the test flushes L0 up to its trigger; the manifest's edits then show
//! those L0 tables compacted before the manual compaction's later steps.

use crate::common;

use common::hooked_fs::{hold_once, HookedFs};
use siltdb::fs::{FileSystem, MemFs};
use siltdb::inspect::{decode_manifest_payload, read_log, VersionEdit};
use siltdb::Db;
use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

fn thread_is(name: &str) -> bool {
    std::thread::current().name() == Some(name)
}

/// Every edit of the live manifest of the database in `dir` on `mem`, in order (read from a
/// copy on the real file system).
fn manifest_edits(mem: &MemFs, dir: &Path) -> Vec<VersionEdit> {
    let current = mem.read_file(&dir.join("CURRENT")).unwrap();
    let name = String::from_utf8(current).unwrap().trim().to_string();
    let bytes = mem.read_file(&dir.join(&name)).unwrap();
    let copy = tempfile::tempdir().unwrap();
    let path = copy.path().join(&name);
    std::fs::write(&path, bytes).unwrap();
    let (records, _end) = read_log(&path).unwrap();
    records
        .iter()
        .map(|r| decode_manifest_payload(&r.payload).unwrap())
        .collect()
}

#[test]
fn l0_is_compacted_between_the_steps_of_a_manual_compaction() {
    let mem = MemFs::new();
    let dir = Path::new("/db");
    {
        // A tree of many small tables in L1 and L2 (4 KiB tables, 16 KiB for L1).
        let db = Db::open_with(dir, common::mem_options(&mem)).unwrap();
        for i in 0..4000u32 {
            db.insert(format!("k{:05}", i * 7 % 4000), [b'v'; 40])
                .unwrap();
        }
        db.flush().unwrap();
        db.wait_for_compactions().unwrap();
        let levels = db.levels();
        assert!(levels[2].tables >= 20, "{levels:?}");
        db.close().unwrap();
    }
    // Reopened with a 64 MiB L1, so that no automatic compaction below L1 is due from now on:
    // every table added to L2 is the manual compaction's.
    let (hold, armed, entered, release) = hold_once(|| thread_is("siltdb-compact"));
    let fs = HookedFs {
        on_sync_dir: Some(hold),
        ..HookedFs::new(mem.clone())
    };
    let opts = common::small_options()
        .level_base_size(64 << 20)
        .file_system(Arc::new(fs) as Arc<dyn FileSystem>);
    let db = Arc::new(Db::open_with(dir, opts).unwrap());
    db.wait_for_compactions().unwrap();
    let before: HashSet<u64> = db.tables().iter().map(|t| t.table_id).collect();
    armed.store(true, Ordering::SeqCst);
    let compactor = {
        let db = db.clone();
        std::thread::spawn(move || db.compact())
    };
    entered
        .recv_timeout(Duration::from_secs(20))
        .expect("the manual compaction's first step reached its directory sync");
    // Two flushes while the first step is held: L0 at its compaction trigger (2).
    for round in 0..2u32 {
        for i in 0..50u32 {
            db.insert(format!("k{:05}", i * 80), format!("new{round}"))
                .unwrap();
        }
        db.flush().unwrap();
    }
    let flushed: HashSet<u64> = db
        .tables()
        .iter()
        .filter(|t| t.level == 0 && !before.contains(&t.table_id))
        .map(|t| t.table_id)
        .collect();
    assert_eq!(flushed.len(), 2, "{:?}", db.tables());
    release.send(()).unwrap();
    compactor.join().unwrap().unwrap();

    let edits = manifest_edits(&mem, dir);
    let l0_gone = edits
        .iter()
        .position(|e| {
            e.deleted
                .iter()
                .any(|&(l, n)| l == 0 && flushed.contains(&n))
        })
        .expect("an edit removes the tables flushed during the manual compaction");
    // Both went together, into L1.
    assert!(
        flushed
            .iter()
            .all(|n| edits[l0_gone].deleted.contains(&(0, *n))),
        "{:?}",
        edits[l0_gone]
    );
    assert!(edits[l0_gone].added.iter().all(|(l, _)| *l == 1));
    // The manual compaction went on after it: later edits add tables below L1.
    let later_steps = edits[l0_gone + 1..]
        .iter()
        .filter(|e| e.added.iter().any(|(l, _)| *l >= 2))
        .count();
    assert!(
        later_steps >= 1,
        "L0 was compacted only after the manual compaction's last step"
    );
    // It went down in steps: L2 and L3 (~400 KiB) merged in more than one step of at most
    // 25 tables of 4 KiB (and the tables below them).
    let bottom = db.levels().iter().rposition(|l| l.tables > 0).unwrap();
    let into_bottom = edits[l0_gone + 1..]
        .iter()
        .filter(|e| !e.deleted.is_empty() && e.added.iter().any(|(l, _)| *l as usize == bottom))
        .count();
    assert!(into_bottom >= 2, "{into_bottom} step(s) into L{bottom}");
    // And the manual compaction did its work: every table below L0 it started with is gone.
    let after: HashSet<u64> = db.tables().iter().map(|t| t.table_id).collect();
    assert!(before.is_disjoint(&after), "{before:?} {after:?}");
    for i in 0..50u32 {
        assert_eq!(
            db.get(format!("k{:05}", i * 80)).unwrap().as_deref(),
            Some(&b"new1"[..])
        );
    }
    assert_eq!(db.get("k00001").unwrap().as_deref(), Some(&[b'v'; 40][..]));
}
