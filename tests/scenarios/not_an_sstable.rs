//! Issue 7, test 5: files that are not SSTables get a typed error, never a panic, and opening
//! them allocates no more than the file's size (a counting allocator watches the largest
//! single allocation).
use crate::common;

use siltdb::fs::{FileSystem, MemFs};
use siltdb::inspect::table::TableReader;
use siltdb::{Db, Error, Options};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

struct Counting;
static LARGEST: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Set on the thread whose allocations are watched: the other test of this file runs a
    /// database at the same time (its flush allocates a 1 MiB table buffer), which must not
    /// count. A `const` thread-local needs no allocation to reach.
    static WATCH: Cell<bool> = const { Cell::new(false) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if WATCH.try_with(Cell::get).unwrap_or(false) {
            LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        }
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Opens `bytes` as a table; returns the error and the largest allocation made.
fn open_bytes(bytes: &[u8]) -> (Result<TableReader, Error>, usize) {
    let fs = MemFs::new();
    let dir = Path::new("/t");
    fs.create_dir_all(dir).unwrap();
    let p = dir.join("000001.sst");
    fs.write_file(&p, bytes).unwrap();
    LARGEST.store(0, Ordering::SeqCst);
    WATCH.with(|w| w.set(true));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| TableReader::open(&fs, &p)));
    WATCH.with(|w| w.set(false));
    (r.expect("no panic"), LARGEST.load(Ordering::SeqCst))
}

#[test]
fn every_kind_of_non_table_is_a_typed_error_with_bounded_allocation() {
    // A real table and a real WAL to start from.
    let fs = MemFs::new();
    let db = Db::open_with(
        "/db",
        Options::default().file_system(Arc::new(fs.clone()) as Arc<dyn FileSystem>),
    )
    .unwrap();
    for i in 0..2000u32 {
        db.insert(format!("key{i:05}"), format!("value-{i}"))
            .unwrap();
    }
    db.flush().unwrap();
    for i in 0..200u32 {
        db.insert(format!("in-wal-{i}"), "x").unwrap();
    }
    drop(db);
    let names = fs.list(Path::new("/db")).unwrap();
    let table = fs
        .read_file(&Path::new("/db").join(names.iter().find(|n| n.ends_with(".sst")).unwrap()))
        .unwrap();
    let wal = fs
        .read_file(&Path::new("/db").join(names.iter().find(|n| n.ends_with(".wal")).unwrap()))
        .unwrap();
    assert!(open_bytes(&table).0.is_ok());

    let mut rng = common::Rng(17);
    let random: Vec<u8> = (0..10_000).map(|_| rng.next() as u8).collect();
    let mut cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty file", Vec::new(), "too short to be an SSTable"),
        (
            "shorter than the footer",
            table[table.len() - 63..].to_vec(),
            "too short to be an SSTable",
        ),
        ("random bytes", random, "bad magic"),
        ("a WAL renamed to .sst", wal, "bad magic"),
    ];
    type Forge = Box<dyn Fn(&mut [u8])>;
    let forged: Vec<(&str, Forge, &str)> = vec![
        (
            "a future format version",
            Box::new(|f| f[48..52].copy_from_slice(&3u32.to_le_bytes())),
            "unsupported table format version 3",
        ),
        (
            "index handle past the end",
            Box::new(|f| f[0..8].copy_from_slice(&(1u64 << 50).to_le_bytes())),
            "past the end",
        ),
        (
            "index length of 2^63",
            Box::new(|f| f[8..16].copy_from_slice(&(1u64 << 63).to_le_bytes())),
            "past the end",
        ),
        (
            "filter length of 2^63",
            Box::new(|f| f[24..32].copy_from_slice(&(1u64 << 63).to_le_bytes())),
            "past the end",
        ),
        (
            "properties length of 2^64-1",
            Box::new(|f| f[40..48].copy_from_slice(&u64::MAX.to_le_bytes())),
            "larger than any table holds",
        ),
        (
            "properties length of 2 MiB",
            Box::new(|f| f[40..48].copy_from_slice(&(2u64 << 20).to_le_bytes())),
            "larger than any table holds",
        ),
    ];
    for (name, forge, expect) in forged {
        let mut b = table.clone();
        common::forge_footer(&mut b, forge);
        cases.push((name, b, expect));
    }
    let mut report = Vec::new();
    for (name, bytes, expect) in &cases {
        let (res, largest) = open_bytes(bytes);
        match res {
            Err(Error::Corruption { detail, file, .. }) => {
                assert!(detail.contains(expect), "{name}: {detail}");
                assert!(file.ends_with("000001.sst"), "{name}: {file:?}");
            }
            other => panic!("{name}: expected corruption, got {other:?}"),
        }
        // Nothing allocated beyond the file's own size (plus a few KiB of bookkeeping).
        assert!(
            largest <= bytes.len() + 16 * 1024,
            "{name}: allocated {largest} bytes for a {}-byte file",
            bytes.len()
        );
        report.push(format!("{name}: ok ({largest} B max alloc)"));
    }
    println!(
        "not an SSTable: {} cases, all typed errors, no panic: {}",
        cases.len(),
        report.join("; ")
    );
}

#[test]
fn a_non_table_in_a_database_fails_only_the_reads_that_need_it() {
    let fs = MemFs::new();
    let opts = || {
        Options::default()
            .file_system(Arc::new(fs.clone()) as Arc<dyn FileSystem>)
            .auto_compaction(false)
    };
    let db = Db::open_with("/db", opts()).unwrap();
    for i in 0..100u32 {
        db.insert(format!("a{i:03}"), "1").unwrap();
    }
    db.flush().unwrap();
    for i in 0..100u32 {
        db.insert(format!("b{i:03}"), "2").unwrap();
    }
    db.flush().unwrap();
    drop(db);
    // Replace the first table with random bytes.
    let tables = common::mem_tables(&fs, Path::new("/db"));
    fs.write_file(&Path::new("/db").join(&tables[0]), &[7u8; 4096])
        .unwrap();
    let db = Db::open_with("/db", opts()).unwrap();
    assert!(matches!(db.get("a005"), Err(Error::Corruption { .. })));
    assert_eq!(db.get("b005").unwrap().map(Vec::from), Some(b"2".to_vec()));
    assert_eq!(db.stats().broken_tables, 1);
    assert!(
        db.iter()
            .any(|r| matches!(r, Err(Error::Corruption { .. }))),
        "a scan over the broken table reports it"
    );
    drop(db);
    // The second table cut short by 100 bytes: the error is at the offset where it ends.
    let second = Path::new("/db").join(&tables[1]);
    let mut bytes = fs.read_file(&second).unwrap();
    bytes.truncate(bytes.len() - 100);
    fs.write_file(&second, &bytes).unwrap();
    let db = Db::open_with("/db", opts()).unwrap();
    match db.get("b005") {
        Err(Error::Corruption { file, offset, .. }) => {
            assert!(file.ends_with(&tables[1]), "{file:?}");
            assert_eq!(offset, bytes.len() as u64);
        }
        other => panic!("expected corruption, got {other:?}"),
    }
    assert_eq!(db.stats().broken_tables, 2);
}
