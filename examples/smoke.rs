use siltdb::{Db, Options};
use std::time::Instant;

fn main() -> siltdb::Result<()> {
    let dir = tempfile::tempdir().unwrap();
    let n: u64 = std::env::args()
        .nth(1)
        .map(|s| s.parse().unwrap())
        .unwrap_or(200_000);
    let db = Db::open_with(
        dir.path(),
        Options::default()
            .memtable_size(1 << 20)
            .level_base_size(4 << 20)
            .target_table_size(1 << 20),
    )?;
    let t = Instant::now();
    let mut x = 1u64;
    for _ in 0..n {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let k = format!("{:016x}", x);
        db.insert(&k, vec![b'v'; 100])?;
    }
    println!("insert {:.0}/s", n as f64 / t.elapsed().as_secs_f64());
    db.flush()?;
    std::thread::sleep(std::time::Duration::from_millis(500));
    for l in db.levels() {
        if l.tables > 0 {
            println!("{:?}", l);
        }
    }
    let t = Instant::now();
    let mut x = 1u64;
    let mut found = 0;
    for _ in 0..n {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let k = format!("{:016x}", x);
        if db.get(&k)?.is_some() {
            found += 1;
        }
    }
    println!(
        "get present {:.0}/s found {found}",
        n as f64 / t.elapsed().as_secs_f64()
    );
    let s0 = db.stats();
    let t = Instant::now();
    for i in 0..n {
        db.get(format!("{:016x}x", i))?;
    }
    println!("get absent {:.0}/s", n as f64 / t.elapsed().as_secs_f64());
    let s = db.stats();
    println!(
        "absent: blocks/get {:.4} fp {} neg {}",
        (s.data_block_reads - s0.data_block_reads) as f64 / n as f64,
        s.filter_false_positives - s0.filter_false_positives,
        s.filter_negatives - s0.filter_negatives
    );
    let c = db.iter().count();
    println!("scan {c}; rev {}", db.iter().rev().count());
    println!("{:?}", db.check_invariants());
    println!(
        "flushes {} compactions {} wamp {:.2}",
        s.flushes,
        s.compactions,
        s.write_amplification()
    );
    Ok(())
}
