//! A manual compaction goes down in steps of bounded input, and between two steps the
//! compaction thread compacts L0 once it holds `l0_compaction_trigger` tables: the flushes of
//! writes made while a long manual compaction runs do not pile up in L0 until writers stop.
//! Here the compaction thread is held in the first step's directory sync (before its
//! manifest edit) while the test flushes L0 up to its trigger, or closes the database; the
//! manifest's edits then show what ran after that step.

use crate::common;

use common::hooked_fs::{hold_dir_sync_of, HeldDirSync, HookedFs};
use siltdb::fs::{FileSystem, MemFs};
use siltdb::inspect::{decode_manifest_payload, read_log, VersionEdit};
use siltdb::{Db, Error};
use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

const DIR: &str = "/db";

/// Two rounds of 20 writes of `key(i)`, each flushed: two L0 tables (each round's writes,
/// ~1.6 KiB counted, fill no 4 KiB memtable).
fn two_flushes(db: &Db, key: impl Fn(u32) -> String) {
    for round in 0..2u32 {
        for i in 0..20u32 {
            db.insert(key(i), format!("new{round}")).unwrap();
        }
        db.flush().unwrap();
    }
}

/// Every edit of the live manifest of the database on `mem`, in order (read from a copy on
/// the real file system).
fn manifest_edits(mem: &MemFs) -> Vec<VersionEdit> {
    let dir = Path::new(DIR);
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

/// A manual compaction held in its first step.
struct Held {
    db: Arc<Db>,
    /// The tables before it began.
    before: HashSet<u64>,
    compactor: JoinHandle<siltdb::Result<()>>,
    release: mpsc::Sender<()>,
}

/// Builds a tree of many 4 KiB tables (16 KiB for L1, ten times that a level deeper) from
/// 4,000 keys with `value_len`-byte values, reopens it with a 64 MiB L1 (so that no
/// automatic compaction below L1 is due from then on: every table added below L1 is the
/// manual compaction's) and starts `compact`, which is held in its first step's directory
/// sync.
fn hold_a_manual_compaction(mem: &MemFs, value_len: usize) -> Held {
    let HeldDirSync {
        fs,
        armed,
        entered,
        release,
    } = hold_dir_sync_of("siltdb-compact");
    let fs = HookedFs {
        inner: mem.clone(),
        ..fs
    };
    {
        let db = Db::open_with(DIR, common::mem_options(mem)).unwrap();
        for i in 0..4000u32 {
            db.insert(format!("k{:05}", i * 7 % 4000), vec![b'v'; value_len])
                .unwrap();
        }
        db.flush().unwrap();
        db.wait_for_compactions().unwrap();
        // L0 left empty (a table below the trigger would make the manual compaction's first
        // step the merge of L0, and what the test writes would reach L1 before the steps
        // below L0 begin).
        for i in 0..10u32 {
            if db.levels()[0].tables == 0 {
                break;
            }
            db.insert(format!("k{i:05}"), vec![b'v'; value_len])
                .unwrap();
            db.flush().unwrap();
            db.wait_for_compactions().unwrap();
        }
        let levels = db.levels();
        assert_eq!(levels[0].tables, 0);
        assert!(
            levels[1].tables > 0 && levels[2].tables >= 10 && levels[3].tables >= 10,
            "{levels:?}"
        );
        db.close().unwrap();
    }
    let opts = common::small_options()
        .level_base_size(64 << 20)
        .file_system(Arc::new(fs) as Arc<dyn FileSystem>);
    let db = Arc::new(Db::open_with(DIR, opts).unwrap());
    db.wait_for_compactions().unwrap();
    assert_eq!(db.levels()[0].tables, 0);
    let before = db.tables().iter().map(|t| t.table_id).collect();
    armed.store(true, Ordering::SeqCst);
    let compactor = {
        let db = db.clone();
        std::thread::spawn(move || db.compact())
    };
    entered
        .recv_timeout(Duration::from_secs(20))
        .expect("the manual compaction's first step reached its directory sync");
    Held {
        db,
        before,
        compactor,
        release,
    }
}

/// The merges into the deepest level in `edits`: edits that remove tables of the level above
/// it and add tables to it.
fn merges_into(edits: &[VersionEdit], bottom: u32) -> usize {
    edits
        .iter()
        .filter(|e| e.deleted.iter().any(|&(l, _)| l == bottom - 1))
        .filter(|e| e.added.iter().any(|&(l, _)| l == bottom))
        .count()
}

#[test]
fn l0_is_compacted_between_the_steps_of_a_manual_compaction() {
    let mem = MemFs::new();
    let Held {
        db,
        before,
        compactor,
        release,
    } = hold_a_manual_compaction(&mem, 40);
    // Two flushes while the first step is held: L0 at its compaction trigger (2).
    two_flushes(&db, |i| format!("k{:05}", i * 200));
    let flushed: HashSet<u64> = db
        .tables()
        .iter()
        .filter(|t| t.level == 0 && !before.contains(&t.table_id))
        .map(|t| t.table_id)
        .collect();
    assert_eq!(flushed.len(), 2, "{:?}", db.tables());
    release.send(()).unwrap();
    compactor.join().unwrap().unwrap();

    let edits = manifest_edits(&mem);
    let l0_gone = edits
        .iter()
        .position(|e| {
            e.deleted
                .iter()
                .any(|&(l, n)| l == 0 && flushed.contains(&n))
        })
        .expect("an edit removes the tables flushed during the manual compaction");
    // Both went together, into L1 (merged with the L1 tables they overlap).
    let l0_edit = &edits[l0_gone];
    assert!(
        flushed.iter().all(|n| l0_edit.deleted.contains(&(0, *n))),
        "{l0_edit:?}"
    );
    assert!(!l0_edit.added.is_empty() && l0_edit.added.iter().all(|(l, _)| *l == 1));
    // The manual compaction went on after it: later edits add tables below L1, and L2 went
    // into L3 in more than one step (L2 and L3 hold ~240 KiB; a step takes at most 25
    // tables of 4 KiB and the tables below them).
    let later = &edits[l0_gone + 1..];
    assert!(
        later.iter().any(|e| e.added.iter().any(|(l, _)| *l >= 2)),
        "L0 was compacted only after the manual compaction's last step"
    );
    assert!(
        merges_into(later, 3) >= 2,
        "{} step(s)",
        merges_into(later, 3)
    );
    // And it did its work: every table below L0 it started with is gone, and the reads see
    // the newest writes.
    let after: HashSet<u64> = db.tables().iter().map(|t| t.table_id).collect();
    assert!(before.is_disjoint(&after), "{before:?} {after:?}");
    for i in 0..20u32 {
        assert_eq!(
            db.get(format!("k{:05}", i * 200)).unwrap().as_deref(),
            Some(&b"new1"[..])
        );
    }
    assert_eq!(db.get("k00001").unwrap().as_deref(), Some(&[b'v'; 40][..]));
}

/// A close while a manual compaction runs ends it after the step under way, however small
/// its steps: the job's own check comes every 1,024 entries, and these steps (25 tables of
/// 4 KiB with 400-byte values: ~250 entries) never reach one.
#[test]
fn a_close_ends_a_manual_compaction_after_its_step() {
    let mem = MemFs::new();
    let Held {
        db,
        before,
        compactor,
        release,
    } = hold_a_manual_compaction(&mem, 400);
    let steps_before = manifest_edits(&mem).len();
    let closer = {
        let db = db.clone();
        std::thread::spawn(move || db.close())
    };
    // The close waits for the compaction thread; let it through once the close has begun.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !matches!(db.get("k00001"), Err(Error::Closed)) {
        assert!(
            std::time::Instant::now() < deadline,
            "the close never began"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    release.send(()).unwrap();
    closer.join().unwrap().unwrap();
    assert!(matches!(compactor.join().unwrap(), Err(Error::Closed)));
    // At most the held step was recorded (its edit may or may not have been installed as
    // the close began); the rest never ran.
    let edits = manifest_edits(&mem);
    assert!(
        edits.len() <= steps_before + 1,
        "{} edits after the held step",
        edits.len() - steps_before
    );
    drop(db);
    // Nothing was lost: the database opens with every key.
    let db = Db::open_with(DIR, common::mem_options(&mem)).unwrap();
    assert_eq!(db.get("k00001").unwrap().as_deref(), Some(&[b'v'; 400][..]));
    assert_eq!(db.get("k03999").unwrap().as_deref(), Some(&[b'v'; 400][..]));
    assert!(!before.is_empty());
}

/// Steps below L0 end at the largest key the level held when its steps began: a table that
/// an L0 compaction between two steps adds wholly past it (writes with ascending keys, made
/// while the manual compaction runs) is left where it is, not chased down level after level
/// for as long as such writes go on.
#[test]
fn writes_past_the_range_a_level_held_are_not_chased_down() {
    let mem = MemFs::new();
    let Held {
        db,
        compactor,
        release,
        ..
    } = hold_a_manual_compaction(&mem, 40);
    two_flushes(&db, |i| format!("m{i:05}"));
    release.send(()).unwrap();
    compactor.join().unwrap().unwrap();
    let new: Vec<_> = db
        .tables()
        .into_iter()
        .filter(|t| t.smallest.starts_with(b"m"))
        .collect();
    // Compacted out of L0 between two steps, into L1, and left there.
    assert!(!new.is_empty());
    assert!(new.iter().all(|t| t.level == 1), "{new:?}");
    assert_eq!(db.get("m00007").unwrap().as_deref(), Some(&b"new1"[..]));
}
