//! `silt db info|get`, `silt wal dump`, `silt manifest dump` on databases built by the test,
//! including one that another handle has open.
mod common;

use common::cli::{json, json_lines, stdout};
use siltdb::{Db, Options};

#[test]
fn db_info_and_get_work_while_the_database_is_open() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let db = Db::open_with(
        dir.path(),
        Options::default()
            .bloom_bits_per_key(10.0)
            .auto_compaction(false),
    )
    .unwrap();
    for t in 0..3u32 {
        for i in (t..3000).step_by(3) {
            db.insert(format!("k{i:05}"), format!("v{i}")).unwrap();
        }
        db.flush().unwrap();
    }
    db.insert("only-in-wal", "fresh").unwrap();

    let v = json(&["db", "info", d]);
    assert_eq!(v["levels"][0]["tables"], 3);
    assert_eq!(v["levels"][0]["entries"], 3000);
    assert_eq!(v["levels"][0]["smallest"], "k00000");
    assert_eq!(v["levels"][0]["largest"], "k02999");
    let bpk = v["levels"][0]["bits_per_key"].as_f64().unwrap();
    assert!((10.0..10.3).contains(&bpk), "{bpk}");
    let wasted = v["expected_wasted_reads_per_absent_get"].as_f64().unwrap();
    let per_table: f64 = v["levels"][0]["table_list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["predicted_fpr"].as_f64().unwrap())
        .sum();
    assert!(
        (wasted - per_table).abs() < 1e-12 && wasted > 0.02 && wasted < 0.04,
        "{wasted}"
    );
    // What a handle holding this database pins: the filters and indexes of the tables, and
    // the unflushed WAL (the key written after the last flush).
    let mem = &v["memory"];
    assert_eq!(mem["filter_bytes"], v["filter_bytes"]);
    assert!(mem["index_bytes"].as_u64().unwrap() > 0, "{mem}");
    assert!(mem["memtable_bytes"].as_u64().unwrap() > 0, "{mem}");
    let text = stdout(&["db", "info", d]);
    assert!(
        text.contains("expected wasted block reads per absent-key get: 0.0"),
        "{text}"
    );

    // get --explain: read-only, beside the open handle; the WAL-only key is seen too.
    assert_eq!(stdout(&["db", "get", d, "only-in-wal"]).trim(), "fresh");
    let out = stdout(&["db", "get", d, "k00001", "--explain"]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "v1");
    assert!(out.contains("found"), "{out}");
    let v = json(&["db", "get", d, "k01001x"]);
    assert_eq!(v["found"], false);
    let tables = v["tables"].as_array().unwrap();
    assert_eq!(tables.len(), 3);
    for t in tables {
        assert!(
            t["outcome"] == "filter: definitely not"
                || t["outcome"] == "filter: maybe; false positive",
            "{t}"
        );
        assert_eq!(t["level"], 0);
    }
    // The open handle was not disturbed.
    db.insert("after", "1").unwrap();
    assert_eq!(
        db.get("only-in-wal").unwrap().map(Vec::from),
        Some(b"fresh".to_vec())
    );
}

#[test]
fn wal_and_manifest_dumps() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let db = Db::open_with(dir.path(), Options::default().auto_compaction(false)).unwrap();
    db.insert("a", "1").unwrap();
    let mut b = siltdb::WriteBatch::new();
    b.insert("b", "2").remove("a");
    db.write(b).unwrap();
    let wal = common::files_with_ext(dir.path(), "wal").pop().unwrap();
    let w = wal.to_str().unwrap();
    let out = stdout(&["wal", "dump", w]);
    assert!(
        out.contains("record @0 len 33 crc ok: 1 ops from seq 1"),
        "{out}"
    );
    assert!(out.contains("  2 put b => 2"));
    assert!(out.contains("  3 delete a"));
    assert!(out.ends_with("end: clean\n"));
    let recs = json_lines(&stdout(&["wal", "dump", w, "--json"]));
    assert_eq!(recs.len(), 3);
    assert_eq!(recs[1]["ops"][1]["op"], "delete");
    assert_eq!(recs[2]["end"]["status"], "clean");

    db.flush().unwrap();
    let out = stdout(&["manifest", "dump", d]);
    assert!(out.contains("+ L0 "), "{out}");
    let edits = json_lines(&stdout(&["manifest", "dump", d, "--json"]));
    let added: usize = edits
        .iter()
        .filter_map(|e| e["edit"]["added"].as_array())
        .map(|a| a.len())
        .sum();
    assert_eq!(added, 1);
    drop(db);

    // A torn WAL tail is reported as such, not as corruption.
    let db = Db::open(dir.path()).unwrap();
    db.insert("c", "3").unwrap();
    db.close().unwrap();
    let wal = common::files_with_ext(dir.path(), "wal").pop().unwrap();
    let bytes = std::fs::read(&wal).unwrap();
    std::fs::write(&wal, &bytes[..bytes.len() - 3]).unwrap();
    let out = stdout(&["wal", "dump", wal.to_str().unwrap()]);
    assert!(out.contains("end: torn tail of"), "{out}");
}
