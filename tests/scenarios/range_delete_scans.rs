//! Scans over range tombstones: covered keys are skipped without reading their blocks (the
//! sources older than the tombstone seek past its end), while newer writes inside the range,
//! in the memtable or in newer tables, still come out; reverse scans agree.
use crate::common;

use siltdb::fs::MemFs;
use siltdb::Db;
use std::path::Path;

fn k(i: u32) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}

fn v(i: u32) -> Vec<u8> {
    format!("value-{i:06}-{}", "x".repeat(100)).into_bytes()
}

const N: u32 = 20_000;

fn loaded(fs: &MemFs) -> Db {
    let db = Db::open_with(
        Path::new("/db"),
        common::mem_options(fs).block_cache_size(0),
    )
    .unwrap();
    for i in 0..N {
        db.insert(k(i), v(i)).unwrap();
    }
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();
    db
}

/// File-system operations (one per block read, the cache being off) of a full forward scan,
/// and what it returned.
fn scan_ops(fs: &MemFs, db: &Db) -> (u64, Vec<Vec<u8>>) {
    let before = fs.op_count();
    let keys: Vec<Vec<u8>> = db.iter().map(|r| r.unwrap().0).collect();
    (fs.op_count() - before, keys)
}

#[test]
fn a_forward_scan_does_not_read_the_blocks_a_tombstone_covers() {
    let fs = MemFs::new();
    let db = loaded(&fs);
    let (full, keys) = scan_ops(&fs, &db);
    assert_eq!(keys.len() as u32, N);
    // Remove 90% of the keys with one range tombstone, in the memtable.
    db.remove_range(k(1_000)..k(19_000)).unwrap();
    let (after, keys) = scan_ops(&fs, &db);
    assert_eq!(keys.len() as u32, N - 18_000);
    assert!(
        after * 4 < full,
        "scan read {after} times after the range remove, {full} before"
    );
    // The same once the tombstone is in a table above the data.
    db.flush().unwrap();
    let (flushed, keys2) = scan_ops(&fs, &db);
    assert_eq!(keys2, keys);
    assert!(flushed * 4 < full, "{flushed} vs {full}");
    // Reverse scans agree.
    let mut rev: Vec<Vec<u8>> = db.iter().rev().map(|r| r.unwrap().0).collect();
    rev.reverse();
    assert_eq!(rev, keys);
}

/// Review finding (session 22): a scan from the back walked every key a range tombstone
/// deletes (the front skipped them), reading each block they fill: a `next_back` over a
/// range removed from old tables cost as much as reading it all.
#[test]
fn a_reverse_scan_does_not_read_the_blocks_a_tombstone_covers() {
    let fs = MemFs::new();
    let db = loaded(&fs);
    let rev_ops = |db: &Db| {
        let before = fs.op_count();
        let mut keys: Vec<Vec<u8>> = db.iter().rev().map(|r| r.unwrap().0).collect();
        keys.reverse();
        (fs.op_count() - before, keys)
    };
    let (full, keys) = rev_ops(&db);
    assert_eq!(keys.len() as u32, N);
    db.remove_range(k(1_000)..k(19_000)).unwrap();
    let (forward, want) = scan_ops(&fs, &db);
    let (after, keys) = rev_ops(&db);
    assert_eq!(keys, want);
    assert!(
        after * 4 < full,
        "{after} reads after the range remove, {full} before"
    );
    assert!(
        after < 2 * forward + 10,
        "{after} from the back, {forward} forward"
    );
    // The same once the tombstone is in a table above the data.
    db.flush().unwrap();
    let (flushed, keys) = rev_ops(&db);
    assert_eq!(keys, want);
    assert!(flushed * 4 < full, "{flushed} vs {full}");
    // A short walk from the back into the removed range reads no block of it.
    let before = fs.op_count();
    let mut it = db.range(k(0)..k(19_000)).rev();
    assert_eq!(it.next().unwrap().unwrap().0, k(999));
    assert!(fs.op_count() - before < 10, "{}", fs.op_count() - before);
}

/// Review finding (session 22): one `next_back` turned the skip off for the rest of the scan,
/// so the front end then read every block the tombstone covers.
#[test]
fn a_scan_that_took_from_the_back_still_skips_at_the_front() {
    let fs = MemFs::new();
    let db = loaded(&fs);
    db.remove_range(k(1_000)..k(19_000)).unwrap();
    let (forward, keys) = scan_ops(&fs, &db);
    assert_eq!(keys.len() as u32, N - 18_000);
    for flushed in [false, true] {
        if flushed {
            db.flush().unwrap();
        }
        let before = fs.op_count();
        let mut it = db.iter();
        let last = it.next_back().unwrap().unwrap().0;
        let mut got: Vec<Vec<u8>> = it.map(|r| r.unwrap().0).collect();
        got.push(last);
        let mixed = fs.op_count() - before;
        assert_eq!(got, keys);
        assert!(
            mixed < 2 * forward + 10,
            "{mixed} reads from both ends, {forward} forward (flushed: {flushed})"
        );
    }
}

#[test]
fn newer_writes_inside_a_removed_range_survive_the_skip() {
    let fs = MemFs::new();
    let db = loaded(&fs);
    db.remove_range(k(0)..k(N)).unwrap();
    let mut want = Vec::new();
    // Rewritten after the tombstone: some flushed to a newer table, some in the memtable.
    for i in (0..N).step_by(250) {
        db.insert(k(i), "new").unwrap();
        want.push(k(i));
    }
    db.flush().unwrap();
    for i in (125..N).step_by(250) {
        db.insert(k(i), "newer").unwrap();
        want.push(k(i));
    }
    want.sort();
    let (_, keys) = scan_ops(&fs, &db);
    assert_eq!(keys, want);
    let mut rev: Vec<Vec<u8>> = db.iter().rev().map(|r| r.unwrap().0).collect();
    rev.reverse();
    assert_eq!(rev, want);
    // A scan starting inside the range, and one mixing both ends.
    let from: Vec<Vec<u8>> = db.range(k(5_000)..).map(|r| r.unwrap().0).collect();
    assert_eq!(
        from,
        want.iter()
            .filter(|x| **x >= k(5_000))
            .cloned()
            .collect::<Vec<_>>()
    );
    let mut it = db.iter();
    assert_eq!(it.next().unwrap().unwrap().0, want[0]);
    assert_eq!(it.next_back().unwrap().unwrap().0, *want.last().unwrap());
    assert_eq!(it.count(), want.len() - 2);
}

/// A range delete up to and including a key of the largest size ends at that key `++ 0x00`,
/// as long as the end of the key space: the scan skips what it covers and no more (the keys
/// after it, in the next block of an older table, come out).
#[test]
fn a_range_delete_through_a_largest_key_hides_nothing_after_it() {
    let longest = vec![b'a'; siltdb::MAX_KEY_SIZE];
    let db = Db::open_with(
        "/db",
        siltdb::Options::default()
            .file_system(std::sync::Arc::new(MemFs::new()))
            .auto_compaction(false),
    )
    .unwrap();
    db.insert(&longest, "v").unwrap();
    db.insert("b", "1").unwrap();
    db.insert("c", "2").unwrap();
    db.flush().unwrap();
    db.remove_range(..=longest.as_slice()).unwrap();
    let want = vec![b"b".to_vec(), b"c".to_vec()];
    for flushed in [false, true] {
        let keys: Vec<Vec<u8>> = db.iter().map(|r| r.unwrap().0).collect();
        assert_eq!(keys, want, "tombstone flushed: {flushed}");
        let mut back: Vec<Vec<u8>> = db.iter().rev().map(|r| r.unwrap().0).collect();
        back.reverse();
        assert_eq!(back, want, "tombstone flushed: {flushed}");
        db.flush().unwrap();
    }
}
