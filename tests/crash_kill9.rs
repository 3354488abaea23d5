//! Issue 7, test 1: kill -9. This test binary re-executes itself as a child writer
//! (`sync_writes(true)`, a deterministic history of inserts, overwrites, deletes and batches,
//! with background flushes and compactions on tiny memtables, and a `compact_range` every 200
//! ops) that prints `ack N` after op `N`
//! returns. The parent kills it with SIGKILL at a random moment, reopens the database and
//! checks that it opens (D5), holds every acknowledged op (D1), holds whole batches (D3) and no
//! phantom or resurrected value (D4): the state must equal the history after the acknowledged
//! ops, or after one more (the op in flight). The next cycle continues from there; every 50
//! cycles a fresh database starts, so that each check replays a bounded history.
//!
//! `kill9_unsynced_mapped_wal` runs such cycles, each on a fresh database (a child acknowledges
//! some 35,000 ops before its kill), with the default durability
//! (`sync_writes(false)`) and 4 MiB memtables, so that each WAL runs over several of its 1 MiB
//! mapped windows (the helper thread allocating the next while the writer copies into the
//! last) and no fsync hides a write that only reached memory: D2, every acknowledged write
//! survives a process crash, through the mapped WAL that is the default on ext4, XFS and tmpfs.
//!
//! Sizes: `SILT_KILL9_CYCLES` (default 50; 12 unsynced). Long run:
//! `SILT_KILL9_CYCLES=2000 cargo test --release --all-features --test crash_kill9 -- --ignored`.
mod common;

use common::history::{self, judge, Verdict};
use siltdb::{Db, Options};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const SEED: u64 = 99;
const EPOCH: u64 = 50;

/// Options of a child or a check: with a small block cache when `cached`, without one when not.
/// Children and checks alternate, so every reopen changes the setting. `unsynced`: the
/// default durability, 4 MiB memtables (WALs of several mapped windows) and the default
/// table and level sizes (a tree of 16 KiB tables under 4 MiB flushes spends the test's
/// time compacting).
fn options(cached: bool, unsynced: bool) -> Options {
    let o = Options::default()
        .block_cache_size(if cached { 64 << 10 } else { 0 })
        .l0_compaction_trigger(2);
    if unsynced {
        return o.sync_writes(false).memtable_size(4 << 20);
    }
    o.sync_writes(true)
        .memtable_size(16 << 10)
        .block_size(1024)
        .level_base_size(64 << 10)
        .target_table_size(16 << 10)
}

/// The child: write ops from `start` on, forever, acknowledging each on stdout.
fn child(dir: &str, start: u64, unsynced: bool) -> ! {
    let cached = std::env::var("SILT_KILL9_CACHE").is_ok_and(|v| v == "1");
    let db = Db::open_with(dir, options(cached, unsynced)).expect("child open");
    // (A compaction of a range flushes the memtable first: unsynced, rarely, so that the
    // memtable and its WAL grow over several windows.)
    let compact_every = if unsynced { 50_000 } else { 200 };
    // (libtest has printed "test NAME ... " without a newline before this line starts.)
    println!("child open");
    let mut i = start;
    loop {
        history::op(SEED, i).run(&db).expect("child write");
        println!("ack {i}");
        if i % compact_every == compact_every - 1 {
            // A manual compaction of a key range, so that kills land inside its rewrites too.
            let lo = history::new_key(i / 2);
            db.compact_range(lo..history::new_key(i))
                .expect("child compact_range");
        }
        i += 1;
    }
}

/// The unsynced variant tests the memory-mapped WAL only where siltdb maps it (ext4, XFS,
/// tmpfs): a mapped WAL is allocated ahead in 1 MiB windows, so a killed writer's WAL ends in
/// zeros, where one written with `write(2)` ends with its last record.
fn assert_mapped_wal(dir: &Path) {
    let wal = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "wal"))
        .max()
        .expect("a WAL");
    let bytes = std::fs::read(&wal).unwrap();
    assert!(
        bytes.len() >= 1 << 20 && bytes[bytes.len() - 4096..].iter().all(|&b| b == 0),
        "{}: {} bytes, not a mapped WAL's zero-filled window (is the temporary directory on \
         ext4, XFS or tmpfs?)",
        wal.display(),
        bytes.len()
    );
}

fn run_cycles(cycles: u64, name: &str, unsynced: bool) {
    if let (Ok(dir), Ok(start)) = (
        std::env::var("SILT_KILL9_DIR"),
        std::env::var("SILT_KILL9_START"),
    ) {
        child(&dir, start.parse().unwrap(), unsynced);
    }
    let tmp = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut dir = String::new();
    let mut rng = common::Rng(5);
    let (mut next, mut acked_total, mut lost, mut phantom, mut torn, mut opened) =
        (0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
    let (mut holes, mut cycles_run, mut first_problem) = (0u64, cycles, None::<String>);
    let mut child_opens = 0u64;
    let mut mapping_checked = false;
    for cycle in 0..cycles {
        // A fresh database every EPOCH cycles keeps each judgment (a replay of the history so
        // far) bounded; within an epoch, crashes chain: crash, recover, write, crash again.
        // Unsynced, a child writes some 35,000 ops before its kill: a fresh database every
        // cycle, the last one removed.
        let epoch = if unsynced { 1 } else { EPOCH };
        if cycle % epoch == 0 {
            if !dir.is_empty() {
                let _ = std::fs::remove_dir_all(&dir);
            }
            dir = tmp
                .path()
                .join(format!("epoch-{}", cycle / epoch))
                .to_str()
                .unwrap()
                .to_string();
            next = 0;
        }
        let mut child = Command::new(&exe)
            .args([
                name,
                "--exact",
                "--nocapture",
                "--test-threads=1",
                "--include-ignored",
            ])
            .env("SILT_KILL9_DIR", &dir)
            .env("SILT_KILL9_START", next.to_string())
            .env("SILT_KILL9_CACHE", if cycle % 2 == 0 { "1" } else { "0" })
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn child");
        let out = child.stdout.take().unwrap();
        let last_ack = Arc::new(AtomicI64::new(-1));
        let la = last_ack.clone();
        let reader = std::thread::spawn(move || {
            let mut open = false;
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if line.ends_with("child open") {
                    open = true;
                }
                if let Some(n) = line.strip_prefix("ack ") {
                    la.store(n.parse().unwrap(), Ordering::SeqCst);
                }
            }
            open
        });
        // Kill at a random moment: sometimes during open and recovery, mostly while writing.
        std::thread::sleep(Duration::from_millis(rng.below(250)));
        child.kill().expect("kill");
        child.wait().unwrap();
        let child_opened = reader.join().unwrap();
        child_opens += u64::from(child_opened);
        let acked = match last_ack.load(Ordering::SeqCst) {
            -1 => next,
            n => n as u64 + 1,
        };
        acked_total += acked - next;
        if unsynced && !mapping_checked && acked > next {
            assert_mapped_wal(Path::new(&dir));
            mapping_checked = true;
        }
        // Reopen and judge.
        let db = Db::open_with(Path::new(&dir), options(cycle % 2 == 1, unsynced))
            .unwrap_or_else(|e| panic!("cycle {cycle}: open failed (D5): {e}"));
        opened += 1;
        let state =
            history::read_state(&db).unwrap_or_else(|e| panic!("cycle {cycle}: scan failed: {e}"));
        torn += history::torn_batches(SEED, acked + 1, &state);
        let problem = match judge(SEED, acked + 1, &state) {
            Verdict::Prefix(p) if p >= acked => {
                next = p;
                None
            }
            Verdict::Prefix(p) => {
                lost += 1;
                Some(format!("recovered {p} ops but {acked} were acknowledged (child opened: {child_opened})"))
            }
            Verdict::Phantom(w) => {
                phantom += 1;
                Some(format!("phantom {w}"))
            }
            Verdict::Hole => {
                holes += 1;
                Some("recovered state is no prefix of the history".to_string())
            }
        };
        db.close().unwrap();
        if let Some(p) = problem {
            // The history has diverged from the database: stop here and report.
            first_problem = Some(format!("cycle {cycle}: {p}"));
            cycles_run = cycle + 1;
            break;
        }
    }
    println!(
        "kill -9: cycles={cycles_run} child_opens={child_opens} open_ok={opened}/{cycles_run} acknowledged={acked_total} lost={lost} phantom={phantom} holes={holes} torn_batches={torn}"
    );
    assert_eq!(lost + phantom + holes + torn, 0, "{first_problem:?}");
    // A child that never opened, or never had a write acknowledged, would make every verdict
    // above trivially true.
    assert!(
        child_opens > 0 && acked_total > 0 && (mapping_checked || !unsynced),
        "the children opened {child_opens} times and had {acked_total} writes acknowledged"
    );
}

#[test]
fn kill9_crash_recovery() {
    let cycles = std::env::var("SILT_KILL9_CYCLES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(50);
    run_cycles(cycles, "kill9_crash_recovery", false);
}

#[test]
fn kill9_unsynced_mapped_wal() {
    let cycles = std::env::var("SILT_KILL9_CYCLES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12);
    run_cycles(cycles, "kill9_unsynced_mapped_wal", true);
}

#[test]
#[ignore]
fn kill9_crash_recovery_long() {
    let cycles = std::env::var("SILT_KILL9_CYCLES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000);
    run_cycles(cycles, "kill9_crash_recovery_long", false);
}
