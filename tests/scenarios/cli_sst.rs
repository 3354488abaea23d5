//! `silt sst info|filter|dump|verify` on tables built by the test.
use crate::common;

use common::cli::{json, json_lines, run, silt, status_into_closed_pipe, stdout};
use serde_json::Value;
use siltdb::inspect::filter::fuse_bits_per_key;
use siltdb::{Db, FilterPolicy, LevelFilter, Options};
use std::path::{Path, PathBuf};

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
    assert!(v["replayed_wals"].is_null(), "a flush's table");

    let text = stdout(&["sst", "info", p]);
    assert!(
        text.contains("entries         2000 (0 tombstones, 2000 distinct keys)"),
        "{text}"
    );
    assert!(text.contains("key range       key00000 .. key01999"));
    assert!(text.contains("footer          format version 1, magic \"siltSST1\""));
}

/// A table an open wrote from the WALs it replayed says which (the mark the next open's
/// orphan check reads).
#[test]
fn info_names_the_wals_a_replay_wrote_the_table_from() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path()).unwrap();
    db.insert("k", "v").unwrap();
    db.close().unwrap(); // nothing flushed: the next open replays the WAL
    let wal = common::files_with_ext(dir.path(), "wal").remove(0);
    let n: u64 = wal.file_stem().unwrap().to_str().unwrap().parse().unwrap();
    Db::open(dir.path()).unwrap().close().unwrap();
    let sst = common::files_with_ext(dir.path(), "sst").remove(0);
    let p = sst.to_str().unwrap();
    let v = json(&["sst", "info", p]);
    assert_eq!(v["replayed_wals"], serde_json::json!([n, n]));
    let text = stdout(&["sst", "info", p]);
    assert!(
        text.contains(&format!(
            "written by      an open's replay of WALs {n} .. {n}"
        )),
        "{text}"
    );
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
    assert_eq!(status_into_closed_pipe(&["sst", "verify", p]), Some(0));
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
    // A reader that closed the pipe (`| head -0`) cuts the report short, not the verdict.
    for args in [&["sst", "verify", p][..], &["sst", "verify", p, "--json"]] {
        assert_eq!(status_into_closed_pipe(args), Some(1), "{args:?}");
    }
}

/// One table of `n` keys `key00000..` (no deletions) written with `fingerprint_bits`-bit
/// binary fuse filters on every level, L0 included.
/// One table of `n` keys written under `kind` everywhere.
fn table_with(dir: &Path, n: u32, kind: LevelFilter) -> PathBuf {
    let db = Db::open_with(
        dir,
        Options::default()
            .filter_policy(FilterPolicy::Levels(vec![kind]))
            .auto_compaction(false),
    )
    .unwrap();
    for i in 0..n {
        db.insert(format!("key{i:05}"), format!("value-{i}"))
            .unwrap();
    }
    db.flush().unwrap();
    db.close().unwrap();
    let mut tables = common::files_with_ext(dir, "sst");
    assert_eq!(tables.len(), 1, "{tables:?}");
    tables.remove(0)
}

fn fuse_table(dir: &Path, n: u32, fingerprint_bits: u8) -> PathBuf {
    table_with(dir, n, LevelFilter::Fuse { fingerprint_bits })
}

fn u64_of(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a u64: {v}"))
}

/// The checks of `silt sst filter --json` on a fuse filter over `n` keys.
fn check_fuse_filter_json(v: &Value, n: u64, bits: u64) {
    assert_eq!(v["marker"], "0xf1");
    assert_eq!(v["kind"], 2);
    assert_eq!(v["version"], 1);
    assert_eq!(v["hash"], "xxh3-64");
    assert_eq!(v["crc_ok"], true);
    let f = &v["fuse"];
    assert_eq!(f["fingerprint_bits"], bits);
    assert_eq!(f["arity"], 4);
    // Geometry: a power-of-two segment length, and `arity - 1` segments beyond those a key's
    // first slot may fall in.
    let seg_len = u64_of(&f["segment_length"]);
    assert_eq!(seg_len, 1 << u64_of(&f["segment_length_log2"]));
    let segs = u64_of(&f["segment_count"]);
    let slots = u64_of(&f["array_length"]);
    assert!(segs >= 1, "{f}");
    assert_eq!(slots, (segs + 3) * seg_len);
    assert!(slots >= n, "{f}");
    assert_eq!(u64_of(&f["bytes"]), slots * bits / 8);
    assert_eq!(u64_of(&v["block_bytes"]), slots * bits / 8 + 28);
    assert_eq!(v["bits"], slots * bits);
    assert_eq!(f["keys"], n);
    assert_eq!(v["keys"], n);
    let bpk = f["bits_per_key"].as_f64().unwrap();
    assert_eq!(v["bits_per_key"].as_f64().unwrap(), bpk);
    let want = fuse_bits_per_key(n, bits as u32).unwrap();
    assert!((bpk - want).abs() < 1e-9, "{bpk} bits/key, expected {want}");
    let fpr = (-(bits as f64)).exp2();
    assert_eq!(f["predicted_fpr"].as_f64().unwrap(), fpr);
    assert_eq!(v["predicted_fpr"].as_f64().unwrap(), fpr);
    let seed = f["seed"].as_str().unwrap();
    assert!(
        seed.len() == 18 && u64::from_str_radix(&seed[2..], 16).is_ok(),
        "{seed}"
    );
    let zeros = f["zero_fraction"].as_f64().unwrap();
    assert!((0.0..0.5).contains(&zeros), "{zeros}");
    // Nothing Bloom-only is reported as if it meant something for a fuse filter.
    for field in [
        "lines",
        "probes",
        "seed",
        "fill_ratio",
        "fpr_from_fill_ratio",
        "fpr_from_line_fill",
        "standard_bloom_fpr",
        "set_bits_per_line_min",
        "histogram",
    ] {
        assert!(v[field].is_null(), "{field}: {}", v[field]);
    }
}

/// The checks of one `--key` probe of a fuse filter: one slot per segment of `arity`
/// consecutive segments, and a verdict that follows from the fingerprints.
fn check_fuse_key(k: &Value, f: &Value) -> bool {
    assert!(k["line"].is_null() && k["probes"].is_null(), "{k}");
    let p = &k["fuse"];
    let seg_len = u64_of(&f["segment_length"]);
    let slots: Vec<u64> = p["slots"].as_array().unwrap().iter().map(u64_of).collect();
    assert_eq!(slots.len() as u64, u64_of(&f["arity"]));
    for (i, s) in slots.iter().enumerate() {
        assert!(*s < u64_of(&f["array_length"]), "{k}");
        assert_eq!(s / seg_len, slots[0] / seg_len + i as u64, "{k}");
    }
    let stored: Vec<u64> = p["stored"].as_array().unwrap().iter().map(u64_of).collect();
    let fp = u64_of(&p["fingerprint"]);
    let limit = 1u64 << u64_of(&f["fingerprint_bits"]);
    assert!(fp < limit && stored.iter().all(|&s| s < limit), "{k}");
    assert_eq!(stored.len(), slots.len());
    let matches = fp == stored.iter().fold(0, |a, &b| a ^ b);
    let verdict = if matches {
        "maybe present"
    } else {
        "definitely absent"
    };
    assert_eq!(k["verdict"], verdict, "{k}");
    matches
}

#[test]
fn filter_shows_fuse_geometry_fingerprints_and_measured_rate() {
    let n = 20_000u64;
    for bits in [8u8, 16] {
        let dir = tempfile::tempdir().unwrap();
        let sst = fuse_table(dir.path(), n as u32, bits);
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
        let bits = u64::from(bits);
        check_fuse_filter_json(&v, n, bits);
        let keys = v["keys_probed"].as_array().unwrap();
        assert_eq!(keys[0]["in_table"], true);
        assert!(check_fuse_key(&keys[0], &v["fuse"]), "{}", keys[0]);
        assert_eq!(keys[1]["in_table"], false);
        check_fuse_key(&keys[1], &v["fuse"]);
        // The keys and the probes are fixed, so the count is too: 8 bits expect 781 false
        // positives in 200,000 (sd 28), 16 bits 3.
        let m = &v["measured"];
        assert_eq!(m["probes"], 200_000);
        let fp = u64_of(&m["false_positives"]);
        let measured = m["fpr"].as_f64().unwrap();
        assert_eq!(measured, fp as f64 / 200_000.0);
        if bits == 8 {
            let ratio = measured / (1.0 / 256.0);
            assert!((0.8..1.2).contains(&ratio), "measured {measured}");
        } else {
            assert!(fp <= 20, "{fp} false positives");
        }

        let text = stdout(&["sst", "filter", p, "--key", "key00042"]);
        let f = &v["fuse"];
        for needle in [
            format!("binary fuse, 4-wise, {bits}-bit fingerprints"),
            format!("fingerprint bits     {bits}"),
            "arity                4".to_string(),
            format!("segment length       {}", f["segment_length"]),
            format!("segment count        {}", f["segment_count"]),
            format!("array length         {} slots", f["array_length"]),
            format!("seed                 {}", f["seed"].as_str().unwrap()),
            format!("keys (n)             {n}"),
            "zero fingerprints".to_string(),
            format!("FPR predicted        {:.4}%", 100.0 / (1u64 << bits) as f64),
            "(ok)".to_string(),
            "maybe present".to_string(),
            "slots [".to_string(),
            "in table: yes".to_string(),
        ] {
            assert!(text.contains(&needle), "missing {needle:?} in\n{text}");
        }
        for bloom_only in [
            "probes (k)",
            "lines of 512",
            "fill ratio",
            "set bits per line",
        ] {
            assert!(!text.contains(bloom_only), "{bloom_only:?} in\n{text}");
        }
    }
}

#[test]
fn info_summarises_a_fuse_filter() {
    let dir = tempfile::tempdir().unwrap();
    let sst = fuse_table(dir.path(), 3000, 16);
    let p = sst.to_str().unwrap();
    let v = json(&["sst", "info", p]);
    let f = &v["filter"];
    assert_eq!(f["kind"], "binary-fuse-16");
    assert_eq!(f["keys"], 3000);
    assert_eq!(f["fingerprint_bits"], 16);
    assert_eq!(f["arity"], 4);
    assert!(f["probes"].is_null(), "{f}");
    let slots = u64_of(&f["slots"]);
    assert_eq!(f["bits"], slots * 16);
    assert_eq!(u64_of(&f["bytes"]), slots * 2 + 28);
    assert_eq!(f["predicted_fpr"].as_f64().unwrap(), 1.0 / 65536.0);
    let bpk = f["bits_per_key"].as_f64().unwrap();
    assert!(
        (bpk - fuse_bits_per_key(3000, 16).unwrap()).abs() < 1e-9,
        "{bpk}"
    );
    let text = stdout(&["sst", "info", p]);
    let line = text.lines().find(|l| l.starts_with("filter ")).unwrap();
    assert!(
        line.contains("binary-fuse-16: 3000 keys, 16-bit fingerprints, 4-wise"),
        "{line}"
    );
    assert!(!line.contains("k="), "{line}");
}

/// The offset and contents size of a table's filter block.
fn filter_block(p: &str) -> (usize, usize) {
    let v = json(&["sst", "info", p]);
    let b = v["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["kind"] == "filter")
        .unwrap();
    (
        u64_of(&b["offset"]) as usize,
        u64_of(&b["length"]) as usize - 5,
    )
}

/// Recomputes the filter's own checksum and its block's, so that a forged field is what a
/// reader trips over.
fn reseal_filter(bytes: &mut [u8], at: usize, size: usize) {
    let block = &mut bytes[at..at + size];
    let crc = common::mask_crc(crc32fast::hash(&block[..size - 4]));
    block[size - 4..].copy_from_slice(&crc.to_le_bytes());
    let mut h = crc32fast::Hasher::new();
    h.update(&bytes[at..at + size + 1]);
    h.update(&(at as u64).to_le_bytes());
    let crc = common::mask_crc(h.finalize());
    bytes[at + size + 1..at + size + 5].copy_from_slice(&crc.to_le_bytes());
}

#[test]
fn damaged_fuse_filter_is_an_error_naming_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let sst = fuse_table(dir.path(), 3000, 8);
    let p = sst.to_str().unwrap();
    let (at, size) = filter_block(p);
    let good = std::fs::read(&sst).unwrap();
    let bad = dir.path().join("bad.sst");
    let b = bad.to_str().unwrap();

    // A flipped fingerprint: the filter is still shown, then its checksum is reported.
    let mut bytes = good.clone();
    bytes[at + 10] ^= 0x20;
    std::fs::write(&bad, &bytes).unwrap();
    let (out, err) = run(
        silt().args(["sst", "filter", b, "--json", "--measure", "100"]),
        2,
    );
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["crc_ok"], false);
    assert_eq!(v["kind"], 2);
    assert_eq!(v["fuse"]["fingerprint_bits"], 8);
    assert!(v["fuse"]["zero_fraction"].is_null() && v["measured"].is_null());
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!(
            "corrupt file {b} at offset {}: filter checksum mismatch",
            at + size - 4
        )),
        "{err}"
    );

    // Well-sealed trailers whose geometry does not fit the array: an error at the field.
    let trailer = at + size - 28;
    type Forge = Box<dyn Fn(&mut [u8])>;
    let cases: Vec<(usize, Forge)> = vec![
        (8, Box::new(|t: &mut [u8]| t[8..12].fill(0))),
        (6, Box::new(|t: &mut [u8]| t[6] = 200)),
        (
            8,
            Box::new(|t: &mut [u8]| t[8..12].copy_from_slice(&1000u32.to_le_bytes())),
        ),
    ];
    for (field, forge) in cases {
        let mut bytes = good.clone();
        forge(&mut bytes[trailer..trailer + 28]);
        reseal_filter(&mut bytes, at, size);
        std::fs::write(&bad, &bytes).unwrap();
        for cmd in ["filter", "info"] {
            let (_, err) = run(silt().args(["sst", cmd, b]), 2);
            assert_eq!(err.lines().count(), 1, "{err}");
            assert!(
                err.contains(&format!("corrupt file {b} at offset {}: ", trailer + field)),
                "{cmd} at +{field}: {err}"
            );
        }
    }
}

#[test]
fn a_filter_whose_checksum_fails_leaves_in_table_unknown() {
    // A flipped Bloom payload byte: the filter's checksum fails, so the table does not open
    // and nothing says whether it holds a key; a key it holds must not be shown as absent.
    let dir = tempfile::tempdir().unwrap();
    let sst = common::build_tables(dir.path(), 2000, 10.0);
    let p = sst.to_str().unwrap();
    let (at, _) = filter_block(p);
    let mut bytes = std::fs::read(&sst).unwrap();
    bytes[at + 10] ^= 0x20;
    let bad = dir.path().join("bad.sst");
    std::fs::write(&bad, &bytes).unwrap();
    let b = bad.to_str().unwrap();

    let (out, _) = run(silt().args(["sst", "filter", b, "--key", "key00042"]), 2);
    let probe = out
        .lines()
        .find(|l| l.starts_with("key "))
        .expect("a key line");
    assert!(probe.contains("in table: unknown"), "{out}");
    assert!(!out.contains("in table: no"), "{out}");

    let (out, _) = run(
        silt().args(["sst", "filter", b, "--key", "key00042", "--json"]),
        2,
    );
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["crc_ok"], false);
    assert!(v["keys_probed"][0]["in_table"].is_null(), "{v}");

    // A reader that closed the pipe early does not turn the known corruption into success.
    for args in [&["sst", "filter", b][..], &["sst", "filter", b, "--json"]] {
        assert_eq!(status_into_closed_pipe(args), Some(2), "{args:?}");
    }
}

#[test]
fn ribbon_filter_shows_geometry_key_equations_and_measured_rate() {
    let dir = tempfile::tempdir().unwrap();
    let sst = table_with(
        dir.path(),
        20_000,
        LevelFilter::Ribbon { bits_per_key: 7.25 },
    );
    let p = sst.to_str().unwrap();
    let (at, size) = filter_block(p);
    let v = json(&[
        "sst",
        "filter",
        p,
        "--key",
        "key00042",
        "--key",
        "nope",
        "--measure",
        "200000",
    ]);
    assert_eq!(v["kind"], 3);
    assert!(
        v["kind_name"].as_str().unwrap().starts_with("Ribbon"),
        "{v}"
    );
    let r = &v["ribbon"];
    assert_eq!(r["width"], 128);
    assert_eq!(r["keys"], 20_000);
    assert_eq!(u64_of(&r["slots"]), u64_of(&r["blocks"]) * 128);
    assert_eq!(u64_of(&r["bytes"]) as usize, size - 28);
    let bpk = r["bits_per_key"].as_f64().unwrap();
    assert!((bpk - 7.25).abs() < 0.05, "{bpk}");
    let columns = u64_of(&r["columns"]);
    assert!((5..=7).contains(&columns), "{r}");
    let predicted = r["predicted_fpr"].as_f64().unwrap();
    assert_eq!(v["predicted_fpr"].as_f64().unwrap(), predicted);
    let measured = v["measured"]["fpr"].as_f64().unwrap();
    assert!(
        (measured / predicted - 1.0).abs() < 0.1,
        "{measured} vs {predicted}"
    );
    assert!(v["probes"].is_null() && v["lines"].is_null() && v["fuse"].is_null());
    let present = &v["keys_probed"][0];
    assert_eq!(present["verdict"], "maybe present");
    assert_eq!(present["in_table"], true);
    let cols = present["ribbon"]["columns_match"].as_array().unwrap();
    assert!(
        !cols.is_empty() && cols.iter().all(|c| c == true),
        "{present}"
    );
    assert_eq!(v["keys_probed"][1]["in_table"], false);

    let text = stdout(&["sst", "filter", p, "--key", "key00042"]);
    for want in [
        "coefficient width    128 bits",
        "result bits          ",
        "start slot ",
        "columns matching [",
    ] {
        assert!(text.contains(want), "{want:?} in\n{text}");
    }
    let info = json(&["sst", "info", p]);
    assert_eq!(info["filter"]["kind"], "ribbon-128");
    let c = info["filter"]["columns"].as_f64().unwrap();
    assert!(c > columns as f64 && c <= columns as f64 + 1.0, "{c}");

    // A well-sealed trailer whose geometry does not fit the payload: an error at the field.
    let mut bytes = std::fs::read(&sst).unwrap();
    let trailer = at + size - 28;
    bytes[trailer + 8..trailer + 12].copy_from_slice(&1u32.to_le_bytes());
    reseal_filter(&mut bytes, at, size);
    let bad = dir.path().join("bad.sst");
    std::fs::write(&bad, &bytes).unwrap();
    let b = bad.to_str().unwrap();
    let (_, err) = run(silt().args(["sst", "filter", b]), 2);
    assert!(
        err.contains(&format!("corrupt file {b} at offset {}: ", trailer + 8)),
        "{err}"
    );
}
