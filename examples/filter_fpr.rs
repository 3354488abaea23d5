//! Measures the blocked Bloom filter's false-positive rate at 4..=20 bits per key and prints
//! it next to the model's prediction and RocksDB FastLocalBloom's published figures.
//!
//! `cargo run --release --example filter_fpr [KEYS] [ABSENT_PROBES]` (defaults: 1,000,000 keys,
//! 100,000,000 absent probes per setting). Keys are 16 random bytes, hashed with xxh3-64 as a
//! table build does.

use siltdb::inspect::filter::{hash_key, predicted_fpr, BloomFilter};

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
}
