//! Helpers shared by the scenario tests.
#![allow(dead_code)]

use siltdb::fs::{FileSystem, MemFs};
use siltdb::{Db, Options};
use std::path::Path;
use std::sync::Arc;

/// Options with tiny sizes so that flushes and compactions happen after a few KiB.
pub fn small_options() -> Options {
    Options::default()
        .memtable_size(4 << 10)
        .block_size(512)
        .level_base_size(16 << 10)
        .target_table_size(4 << 10)
        .l0_compaction_trigger(2)
        .l0_slowdown_trigger(4)
        .l0_stop_trigger(8)
}

/// `small_options` on an in-memory file system.
pub fn mem_options(fs: &MemFs) -> Options {
    small_options().file_system(Arc::new(fs.clone()) as Arc<dyn FileSystem>)
}

/// Every (key, value) of a scan, failing the test on an error.
pub fn scan_all(
    it: impl Iterator<Item = siltdb::Result<(Vec<u8>, Vec<u8>)>>,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    it.map(|r| r.expect("scan item")).collect()
}

/// Waits until background compaction has nothing left to do (L0 below its trigger) or a
/// timeout passes.
pub fn settle(db: &Db) {
    for _ in 0..500 {
        let l0 = db.levels()[0].tables;
        if l0 < 2 {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

pub fn open_mem(fs: &MemFs, dir: &Path) -> Db {
    Db::open_with(dir, mem_options(fs)).expect("open")
}

/// Deterministic pseudo-random numbers.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Builds a database in `dir` with one flushed table of `n` keys `key00000..` (every 10th key
/// removed in a second table), and returns the path of the first table.
pub fn build_tables(dir: &Path, n: u32, bits: f64) -> std::path::PathBuf {
    let db = Db::open_with(
        dir,
        Options::default()
            .bloom_bits_per_key(bits)
            .auto_compaction(false),
    )
    .unwrap();
    for i in 0..n {
        db.insert(format!("key{i:05}"), format!("value-{i}"))
            .unwrap();
    }
    db.flush().unwrap();
    for i in (0..n).step_by(10) {
        db.remove(format!("key{i:05}")).unwrap();
    }
    db.flush().unwrap();
    db.close().unwrap();
    files_with_ext(dir, "sst").remove(0)
}

/// The files in `dir` whose extension is `ext`, sorted (oldest file number first).
pub fn files_with_ext(dir: &Path, ext: &str) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    files.sort();
    files
}

/// The table files (`*.sst`) in `dir` of the in-memory file system `fs`, by name, sorted
/// (oldest file number first).
pub fn mem_tables(fs: &MemFs, dir: &Path) -> Vec<String> {
    mem_files(fs, dir, ".sst")
}

/// The files in `dir` of the in-memory file system `fs` whose names end in `suffix`, sorted
/// (for numbered files, oldest first).
pub fn mem_files(fs: &MemFs, dir: &Path, suffix: &str) -> Vec<String> {
    let mut files: Vec<String> = fs
        .list(dir)
        .unwrap()
        .into_iter()
        .filter(|n| n.ends_with(suffix))
        .collect();
    files.sort();
    files
}

/// LevelDB's CRC mask, for tests that forge checksums.
pub fn mask_crc(crc: u32) -> u32 {
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// Changes a table's 64-byte footer with `f` and recomputes the footer checksum, so that the
/// forged field, not the checksum, is what a reader trips over.
pub fn forge_footer(bytes: &mut [u8], f: impl Fn(&mut [u8])) {
    let n = bytes.len();
    let footer = &mut bytes[n - 64..];
    f(footer);
    let mut h = crc32fast::Hasher::new();
    h.update(&footer[..52]);
    h.update(&footer[56..64]);
    let crc = mask_crc(h.finalize());
    footer[52..56].copy_from_slice(&crc.to_le_bytes());
}

/// A size knob from the environment, or `default`.
pub fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

pub mod cli;
pub mod crash;
pub mod flips;
pub mod history;
pub mod hooked_fs;
