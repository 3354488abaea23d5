//! What a database occupies: `disk_size` is the bytes of the files it lives in, and the
//! memory fields of `Stats` are what its filters, indexes and memtables pin.
use crate::common;

use siltdb::inspect::files::table_name;
use siltdb::inspect::table::TableReader;
use siltdb::{Db, Options};
use std::path::Path;

/// Bytes of every file in `dir`.
fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum()
}

#[test]
fn disk_size_counts_the_live_files() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let db = Db::open_with(d, common::small_options()).unwrap();
    for i in 0..3000u32 {
        db.insert(format!("k{i:05}"), [1u8; 60]).unwrap();
    }
    db.close().unwrap();
    // Each figure is taken on a handle with no background work, so that no file comes or
    // goes while the directory is listed; nothing waits for deletion, so the live files are
    // all the files.
    let quiet = || common::small_options().auto_compaction(false);
    let db = Db::open_with(d, quiet()).unwrap();
    db.insert("in-the-wal", [2u8; 100]).unwrap();
    db.sync().unwrap();
    let before = db.disk_size().unwrap();
    assert_eq!(before, dir_bytes(d));
    for i in 0..3000u32 {
        db.remove(format!("k{i:05}")).unwrap();
    }
    db.remove("in-the-wal").unwrap();
    db.compact().unwrap();
    assert!(db.tables().is_empty());
    db.close().unwrap();

    let db = Db::open_with(d, quiet()).unwrap();
    let after = db.disk_size().unwrap();
    assert_eq!(after, dir_bytes(d));
    assert!(after < before / 20, "{before} -> {after}");
    db.close().unwrap();
    // A read-only open counts the same files.
    let ro = Db::open_read_only(d).unwrap();
    assert_eq!(ro.disk_size().unwrap(), dir_bytes(d));
}

#[test]
fn memory_figures_follow_the_memtable_and_the_tables() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options::default()
        .bloom_bits_per_key(10.0)
        .auto_compaction(false);
    let db = Db::open_with(dir.path(), opts).unwrap();
    let s = db.stats();
    assert_eq!((s.filter_memory_bytes, s.index_memory_bytes), (0, 0));
    for i in 0..10_000u32 {
        db.insert(format!("key{i:08}"), [2u8; 50]).unwrap();
    }
    let s = db.stats();
    // Counted as allocated: each entry's key and value (61 bytes) in a chunk, and its index
    // slots (a 16-byte node and an 88-byte entry, in arrays that double, so up to twice
    // that), plus the filter; and what the flush thread made ahead of the writer (the first
    // memtable grows ahead of itself: as many chunks again as it filled, and the arrays for
    // twice its entries, so up to four times their slots).
    assert!(s.memtable_memory_bytes >= 10_000 * (61 + 16 + 88), "{s:?}");
    assert!(
        s.memtable_memory_bytes
            <= 2 * 10_000 * (61 + 20) + 4 * 10_000 * (16 + 88 + 8) + (256 << 10),
        "{s:?}"
    );
    assert_eq!(s.filter_memory_bytes, 0);

    db.flush().unwrap();
    let s = db.stats();
    assert!(s.memtable_memory_bytes < 1000, "{s:?}");
    let filter: u64 = s.levels.iter().map(|l| l.filter_bytes).sum();
    assert_eq!(s.filter_memory_bytes, filter);
    // 10 bits a key, give or take the filter's line rounding.
    assert!((11_000..14_000).contains(&s.filter_memory_bytes), "{s:?}");
    // One index entry per 4 KiB data block: its key and its handle.
    let tables = db.tables();
    let mut blocks = 0;
    let mut from_readers = 0;
    for t in &tables {
        let r = TableReader::open_file(&dir.path().join(table_name(t.table_id))).unwrap();
        blocks += r.index().len() as u64;
        from_readers += r.index_memory_bytes() as u64;
    }
    assert_eq!(s.index_memory_bytes, from_readers);
    assert!(s.index_memory_bytes >= blocks * 19, "{s:?}");
    assert!(s.index_memory_bytes < blocks * 200, "{s:?}");
    assert_eq!(
        s.memory_bytes(),
        s.filter_memory_bytes
            + s.index_memory_bytes
            + s.memtable_memory_bytes
            + s.block_cache_bytes
    );
}

#[test]
fn a_read_only_open_counts_the_replayed_writes_it_holds() {
    let dir = tempfile::tempdir().unwrap();
    // One memtable for the whole load: the writes stay in the WAL, unflushed.
    let db = Db::open_with(dir.path(), Options::default().memtable_size(64 << 20)).unwrap();
    for i in 0..2000u32 {
        db.insert(format!("key{i:06}"), vec![(i % 251) as u8; 1000])
            .unwrap();
    }
    let ro = Db::open_read_only(dir.path()).unwrap();
    assert_eq!(
        ro.get("key001999").unwrap(),
        Some(vec![(1999 % 251) as u8; 1000].into())
    );
    let s = ro.stats();
    // The replayed keys and values (2,000 of ~1 KB) are slices of the WAL records it read.
    assert!(s.memtable_memory_bytes >= 2000 * 1009, "{s:?}");
    assert!(s.memtable_memory_bytes < 4 << 20, "{s:?}");
    drop(db);
}
