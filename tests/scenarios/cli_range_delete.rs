//! The CLI shows range tombstones: `silt sst info` and `silt sst dump` list a table's,
//! `silt wal dump` shows a range delete record, `silt db get --explain` says a key is covered.
use crate::common;

use common::cli::{json, json_lines, stdout};
use siltdb::{Db, Options};

#[test]
fn range_tombstones_are_shown_by_sst_wal_and_db_commands() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    {
        let db = Db::open_with(dir.path(), Options::default().auto_compaction(false)).unwrap();
        for i in 0..100u32 {
            db.insert(format!("k{i:03}"), "v").unwrap();
        }
        db.flush().unwrap();
        db.remove_range("k010".."k020").unwrap();
        db.remove_range("k090"..).unwrap();
        db.insert("k050", "kept").unwrap();
        db.flush().unwrap();
        // One more, left in the WAL.
        db.remove_range("k030"..="k031").unwrap();
    }
    let tables = common::files_with_ext(dir.path(), "sst");
    let newest = tables.last().unwrap().to_str().unwrap();

    let v = json(&["sst", "info", newest]);
    assert_eq!(v["format_version"], 2);
    assert_eq!(v["range_deletions"], 2);
    assert_eq!(v["entries"], 1);
    let rts = v["range_tombstones"].as_array().unwrap();
    assert_eq!(
        (rts[0]["start"].as_str(), rts[0]["end"].as_str()),
        (Some("k010"), Some("k020"))
    );
    assert!(rts[1]["end"].is_null(), "{}", rts[1]);
    let kinds: Vec<&str> = v["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["kind"].as_str().unwrap())
        .collect();
    assert!(kinds.contains(&"range-deletion"), "{kinds:?}");
    let older = json(&["sst", "info", tables[0].to_str().unwrap()]);
    assert_eq!(older["format_version"], 1);
    assert_eq!(older["range_deletions"], 0);

    let out = stdout(&["sst", "dump", newest]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "k050 @103 => kept");
    assert!(
        lines[1].starts_with("[k010, k020) @101 RANGE DELETED"),
        "{out}"
    );
    assert!(lines[2].contains("<end of keys>"), "{out}");
    // --limit counts range tombstones as records: one entry and one tombstone, of three.
    let out = stdout(&["sst", "dump", newest, "--limit", "2"]);
    assert_eq!(out.lines().count(), 2, "{out}");
    assert_eq!(stdout(&["sst", "dump", newest, "--limit", "0"]), "");
    let recs = json_lines(&stdout(&[
        "sst", "dump", newest, "--json", "--from", "k095",
    ]));
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert_eq!(recs[0]["range_delete"]["start"], "k090");

    let wal = common::files_with_ext(dir.path(), "wal");
    let w = wal.last().unwrap().to_str().unwrap();
    let out = stdout(&["wal", "dump", w]);
    assert!(out.contains("range_delete [k030, k031\\x00)"), "{out}");
    let recs = json_lines(&stdout(&["wal", "dump", w, "--json"]));
    let op = recs
        .iter()
        .filter_map(|r| r["ops"].as_array())
        .flatten()
        .find(|o| o["op"] == "range_delete")
        .unwrap_or_else(|| panic!("{recs:?}"));
    assert_eq!(
        (op["key"].as_str(), op["end"].as_str()),
        (Some("k030"), Some("k031\\x00"))
    );

    let out = stdout(&["db", "get", d, "k015", "--explain"]);
    assert!(out.starts_with("(not found)"), "{out}");
    assert!(out.contains("covered by a range tombstone"), "{out}");
    let v = json(&["db", "get", d, "k031"]);
    assert_eq!(
        (v["found"].as_bool(), v["range_covered"].as_bool()),
        (Some(false), Some(true))
    );
    let v = json(&["db", "get", d, "k050"]);
    assert_eq!(v["value"], "kept");
}
