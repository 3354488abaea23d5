//! The bit-flip and truncation harness (used by `corruption_bit_flips.rs` and
//! `harness_self_check.rs`): a small database whose every region is damaged in turn.
#![allow(dead_code)]

use siltdb::fs::{CrashImageOptions, FileSystem, MemFs};
use siltdb::inspect::table::BlockKind;
use siltdb::inspect::table::TableReader;
use siltdb::{Db, Options};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub const DIR: &str = "/db";

pub fn options(fs: &MemFs) -> Options {
    Options::default()
        .file_system(Arc::new(fs.clone()) as Arc<dyn FileSystem>)
        .auto_compaction(false)
        .block_size(1024)
}

pub fn expected() -> &'static BTreeMap<Vec<u8>, Vec<u8>> {
    // Built once: every damaged copy is judged against it (thousands per run).
    static EXPECTED: std::sync::OnceLock<BTreeMap<Vec<u8>, Vec<u8>>> = std::sync::OnceLock::new();
    EXPECTED.get_or_init(|| {
        (0..650u32)
            .map(|i| {
                (
                    format!("key{i:05}").into_bytes(),
                    format!("value-{i}-{}", "x".repeat((i % 13) as usize)).into_bytes(),
                )
            })
            .collect()
    })
}

/// Two flushed tables (the second with a range tombstone over keys of the first, which are
/// then written again), 50 writes left in the WAL, a manifest whose snapshot lists both
/// tables followed by an edit.
pub fn base() -> MemFs {
    let fs = MemFs::new();
    let db = Db::open_with(DIR, options(&fs)).unwrap();
    let all: Vec<_> = expected().iter().collect();
    for (k, v) in &all[..300] {
        db.insert(k, v).unwrap();
    }
    db.flush().unwrap();
    db.remove_range(all[100].0.clone()..all[120].0.clone())
        .unwrap();
    for (k, v) in &all[100..120] {
        db.insert(k, v).unwrap();
    }
    for (k, v) in &all[300..600] {
        db.insert(k, v).unwrap();
    }
    db.flush().unwrap();
    // Reopen: the new manifest's snapshot lists both tables.
    drop(db);
    let db = Db::open_with(DIR, options(&fs)).unwrap();
    for (k, v) in &all[600..] {
        db.insert(k, v).unwrap();
    }
    db.close().unwrap();
    fs
}

/// A named byte range of one file.
#[derive(Clone, Debug)]
pub struct Region {
    pub name: String,
    pub file: PathBuf,
    pub start: usize,
    pub end: usize,
    /// False for regions no checksum covers (CURRENT is validated by its format instead).
    pub checksummed: bool,
}

fn file_named(fs: &MemFs, pred: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs
        .list(Path::new(DIR))
        .unwrap()
        .into_iter()
        .filter(|n| pred(n))
        .map(|n| Path::new(DIR).join(n))
        .collect();
    v.sort();
    v
}

/// Record boundaries of a record log.
fn records(bytes: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + 16 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
        out.push((at, at + 16 + len));
        at += 16 + len;
    }
    out
}

pub fn regions(fs: &MemFs) -> Vec<Region> {
    let mut out = Vec::new();
    let r = |name: &str, file: &PathBuf, start: usize, end: usize, checksummed: bool| Region {
        name: name.to_string(),
        file: file.clone(),
        start,
        end,
        checksummed,
    };
    let wal = &file_named(fs, |n| n.ends_with(".wal"))[0];
    let recs = records(&fs.read_file(wal).unwrap());
    out.push(r("WAL record header", wal, recs[0].0, recs[0].0 + 16, true));
    out.push(r(
        "WAL record payload",
        wal,
        recs[0].0 + 16,
        recs[0].1,
        true,
    ));
    let last = recs[recs.len() - 1];
    out.push(r("WAL last record", wal, last.0, last.1, true));
    let table = &file_named(fs, |n| n.ends_with(".sst"))[0];
    let t = TableReader::open(fs, table).unwrap();
    let block = |kind: BlockKind| {
        t.blocks()
            .into_iter()
            .find(|b| b.kind == kind)
            .unwrap()
            .handle
    };
    for (name, kind) in [
        ("SST data block", BlockKind::Data),
        ("SST index block", BlockKind::Index),
        ("SST filter block", BlockKind::Filter),
        ("SST properties block", BlockKind::Properties),
    ] {
        let h = block(kind);
        out.push(r(
            name,
            table,
            h.offset as usize,
            (h.offset + h.size + 5) as usize,
            true,
        ));
    }
    let size = t.file_size() as usize;
    out.push(r("SST footer", table, size - 64, size, true));
    let newer = &file_named(fs, |n| n.ends_with(".sst"))[1];
    let t2 = TableReader::open(fs, newer).unwrap();
    let h = t2
        .blocks()
        .into_iter()
        .find(|b| b.kind == BlockKind::RangeDel)
        .unwrap()
        .handle;
    out.push(r(
        "SST range-deletion block",
        newer,
        h.offset as usize,
        (h.offset + h.size + 5) as usize,
        true,
    ));
    let manifest = &file_named(fs, |n| n.starts_with("MANIFEST-"))[0];
    let recs = records(&fs.read_file(manifest).unwrap());
    out.push(r(
        "MANIFEST record header",
        manifest,
        recs[0].0,
        recs[0].0 + 16,
        true,
    ));
    out.push(r(
        "MANIFEST snapshot payload",
        manifest,
        recs[0].0 + 16,
        recs[0].1,
        true,
    ));
    let last = recs[recs.len() - 1];
    out.push(r("MANIFEST last record", manifest, last.0, last.1, true));
    let current = Path::new(DIR).join("CURRENT");
    let n = fs.read_file(&current).unwrap().len();
    out.push(r("CURRENT", &current, 0, n, false));
    out
}

/// What one damaged copy did.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum Outcome {
    /// An error was returned (open, a get, or the scan), or a torn tail was reported.
    Detected,
    /// Every answer was right and nothing was reported.
    Undetected,
    /// Some answer was wrong and nothing explained it.
    Wrong,
    Panic,
    /// (truncation of the newest WAL only) a suffix of writes is missing, nothing else.
    SuffixLost,
}

/// Opens a damaged copy and reads every key and the whole range. A cut-off torn WAL tail
/// counts as detection only if `torn_is_detection` (a truncation test); for a bit flip, a
/// dropped record is a silent loss.
pub fn judge_with(img: &MemFs, torn_is_detection: bool) -> Outcome {
    let expect = expected();
    let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let db = match Db::open_with(DIR, options(img)) {
            Ok(db) => db,
            Err(_) => return Outcome::Detected,
        };
        let mut error = torn_is_detection && db.stats().wal_torn_tails > 0;
        let mut wrong = false;
        let mut missing = Vec::new();
        for (k, v) in expect {
            match db.get(k) {
                Ok(Some(got)) if &got == v => {}
                Ok(None) => missing.push(k.clone()),
                Ok(Some(_)) => wrong = true,
                Err(_) => error = true,
            }
        }
        match db.iter().collect::<siltdb::Result<Vec<_>>>() {
            Ok(all) => {
                if all.len() + missing.len() != expect.len()
                    || all.iter().any(|(k, v)| expect.get(k) != Some(v))
                {
                    wrong = true;
                }
            }
            Err(_) => error = true,
        }
        if wrong {
            return Outcome::Wrong;
        }
        if !missing.is_empty() {
            // Only a suffix of the WAL's writes (the last keys) may go missing, and only
            // when something reported it, or when the WAL itself was cut (see the caller).
            let tail: Vec<Vec<u8>> = expect
                .keys()
                .rev()
                .take(missing.len())
                .rev()
                .cloned()
                .collect();
            if error {
                return Outcome::Detected;
            }
            return if missing == tail {
                Outcome::SuffixLost
            } else {
                Outcome::Wrong
            };
        }
        if error {
            Outcome::Detected
        } else {
            Outcome::Undetected
        }
    }));
    res.unwrap_or(Outcome::Panic)
}

/// [`judge_with`] for bit flips: a torn tail is not detection.
pub fn judge(img: &MemFs) -> Outcome {
    judge_with(img, false)
}

/// Bit positions to flip in a region: every bit of a small one, 2000+ spread over a big one.
pub fn bits(region: &Region) -> Vec<usize> {
    let total = (region.end - region.start) * 8;
    if total <= 4096 {
        (0..total).collect()
    } else {
        let step = total / 2048;
        (0..total).step_by(step.max(1)).collect()
    }
}

pub fn flip(base: &MemFs, region: &Region, bit: usize) -> MemFs {
    let img = base.crash_image(CrashImageOptions::PROCESS_CRASH);
    let mut bytes = img.read_file(&region.file).unwrap();
    let at = region.start * 8 + bit;
    bytes[at / 8] ^= 1 << (at % 8);
    img.write_file(&region.file, &bytes).unwrap();
    img
}

pub fn truncate(base: &MemFs, file: &Path, len: usize) -> MemFs {
    let img = base.crash_image(CrashImageOptions::PROCESS_CRASH);
    let bytes = img.read_file(file).unwrap();
    img.write_file(file, &bytes[..len]).unwrap();
    img
}

#[derive(Default, Debug, Clone)]
pub struct Row {
    pub flips: u64,
    pub detected: u64,
    pub undetected: u64,
    pub panics: u64,
    pub wrong: u64,
}

impl Row {
    pub fn add(&mut self, o: Outcome) {
        self.flips += 1;
        match o {
            Outcome::Detected => self.detected += 1,
            Outcome::Undetected => self.undetected += 1,
            Outcome::Panic => self.panics += 1,
            Outcome::Wrong | Outcome::SuffixLost => self.wrong += 1,
        }
    }
}

/// Flips every selected bit of every region; one row per region.
pub fn flip_matrix(
    base: &MemFs,
    regions: &[Region],
    limit_per_region: usize,
) -> Vec<(Region, Row)> {
    regions
        .iter()
        .map(|region| {
            let mut row = Row::default();
            for bit in bits(region).into_iter().take(limit_per_region) {
                row.add(judge(&flip(base, region, bit)));
            }
            (region.clone(), row)
        })
        .collect()
}
