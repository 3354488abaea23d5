//! An iterator held while the database changes under it (range removals, overwrites, flushes,
//! a full compaction) still yields exactly the view it was created with: every key once, in
//! order, with its value then, whichever end it is drained from and in whatever mix. A
//! snapshot's bounded iterator likewise. (The model test drains every scan inside one step,
//! with ends alternating strictly; review, session 24, suggested this scenario.)
use crate::common;

use siltdb::{Db, Iter};
use std::collections::BTreeMap;
use std::ops::Bound;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn key(i: u32) -> Vec<u8> {
    format!("k{i:03}").into_bytes()
}

/// Drains `it` taking from the front or the back as `pattern` says (cycled), and returns the
/// entries in key order.
fn drain(
    mut it: Iter,
    pattern: &[bool],
    mut front: Vec<(Vec<u8>, Vec<u8>)>,
    mut back: Vec<(Vec<u8>, Vec<u8>)>,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    for &from_front in pattern.iter().cycle() {
        let next = if from_front {
            it.next()
        } else {
            it.next_back()
        };
        match next {
            Some(e) => {
                let e = e.unwrap();
                if from_front {
                    front.push(e);
                } else {
                    back.push(e);
                }
            }
            None => break,
        }
    }
    back.reverse();
    front.extend(back);
    front
}

fn expected(model: &Model, lo: Bound<Vec<u8>>, hi: Bound<Vec<u8>>) -> Vec<(Vec<u8>, Vec<u8>)> {
    model
        .range((lo, hi))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

#[test]
fn held_iterators_yield_the_view_they_were_made_with() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open_with(dir.path(), common::small_options()).unwrap();
    let mut model = Model::new();
    for round in 0..3u32 {
        for i in (round..200).step_by(1 + round as usize) {
            let v = format!("v{round}-{i}").into_bytes();
            db.insert(key(i), &v).unwrap();
            model.insert(key(i), v);
        }
        if round == 1 {
            db.flush().unwrap();
        }
    }
    for (a, b) in [(20, 35), (30, 50), (120, 121)] {
        db.remove_range(key(a)..key(b)).unwrap();
        model.retain(|k, _| !(key(a) <= *k && *k < key(b)));
    }
    let snap = db.snapshot();
    let snap_model = model.clone();
    let mut whole = db.iter();
    let mut bounded = snap.range(key(10)..=key(90));
    // Start both ends of both before anything changes.
    let whole_front = vec![
        whole.next().unwrap().unwrap(),
        whole.next().unwrap().unwrap(),
    ];
    let whole_back = vec![whole.next_back().unwrap().unwrap()];
    let bounded_front = vec![bounded.next().unwrap().unwrap()];
    let bounded_back = vec![
        bounded.next_back().unwrap().unwrap(),
        bounded.next_back().unwrap().unwrap(),
    ];

    // Change everything under them.
    db.remove_range(key(5)..key(150)).unwrap();
    for i in 0..200 {
        db.insert(key(i), b"new").unwrap();
    }
    db.flush().unwrap();
    db.compact().unwrap();
    db.remove(key(199)).unwrap();

    let got = drain(whole, &[true, true, false], whole_front, whole_back);
    assert_eq!(got, expected(&model, Bound::Unbounded, Bound::Unbounded));
    let got = drain(
        bounded,
        &[false, true, false, false, true],
        bounded_front,
        bounded_back,
    );
    assert_eq!(
        got,
        expected(
            &snap_model,
            Bound::Included(key(10)),
            Bound::Included(key(90))
        )
    );
    // A new iterator sees the new state.
    let now: Vec<_> = db.iter().map(|e| e.unwrap()).collect();
    assert_eq!(now.len(), 199);
    assert!(now.iter().all(|(_, v)| v == b"new"));
}
