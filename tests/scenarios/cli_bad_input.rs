//! Files that are not SSTables, or damaged ones, get one clear line on stderr and status 2:
//! never a panic, a backtrace, or a huge allocation.
use crate::common;

use common::cli::{run, silt, status_into_closed_pipe};

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
            "larger than any table holds",
            Box::new(|f: &mut [u8]| f[40..48].copy_from_slice(&u64::MAX.to_le_bytes())),
        ),
        // A filter handle whose end wraps around 2^64 (`sst filter` reads it on its own).
        (
            "past the end",
            Box::new(|f: &mut [u8]| {
                f[16..24].copy_from_slice(&(u64::MAX - (1 << 40) - 3).to_le_bytes());
                f[24..32].copy_from_slice(&(1u64 << 40).to_le_bytes());
            }),
        ),
        (
            "past the end",
            Box::new(|f: &mut [u8]| {
                f[16..24].copy_from_slice(&0u64.to_le_bytes());
                f[24..32].copy_from_slice(&(u64::MAX - 4).to_le_bytes());
            }),
        ),
    ];
    for (expect, forge) in cases {
        let mut b = good.clone();
        common::forge_footer(&mut b, forge);
        std::fs::write(&bad, &b).unwrap();
        rejects(&bad, expect);
        // A table of a format version this build does not read is not a damaged table:
        // `verify` says so as bad input (status 2), not as corruption found (status 1).
        if expect.starts_with("unsupported") {
            run(silt().args(["sst", "verify"]).arg(&bad), 2);
        }
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
    // `--measure 0` measured nothing and printed a 0% rate over 0 keys.
    let (_, err) = run(
        silt()
            .args(["sst", "filter", "--measure", "0"])
            .arg(&missing),
        2,
    );
    assert!(err.contains("--measure"), "{err}");
}

#[test]
fn verify_reports_a_block_whose_checksum_passes_but_whose_keys_do_not_belong() {
    use siltdb::inspect::table::{BlockKind, TableReader};
    let dir = tempfile::tempdir().unwrap();
    let sst = common::build_tables(dir.path(), 2000, 10.0);
    let r = TableReader::open_file(&sst).unwrap();
    let data: Vec<_> = r
        .blocks()
        .into_iter()
        .filter(|b| b.kind == BlockKind::Data)
        .map(|b| b.handle)
        .collect();
    // Two data blocks of one size: the later one's bytes (trailer and all, so its checksum
    // holds) over the earlier one, whose index range its keys are past.
    let (a, b) = data
        .iter()
        .enumerate()
        .find_map(|(i, a)| {
            data[i + 1..]
                .iter()
                .find(|b| b.size == a.size)
                .map(|b| (*a, *b))
        })
        .expect("two data blocks of one size");
    drop(r);
    let good = std::fs::read(&sst).unwrap();
    let len = (a.size + 5) as usize;
    // The later block's bytes over the earlier one's, then the earlier one's over the later,
    // each with its trailer's checksum made for its new offset (docs/format.md section 5.2:
    // mask(crc32(contents ++ kind ++ offset))), so that only the keys give it away.
    for (from, to) in [(b, a), (a, b)] {
        let mut bytes = good.clone();
        let mut copy = good[from.offset as usize..from.offset as usize + len].to_vec();
        let mut h = crc32fast::Hasher::new();
        h.update(&copy[..len - 4]);
        h.update(&to.offset.to_le_bytes());
        let crc = h.finalize().rotate_right(15).wrapping_add(0xa282_ead8);
        copy[len - 4..].copy_from_slice(&crc.to_le_bytes());
        bytes[to.offset as usize..to.offset as usize + len].copy_from_slice(&copy);
        let bad = dir.path().join("swapped.sst");
        std::fs::write(&bad, &bytes).unwrap();
        let (out, _) = run(silt().args(["sst", "verify"]).arg(&bad), 1);
        assert!(out.contains("CORRUPT"), "{out}");
        assert!(!out.contains("checksum"), "the checksum should hold: {out}");
        let (out, _) = run(silt().args(["sst", "verify", "--json"]).arg(&bad), 1);
        let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(doc["ok"], false);
        // One problem, at a data block: the walk stopped there, so the properties' entry
        // count (which holds) is not compared with a partial count.
        let problems = doc["problems"].as_array().unwrap();
        assert_eq!(problems.len(), 1, "{out}");
        let at = problems[0]["offset"].as_u64().unwrap();
        assert!(data.iter().any(|h| h.offset == at), "{out}");
    }
}

#[test]
fn a_log_record_that_does_not_decode_fails_the_dump() {
    // A record framed right (its checksums hold) around a 1-byte payload: no WAL batch and
    // no manifest edit is that short. The header is `frame(b"x", 7)`'s, worked out apart from
    // the code (src/record.rs's known-answer test).
    let header = [
        144u8, 4, 138, 207, 1, 0, 0, 0, 1, 0, 0, 0, 137, 140, 216, 158,
    ];
    let mut record = header.to_vec();
    record.push(b'x');
    let dir = tempfile::tempdir().unwrap();
    let wal = dir.path().join("000007.wal");
    std::fs::write(&wal, &record).unwrap();
    let (out, err) = run(silt().args(["wal", "dump"]).arg(&wal), 2);
    assert!(out.contains("crc ok: MALFORMED"), "{out}");
    assert!(err.contains("at offset 0"), "{err}");
    run(silt().args(["wal", "dump", "--json"]).arg(&wal), 2);
    std::fs::write(dir.path().join("MANIFEST-000007"), &record).unwrap();
    std::fs::write(dir.path().join("CURRENT"), "MANIFEST-000007\n").unwrap();
    let (out, err) = run(silt().args(["manifest", "dump"]).arg(dir.path()), 2);
    assert!(out.contains("crc ok: MALFORMED"), "{out}");
    assert!(err.contains("at offset 0"), "{err}");
    // A reader that closed the pipe early (`| head -1`) cuts the dump short, not its
    // verdict.
    let (w, d) = (wal.to_str().unwrap(), dir.path().to_str().unwrap());
    for args in [
        &["wal", "dump", w][..],
        &["wal", "dump", w, "--json"],
        &["manifest", "dump", d],
        &["manifest", "dump", d, "--json"],
    ] {
        assert_eq!(status_into_closed_pipe(args), Some(2), "{args:?}");
    }
}

/// Runs `silt args...` with its stdout on `/dev/full`: every write fails with ENOSPC.
fn to_full_disk(args: &[&std::ffi::OsStr]) -> (Option<i32>, String) {
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_silt"))
        .args(args)
        .stdout(full)
        .output()
        .unwrap();
    (out.status.code(), String::from_utf8(out.stderr).unwrap())
}

#[test]
fn output_that_cannot_be_written_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let db = siltdb::Db::open(dir.path()).unwrap();
    db.insert("k", "v").unwrap();
    let wal = common::files_with_ext(dir.path(), "wal").pop().unwrap();
    // A table without a filter: `sst filter` says so in one line (once a `println!`, which
    // panicked on a failed write).
    let tables = tempfile::tempdir().unwrap();
    let unfiltered = common::build_tables(tables.path(), 100, 0.0);
    for args in [
        vec!["wal".as_ref(), "dump".as_ref(), wal.as_os_str()],
        vec!["sst".as_ref(), "filter".as_ref(), unfiltered.as_os_str()],
    ] {
        let (code, err) = to_full_disk(&args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(
            !err.contains("internal error") && !err.contains("panicked"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn wal_dump_refuses_a_manifest_and_reports_what_recovery_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let db = siltdb::Db::open(dir.path()).unwrap();
    db.insert("k1", "v1").unwrap();
    db.insert("k2", "v2").unwrap();
    drop(db);
    // A manifest named as the file to dump: a wrong argument, not a corrupt WAL.
    let manifest = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("MANIFEST-")
        })
        .unwrap();
    let (_, err) = run(silt().args(["wal", "dump"]).arg(&manifest), 2);
    assert!(err.contains("is a manifest, not a WAL"), "{err}");
    // A WAL whose first record is copied after the others: every checksum holds, but the
    // sequence numbers go backwards, which recovery refuses. The dump shows it and fails.
    let wal = common::files_with_ext(dir.path(), "wal").pop().unwrap();
    let (records, _) = siltdb::inspect::read_log(&wal).unwrap();
    let data: Vec<_> = records.iter().filter(|r| r.payload.len() > 12).collect();
    assert!(data.len() >= 2, "{} records", records.len());
    let bytes = std::fs::read(&wal).unwrap();
    let last = records.last().unwrap();
    let end = (last.offset + last.len) as usize;
    let first = data[0];
    let mut forged = bytes[..end].to_vec();
    forged.extend_from_slice(&bytes[first.offset as usize..(first.offset + first.len) as usize]);
    std::fs::write(&wal, &forged).unwrap();
    let (out, err) = run(silt().args(["wal", "dump"]).arg(&wal), 2);
    assert!(out.contains("REFUSED by recovery"), "{out}");
    assert!(err.contains(&format!("at offset {end}")), "{err}");
    assert!(err.contains("go backwards"), "{err}");
    // Refused after the first line: a reader that closed the pipe (`| head -1`) before it
    // does not turn the verdict into success.
    let w = wal.to_str().unwrap();
    for args in [&["wal", "dump", w][..], &["wal", "dump", w, "--json"]] {
        assert_eq!(status_into_closed_pipe(args), Some(2), "{args:?}");
    }
    assert!(matches!(
        siltdb::Db::open(dir.path()),
        Err(siltdb::Error::Corruption { .. })
    ));
}

#[test]
fn manifest_dump_reports_edits_recovery_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let db = siltdb::Db::open(dir.path()).unwrap();
    db.insert("k", "v").unwrap();
    db.flush().unwrap();
    drop(db);
    // Reopened: the new manifest starts with a snapshot edit that adds the table.
    drop(siltdb::Db::open(dir.path()).unwrap());
    let manifest = siltdb::inspect::current_manifest(dir.path()).unwrap();
    let (records, end) = siltdb::inspect::read_log(&manifest).unwrap();
    assert!(matches!(end, siltdb::inspect::LogEnd::Clean));
    // That edit copied after the others: every checksum holds and each edit decodes, but
    // it adds a table that is live already.
    let bytes = std::fs::read(&manifest).unwrap();
    let last = records.last().unwrap();
    let at = last.offset + last.len;
    let first = &records[0];
    let mut forged = bytes[..at as usize].to_vec();
    forged.extend_from_slice(&bytes[first.offset as usize..(first.offset + first.len) as usize]);
    std::fs::write(&manifest, &forged).unwrap();
    let (out, err) = run(silt().args(["manifest", "dump"]).arg(dir.path()), 2);
    assert!(out.contains("end: clean"), "{out}");
    assert!(err.contains(&format!("at offset {at}")), "{err}");
    let d = dir.path().to_str().unwrap();
    for args in [
        &["manifest", "dump", d][..],
        &["manifest", "dump", d, "--json"],
    ] {
        assert_eq!(status_into_closed_pipe(args), Some(2), "{args:?}");
    }
    assert!(matches!(
        siltdb::Db::open(dir.path()),
        Err(siltdb::Error::Corruption { .. })
    ));
}

#[test]
fn readamp_refuses_sizes_it_cannot_run() {
    let too_big = (siltdb::MAX_VALUE_SIZE + 1).to_string();
    let max = u64::MAX.to_string();
    for (args, expect) in [
        (vec!["--value-size", too_big.as_str()], "--value-size"),
        (vec!["--value-size", max.as_str()], "--value-size"),
        (
            vec!["--keys", "1", "--overwrites", max.as_str()],
            "--overwrites",
        ),
    ] {
        let (_, err) = run(silt().arg("readamp").args(&args), 2);
        assert!(err.contains(expect), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    }
}

/// Review finding (session 22): `--plot` with no numeric setting, a plot path in a missing
/// directory, or a Monkey setting out of range was refused only after the settings before it
/// had run (minutes at the default size), and their results were thrown away.
#[test]
fn readamp_refuses_bad_settings_before_running_any() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("runs");
    let plot = dir.path().join("x.svg");
    let missing = dir.path().join("no-such-dir").join("x.svg");
    let small = ["--keys", "2000", "--reads", "100"];
    for args in [
        vec![
            "--bits-per-key",
            "hybrid:10",
            "--plot",
            plot.to_str().unwrap(),
        ],
        vec!["--bits-per-key", "5", "--plot", missing.to_str().unwrap()],
        vec!["--bits-per-key", "5", "monkey:500"],
        vec!["--bits-per-key", "5", "monkey:NaN"],
    ] {
        let mut cmd = silt();
        cmd.arg("readamp")
            .args(small)
            .arg("--dir")
            .arg(&base)
            .args(&args);
        let (_, err) = run(&mut cmd, 2);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(
            !base.join("setting-0-5").exists() && !base.join("setting-0-hybrid-10").exists(),
            "{args:?}: a setting ran first"
        );
    }
}

/// Review finding (session 22): `silt wal dump` checked only that sequence numbers do not go
/// backwards, and called a WAL with a record cut out of its middle clean (exit 0), while
/// recovery refuses the gap.
#[test]
fn wal_dump_refuses_a_gap_in_the_sequence_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let db = siltdb::Db::open(dir.path()).unwrap();
    for k in ["k1", "k2", "k3"] {
        db.insert(k, "v").unwrap();
    }
    drop(db);
    let wal = common::files_with_ext(dir.path(), "wal").pop().unwrap();
    let (records, _) = siltdb::inspect::read_log(&wal).unwrap();
    let data: Vec<_> = records.iter().filter(|r| r.payload.len() > 12).collect();
    assert_eq!(data.len(), 3, "{} records", records.len());
    let bytes = std::fs::read(&wal).unwrap();
    let (cut_from, cut_to) = (
        data[1].offset as usize,
        (data[1].offset + data[1].len) as usize,
    );
    let last = records.last().unwrap();
    let end = (last.offset + last.len) as usize;
    let mut forged = bytes[..cut_from].to_vec();
    forged.extend_from_slice(&bytes[cut_to..end]);
    std::fs::write(&wal, &forged).unwrap();
    let (out, err) = run(silt().args(["wal", "dump"]).arg(&wal), 2);
    assert!(out.contains("REFUSED by recovery"), "{out}");
    assert!(err.contains(&format!("at offset {cut_from}")), "{err}");
    assert!(matches!(
        siltdb::Db::open(dir.path()),
        Err(siltdb::Error::Corruption { .. })
    ));
}

/// A bad `--key` is refused whether or not the table has a filter (a table without one used
/// to print "no filter block" and exit 0 with the key unchecked).
#[test]
fn sst_filter_checks_its_keys_with_or_without_a_filter() {
    let dir = tempfile::tempdir().unwrap();
    let filtered = common::build_tables(&dir.path().join("f"), 100, 10.0);
    let unfiltered = common::build_tables(&dir.path().join("u"), 100, 0.0);
    for table in [&filtered, &unfiltered] {
        let (_, err) = run(
            silt()
                .args(["sst", "filter", "--hex", "--key", "zz", "--measure", "5"])
                .arg(table),
            2,
        );
        assert!(err.contains("zz"), "{err}");
        // A good key still runs (and on the unfiltered table says there is no filter).
        run(
            silt()
                .args(["sst", "filter", "--hex", "--key", "6b6579"])
                .arg(table),
            0,
        );
    }
}

/// `sst dump --from b --to a` printed nothing and exited 0; `db size` and `db compact` refuse
/// such a range, and so does the dump now.
#[test]
fn sst_dump_refuses_an_empty_range() {
    let dir = tempfile::tempdir().unwrap();
    let table = common::build_tables(dir.path(), 100, 10.0);
    for (from, to) in [("b", "a"), ("k", "k")] {
        let (_, err) = run(
            silt()
                .args(["sst", "dump", "--from", from, "--to", to])
                .arg(&table),
            2,
        );
        assert!(err.contains("--from"), "{err}");
    }
    run(
        silt()
            .args(["sst", "dump", "--from", "a", "--to", "b"])
            .arg(&table),
        0,
    );
}
