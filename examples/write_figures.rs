//! The write-path figures of issue 12, one measurement per process so that two builds can be
//! run back to back on the same machine (`docs/benchmarks.md` §8 has the commands and a
//! table of results).
//!
//! ```sh
//! cargo run --release --example write_figures -- fillrandom /tmp/wf 1000000
//! cargo run --release --example write_figures -- fillseq    /tmp/wf 1000000
//! cargo run --release --example write_figures -- sync       /tmp/wf 20000 8   # 8 threads
//! cargo run --release --example write_figures -- unsynced   /tmp/wf 1000000 8
//! cargo run --release --example write_figures -- recover    /tmp/wf 512       # MiB of WAL
//! ```
//!
//! `fillrandom`/`fillseq`: default options (WAL not synced, 10 bits per key), 16-byte keys,
//! 100-byte values, one writer; the time runs until the tree is quiet (the last memtable flushed, then `wait_for_compactions`).
//! Prints keys/s, write amplification, insert latency percentiles, slowdowns and stops, and
//! compaction throughput, and `writer_cpu_ns`: the writing thread's CPU time per insert over
//! the load (its own clock, `CLOCK_THREAD_CPUTIME_ID`: what the write path costs the caller,
//! apart from the background threads, and less moved than wall time by a noisy host). `sync`: `sync_writes(true)`, N writes split over T threads; prints
//! writes/s and WAL fsyncs per write. `unsynced`: the same with the WAL not synced (write
//! groups under contention; the time stops when the last write returns). `recover`: a child
//! process writes N MiB into one unflushed WAL (memtable larger than that) and exits without
//! closing; the parent then opens the database with the default memtable and prints the time
//! to open and its peak RSS. With `WF_TAIL=1` in the environment, `fillrandom`/`fillseq` also
//! print (to stderr) how many inserts took longer than 1 us ... 1 ms and what share of all
//! the inserts' time they took: where the mean insert time goes beyond the median. With
//! `WF_VALUE=N`, `sync` and `unsynced` write N-byte values instead of 100-byte ones.
use siltdb::{Db, Options, Stats};
use std::path::Path;
use std::time::{Duration, Instant};

fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Key `i`: random order (a hash) or sequential (big-endian `i`), 16 bytes either way.
fn key(i: u64, sequential: bool) -> [u8; 16] {
    let mut k = [0u8; 16];
    if sequential {
        k[8..].copy_from_slice(&i.to_be_bytes());
    } else {
        k[..8].copy_from_slice(&mix(i).to_be_bytes());
        k[8..].copy_from_slice(&i.to_be_bytes());
    }
    k
}

/// Figures only this build's `Stats` has (the baseline copy of this file returns "").
fn extra_stats(s: &Stats) -> String {
    format!(
        " stall_s={:.2} write_groups={} wal_syncs={} wal_sync_mean_us={:.0}",
        s.write_stall_micros as f64 / 1e6,
        s.write_groups,
        s.wal_syncs,
        s.wal_sync_micros as f64 / s.wal_syncs.max(1) as f64
    )
}

fn percentile(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    f64::from(sorted[i]) / 1000.0
}

/// Peak resident set size of this process in MiB (`VmHWM`).
fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// The default options, with sizes overridden by `WF_MEMTABLE`, `WF_L1`, `WF_TABLE` (bytes)
/// and the L0 triggers by `WF_L0_SLOWDOWN`, `WF_L0_STOP` (tables), for experiments.
fn options() -> Options {
    let env = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    let mut o = Options::default();
    if let Some(v) = env("WF_MEMTABLE") {
        o = o.memtable_size(v as usize);
    }
    if let Some(v) = env("WF_L1") {
        o = o.level_base_size(v);
    }
    if let Some(v) = env("WF_TABLE") {
        o = o.target_table_size(v);
    }
    if let Some(v) = env("WF_L0_SLOWDOWN") {
        o = o.l0_slowdown_trigger(v as usize);
    }
    if let Some(v) = env("WF_L0_STOP") {
        o = o.l0_stop_trigger(v as usize);
    }
    o
}

/// The clock of the per-insert latencies: the CPU's time-stamp counter on x86-64 when the
/// kernel says it runs at a constant rate (`constant_tsc` and `nonstop_tsc`; ~8 ns a read on
/// the benchmark VM), else `Instant` (ns since the load's start). `WF_CLOCK=instant` asks for
/// `Instant` anyway: every figure before 2026-12-06 was measured with it.
#[derive(Clone, Copy)]
enum Stamp {
    Tsc,
    Instant,
}

impl Stamp {
    fn choose() -> Stamp {
        let asked_instant = std::env::var("WF_CLOCK").is_ok_and(|v| v == "instant");
        let flags = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let flags = flags.lines().find(|l| l.starts_with("flags")).unwrap_or("");
        let invariant = ["constant_tsc", "nonstop_tsc"]
            .iter()
            .all(|f| flags.split_whitespace().any(|x| x == *f));
        if cfg!(target_arch = "x86_64") && invariant && !asked_instant {
            Stamp::Tsc
        } else {
            Stamp::Instant
        }
    }

    /// Ticks of this clock (ns for `Instant`, since `start`).
    #[inline]
    fn now(self, start: Instant) -> u64 {
        match self {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: RDTSC exists on every x86-64 CPU and only reads the counter.
            Stamp::Tsc => unsafe { std::arch::x86_64::_rdtsc() },
            _ => start.elapsed().as_nanos() as u64,
        }
    }
}

/// This thread's CPU time so far, in ns.
fn thread_cpu_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec for the call to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

fn fill(dir: &Path, n: u64, sequential: bool) {
    let _ = std::fs::remove_dir_all(dir);
    let db = Db::open_with(dir, options()).unwrap();
    let value = [b'v'; 100];
    // Written through before the load, so that the loop does not take this vector's page
    // faults (one every 1,024 inserts, ~1 us each: harness time, not the engine's).
    let mut lat: Vec<u32> = vec![1; n as usize];
    lat.clear();
    // One clock read an insert, not two: an insert's latency runs from the read after the
    // previous insert to the read after its own, so it also holds making its key and this
    // loop's push (a few ns). The clock is the CPU's time-stamp counter where it can be (see
    // `Stamp`): `Instant::now` (a `clock_gettime`) costs ~20-30 ns, ~6% of a sequential
    // insert, which slowed the sequential load more than the random one.
    let clock = Stamp::choose();
    let cpu_start = thread_cpu_ns();
    let start = Instant::now();
    let first = clock.now(start);
    let mut last = first;
    for i in 0..n {
        db.insert(key(i, sequential), value).unwrap();
        let now = clock.now(start);
        lat.push(u32::try_from(now - last).unwrap_or(u32::MAX));
        last = now;
    }
    let loaded = start.elapsed();
    // The latencies in ns: ticks times the counter's rate over the load, against `Instant`.
    let ns_per_tick = loaded.as_nanos() as f64 / (last - first).max(1) as f64;
    for l in &mut lat {
        *l = (f64::from(*l) * ns_per_tick).min(f64::from(u32::MAX)) as u32;
    }
    let writer_cpu_ns = (thread_cpu_ns() - cpu_start) as f64 / n as f64;
    // The last memtable too: its writes are in the write amplification's user bytes, so its
    // table belongs in the written bytes and its flush in the time (as RocksDB's runs in the
    // comparison tool do).
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();
    let quiet = start.elapsed();
    let s = db.stats();
    lat.sort_unstable();
    if std::env::var("WF_TAIL").is_ok() {
        let total: f64 = lat.iter().map(|&x| x as f64).sum();
        for cut in [1_000u32, 2_000, 5_000, 20_000, 100_000, 1_000_000] {
            let above: f64 = lat.iter().filter(|&&x| x > cut).map(|&x| x as f64).sum();
            let cnt = lat.iter().filter(|&&x| x > cut).count();
            eprintln!(
                "inserts over {} us: {cnt}, {:.1}% of the insert time",
                cut / 1000,
                above / total * 100.0
            );
        }
    }
    let levels: Vec<String> = db
        .levels()
        .iter()
        .enumerate()
        .filter(|(_, l)| l.tables > 0)
        .map(|(i, l)| format!("L{i}:{}", l.tables))
        .collect();
    let compacted_mib = (s.bytes_compacted_read + s.bytes_compacted_written) as f64 / 1048576.0;
    println!(
        "{} n={n} keys_per_s={:.0} load_only_keys_per_s={:.0} quiet_s={:.2} wa={:.2} \
         p50_us={:.1} p99_us={:.1} p999_us={:.1} max_ms={:.1} slowdowns={} stops={} \
         flushes={} compactions={} trivial_moves={} compaction_read_mib={:.0} \
         compaction_written_mib={:.0} compaction_mib_total={compacted_mib:.0} \
         writer_cpu_ns={writer_cpu_ns:.0} shape={}{}",
        if sequential { "fillseq" } else { "fillrandom" },
        n as f64 / quiet.as_secs_f64(),
        n as f64 / loaded.as_secs_f64(),
        quiet.as_secs_f64(),
        s.write_amplification(),
        percentile(&lat, 0.5),
        percentile(&lat, 0.99),
        percentile(&lat, 0.999),
        f64::from(*lat.last().unwrap_or(&0)) / 1e6,
        s.write_slowdowns,
        s.write_stops,
        s.flushes,
        s.compactions,
        s.trivial_moves,
        s.bytes_compacted_read as f64 / 1048576.0,
        s.bytes_compacted_written as f64 / 1048576.0,
        levels.join(" "),
        extra_stats(&s),
    );
}

/// Bytes of each value the threaded writers write: 100, or `WF_VALUE` (an experiment knob:
/// a larger value makes a single writer's synced record as large as a group's).
fn value_len() -> usize {
    std::env::var("WF_VALUE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100)
}

fn threaded_writers(dir: &Path, n: u64, threads: u64, sync: bool) {
    let _ = std::fs::remove_dir_all(dir);
    let db = Db::open_with(dir, Options::default().sync_writes(sync)).unwrap();
    let per = n / threads;
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let db = &db;
            s.spawn(move || {
                let value = vec![b'v'; value_len()];
                for i in 0..per {
                    db.insert(key(t * per + i, false), &value).unwrap();
                }
            });
        }
    });
    let el = start.elapsed();
    let s = db.stats();
    println!(
        "{} threads={threads} writes={} writes_per_s={:.0}{}",
        if sync { "sync" } else { "unsynced" },
        per * threads,
        (per * threads) as f64 / el.as_secs_f64(),
        extra_stats(&s),
    );
}

fn recover(dir: &Path, mib: u64) {
    if std::env::var_os("WRITE_FIGURES_CHILD").is_some() {
        // The child: one memtable twice the WAL (entries count ~190 bytes of memory, ~140
        // of WAL), so nothing is flushed; exit without
        // closing (every write is already a write(2) into the WAL).
        let db = Db::open_with(
            dir,
            Options::default().memtable_size(((2 * mib + 64) << 20) as usize),
        )
        .unwrap();
        let value = [b'v'; 100];
        let n = (mib << 20) / 140;
        for i in 0..n {
            db.insert(key(i, false), value).unwrap();
        }
        std::process::exit(0);
    }
    let _ = std::fs::remove_dir_all(dir);
    let me = std::env::current_exe().unwrap();
    let status = std::process::Command::new(me)
        .args(["recover", dir.to_str().unwrap(), &mib.to_string()])
        .env("WRITE_FIGURES_CHILD", "1")
        .status()
        .unwrap();
    assert!(status.success());
    let wal_bytes: u64 = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "wal"))
        .map(|e| e.metadata().unwrap().len())
        .sum();
    let before = peak_rss_mib();
    let start = Instant::now();
    let db = Db::open(dir).unwrap();
    let open = start.elapsed();
    let peak = peak_rss_mib();
    let s = db.stats();
    println!(
        "recover wal_mib={:.0} open_s={:.2} peak_rss_mib={peak:.0} rss_before_open_mib={before:.0} \
         l0_tables={} pinned_filter_index_mib={:.1}",
        wal_bytes as f64 / 1048576.0,
        open.as_secs_f64(),
        db.levels()[0].tables,
        (s.filter_memory_bytes + s.index_memory_bytes) as f64 / 1048576.0,
    );
    // A sanity check that the writes are there.
    assert!(db.get(key(0, false)).unwrap().is_some());
    std::thread::sleep(Duration::from_millis(10));
}

fn main() {
    let mut a = std::env::args().skip(1);
    let mode = a.next().unwrap_or_else(|| "fillrandom".into());
    let dir = a.next().unwrap_or_else(|| "/tmp/write-figures".into());
    let n: u64 = a.next().and_then(|s| s.parse().ok()).unwrap_or(1_000_000);
    let threads: u64 = a.next().and_then(|s| s.parse().ok()).unwrap_or(1);
    let dir = Path::new(&dir);
    match mode.as_str() {
        "fillrandom" => fill(dir, n, false),
        "fillseq" => fill(dir, n, true),
        "sync" => threaded_writers(dir, n, threads, true),
        "unsynced" => threaded_writers(dir, n, threads, false),
        "recover" => recover(dir, n),
        other => {
            eprintln!(
                "unknown mode {other:?}; usage: write_figures \
                 fillrandom|fillseq|sync|unsynced|recover [DIR] [KEYS] [THREADS]"
            );
            std::process::exit(2);
        }
    }
}
