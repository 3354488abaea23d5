//! Space amplification (bytes on disk over live user bytes) before and after a manual
//! compaction, the closing figure of the space-reclaim issue: 1,000,000 keys (16 bytes) with
//! 100-byte values loaded in random order, every key overwritten once, half of them removed,
//! background compaction drained; then `compact()`.
//!
//! ```sh
//! cargo run --release --example space_amp            # tree in a temporary directory
//! cargo run --release --example space_amp -- /dev/shm/silt-space 1000000
//! ```
//!
//! Prints, before and after: `disk_size()` over the live user bytes (keys plus values of the
//! live keys), the tables, and the filter and index blocks on disk (what a table holds besides
//! its data) with the same figure over the live bytes; and the memory the filters and indexes
//! pin.
use siltdb::inspect::files::table_name;
use siltdb::inspect::table::{BlockKind, TableReader, BLOCK_TRAILER_LEN};
use siltdb::{Db, Options};
use std::path::Path;
use std::time::Instant;

const KEY_LEN: usize = 16;
const VALUE_LEN: usize = 100;

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Key `i`: 16 hex digits of a bijective mix of `i`, so keys are unique and in random order.
fn key(i: u64) -> [u8; KEY_LEN] {
    let mut k = [0u8; KEY_LEN];
    k.copy_from_slice(format!("{:016x}", mix(i)).as_bytes());
    k
}

fn value(i: u64, round: u64) -> [u8; VALUE_LEN] {
    let mut v = [0u8; VALUE_LEN];
    let mut x = mix(i ^ (round << 40));
    for chunk in v.chunks_mut(8) {
        x = mix(x);
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
    v
}

/// Bytes of filter and index blocks (with their trailers) in the current tables.
fn filter_and_index_on_disk(db: &Db, dir: &Path) -> (u64, u64) {
    let (mut filters, mut indexes) = (0, 0);
    for t in db.tables() {
        let r = TableReader::open_file(&dir.join(table_name(t.table_id))).expect("open table");
        for b in r.blocks() {
            let bytes = b.handle.size + BLOCK_TRAILER_LEN as u64;
            match b.kind {
                BlockKind::Filter => filters += bytes,
                BlockKind::Index => indexes += bytes,
                _ => {}
            }
        }
    }
    (filters, indexes)
}

fn report(what: &str, db: &Db, dir: &Path, live: u64) {
    let disk = db.disk_size().expect("disk size");
    let s = db.stats();
    let levels: Vec<String> = s
        .levels
        .iter()
        .filter(|l| l.tables > 0)
        .map(|l| format!("L{}: {} tables {} B", l.level, l.tables, l.bytes))
        .collect();
    let (filters, indexes) = filter_and_index_on_disk(db, dir);
    let amp = disk as f64 / live as f64;
    let overhead = (filters + indexes) as f64 / live as f64;
    println!("{what}");
    println!("  disk_size {disk} B over live user bytes {live} B: space amplification {amp:.3}");
    println!("  {}", levels.join(", "));
    println!(
        "  on disk: filter blocks {filters} B + index blocks {indexes} B = {overhead:.3} of the live bytes; \
         amplification without them {:.3}",
        amp - overhead
    );
    println!(
        "  in memory: filters {} B, indexes {} B, memtables {} B, block cache {} B",
        s.filter_memory_bytes, s.index_memory_bytes, s.memtable_memory_bytes, s.block_cache_bytes
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let tmp;
    let dir: &Path = match args.get(1) {
        Some(d) => Path::new(d),
        None => {
            tmp = tempfile::tempdir().expect("temporary directory");
            tmp.path()
        }
    };
    let n: u64 = args
        .get(2)
        .map_or(1_000_000, |s| s.parse().expect("key count"));
    let _ = Db::destroy(dir);
    let db = Db::open_with(dir, Options::default().bloom_bits_per_key(10.0)).expect("open");
    let start = Instant::now();
    for round in 0..2 {
        for i in 0..n {
            db.insert(key(i), value(i, round)).expect("insert");
        }
    }
    for i in (0..n).step_by(2) {
        db.remove(key(i)).expect("remove");
    }
    db.flush().expect("flush");
    db.wait_for_compactions().expect("settle");
    let live = (n - n.div_ceil(2)) * (KEY_LEN + VALUE_LEN) as u64;
    println!(
        "{n} keys of {KEY_LEN} B with {VALUE_LEN} B values in random order, each overwritten \
         once, every other one removed: {} live keys ({:.1} s)",
        n / 2,
        start.elapsed().as_secs_f64()
    );
    report(
        "before compact() (background compaction drained):",
        &db,
        dir,
        live,
    );
    let start = Instant::now();
    db.compact().expect("compact");
    println!("compact() took {:.1} s", start.elapsed().as_secs_f64());
    report("after compact():", &db, dir, live);
    let s = db.stats();
    println!(
        "compactions {} (trivial moves {}), write amplification {:.2}",
        s.compactions,
        s.trivial_moves,
        s.write_amplification()
    );
}
