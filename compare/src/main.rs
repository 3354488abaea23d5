//! `siltdb-compare`: `db_bench` and YCSB workloads run side by side on siltdb and the engines
//! users compare it with, each engine in its own process from an empty directory, with the
//! same settings (see `engine.rs`). Prints a Markdown table and writes JSON lines.
//!
//! ```sh
//! cargo run --release -p siltdb-compare -- --keys 1000000 --out /tmp/compare
//! cargo run --release -p siltdb-compare -- --engines siltdb,fjall --workloads fillrandom,readrandom
//! cargo run --release -p siltdb-compare -- --engines siltdb --workloads fillrandom,readrandom,readmissing \
//!     --scale 1000000,4000000,16000000,64000000 --out /tmp/scaling
//! ```
//!
//! What the numbers mean: the data lives on the local file system and, at the default sizes,
//! fits in the operating system's page cache, which is not dropped between workloads; a
//! "block read" of an engine is then a copy from that cache, not a device read.

mod chart;
mod engine;
mod workload;

use clap::Parser;
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use workload::{Figures, Shape};

#[derive(Parser, Debug)]
#[command(
    about = "db_bench and YCSB workloads, side by side on siltdb and its peers",
    args_override_self = true
)]
struct Args {
    /// Engines, comma-separated (default: every engine this build has).
    #[arg(long, value_delimiter = ',')]
    engines: Vec<String>,
    /// Workloads, comma-separated, run in this order (default: all).
    #[arg(long, value_delimiter = ',')]
    workloads: Vec<String>,
    /// Keys loaded by fillseq/fillrandom.
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    /// Operations of each read and YCSB workload.
    #[arg(long, default_value_t = 200_000)]
    reads: u64,
    /// Key size in bytes (at least 16).
    #[arg(long, default_value_t = 16)]
    key_size: usize,
    /// Value size in bytes.
    #[arg(long, default_value_t = 100)]
    value_size: usize,
    /// Reader threads of the read workloads.
    #[arg(long, default_value_t = 1)]
    threads: u64,
    /// Block cache budget of every engine, MiB.
    #[arg(long, default_value_t = 64)]
    cache_mib: u64,
    /// Memtable size of every engine that has one, MiB.
    #[arg(long, default_value_t = 16)]
    memtable_mib: u64,
    /// Seed of the key streams.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Directory for the databases and the results (`results.jsonl`, `results.md`).
    #[arg(long, default_value = "/tmp/siltdb-compare")]
    out: PathBuf,
    /// Scaling run: the whole run once per key count, comma-separated (for example
    /// `1000000,4000000,16000000,64000000`); writes `scaling.md` and `chart-scaling.svg`.
    #[arg(long, value_delimiter = ',')]
    scale: Vec<u64>,
    /// Internal: run one engine in this process and print JSON lines.
    #[arg(long, hide = true)]
    child: Option<String>,
}

fn main() {
    let args = Args::parse();
    let code = match run(&args) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("siltdb-compare: {e}");
            1
        }
    };
    std::process::exit(code);
}

fn run(args: &Args) -> Result<(), String> {
    if args.key_size < 16 || args.threads == 0 || args.keys == 0 {
        return Err("--key-size must be at least 16, --threads and --keys at least 1".into());
    }
    let workloads: Vec<String> = if args.workloads.is_empty() {
        workload::ALL.iter().map(|w| w.to_string()).collect()
    } else {
        args.workloads.clone()
    };
    if let Some(w) = workloads
        .iter()
        .find(|w| !workload::ALL.contains(&w.as_str()))
    {
        return Err(format!(
            "unknown workload {w}; known: {}",
            workload::ALL.join(", ")
        ));
    }
    if let Some(name) = &args.child {
        return child(args, name, &workloads);
    }
    let engines: Vec<String> = if args.engines.is_empty() {
        engine::available().iter().map(|e| e.to_string()).collect()
    } else {
        args.engines.clone()
    };
    std::fs::create_dir_all(&args.out).map_err(|e| e.to_string())?;
    let mut all: Vec<serde_json::Value> = Vec::new();
    let bars = indicatif::MultiProgress::new();
    if args.scale.is_empty() {
        all.extend(run_engines(&bars, &engines, &workloads, &[])?);
    } else {
        for n in &args.scale {
            let keys = ["--keys".to_string(), n.to_string()];
            all.extend(run_engines(&bars, &engines, &workloads, &keys)?);
        }
    }
    let mut jsonl =
        std::fs::File::create(args.out.join("results.jsonl")).map_err(|e| e.to_string())?;
    for v in &all {
        writeln!(jsonl, "{v}").map_err(|e| e.to_string())?;
    }
    let (table, charts) = if args.scale.is_empty() {
        let table = markdown(&all, args);
        std::fs::write(args.out.join("results.md"), &table).map_err(|e| e.to_string())?;
        (table, chart::draw(&all, &args.out)?)
    } else {
        let table = scaling_markdown(&all, args);
        std::fs::write(args.out.join("scaling.md"), &table).map_err(|e| e.to_string())?;
        (table, chart::draw_scaling(&all, &args.out)?)
    };
    println!("{table}");
    eprintln!(
        "results in {}: {}, results.jsonl, {}",
        args.out.display(),
        if args.scale.is_empty() {
            "results.md"
        } else {
            "scaling.md"
        },
        charts.join(", ")
    );
    Ok(())
}

/// Runs every engine, each in a child process of this binary with this run's arguments plus
/// `extra` (later flags win), and returns their figures.
fn run_engines(
    bars: &indicatif::MultiProgress,
    engines: &[String],
    workloads: &[String],
    extra: &[String],
) -> Result<Vec<serde_json::Value>, String> {
    let style = indicatif::ProgressStyle::with_template(
        "{prefix:>15} [{bar:30}] {pos}/{len} workloads, now {msg} ({elapsed})",
    )
    .map_err(|e| e.to_string())?
    .progress_chars("=> ");
    let mut all = Vec::new();
    for e in engines {
        let bar = bars.add(indicatif::ProgressBar::new(workloads.len() as u64));
        bar.set_style(style.clone());
        bar.set_prefix(match extra.get(1) {
            Some(keys) => format!("{e} {keys}"),
            None => e.clone(),
        });
        bar.set_message(workloads.first().cloned().unwrap_or_default());
        let me = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut child = Command::new(me)
            .args(std::env::args().skip(1))
            .args(extra)
            .args(["--child", e])
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| e.to_string())?;
        let out = child.stdout.take().ok_or("no child stdout")?;
        for line in std::io::BufReader::new(out).lines() {
            let line = line.map_err(|e| e.to_string())?;
            let v: serde_json::Value = serde_json::from_str(&line).map_err(|e| e.to_string())?;
            bar.inc(1);
            let done = bar.position() as usize;
            bar.set_message(workloads.get(done).cloned().unwrap_or_default());
            all.push(v);
        }
        bar.finish_with_message("done");
        let status = child.wait().map_err(|e| e.to_string())?;
        if !status.success() {
            return Err(format!("engine {e} failed ({status})"));
        }
    }
    Ok(all)
}

/// The scaling table: a row per key count and engine.
fn scaling_markdown(all: &[serde_json::Value], args: &Args) -> String {
    let find = |keys: u64, e: &str, w: &str| {
        all.iter().find(|v| {
            v["keys"].as_u64() == Some(keys)
                && v["engine"].as_str() == Some(e)
                && v["workload"].as_str() == Some(w)
        })
    };
    let mut rows: Vec<(u64, String)> = Vec::new();
    for v in all {
        let r = (
            v["keys"].as_u64().unwrap_or(0),
            v["engine"].as_str().unwrap_or("?").to_string(),
        );
        if !rows.contains(&r) {
            rows.push(r);
        }
    }
    let mut s = format!(
        "{}-byte keys, {}-byte values, {} gets per read workload, {} reader thread(s), {} MiB \
         block cache, {} MiB memtable, no compression, 10 bits/key (fjall: its own in L0 and \
         L1, docs/compare.md), WAL not synced; load = \
         fillrandom until background work is done. tables/probes/blocks per get: present \
         (readrandom) / absent (readmissing).\n\n",
        args.key_size, args.value_size, args.reads, args.threads, args.cache_mib, args.memtable_mib
    );
    s.push_str("| keys | engine | load keys/s | write amp | levels (tables) | readrandom ops/s | readmissing ops/s | tables/get | filter probes/get | blocks/get | filter MiB | index MiB | peak RSS MiB | disk MiB |\n");
    s.push_str("|---:|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    let num = |v: Option<&serde_json::Value>, k: &str, digits: usize| {
        v.and_then(|v| v[k].as_f64())
            .map_or("-".to_string(), |x| format!("{x:.digits$}"))
    };
    for (keys, e) in rows {
        let load = find(keys, &e, "fillrandom");
        let present = find(keys, &e, "readrandom");
        let absent = find(keys, &e, "readmissing");
        let last = absent.or(present).or(load);
        let pair = |k: &str, d: usize| format!("{} / {}", num(present, k, d), num(absent, k, d));
        s.push_str(&format!(
            "| {keys} | {e} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            num(load, "ops_per_sec", 0),
            num(load, "write_amp", 2),
            last.and_then(|v| v["levels"].as_str()).unwrap_or("-"),
            num(present, "ops_per_sec", 0),
            num(absent, "ops_per_sec", 0),
            pair("tables_per_get", 2),
            pair("filter_probes_per_get", 2),
            pair("blocks_per_get", 4),
            num(last, "filter_mib", 1),
            num(last, "index_mib", 1),
            num(last, "peak_rss_mib", 0),
            last.and_then(|v| v["disk_bytes"].as_f64())
                .map_or("-".to_string(), |b| format!("{:.0}", b / 1048576.0)),
        ));
    }
    s
}

/// Runs every workload on engine `name` in this process, printing one JSON line each.
fn child(args: &Args, name: &str, workloads: &[String]) -> Result<(), String> {
    let settings = engine::Settings {
        cache_bytes: args.cache_mib << 20,
        memtable_bytes: args.memtable_mib << 20,
        bits_per_key: 10,
    };
    let shape = Shape {
        keys: args.keys,
        reads: args.reads,
        key_size: args.key_size,
        value_size: args.value_size,
        threads: args.threads,
        seed: args.seed,
    };
    let base = args.out.join(name);
    let _ = std::fs::remove_dir_all(&base);
    // fillseq gets a database of its own; everything else runs on fillrandom's.
    let seq_dir = base.join("fillseq");
    let main_dir = base.join("main");
    let mut main: Option<Box<dyn engine::Engine>> = None;
    for w in workloads {
        let figures: Figures = if w == "fillseq" {
            std::fs::create_dir_all(&seq_dir).map_err(|e| e.to_string())?;
            let e = engine::open(name, &seq_dir, settings)?;
            let f = workload::run(name, e.as_ref(), &seq_dir, w, shape)?;
            drop(e);
            let _ = std::fs::remove_dir_all(&seq_dir);
            f
        } else {
            if main.is_none() {
                std::fs::create_dir_all(&main_dir).map_err(|e| e.to_string())?;
                main = Some(engine::open(name, &main_dir, settings)?);
                if w != "fillrandom" && !workloads.iter().any(|x| x == "fillrandom") {
                    // Reads need data: load it first, untimed.
                    let e = main.as_deref().ok_or("no engine")?;
                    workload::run(name, e, &main_dir, "fillrandom", shape)?;
                }
            }
            let e = main.as_deref().ok_or("no engine")?;
            workload::run(name, e, &main_dir, w, shape)?
        };
        let line = serde_json::to_string(&figures).map_err(|e| e.to_string())?;
        let mut out = std::io::stdout().lock();
        writeln!(out, "{line}").map_err(|e| e.to_string())?;
        out.flush().map_err(|e| e.to_string())?;
    }
    drop(main);
    let _ = std::fs::remove_dir_all(&base);
    Ok(())
}

/// One table: a row per workload, a column group per engine.
fn markdown(all: &[serde_json::Value], args: &Args) -> String {
    let mut engines: Vec<&str> = Vec::new();
    let mut workloads: Vec<&str> = Vec::new();
    for v in all {
        let (e, w) = (
            v["engine"].as_str().unwrap_or("?"),
            v["workload"].as_str().unwrap_or("?"),
        );
        if !engines.contains(&e) {
            engines.push(e);
        }
        if !workloads.contains(&w) {
            workloads.push(w);
        }
    }
    let mut s = format!(
        "{} keys ({}-byte keys, {}-byte values), {} ops per read workload, {} reader thread(s), \
         {} MiB block cache and {} MiB memtable for every engine, no compression, 10 bits/key \
         Bloom (fjall: its own in L0 and L1, docs/compare.md), WAL not synced; data in the page \
         cache.\n\n",
        args.keys,
        args.key_size,
        args.value_size,
        args.reads,
        args.threads,
        args.cache_mib,
        args.memtable_mib
    );
    s.push_str("| workload | engine | ops/s | p50 us | p99 us | p99.9 us | peak RSS MiB | disk MiB | write amp | blocks/get |\n");
    s.push_str("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for w in &workloads {
        for e in &engines {
            let Some(v) = all
                .iter()
                .find(|v| v["engine"].as_str() == Some(e) && v["workload"].as_str() == Some(w))
            else {
                continue;
            };
            let f = |k: &str| v[k].as_f64().unwrap_or(0.0);
            s.push_str(&format!(
                "| {w} | {e} | {:.0} | {:.1} | {:.1} | {:.1} | {:.0} | {:.1} | {} | {} |\n",
                f("ops_per_sec"),
                f("p50_us"),
                f("p99_us"),
                f("p999_us"),
                f("peak_rss_mib"),
                f("disk_bytes") / 1048576.0,
                v["write_amp"]
                    .as_f64()
                    .map_or("-".to_string(), |w| format!("{w:.2}")),
                v["blocks_per_get"]
                    .as_f64()
                    .map_or("-".to_string(), |b| format!("{b:.3}")),
            ));
        }
    }
    s
}
