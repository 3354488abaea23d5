//! The simulated power-loss harness: run a history on a `MemFs`, take crash points, and judge
//! what each crash would leave (used by `crash_power_loss.rs` and `harness_self_check.rs`).
#![allow(dead_code)]

use super::history::{self, judge, Verdict};
use parking_lot::Mutex;
use siltdb::fs::{CrashImageOptions, CrashPoint, FileSystem, MemFs, UnsyncedData};
use siltdb::{Db, Options};
use std::path::Path;
use std::sync::Arc;

pub const DIR: &str = "/db";

fn options(fs: &MemFs) -> Options {
    Options::default()
        .file_system(Arc::new(fs.clone()) as Arc<dyn FileSystem>)
        .memtable_size(8 << 10)
        .block_size(512)
        .level_base_size(32 << 10)
        .target_table_size(8 << 10)
        .l0_compaction_trigger(2)
}

/// `acked` ops returned Ok; the first `synced` of them are covered by a completed sync.
fn pack(acked: u64, synced: u64) -> u64 {
    (acked << 32) | synced
}

fn unpack(tag: u64) -> (u64, u64) {
    (tag >> 32, tag & 0xffff_ffff)
}

#[derive(Debug, Default, Clone)]
pub struct Report {
    pub crash_points: u64,
    pub checks: u64,
    pub open_failures: u64,
    pub lost: u64,
    pub phantom: u64,
    pub holes: u64,
    pub torn_batches: u64,
    pub first_problem: Option<String>,
}

impl Report {
    pub fn problems(&self) -> u64 {
        self.open_failures + self.lost + self.phantom + self.holes + self.torn_batches
    }

    fn note(&mut self, what: String) {
        if self.first_problem.is_none() {
            self.first_problem = Some(what);
        }
    }

    pub fn card(&self, name: &str) -> String {
        format!(
            "{name}: crash_points={} checks={} open_fail={} lost={} phantom={} holes={} torn_batch={}",
            self.crash_points, self.checks, self.open_failures, self.lost, self.phantom, self.holes, self.torn_batches
        )
    }
}

/// What one crash image must satisfy: recovered state equals the history after `P` ops with
/// `required <= P <= acked + 1` (the op in flight may or may not have landed).
fn check_image(seed: u64, point: &CrashPoint, mode: CrashImageOptions, report: &Mutex<Report>) {
    let (acked, synced) = unpack(point.tag);
    let required = match mode.unsynced_data {
        UnsyncedData::Keep => acked,
        _ => synced,
    };
    let image = point.fs.crash_image(mode);
    let db = match Db::open_with(DIR, options(&image)) {
        Ok(db) => db,
        Err(e) => {
            let mut r = report.lock();
            r.checks += 1;
            r.open_failures += 1;
            r.note(format!("op {} {mode:?}: open failed: {e}", point.op));
            return;
        }
    };
    let state = history::read_state(&db);
    drop(db);
    let mut r = report.lock();
    r.checks += 1;
    let state = match state {
        Ok(s) => s,
        Err(e) => {
            r.open_failures += 1;
            r.note(format!("op {} {mode:?}: scan failed: {e}", point.op));
            return;
        }
    };
    let torn = history::torn_batches(seed, acked + 1, &state);
    if torn > 0 {
        r.torn_batches += torn;
        r.note(format!("op {} {mode:?}: {torn} torn batches", point.op));
    }
    match judge(seed, acked + 1, &state) {
        Verdict::Prefix(p) if p >= required => {}
        Verdict::Prefix(p) => {
            r.lost += 1;
            r.note(format!(
                "op {} {mode:?}: recovered {p} ops, {required} were durable (acked {acked})",
                point.op
            ));
        }
        Verdict::Phantom(what) => {
            r.phantom += 1;
            r.note(format!("op {} {mode:?}: phantom {what}", point.op));
        }
        Verdict::Hole => {
            r.holes += 1;
            r.note(format!(
                "op {} {mode:?}: state is no prefix of the history (acked {acked})",
                point.op
            ));
        }
    }
}

/// Runs `ops` ops of history `seed` with a sync every 13 ops, a flush every 97, a reopen half
/// way (a manifest rewrite), and background compaction, checking every `every`-th file-system
/// operation as a crash point under three crash models.
pub fn run(seed: u64, ops: u64, every: u64) -> Report {
    let fs = MemFs::new();
    let report = Arc::new(Mutex::new(Report::default()));
    let r2 = report.clone();
    let point_counter = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let pc = point_counter.clone();
    fs.set_crash_hook(
        every,
        Some(Arc::new(move |p: CrashPoint| {
            let n = pc.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            for mode in [
                CrashImageOptions::POWER_LOSS,
                CrashImageOptions {
                    unsynced_data: UnsyncedData::RandomPrefix { seed: n },
                    keep_unsynced_dir_entries: n.is_multiple_of(2),
                },
                CrashImageOptions::PROCESS_CRASH,
            ] {
                check_image(seed, &p, mode, &r2);
            }
        })),
    );
    let dir = Path::new(DIR);
    let mut db = Db::open_with(dir, options(&fs)).expect("open");
    let mut synced = 0;
    for i in 0..ops {
        fs.set_tag(pack(i, synced));
        history::op(seed, i).run(&db).expect("write");
        fs.set_tag(pack(i + 1, synced));
        if i % 13 == 12 {
            db.sync().expect("sync");
            synced = i + 1;
            fs.set_tag(pack(i + 1, synced));
        }
        if i % 97 == 96 {
            db.flush().expect("flush");
        }
        if i == ops / 2 {
            drop(db);
            db = Db::open_with(dir, options(&fs)).expect("reopen");
        }
    }
    db.wait_for_compactions().expect("settle");
    drop(db);
    fs.set_crash_hook(0, None);
    let mut r = report.lock().clone();
    r.crash_points = point_counter.load(std::sync::atomic::Ordering::Relaxed);
    r
}
