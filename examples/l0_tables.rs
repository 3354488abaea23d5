//! The engine's read path on overlapping tables: loads N keys (16-byte keys, 100-byte values,
//! random order) into T flushed L0 tables with compaction off, then runs gets of absent keys
//! (inside the key range) and present keys, and prints the `Stats` of each phase and the
//! throughput, once with `bloom_bits_per_key(10.0)` and once with `0.0`. Each measured phase
//! follows an unmeasured warm-up of as many gets of other keys of the same kind.
//!
//! `cargo run --release --example l0_tables [KEYS] [TABLES] [GETS]` (defaults 1,000,000, 8,
//! 100,000).

use siltdb::{Db, Options, Stats};
use std::time::Instant;

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn key(stream: u64, i: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&splitmix(stream << 48 ^ (2 * i)).to_be_bytes());
    k[8..].copy_from_slice(&splitmix(stream << 48 ^ (2 * i + 1)).to_be_bytes());
    k
}

fn delta(a: &Stats, b: &Stats) -> String {
    let gets = (b.gets - a.gets).max(1) as f64;
    format!(
        "gets={} tables_considered={} filter_probes={} filter_negatives={} filter_false_positives={} filter_true_positives={} data_block_reads={} bytes_read={} -> data blocks per get {:.4}",
        b.gets - a.gets,
        b.tables_considered - a.tables_considered,
        b.filter_probes - a.filter_probes,
        b.filter_negatives - a.filter_negatives,
        b.filter_false_positives - a.filter_false_positives,
        b.filter_true_positives - a.filter_true_positives,
        b.data_block_reads - a.data_block_reads,
        b.bytes_read - a.bytes_read,
        (b.data_block_reads - a.data_block_reads) as f64 / gets
    )
}

fn main() -> siltdb::Result<()> {
    let mut args = std::env::args()
        .skip(1)
        .map(|s| s.parse::<u64>().expect("a number"));
    let n = args.next().unwrap_or(1_000_000);
    let tables = args.next().unwrap_or(8);
    let gets = args.next().unwrap_or(100_000);
    for bits in [10.0, 0.0] {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open_with(
            dir.path(),
            Options::default()
                .bloom_bits_per_key(bits)
                .auto_compaction(false)
                .memtable_size(1 << 30)
                // Every block read a file read, so `bytes_read` is I/O (the default 64 MiB
                // block cache would serve most of them).
                .block_cache_size(0),
        )?;
        let value = [b'v'; 100];
        let per = n.div_ceil(tables);
        let start = Instant::now();
        for i in 0..n {
            db.insert(key(0, i), value)?;
            if (i + 1) % per == 0 || i + 1 == n {
                db.flush()?;
            }
        }
        let load = start.elapsed().as_secs_f64();
        let shape: Vec<String> = db
            .levels()
            .iter()
            .filter(|l| l.tables > 0)
            .map(|l| format!("L{}:{}", l.level, l.tables))
            .collect();
        println!("bloom_bits_per_key({bits}): {n} keys loaded and flushed in {load:.2}s ({:.0} inserts/s), tables {}", n as f64 / load, shape.join(" "));
        for (name, stream) in [("absent", 1u64), ("present", 0u64)] {
            // Warm up (caches, CPU frequency) with other keys of the same kind, unmeasured.
            for j in 0..gets {
                let k = if stream == 0 {
                    key(0, splitmix(j ^ 0xdead) % n)
                } else {
                    key(2, j)
                };
                db.get(k)?;
            }
            let before = db.stats();
            let start = Instant::now();
            for j in 0..gets {
                let k = if stream == 0 {
                    key(0, splitmix(j) % n)
                } else {
                    key(1, j)
                };
                let v = db.get(k)?;
                assert_eq!(v.is_some(), stream == 0);
            }
            let secs = start.elapsed().as_secs_f64();
            let after = db.stats();
            println!(
                "  {name:>7} gets: {:.0} gets/s; {}",
                gets as f64 / secs,
                delta(&before, &after)
            );
        }
    }
    Ok(())
}
