//! Negative-probe cost of the Ribbon and fuse filters relative to the blocked Bloom filter,
//! measured in one process with the kinds alternated round by round, so that a noisy shared
//! machine moves all of them alike: `cargo run --release --example probe_ratio [KEYS]
//! [ROUNDS]` (defaults 100,000 keys, in L2, and 15 rounds; use 10,000,000 for filters probed
//! from DRAM). Each round probes 4M absent keys (hashed outside the timed loop) through the
//! `Filter` enum, as a get does; prints the median ns per probe and the median of the per-round
//! ratios to Bloom.

use siltdb::inspect::filter::{hash_key, BloomFilter, Filter, FuseFilter, RibbonFilter};
use std::hint::black_box;
use std::time::Instant;

fn key(i: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&i.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_be_bytes());
    k[8..].copy_from_slice(&i.to_be_bytes());
    k
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args.next().map_or(100_000, |s| s.parse().expect("KEYS"));
    let rounds: usize = args.next().map_or(15, |s| s.parse().expect("ROUNDS"));
    let hashes: Vec<u64> = (0..n).map(|i| hash_key(&key(i))).collect();
    let filters = [
        ("bloom10", Filter::Bloom(BloomFilter::build(&hashes, 10.0))),
        (
            "fuse8",
            Filter::Fuse(FuseFilter::build(&hashes, 8).expect("fuse")),
        ),
        (
            "ribbon7",
            Filter::Ribbon(RibbonFilter::build(&hashes, 7.0).expect("ribbon")),
        ),
    ];
    let probes: Vec<u64> = (0..4u64 << 20).map(|i| hash_key(&key(n + 1 + i))).collect();
    let mut ns = vec![Vec::new(); filters.len()];
    let mut ratios = vec![Vec::new(); filters.len()];
    for _ in 0..rounds {
        let mut this = Vec::new();
        for (i, (_, f)) in filters.iter().enumerate() {
            let t = Instant::now();
            let hits = probes
                .iter()
                .filter(|&&h| f.may_contain_hash(black_box(h)))
                .count();
            black_box(hits);
            let per = t.elapsed().as_nanos() as f64 / probes.len() as f64;
            ns[i].push(per);
            this.push(per);
        }
        for (i, r) in ratios.iter_mut().enumerate() {
            r.push(this[i] / this[0]);
        }
    }
    println!(
        "{n} keys, {rounds} rounds of {} absent-key probes",
        probes.len()
    );
    for (i, (name, f)) in filters.iter().enumerate() {
        println!(
            "{name:8} {:6.2} ns/probe (median)  {:.2}x Bloom (median of per-round ratios)  {:.2} bits/key",
            median(&mut ns[i]),
            median(&mut ratios[i]),
            f.bits_per_key()
        );
    }
}
