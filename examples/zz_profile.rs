use siltdb::{Db, Options};
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
fn main() {
    let dir = std::path::Path::new("/tmp/zzprof");
    let reuse = dir.exists();
    let db = Db::open_with(
        dir,
        Options::default()
            .bloom_bits_per_key(10.0)
            .auto_compaction(false)
            .memtable_size(1 << 30),
    )
    .unwrap();
    if !reuse {
        for i in 0..1_000_000u64 {
            db.insert(key(0, i), [b'v'; 100]).unwrap();
            if (i + 1) % 125_000 == 0 {
                db.flush().unwrap();
            }
        }
    }
    let mode = std::env::args().nth(1).unwrap_or("absent".into());
    let t = std::time::Instant::now();
    let n = 2_000_000u64;
    for j in 0..n {
        let k = if mode == "present" {
            key(0, splitmix(j) % 1_000_000)
        } else {
            key(1, j)
        };
        std::hint::black_box(db.get(k).unwrap());
    }
    eprintln!("{mode}: {:.0} gets/s", n as f64 / t.elapsed().as_secs_f64());
}
