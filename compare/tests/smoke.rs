//! A small run of every workload on every engine this build has: each engine's process
//! reports every workload, with plausible figures, and the Markdown and JSON outputs agree.

use std::process::Command;

#[test]
fn every_engine_runs_every_workload() {
    let out = tempfile_dir();
    let status = Command::new(env!("CARGO_BIN_EXE_siltdb-compare"))
        .args([
            "--keys",
            "3000",
            "--reads",
            "2000",
            "--threads",
            "2",
            "--out",
        ])
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success());
    let jsonl = std::fs::read_to_string(out.join("results.jsonl")).unwrap();
    let rows: Vec<serde_json::Value> = jsonl
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut engines: Vec<&str> = vec!["siltdb", "siltdb-uniform"];
    if cfg!(feature = "fjall") {
        engines.push("fjall");
    }
    if cfg!(feature = "sled") {
        engines.push("sled");
    }
    // 14 workloads per engine.
    assert_eq!(rows.len(), engines.len() * 14);
    for e in &engines {
        for w in [
            "fillseq",
            "fillrandom",
            "readrandom",
            "readmissing",
            "ycsb-e",
            "verify",
        ] {
            let r = rows
                .iter()
                .find(|r| r["engine"] == *e && r["workload"] == w)
                .unwrap_or_else(|| panic!("{e} {w} missing"));
            assert!(r["ops"].as_u64().unwrap() > 0, "{e} {w}");
            assert!(r["ops_per_sec"].as_f64().unwrap() > 0.0, "{e} {w}");
            assert!(r["p99_us"].as_f64().unwrap() >= r["p50_us"].as_f64().unwrap());
        }
        // siltdb counts its block reads; the others do not say.
        let rr = rows
            .iter()
            .find(|r| r["engine"] == *e && r["workload"] == "readrandom")
            .unwrap();
        assert_eq!(
            rr["blocks_per_get"].is_null(),
            !e.starts_with("siltdb"),
            "{e}"
        );
    }
    let md = std::fs::read_to_string(out.join("results.md")).unwrap();
    assert!(md.contains("| ycsb-a | siltdb |"));
    for group in ["writes", "reads", "ycsb"] {
        let svg = std::fs::read_to_string(out.join(format!("chart-{group}.svg"))).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.contains("siltdb-uniform"),
            "{group}"
        );
    }
    // The databases are removed after the run.
    assert!(!out.join("siltdb").exists());
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn a_scaling_run_reports_every_size_with_siltdb_read_path_figures() {
    let out = tempfile_dir();
    let status = Command::new(env!("CARGO_BIN_EXE_siltdb-compare"))
        .args([
            "--engines",
            "siltdb",
            "--workloads",
            "fillrandom,readrandom,readmissing",
            "--reads",
            "1000",
            "--memtable-mib",
            "1",
            "--scale",
            "2000,60000",
            "--out",
        ])
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success());
    let jsonl = std::fs::read_to_string(out.join("results.jsonl")).unwrap();
    let rows: Vec<serde_json::Value> = jsonl
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 6, "3 workloads at 2 sizes");
    for keys in [2000u64, 60000] {
        for w in ["fillrandom", "readrandom", "readmissing"] {
            let r = rows
                .iter()
                .find(|r| r["keys"].as_u64() == Some(keys) && r["workload"] == w)
                .unwrap_or_else(|| panic!("{keys} {w} missing"));
            assert!(r["levels"].as_str().is_some(), "{keys} {w}");
            assert!(r["index_mib"].as_f64().is_some(), "{keys} {w}");
        }
    }
    // At 60,000 keys (7 MB, 1 MiB memtables) the data is in tables: a present get considers
    // table for most keys, an absent one probes filters and almost never reads a block.
    let at = |w: &str| {
        rows.iter()
            .find(|r| r["keys"].as_u64() == Some(60000) && r["workload"] == w)
            .unwrap()
    };
    assert!(at("readrandom")["tables_per_get"].as_f64().unwrap() > 0.5);
    assert!(at("readmissing")["filter_probes_per_get"].as_f64().unwrap() > 0.0);
    assert!(at("readmissing")["blocks_per_get"].as_f64().unwrap() < 0.1);
    let md = std::fs::read_to_string(out.join("scaling.md")).unwrap();
    assert!(
        md.contains("| 2000 | siltdb |") && md.contains("| 60000 | siltdb |"),
        "{md}"
    );
    let svg = std::fs::read_to_string(out.join("chart-scaling.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("siltdb readmissing"));
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn bad_arguments_are_refused() {
    let out = tempfile_dir();
    for args in [
        vec!["--key-size", "8"],
        vec!["--workloads", "nosuchworkload"],
        vec!["--engines", "nosuchengine", "--keys", "10"],
    ] {
        let o = Command::new(env!("CARGO_BIN_EXE_siltdb-compare"))
            .args(&args)
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        assert!(!o.status.success(), "{args:?}");
        assert!(!o.stderr.is_empty(), "{args:?}");
    }
    let _ = std::fs::remove_dir_all(&out);
}

fn tempfile_dir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!(
        "siltdb-compare-test-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    d
}
