//! Writes survive reopening, with and without a flush: the WAL is replayed.
use crate::common;

use siltdb::fs::MemFs;
use siltdb::{Db, Options};
use std::path::Path;

#[test]
fn reopen_without_flush_replays_the_wal() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Db::open(dir.path()).unwrap();
        for i in 0..1000u32 {
            db.insert(format!("k{i}"), format!("v{i}")).unwrap();
        }
        db.remove("k7").unwrap();
    } // dropped: nothing flushed
    let db = Db::open(dir.path()).unwrap();
    assert_eq!(
        db.get("k999").unwrap().map(Vec::from),
        Some(b"v999".to_vec())
    );
    assert_eq!(db.get("k7").unwrap(), None);
    assert_eq!(db.iter().count(), 999);
    assert_eq!(db.stats().wal_torn_tails, 0);
    // The replayed writes were moved into an L0 table at open.
    assert_eq!(db.levels()[0].tables, 1);
}

#[test]
fn reopen_after_flush_and_more_writes() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Db::open(dir.path()).unwrap();
        db.insert("a", "1").unwrap();
        db.flush().unwrap();
        db.insert("b", "2").unwrap();
        db.insert("a", "3").unwrap();
        db.close().unwrap();
    }
    for _ in 0..3 {
        let db = Db::open(dir.path()).unwrap();
        assert_eq!(db.get("a").unwrap().map(Vec::from), Some(b"3".to_vec()));
        assert_eq!(db.get("b").unwrap().map(Vec::from), Some(b"2".to_vec()));
    }
}

#[test]
fn sequence_numbers_continue_after_reopen() {
    // A write after reopen must shadow an older one even if both end up in tables.
    let fs = MemFs::new();
    let dir = Path::new("/db");
    for round in 0..5u32 {
        let db = Db::open_with(dir, common::mem_options(&fs)).unwrap();
        if round > 0 {
            assert_eq!(
                db.get("k").unwrap().map(Vec::from),
                Some(format!("v{}", round - 1).into_bytes())
            );
        }
        db.insert("k", format!("v{round}")).unwrap();
        if round % 2 == 0 {
            db.flush().unwrap();
        }
    }
}

#[test]
fn files_not_in_the_manifest_are_removed_on_open() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Db::open_with(dir.path(), Options::default()).unwrap();
        db.insert("a", "1").unwrap();
        db.flush().unwrap();
    }
    std::fs::write(dir.path().join("999999.sst"), b"orphan").unwrap();
    std::fs::write(dir.path().join("000777.dbtmp"), b"temp").unwrap();
    let db = Db::open(dir.path()).unwrap();
    assert!(!dir.path().join("999999.sst").exists());
    assert!(!dir.path().join("000777.dbtmp").exists());
    assert_eq!(db.get("a").unwrap().map(Vec::from), Some(b"1".to_vec()));
    siltdb::inspect::check_invariants(&db).unwrap();
}

#[test]
fn an_orphan_table_of_range_deletes_newer_than_the_manifest_is_corruption() {
    // A table that holds only range tombstones, newer than anything the manifest and WALs of
    // the directory it is found in record: the trace of a lost manifest edit. Deleting it as
    // an unfinished job's output would bring back the keys it deletes.
    let dir = tempfile::tempdir().unwrap();
    let before = tempfile::tempdir().unwrap();
    {
        let db = Db::open_with(dir.path(), Options::default()).unwrap();
        db.insert("a", "1").unwrap();
        db.flush().unwrap();
    }
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), before.path().join(e.file_name())).unwrap();
    }
    let old: std::collections::HashSet<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    {
        let db = Db::open_with(dir.path(), Options::default()).unwrap();
        db.remove_range("a".."b").unwrap();
        db.flush().unwrap();
        assert_eq!(db.get("a").unwrap(), None);
    }
    let new_tables: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| !old.contains(n) && n.to_string_lossy().ends_with(".sst"))
        .collect();
    assert_eq!(new_tables.len(), 1, "{new_tables:?}");
    std::fs::copy(
        dir.path().join(&new_tables[0]),
        before.path().join(&new_tables[0]),
    )
    .unwrap();
    let err = match Db::open(before.path()) {
        Ok(_) => panic!("the open deleted the orphan table and went on"),
        Err(e) => e,
    };
    assert!(err.is_corruption(), "{err:?}");
    assert!(before.path().join(&new_tables[0]).exists());
}

#[test]
fn unlisted_tables_are_kept_while_the_manifest_lists_missing_ones() {
    // A table the manifest lists is gone (damage, or a manifest cut before the edit that
    // replaced it): a table the manifest does not list may then hold the only copy of its
    // data, so the open keeps it (and reads of the missing table fail as corruption).
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Db::open_with(dir.path(), Options::default().auto_compaction(false)).unwrap();
        db.insert("a", "1").unwrap();
        db.flush().unwrap();
        db.insert("b", "2").unwrap();
        db.flush().unwrap();
    }
    let mut tables = common::files_with_ext(dir.path(), "sst");
    tables.sort();
    assert_eq!(tables.len(), 2, "{tables:?}");
    let unlisted = dir.path().join("999999.sst");
    std::fs::copy(&tables[1], &unlisted).unwrap();
    std::fs::remove_file(&tables[0]).unwrap();
    {
        let db = Db::open_with(dir.path(), Options::default().auto_compaction(false)).unwrap();
        assert!(db.get("a").unwrap_err().is_corruption());
        assert_eq!(db.get("b").unwrap().map(Vec::from), Some(b"2".to_vec()));
    }
    assert!(unlisted.exists());
}
