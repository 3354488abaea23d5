//! `silt sst info|filter|dump|verify` on tables built by the test.
mod common;

use common::cli::{json, json_lines, run, silt, stdout};
use serde_json::Value;

#[test]
fn info_reports_footer_layout_properties_and_filter() {
    let dir = tempfile::tempdir().unwrap();
    let sst = common::build_tables(dir.path(), 2000, 10.0);
    let p = sst.to_str().unwrap();
    let v = json(&["sst", "info", p]);
    assert_eq!(v["format_version"], 1);
    assert_eq!(v["magic"], "siltSST1");
    assert_eq!(v["entries"], 2000);
    assert_eq!(v["deletions"], 0);
    assert_eq!(v["smallest_key"], "key00000");
    assert_eq!(v["largest_key"], "key01999");
    assert_eq!(v["min_seq"], 1);
    assert_eq!(v["max_seq"], 2000);
    let blocks = v["blocks"].as_array().unwrap();
    let data = blocks.iter().filter(|b| b["kind"] == "data").count() as u64;
    assert_eq!(data, v["data_blocks"].as_u64().unwrap());
    for kind in ["filter", "index", "properties"] {
        assert_eq!(
            blocks.iter().filter(|b| b["kind"] == kind).count(),
            1,
            "{kind}"
        );
    }
    // The layout tiles the file: each block starts where the previous one ended.
    let mut at = 0;
    for b in blocks {
        assert_eq!(b["offset"].as_u64().unwrap(), at);
        at += b["length"].as_u64().unwrap();
    }
    assert_eq!(at + 64, v["file_size"].as_u64().unwrap());
    assert_eq!(v["filter"]["keys"], 2000);
    assert_eq!(v["filter"]["kind"], "blocked-bloom-512");

    let text = stdout(&["sst", "info", p]);
    assert!(
        text.contains("entries         2000 (0 tombstones, 2000 distinct keys)"),
        "{text}"
    );
    assert!(text.contains("key range       key00000 .. key01999"));
    assert!(text.contains("footer          format version 1, magic \"siltSST1\""));
}

#[test]
fn filter_shows_parameters_and_measured_rate_matches_prediction() {
    let dir = tempfile::tempdir().unwrap();
    let sst = common::build_tables(dir.path(), 20_000, 10.0);
    let p = sst.to_str().unwrap();
    let v = json(&[
        "sst",
        "filter",
        p,
        "--measure",
        "200000",
        "--key",
        "key00042",
        "--key",
        "nope",
    ]);
    assert_eq!(v["marker"], "0xf1");
    assert_eq!(v["kind"], 1);
    assert_eq!(v["version"], 1);
    assert_eq!(v["hash"], "xxh3-64");
    assert_eq!(v["seed"], 0);
    assert_eq!(v["keys"], 20_000);
    assert_eq!(v["lines"], 391); // ceil(20000 * 10 / 512)
    assert_eq!(v["bits"], 391 * 512);
    assert_eq!(v["probes"], 6);
    assert_eq!(v["crc_ok"], true);
    let fill = v["fill_ratio"].as_f64().unwrap();
    assert!((0.4..0.5).contains(&fill), "{fill}");
    let predicted = v["predicted_fpr"].as_f64().unwrap();
    assert!((predicted - 0.0095).abs() < 0.0005, "{predicted}");
    let measured = v["measured"]["fpr"].as_f64().unwrap();
    // 200k probes at ~1%: standard deviation ~0.022% absolute.
    assert!(
        (measured - predicted).abs() < 0.001,
        "measured {measured} predicted {predicted}"
    );
    let from_lines = v["fpr_from_line_fill"].as_f64().unwrap();
    assert!(
        (from_lines - predicted).abs() / predicted < 0.15,
        "{from_lines}"
    );
    assert!(
        v["set_bits_per_line_min"].as_u64().unwrap()
            <= v["set_bits_per_line_max"].as_u64().unwrap()
    );
    let hist: u64 = v["histogram"]["counts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_u64().unwrap())
        .sum();
    assert_eq!(hist, 391);
    let keys = v["keys_probed"].as_array().unwrap();
    assert_eq!(keys[0]["verdict"], "maybe present");
    assert_eq!(keys[0]["in_table"], true);
    assert_eq!(keys[0]["probes"].as_array().unwrap().len(), 6);
    assert!(keys[0]["probes"]
        .as_array()
        .unwrap()
        .iter()
        .all(|p| p[1] == true));
    assert_eq!(keys[1]["in_table"], false);

    let text = stdout(&["sst", "filter", p, "--key", "key00042"]);
    for needle in [
        "keys (n)             20000",
        "probes (k)           6",
        "(ok)",
        "set bits per line",
        "maybe present",
        "in table: yes",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
}

#[test]
fn dump_streams_records_with_bounds_and_tombstones() {
    let dir = tempfile::tempdir().unwrap();
    common::build_tables(dir.path(), 100, 10.0);
    let tables = common::files_with_ext(dir.path(), "sst");
    let second = tables[1].to_str().unwrap();
    let out = stdout(&["sst", "dump", second]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 10);
    assert!(
        lines[0].starts_with("key00000 @") && lines[0].ends_with("DELETED"),
        "{}",
        lines[0]
    );
    let first = tables[0].to_str().unwrap();
    let out = stdout(&[
        "sst", "dump", first, "--from", "key00010", "--to", "key00013",
    ]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        vec![
            "key00010 @11 => value-10",
            "key00011 @12 => value-11",
            "key00012 @13 => value-12"
        ]
    );
    let out = stdout(&["sst", "dump", first, "--limit", "2", "--hex"]);
    assert_eq!(
        out.lines().next().unwrap(),
        "6b65793030303030 @1 => 76616c75652d30"
    );
    assert_eq!(out.lines().count(), 2);
    let recs = json_lines(&stdout(&["sst", "dump", first, "--limit", "3", "--json"]));
    assert_eq!(recs.len(), 3);
    assert_eq!(recs[2]["key"], "key00002");
    assert_eq!(recs[2]["tombstone"], false);
}

#[test]
fn verify_passes_clean_tables_and_locates_damage() {
    let dir = tempfile::tempdir().unwrap();
    let sst = common::build_tables(dir.path(), 3000, 10.0);
    let p = sst.to_str().unwrap();
    let out = stdout(&["sst", "verify", p]);
    assert!(out.starts_with("OK "), "{out}");
    // Damage the second data block.
    let v = json(&["sst", "info", p]);
    let second = v["blocks"][1]["offset"].as_u64().unwrap() as usize;
    let mut bytes = std::fs::read(&sst).unwrap();
    bytes[second + 20] ^= 0x04;
    std::fs::write(&sst, &bytes).unwrap();
    let (out, _) = run(silt().args(["sst", "verify", p]), 1);
    assert!(
        out.contains(&format!("at offset {second}: data block checksum mismatch")),
        "{out}"
    );
    let (out, _) = run(silt().args(["sst", "verify", p, "--json"]), 1);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["ok"], false);
    assert_eq!(v["problems"][0]["offset"], second as u64);
}
