//! `silt readamp`: build a database per filter setting, run point reads of three kinds, and
//! report what they cost, measured with `Stats`, next to what the filters' parameters predict.

use crate::output::{flush, line, print_json, CliError};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use siltdb::{Db, FilterPolicy, Options, Stats, TableOutcome};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Arguments of `silt readamp`.
#[derive(Args, Debug)]
pub struct ReadampArgs {
    /// Keys to load (16-byte keys, random order).
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    /// Point reads per read kind.
    #[arg(long, default_value_t = 100_000)]
    reads: u64,
    /// Filter settings: bits per key (0 = no filter), `monkey:B` for Monkey over Bloom filters
    /// at an average of B, `hybrid:B` for the default policy (Monkey over Bloom and binary
    /// fuse filters, fuse from L1) at an average of B, or `ribbon:B` for Monkey over Bloom
    /// and Ribbon filters (Ribbon from L1). Repeatable.
    #[arg(long = "bits-per-key", num_args = 1.., default_values_t = ["0".to_string(), "5".to_string(), "10".to_string(), "15".to_string(), "hybrid:10".to_string()])]
    bits_per_key: Vec<String>,
    /// Value size in bytes.
    #[arg(long, default_value_t = 100)]
    value_size: usize,
    /// Keep the databases in this directory (one subdirectory per setting,
    /// `setting-<i>-<label>`, which a run first deletes if it exists) instead of a temporary
    /// one.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Write an SVG plot: blocks read per get against bits per key, and measured against
    /// predicted false-positive rate.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Seed of the key streams.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Memtable size in bytes (default: the engine's default, 24 MiB).
    #[arg(long)]
    memtable_size: Option<usize>,
    /// Target size of L1 in bytes (default 64 MiB); smaller values make deeper trees.
    #[arg(long)]
    level_base_size: Option<u64>,
    /// Target table size in bytes (default 8 MiB).
    #[arg(long)]
    target_table_size: Option<u64>,
    /// After the load, overwrite this many random loaded keys (new values): a steady-state
    /// tree whose levels all span the key range, as after a long run of updates. Default: as
    /// many as `--keys`; `--overwrites 0` reads the young tree a single load leaves, whose
    /// levels cover mostly different keys.
    #[arg(long)]
    overwrites: Option<u64>,
    /// After the tree has settled (L0 is always compacted away before the reads), flush this
    /// many more small batches of overwrites so that L0 holds that many tables, as a tree does
    /// while writes go on.
    #[arg(long, default_value_t = 0)]
    l0_tables: u32,
    /// Block cache in bytes. Default 0: off, so that blocks per get counts file reads as it
    /// always has; with a cache, the report shows how many of those blocks it supplied.
    #[arg(long, default_value_t = 0)]
    block_cache_size: u64,
}

impl ReadampArgs {
    /// Overwrites after the load: `--overwrites`, or as many as `--keys`.
    fn overwrites(&self) -> u64 {
        self.overwrites.unwrap_or(self.keys)
    }
}

#[derive(Clone, Debug, Serialize)]
struct Setting {
    label: String,
    policy: String,
    /// Nominal bits per key (the average for Monkey).
    bits_per_key: f64,
}

fn parse_setting(s: &str) -> Result<(Setting, FilterPolicy), CliError> {
    let bad = || {
        CliError::input(format!(
            "bad --bits-per-key {s:?}: expected a number, monkey:NUMBER, hybrid:NUMBER or ribbon:NUMBER"
        ))
    };
    if let Some((policy, rest)) = s.split_once(':') {
        let b: f64 = rest.parse().map_err(|_| bad())?;
        // Every setting is checked before the first one runs (the open would refuse the
        // same range, minutes into the report).
        if !(0.0..=100.0).contains(&b) {
            return Err(bad());
        }
        let filter_policy = match policy {
            "monkey" => FilterPolicy::Monkey { bits_per_key: b },
            "hybrid" => FilterPolicy::Hybrid {
                bits_per_key: b,
                fuse_from_level: 1,
            },
            "ribbon" => FilterPolicy::RibbonHybrid {
                bits_per_key: b,
                ribbon_from_level: 1,
            },
            _ => return Err(bad()),
        };
        return Ok((
            Setting {
                label: format!("{policy}:{b}"),
                policy: policy.into(),
                bits_per_key: b,
            },
            filter_policy,
        ));
    }
    let b: f64 = s.parse().map_err(|_| bad())?;
    if !(0.0..=100.0).contains(&b) {
        return Err(bad());
    }
    let policy = if b == 0.0 {
        FilterPolicy::None
    } else {
        FilterPolicy::Uniform { bits_per_key: b }
    };
    Ok((
        Setting {
            label: format!("{b}"),
            policy: if b == 0.0 {
                "none".into()
            } else {
                "uniform".into()
            },
            bits_per_key: b,
        },
        policy,
    ))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum ReadKind {
    Present,
    AbsentInRange,
    AbsentOutOfRange,
}

impl ReadKind {
    fn name(self) -> &'static str {
        match self {
            ReadKind::Present => "present",
            ReadKind::AbsentInRange => "absent, in range",
            ReadKind::AbsentOutOfRange => "absent, out of range",
        }
    }
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The 16-byte keys: stream 0 is loaded, stream 1 is never loaded (absent, spread over the
/// same range), out-of-range keys start with a byte above every loaded key's first byte.
fn make_key(stream: u64, seed: u64, i: u64) -> [u8; 16] {
    let a = splitmix(seed ^ splitmix(stream.wrapping_mul(0x1000_0000_0000_0001) ^ (2 * i)));
    let b = splitmix(seed ^ splitmix(stream.wrapping_mul(0x1000_0000_0000_0001) ^ (2 * i + 1)));
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&a.to_be_bytes());
    k[8..].copy_from_slice(&b.to_be_bytes());
    // Loaded and in-range keys start below 0xf0; out-of-range keys at 0xf8 or above.
    k[0] = ((u16::from(k[0]) * 0xf0) >> 8) as u8;
    k
}

fn key_for(kind: ReadKind, seed: u64, keys: u64, j: u64) -> [u8; 16] {
    match kind {
        ReadKind::Present => make_key(0, seed, splitmix(seed.wrapping_add(j)) % keys),
        ReadKind::AbsentInRange => make_key(1, seed, j),
        ReadKind::AbsentOutOfRange => {
            let mut k = make_key(2, seed, j);
            k[0] = 0xf8 | (k[0] & 0x07);
            k
        }
    }
}

#[derive(Clone, Debug, Serialize)]
struct LevelRow {
    level: usize,
    tables: usize,
    bytes: u64,
    filter_bytes: u64,
    bits_per_key: f64,
    filter_kind: String,
    expected_fpr: f64,
}

#[derive(Clone, Debug, Serialize)]
struct ReadRow {
    kind: ReadKind,
    gets: u64,
    tables_considered_per_get: f64,
    filter_probes_per_get: f64,
    data_blocks_per_get: f64,
    /// Of those blocks, the ones the block cache supplied (0 with the cache off).
    cache_hits_per_get: f64,
    bytes_per_get: f64,
    /// False positives over probes of tables that did not hold the key (`None`: no probes).
    measured_fpr: Option<f64>,
    /// The same rate from the probed filters' (m, n, k), weighted by how often each was probed.
    predicted_fpr: Option<f64>,
    /// Data blocks per get that the filters' parameters predict (absent keys: the sum of the
    /// false-positive rates a get meets; present keys: 1 plus that).
    predicted_blocks_per_get: f64,
    gets_per_sec: f64,
    p50_us: f64,
    p99_us: f64,
}

#[derive(Clone, Debug, Serialize)]
struct SettingReport {
    setting: Setting,
    load_secs: f64,
    load_keys_per_sec: f64,
    write_amplification: f64,
    levels: Vec<LevelRow>,
    filter_bytes: u64,
    filter_bits_per_key: f64,
    /// `null` in the JSON (NaN) for a setting without filters: the figure is a filter's
    /// prediction, and with no filter every table an absent key meets is read.
    expected_wasted_reads_per_absent_get: f64,
    reads: Vec<ReadRow>,
}

#[derive(Clone, Debug, Serialize)]
struct Report {
    keys: u64,
    /// Overwrites of loaded keys after the load (0: the young tree).
    overwrites: u64,
    key_size: usize,
    value_size: usize,
    reads_per_kind: u64,
    seed: u64,
    settings: Vec<SettingReport>,
}

fn bar(len: u64, msg: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template("{msg:>28} [{bar:30}] {pos}/{len} ({per_sec}, {eta})")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    pb.set_message(msg.to_string());
    pb
}

fn delta(after: &Stats, before: &Stats, f: fn(&Stats) -> u64) -> u64 {
    f(after) - f(before)
}

/// The predicted false-positive rate of every table in the database, by table number.
fn table_fprs(db: &Db) -> HashMap<u64, f64> {
    db.tables()
        .into_iter()
        .map(|t| (t.table_id, t.predicted_fpr))
        .collect()
}

fn percentile(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    f64::from(sorted[i]) / 1000.0
}

fn run_reads(
    db: &Db,
    dir: &Path,
    kind: ReadKind,
    args: &ReadampArgs,
    fprs: &HashMap<u64, f64>,
) -> Result<ReadRow, CliError> {
    let n = args.reads;
    let pb = bar(n, &format!("reads: {}", kind.name()));
    let before = db.stats();
    // Made ahead for up to 2^24 reads; a longer run grows it as it goes (a huge --reads is
    // a long run, not an allocation that fails up front).
    let mut lat: Vec<u32> = Vec::with_capacity(n.min(1 << 24) as usize);
    let start = Instant::now();
    for j in 0..n {
        let k = key_for(kind, args.seed, args.keys, j);
        let t = Instant::now();
        let v = db.get(k)?;
        lat.push(t.elapsed().as_nanos().min(u128::from(u32::MAX)) as u32);
        if v.is_some() != (kind == ReadKind::Present) {
            return Err(CliError::input(format!(
                "wrong answer for a {} key {:02x?}: the engine is broken",
                kind.name(),
                k
            )));
        }
        if j % 4096 == 0 {
            pb.set_position(j);
        }
    }
    let secs = start.elapsed().as_secs_f64();
    pb.finish_and_clear();
    let after = db.stats();
    lat.sort_unstable();
    let d = |f: fn(&Stats) -> u64| delta(&after, &before, f) as f64;
    let gets = d(|s| s.gets);
    let probes = d(|s| s.filter_probes);
    let absent_probes = d(|s| s.filter_false_positives) + d(|s| s.filter_negatives);

    // The prediction: trace a sample of the same reads and add up, per probe of a table that
    // did not hold the key, that table's predicted false-positive rate.
    let sample = n.min(20_000);
    let (mut fpr_sum, mut fpr_n, mut wasted) = (0.0f64, 0u64, 0.0f64);
    for j in 0..sample {
        let k = key_for(kind, args.seed, args.keys, j);
        let (_, trace) = db.get_traced(k)?;
        for v in &trace.tables {
            let p = fprs.get(&v.table_id).copied().unwrap_or(1.0);
            match v.outcome {
                TableOutcome::FilterNegative | TableOutcome::FalsePositive => {
                    fpr_sum += p;
                    fpr_n += 1;
                    wasted += p;
                }
                TableOutcome::NotFound => wasted += 1.0,
                TableOutcome::OutOfRange => {}
                // Found, Tombstone, NewerOnly, RangeDeleted, and any later outcome: a table
                // whose filter let the read through.
                _ => wasted += 1.0,
            }
        }
    }
    let _ = dir;
    Ok(ReadRow {
        kind,
        gets: gets as u64,
        tables_considered_per_get: d(|s| s.tables_considered) / gets,
        filter_probes_per_get: probes / gets,
        data_blocks_per_get: d(|s| s.data_block_reads) / gets,
        cache_hits_per_get: d(|s| s.block_cache_hits) / gets,
        bytes_per_get: d(|s| s.bytes_read) / gets,
        measured_fpr: (absent_probes > 0.0)
            .then(|| d(|s| s.filter_false_positives) / absent_probes),
        predicted_fpr: (fpr_n > 0).then(|| fpr_sum / fpr_n as f64),
        predicted_blocks_per_get: if sample > 0 {
            wasted / sample as f64
        } else {
            0.0
        },
        gets_per_sec: gets / secs,
        p50_us: percentile(&lat, 0.50),
        p99_us: percentile(&lat, 0.99),
    })
}

fn run_setting(
    args: &ReadampArgs,
    setting: Setting,
    policy: FilterPolicy,
    dir: &Path,
) -> Result<SettingReport, CliError> {
    if dir.exists() {
        std::fs::remove_dir_all(dir)
            .map_err(|e| CliError::input(format!("cannot clear {}: {e}", dir.display())))?;
    }
    let mut opts = Options::default()
        .filter_policy(policy)
        .block_cache_size(args.block_cache_size);
    if let Some(v) = args.memtable_size {
        opts = opts.memtable_size(v);
    }
    if let Some(v) = args.level_base_size {
        opts = opts.level_base_size(v);
    }
    if let Some(v) = args.target_table_size {
        opts = opts.target_table_size(v);
    }
    let mut db = Db::open_with(dir, opts.clone())?;
    let value = vec![b'v'; args.value_size];
    let pb = bar(args.keys, &format!("load, bits/key {}", setting.label));
    let start = Instant::now();
    for i in 0..args.keys {
        db.insert(make_key(0, args.seed, i), &value)?;
        if i % 8192 == 0 {
            pb.set_position(i);
        }
    }
    let overwrites = args.overwrites();
    if overwrites > 0 {
        let value2 = vec![b'w'; args.value_size];
        pb.set_length(args.keys + overwrites);
        for j in 0..overwrites {
            let i = splitmix(splitmix(args.seed ^ 0x0bad_5eed) ^ j) % args.keys;
            db.insert(make_key(0, args.seed, i), &value2)?;
            if j % 8192 == 0 {
                pb.set_position(args.keys + j);
            }
        }
    }
    pb.set_message("flush and compact".to_string());
    db.flush()?;
    db.wait_for_compactions()?;
    // The write amplification of everything written until the reads: this load, the drain
    // below, and the --l0-tables flushes (each handle counts its own).
    let mut written = vec![db.stats()];
    // Drain L0 (reopen with a trigger of one table) so that every setting reads the same
    // settled shape whatever the timing of background compaction, then read with compaction
    // off so that nothing changes under the reads. With --l0-tables, flush exactly that many.
    db.close()?;
    drop(db);
    let drain = Db::open_with(dir, opts.clone().l0_compaction_trigger(1))?;
    drain.wait_for_compactions()?;
    written.push(drain.stats());
    drain.close()?;
    drop(drain);
    db = Db::open_with(dir, opts.auto_compaction(false))?;
    let mut l0_inserts = 0u64;
    if args.l0_tables > 0 {
        let value3 = vec![b'l'; args.value_size];
        // Half a memtable per table, so that each batch is one flush.
        let memtable = args.memtable_size.unwrap_or(Options::DEFAULT_MEMTABLE_SIZE) as u64;
        let per_entry = 16 + args.value_size as u64 + 64 + 8;
        for t in 0..args.l0_tables {
            let n = (memtable / per_entry / 2).max(1);
            for j in 0..n {
                let i =
                    splitmix(splitmix(args.seed ^ 0x10ad) ^ (u64::from(t) << 40) ^ j) % args.keys;
                db.insert(make_key(0, args.seed, i), &value3)?;
            }
            l0_inserts += n;
            db.flush()?;
        }
    }
    let load_secs = start.elapsed().as_secs_f64();
    written.push(db.stats());
    pb.finish_and_clear();
    let levels: Vec<LevelRow> = db
        .levels()
        .into_iter()
        .filter(|l| l.tables > 0)
        .map(|l| LevelRow {
            level: l.level,
            tables: l.tables,
            bytes: l.bytes,
            filter_bytes: l.filter_bytes,
            bits_per_key: l.bits_per_key,
            filter_kind: l.filter_kind.clone(),
            expected_fpr: l.expected_fpr,
        })
        .collect();
    let filter_bytes: u64 = levels.iter().map(|l| l.filter_bytes).sum();
    let filter_keys: u64 = db.levels().iter().map(|l| l.filter_keys).sum();
    let expected_wasted = levels.iter().map(|l| l.expected_fpr).sum();
    let fprs = table_fprs(&db);
    let mut reads = Vec::new();
    for kind in [
        ReadKind::Present,
        ReadKind::AbsentInRange,
        ReadKind::AbsentOutOfRange,
    ] {
        reads.push(run_reads(&db, dir, kind, args, &fprs)?);
    }
    db.close()?;
    Ok(SettingReport {
        setting,
        load_secs,
        load_keys_per_sec: (args.keys + overwrites + l0_inserts) as f64 / load_secs,
        write_amplification: combined_write_amplification(&written),
        levels,
        filter_bytes,
        filter_bits_per_key: if filter_keys > 0 {
            filter_bytes as f64 * 8.0 / filter_keys as f64
        } else {
            0.0
        },
        expected_wasted_reads_per_absent_get: if filter_bytes > 0 {
            expected_wasted
        } else {
            f64::NAN
        },
        reads,
    })
}

fn opt_pct(v: Option<f64>) -> String {
    v.map_or("-".into(), |x| format!("{:.3}%", x * 100.0))
}

/// The report as text tables on stdout, through [`line()`]: a closed pipe ends quietly, a
/// failed write (a full disk under a redirect) is an error.
fn print_text(r: &Report) -> Result<(), CliError> {
    let mut lines = Vec::new();
    let tree = if r.overwrites > 0 {
        format!(
            "then {} random overwrites (a steady-state tree)",
            r.overwrites
        )
    } else {
        "no overwrites (a young tree)".to_string()
    };
    lines.push(format!(
        "siltdb read amplification: {} keys ({}-byte keys, {}-byte values, random order), {tree}; default options except each setting's filter policy; {} reads per kind",
        r.keys, r.key_size, r.value_size, r.reads_per_kind
    ));
    for s in &r.settings {
        let shape: Vec<String> = s
            .levels
            .iter()
            .map(|l| format!("L{}:{}", l.level, l.tables))
            .collect();
        let kinds: Vec<String> = s
            .levels
            .iter()
            .filter(|l| l.filter_bytes > 0)
            .map(|l| format!("L{} {} {:.2}", l.level, l.filter_kind, l.bits_per_key))
            .collect();
        lines.push(format!(
            "\nbits/key {:<10} load {:.1}s ({:.0} keys/s), write amp {:.2}, tables {}, filters {:.2} MiB ({:.2} bits/key)",
            s.setting.label,
            s.load_secs,
            s.load_keys_per_sec,
            s.write_amplification,
            shape.join(" "),
            s.filter_bytes as f64 / (1 << 20) as f64,
            s.filter_bits_per_key
        ));
        if !kinds.is_empty() {
            lines.push(format!("  filters (kind, bits/key): {}", kinds.join(", ")));
        }
    }
    lines.push(String::new());
    lines.push(format!(
        "{:<10} {:<21} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>11} {:>10} {:>8} {:>8}",
        "bits/key",
        "read kind",
        "tables/get",
        "probes/get",
        "blocks/get",
        "cached/get",
        "pred blk/g",
        "bytes/get",
        "FPR meas",
        "FPR pred",
        "gets/s",
        "filter MiB",
        "p50 us",
        "p99 us"
    ));
    for s in &r.settings {
        for row in &s.reads {
            lines.push(format!(
                "{:<10} {:<21} {:>10.3} {:>10.3} {:>10.4} {:>10.4} {:>10.4} {:>10.1} {:>10} {:>10} {:>11.0} {:>10.2} {:>8.2} {:>8.2}",
                s.setting.label,
                row.kind_name(),
                row.tables_considered_per_get,
                row.filter_probes_per_get,
                row.data_blocks_per_get,
                row.cache_hits_per_get,
                row.predicted_blocks_per_get,
                row.bytes_per_get,
                opt_pct(row.measured_fpr),
                opt_pct(row.predicted_fpr),
                row.gets_per_sec,
                s.filter_bytes as f64 / (1 << 20) as f64,
                row.p50_us,
                row.p99_us
            ));
        }
    }
    let mut out = std::io::stdout().lock();
    for l in &lines {
        line(&mut out, l)?;
    }
    flush(&mut out)
}

impl ReadRow {
    fn kind_name(&self) -> &'static str {
        self.kind.name()
    }
}

type PlotResult = Result<(), plotters::drawing::DrawingAreaErrorKind<std::io::Error>>;

/// One line with dots at its points, and its legend entry.
fn draw_line<'a, Y: plotters::coord::ranged1d::Ranged<ValueType = f64>>(
    chart: &mut plotters::chart::ChartContext<
        'a,
        plotters::backend::SVGBackend<'a>,
        plotters::coord::cartesian::Cartesian2d<plotters::coord::types::RangedCoordf64, Y>,
    >,
    pts: &[(f64, f64)],
    color: plotters::style::RGBColor,
    name: &str,
) -> PlotResult {
    use plotters::prelude::*;
    chart
        .draw_series(LineSeries::new(pts.to_vec(), color.stroke_width(2)))?
        .label(name)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
    chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))?;
    Ok(())
}

fn draw_legend<'a, Y: plotters::coord::ranged1d::Ranged<ValueType = f64>>(
    chart: &mut plotters::chart::ChartContext<
        'a,
        plotters::backend::SVGBackend<'a>,
        plotters::coord::cartesian::Cartesian2d<plotters::coord::types::RangedCoordf64, Y>,
    >,
) -> PlotResult {
    use plotters::prelude::*;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()
}

fn plot(r: &Report, path: &Path) -> Result<(), CliError> {
    use plotters::prelude::*;
    let to_err =
        |e: &dyn std::fmt::Display| CliError::input(format!("plot {}: {e}", path.display()));
    let uniform: Vec<&SettingReport> = r
        .settings
        .iter()
        .filter(|s| s.setting.policy == "none" || s.setting.policy == "uniform")
        .collect();
    if uniform.is_empty() {
        return Err(CliError::input(
            "--plot needs at least one numeric --bits-per-key setting",
        ));
    }
    let max_bits = uniform
        .iter()
        .map(|s| s.setting.bits_per_key)
        .fold(1.0, f64::max);
    let max_blocks = uniform
        .iter()
        .flat_map(|s| s.reads.iter().map(|r| r.data_blocks_per_get))
        .fold(0.1, f64::max)
        * 1.1;
    let root = SVGBackend::new(path, (1200, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| to_err(&e))?;
    let (left, right) = root.split_horizontally(600);
    let mut chart = ChartBuilder::on(&left)
        .caption("data blocks read per get", ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..max_bits, 0.0..max_blocks)
        .map_err(|e| to_err(&e))?;
    chart
        .configure_mesh()
        .x_desc("bits per key")
        .y_desc("blocks / get")
        .draw()
        .map_err(|e| to_err(&e))?;
    let kinds = [
        ReadKind::Present,
        ReadKind::AbsentInRange,
        ReadKind::AbsentOutOfRange,
    ];
    let colors = [BLUE, RED, GREEN];
    for (kind, color) in kinds.iter().zip(colors) {
        let pts: Vec<(f64, f64)> = uniform
            .iter()
            .filter_map(|s| {
                s.reads
                    .iter()
                    .find(|r| r.kind == *kind)
                    .map(|r| (s.setting.bits_per_key, r.data_blocks_per_get))
            })
            .collect();
        draw_line(&mut chart, &pts, color, kind.name()).map_err(|e| to_err(&e))?;
    }
    draw_legend(&mut chart).map_err(|e| to_err(&e))?;

    let fpr_points = |pred: bool| -> Vec<(f64, f64)> {
        uniform
            .iter()
            .filter_map(|s| {
                let row = s.reads.iter().find(|r| r.kind == ReadKind::AbsentInRange)?;
                let v = if pred {
                    row.predicted_fpr
                } else {
                    row.measured_fpr
                }?;
                Some((s.setting.bits_per_key, v.max(1e-6)))
            })
            .collect()
    };
    let (meas, pred) = (fpr_points(false), fpr_points(true));
    let min_fpr = meas.iter().chain(&pred).map(|p| p.1).fold(1.0, f64::min) / 2.0;
    let mut chart = ChartBuilder::on(&right)
        .caption(
            "filter false-positive rate (absent keys in range)",
            ("sans-serif", 20),
        )
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(65)
        .build_cartesian_2d(0.0..max_bits, (min_fpr..1.0).log_scale())
        .map_err(|e| to_err(&e))?;
    chart
        .configure_mesh()
        .x_desc("bits per key")
        .y_desc("false-positive rate")
        .y_label_formatter(&|y| format!("{:.3}%", y * 100.0))
        .draw()
        .map_err(|e| to_err(&e))?;
    for (pts, color, name) in [
        (meas, RED, "measured (Stats)"),
        (pred, BLACK, "predicted (m, n, k)"),
    ] {
        draw_line(&mut chart, &pts, color, name).map_err(|e| to_err(&e))?;
    }
    draw_legend(&mut chart).map_err(|e| to_err(&e))?;
    root.present().map_err(|e| to_err(&e))?;
    Ok(())
}

/// Runs the report.
pub fn run(args: &ReadampArgs, json: bool) -> Result<(), CliError> {
    if args.keys == 0 || args.reads == 0 {
        return Err(CliError::input("--keys and --reads must be at least 1"));
    }
    if args.value_size > siltdb::MAX_VALUE_SIZE {
        return Err(CliError::input(format!(
            "--value-size {} is over the largest value, {} bytes",
            args.value_size,
            siltdb::MAX_VALUE_SIZE
        )));
    }
    if args.keys.checked_add(args.overwrites()).is_none() {
        return Err(CliError::input(
            "--keys plus --overwrites must fit in 64 bits",
        ));
    }
    let settings = args
        .bits_per_key
        .iter()
        .map(|s| parse_setting(s))
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(p) = &args.plot {
        // What `plot` needs, checked before the runs rather than after them.
        if !settings
            .iter()
            .any(|(s, _)| s.policy == "none" || s.policy == "uniform")
        {
            return Err(CliError::input(
                "--plot needs at least one numeric --bits-per-key setting",
            ));
        }
        let parent = p.parent().filter(|d| !d.as_os_str().is_empty());
        if parent.is_some_and(|d| !d.is_dir()) {
            return Err(CliError::input(format!(
                "--plot {}: its directory does not exist",
                p.display()
            )));
        }
    }
    let tmp;
    let base: PathBuf = match &args.dir {
        Some(d) => d.clone(),
        None => {
            tmp = tempfile::Builder::new()
                .prefix("silt-readamp-")
                .tempdir()
                .map_err(|e| {
                    CliError::input(format!("cannot create a temporary directory: {e}"))
                })?;
            tmp.path().to_path_buf()
        }
    };
    let started = Instant::now();
    let mut reports = Vec::new();
    for (i, (setting, policy)) in settings.into_iter().enumerate() {
        let dir = base.join(format!("setting-{i}-{}", setting.label.replace(':', "-")));
        reports.push(run_setting(args, setting, policy, &dir)?);
        if args.dir.is_none() {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    let report = Report {
        keys: args.keys,
        overwrites: args.overwrites(),
        key_size: 16,
        value_size: args.value_size,
        reads_per_kind: args.reads,
        seed: args.seed,
        settings: reports,
    };
    if let Some(p) = &args.plot {
        plot(&report, p)?;
    }
    if json {
        print_json(&report)?;
    } else {
        print_text(&report)?;
        eprintln!(
            "(finished in {:.1?})",
            Duration::from_secs_f64(started.elapsed().as_secs_f64())
        );
    }
    Ok(())
}

/// [`Stats::write_amplification`] of the writes several handles made one after another:
/// the bytes they wrote to tables over the user bytes they were given.
fn combined_write_amplification(handles: &[siltdb::Stats]) -> f64 {
    let tables: u64 = handles
        .iter()
        .map(|s| s.bytes_flushed + s.bytes_compacted_written)
        .sum();
    let user: u64 = handles.iter().map(|s| s.user_bytes_written).sum();
    if user == 0 {
        0.0
    } else {
        tables as f64 / user as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_amplification_spans_the_handles_that_wrote() {
        // A load (100 user bytes, 250 written to tables), then a drain that only compacts
        // (300 more): 5.5 over the whole load, where the first handle alone says 2.5.
        let mut load = siltdb::Stats::default();
        load.user_bytes_written = 100;
        load.bytes_flushed = 120;
        load.bytes_compacted_written = 130;
        let mut drain = siltdb::Stats::default();
        drain.bytes_compacted_written = 300;
        assert_eq!(load.write_amplification(), 2.5);
        assert_eq!(combined_write_amplification(&[load, drain]), 5.5);
        assert_eq!(combined_write_amplification(&[]), 0.0);
    }
}
