//! Model test: random operation histories against a `BTreeMap`, on tiny sizes so that
//! flushes and compactions happen constantly, with reopens and process-crash reopens.
//! Range removes (bounded, inclusive, open-ended, alone and inside batches) overlap each other
//! at different sequence numbers and span memtables, tables and levels; snapshots held across
//! later range removes, flushes and compactions must keep seeing what they saw. Keys come in
//! threes that differ by trailing zero bytes (`k`, `k\0`, `k\0\0`), where a table's cut at
//! a key's successor and an inclusive range end meet; scans take every kind of bound, prefix
//! scans ask for each three, and compactions of part of the key space run beside full ones.
mod common;

use proptest::prelude::*;
use siltdb::fs::{CrashImageOptions, MemFs};
use siltdb::{Db, Snapshot, WriteBatch};
use std::collections::BTreeMap;
use std::ops::{Bound, RangeBounds};
use std::path::Path;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// A range of keys for a range remove: `a..b`, `a..=b`, `a..` or `..b`.
#[derive(Debug, Clone, Copy)]
enum Span {
    HalfOpen(u8, u8),
    Closed(u8, u8),
    From(u8),
    To(u8),
}

impl Span {
    fn bounds(self) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
        match self {
            Span::HalfOpen(a, b) => (Bound::Included(key(a)), Bound::Excluded(key(b))),
            Span::Closed(a, b) => (Bound::Included(key(a)), Bound::Included(key(b))),
            Span::From(a) => (Bound::Included(key(a)), Bound::Unbounded),
            Span::To(b) => (Bound::Unbounded, Bound::Excluded(key(b))),
        }
    }

    /// True if the range holds no key (the engine refuses it with `InvalidArgument`).
    fn is_empty(self) -> bool {
        match self {
            Span::HalfOpen(a, b) => key(a) >= key(b),
            Span::Closed(a, b) => key(a) > key(b),
            Span::From(_) => false,
            Span::To(b) => key(b).is_empty(),
        }
    }

    fn apply(self, model: &mut BTreeMap<Vec<u8>, Vec<u8>>) {
        let r = self.bounds();
        model.retain(|k, _| !r.contains(k));
    }
}

/// One operation of a batch.
#[derive(Debug, Clone)]
enum BatchOp {
    Put(u8, Vec<u8>),
    Del(u8),
    DelRange(Span),
}

#[derive(Debug, Clone)]
enum Op {
    Insert(u8, Vec<u8>),
    Remove(u8),
    RemoveRange(Span),
    Batch(Vec<BatchOp>),
    Get(u8),
    Range(u8, u8, bool),
    Scan(Span, bool),
    Prefix(u8),
    Flush,
    Compact,
    CompactRange(Span),
    Reopen,
    CrashReopen,
    SnapshotCheck,
    HoldSnapshot,
    CheckSnapshots,
}

fn key(k: u8) -> Vec<u8> {
    // Key 0 is the empty key; then `key000\0`, `key000\0\0`, `key001`, `key001\0`, ...: the
    // order of the numbers is the order of the keys.
    if k == 0 {
        Vec::new()
    } else {
        let mut key = format!("key{:03}", k / 3).into_bytes();
        key.resize(key.len() + usize::from(k % 3), 0);
        key
    }
}

/// The prefix every key of `k`'s three starts with (`key001` for `key001\0`).
fn prefix(k: u8) -> Vec<u8> {
    format!("key{:03}", k / 3).into_bytes()
}

/// A scan's bounds: `a..b` and the rest of [`Span`]'s, and the ones a span does not make
/// (an excluded start, an included end).
fn scan_bounds(span: Span, flip: bool) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let (lo, hi) = span.bounds();
    if !flip {
        return (lo, hi);
    }
    let flip_bound = |b: Bound<Vec<u8>>| match b {
        Bound::Included(k) => Bound::Excluded(k),
        Bound::Excluded(k) => Bound::Included(k),
        Bound::Unbounded => Bound::Unbounded,
    };
    (flip_bound(lo), flip_bound(hi))
}

fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        8 => proptest::collection::vec(any::<u8>(), 0..24),
        1 => proptest::collection::vec(any::<u8>(), 300..900),
    ]
}

fn span() -> impl Strategy<Value = Span> {
    let k = 0u8..60;
    prop_oneof![
        6 => (k.clone(), k.clone()).prop_map(|(a, b)| Span::HalfOpen(a.min(b), a.max(b).max(1))),
        3 => (k.clone(), 0u8..8).prop_map(|(a, w)| Span::Closed(a, a.saturating_add(w).min(59))),
        1 => k.clone().prop_map(Span::From),
        1 => (1u8..60).prop_map(Span::To),
    ]
}

fn batch_op() -> impl Strategy<Value = BatchOp> {
    let k = 0u8..60;
    prop_oneof![
        8 => (k.clone(), value()).prop_map(|(k, v)| BatchOp::Put(k, v)),
        3 => k.prop_map(BatchOp::Del),
        1 => span().prop_map(BatchOp::DelRange),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let k = 0u8..60;
    prop_oneof![
        30 => (k.clone(), value()).prop_map(|(k, v)| Op::Insert(k, v)),
        10 => k.clone().prop_map(Op::Remove),
        4 => span().prop_map(Op::RemoveRange),
        6 => proptest::collection::vec(batch_op(), 1..12).prop_map(Op::Batch),
        15 => k.clone().prop_map(Op::Get),
        6 => (k.clone(), k.clone(), any::<bool>()).prop_map(|(a, b, r)| Op::Range(a, b, r)),
        4 => (span(), any::<bool>()).prop_map(|(s, r)| Op::Scan(s, r)),
        2 => k.prop_map(Op::Prefix),
        2 => Just(Op::Flush),
        1 => Just(Op::Compact),
        1 => span().prop_map(Op::CompactRange),
        1 => Just(Op::Reopen),
        1 => Just(Op::CrashReopen),
        2 => Just(Op::SnapshotCheck),
        2 => Just(Op::HoldSnapshot),
        2 => Just(Op::CheckSnapshots),
    ]
}

/// Every key and value of `snap` equals `want`, by scans both ways and by gets.
fn check_snapshot(snap: &Snapshot, want: &BTreeMap<Vec<u8>, Vec<u8>>) {
    let want_v: Vec<_> = want.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(common::scan_all(snap.iter()), want_v, "held snapshot scan");
    let mut rev = common::scan_all(snap.iter().rev());
    rev.reverse();
    assert_eq!(rev, want_v, "held snapshot reverse scan");
    for k in 0..60u8 {
        assert_eq!(
            snap.get(key(k)).unwrap().map(Vec::from),
            want.get(&key(k)).cloned(),
            "held snapshot get {k}"
        );
    }
}

fn check_range(db: &Db, model: &BTreeMap<Vec<u8>, Vec<u8>>, a: &[u8], b: &[u8], rev: bool) {
    let want: Vec<(Vec<u8>, Vec<u8>)> = if a <= b {
        model
            .range::<[u8], _>((Bound::Included(a), Bound::Excluded(b)))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    } else {
        Vec::new()
    };
    let mut got = if rev {
        common::scan_all(db.range(a..b).rev())
    } else {
        common::scan_all(db.range(a..b))
    };
    if rev {
        got.reverse();
    }
    assert_eq!(got, want, "range {a:?}..{b:?} rev={rev}");
    // Both ends of one iterator in turn (the back first when `rev`): the front's items then
    // the back's, reversed, are the range, each once, and the ends stop where they meet.
    let mut it = db.range(a..b);
    let (mut front, mut back) = (Vec::new(), Vec::new());
    let mut from_back = rev;
    loop {
        let item = if from_back { it.next_back() } else { it.next() };
        match item {
            Some(r) => {
                let (k, v) = r.unwrap();
                if from_back {
                    back.push((k, v))
                } else {
                    front.push((k, v))
                }
            }
            None => break,
        }
        from_back = !from_back;
    }
    assert!(
        it.next().is_none() && it.next_back().is_none(),
        "range {a:?}..{b:?} ended"
    );
    back.reverse();
    front.extend(back);
    assert_eq!(front, want, "range {a:?}..{b:?} from both ends");
}

/// Runs `ops` against the engine and the model, with a block cache of `cache` bytes (0: off).
fn run(ops: Vec<Op>, cache: u64) {
    let mut fs = MemFs::new();
    let dir = Path::new("/db");
    let open = |fs: &MemFs| {
        Db::open_with(dir, common::mem_options(fs).block_cache_size(cache)).expect("open")
    };
    let mut db = open(&fs);
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut held: Vec<(Snapshot, Model)> = Vec::new();
    for op in ops {
        match op {
            Op::Insert(k, v) => {
                db.insert(key(k), &v).unwrap();
                model.insert(key(k), v);
            }
            Op::Remove(k) => {
                db.remove(key(k)).unwrap();
                model.remove(&key(k));
            }
            Op::RemoveRange(span) => {
                let r = db.remove_range(span.bounds());
                if span.is_empty() {
                    assert!(
                        matches!(r, Err(siltdb::Error::InvalidArgument(_))),
                        "{span:?}: {r:?}"
                    );
                } else {
                    r.unwrap();
                    span.apply(&mut model);
                }
            }
            Op::Batch(ops) => {
                let mut b = WriteBatch::new();
                let mut refused = false;
                for op in &ops {
                    match op {
                        BatchOp::Put(k, v) => {
                            b.insert(key(*k), v);
                        }
                        BatchOp::Del(k) => {
                            b.remove(key(*k));
                        }
                        BatchOp::DelRange(span) => {
                            refused |= span.is_empty();
                            b.remove_range(span.bounds());
                        }
                    }
                }
                let r = db.write(b);
                if refused {
                    // Nothing of a batch with an empty range is written.
                    assert!(matches!(r, Err(siltdb::Error::InvalidArgument(_))), "{r:?}");
                    continue;
                }
                r.unwrap();
                for op in ops {
                    match op {
                        BatchOp::Put(k, v) => {
                            model.insert(key(k), v);
                        }
                        BatchOp::Del(k) => {
                            model.remove(&key(k));
                        }
                        BatchOp::DelRange(span) => span.apply(&mut model),
                    }
                }
            }
            Op::Get(k) => assert_eq!(
                db.get(key(k)).unwrap().map(Vec::from),
                model.get(&key(k)).cloned(),
                "get {k}"
            ),
            Op::Range(a, b, rev) => check_range(&db, &model, &key(a), &key(b), rev),
            Op::Scan(span, flip) => {
                // Both ways, and with the bounds' kinds flipped when `flip`.
                let bounds = scan_bounds(span, flip);
                let want: Vec<_> = model
                    .iter()
                    .filter(|(k, _)| bounds.contains(*k))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                assert_eq!(
                    common::scan_all(db.range(bounds.clone())),
                    want,
                    "{bounds:?}"
                );
                let mut rev = common::scan_all(db.range(bounds.clone()).rev());
                rev.reverse();
                assert_eq!(rev, want, "{bounds:?} reversed");
            }
            Op::Prefix(k) => {
                let p = prefix(k);
                let want: Vec<_> = model
                    .iter()
                    .filter(|(k, _)| k.starts_with(&p))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                assert_eq!(common::scan_all(db.prefix(&p)), want, "prefix {p:?}");
            }
            Op::Flush => db.flush().unwrap(),
            Op::CompactRange(span) => {
                db.compact_range(span.bounds()).unwrap();
                siltdb::inspect::check_invariants(&db).unwrap();
            }
            Op::Compact => {
                db.compact().unwrap();
                siltdb::inspect::check_invariants(&db).unwrap();
            }
            Op::Reopen => {
                held.clear();
                drop(db);
                db = open(&fs);
            }
            Op::CrashReopen => {
                // A process crash: the OS keeps every acknowledged write.
                held.clear();
                let image = fs.crash_image(CrashImageOptions::PROCESS_CRASH);
                drop(db);
                fs = image;
                db = open(&fs);
            }
            Op::SnapshotCheck => {
                let snap = db.snapshot();
                db.insert(key(1), b"after snapshot").unwrap();
                assert_eq!(
                    snap.get(key(1)).unwrap().map(Vec::from),
                    model.get(&key(1)).cloned()
                );
                let scanned = common::scan_all(snap.iter());
                let want: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                assert_eq!(scanned, want, "snapshot scan");
                model.insert(key(1), b"after snapshot".to_vec());
            }
            Op::HoldSnapshot => {
                if held.len() >= 3 {
                    held.remove(0);
                }
                held.push((db.snapshot(), model.clone()));
            }
            Op::CheckSnapshots => {
                for (snap, want) in &held {
                    check_snapshot(snap, want);
                }
            }
        }
    }
    for (snap, want) in &held {
        check_snapshot(snap, want);
    }
    drop(held);
    let want: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(common::scan_all(db.iter()), want);
    let mut rev = common::scan_all(db.iter().rev());
    rev.reverse();
    assert_eq!(rev, want);
    siltdb::inspect::check_invariants(&db).unwrap();
    drop(db);
    let db = open(&fs);
    assert_eq!(common::scan_all(db.iter()), want, "after final reopen");
}

fn cases() -> u32 {
    std::env::var("SILT_MODEL_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(48)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]
    #[test]
    fn engine_matches_btreemap(ops in proptest::collection::vec(op(), 1..300), cached in any::<bool>()) {
        // Half the cases read through a block cache small enough to evict, half without one.
        run(ops, if cached { 16 << 10 } else { 0 });
    }
}

#[test]
fn long_history_with_hundreds_of_compactions() {
    // One long deterministic history: enough writes to run many flushes and compactions.
    let fs = MemFs::new();
    let dir = Path::new("/db");
    let db = common::open_mem(&fs, dir);
    let mut model = BTreeMap::new();
    let mut rng = common::Rng(7);
    for i in 0..60_000u64 {
        let k = format!("{:05}", rng.below(5000)).into_bytes();
        if rng.below(5) == 0 {
            db.remove(&k).unwrap();
            model.remove(&k);
        } else {
            let v = format!("{i}").into_bytes();
            db.insert(&k, &v).unwrap();
            model.insert(k, v);
        }
    }
    db.wait_for_compactions().unwrap();
    let s = db.stats();
    // ~1,170 flushes of 4 KiB memtables. How many compactions they make depends on how far
    // compaction lags the writer (an L0 compaction takes every L0 table; ~600 here), but L0
    // never holds more than the stop trigger's 8 tables, so at least one in 8 flushes is
    // followed by a compaction or a move.
    assert!(s.flushes >= 1_000, "only {} flushes", s.flushes);
    assert!(
        (s.compactions + s.trivial_moves) * 8 >= s.flushes,
        "only {} compactions and {} moves for {} flushes",
        s.compactions,
        s.trivial_moves,
        s.flushes
    );
    for (k, v) in &model {
        assert_eq!(db.get(k).unwrap().as_deref(), Some(v.as_slice()));
    }
    let want: Vec<_> = model.into_iter().collect();
    assert_eq!(common::scan_all(db.iter()), want);
    siltdb::inspect::check_invariants(&db).unwrap();
}
