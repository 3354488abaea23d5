//! Review finding (session 17): the range deletes of one batch were each added to the
//! memtable's fragments, which keep every covering sequence number of every piece, so one
//! batch of nested ranges took memory quadratic in its size, and took it again at every
//! replay of its WAL record. A write group's range deletes are now cut into their newest
//! pieces first (no reader reads inside a group): this checks the memory and, with puts
//! between the deletes of the batch, that the answers are those of the deletes one by one.

use siltdb::{Db, WriteBatch};

fn key(i: u32) -> String {
    format!("k{i:05}")
}

fn check(db: &Db, n: u32) {
    // Every key below key(n - 1) is deleted but the two the batch wrote between its deletes
    // and did not delete again.
    for i in 0..n {
        let want = match i {
            1000 => Some(b"mid".to_vec()),
            _ if i == n - 1 => Some(b"v".to_vec()),
            _ => None,
        };
        assert_eq!(db.get(key(i)).unwrap().map(Vec::from), want, "{}", key(i));
    }
    assert_eq!(db.iter().count(), 2);
}

#[test]
fn one_batch_of_nested_range_deletes_stays_small_and_answers_right() {
    let n = 4000;
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path()).unwrap();
    for i in 0..n {
        db.insert(key(i), "v").unwrap();
    }
    let before = db.snapshot();
    let memory_before = db.stats().memtable_memory_bytes;
    let mut b = WriteBatch::new();
    // The widest first: ["", key(n - 1)), ["", key(n - 2)), ... ["", key(1)).
    for i in (1..n).rev() {
        b.remove_range(..key(i));
        if i == 1000 {
            // Newer than every delete so far (the last, ["", key(1000)), ends just below
            // it), and outside every later one: it stays.
            b.insert(key(1000), "mid");
        }
        if i == 300 {
            // Newer than the deletes so far; the next one, ["", key(299)), deletes it.
            b.insert(key(100), "gone");
        }
    }
    db.write(b).unwrap();
    let grown = db.stats().memtable_memory_bytes - memory_before;
    // All covering numbers of every piece would be n^2 / 2 = 8 million of them.
    assert!(grown < 2 << 20, "the memtable grew by {grown} bytes");
    check(&db, n);
    // A snapshot from before the batch sees none of it.
    assert_eq!(
        before.get(key(5)).unwrap().map(Vec::from),
        Some(b"v".to_vec())
    );
    assert_eq!(before.iter().count(), n as usize);
    drop(before);
    drop(db);
    // The WAL record replays into the same answers.
    let db = Db::open(dir.path()).unwrap();
    check(&db, n);
    db.compact().unwrap();
    check(&db, n);
}
