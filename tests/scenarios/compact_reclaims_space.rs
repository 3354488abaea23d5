//! Issue 14's reproduction: a manual compaction rewrites every table, even a lone one with
//! nothing below it, so a removed value leaves the disk, overwritten versions and tombstones
//! are dropped (those no snapshot sees), and outputs are cut at `target_table_size`.
use crate::common;

use siltdb::inspect::files::table_name;
use siltdb::inspect::table::{TableEntry, TableReader};
use siltdb::{Db, Options};
use std::path::Path;

/// Every entry (versions and tombstones) of every table of the current tree.
fn entries_on_disk(db: &Db) -> Vec<TableEntry> {
    db.tables()
        .iter()
        .flat_map(|t| {
            let r = TableReader::open_file(&db.path().join(table_name(t.table_id))).unwrap();
            r.entries().map(|e| e.unwrap()).collect::<Vec<_>>()
        })
        .collect()
}

/// The files of `dir` that hold `needle` (a file deleted while we look holds nothing).
fn files_holding(dir: &Path, needle: &[u8]) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| match std::fs::read(p) {
            Ok(bytes) => bytes.windows(needle.len()).any(|w| w == needle),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => panic!("{}: {e}", p.display()),
        })
        .collect()
}

/// True if some file of `dir` holds `needle`.
fn any_file_holds(dir: &Path, needle: &[u8]) -> bool {
    !files_holding(dir, needle).is_empty()
}

#[test]
fn a_removed_value_leaves_the_disk() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path()).unwrap();
    // 50 KB that compress to nothing else on disk: a counter pattern with a marker.
    let value: Vec<u8> = (0..50_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    db.insert("big", &value).unwrap();
    db.remove("big").unwrap();
    db.flush().unwrap();
    assert!(any_file_holds(dir.path(), &value[..4096]));
    db.compact().unwrap();
    let holders = files_holding(dir.path(), &value[..4096]);
    assert!(
        holders.is_empty(),
        "the removed value is still on disk: {holders:?}"
    );
    assert!(
        db.levels().iter().all(|l| l.tables == 0),
        "{:?}",
        db.levels()
    );
    let s = db.stats();
    assert_eq!((s.compactions, s.trivial_moves), (1, 0), "{s:?}");
    assert_eq!(db.get("big").unwrap(), None);
}

#[test]
fn outputs_are_cut_at_the_target_table_size() {
    let dir = tempfile::tempdir().unwrap();
    let target = 2u64 << 20;
    let opts = Options::default()
        .memtable_size(16 << 20)
        .target_table_size(target)
        .auto_compaction(false);
    let db = Db::open_with(dir.path(), opts).unwrap();
    let value = vec![7u8; 100_000];
    for i in 0..80u32 {
        db.insert(format!("key{i:03}"), &value).unwrap();
    }
    db.flush().unwrap();
    assert_eq!(db.levels()[0].tables, 1);
    db.compact().unwrap();
    let levels = db.levels();
    assert_eq!((levels[0].tables, levels[1].entries), (0, 80), "{levels:?}");
    // 8 MB at 2 MiB a table: 4 tables, each closed at the first key past the target.
    assert_eq!(levels[1].tables, 4, "{levels:?}");
    for t in db.tables() {
        assert!(
            t.bytes <= target + 110_000,
            "table {} of {} bytes",
            t.table_id,
            t.bytes
        );
    }
    assert_eq!(db.stats().trivial_moves, 0);
    assert_eq!(db.iter().count(), 80);
}

#[test]
fn one_version_per_key_and_no_tombstone_is_left() {
    let dir = tempfile::tempdir().unwrap();
    let opts = common::small_options().auto_compaction(false);
    let db = Db::open_with(dir.path(), opts).unwrap();
    for round in 0..3u32 {
        for i in 0..500u32 {
            db.insert(format!("k{i:04}"), format!("v{round}-{i}"))
                .unwrap();
        }
        db.flush().unwrap();
        db.compact().unwrap();
    }
    for i in (0..500u32).step_by(5) {
        db.remove(format!("k{i:04}")).unwrap();
    }
    db.flush().unwrap();
    db.compact().unwrap();
    let entries = entries_on_disk(&db);
    assert!(entries.iter().all(|e| !e.tombstone), "a tombstone is left");
    assert_eq!(entries.len(), 400, "one version per live key");
    assert_eq!(db.levels()[0].tables, 0);
    siltdb::inspect::check_invariants(&db).unwrap();

    db.remove("k0001").unwrap();
    db.flush().unwrap();
    db.compact().unwrap();
    assert_eq!(entries_on_disk(&db).len(), 399);
    assert_eq!(db.get("k0001").unwrap(), None);
    assert_eq!(db.get("k0002").unwrap().as_deref(), Some(&b"v2-2"[..]));
}

#[test]
fn versions_a_snapshot_sees_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open_with(dir.path(), Options::default().auto_compaction(false)).unwrap();
    db.insert("a", "old").unwrap();
    db.insert("b", "doomed").unwrap();
    db.flush().unwrap();
    let snap = db.snapshot();
    db.insert("a", "new").unwrap();
    db.remove("b").unwrap();
    db.compact().unwrap();
    // The snapshot still reads its versions: the old value and the removed one.
    assert_eq!(snap.get("a").unwrap().as_deref(), Some(&b"old"[..]));
    assert_eq!(snap.get("b").unwrap().as_deref(), Some(&b"doomed"[..]));
    assert_eq!(db.get("a").unwrap().as_deref(), Some(&b"new"[..]));
    assert_eq!(db.get("b").unwrap(), None);
    assert_eq!(entries_on_disk(&db).len(), 4);
    drop(snap);
    // Now L1 is the whole tree and nothing is above it: its tables are rewritten in place,
    // which drops the old version and the tombstone.
    assert_eq!(db.levels()[0].tables, 0);
    db.compact().unwrap();
    let entries = entries_on_disk(&db);
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(
        (&entries[0].key[..], &entries[0].value[..]),
        (&b"a"[..], &b"new"[..])
    );
}
