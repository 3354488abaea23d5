//! A read-only open sees what another handle wrote (even unflushed), writes nothing, and
//! refuses writes.
use siltdb::{Db, Error};

fn listing(dir: &std::path::Path) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().into_string().unwrap(),
                e.metadata().unwrap().len(),
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn read_only_open_beside_a_writer() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path()).unwrap();
    db.insert("flushed", "1").unwrap();
    db.flush().unwrap();
    db.insert("in-wal", "2").unwrap();
    let before = listing(dir.path());

    let ro = Db::open_read_only(dir.path()).unwrap();
    assert_eq!(
        ro.get("flushed").unwrap().map(Vec::from),
        Some(b"1".to_vec())
    );
    assert_eq!(
        ro.get("in-wal").unwrap().map(Vec::from),
        Some(b"2".to_vec())
    );
    assert_eq!(ro.iter().count(), 2);
    assert!(matches!(
        ro.insert("x", "y"),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(ro.flush(), Err(Error::InvalidArgument(_))));
    assert!(matches!(ro.sync(), Err(Error::InvalidArgument(_))));
    let (v, trace) = ro.get_traced("flushed").unwrap();
    assert_eq!(v.as_deref(), Some(&b"1"[..]));
    assert_eq!(trace.data_block_reads, 1);
    drop(ro);
    assert_eq!(
        listing(dir.path()),
        before,
        "a read-only open must not change any file"
    );

    // The writer was not disturbed.
    db.insert("after", "3").unwrap();
    assert_eq!(
        db.get("in-wal").unwrap().map(Vec::from),
        Some(b"2".to_vec())
    );
}

#[test]
fn read_only_open_of_a_missing_database_fails() {
    let dir = tempfile::tempdir().unwrap();
    assert!(matches!(
        Db::open_read_only(dir.path().join("nope")),
        Err(Error::InvalidArgument(_))
    ));
    assert!(!dir.path().join("nope").exists());
}

#[test]
fn read_only_waits_for_no_compaction_and_compacts_nothing() {
    // A tree that needs compaction (eight L0 tables, past the trigger), opened read-only:
    // nothing will compact it, so waiting for compactions returns at once instead of never.
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Db::open_with(
            dir.path(),
            siltdb::Options::default().auto_compaction(false),
        )
        .unwrap();
        for t in 0..8 {
            db.insert(format!("k{t}"), "v").unwrap();
            db.flush().unwrap();
        }
        db.close().unwrap();
    }
    let before = listing(dir.path());
    let ro = Db::open_read_only(dir.path()).unwrap();
    assert_eq!(ro.levels()[0].tables, 8);
    let waiter = {
        let ro = ro.clone();
        std::thread::spawn(move || ro.wait_for_compactions())
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !waiter.is_finished() {
        assert!(
            std::time::Instant::now() < deadline,
            "wait_for_compactions hangs"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    waiter.join().unwrap().unwrap();
    assert!(matches!(ro.compact(), Err(Error::InvalidArgument(_))));
    assert_eq!(ro.levels()[0].tables, 8);
    ro.close().unwrap();
    assert!(matches!(ro.wait_for_compactions(), Err(Error::Closed)));
    assert_eq!(listing(dir.path()), before);
}

#[test]
fn read_only_replay_seals_memtables_as_a_writer_would() {
    // Writes only in the WAL, replayed by a read-only open whose memtables hold 4 KiB: the
    // replay keeps them in many memtables (as a writer seals them, and never past a
    // skiplist's capacity), and reads merge them newest first.
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path()).unwrap();
    let mut model = std::collections::BTreeMap::new();
    let key = |i: u32| format!("k{:04}", i % 1000);
    for i in 0..3000u32 {
        let v = format!("v{i:05}{}", "x".repeat(80));
        db.insert(key(i), &v).unwrap();
        model.insert(key(i), v);
        if i % 7 == 0 {
            let gone = key(i * 13);
            db.remove(&gone).unwrap();
            model.remove(&gone);
        }
        if i == 2000 {
            db.remove_range("k0100".."k0200").unwrap();
            model.retain(|k, _| !("k0100".."k0200").contains(&k.as_str()));
        }
    }
    let ro = Db::open_with(
        dir.path(),
        siltdb::Options::default()
            .read_only(true)
            .memtable_size(4 << 10),
    )
    .unwrap();
    let (_, trace) = ro.get_traced("k0000").unwrap();
    assert!(
        trace.memtables_searched > 10,
        "{} memtables",
        trace.memtables_searched
    );
    for i in 0..1000 {
        let got = ro
            .get(key(i))
            .unwrap()
            .map(|v| String::from_utf8(v.to_vec()).unwrap());
        assert_eq!(got.as_ref(), model.get(&key(i)), "{}", key(i));
    }
    let scanned: Vec<(String, String)> = ro
        .iter()
        .map(|r| {
            let (k, v) = r.unwrap();
            (
                String::from_utf8(k.to_vec()).unwrap(),
                String::from_utf8(v.to_vec()).unwrap(),
            )
        })
        .collect();
    let want: Vec<(String, String)> = model.into_iter().collect();
    assert_eq!(scanned, want);
    drop(ro);
    drop(db);
}
