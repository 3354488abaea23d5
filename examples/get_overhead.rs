//! Point-get time on a fixed tree, one measurement per process, so that two builds can be
//! paired back to back (`farm-bench --vs`): the check that range deletes cost a get nothing
//! when the tree has no range tombstone (issue 16; `docs/range-deletes.md` has the figures).
//!
//! ```sh
//! cargo run --release --example get_overhead -- /tmp/go build     # once: 200,000 keys
//! target/release/examples/get_overhead /tmp/go present           # 20M gets of present keys
//! target/release/examples/get_overhead /tmp/go absent            # absent, inside the range
//! target/release/examples/get_overhead /tmp/go outside           # absent, past every table
//! ```
//!
//! The tree: 16-byte keys, 100-byte values, 10 bits per key, 256 KiB memtables and tables,
//! compacted into one level (92 tables) so that every build reads the same shape; the block
//! cache is the default one. Prints nanoseconds per get.
use siltdb::{Db, Options};
use std::time::Instant;

const KEYS: u64 = 200_000;
const GETS: u64 = 20_000_000;

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Key `i` of stream `s` (stream 0 is loaded; stream 2 sorts after every loaded key).
fn key(stream: u8, i: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[0] = b'a' + stream;
    k[8..].copy_from_slice(&splitmix(i).to_be_bytes());
    k
}

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = args.next().unwrap_or_else(|| "/tmp/get_overhead".into());
    let mode = args.next().unwrap_or_else(|| "present".into());
    let opts = Options::default()
        .bloom_bits_per_key(10.0)
        .memtable_size(256 << 10)
        .level_base_size(512 << 10)
        .target_table_size(256 << 10)
        .l0_compaction_trigger(1);
    let db = Db::open_with(&dir, opts).expect("open");
    if mode == "build" {
        for i in 0..KEYS {
            db.insert(key(0, i), [b'v'; 100]).expect("insert");
        }
        db.compact().expect("compact");
        return;
    }
    let t = Instant::now();
    let mut found = 0u64;
    for i in 0..GETS {
        let k = match mode.as_str() {
            "outside" => key(2, i),
            "absent" => key(0, KEYS + i),
            _ => key(0, splitmix(i) % KEYS),
        };
        found += u64::from(db.get(k).expect("get").is_some());
    }
    let ns = t.elapsed().as_nanos() as f64 / GETS as f64;
    println!("{mode}: {ns:.1} ns/get, {found} found");
}
