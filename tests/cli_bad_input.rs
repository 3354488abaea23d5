//! Files that are not SSTables, or damaged ones, get one clear line on stderr and status 2:
//! never a panic, a backtrace, or a huge allocation.
mod common;

use common::cli::{run, silt};

/// Runs every table command on `file` and checks the bad-input contract.
fn rejects(file: &std::path::Path, expect: &str) {
    for cmd in [
        vec!["sst", "info"],
        vec!["sst", "filter"],
        vec!["sst", "dump"],
        vec!["sst", "verify"],
    ] {
        let assert = silt().args(&cmd).arg(file).assert();
        let out = assert.get_output();
        let code = out.status.code().unwrap();
        let stderr = String::from_utf8(out.stderr.clone()).unwrap();
        // `verify` lists what it found on stdout and sums up on stderr.
        let said = format!("{}{stderr}", String::from_utf8(out.stdout.clone()).unwrap());
        assert!(
            code == 2 || (cmd[1] == "verify" && code == 1),
            "{cmd:?} on {expect}: exit {code}, stderr {stderr}"
        );
        assert_eq!(
            stderr.lines().count(),
            1,
            "{cmd:?}: one line, got {stderr:?}"
        );
        assert!(
            !stderr.contains("panicked") && !stderr.contains("internal error"),
            "{stderr}"
        );
        assert!(
            said.contains(expect),
            "{cmd:?}: expected {expect:?} in {said:?}"
        );
    }
}

#[test]
fn not_an_sstable() {
    let dir = tempfile::tempdir().unwrap();
    let sst = common::build_tables(dir.path(), 500, 10.0);
    let good = std::fs::read(&sst).unwrap();
    let bad = dir.path().join("bad.sst");

    std::fs::write(&bad, b"").unwrap();
    rejects(&bad, "too short to be an SSTable");
    std::fs::write(&bad, &good[good.len() - 40..]).unwrap();
    rejects(&bad, "too short to be an SSTable");
    let mut rng = common::Rng(3);
    let random: Vec<u8> = (0..5000).map(|_| rng.next() as u8).collect();
    std::fs::write(&bad, &random).unwrap();
    rejects(&bad, "at offset");
    // A WAL renamed to .sst.
    let wal = common::files_with_ext(dir.path(), "wal").pop().unwrap();
    std::fs::copy(&wal, &bad).unwrap();
    rejects(&bad, "SSTable");
    // Truncated table: the footer is gone.
    std::fs::write(&bad, &good[..good.len() - 10]).unwrap();
    rejects(&bad, "at offset");
}

#[test]
fn forged_footers() {
    let dir = tempfile::tempdir().unwrap();
    let sst = common::build_tables(dir.path(), 500, 10.0);
    let good = std::fs::read(&sst).unwrap();
    let bad = dir.path().join("bad.sst");
    type Forge = Box<dyn Fn(&mut [u8])>;
    let cases: Vec<(&str, Forge)> = vec![
        (
            "unsupported table format version 7",
            Box::new(|f: &mut [u8]| f[48..52].copy_from_slice(&7u32.to_le_bytes())),
        ),
        (
            "past the end",
            Box::new(|f: &mut [u8]| f[0..8].copy_from_slice(&(1u64 << 40).to_le_bytes())),
        ),
        (
            "past the end",
            Box::new(|f: &mut [u8]| f[8..16].copy_from_slice(&(1u64 << 63).to_le_bytes())),
        ),
        (
            "past the end",
            Box::new(|f: &mut [u8]| f[40..48].copy_from_slice(&u64::MAX.to_le_bytes())),
        ),
    ];
    for (expect, forge) in cases {
        let mut b = good.clone();
        common::forge_footer(&mut b, forge);
        std::fs::write(&bad, &b).unwrap();
        rejects(&bad, expect);
    }
    // A footer whose checksum no longer matches.
    let mut b = good.clone();
    let n = b.len();
    b[n - 60] ^= 1;
    std::fs::write(&bad, &b).unwrap();
    rejects(&bad, "footer checksum mismatch");
}

#[test]
fn missing_files_and_directories_say_so() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("absent.sst");
    let (_, err) = run(silt().args(["sst", "info"]).arg(&missing), 2);
    assert!(err.contains("not found"));
    for cmd in [vec!["db", "info"], vec!["manifest", "dump"]] {
        let (_, err) = run(silt().args(&cmd).arg(dir.path().join("nodb")), 2);
        assert_eq!(err.lines().count(), 1);
    }
    let (_, err) = run(silt().args(["db", "info"]).arg(dir.path()), 2);
    assert!(err.contains("no database"));
    let (_, err) = run(silt().args(["wal", "dump"]).arg(&missing), 2);
    assert!(err.contains("not found"));
}
