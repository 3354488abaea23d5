// the pre-cache baseline for the cache figures (same keys, same measurement).
use siltdb::{Db, Options};
use std::time::Instant;
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}
fn key(i: u64, present: bool) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&mix(i).to_be_bytes());
    k[8..].copy_from_slice(&(if present { i } else { i | 1 << 63 }).to_be_bytes());
    k
}
fn main() {
    let mut a = std::env::args().skip(1);
    let dir = a.next().unwrap();
    let keys: u64 = a.next().unwrap().parse().unwrap();
    let db = Db::open_with(&dir, Options::default().bloom_bits_per_key(10.0)).unwrap();
    for (present, seed) in [(true, 1u64), (false, 2u64)] {
        let n = 3_000_000u64;
        let t = Instant::now();
        let mut x = seed;
        for _ in 0..n {
            x = mix(x);
            let v = db.get(key(x % keys, present)).unwrap();
            assert_eq!(v.is_some(), present);
        }
        println!("old code: {} gets/s {}", if present { "present" } else { "absent" }, (n as f64 / t.elapsed().as_secs_f64()) as u64);
    }
}
