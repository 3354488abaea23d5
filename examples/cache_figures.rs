//! The read-path figures of the caches issue, measured side by side in one process on one
//! tree: 1,000,000 keys (16 bytes) with 100-byte values written in random order, settled
//! (compactions drained), 10 bits per key.
//!
//! ```sh
//! cargo run --release --example cache_figures            # tree in a temporary directory
//! cargo run --release --example cache_figures -- /dev/shm/silt-figures 1000000
//! ```
//!
//! Prints: (1) write system calls per MiB of table written (flushes and compactions) and read
//! calls per MiB of compaction input, counted by a file-system wrapper; (2) present- and
//! absent-key gets per second with the block cache off and on (holding the working set), one
//! and two reader threads; (3) absent-key gets with empty and with full memtables (the memtable
//! filters), on two copies of the tree measured alternately; (4) the block cache's hit rate on a zipfian (0.99) read mix with a concurrent full
//! scan, with the default admission and with a second-sighting doorkeeper.
use siltdb::fs::{FileLock, FileSystem, OsFs, RandomAccessFile, WritableFile};
use siltdb::{Admission, BlockCache, Db, Options};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Counts table-file writes and reads (calls and bytes).
#[derive(Debug, Default)]
struct Io {
    writes: AtomicU64,
    write_bytes: AtomicU64,
    reads: AtomicU64,
    read_bytes: AtomicU64,
}

#[derive(Debug, Clone)]
struct CountingFs {
    io: Arc<Io>,
}

#[derive(Debug)]
struct CountedWrite {
    inner: Box<dyn WritableFile>,
    io: Option<Arc<Io>>,
}

impl WritableFile for CountedWrite {
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        if let Some(io) = &self.io {
            io.writes.fetch_add(1, Ordering::Relaxed);
            io.write_bytes
                .fetch_add(data.len() as u64, Ordering::Relaxed);
        }
        self.inner.append(data)
    }
    fn sync(&mut self) -> io::Result<()> {
        self.inner.sync()
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
}

#[derive(Debug)]
struct CountedRead {
    inner: Arc<dyn RandomAccessFile>,
    io: Arc<Io>,
}

impl RandomAccessFile for CountedRead {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.io.reads.fetch_add(1, Ordering::Relaxed);
        self.io
            .read_bytes
            .fetch_add(buf.len() as u64, Ordering::Relaxed);
        self.inner.read_exact_at(buf, offset)
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
}

fn is_table(p: &Path) -> bool {
    p.extension().is_some_and(|e| e == "sst")
}

impl FileSystem for CountingFs {
    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        Ok(Box::new(CountedWrite {
            inner: OsFs.create(path)?,
            io: is_table(path).then(|| self.io.clone()),
        }))
    }
    fn create_log(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        OsFs.create_log(path)
    }
    fn open(&self, path: &Path) -> io::Result<Arc<dyn RandomAccessFile>> {
        let inner = OsFs.open(path)?;
        if is_table(path) {
            Ok(Arc::new(CountedRead {
                inner,
                io: self.io.clone(),
            }))
        } else {
            Ok(inner)
        }
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        OsFs.rename(from, to)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        OsFs.remove(path)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        OsFs.list(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        OsFs.create_dir_all(dir)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        OsFs.sync_dir(dir)
    }
    fn sync_file(&self, path: &Path) -> io::Result<()> {
        OsFs.sync_file(path)
    }
    fn lock(&self, path: &Path) -> io::Result<Box<dyn FileLock>> {
        OsFs.lock(path)
    }
    fn exists(&self, path: &Path) -> bool {
        OsFs.exists(path)
    }
}

/// splitmix64: the key stream.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The 16-byte key of item `i`; absent keys use another stream inside the same range.
fn key(i: u64, present: bool) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&mix(i).to_be_bytes());
    k[8..].copy_from_slice(&(if present { i } else { i | 1 << 63 }).to_be_bytes());
    k
}

/// YCSB's zipfian generator over `0..n` with constant `theta`.
struct Zipf {
    n: f64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
    state: u64,
}

impl Zipf {
    fn new(n: u64, theta: f64, seed: u64) -> Zipf {
        let zeta = |m: u64| (1..=m).map(|i| 1.0 / (i as f64).powf(theta)).sum::<f64>();
        let zetan = zeta(n);
        let zeta2 = zeta(2);
        let nf = n as f64;
        Zipf {
            n: nf,
            theta,
            alpha: 1.0 / (1.0 - theta),
            zetan,
            eta: (1.0 - (2.0 / nf).powf(1.0 - theta)) / (1.0 - zeta2 / zetan),
            state: seed,
        }
    }

    fn next(&mut self) -> u64 {
        self.state = mix(self.state);
        let u = (self.state >> 11) as f64 / (1u64 << 53) as f64;
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1;
        }
        ((self.n * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64).min(self.n as u64 - 1)
    }
}

/// Copies the files of a database directory (flat: siltdb keeps no subdirectories).
fn copy_dir(from: &Path, to: &Path) -> io::Result<()> {
    let _ = std::fs::remove_dir_all(to);
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        if e.file_type()?.is_file() {
            std::fs::copy(e.path(), to.join(e.file_name()))?;
        }
    }
    Ok(())
}

fn opts(fs: &CountingFs) -> Options {
    Options::default()
        .bloom_bits_per_key(10.0)
        .file_system(Arc::new(fs.clone()))
}

fn gets_per_sec(db: &Db, n: u64, threads: u64, present: bool, seed: u64) -> f64 {
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            s.spawn(move || {
                let mut x = seed ^ (t << 40);
                for _ in 0..n {
                    x = mix(x);
                    let v = db
                        .get(key(x % KEYS.load(Ordering::Relaxed), present))
                        .unwrap();
                    assert_eq!(v.is_some(), present);
                }
            });
        }
    });
    (n * threads) as f64 / start.elapsed().as_secs_f64()
}

static KEYS: AtomicU64 = AtomicU64::new(1_000_000);

fn main() {
    let mut args = std::env::args().skip(1);
    let tmp;
    let dir: PathBuf = match args.next() {
        Some(d) => PathBuf::from(d),
        None => {
            tmp = tempfile::tempdir().unwrap();
            tmp.path().join("db")
        }
    };
    let keys: u64 = args.next().map_or(1_000_000, |s| s.parse().unwrap());
    KEYS.store(keys, Ordering::Relaxed);
    if let Some(mode) = args.next() {
        // Profiling aid: reopen an existing tree and run one kind of get for a while.
        let fs = CountingFs {
            io: Arc::new(Io::default()),
        };
        let cache = if mode.starts_with("cached") {
            512 << 20
        } else {
            0
        };
        let present = !mode.ends_with("absent");
        let db = Db::open_with(&dir, opts(&fs).block_cache_size(cache)).unwrap();
        for i in 0..keys {
            db.get(key(i, true)).unwrap();
        }
        let r = gets_per_sec(&db, 3_000_000, 1, present, 9);
        println!("{mode}: {r:.0} gets/s");
        return;
    }
    let _ = std::fs::remove_dir_all(&dir);
    let fs = CountingFs {
        io: Arc::new(Io::default()),
    };
    let io = fs.io.clone();

    // Build: random order, then drain compactions, then one full compaction to count its reads.
    let t = Instant::now();
    let db = Db::open_with(&dir, opts(&fs)).unwrap();
    let value = [b'v'; 100];
    for i in 0..keys {
        db.insert(key(i, true), value).unwrap();
    }
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();
    let (w, wb) = (
        io.writes.load(Ordering::Relaxed),
        io.write_bytes.load(Ordering::Relaxed),
    );
    println!(
        "load {keys} keys: {:.1} s; table writes: {w} calls for {:.1} MiB = {:.2} write calls per MiB",
        t.elapsed().as_secs_f64(),
        wb as f64 / 1048576.0,
        w as f64 / (wb as f64 / 1048576.0)
    );
    let s = db.stats();
    let data_blocks: u64 = db.tables().iter().map(|t| t.bytes).sum::<u64>() / 4096;
    println!(
        "  (one write per ~4 KiB block before this change would be ~{:.0} per MiB; tree: {:?} tables per level, {} flushes, {} compactions)",
        1048576.0 / 4096.0,
        s.levels.iter().map(|l| l.tables).collect::<Vec<_>>(),
        s.flushes,
        s.compactions,
    );
    let _ = data_blocks;
    // No get ran yet: every table read so far was a compaction reading its inputs, or a new
    // table's footer, index, filter and properties being read once when it was opened.
    let (r, rb) = (
        io.reads.load(Ordering::Relaxed),
        io.read_bytes.load(Ordering::Relaxed),
    );
    let opens = 4.0 * s.table_opens as f64; // footer, properties, index, filter per open: an upper bound
    let input = s.bytes_compacted_read as f64 / 1048576.0;
    println!(
        "compaction reads during the load: {input:.1} MiB of input; {r} table read calls in all ({:.1} MiB), at most {opens:.0} of them opening tables = {:.2} read calls per MiB of input (one per ~4 KiB block before: ~256)",
        rb as f64 / 1048576.0,
        (r as f64 - opens).max(0.0) / input
    );
    db.close().unwrap();
    drop(db);

    // Gets: cache off, then on with room for the whole working set.
    let n = 300_000u64.min(keys * 3);
    println!("\nrandom gets, {n} per thread, settled tree, 10 bits/key:");
    println!("{:<34} {:>12} {:>12}", "setting", "gets/s", "vs cache off");
    let off = Db::open_with(&dir, opts(&fs).block_cache_size(0)).unwrap();
    let p_off = gets_per_sec(&off, n, 1, true, 1);
    let a_off = gets_per_sec(&off, n, 1, false, 2);
    let p2_off = gets_per_sec(&off, n, 2, true, 3);
    println!(
        "{:<34} {:>12.0} {:>12}",
        "present, cache off, 1 thread", p_off, "1.00x"
    );
    println!(
        "{:<34} {:>12.0} {:>12}",
        "absent, cache off, 1 thread", a_off, "1.00x"
    );
    println!(
        "{:<34} {:>12.0} {:>11.2}x",
        "present, cache off, 2 threads",
        p2_off,
        p2_off / p_off
    );
    off.close().unwrap();
    drop(off);
    let on = Db::open_with(&dir, opts(&fs).block_cache_size(512 << 20)).unwrap();
    for i in 0..keys {
        on.get(key(i, true)).unwrap();
    }
    let warm = on.stats();
    let p_on = gets_per_sec(&on, n, 1, true, 1);
    let a_on = gets_per_sec(&on, n, 1, false, 2);
    let p2_on = gets_per_sec(&on, n, 2, true, 3);
    let s = on.stats();
    println!(
        "{:<34} {:>12.0} {:>11.2}x",
        "present, cache on, 1 thread",
        p_on,
        p_on / p_off
    );
    println!(
        "{:<34} {:>12.0} {:>11.2}x",
        "absent, cache on, 1 thread",
        a_on,
        a_on / a_off
    );
    println!(
        "{:<34} {:>12.0} {:>11.2}x  ({:.2}x one thread with the cache on)",
        "present, cache on, 2 threads",
        p2_on,
        p2_on / p2_off,
        p2_on / p_on
    );
    println!(
        "  cache after warm-up: {} hits / {} misses in the measured gets",
        s.block_cache_hits - warm.block_cache_hits,
        s.block_cache_misses - warm.block_cache_misses
    );

    on.close().unwrap();
    drop(on);

    // Memtable filters: absent gets on two copies of the tree, one with an empty memtable and
    // one whose memtable holds 30,000 entries, measured alternately (five rounds each, the
    // copies' order swapped every round) so that a noisy machine moves both alike; the
    // median of the per-round ratios.
    let mut copy = dir.clone().into_os_string();
    copy.push("-with-memtable");
    let copy = PathBuf::from(copy);
    copy_dir(&dir, &copy).unwrap();
    let empty_db = Db::open_with(&dir, opts(&fs).block_cache_size(512 << 20)).unwrap();
    let full_db = Db::open_with(&copy, opts(&fs).block_cache_size(512 << 20)).unwrap();
    let mut i = 0u64;
    while full_db.stats().memtable_filter_bytes == 0 || i < 30_000 {
        full_db.insert(key(keys + i, true), value).unwrap();
        i += 1;
    }
    // One pass over each first, so that both have opened their tables and warmed their
    // caches before anything is timed.
    gets_per_sec(&empty_db, n, 1, false, 3);
    gets_per_sec(&full_db, n, 1, false, 3);
    let before = full_db.stats();
    let (mut ratios, mut empties, mut fulls) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..5u64 {
        let (e, f) = if round % 2 == 0 {
            let e = gets_per_sec(&empty_db, n, 1, false, 4 + round);
            (e, gets_per_sec(&full_db, n, 1, false, 4 + round))
        } else {
            let f = gets_per_sec(&full_db, n, 1, false, 4 + round);
            (gets_per_sec(&empty_db, n, 1, false, 4 + round), f)
        };
        ratios.push(f / e);
        empties.push(e);
        fulls.push(f);
    }
    let after = full_db.stats();
    let med = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "\nabsent gets, 5 alternated rounds: empty memtable {:.0}/s, memtable holding {i} entries {:.0}/s (medians); full / empty per round {} = median {:.3}x; memtable filter negatives {} false positives {} ({} filter bytes)",
        med(&mut empties),
        med(&mut fulls),
        ratios.iter().map(|r| format!("{r:.3}")).collect::<Vec<_>>().join(" "),
        med(&mut ratios),
        after.memtable_filter_negatives - before.memtable_filter_negatives,
        after.memtable_filter_false_positives - before.memtable_filter_false_positives,
        after.memtable_filter_bytes
    );
    full_db.close().unwrap();
    empty_db.close().unwrap();
    drop((full_db, empty_db));
    std::fs::remove_dir_all(&copy).unwrap();

    // Admission: zipfian gets with a concurrent full scan, cache far smaller than the data.
    println!("\nzipfian(0.99) gets with a concurrent full scan, 16 MiB cache:");
    for (name, admission) in [
        ("default (quick_cache S3-FIFO)", Admission::Always),
        ("second-sighting doorkeeper", Admission::SecondSighting),
    ] {
        let cache = BlockCache::with_admission(16 << 20, admission);
        let db = Db::open_with(&dir, opts(&fs).block_cache(cache)).unwrap();
        let stop = AtomicU64::new(0);
        let mut zipf = Zipf::new(keys, 0.99, 7);
        let gets = 400_000u64;
        let t = Instant::now();
        std::thread::scope(|s| {
            s.spawn(|| {
                while stop.load(Ordering::Relaxed) == 0 {
                    for kv in db.iter() {
                        kv.unwrap();
                        if stop.load(Ordering::Relaxed) != 0 {
                            break;
                        }
                    }
                }
            });
            for _ in 0..gets {
                // Scramble the rank so that hot keys spread over the key space.
                let rank = zipf.next();
                db.get(key(mix(rank ^ 0x5555) % keys, true)).unwrap();
            }
            stop.store(1, Ordering::Relaxed);
        });
        let s = db.stats();
        println!(
            "  {name:<32} hit rate {:.2}% ({} hits, {} misses), {:.0} gets/s",
            100.0 * s.block_cache_hits as f64 / (s.block_cache_hits + s.block_cache_misses) as f64,
            s.block_cache_hits,
            s.block_cache_misses,
            gets as f64 / t.elapsed().as_secs_f64()
        );
        db.close().unwrap();
    }
}
