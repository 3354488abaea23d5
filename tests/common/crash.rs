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

/// Seeds from this one up to [`SMALL_MANIFEST_SEEDS`] run with 64 KiB memtables instead of
/// 8 KiB, so that each WAL spans many 4 KiB pages.
pub const LARGE_MEMTABLE_SEEDS: u64 = 100;

/// Seeds from this one on (with 8 KiB memtables) rewrite their manifest whenever it passes
/// 1 KiB (and twice its snapshot), so that crash points fall inside runtime manifest rewrites
/// (a history with the default 16 MiB writes a manifest only at its open and its reopen).
pub const SMALL_MANIFEST_SEEDS: u64 = 300;

/// The options of a history: even seeds read through a small block cache (which evicts), odd
/// seeds with the cache off, so that every crash model runs both ways.
fn options(fs: &MemFs, seed: u64) -> Options {
    let memtable = if (LARGE_MEMTABLE_SEEDS..SMALL_MANIFEST_SEEDS).contains(&seed) {
        64 << 10
    } else {
        8 << 10
    };
    let manifest = if seed >= SMALL_MANIFEST_SEEDS {
        1 << 10
    } else {
        16 << 20
    };
    Options::default()
        .max_manifest_size(manifest)
        .block_cache_size(if seed.is_multiple_of(2) { 64 << 10 } else { 0 })
        .file_system(Arc::new(fs.clone()) as Arc<dyn FileSystem>)
        .memtable_size(memtable)
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
    /// Crash points checked (those of the run's [`Shard`]).
    pub crash_points: u64,
    /// Crash points the history passed through, checked or not.
    pub history_points: u64,
    /// Crash points taken during the recovery of a crashed copy (a crash during open).
    pub recovery_points: u64,
    pub checks: u64,
    pub open_failures: u64,
    pub lost: u64,
    pub phantom: u64,
    pub holes: u64,
    pub torn_batches: u64,
    /// Distinct manifest files seen in the crash points' directories (a rewrite makes a new
    /// one).
    pub manifests: u64,
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
            "{name}: crash_points={} recovery_crash_points={} checks={} open_fail={} lost={} phantom={} holes={} torn_batch={} manifests={}",
            self.crash_points,
            self.recovery_points,
            self.checks,
            self.open_failures,
            self.lost,
            self.phantom,
            self.holes,
            self.torn_batches,
            self.manifests
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
    check_state(
        seed,
        point.op,
        &point.fs.crash_image(mode),
        mode,
        acked,
        required,
        report,
    );
}

/// Crashes during recovery: a crash at `point` (`first`: a process crash for [`run`]), then
/// the next open (which replays the WALs, writes a table and a new manifest) is itself
/// interrupted by a power loss at each of its file-system operations. The synced writes of
/// the original history must survive both.
fn check_recovery_crashes(
    seed: u64,
    point: &CrashPoint,
    first: CrashImageOptions,
    report: &Mutex<Report>,
) {
    let (acked, synced) = unpack(point.tag);
    let crashed = point.fs.crash_image(first);
    let inner: Arc<Mutex<Vec<CrashPoint>>> = Arc::new(Mutex::new(Vec::new()));
    let sink = inner.clone();
    crashed.set_crash_hook(1, Some(Arc::new(move |p: CrashPoint| sink.lock().push(p))));
    if let Ok(db) = Db::open_with(DIR, options(&crashed, seed)) {
        drop(db);
    }
    crashed.set_crash_hook(0, None);
    let points = std::mem::take(&mut *inner.lock());
    report.lock().recovery_points += points.len() as u64;
    for (i, p) in points.iter().enumerate() {
        for mode in [
            CrashImageOptions::POWER_LOSS,
            CrashImageOptions {
                unsynced_data: UnsyncedData::ZeroTail { seed: i as u64 },
                keep_unsynced_dir_entries: false,
            },
        ] {
            check_state(
                seed,
                p.op,
                &p.fs.crash_image(mode),
                mode,
                acked,
                synced,
                report,
            );
        }
    }
}

fn check_state(
    seed: u64,
    op: u64,
    image: &MemFs,
    mode: CrashImageOptions,
    acked: u64,
    required: u64,
    report: &Mutex<Report>,
) {
    let db = match Db::open_with(DIR, options(image, seed)) {
        Ok(db) => db,
        Err(e) => {
            let mut r = report.lock();
            r.checks += 1;
            r.open_failures += 1;
            r.note(format!("op {} {mode:?}: open failed: {e}", op));
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
            r.note(format!("op {} {mode:?}: scan failed: {e}", op));
            return;
        }
    };
    let torn = history::torn_batches(seed, acked + 1, &state);
    if torn > 0 {
        r.torn_batches += torn;
        r.note(format!("op {} {mode:?}: {torn} torn batches", op));
    }
    match judge(seed, acked + 1, &state) {
        Verdict::Prefix(p) if p >= required => {}
        Verdict::Prefix(p) => {
            r.lost += 1;
            r.note(format!(
                "op {} {mode:?}: recovered {p} ops, {required} were durable (acked {acked})",
                op
            ));
        }
        Verdict::Phantom(what) => {
            r.phantom += 1;
            r.note(format!("op {} {mode:?}: phantom {what}", op));
        }
        Verdict::Hole => {
            r.holes += 1;
            r.note(format!(
                "op {} {mode:?}: state is no prefix of the history (acked {acked})",
                op
            ));
        }
    }
}

/// Runs `ops` ops of history `seed` with a sync every 13 ops, a flush every 97, a manual
/// compaction of a key range every 151, a reopen half way (a manifest rewrite), and background
/// compaction, checking every `every`-th file-system
/// operation as a crash point under four crash models, and every `recovery_every`-th crash
/// point also for crashes during the recovery that follows it (0: never).
pub fn run(seed: u64, ops: u64, every: u64) -> Report {
    run_with_recovery(seed, ops, every, 0)
}

/// Which crash points of a history one test checks. A history's checks split over several
/// tests (one shard each) run on both cores, where one test would run them on one. Every
/// shard replays the whole history, which costs little next to its checks, and numbers its
/// crash points the same way, so the shards deal out the numbers exactly; the history runs
/// background threads, though, so the file-system state at a given number can differ from
/// one run to the next: the shards together check a history like the whole one, not the
/// very same states.
#[derive(Clone, Copy, Debug)]
pub struct Shard {
    pub index: u64,
    pub count: u64,
}

impl Shard {
    /// Every crash point.
    pub const ALL: Shard = Shard { index: 0, count: 1 };

    /// True if crash point `n` is this shard's. The points that also take crashes during
    /// recovery (every `recovery_every`-th, the expensive ones) are dealt out in turn among
    /// the shards, and so are the others, each kind numbered on its own, so that every shard
    /// gets an even share of both.
    fn has(self, n: u64, recovery_every: u64) -> bool {
        let rank = match recovery_every {
            0 => n,
            r if n.is_multiple_of(r) => n / r,
            // The points before `n` that are not recovery points: `n` less the `n / r + 1`
            // recovery points among 0..=n.
            r => n - n / r - 1,
        };
        rank % self.count == self.index
    }
}

/// [`run`] with crashes during recovery at every `recovery_every`-th crash point.
pub fn run_with_recovery(seed: u64, ops: u64, every: u64, recovery_every: u64) -> Report {
    run_with_recovery_shard(seed, ops, every, recovery_every, Shard::ALL)
}

/// [`run_with_recovery`], checking only `shard`'s crash points.
pub fn run_with_recovery_shard(
    seed: u64,
    ops: u64,
    every: u64,
    recovery_every: u64,
    shard: Shard,
) -> Report {
    run_models(seed, ops, every, recovery_every, shard, four_models)
}

/// The four crash models of [`run`] for the `n`-th crash point: power loss, synced data plus
/// a random prefix of the unsynced (and, every other point, the unsynced directory entries),
/// unsynced pages zeroed from a page boundary on, and a process crash.
pub fn four_models(n: u64) -> Vec<CrashImageOptions> {
    vec![
        CrashImageOptions::POWER_LOSS,
        CrashImageOptions {
            unsynced_data: UnsyncedData::RandomPrefix { seed: n },
            keep_unsynced_dir_entries: n.is_multiple_of(2),
        },
        CrashImageOptions {
            unsynced_data: UnsyncedData::ZeroTail { seed: n },
            keep_unsynced_dir_entries: false,
        },
        CrashImageOptions::PROCESS_CRASH,
    ]
}

/// The history of [`run`], checking the crash images that `models` names for the `n`-th crash
/// point, for the points of `shard`. The report counts the points checked.
pub fn run_models(
    seed: u64,
    ops: u64,
    every: u64,
    recovery_every: u64,
    shard: Shard,
    models: impl Fn(u64) -> Vec<CrashImageOptions> + Send + Sync + 'static,
) -> Report {
    run_models_synced_by(
        seed,
        ops,
        every,
        recovery_every,
        shard,
        SyncBy::DbSync,
        models,
        |_| CrashImageOptions::PROCESS_CRASH,
    )
}

/// How the history of [`run_models`] makes every 13th op durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncBy {
    /// A `Db::sync()` after the op.
    DbSync,
    /// The op itself, written with `WriteOptions::sync(true)` (every other op with
    /// `sync(false)`, the database's `sync_writes` being off).
    ThePerWriteChoice,
}

/// [`run_models`], with every 13th op made durable as `sync_by` says, and the crashes
/// during recovery at every `recovery_every`-th point starting from `recover_from(n)`'s image
/// of it (a process crash in [`run_models`]).
#[allow(clippy::too_many_arguments)]
pub fn run_models_synced_by(
    seed: u64,
    ops: u64,
    every: u64,
    recovery_every: u64,
    shard: Shard,
    sync_by: SyncBy,
    models: impl Fn(u64) -> Vec<CrashImageOptions> + Send + Sync + 'static,
    recover_from: fn(u64) -> CrashImageOptions,
) -> Report {
    let fs = MemFs::new();
    let report = Arc::new(Mutex::new(Report::default()));
    let r2 = report.clone();
    // Every crash point is numbered; those of `shard` are checked and counted.
    let history_points = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let pc = history_points.clone();
    let checked_points = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let checked = checked_points.clone();
    let manifests = Arc::new(Mutex::new(std::collections::HashSet::new()));
    let seen = manifests.clone();
    fs.set_crash_hook(
        every,
        Some(Arc::new(move |p: CrashPoint| {
            let n = pc.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if !shard.has(n, recovery_every) {
                return;
            }
            checked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if let Ok(names) = p.fs.list(Path::new(DIR)) {
                let mut seen = seen.lock();
                seen.extend(names.into_iter().filter(|n| n.starts_with("MANIFEST-")));
            }
            for mode in models(n) {
                check_image(seed, &p, mode, &r2);
            }
            if recovery_every > 0 && n.is_multiple_of(recovery_every) {
                check_recovery_crashes(seed, &p, recover_from(n), &r2);
            }
        })),
    );
    let dir = Path::new(DIR);
    let mut db = Db::open_with(dir, options(&fs, seed)).expect("open");
    let mut synced = 0;
    for i in 0..ops {
        fs.set_tag(pack(i, synced));
        let sync_point = i % 13 == 12;
        match sync_by {
            SyncBy::DbSync => history::op(seed, i).run(&db),
            SyncBy::ThePerWriteChoice => {
                history::op(seed, i).run_with(&db, siltdb::WriteOptions::new().sync(sync_point))
            }
        }
        .expect("write");
        fs.set_tag(pack(i + 1, synced));
        if sync_point {
            if sync_by == SyncBy::DbSync {
                db.sync().expect("sync");
            }
            // Durable on return: the write (and every one before it) was fsynced.
            synced = i + 1;
            fs.set_tag(pack(i + 1, synced));
        }
        if i % 97 == 96 {
            // Durable on return: every acknowledged op is in a synced table.
            db.flush().expect("flush");
            synced = i + 1;
            fs.set_tag(pack(i + 1, synced));
        }
        if i % 151 == 150 {
            // A manual compaction of a third of the keys written so far: it flushes first, so
            // it is durable on return like `flush`, and every table overlapping the range is
            // rewritten down to the bottom level (crash points inside those rewrites).
            let lo = history::new_key(i / 3);
            let hi = history::new_key(i * 2 / 3);
            db.compact_range(lo..hi).expect("compact_range");
            synced = i + 1;
            fs.set_tag(pack(i + 1, synced));
        }
        if i == ops / 2 {
            // Close syncs the WAL.
            drop(db);
            synced = i + 1;
            fs.set_tag(pack(i + 1, synced));
            db = Db::open_with(dir, options(&fs, seed)).expect("reopen");
        }
    }
    db.wait_for_compactions().expect("settle");
    drop(db);
    fs.set_crash_hook(0, None);
    let mut r = report.lock().clone();
    r.crash_points = checked_points.load(std::sync::atomic::Ordering::Relaxed);
    r.manifests = manifests.lock().len() as u64;
    r.history_points = history_points.load(std::sync::atomic::Ordering::Relaxed);
    r
}
