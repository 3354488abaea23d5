//! `silt db info|get`, `silt wal dump`, `silt manifest dump` on databases built by the test,
//! including one that another handle has open.
use crate::common;

use common::cli::{json, json_lines, stdout};
use siltdb::{Db, FilterPolicy, LevelFilter, Options};

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
    assert_eq!(v["levels"][0]["filter_kind"], "bloom");
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
    // The records of that one write (a mapped WAL's file is allocated 1 MiB ahead).
    let unflushed = mem["memtable_bytes"].as_u64().unwrap();
    assert!(unflushed > 0 && unflushed < 4096, "{mem}");
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
fn db_info_gives_a_levels_bits_per_key_over_its_keys_not_its_versions() {
    // Every key written twice before the flush: the L0 table holds 2,000 entries over 1,000
    // keys, and its filter is built over the keys.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let opts = Options::default()
        .bloom_bits_per_key(10.0)
        .auto_compaction(false);
    let db = Db::open_with(dir.path(), opts).unwrap();
    for round in 0..2u32 {
        for i in 0..1000u32 {
            db.insert(format!("k{i:05}"), format!("v{round}")).unwrap();
        }
    }
    db.flush().unwrap();
    let v = json(&["db", "info", d]);
    let level = &v["levels"][0];
    assert_eq!(level["entries"], 2000);
    let table = &level["table_list"][0];
    assert_eq!(table["keys"], 1000);
    let level_bpk = level["bits_per_key"].as_f64().unwrap();
    let table_bpk = table["bits_per_key"].as_f64().unwrap();
    let lib_bpk = db.levels()[0].bits_per_key;
    assert!((10.0..10.5).contains(&level_bpk), "{level_bpk}");
    assert!(
        (level_bpk - table_bpk).abs() < 1e-9,
        "{level_bpk} {table_bpk}"
    );
    assert!((level_bpk - lib_bpk).abs() < 1e-9, "{level_bpk} {lib_bpk}");
}

/// Review finding (session 22): in a level whose tables have filters and tables without,
/// `db info` divided the filters' bits by the keys of the filtered tables alone, while
/// `Db::levels` divides by every key of the level.
#[test]
fn db_info_gives_a_mixed_levels_bits_per_key_as_db_levels_does() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    for bits in [10.0, 0.0] {
        let opts = Options::default()
            .bloom_bits_per_key(bits)
            .auto_compaction(false);
        let db = Db::open_with(dir.path(), opts).unwrap();
        for i in 0..1000u32 {
            db.insert(format!("k{bits}-{i:05}"), "v").unwrap();
        }
        db.flush().unwrap();
    }
    let db = Db::open_with(dir.path(), Options::default().auto_compaction(false)).unwrap();
    let lib_bpk = db.levels()[0].bits_per_key;
    drop(db);
    let v = json(&["db", "info", d]);
    let level_bpk = v["levels"][0]["bits_per_key"].as_f64().unwrap();
    assert_eq!(v["levels"][0]["tables"], 2);
    assert!((5.0..5.3).contains(&level_bpk), "{level_bpk}");
    assert!((level_bpk - lib_bpk).abs() < 1e-9, "{level_bpk} {lib_bpk}");
}

#[test]
fn db_info_names_the_filter_kind_of_each_level_and_table() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    // L0 gets 8-bit fuse filters, L1 and below 16-bit ones.
    let policy = FilterPolicy::Levels(vec![
        LevelFilter::Fuse {
            fingerprint_bits: 8,
        },
        LevelFilter::Fuse {
            fingerprint_bits: 16,
        },
    ]);
    let db = Db::open_with(
        dir.path(),
        Options::default()
            .filter_policy(policy)
            .auto_compaction(false),
    )
    .unwrap();
    for i in 0..4000u32 {
        db.insert(format!("k{i:05}"), format!("v{i}")).unwrap();
    }
    db.compact().unwrap();
    for i in (0..4000u32).step_by(4) {
        db.insert(format!("k{i:05}"), "again").unwrap();
    }
    db.flush().unwrap();

    let v = json(&["db", "info", d]);
    let levels = v["levels"].as_array().unwrap();
    assert_eq!(levels[0]["filter_kind"], "fuse8");
    assert_eq!(levels[1]["filter_kind"], "fuse16");
    for (l, want) in [(0, 8.0), (1, 16.0)] {
        let tables = levels[l]["table_list"].as_array().unwrap();
        assert!(!tables.is_empty(), "L{l}");
        for t in tables {
            assert_eq!(t["filter_kind"], levels[l]["filter_kind"], "{t}");
            let bpk = t["bits_per_key"].as_f64().unwrap();
            assert!(bpk > want && bpk < want * 1.5, "{t}");
            assert_eq!(t["predicted_fpr"].as_f64().unwrap(), 1.0 / 2f64.powf(want));
        }
    }
    // The same names as the library's own views of the tree.
    for l in db.levels() {
        assert_eq!(
            levels[l.level]["filter_kind"],
            l.filter_kind.as_str(),
            "L{}",
            l.level
        );
    }
    let by_id: Vec<(u64, String)> = levels
        .iter()
        .flat_map(|l| l["table_list"].as_array().unwrap())
        .map(|t| {
            (
                t["number"].as_u64().unwrap(),
                t["filter_kind"].as_str().unwrap().into(),
            )
        })
        .collect();
    let mut lib: Vec<(u64, String)> = db
        .tables()
        .into_iter()
        .map(|t| (t.table_id, t.filter_kind))
        .collect();
    let mut ours = by_id.clone();
    ours.sort();
    lib.sort();
    assert_eq!(ours, lib);

    let text = stdout(&["db", "info", d]);
    let row = |prefix: &str| {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} row in\n{text}"))
            .to_string()
    };
    assert!(row("L0 ").contains(" fuse8 "), "{text}");
    assert!(row("L1 ").contains(" fuse16 "), "{text}");
    assert!(row("level").contains(" filter "), "{text}");
    assert!(text.contains("filter fuse16 "), "{text}");
    assert!(text.contains("filter fuse8 "), "{text}");
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
    // A compaction records where the next one of its level starts: the user key, in the
    // JSON as in the text (the JSON showed the internal key, its 8-byte trailer escaped).
    db.compact().unwrap();
    let out = stdout(&["manifest", "dump", d]);
    assert!(out.contains("  compact pointer L0 b\n"), "{out}");
    let edits = json_lines(&stdout(&["manifest", "dump", d, "--json"]));
    let pointers: Vec<_> = edits
        .iter()
        .filter_map(|e| e["edit"]["compact_pointers"].as_array())
        .flatten()
        .collect();
    assert!(!pointers.is_empty(), "{edits:?}");
    assert!(
        pointers.iter().any(|p| p["level"] == 0 && p["key"] == "b"),
        "{pointers:?}"
    );
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
    assert!(!out.contains("no valid record"), "{out}");
    // The same WAL under another number: its records are bound to its own, so none is valid
    // here, and the dump says what that may mean (recovery too would cut it all off).
    let renamed = dir.path().join("000999.wal");
    std::fs::write(&renamed, &bytes).unwrap();
    let out = stdout(&["wal", "dump", renamed.to_str().unwrap()]);
    assert!(
        out.contains("torn tail of")
            && out.contains("at offset 0")
            && out.contains("no valid record"),
        "{out}"
    );
    let v = json_lines(&stdout(&[
        "wal",
        "dump",
        renamed.to_str().unwrap(),
        "--json",
    ]));
    let end = &v.last().unwrap()["end"];
    assert_eq!(end["offset"], 0);
    assert!(
        end["detail"].as_str().unwrap().contains("no valid record"),
        "{end}"
    );
}

#[test]
fn wal_dump_shows_sync_marks_and_pages_lost_by_a_power_loss() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path()).unwrap();
    let value = [b'v'; 100];
    for i in 0..100u32 {
        db.insert(format!("key{i:05}"), value).unwrap();
    }
    db.sync().unwrap();
    for i in 100..300u32 {
        db.insert(format!("key{i:05}"), value).unwrap();
    }
    // The WAL as a power loss could leave it: page 5 (after the sync mark, ~14 KB in) lost,
    // later pages written. A copy under the same name, in another directory.
    let wal = common::files_with_ext(dir.path(), "wal").pop().unwrap();
    let mut bytes = std::fs::read(&wal).unwrap();
    bytes[5 * 4096..6 * 4096].fill(0);
    let image = tempfile::tempdir().unwrap();
    let copy = image.path().join(wal.file_name().unwrap());
    std::fs::write(&copy, &bytes).unwrap();
    drop(db);
    let c = copy.to_str().unwrap();
    let out = stdout(&["wal", "dump", c]);
    assert_eq!(out.matches("crc ok: sync mark").count(), 1, "{out}");
    assert!(
        out.contains("end: pages lost by a power loss at offset"),
        "{out}"
    );
    let recs = json_lines(&stdout(&["wal", "dump", c, "--json"]));
    let end = &recs.last().unwrap()["end"];
    assert!(end["status"].as_str().unwrap().starts_with("pages lost"));
    let at = end["offset"].as_u64().unwrap();
    assert!((5 * 4096 - 200..6 * 4096).contains(&at), "{at}");
}

/// A damaged table does not end `db info`: its row names the damage, the other tables are
/// reported as before, and the command exits 1 (it exited 2 at the first bad table, telling
/// the operator to try again).
#[test]
fn db_info_reports_a_damaged_table_and_the_rest() {
    use common::cli::{run, silt};
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open_with(dir.path(), Options::default().auto_compaction(false)).unwrap();
    for t in 0..3u32 {
        for i in (t..300).step_by(3) {
            db.insert(format!("k{i:05}"), format!("v{i}")).unwrap();
        }
        db.flush().unwrap();
    }
    drop(db);
    let mut tables = common::files_with_ext(dir.path(), "sst");
    tables.sort();
    // The footer's magic gone: the table does not open.
    let bad = &tables[1];
    let mut bytes = std::fs::read(bad).unwrap();
    let n = bytes.len();
    bytes[n - 8..].fill(0);
    std::fs::write(bad, &bytes).unwrap();
    let (out, err) = run(silt().args(["db", "info", "--json"]).arg(dir.path()), 1);
    assert!(err.contains("1 table"), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let rows = v["levels"][0]["table_list"].as_array().unwrap();
    assert_eq!(rows.len(), 3, "{out}");
    let damaged: Vec<_> = rows.iter().filter(|r| !r["damage"].is_null()).collect();
    assert_eq!(damaged.len(), 1, "{out}");
    assert_eq!(damaged[0]["filter_kind"], "damaged");
    let name = bad.file_name().unwrap().to_str().unwrap();
    assert!(
        damaged[0]["damage"].as_str().unwrap().contains(name),
        "{out}"
    );
    assert!(rows
        .iter()
        .filter(|r| r["damage"].is_null())
        .all(|r| r["filter_kind"] == "bloom"));
    let (text, _) = run(silt().args(["db", "info"]).arg(dir.path()), 1);
    assert!(text.contains("DAMAGED"), "{text}");
    // A table the file system will not read (a directory in its place) is unreadable, not
    // damaged: its bytes may be whole.
    let other = &tables[2];
    std::fs::remove_file(other).unwrap();
    std::fs::create_dir(other).unwrap();
    let (out, err) = run(silt().args(["db", "info", "--json"]).arg(dir.path()), 1);
    assert!(err.contains("2 table"), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let rows = v["levels"][0]["table_list"].as_array().unwrap();
    let kinds: Vec<_> = rows
        .iter()
        .map(|r| r["filter_kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == "unreadable").count(),
        1,
        "{out}"
    );
    assert_eq!(
        kinds.iter().filter(|k| **k == "damaged").count(),
        1,
        "{out}"
    );
    let unreadable = rows
        .iter()
        .find(|r| r["filter_kind"] == "unreadable")
        .unwrap();
    let other_name = other.file_name().unwrap().to_str().unwrap();
    assert!(
        unreadable["damage"].as_str().unwrap().contains(other_name),
        "{out}"
    );
    let (text, _) = run(silt().args(["db", "info"]).arg(dir.path()), 1);
    assert!(
        text.contains("UNREADABLE") && text.contains("DAMAGED"),
        "{text}"
    );
    std::fs::remove_dir(other).unwrap();
    // A table missing (a writer compacted it away meanwhile) is still "try again": status 2.
    std::fs::remove_file(bad).unwrap();
    let (_, err) = run(silt().args(["db", "info"]).arg(dir.path()), 2);
    assert!(err.contains("try again"), "{err}");
}
