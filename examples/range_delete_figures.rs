//! The range-delete figures of issue 16: removing N keys with one `remove_range` against
//! removing them one by one, on two databases loaded the same way, back to back in one
//! process.
//!
//! ```sh
//! cargo run --release --example range_delete_figures -- /tmp/rdf 1000000
//! ```
//!
//! Each database: default options (WAL not synced), N keys of 16 bytes with 100-byte values
//! loaded in key order in batches of 1,000, flushed, compactions waited for. Then the N keys
//! are removed (one `remove_range`, or N `remove` calls), and the printed row says: WAL
//! records written by the removal (`Stats::write_groups`), bytes the process wrote during it
//! (`/proc/self/io` `wchar`: WAL appends and any flush or compaction it caused), its time;
//! a full forward scan before compaction (time, entries returned, bytes read from files:
//! `rchar`; the block cache is off, so every block comes from a file, the page cache);
//! `Db::compact` (time, bytes written, input tables dropped unread); a full scan after it;
//! the disk size after it. A third row removes the same keys with one `remove_range` from a
//! tree whose range tombstone covers whole tables, with a snapshot held: compaction must then
//! read and keep everything, the cost RocksDB's "delete files in range" avoids.
use siltdb::{Db, Options};
use std::path::Path;
use std::time::Instant;

fn key(i: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..4].copy_from_slice(b"key:");
    k[8..].copy_from_slice(&i.to_be_bytes());
    k
}

/// `rchar` and `wchar` of this process (bytes passed to read and write system calls).
fn io() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
    let field = |name: &str| {
        s.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    (field("rchar:"), field("wchar:"))
}

fn options() -> Options {
    Options::default().block_cache_size(0)
}

fn load(dir: &Path, n: u64) -> Db {
    let _ = std::fs::remove_dir_all(dir);
    let db = Db::open_with(dir, options()).expect("open");
    let value = [b'v'; 100];
    let mut i = 0;
    while i < n {
        let mut b = siltdb::WriteBatch::new();
        for j in i..(i + 1000).min(n) {
            b.insert(key(j), value);
        }
        db.write(b).expect("load");
        i += 1000;
    }
    db.flush().expect("flush");
    db.wait_for_compactions().expect("settle");
    db
}

/// Time, entries and bytes read of a full forward scan.
fn scan(db: &Db) -> (f64, u64, u64) {
    let (r0, _) = io();
    let t = Instant::now();
    let mut n = 0u64;
    for item in db.iter() {
        item.expect("scan");
        n += 1;
    }
    let secs = t.elapsed().as_secs_f64();
    (secs, n, io().0 - r0)
}

fn mib(b: u64) -> f64 {
    b as f64 / (1 << 20) as f64
}

/// Bytes as B, KiB or MiB.
fn size(b: u64) -> String {
    match b {
        0..1024 => format!("{b} B"),
        1024..1_048_576 => format!("{:.1} KiB", b as f64 / 1024.0),
        _ => format!("{:.1} MiB", mib(b)),
    }
}

/// Seconds as µs, ms or s.
fn time(s: f64) -> String {
    if s < 1e-3 {
        format!("{:.0} µs", s * 1e6)
    } else if s < 1.0 {
        format!("{:.1} ms", s * 1e3)
    } else {
        format!("{s:.2} s")
    }
}

fn run(dir: &Path, n: u64, mode: &str) {
    let db = load(dir, n);
    let snapshot = (mode == "range+snapshot").then(|| db.snapshot());
    let groups0 = db.stats().write_groups;
    let (_, w0) = io();
    let t = Instant::now();
    if mode == "point" {
        for i in 0..n {
            db.remove(key(i)).expect("remove");
        }
    } else {
        db.remove_range(key(0)..key(n)).expect("remove_range");
    }
    let del_secs = t.elapsed().as_secs_f64();
    let del_bytes = io().1 - w0;
    let records = db.stats().write_groups - groups0;
    let (scan_secs, scan_n, scan_read) = scan(&db);
    let s0 = db.stats();
    let (_, w1) = io();
    let t = Instant::now();
    db.compact().expect("compact");
    let compact_secs = t.elapsed().as_secs_f64();
    let compact_written = io().1 - w1;
    let s1 = db.stats();
    let (after_secs, after_n, after_read) = scan(&db);
    let disk = db.disk_size().expect("disk size");
    println!(
        "| {mode} | {records} | {} | {} | {} ({scan_n} keys, {} read) | {}, {} read, {} written, {} tables unread | {} ({after_n} keys, {} read) | {} |",
        size(del_bytes),
        time(del_secs),
        time(scan_secs),
        size(scan_read),
        time(compact_secs),
        size(s1.bytes_compacted_read - s0.bytes_compacted_read),
        size(compact_written),
        s1.tables_dropped_unread - s0.tables_dropped_unread,
        time(after_secs),
        size(after_read),
        size(disk),
    );
    drop(snapshot);
    db.close().expect("close");
}

/// N/10 range removes of 10 keys each, one call each, over the loaded keys: the cost of a
/// range remove when a memtable holds many, and of gets among them.
fn many_small(dir: &Path, n: u64) {
    let db = load(dir, n);
    let calls = n / 10;
    let t = Instant::now();
    for c in 0..calls {
        db.remove_range(key(c * 10)..key(c * 10 + 10))
            .expect("remove_range");
    }
    let secs = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let gets = 100_000u64;
    let mut found = 0u64;
    for i in 0..gets {
        found += u64::from(db.get(key(i * 7 % n)).expect("get").is_some());
    }
    let get_secs = t.elapsed().as_secs_f64();
    let (scan_secs, scan_n, _) = scan(&db);
    println!(
        "\n{calls} range removes of 10 keys each: {} per call; then {gets} gets: {} per get ({found} found); full scan {} ({scan_n} keys)",
        time(secs / calls as f64),
        time(get_secs / gets as f64),
        time(scan_secs),
    );
    db.close().expect("close");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir = Path::new(
        args.get(1)
            .map_or("/tmp/range_delete_figures", |s| s.as_str()),
    );
    let n: u64 = args
        .get(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    println!("{n} keys of 16 bytes, 100-byte values, default options, block cache off\n");
    println!("| removal | WAL records | bytes written | time | full scan before compaction | compaction | full scan after | disk after |");
    println!("|---|---|---|---|---|---|---|---|");
    for mode in ["range", "point", "range+snapshot"] {
        run(dir, n, mode);
    }
    many_small(dir, n);
    let _ = std::fs::remove_dir_all(dir);
}
