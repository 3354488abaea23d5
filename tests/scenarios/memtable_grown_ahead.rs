//! The flush thread prepares the memory of the memtable being written (its index arrays and
//! the 64 KiB chunks batch encodings go to) like the full one it is about to flush, and
//! `Stats::memtable_memory_bytes` counts the chunks no write has used yet. A memtable sealed
//! early by `Db::flush` is not taken as a model: flushing leaves the memtables' memory small.

use siltdb::{Db, Options};

fn value(i: u32) -> Vec<u8> {
    vec![(i % 251) as u8; 1000]
}

#[test]
fn a_full_memtable_prepares_the_next_and_an_early_flush_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options::default().memtable_size(1 << 20);
    let db = Db::open_with(dir.path(), opts).unwrap();
    // ~1.2 MiB of 1 KB values: one memtable fills (the writer seals it at 1 MiB), the next
    // holds the rest.
    for i in 0..1200u32 {
        db.insert(format!("key{i:06}"), value(i)).unwrap();
    }
    db.wait_for_compactions().unwrap();
    let s = db.stats();
    assert_eq!(s.flushes, 1, "{s:?}");
    // The full memtable took ~970 entries (1 MiB at ~1.08 KB an entry with its overhead):
    // ~0.98 MB of encodings, 15 chunks, which are made ahead for the new one. The new one
    // counts its ~230 entries (~0.25 MB) and the chunks they did not take: ~0.95-1.2 MB in
    // all, against ~0.27 MB with nothing made ahead.
    assert!(s.memtable_memory_bytes >= 800 << 10, "{s:?}");
    for i in 0..1200u32 {
        assert_eq!(db.get(format!("key{i:06}")).unwrap(), Some(value(i).into()));
    }

    // An early flush seals a memtable that is not full: nothing is made for the next one,
    // and the chunks left over in the sealed one go with it.
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();
    let s = db.stats();
    assert_eq!(s.flushes, 2, "{s:?}");
    assert!(s.memtable_memory_bytes < 1000, "{s:?}");
    for i in (0..1200u32).step_by(7) {
        assert_eq!(db.get(format!("key{i:06}")).unwrap(), Some(value(i).into()));
    }
}
