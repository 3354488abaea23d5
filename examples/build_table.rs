//! Writes one SSTable of N keys (16-byte keys, 100-byte values) and prints its path, for
//! inspecting with `silt sst ...`.
//!
//! `cargo run --release --example build_table DIR [KEYS] [BITS_PER_KEY]` (defaults 1,000,000
//! and 10).

use siltdb::{Db, Options};

fn main() -> siltdb::Result<()> {
    let mut args = std::env::args().skip(1);
    let dir = args
        .next()
        .expect("usage: build_table DIR [KEYS] [BITS_PER_KEY]");
    let n: u64 = args
        .next()
        .map(|s| s.parse().expect("KEYS"))
        .unwrap_or(1_000_000);
    let bits: f64 = args
        .next()
        .map(|s| s.parse().expect("BITS_PER_KEY"))
        .unwrap_or(10.0);
    let db = Db::open_with(
        &dir,
        Options::default()
            .bloom_bits_per_key(bits)
            .auto_compaction(false)
            .memtable_size(1 << 30),
    )?;
    for i in 0..n {
        let mut k = [0u8; 16];
        k[..8].copy_from_slice(&i.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_be_bytes());
        k[8..].copy_from_slice(&i.to_be_bytes());
        db.insert(k, [b'v'; 100])?;
    }
    db.flush()?;
    for t in db.tables() {
        println!(
            "{}",
            std::path::Path::new(&dir)
                .join(siltdb::inspect::files::table_name(t.table_id))
                .display()
        );
    }
    db.close()
}
