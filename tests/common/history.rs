//! A deterministic write history and its model, for the crash, error-injection and self-check
//! tests. Op `i` is a pure function of `(seed, i)`; every value written is unique and names
//! the op that wrote it, so a recovered value can be traced to its write (or shown a phantom).
//! Some ops are range removes over older keys, alone or at the head of a batch (whose puts
//! follow it), so every crash test also checks that a range remove is all or nothing, with
//! its batch, across a crash.
#![allow(dead_code)]

use siltdb::{Db, WriteBatch};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

pub type State = BTreeMap<Vec<u8>, Vec<u8>>;

#[derive(Clone, Debug)]
pub enum Op {
    Put(Vec<u8>, Vec<u8>),
    Delete(Vec<u8>),
    /// Removes `[lo, hi)`.
    RangeDelete(Vec<u8>, Vec<u8>),
    /// An optional range remove `[lo, hi)`, then puts and deletes, in one batch.
    Batch(Option<(Vec<u8>, Vec<u8>)>, Vec<(Vec<u8>, Option<Vec<u8>>)>),
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

pub fn new_key(i: u64) -> Vec<u8> {
    format!("k{i:08}").into_bytes()
}

fn value(i: u64, j: u64, r: u64) -> Vec<u8> {
    let mut v = format!("v{i}-{j}-").into_bytes();
    v.resize(v.len() + (r % 48) as usize, b'x');
    v
}

/// Op `i` of the history with `seed`.
pub fn op(seed: u64, i: u64) -> Op {
    let r = mix(seed ^ mix(i));
    let old = |salt: u64| new_key(mix(r ^ salt) % i.max(1));
    // A range over up to 8 older keys (and the batch keys written by their ops).
    let old_range = |salt: u64| {
        let a = mix(r ^ salt) % i.max(1);
        (new_key(a), new_key(a + 1 + (r >> 50) % 8))
    };
    match r % 20 {
        0..=11 => Op::Put(new_key(i), value(i, 0, r)),
        12..=14 if i > 0 => Op::Put(old(1), value(i, 0, r >> 8)),
        15..=16 if i > 0 => Op::Delete(old(2)),
        17 if i > 0 => {
            let (lo, hi) = old_range(5);
            Op::RangeDelete(lo, hi)
        }
        _ => {
            let n = 2 + (r >> 16) % 5;
            let mut ops: Vec<(Vec<u8>, Option<Vec<u8>>)> = (0..n)
                .map(|j| {
                    let mut k = new_key(i);
                    k.extend_from_slice(format!("-{j}").as_bytes());
                    (k, Some(value(i, j, r >> j)))
                })
                .collect();
            if i > 0 && (r >> 40).is_multiple_of(2) {
                ops.push((old(3), None));
            }
            let range = (i > 0 && (r >> 44).is_multiple_of(3)).then(|| old_range(6));
            Op::Batch(range, ops)
        }
    }
}

impl Op {
    /// The (key, value-or-delete) pairs of the op, in order (after its range remove, if any).
    pub fn effects(&self) -> Vec<(&[u8], Option<&[u8]>)> {
        match self {
            Op::Put(k, v) => vec![(k, Some(v))],
            Op::Delete(k) => vec![(k, None)],
            Op::RangeDelete(..) => Vec::new(),
            Op::Batch(_, ops) => ops
                .iter()
                .map(|(k, v)| (k.as_slice(), v.as_deref()))
                .collect(),
        }
    }

    /// The range the op removes first, if any.
    pub fn range(&self) -> Option<(&[u8], &[u8])> {
        match self {
            Op::RangeDelete(lo, hi) | Op::Batch(Some((lo, hi)), _) => Some((lo, hi)),
            _ => None,
        }
    }

    pub fn is_batch(&self) -> bool {
        matches!(self, Op::Batch(..))
    }

    /// Applies the op to `model`, calling `touched(key, model)` before and after each change
    /// of a key (a range remove touches the keys it removes).
    fn apply_tracked(&self, model: &mut State, mut touched: impl FnMut(&[u8], &State, bool)) {
        if let Some((lo, hi)) = self.range() {
            let keys: Vec<Vec<u8>> = model
                .range(lo.to_vec()..hi.to_vec())
                .map(|(k, _)| k.clone())
                .collect();
            for k in keys {
                touched(&k, model, false);
                model.remove(&k);
                touched(&k, model, true);
            }
        }
        for (k, v) in self.effects() {
            touched(k, model, false);
            match v {
                Some(v) => model.insert(k.to_vec(), v.to_vec()),
                None => model.remove(k),
            };
            touched(k, model, true);
        }
    }

    pub fn apply(&self, model: &mut State) {
        self.apply_tracked(model, |_, _, _| {});
    }

    pub fn run(&self, db: &Db) -> siltdb::Result<()> {
        self.run_with(db, siltdb::WriteOptions::default())
    }

    /// [`run`](Op::run) with a per-write durability choice.
    pub fn run_with(&self, db: &Db, opts: siltdb::WriteOptions) -> siltdb::Result<()> {
        match self {
            Op::Put(k, v) => db.insert_with(k, v, opts),
            Op::Delete(k) => db.remove_with(k, opts),
            Op::RangeDelete(lo, hi) => db.remove_range_with(lo.clone()..hi.clone(), opts),
            Op::Batch(range, ops) => {
                let mut b = WriteBatch::new();
                if let Some((lo, hi)) = range {
                    b.remove_range(lo.clone()..hi.clone());
                }
                for (k, v) in ops {
                    match v {
                        Some(v) => b.insert(k, v),
                        None => b.remove(k),
                    };
                }
                db.write_with(b, opts)
            }
        }
    }
}

thread_local! {
    /// The ops of the last history asked for on this thread, generated once: the crash
    /// harness judges hundreds of crash images of one history, and regenerating (formatting)
    /// every op for each judgement was most of its time.
    static MEMO: RefCell<(u64, Rc<Vec<Op>>)> = RefCell::new((0, Rc::new(Vec::new())));
}

/// At least the first `n` ops of the history with `seed` (op `i` equal to `op(seed, i)`).
pub fn ops(seed: u64, n: u64) -> Rc<Vec<Op>> {
    MEMO.with(|memo| {
        let mut memo = memo.borrow_mut();
        if memo.0 != seed {
            *memo = (seed, Rc::new(Vec::new()));
        }
        if (memo.1.len() as u64) < n {
            let list = Rc::make_mut(&mut memo.1);
            let from = list.len() as u64;
            list.extend((from..n).map(|i| op(seed, i)));
        }
        memo.1.clone()
    })
}

/// The model after ops `0..n`.
pub fn model(seed: u64, n: u64) -> State {
    let mut m = State::new();
    for o in &ops(seed, n)[..n as usize] {
        o.apply(&mut m);
    }
    m
}

/// How a recovered state relates to the history.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Equal to the model after `P` ops, with `P` the largest such value at most `upto`.
    Prefix(u64),
    /// Holds a value no op of the history wrote to its key (or a deleted key's old value
    /// where no prefix explains it).
    Phantom(String),
    /// Equal to no prefix of the history, but every value was written at some point.
    Hole,
}

/// Compares `state` with the model after every prefix `0..=upto` of the history.
pub fn judge(seed: u64, upto: u64, state: &State) -> Verdict {
    let ops = ops(seed, upto);
    // Values name their op: "v{i}-{j}-..."; check each was really written to its key.
    for (k, v) in state {
        let s = String::from_utf8_lossy(v);
        let i: Option<u64> = s
            .strip_prefix('v')
            .and_then(|r| r.split('-').next())
            .and_then(|n| n.parse().ok());
        let written = i.is_some_and(|i| {
            i < upto
                && ops[i as usize]
                    .effects()
                    .iter()
                    .any(|(ek, ev)| *ek == k.as_slice() && *ev == Some(v.as_slice()))
        });
        if !written {
            return Verdict::Phantom(format!("{} = {}", String::from_utf8_lossy(k), s));
        }
    }
    // Walk the history keeping a count of keys where model and state differ.
    let mut m = State::new();
    let mut diff = state.len();
    let mut best = (diff == 0).then_some(0);
    for i in 0..upto {
        ops[i as usize].apply_tracked(&mut m, |k, m, after| {
            let differs = m.get(k).map(|x| x.as_slice()) != state.get(k).map(|x| x.as_slice());
            if after {
                diff += usize::from(differs);
            } else {
                diff -= usize::from(differs);
            }
        });
        if diff == 0 {
            best = Some(i + 1);
        }
    }
    match best {
        Some(p) => Verdict::Prefix(p),
        None => Verdict::Hole,
    }
}

/// Every (key, value) of a database, or the first error.
pub fn read_state(db: &Db) -> siltdb::Result<State> {
    db.iter().collect()
}

/// Counts batches whose keys are partly present: a torn batch. Batches write fresh keys
/// (`k{i}-{j}`) that only a later range remove touches, so a batch is whole iff all or none of
/// its fresh keys that no later range remove covers are present.
pub fn torn_batches(seed: u64, upto: u64, state: &State) -> u64 {
    let ops = ops(seed, upto);
    let ops = &ops[..upto as usize];
    let ranges: Vec<(usize, &[u8], &[u8])> = ops
        .iter()
        .enumerate()
        .filter_map(|(i, o)| o.range().map(|(lo, hi)| (i, lo, hi)))
        .collect();
    let mut torn = 0;
    for (i, o) in ops.iter().enumerate() {
        if let Op::Batch(_, batch) = o {
            let removed_later =
                |k: &[u8]| ranges.iter().any(|&(j, lo, hi)| j > i && lo <= k && k < hi);
            let fresh: Vec<&Vec<u8>> = batch
                .iter()
                .filter(|(k, v)| v.is_some() && !removed_later(k))
                .map(|(k, _)| k)
                .collect();
            let present = fresh
                .iter()
                .filter(|k| state.contains_key(k.as_slice()))
                .count();
            if present != 0 && present != fresh.len() {
                torn += 1;
            }
        }
    }
    torn
}
