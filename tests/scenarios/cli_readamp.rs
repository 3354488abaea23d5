//! `silt readamp`: the default run reads a steady-state tree (a load, then as many random
//! overwrites as keys) and `--overwrites 0` the young tree a single load leaves; every setting
//! names its policy, an unfiltered absent get reads one block per table it meets, and the
//! default policy's filters skip nearly all of them.
use crate::common;

use common::cli::json;
use serde_json::Value;

fn readamp(extra: &[&str]) -> Value {
    let mut args = vec![
        "readamp",
        "--keys",
        "40000",
        "--reads",
        "4000",
        "--memtable-size",
        "262144",
        "--level-base-size",
        "1048576",
        "--target-table-size",
        "262144",
        "--bits-per-key",
        "0",
        "hybrid:10",
    ];
    args.extend_from_slice(extra);
    json(&args)
}

fn absent_row(setting: &Value) -> &Value {
    setting["reads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["kind"] == "absent_in_range")
        .expect("an absent-in-range row")
}

#[test]
fn default_run_reads_a_steady_state_tree() {
    let steady = readamp(&[]);
    let young = readamp(&["--overwrites", "0"]);
    assert_eq!(
        steady["overwrites"], 40000,
        "default: as many overwrites as keys"
    );
    assert_eq!(young["overwrites"], 0);

    let policies: Vec<&str> = steady["settings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["setting"]["policy"].as_str().unwrap())
        .collect();
    assert_eq!(policies, ["none", "hybrid"]);

    let tables = |r: &Value, i: usize| {
        absent_row(&r["settings"][i])["tables_considered_per_get"]
            .as_f64()
            .unwrap()
    };
    let blocks = |r: &Value, i: usize| {
        absent_row(&r["settings"][i])["data_blocks_per_get"]
            .as_f64()
            .unwrap()
    };
    // Levels that overlap: an absent key inside the range meets more than one table on average.
    assert!(tables(&steady, 0) > 1.3, "{}", tables(&steady, 0));
    assert!(tables(&young, 0) > 1.0, "{}", tables(&young, 0));
    // Without filters every table considered costs a block; the default policy skips them.
    assert!((blocks(&steady, 0) - tables(&steady, 0)).abs() < 1e-9);
    assert!(blocks(&steady, 1) < 0.05, "{}", blocks(&steady, 1));
}
