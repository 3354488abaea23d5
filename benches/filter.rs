//! Filter build (ns/key) and probe (ns/query, positive and negative) of the blocked Bloom
//! filter at 10 bits per key, the binary fuse filter with 8- and 16-bit fingerprints and the
//! Ribbon filter at 7 bits per key (about Bloom 10's false-positive rate), for
//! a filter that fits in L2 (100,000 keys, ~125 KB) and one that does not (10,000,000 keys,
//! 11-12.5 MB). Run: `cargo bench --bench filter`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use siltdb::inspect::filter::{hash_key, BloomFilter, Filter, FuseFilter, RibbonFilter};
use std::hint::black_box;

fn key(i: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&i.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_be_bytes());
    k[8..].copy_from_slice(&i.to_be_bytes());
    k
}

fn bench(c: &mut Criterion) {
    for &n in &[100_000u64, 10_000_000] {
        let keys: Vec<[u8; 16]> = (0..n).map(key).collect();
        let hashes: Vec<u64> = keys.iter().map(|k| hash_key(k)).collect();

        let mut g = c.benchmark_group("filter_build");
        g.sample_size(if n > 1_000_000 { 10 } else { 30 });
        g.throughput(Throughput::Elements(n));
        g.bench_function(BenchmarkId::new("hash_and_build_10bpk", n), |b| {
            b.iter(|| {
                let hs: Vec<u64> = keys.iter().map(|k| hash_key(k)).collect();
                black_box(BloomFilter::build(&hs, 10.0))
            })
        });
        g.bench_function(BenchmarkId::new("build_from_hashes_10bpk", n), |b| {
            b.iter(|| black_box(BloomFilter::build(&hashes, 10.0)))
        });
        for width in [8u32, 16] {
            g.bench_function(
                BenchmarkId::new(format!("fuse{width}_hash_and_build"), n),
                |b| {
                    // As a table build does: the hashes it collected are the build's scratch
                    // (no copy of them).
                    b.iter(|| {
                        let hs: Vec<u64> = keys.iter().map(|k| hash_key(k)).collect();
                        black_box(FuseFilter::build_owned(hs, width))
                    })
                },
            );
        }
        g.bench_function(BenchmarkId::new("ribbon7_hash_and_build", n), |b| {
            b.iter(|| {
                let hs: Vec<u64> = keys.iter().map(|k| hash_key(k)).collect();
                black_box(RibbonFilter::build(&hs, 7.0))
            })
        });
        g.finish();

        // The probes go through the `Filter` enum, as a get's do.
        let filters = [
            ("bloom10", Filter::Bloom(BloomFilter::build(&hashes, 10.0))),
            (
                "fuse8",
                Filter::Fuse(FuseFilter::build(&hashes, 8).expect("fuse8")),
            ),
            (
                "fuse16",
                Filter::Fuse(FuseFilter::build(&hashes, 16).expect("fuse16")),
            ),
            (
                "ribbon7",
                Filter::Ribbon(RibbonFilter::build(&hashes, 7.0).expect("ribbon7")),
            ),
        ];
        // A million distinct queries, walked in batches: the lines they touch are spread over
        // the whole filter, so a 10M-key filter is probed from memory, not from a warm cache.
        let batch = 4096usize;
        let queries = 1usize << 20;
        let positive: Vec<u64> = (0..queries)
            .map(|i| hashes[(i * 7919) % n as usize])
            .collect();
        let negative: Vec<u64> = (0..queries as u64)
            .map(|i| hash_key(&key(n + 1 + i)))
            .collect();
        let negative_keys: Vec<[u8; 16]> = (0..queries as u64).map(|i| key(n + 1 + i)).collect();
        let mut g = c.benchmark_group("filter_probe");
        g.throughput(Throughput::Elements(batch as u64));
        for (kind, filter) in &filters {
            for (name, set) in [("negative", &negative), ("positive", &positive)] {
                let mut at = 0usize;
                g.bench_function(BenchmarkId::new(format!("{kind}_{name}"), n), |b| {
                    b.iter(|| {
                        at = (at + batch) % queries;
                        set[at..at + batch]
                            .iter()
                            .filter(|&&h| filter.may_contain_hash(black_box(h)))
                            .count()
                    })
                });
            }
            let mut at = 0usize;
            g.bench_function(
                BenchmarkId::new(format!("{kind}_negative_with_hash"), n),
                |b| {
                    b.iter(|| {
                        at = (at + batch) % queries;
                        negative_keys[at..at + batch]
                            .iter()
                            .filter(|k| filter.may_contain_hash(hash_key(black_box(*k))))
                            .count()
                    })
                },
            );
        }
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
