//! The read-amplification counters are exact on a hand-built tree.
use siltdb::{Db, Options, TableOutcome};

fn four_tables(bits: f64) -> (tempfile::TempDir, Db) {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open_with(
        dir.path(),
        Options::default()
            .bloom_bits_per_key(bits)
            .auto_compaction(false),
    )
    .unwrap();
    // Four L0 tables, each spanning the whole key range "k0000".."k3999".
    for t in 0..4u32 {
        for i in (t..4000).step_by(4) {
            db.insert(format!("k{i:04}"), "v").unwrap();
        }
        db.flush().unwrap();
    }
    (dir, db)
}

#[test]
fn absent_keys_in_range_are_probed_in_every_table() {
    let (_dir, db) = four_tables(10.0);
    assert_eq!(db.levels()[0].tables, 4);
    let before = db.stats();
    // "k0010x".."k1009x": absent, and inside every table's key range.
    for i in 10..1010u32 {
        assert_eq!(db.get(format!("k{i:04}x")).unwrap(), None);
    }
    let s = db.stats();
    let d = |f: fn(&siltdb::Stats) -> u64| f(&s) - f(&before);
    assert_eq!(d(|s| s.gets), 1000);
    assert_eq!(d(|s| s.tables_considered), 4000);
    assert_eq!(d(|s| s.filter_probes), 4000);
    assert_eq!(
        d(|s| s.filter_negatives) + d(|s| s.filter_false_positives),
        4000
    );
    assert_eq!(d(|s| s.filter_true_positives), 0);
    // Each false positive costs exactly one block read here (every key probed is inside its
    // tables' point keys); negatives cost none.
    assert_eq!(d(|s| s.data_block_reads), d(|s| s.filter_false_positives));
    assert!(
        d(|s| s.filter_false_positives) < 200,
        "FPR far above 1%: {s:?}"
    );
}

#[test]
fn present_keys_stop_at_the_table_that_holds_them() {
    let (_dir, db) = four_tables(10.0);
    let before = db.stats();
    for i in 0..400u32 {
        assert!(db.get(format!("k{i:04}")).unwrap().is_some());
    }
    let s = db.stats();
    assert_eq!(s.filter_true_positives - before.filter_true_positives, 400);
    assert_eq!(
        s.data_block_reads - before.data_block_reads,
        400 + (s.filter_false_positives - before.filter_false_positives)
    );
}

#[test]
fn without_filters_every_table_in_range_costs_a_block() {
    let (_dir, db) = four_tables(0.0);
    for i in 10..110u32 {
        db.get(format!("k{i:04}x")).unwrap();
    }
    let s = db.stats();
    assert_eq!(s.filter_probes, 0);
    assert_eq!(s.tables_considered, 400);
    assert_eq!(s.data_block_reads, 400);
    // Each block came from the block cache or from its file; only file reads count bytes.
    assert_eq!(s.block_cache_hits + s.block_cache_misses, 400);
    assert!(
        s.block_cache_misses >= 4,
        "each table's block is read from its file once"
    );
    assert!(s.bytes_read >= s.block_cache_misses * 100);
}

#[test]
fn out_of_range_tables_cost_nothing_and_traces_say_why() {
    let (_dir, db) = four_tables(10.0);
    let (v, trace) = db.get_traced("zzz").unwrap();
    assert_eq!(v, None);
    assert_eq!(trace.tables.len(), 4);
    assert!(trace
        .tables
        .iter()
        .all(|t| t.outcome == TableOutcome::OutOfRange && t.level == 0));
    assert_eq!(trace.data_block_reads, 0);
    let (v, trace) = db.get_traced("k0003").unwrap();
    assert_eq!(v.as_deref(), Some(&b"v"[..]));
    let found = trace.tables.last().unwrap();
    assert_eq!(found.outcome, TableOutcome::Found);
    assert_eq!(found.block_reads, 1);
    assert_eq!(
        trace.data_block_reads,
        trace.tables.iter().map(|t| t.block_reads).sum::<u64>()
    );
    assert_eq!(
        trace.bytes_read,
        trace.tables.iter().map(|t| t.bytes_read).sum::<u64>()
    );
    // Newest table first: the key "k0003" lives in the table flushed last.
    assert_eq!(trace.tables.len(), 1);
    db.insert("k0003", "mem").unwrap();
    let (v, trace) = db.get_traced("k0003").unwrap();
    assert_eq!(v.as_deref(), Some(&b"mem"[..]));
    assert!(trace.memtable_hit && trace.tables.is_empty());
}

/// A range tombstone can extend a table's key range past its last entry: a key there is
/// considered, and the index shows it is past the last entry, so the outcome (`NotFound`
/// without a filter) costs no block, as `TableOutcome` documents.
#[test]
fn a_key_past_the_last_entry_of_a_table_widened_by_a_range_delete_costs_no_block() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open_with(
        dir.path(),
        Options::default()
            .bloom_bits_per_key(0.0)
            .auto_compaction(false),
    )
    .unwrap();
    db.insert("a", "v").unwrap();
    db.remove_range("b".."d").unwrap();
    db.flush().unwrap();
    let (v, trace) = db.get_traced("c5").unwrap();
    assert_eq!(v, None);
    assert_eq!(trace.tables.len(), 1);
    assert_eq!(trace.tables[0].outcome, TableOutcome::RangeDeleted);
    // "d" is the tombstone's exclusive end, inside the table's range but past its last entry.
    let (v, trace) = db.get_traced("d").unwrap();
    assert_eq!(v, None);
    assert_eq!(trace.tables.len(), 1);
    assert_eq!(trace.tables[0].outcome, TableOutcome::NotFound);
    assert_eq!(trace.tables[0].block_reads, 0);
    assert_eq!(trace.data_block_reads, 0);
}
