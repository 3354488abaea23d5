//! `silt db compact` (the one command that writes: it takes the lock, says so, and refuses a
//! database open elsewhere with one line and status 2) and `silt db size` (read-only).
use crate::common;

use common::cli::{json, run, silt, stdout};
use siltdb::{Db, Options};

fn build(dir: &std::path::Path) {
    let db = Db::open_with(dir, common::small_options().auto_compaction(false)).unwrap();
    for round in 0..2 {
        for i in 0..2000u32 {
            db.insert(format!("k{i:05}"), format!("{round}-{i:060}"))
                .unwrap();
        }
        db.flush().unwrap();
    }
    for i in (0..2000u32).step_by(2) {
        db.remove(format!("k{i:05}")).unwrap();
    }
    db.close().unwrap();
}

#[test]
fn compact_reclaims_and_size_measures() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    build(dir.path());

    let all = json(&["db", "size", d]);
    let half = json(&["db", "size", d, "--from", "k01000", "--to", "k02000"]);
    let (all_b, half_b) = (
        all["approximate_bytes"].as_u64().unwrap(),
        half["approximate_bytes"].as_u64().unwrap(),
    );
    assert!(
        all_b > 0 && half_b > all_b / 3 && half_b < all_b * 2 / 3,
        "{all} {half}"
    );
    assert_eq!(half["range"], "keys [k01000, k02000)");
    assert!(stdout(&["db", "size", d]).contains("live files: "));

    let (out, err) = run(silt().args(["db", "compact", d, "--json"]), 0);
    assert!(err.contains("holding the lock"), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let (before, after) = (
        v["before"]["disk_bytes"].as_u64().unwrap(),
        v["after"]["disk_bytes"].as_u64().unwrap(),
    );
    // Two versions of every key and 1,000 tombstones become one version of half the keys.
    assert!(after * 3 < before, "{v}");
    assert_eq!(v["range"], "every key");

    let db = Db::open_with(dir.path(), Options::default().auto_compaction(false)).unwrap();
    assert_eq!(db.iter().count(), 1000);
    assert_eq!(db.levels()[0].tables, 0);
    // The reopen starts a fresh manifest, shorter than the one the compaction appended to.
    assert!(db.disk_size().unwrap() <= after);
}

#[test]
fn compact_refuses_a_database_open_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    build(dir.path());
    let db = Db::open_with(dir.path(), Options::default().auto_compaction(false)).unwrap();
    let ids = |db: &Db| db.tables().iter().map(|t| t.table_id).collect::<Vec<_>>();
    let tables = ids(&db);

    let (out, err) = run(
        silt().args(["db", "compact", d, "--from", "k0", "--to", "k1"]),
        2,
    );
    assert!(out.is_empty(), "{out}");
    assert_eq!(err.lines().count(), 1, "{err:?}");
    assert!(err.contains("open in another process"), "{err}");
    assert!(
        ids(&db) == tables,
        "the refused compaction changed the tree"
    );
    // `size` is read-only: fine beside the open handle.
    assert!(json(&["db", "size", d])["disk_bytes"].as_u64().unwrap() > 0);

    // Not a database: one line, status 2, and nothing created.
    let empty = tempfile::tempdir().unwrap();
    let e = empty.path().to_str().unwrap();
    for cmd in ["compact", "size"] {
        let (_, err) = run(silt().args(["db", cmd, e]), 2);
        assert_eq!(err.lines().count(), 1, "{cmd}: {err:?}");
    }
    assert_eq!(std::fs::read_dir(empty.path()).unwrap().count(), 0);
}

/// A range that holds no key is refused (status 2, one line) before the database is opened:
/// it reported "compacted keys [k1, k0)" with nothing compacted (review, session 24).
#[test]
fn a_range_that_holds_no_key_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    build(dir.path());
    for cmd in ["compact", "size"] {
        for (from, to) in [("k1", "k0"), ("k1", "k1")] {
            let (out, err) = run(silt().args(["db", cmd, d, "--from", from, "--to", to]), 2);
            assert!(out.is_empty(), "{cmd}: {out}");
            assert_eq!(err.lines().count(), 1, "{cmd}: {err:?}");
        }
        // Below the empty key, the smallest: with or without --from.
        for args in [vec!["--to", ""], vec!["--from", "", "--to", ""]] {
            let (out, err) = run(silt().args(["db", cmd, d]).args(&args), 2);
            assert!(out.is_empty(), "{cmd} {args:?}: {out}");
            assert_eq!(err.lines().count(), 1, "{cmd}: {err:?}");
        }
    }
}
