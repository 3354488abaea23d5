//! Point-read benchmarks over two tree shapes, with filters off and at 10 bits per key:
//! `get_present`, `get_absent_in_range`, `get_absent_out_of_range`. After each benchmark the
//! data blocks read per get during it (from `Stats`) are printed next to the time, so time and
//! I/O sit side by side. Reads go through the same file reads as production with the block
//! cache off (`block_cache_size(0)`; the OS page cache holds the files). Run: `cargo bench --bench read_amp`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use siltdb::{Db, Options};
use std::hint::black_box;

const KEYS: u64 = 200_000;

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// 16-byte keys: stream 0 loaded, stream 1 absent in range, stream 2 above every loaded key.
fn key(stream: u64, i: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&splitmix(stream << 40 ^ (2 * i)).to_be_bytes());
    k[8..].copy_from_slice(&splitmix(stream << 40 ^ (2 * i + 1)).to_be_bytes());
    k[0] = ((u16::from(k[0]) * 0xf0) >> 8) as u8;
    if stream == 2 {
        k[0] = 0xf8;
    }
    k
}

#[derive(Clone, Copy)]
enum Shape {
    /// Eight L0 tables, each spanning the whole key range (no compaction).
    L0x8,
    /// A leveled tree with L1, L2 and L3 populated and L0 empty.
    Leveled3,
}

impl Shape {
    fn name(self) -> &'static str {
        match self {
            Shape::L0x8 => "8xL0",
            Shape::Leveled3 => "3-level",
        }
    }
}

fn build(dir: &std::path::Path, shape: Shape, bits: f64) -> Db {
    let value = [b'v'; 100];
    // No block cache (the default has 64 MiB, which would hold these trees): every block a
    // get needs is a file read, as the module documentation says.
    let opts = Options::default()
        .bloom_bits_per_key(bits)
        .block_cache_size(0);
    let db = match shape {
        Shape::L0x8 => {
            let db =
                Db::open_with(dir, opts.auto_compaction(false).memtable_size(64 << 20)).unwrap();
            for t in 0..8 {
                for i in (t..KEYS).step_by(8) {
                    db.insert(key(0, i), value).unwrap();
                }
                db.flush().unwrap();
            }
            db
        }
        Shape::Leveled3 => {
            let db = Db::open_with(
                dir,
                opts.memtable_size(256 << 10)
                    .level_base_size(512 << 10)
                    .target_table_size(256 << 10)
                    .l0_compaction_trigger(1),
            )
            .unwrap();
            for i in 0..KEYS {
                db.insert(key(0, i), value).unwrap();
            }
            db.flush().unwrap();
            db.wait_for_compactions().unwrap();
            db
        }
    };
    let shape: Vec<String> = db
        .levels()
        .iter()
        .filter(|l| l.tables > 0)
        .map(|l| format!("L{}:{}", l.level, l.tables))
        .collect();
    eprintln!(
        "tree {} bits/key {bits}: {}",
        shape_name(&db),
        shape.join(" ")
    );
    db
}

fn shape_name(db: &Db) -> String {
    db.path()
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn bench(c: &mut Criterion) {
    let root = tempfile::tempdir().unwrap();
    let mut dbs = Vec::new();
    for shape in [Shape::L0x8, Shape::Leveled3] {
        for bits in [0.0, 10.0] {
            let dir = root.path().join(format!("{}-{bits}", shape.name()));
            let db = build(&dir, shape, bits);
            dbs.push((shape, bits, db));
        }
    }
    let groups: [(&str, u64, bool); 3] = [
        ("get_present", 0, true),
        ("get_absent_in_range", 1, false),
        ("get_absent_out_of_range", 2, false),
    ];
    for (group, stream, present) in groups {
        let mut g = c.benchmark_group(group);
        g.throughput(Throughput::Elements(1));
        for (shape, bits, db) in &dbs {
            let filter = if *bits == 0.0 {
                "filter_off"
            } else {
                "bloom_10"
            };
            let id = BenchmarkId::new(filter, shape.name());
            let before = db.stats();
            let mut i = 0u64;
            g.bench_function(id.clone(), |b| {
                b.iter(|| {
                    i += 1;
                    let k = if present {
                        key(0, splitmix(i) % KEYS)
                    } else {
                        key(stream, i)
                    };
                    let v = db.get(black_box(k)).unwrap();
                    debug_assert_eq!(v.is_some(), present);
                    v
                })
            });
            let after = db.stats();
            let gets = (after.gets - before.gets).max(1);
            eprintln!(
                "{group}/{filter}/{}: data blocks per get {:.4}, bytes per get {:.1}, tables considered per get {:.3} ({} gets measured by Stats)",
                shape.name(),
                (after.data_block_reads - before.data_block_reads) as f64 / gets as f64,
                (after.bytes_read - before.bytes_read) as f64 / gets as f64,
                (after.tables_considered - before.tables_considered) as f64 / gets as f64,
                gets
            );
        }
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
