//! A loop of binary fuse builds (8-bit fingerprints, hashing included, each build over fresh
//! hashes), printing the median and 10th percentile ns per key: the back-to-back comparison of
//! the fuse build before and after commit 009397e in `docs/filters.md` section 4.1. Copy it to
//! `examples/` of a worktree of each build (669b920 before, 009397e after) and run the two
//! alternately: `cargo run --release --example fuse_build_loop -- 70000 300`, and with
//! `10000000 5`.
use siltdb::inspect::filter::{hash_key, FuseFilter};
use std::time::Instant;

fn main() {
    let n: u64 = std::env::args().nth(1).map_or(70_000, |v| v.parse().unwrap());
    let reps: usize = std::env::args().nth(2).map_or(200, |v| v.parse().unwrap());
    let keys: Vec<[u8; 16]> = (0..n)
        .map(|i| {
            let mut k = [0u8; 16];
            k[..8].copy_from_slice(&i.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_be_bytes());
            k[8..].copy_from_slice(&i.to_be_bytes());
            k
        })
        .collect();
    let mut t = Vec::new();
    for r in 0..reps {
        let s = Instant::now();
        let hs: Vec<u64> = keys
            .iter()
            .map(|k| hash_key(k) ^ (r as u64).wrapping_mul(0x1234_5678_9abc_def1))
            .collect();
        let f = FuseFilter::build_owned(hs, 8).unwrap();
        std::hint::black_box(f);
        t.push(s.elapsed().as_nanos() as f64 / n as f64);
    }
    t.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!(
        "n={n} median {:.1} ns/key p10 {:.1}",
        t[t.len() / 2],
        t[t.len() / 10]
    );
}
