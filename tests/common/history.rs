//! A deterministic write history and its model, for the crash, error-injection and self-check
//! tests. Op `i` is a pure function of `(seed, i)`; every value written is unique and names
//! the op that wrote it, so a recovered value can be traced to its write (or shown a phantom).
#![allow(dead_code)]

use siltdb::{Db, WriteBatch};
use std::collections::BTreeMap;

pub type State = BTreeMap<Vec<u8>, Vec<u8>>;

#[derive(Clone, Debug)]
pub enum Op {
    Put(Vec<u8>, Vec<u8>),
    Delete(Vec<u8>),
    Batch(Vec<(Vec<u8>, Option<Vec<u8>>)>),
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
    match r % 20 {
        0..=11 => Op::Put(new_key(i), value(i, 0, r)),
        12..=14 if i > 0 => Op::Put(old(1), value(i, 0, r >> 8)),
        15..=16 if i > 0 => Op::Delete(old(2)),
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
            Op::Batch(ops)
        }
    }
}

impl Op {
    /// The (key, value-or-delete) pairs of the op, in order.
    pub fn effects(&self) -> Vec<(&[u8], Option<&[u8]>)> {
        match self {
            Op::Put(k, v) => vec![(k, Some(v))],
            Op::Delete(k) => vec![(k, None)],
            Op::Batch(ops) => ops
                .iter()
                .map(|(k, v)| (k.as_slice(), v.as_deref()))
                .collect(),
        }
    }

    pub fn is_batch(&self) -> bool {
        matches!(self, Op::Batch(_))
    }

    pub fn apply(&self, model: &mut State) {
        for (k, v) in self.effects() {
            match v {
                Some(v) => model.insert(k.to_vec(), v.to_vec()),
                None => model.remove(k),
            };
        }
    }

    pub fn run(&self, db: &Db) -> siltdb::Result<()> {
        self.run_with(db, siltdb::WriteOptions::default())
    }

    /// [`run`](Op::run) with a per-write durability choice.
    pub fn run_with(&self, db: &Db, opts: siltdb::WriteOptions) -> siltdb::Result<()> {
        match self {
            Op::Put(k, v) => db.insert_with(k, v, opts),
            Op::Delete(k) => db.remove_with(k, opts),
            Op::Batch(ops) => {
                let mut b = WriteBatch::new();
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

/// The model after ops `0..n`.
pub fn model(seed: u64, n: u64) -> State {
    let mut m = State::new();
    for i in 0..n {
        op(seed, i).apply(&mut m);
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
    // Values name their op: "v{i}-{j}-..."; check each was really written to its key.
    for (k, v) in state {
        let s = String::from_utf8_lossy(v);
        let i: Option<u64> = s
            .strip_prefix('v')
            .and_then(|r| r.split('-').next())
            .and_then(|n| n.parse().ok());
        let written = i.is_some_and(|i| {
            i < upto
                && op(seed, i)
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
        for (k, v) in op(seed, i).effects() {
            let before = m.get(k).map(|x| x.as_slice()) != state.get(k).map(|x| x.as_slice());
            match v {
                Some(v) => m.insert(k.to_vec(), v.to_vec()),
                None => m.remove(k),
            };
            let after = m.get(k).map(|x| x.as_slice()) != state.get(k).map(|x| x.as_slice());
            diff = diff + usize::from(after) - usize::from(before);
        }
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
/// (`k{i}-{j}`) that nothing else touches, so a batch is whole iff all or none are present.
pub fn torn_batches(seed: u64, upto: u64, state: &State) -> u64 {
    let mut torn = 0;
    for i in 0..upto {
        if let Op::Batch(ops) = op(seed, i) {
            let fresh: Vec<&Vec<u8>> = ops
                .iter()
                .filter(|(_, v)| v.is_some())
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
