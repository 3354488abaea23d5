//! The workloads, named as in RocksDB's `db_bench` and YCSB, and what one run of each
//! measures.

use crate::engine::Engine;
use serde::Serialize;
use std::path::Path;
use std::time::Instant;

/// Every workload, in the order a run takes them (the reads need `fillrandom`'s data).
pub const ALL: [&str; 14] = [
    "fillseq",
    "fillrandom",
    "overwrite",
    "readrandom",
    "readmissing",
    "seekrandom",
    "readwhilewriting",
    "ycsb-a",
    "ycsb-b",
    "ycsb-c",
    "ycsb-d",
    "ycsb-e",
    "ycsb-f",
    "verify",
];

/// Sizes and counts of a run.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub keys: u64,
    pub reads: u64,
    pub key_size: usize,
    pub value_size: usize,
    pub threads: u64,
    pub seed: u64,
}

/// One workload's figures.
#[derive(Debug, Serialize)]
pub struct Figures {
    pub engine: String,
    pub workload: String,
    pub ops: u64,
    pub seconds: f64,
    pub ops_per_sec: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    /// Peak resident set of the engine's process so far (MiB).
    pub peak_rss_mib: f64,
    /// Bytes of the database directory after the workload.
    pub disk_bytes: u64,
    /// Bytes the process wrote to the device during the workload per user byte written
    /// (`/proc/self/io` `write_bytes`); `None` for read-only workloads (whatever background
    /// work an engine carried over from the workload before is not theirs).
    pub write_amp: Option<f64>,
    /// Data blocks read per get, where the engine counts them.
    pub blocks_per_get: Option<f64>,
    /// Keys loaded (the run's `--keys`).
    pub keys: u64,
    /// Tables considered per get, where the engine counts them.
    pub tables_per_get: Option<f64>,
    /// Filter probes per get, where the engine counts them.
    pub filter_probes_per_get: Option<f64>,
    /// Tables per level after the workload, where the engine says.
    pub levels: Option<String>,
    /// Filter memory after the workload (MiB), where the engine says.
    pub filter_mib: Option<f64>,
    /// Index memory after the workload (MiB), where the engine says.
    pub index_mib: Option<f64>,
}

pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Key `i`: a hashed 8-byte prefix (random order), then `i`, zero-padded to `size`. An absent
/// key of the same range sets the top bit of the second half. `sequential` keys are `i`
/// big-endian.
pub fn key(i: u64, size: usize, present: bool, sequential: bool) -> Vec<u8> {
    let mut k = vec![0u8; size.max(16)];
    let low = if present { i } else { i | 1 << 63 };
    if !sequential {
        k[..8].copy_from_slice(&mix(i).to_be_bytes());
    }
    k[8..16].copy_from_slice(&low.to_be_bytes());
    k
}

/// Gets `k`, a key the workload wrote, timed in `lat`: its value, or an error naming it
/// (`what`) if it is missing.
fn get_present(
    engine: &dyn Engine,
    lat: &mut Latencies,
    k: &[u8],
    what: impl FnOnce() -> String,
) -> Result<Vec<u8>, String> {
    lat.time(|| engine.get(k))?
        .ok_or_else(|| format!("{} lost", what()))
}

/// True if `v` is a value written for key `i` (any round): it starts with `value`'s stamp
/// `"{i}-"`, as far as the value's size holds it, but for its first byte's low bit, which
/// YCSB-F's read-modify-write flips.
fn stamped_for(v: &[u8], i: u64, size: usize) -> bool {
    let stamp = format!("{i}-");
    let n = stamp.len().min(size);
    v.len() == size
        && v[..n]
            .iter()
            .zip(&stamp.as_bytes()[..n])
            .enumerate()
            .all(|(j, (a, b))| a == b || (j == 0 && a ^ 1 == *b))
}

fn value(i: u64, round: u64, size: usize) -> Vec<u8> {
    let mut v = vec![b'v'; size];
    let stamp = format!("{i}-{round}");
    let n = stamp.len().min(size);
    v[..n].copy_from_slice(&stamp.as_bytes()[..n]);
    v
}

/// YCSB's scrambled zipfian choice over `0..n` (Gray et al., theta 0.99).
pub struct Zipf {
    n: u64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
    state: u64,
}

impl Zipf {
    pub fn new(n: u64, seed: u64) -> Zipf {
        let theta = 0.99;
        let zeta = |n: u64| (1..=n).map(|i| 1.0 / (i as f64).powf(theta)).sum::<f64>();
        let (zetan, zeta2) = (zeta(n.max(1)), zeta(2));
        let alpha = 1.0 / (1.0 - theta);
        let eta = (1.0 - (2.0 / n.max(2) as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan);
        Zipf {
            n: n.max(1),
            theta,
            alpha,
            zetan,
            eta,
            state: seed,
        }
    }

    fn uniform(&mut self) -> f64 {
        self.state = mix(self.state);
        (self.state >> 11) as f64 / (1u64 << 53) as f64
    }

    /// The rank (0 = most popular).
    pub fn rank(&mut self) -> u64 {
        let u = self.uniform();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1;
        }
        let r = (self.n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        r.min(self.n - 1)
    }

    /// A key index, popular ranks scattered over the key space.
    pub fn scrambled(&mut self) -> u64 {
        mix(self.rank()) % self.n
    }
}

/// Peak resident set size of this process (MiB).
pub fn peak_rss_mib() -> f64 {
    proc_field("/proc/self/status", "VmHWM:").map_or(0.0, |kb| kb as f64 / 1024.0)
}

/// Bytes this process caused to be written to the device so far.
pub fn device_write_bytes() -> u64 {
    proc_field("/proc/self/io", "write_bytes:").unwrap_or(0)
}

fn proc_field(file: &str, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(file).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Bytes of every file under `dir`.
pub fn disk_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(|e| e.ok())
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => disk_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// Per-operation latencies (nanoseconds), sorted at the end for percentiles.
#[derive(Default)]
struct Latencies(Vec<u32>);

impl Latencies {
    fn time<T>(&mut self, f: impl FnOnce() -> T) -> T {
        let t = Instant::now();
        let out = f();
        self.0
            .push(u32::try_from(t.elapsed().as_nanos()).unwrap_or(u32::MAX));
        out
    }

    fn merge(&mut self, other: Latencies) {
        self.0.extend(other.0);
    }

    fn percentile(&mut self, p: f64) -> f64 {
        if self.0.is_empty() {
            return 0.0;
        }
        self.0.sort_unstable();
        let i = ((self.0.len() as f64 - 1.0) * p).round() as usize;
        f64::from(self.0[i]) / 1000.0
    }
}

/// Runs `workload` on `engine` (whose data lives in `dir`) and returns its figures.
pub fn run(
    engine_name: &str,
    engine: &dyn Engine,
    dir: &Path,
    workload: &str,
    s: Shape,
) -> Result<Figures, String> {
    let written_before = device_write_bytes();
    let blocks_before = engine.blocks_read();
    let path_before = engine.read_path();
    // The zipfian key chooser of a YCSB workload sums a million powers to set up: before the
    // timer, which measures the engine.
    let zipf = workload
        .starts_with("ycsb")
        .then(|| Zipf::new(s.keys, s.seed ^ 0xabc));
    let start = Instant::now();
    let mut lat = Latencies::default();
    let mut user_bytes = 0u64;
    let mut gets = 0u64;
    let per_op = (s.key_size.max(16) + s.value_size) as u64;
    let ops = match workload {
        "fillseq" | "fillrandom" | "overwrite" => {
            let sequential = workload == "fillseq";
            let round = u64::from(workload == "overwrite");
            for n in 0..s.keys {
                let i = if workload == "overwrite" {
                    mix(n ^ s.seed) % s.keys
                } else {
                    n
                };
                let k = key(i, s.key_size, true, sequential);
                let v = value(i, round, s.value_size);
                lat.time(|| engine.put(&k, &v))?;
            }
            engine.wait_quiet()?;
            user_bytes = s.keys * per_op;
            s.keys
        }
        "readrandom" | "readmissing" => {
            let present = workload == "readrandom";
            gets = s.reads / s.threads * s.threads;
            let merged = threads(s, |t, lat| {
                let mut x = s.seed ^ (t << 32) ^ u64::from(present);
                for _ in 0..s.reads / s.threads {
                    x = mix(x);
                    let k = key(x % s.keys, s.key_size, present, false);
                    let got = lat.time(|| engine.get(&k))?;
                    let right = match &got {
                        Some(v) => present && stamped_for(v, x % s.keys, s.value_size),
                        None => !present,
                    };
                    if !right {
                        return Err(format!("{workload}: wrong answer for key {}", x % s.keys));
                    }
                }
                Ok(())
            })?;
            lat.merge(merged);
            s.reads / s.threads * s.threads
        }
        "seekrandom" => {
            let n = s.reads / 10;
            let merged = threads(s, |t, lat| {
                let mut x = s.seed ^ (t << 32) ^ 7;
                for _ in 0..n / s.threads {
                    x = mix(x);
                    let k = key(x % s.keys, s.key_size, true, false);
                    // The key is present: the scan yields it at least.
                    if lat.time(|| engine.seek_scan(&k, 11))? == 0 {
                        return Err(format!("seekrandom: nothing at key {}", x % s.keys));
                    }
                }
                Ok(())
            })?;
            lat.merge(merged);
            n / s.threads * s.threads
        }
        "readwhilewriting" => {
            // One writer overwrites random keys while the readers read; only reads are timed.
            gets = s.reads / s.threads * s.threads;
            let stop = std::sync::atomic::AtomicBool::new(false);
            let merged = std::thread::scope(|sc| -> Result<Latencies, String> {
                let writer = sc.spawn(|| -> Result<u64, String> {
                    let mut n = 0u64;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let i = mix(n ^ s.seed ^ 0x77) % s.keys;
                        engine.put(&key(i, s.key_size, true, false), &value(i, 2, s.value_size))?;
                        n += 1;
                    }
                    Ok(n)
                });
                let r = threads(s, |t, lat| {
                    let mut x = s.seed ^ (t << 32) ^ 0x5151;
                    for _ in 0..s.reads / s.threads {
                        x = mix(x);
                        let k = key(x % s.keys, s.key_size, true, false);
                        match lat.time(|| engine.get(&k))? {
                            Some(v) if stamped_for(&v, x % s.keys, s.value_size) => {}
                            _ => {
                                return Err(format!(
                                    "readwhilewriting: wrong answer for key {}",
                                    x % s.keys
                                ))
                            }
                        }
                    }
                    Ok(())
                });
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
                let written = writer.join().map_err(|_| "writer panicked".to_string())??;
                user_bytes = written * per_op;
                r
            })?;
            lat.merge(merged);
            s.reads / s.threads * s.threads
        }
        w if w.starts_with("ycsb-") || w == "verify" => {
            ycsb(engine, w, s, zipf, &mut lat, &mut gets, &mut user_bytes)?
        }
        other => return Err(format!("unknown workload {other}")),
    };
    let seconds = start.elapsed().as_secs_f64();
    let written = device_write_bytes().saturating_sub(written_before);
    let blocks_per_get = match (blocks_before, engine.blocks_read()) {
        (Some(a), Some(b)) if gets > 0 => Some(b.saturating_sub(a) as f64 / gets as f64),
        _ => None,
    };
    let per_get = |f: fn(&crate::engine::ReadPath) -> u64| match (&path_before, engine.read_path())
    {
        (Some(a), Some(b)) if gets > 0 => Some(f(&b).saturating_sub(f(a)) as f64 / gets as f64),
        _ => None,
    };
    let tree = engine.tree();
    Ok(Figures {
        engine: engine_name.to_string(),
        workload: workload.to_string(),
        ops,
        seconds,
        ops_per_sec: ops as f64 / seconds,
        p50_us: lat.percentile(0.5),
        p99_us: lat.percentile(0.99),
        p999_us: lat.percentile(0.999),
        peak_rss_mib: peak_rss_mib(),
        disk_bytes: disk_bytes(dir),
        write_amp: (user_bytes > 0).then(|| written as f64 / user_bytes as f64),
        blocks_per_get,
        keys: s.keys,
        tables_per_get: per_get(|p| p.tables_considered),
        filter_probes_per_get: per_get(|p| p.filter_probes),
        levels: tree.as_ref().map(|t| t.levels.clone()),
        filter_mib: tree.as_ref().map(|t| t.filter_bytes as f64 / 1048576.0),
        index_mib: tree.as_ref().map(|t| t.index_bytes as f64 / 1048576.0),
    })
}

/// Runs `body(thread index, latencies)` on `s.threads` threads and merges their latencies.
fn threads(
    s: Shape,
    body: impl Fn(u64, &mut Latencies) -> Result<(), String> + Sync,
) -> Result<Latencies, String> {
    std::thread::scope(|sc| {
        let handles: Vec<_> = (0..s.threads)
            .map(|t| {
                let body = &body;
                sc.spawn(move || {
                    let mut lat = Latencies::default();
                    body(t, &mut lat).map(|()| lat)
                })
            })
            .collect();
        let mut all = Latencies::default();
        for h in handles {
            all.merge(h.join().map_err(|_| "a thread panicked".to_string())??);
        }
        Ok(all)
    })
}

/// YCSB core workloads A-F over the loaded keys, zipfian (0.99) key choice;
/// `verify` reads every loaded key once (a full correctness pass, timed like a read workload).
fn ycsb(
    engine: &dyn Engine,
    w: &str,
    s: Shape,
    zipf: Option<Zipf>,
    lat: &mut Latencies,
    gets: &mut u64,
    user_bytes: &mut u64,
) -> Result<u64, String> {
    let per_op = (s.key_size.max(16) + s.value_size) as u64;
    if w == "verify" {
        for i in 0..s.keys {
            let k = key(i, s.key_size, true, false);
            let v = get_present(engine, lat, &k, || format!("key {i}"))?;
            if !stamped_for(&v, i, s.value_size) {
                return Err(format!("key {i} holds another key's value"));
            }
        }
        *gets = s.keys;
        return Ok(s.keys);
    }
    let mut z = zipf.unwrap_or_else(|| Zipf::new(s.keys, s.seed ^ 0xabc));
    let mut inserted = 0u64;
    let mut r = s.seed ^ 0x1234;
    for _ in 0..s.reads {
        r = mix(r);
        let dice = r % 100;
        let i = z.scrambled();
        let k = key(i, s.key_size, true, false);
        match w {
            "ycsb-a" | "ycsb-b" | "ycsb-c" => {
                let read_pct = match w {
                    "ycsb-a" => 50,
                    "ycsb-b" => 95,
                    _ => 100,
                };
                if dice < read_pct {
                    *gets += 1;
                    // Every key of the load is there (these mixes only overwrite).
                    get_present(engine, lat, &k, || format!("{w}: key {i}"))?;
                } else {
                    *user_bytes += per_op;
                    lat.time(|| engine.put(&k, &value(i, 3, s.value_size)))?;
                }
            }
            "ycsb-d" => {
                // Read latest: the most popular keys are the most recently inserted.
                if dice < 95 {
                    let newest = s.keys + inserted;
                    let j = newest - 1 - z.rank().min(newest - 1);
                    *gets += 1;
                    let k = key(j, s.key_size, true, false);
                    get_present(engine, lat, &k, || format!("{w}: key {j}"))?;
                } else {
                    let j = s.keys + inserted;
                    inserted += 1;
                    *user_bytes += per_op;
                    lat.time(|| {
                        engine.put(&key(j, s.key_size, true, false), &value(j, 0, s.value_size))
                    })?;
                }
            }
            "ycsb-e" => {
                if dice < 95 {
                    let len = 1 + (r >> 32) as usize % 100;
                    if lat.time(|| engine.seek_scan(&k, len))? == 0 {
                        return Err(format!("{w}: nothing at key {i}"));
                    }
                } else {
                    let j = s.keys + (1 << 40) + inserted;
                    inserted += 1;
                    *user_bytes += per_op;
                    lat.time(|| {
                        engine.put(&key(j, s.key_size, true, false), &value(j, 0, s.value_size))
                    })?;
                }
            }
            "ycsb-f" => {
                *gets += 1;
                if dice < 50 {
                    get_present(engine, lat, &k, || format!("{w}: key {i}"))?;
                } else {
                    // Read-modify-write.
                    *user_bytes += per_op;
                    lat.time(|| -> Result<(), String> {
                        let mut v = engine.get(&k)?.unwrap_or_default();
                        v.resize(s.value_size, b'v');
                        v[0] ^= 1;
                        engine.put(&k, &v)
                    })?;
                }
            }
            other => return Err(format!("unknown workload {other}")),
        }
    }
    Ok(s.reads)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_is_checked_against_its_key() {
        let v = value(123, 2, 100);
        assert!(stamped_for(&v, 123, 100));
        assert!(!stamped_for(&v, 124, 100));
        assert!(!stamped_for(&v, 12, 100));
        assert!(!stamped_for(&v[..99], 123, 100));
        // YCSB-F flips the first byte's low bit.
        let mut f = v.clone();
        f[0] ^= 1;
        assert!(stamped_for(&f, 123, 100));
        f[1] ^= 1;
        assert!(!stamped_for(&f, 123, 100));
        // A value shorter than the stamp holds as much of it as fits.
        assert!(stamped_for(&value(123456, 0, 3), 123456, 3));
        assert!(!stamped_for(&value(654321, 0, 3), 123456, 3));
    }

    #[test]
    fn zipf_favours_low_ranks_and_stays_in_range() {
        let mut z = Zipf::new(10_000, 1);
        let mut low = 0;
        for _ in 0..10_000 {
            let r = z.rank();
            assert!(r < 10_000);
            if r < 100 {
                low += 1;
            }
        }
        // With theta 0.99 the top 1% of ranks draws about half the choices.
        assert!(low > 3_000, "{low}");
        assert!(z.scrambled() < 10_000);
    }

    #[test]
    fn absent_keys_sort_inside_the_key_range() {
        let (a, p) = (key(5, 16, false, false), key(5, 16, true, false));
        assert_ne!(a, p);
        assert_eq!(a[..8], p[..8]);
        assert_eq!(key(1, 24, true, true).len(), 24);
    }
}
