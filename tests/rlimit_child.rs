//! A process whose soft `RLIMIT_NOFILE` is 128 holds a database of more than 1,000 tables: the
//! table cache keeps the descriptors under the limit, so no read fails, no write is refused,
//! and nothing is lost across a reopen. The test re-runs itself as a child under
//! `sh -c 'ulimit -n 128; exec ...'` (loopback of this machine only, bounded in time).
mod common;

use siltdb::{Db, Options};
use std::process::Command;

const KEYS: u32 = 6000;

fn options() -> Options {
    Options::default()
        .auto_compaction(false)
        .memtable_size(1024)
        .block_size(256)
        .bloom_bits_per_key(10.0)
}

fn child(dir: &str) {
    let db = Db::open_with(dir, options()).expect("open");
    for i in 0..KEYS {
        db.insert(format!("key{i:06}"), format!("value-{i}"))
            .expect("a write was refused");
        if i % 5 == 4 {
            db.flush().expect("flush");
        }
    }
    let tables = db.levels()[0].tables;
    let check = |db: &Db| {
        for i in 0..KEYS {
            let v = db
                .get(format!("key{i:06}"))
                .unwrap_or_else(|e| panic!("read of key{i:06} failed: {e}"));
            assert_eq!(v.as_deref(), Some(format!("value-{i}").as_bytes()));
        }
    };
    check(&db);
    let opens = db.stats().table_opens;
    db.close().expect("close");
    drop(db);
    let db = Db::open_with(dir, options()).expect("reopen");
    check(&db);
    // Keep writing after the reopen: compaction of a thousand tables under the limit.
    db.compact().expect("compact");
    check(&db);
    let limit = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|l| {
            l.lines()
                .find(|l| l.starts_with("Max open files"))
                .and_then(|l| l.split_whitespace().nth(3).map(str::to_string))
        })
        .unwrap_or_else(|| "unknown".into());
    println!("child ok: tables={tables} opens={opens} soft_nofile_limit={limit}");
}

#[test]
fn a_thousand_tables_under_a_limit_of_128_descriptors() {
    if let Ok(dir) = std::env::var("SILT_RLIMIT_CHILD_DIR") {
        child(&dir);
        return;
    }
    // tmpfs where there is one: a thousand table fsyncs on a disk take long.
    let base = if std::path::Path::new("/dev/shm").is_dir() {
        tempfile::tempdir_in("/dev/shm").unwrap()
    } else {
        tempfile::tempdir().unwrap()
    };
    let exe = std::env::current_exe().unwrap();
    let script = format!(
        "ulimit -n 128 && exec '{}' --exact a_thousand_tables_under_a_limit_of_128_descriptors --nocapture --test-threads=1",
        exe.display()
    );
    let out = Command::new("sh")
        .arg("-c")
        .arg(&script)
        .env("SILT_RLIMIT_CHILD_DIR", base.path())
        .output()
        .expect("run the child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child failed:\n{stdout}\n{stderr}");
    let line = stdout
        .lines()
        .find_map(|l| l.find("child ok:").map(|at| &l[at..]))
        .unwrap_or_else(|| panic!("no report from the child:\n{stdout}\n{stderr}"));
    let tables: usize = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("tables="))
        .unwrap()
        .parse()
        .unwrap();
    assert!(tables >= 1000, "only {tables} tables: {line}");
    if std::path::Path::new("/proc/self/limits").exists() {
        assert!(line.contains("soft_nofile_limit=128"), "{line}");
    }
    println!("{line}");
}
