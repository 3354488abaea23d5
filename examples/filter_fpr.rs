//! Measures the blocked Bloom filter's false-positive rate at 4..=20 bits per key and prints
//! it next to the model's prediction and RocksDB FastLocalBloom's published figures, then the
//! binary fuse filter's (4- to 16-bit fingerprints, 4-wise as tables are written, and 3-wise
//! for comparison) and the Ribbon filter's (3 to 14 bits per key) at the key count of a
//! default 8 MiB table (70,000 keys) and at KEYS, with their bits per key and build time.
//!
//! `cargo run --release --example filter_fpr [KEYS] [ABSENT_PROBES]` (defaults: 1,000,000 keys,
//! 100,000,000 absent probes per setting). Keys are 16 random bytes, hashed with xxh3-64 as a
//! table build does.

use siltdb::inspect::filter::{hash_key, predicted_fpr, BloomFilter, FuseFilter, RibbonFilter};
use std::time::Instant;

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn key(stream: u64, i: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(
        &splitmix(stream.wrapping_mul(0x5851_f42d_4c95_7f2d) ^ (2 * i)).to_le_bytes(),
    );
    k[8..].copy_from_slice(
        &splitmix(stream.wrapping_mul(0x5851_f42d_4c95_7f2d) ^ (2 * i + 1)).to_le_bytes(),
    );
    k
}

/// RocksDB FastLocalBloom at these bits per key (the figures the filter issue quotes).
fn rocksdb(bits: u32) -> Option<f64> {
    match bits {
        6 => Some(0.0578),
        8 => Some(0.0233),
        10 => Some(0.00959),
        12 => Some(0.0041),
        16 => Some(0.00085),
        20 => Some(0.00019),
        _ => None,
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args
        .next()
        .map(|s| s.parse().expect("KEYS"))
        .unwrap_or(1_000_000);
    let q: u64 = args
        .next()
        .map(|s| s.parse().expect("ABSENT_PROBES"))
        .unwrap_or(100_000_000);
    let hashes: Vec<u64> = (0..n).map(|i| hash_key(&key(1, i))).collect();
    println!("{n} keys, {q} absent probes per setting");
    println!(
        "| bits/key | k | measured FPR | predicted FPR | RocksDB FastLocalBloom | measured / RocksDB |"
    );
    println!("|---|---|---|---|---|---|");
    // FUSE_ONLY=8 (a width) skips the Bloom rows and builds one 4-wise fuse filter of that
    // width over KEYS, so that `/usr/bin/time -v` shows the build's peak memory; RIBBON_ONLY=7
    // (bits per key) does the same for one Ribbon filter.
    let only = |var: &str| std::env::var(var).ok().and_then(|v| v.parse::<f64>().ok());
    let report = |name: String, keys: u64, bytes: usize, bits: f64, start: Instant| {
        println!(
            "{name}: {keys} keys, {bytes} bytes ({bits:.3} bits/key), built in {:.1} ns/key (from hashes)",
            start.elapsed().as_nanos() as f64 / keys.max(1) as f64
        );
    };
    if let Some(w) = only("FUSE_ONLY") {
        let start = Instant::now();
        let f = FuseFilter::build_owned(hashes, w as u32).expect("fuse build");
        report(
            format!("fuse{w}"),
            f.keys(),
            f.memory_bytes(),
            f.bits_per_key(),
            start,
        );
        return;
    }
    if let Some(b) = only("RIBBON_ONLY") {
        let start = Instant::now();
        let f = RibbonFilter::build(&hashes, b).expect("ribbon build");
        report(
            format!("ribbon {b}"),
            f.keys(),
            f.memory_bytes(),
            f.bits_per_key(),
            start,
        );
        return;
    }
    for bits in 4..=20u32 {
        let f = BloomFilter::build(&hashes, f64::from(bits));
        let mut fp = 0u64;
        for i in 0..q {
            if f.may_contain_hash(hash_key(&key(2 + u64::from(bits), i))) {
                fp += 1;
            }
        }
        let measured = fp as f64 / q as f64;
        let predicted = predicted_fpr(f.lines(), f.keys(), f.probes());
        let rocks = rocksdb(bits);
        println!(
            "| {bits} | {} | {:.4}% | {:.4}% | {} | {} |",
            f.probes(),
            measured * 100.0,
            predicted * 100.0,
            rocks.map_or("-".into(), |r| format!("{:.4}%", r * 100.0)),
            rocks.map_or("-".into(), |r| format!("{:.3}", measured / r)),
        );
    }
    println!();
    println!("Binary fuse filters, {q} absent probes per setting");
    println!(
        "| keys | arity | fingerprint bits | bits/key | measured FPR | predicted FPR (2^-bits) | measured / predicted | build ns/key (from hashes) |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let settings = [
        (4u32, 4u32),
        (4, 6),
        (4, 8),
        (4, 10),
        (4, 12),
        (4, 16),
        (3, 8),
        (3, 16),
    ];
    for keys in [70_000u64, n] {
        let hs = &hashes[..keys.min(n) as usize];
        for (arity, width) in settings {
            let start = Instant::now();
            let f = FuseFilter::build_with_arity(hs, width, arity).expect("fuse build");
            let build = start.elapsed().as_nanos() as f64 / hs.len() as f64;
            let mut fp = 0u64;
            for i in 0..q {
                if f.may_contain_hash(hash_key(&key(100 + u64::from(width), i))) {
                    fp += 1;
                }
            }
            let measured = fp as f64 / q as f64;
            println!(
                "| {} | {arity} | {width} | {:.3} | {:.5}% | {:.5}% | {:.3} | {build:.1} |",
                hs.len(),
                f.bits_per_key(),
                measured * 100.0,
                f.predicted_fpr() * 100.0,
                measured / f.predicted_fpr(),
            );
        }
    }
    println!();
    println!("Ribbon filters, {q} absent probes per setting");
    println!(
        "| keys | bits/key asked | bits/key | result bits (lower, blocks with one more) | measured FPR | predicted FPR | measured / predicted | build ns/key (from hashes) |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for keys in [70_000u64, n] {
        let hs = &hashes[..keys.min(n) as usize];
        for bits in [3.0f64, 5.0, 6.5, 7.0, 8.3, 10.0, 14.0] {
            let start = Instant::now();
            let f = RibbonFilter::build(hs, bits).expect("ribbon build");
            let build = start.elapsed().as_nanos() as f64 / hs.len() as f64;
            let mut fp = 0u64;
            for i in 0..q {
                if f.may_contain_hash(hash_key(&key(200 + (bits * 10.0) as u64, i))) {
                    fp += 1;
                }
            }
            let measured = fp as f64 / q as f64;
            let g = f.geometry();
            println!(
                "| {} | {bits} | {:.3} | {} ({} of {}) | {:.5}% | {:.5}% | {:.3} | {build:.1} |",
                hs.len(),
                f.bits_per_key(),
                g.columns,
                g.blocks - g.upper_start,
                g.blocks,
                measured * 100.0,
                f.predicted_fpr() * 100.0,
                measured / f.predicted_fpr(),
            );
        }
    }
}
