//! `silt sst info|filter|dump|verify`.

use crate::output::{escape, line, parse_key, print_json, show, CliError};
use clap::Args;
use serde::Serialize;
use siltdb::inspect::filter::{self, Filter};
use siltdb::inspect::table::TableReader;
use siltdb::inspect::table::{BlockKind, Footer, FOOTER_LEN, MAGIC};
use std::io::Write;
use std::path::{Path, PathBuf};

fn open(file: &Path) -> Result<TableReader, CliError> {
    if !file.exists() {
        return Err(CliError::input(format!("not found: {}", file.display())));
    }
    if file.is_dir() {
        return Err(CliError::input(format!(
            "{} is a directory, not an SSTable",
            file.display()
        )));
    }
    Ok(TableReader::open_file(file)?)
}

fn key_range(t: &TableReader) -> (String, String) {
    (escape(t.smallest_user_key()), escape(t.largest_user_key()))
}

#[derive(Serialize)]
struct BlockRow {
    kind: &'static str,
    offset: u64,
    length: u64,
}

#[derive(Serialize)]
struct FilterSummary {
    kind: String,
    keys: u64,
    bits: u64,
    bits_per_key: f64,
    probes: u32,
    bytes: u64,
    predicted_fpr: f64,
}

fn filter_summary(t: &TableReader) -> Option<FilterSummary> {
    let f = t.filter()?;
    let handle = t.footer().filter?;
    Some(match f {
        Filter::Bloom(b) => FilterSummary {
            kind: "blocked-bloom-512".into(),
            keys: b.keys(),
            bits: b.bits(),
            bits_per_key: b.bits_per_key(),
            probes: b.probes(),
            bytes: handle.size,
            predicted_fpr: b.predicted_fpr(),
        },
        Filter::Empty => FilterSummary {
            kind: "empty (no keys)".into(),
            keys: 0,
            bits: 0,
            bits_per_key: 0.0,
            probes: 0,
            bytes: handle.size,
            predicted_fpr: 0.0,
        },
        Filter::Unknown(why) => FilterSummary {
            kind: format!("unknown: {why}"),
            keys: 0,
            bits: 0,
            bits_per_key: 0.0,
            probes: 0,
            bytes: handle.size,
            predicted_fpr: 1.0,
        },
    })
}

#[derive(Serialize)]
struct InfoJson {
    file: String,
    file_size: u64,
    format_version: u32,
    magic: String,
    blocks: Vec<BlockRow>,
    entries: u64,
    deletions: u64,
    user_keys: u64,
    smallest_key: String,
    largest_key: String,
    min_seq: u64,
    max_seq: u64,
    raw_key_bytes: u64,
    raw_value_bytes: u64,
    data_blocks: u64,
    data_bytes: u64,
    level: u64,
    filter: Option<FilterSummary>,
}

/// `silt sst info FILE`.
pub fn info(file: &Path, json: bool) -> Result<(), CliError> {
    let t = open(file)?;
    let p = t.properties().clone();
    let blocks: Vec<BlockRow> = t
        .blocks()
        .into_iter()
        .map(|b| BlockRow {
            kind: b.kind.name(),
            offset: b.handle.offset,
            length: b.handle.size + 5,
        })
        .collect();
    let (lo, hi) = key_range(&t);
    let doc = InfoJson {
        file: file.display().to_string(),
        file_size: t.file_size(),
        format_version: t.footer().version,
        magic: String::from_utf8_lossy(&MAGIC).into_owned(),
        blocks,
        entries: p.entries,
        deletions: p.deletions,
        user_keys: p.user_keys,
        smallest_key: lo,
        largest_key: hi,
        min_seq: p.min_seq,
        max_seq: p.max_seq,
        raw_key_bytes: p.raw_key_bytes,
        raw_value_bytes: p.raw_value_bytes,
        data_blocks: p.data_blocks,
        data_bytes: p.data_bytes,
        level: p.level,
        filter: filter_summary(&t),
    };
    if json {
        return print_json(&doc);
    }
    let mut out = std::io::stdout().lock();
    line(&mut out, &format!("file            {}", doc.file))?;
    line(
        &mut out,
        &format!("size            {} bytes", doc.file_size),
    )?;
    line(
        &mut out,
        &format!(
            "footer          format version {}, magic {:?}, {} bytes at offset {}",
            doc.format_version,
            doc.magic,
            FOOTER_LEN,
            doc.file_size - FOOTER_LEN as u64
        ),
    )?;
    line(
        &mut out,
        &format!(
            "entries         {} ({} tombstones, {} distinct keys)",
            doc.entries, doc.deletions, doc.user_keys
        ),
    )?;
    line(
        &mut out,
        &format!(
            "key range       {} .. {}",
            doc.smallest_key, doc.largest_key
        ),
    )?;
    line(
        &mut out,
        &format!("sequence range  {} .. {}", doc.min_seq, doc.max_seq),
    )?;
    line(
        &mut out,
        &format!(
            "raw sizes       keys {} bytes, values {} bytes",
            doc.raw_key_bytes, doc.raw_value_bytes
        ),
    )?;
    line(
        &mut out,
        &format!(
            "data            {} blocks, {} bytes",
            doc.data_blocks, doc.data_bytes
        ),
    )?;
    line(&mut out, &format!("written for     L{}", doc.level))?;
    match &doc.filter {
        Some(f) => line(
            &mut out,
            &format!(
                "filter          {}: {} keys, {} bits ({:.2} bits/key), k={}, {} bytes, predicted FPR {:.4}%",
                f.kind,
                f.keys,
                f.bits,
                f.bits_per_key,
                f.probes,
                f.bytes,
                f.predicted_fpr * 100.0
            ),
        )?,
        None => line(&mut out, "filter          none")?,
    }
    line(&mut out, "layout")?;
    line(
        &mut out,
        &format!("  {:>12}  {:>10}  kind", "offset", "length"),
    )?;
    for b in &doc.blocks {
        line(
            &mut out,
            &format!("  {:>12}  {:>10}  {}", b.offset, b.length, b.kind),
        )?;
    }
    line(
        &mut out,
        &format!(
            "  {:>12}  {:>10}  footer",
            doc.file_size - FOOTER_LEN as u64,
            FOOTER_LEN
        ),
    )?;
    Ok(())
}

/// Arguments of `silt sst filter`.
#[derive(Args, Debug)]
pub struct FilterArgs {
    /// The table file.
    file: PathBuf,
    /// Also measure the false-positive rate by probing this many keys that are not in the
    /// table.
    #[arg(long)]
    measure: Option<u64>,
    /// Explain the filter's answer for this key (repeatable).
    #[arg(long = "key")]
    keys: Vec<String>,
    /// Keys given with --key are hex.
    #[arg(long)]
    hex: bool,
}

#[derive(Serialize)]
struct Histogram {
    bucket_width: u32,
    counts: Vec<u64>,
}

#[derive(Serialize)]
struct KeyProbe {
    key: String,
    verdict: &'static str,
    line: u32,
    probes: Vec<(u32, bool)>,
    in_table: bool,
}

#[derive(Serialize)]
struct FilterJson {
    file: String,
    offset: u64,
    block_bytes: u64,
    marker: String,
    kind: u8,
    kind_name: String,
    version: u8,
    hash: String,
    seed: u32,
    keys: u64,
    bits: u64,
    bits_per_key: f64,
    probes: u8,
    lines: u32,
    crc_stored: String,
    crc_ok: bool,
    fill_ratio: Option<f64>,
    predicted_fpr: Option<f64>,
    fpr_from_fill_ratio: Option<f64>,
    fpr_from_line_fill: Option<f64>,
    standard_bloom_fpr: Option<f64>,
    set_bits_per_line_min: Option<u32>,
    set_bits_per_line_mean: Option<f64>,
    set_bits_per_line_max: Option<u32>,
    histogram: Option<Histogram>,
    measured: Option<Measured>,
    keys_probed: Vec<KeyProbe>,
}

#[derive(Serialize)]
struct Measured {
    probes: u64,
    false_positives: u64,
    fpr: f64,
}

/// Reads a block's raw contents (without checking its trailer) straight from the file.
fn raw_block(file: &Path, offset: u64, size: u64) -> Result<Vec<u8>, CliError> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(file)
        .map_err(|e| CliError::input(format!("{}: {e}", file.display())))?;
    let mut buf = vec![0u8; size as usize];
    f.read_exact_at(&mut buf, offset)
        .map_err(|e| CliError::input(format!("{}: reading filter block: {e}", file.display())))?;
    Ok(buf)
}

/// Keys that are certainly not in any table siltdb writes from user data in tests: a fixed
/// prefix then a counter.
fn probe_key(i: u64) -> Vec<u8> {
    let mut k = b"\xff\xfesilt-measure-".to_vec();
    k.extend_from_slice(&i.to_be_bytes());
    k
}

/// `silt sst filter FILE`.
pub fn filter(args: &FilterArgs, json: bool) -> Result<(), CliError> {
    let file = &args.file;
    if !file.exists() {
        return Err(CliError::input(format!("not found: {}", file.display())));
    }
    // Read the footer and the raw filter block ourselves, so that a filter whose checksum
    // fails can still be shown (with its status) before the error.
    let len = std::fs::metadata(file)
        .map_err(|e| CliError::input(format!("{}: {e}", file.display())))?
        .len();
    if len < FOOTER_LEN as u64 {
        return Err(CliError::input(format!(
            "corrupt file {} at offset 0: {len} bytes is too short to be an SSTable",
            file.display()
        )));
    }
    let fbytes = raw_block(file, len - FOOTER_LEN as u64, FOOTER_LEN as u64)?;
    let mut farr = [0u8; FOOTER_LEN];
    farr.copy_from_slice(&fbytes);
    let footer = Footer::decode(&farr).map_err(|e| {
        CliError::input(format!(
            "corrupt file {} at offset {}: {e}",
            file.display(),
            len - FOOTER_LEN as u64 + e.field_offset()
        ))
    })?;
    let Some(fh) = footer.filter else {
        if json {
            return print_json(
                &serde_json::json!({"file": file.display().to_string(), "filter": null}),
            );
        }
        println!(
            "{}: no filter block (written with 0 bits per key)",
            file.display()
        );
        return Ok(());
    };
    if fh.offset + fh.size + 5 > len - FOOTER_LEN as u64 {
        return Err(CliError::input(format!(
            "corrupt file {} at offset {}: filter block handle reaches past the end of the data",
            file.display(),
            len - FOOTER_LEN as u64 + 16
        )));
    }
    let block = raw_block(file, fh.offset, fh.size)?;
    let trailer = filter::decode_trailer(&block).map_err(|e| {
        CliError::input(format!(
            "corrupt file {} at offset {}: {}",
            file.display(),
            fh.offset + e.offset,
            e.detail
        ))
    })?;
    let crc_ok = filter::checksum_ok(&block);
    let decoded = if crc_ok {
        filter::decode(&block).ok()
    } else {
        None
    };
    let table = if crc_ok { Some(open(file)?) } else { None };
    let bloom = match &decoded {
        Some(Filter::Bloom(b)) => Some(b),
        _ => None,
    };
    let kind_name = match (&decoded, trailer.marker, trailer.kind) {
        (Some(Filter::Unknown(why)), _, _) => {
            format!("unknown ({why}): every key reads as maybe present")
        }
        (Some(Filter::Empty), _, _) => "blocked Bloom, 512-bit lines (empty: no keys)".into(),
        (_, filter::MARKER, filter::KIND_BLOCKED_BLOOM) => "blocked Bloom, 512-bit lines".into(),
        _ => "unknown".into(),
    };
    let per_line = bloom.map(|b| b.set_bits_per_line());
    let histogram = per_line.as_ref().map(|v| {
        let width = 32u32;
        let mut counts = vec![0u64; (512 / width) as usize + 1];
        for &c in v {
            counts[(c / width) as usize] += 1;
        }
        while counts.len() > 1 && counts.last() == Some(&0) {
            counts.pop();
        }
        Histogram {
            bucket_width: width,
            counts,
        }
    });
    let measured = match (args.measure, bloom, &table) {
        (Some(n), Some(b), Some(t)) => {
            let mut fp = 0u64;
            for i in 0..n {
                let k = probe_key(i);
                if b.may_contain_hash(filter::hash_key(&k)) && t.find(&k)?.is_none() {
                    fp += 1;
                }
            }
            Some(Measured {
                probes: n,
                false_positives: fp,
                fpr: fp as f64 / n.max(1) as f64,
            })
        }
        _ => None,
    };
    let mut keys_probed = Vec::new();
    for k in &args.keys {
        let key = parse_key(k, args.hex)?;
        let h = filter::hash_key(&key);
        let in_table = match &table {
            Some(t) => t.find(&key)?.is_some(),
            None => false,
        };
        let (verdict, line_no, probes) = match &decoded {
            Some(Filter::Bloom(b)) => (
                if b.may_contain_hash(h) {
                    "maybe present"
                } else {
                    "definitely absent"
                },
                b.line_of(h),
                b.probe_bits(h),
            ),
            Some(Filter::Empty) => ("definitely absent", 0, Vec::new()),
            _ => ("maybe present", 0, Vec::new()),
        };
        keys_probed.push(KeyProbe {
            key: show(&key, args.hex),
            verdict,
            line: line_no,
            probes,
            in_table,
        });
    }
    let fill = bloom.map(|b| b.fill_ratio());
    let doc = FilterJson {
        file: file.display().to_string(),
        offset: fh.offset,
        block_bytes: fh.size,
        marker: format!("0x{:02x}", trailer.marker),
        kind: trailer.kind,
        kind_name,
        version: trailer.version,
        hash: if trailer.hash_id == filter::HASH_XXH3_64 {
            "xxh3-64".into()
        } else {
            format!("unknown id {}", trailer.hash_id)
        },
        seed: trailer.seed,
        keys: trailer.keys,
        bits: u64::from(trailer.lines) * 512,
        bits_per_key: if trailer.keys > 0 {
            f64::from(trailer.lines) * 512.0 / trailer.keys as f64
        } else {
            0.0
        },
        probes: trailer.probes,
        lines: trailer.lines,
        crc_stored: format!("0x{:08x}", trailer.crc),
        crc_ok,
        fill_ratio: fill,
        predicted_fpr: bloom.map(|b| b.predicted_fpr()),
        fpr_from_fill_ratio: bloom.map(|b| filter::fpr_from_fill(b.fill_ratio(), b.probes())),
        fpr_from_line_fill: bloom.map(|b| b.estimated_fpr_from_lines()),
        standard_bloom_fpr: bloom.map(|b| {
            filter::standard_bloom_fpr(b.bits() as f64, b.keys() as f64, f64::from(b.probes()))
        }),
        set_bits_per_line_min: per_line.as_ref().and_then(|v| v.iter().min().copied()),
        set_bits_per_line_mean: per_line
            .as_ref()
            .map(|v| v.iter().map(|&c| f64::from(c)).sum::<f64>() / v.len().max(1) as f64),
        set_bits_per_line_max: per_line.as_ref().and_then(|v| v.iter().max().copied()),
        histogram,
        measured,
        keys_probed,
    };
    if json {
        print_json(&doc)?;
    } else {
        print_filter_text(&doc)?;
    }
    if !crc_ok {
        return Err(CliError::input(format!(
            "corrupt file {} at offset {}: filter checksum mismatch",
            file.display(),
            fh.offset + fh.size - 4
        )));
    }
    Ok(())
}

fn pct(v: Option<f64>) -> String {
    v.map_or("-".into(), |x| format!("{:.4}%", x * 100.0))
}

fn print_filter_text(d: &FilterJson) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    line(&mut out, &format!("file                 {}", d.file))?;
    line(
        &mut out,
        &format!(
            "filter block         offset {}, {} bytes",
            d.offset, d.block_bytes
        ),
    )?;
    line(
        &mut out,
        &format!(
            "kind                 {} (marker {}, kind {}, version {})",
            d.kind_name, d.marker, d.kind, d.version
        ),
    )?;
    line(
        &mut out,
        &format!("hash                 {}, seed {}", d.hash, d.seed),
    )?;
    line(&mut out, &format!("keys (n)             {}", d.keys))?;
    line(
        &mut out,
        &format!(
            "bits (m)             {} in {} lines of 512 ({:.3} bits/key)",
            d.bits, d.lines, d.bits_per_key
        ),
    )?;
    line(&mut out, &format!("probes (k)           {}", d.probes))?;
    line(
        &mut out,
        &format!(
            "crc                  {} ({})",
            d.crc_stored,
            if d.crc_ok { "ok" } else { "MISMATCH" }
        ),
    )?;
    if let Some(f) = d.fill_ratio {
        line(
            &mut out,
            &format!("fill ratio           {:.4} of bits set", f),
        )?;
    }
    line(
        &mut out,
        &format!(
            "FPR predicted        {} (blocked Bloom, from m, n, k)",
            pct(d.predicted_fpr)
        ),
    )?;
    line(
        &mut out,
        &format!(
            "FPR from fill ratio  {} (fill^k) / {} (per-line fill^k)",
            pct(d.fpr_from_fill_ratio),
            pct(d.fpr_from_line_fill)
        ),
    )?;
    line(
        &mut out,
        &format!(
            "FPR unblocked Bloom  {} (same m, n, k, for comparison)",
            pct(d.standard_bloom_fpr)
        ),
    )?;
    if let Some(m) = &d.measured {
        line(
            &mut out,
            &format!(
                "FPR measured         {:.4}% ({} false positives in {} absent keys)",
                m.fpr * 100.0,
                m.false_positives,
                m.probes
            ),
        )?;
    }
    if let (Some(min), Some(mean), Some(max)) = (
        d.set_bits_per_line_min,
        d.set_bits_per_line_mean,
        d.set_bits_per_line_max,
    ) {
        line(
            &mut out,
            &format!("set bits per line    min {min}, mean {mean:.1}, max {max} (of 512)"),
        )?;
    }
    if let Some(h) = &d.histogram {
        let peak = h.counts.iter().copied().max().unwrap_or(1).max(1);
        let first = h.counts.iter().position(|&c| c > 0).unwrap_or(0);
        for (i, &c) in h.counts.iter().enumerate().skip(first) {
            let lo = i as u32 * h.bucket_width;
            let bar = "#".repeat(((c as f64 / peak as f64) * 40.0).round() as usize);
            line(
                &mut out,
                &format!(
                    "  {:>3}-{:<3} {:>9} {}",
                    lo,
                    lo + h.bucket_width - 1,
                    c,
                    bar
                ),
            )?;
        }
    }
    for k in &d.keys_probed {
        let bits: Vec<String> = k
            .probes
            .iter()
            .map(|(b, set)| format!("{b}{}", if *set { "" } else { "(0)" }))
            .collect();
        line(
            &mut out,
            &format!(
                "key {:<24} {:<17} line {} bits [{}]; in table: {}",
                k.key,
                k.verdict,
                k.line,
                bits.join(" "),
                if k.in_table { "yes" } else { "no" }
            ),
        )?;
    }
    Ok(())
}

/// Arguments of `silt sst dump`.
#[derive(Args, Debug)]
pub struct DumpArgs {
    /// The table file.
    file: PathBuf,
    /// First key to print (inclusive).
    #[arg(long)]
    from: Option<String>,
    /// Last key to print (exclusive).
    #[arg(long)]
    to: Option<String>,
    /// Print at most this many records.
    #[arg(long)]
    limit: Option<u64>,
    /// Keys (here and in --from/--to) and values as hex.
    #[arg(long)]
    hex: bool,
}

#[derive(Serialize)]
struct DumpRecord<'a> {
    key: &'a str,
    seq: u64,
    tombstone: bool,
    value: &'a str,
}

/// `silt sst dump FILE`: streams records.
pub fn dump(args: &DumpArgs, json: bool) -> Result<(), CliError> {
    let t = open(&args.file)?;
    let from = args
        .from
        .as_deref()
        .map(|k| parse_key(k, args.hex))
        .transpose()?;
    let to = args
        .to
        .as_deref()
        .map(|k| parse_key(k, args.hex))
        .transpose()?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut printed = 0u64;
    for e in t.entries() {
        let e = e?;
        if from.as_ref().is_some_and(|f| e.key < *f) {
            continue;
        }
        if to.as_ref().is_some_and(|t| e.key >= *t) {
            break;
        }
        if args.limit.is_some_and(|l| printed >= l) {
            break;
        }
        let (k, v) = (show(&e.key, args.hex), show(&e.value, args.hex));
        if json {
            let rec = DumpRecord {
                key: &k,
                seq: e.seq,
                tombstone: e.tombstone,
                value: &v,
            };
            line(&mut out, &serde_json::to_string(&rec)?)?;
        } else if e.tombstone {
            line(&mut out, &format!("{k} @{} DELETED", e.seq))?;
        } else {
            line(&mut out, &format!("{k} @{} => {v}", e.seq))?;
        }
        printed += 1;
    }
    out.flush().or_else(|e| {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            Ok(())
        } else {
            Err(e)
        }
    })?;
    Ok(())
}

#[derive(Serialize)]
struct Problem {
    offset: u64,
    what: String,
}

#[derive(Serialize)]
struct VerifyJson {
    file: String,
    blocks_checked: u64,
    ok: bool,
    problems: Vec<Problem>,
}

/// `silt sst verify FILE`: every block's checksum, the footer, and key order.
pub fn verify(file: &Path, json: bool) -> Result<(), CliError> {
    if !file.exists() {
        return Err(CliError::input(format!("not found: {}", file.display())));
    }
    let mut problems = Vec::new();
    let mut checked = 0u64;
    match TableReader::open_file(file) {
        Err(siltdb::Error::Corruption { offset, detail, .. }) => {
            // A file that is not an SSTable at all is bad input, not a damaged table.
            if detail.contains("too short") || detail.contains("bad magic") {
                return Err(CliError::input(format!(
                    "corrupt file {} at offset {offset}: {detail}",
                    file.display()
                )));
            }
            problems.push(Problem {
                offset,
                what: detail,
            });
        }
        Err(e) => return Err(e.into()),
        Ok(t) => {
            // Opening checked the footer, index, filter and properties; now every data block.
            checked = 4;
            for b in t.blocks().iter().filter(|b| b.kind == BlockKind::Data) {
                checked += 1;
                if let Err(e) = t.verify_block(b) {
                    let (offset, what) = match e {
                        siltdb::Error::Corruption { offset, detail, .. } => (offset, detail),
                        other => (b.handle.offset, other.to_string()),
                    };
                    problems.push(Problem { offset, what });
                }
            }
            if problems.is_empty() {
                // Key order across blocks, and against the properties.
                let mut last: Option<(Vec<u8>, u64)> = None;
                let mut count = 0u64;
                for e in t.entries() {
                    let e = e?;
                    if let Some((lk, ls)) = &last {
                        if (lk.as_slice(), std::cmp::Reverse(*ls))
                            >= (e.key.as_slice(), std::cmp::Reverse(e.seq))
                        {
                            problems.push(Problem {
                                offset: 0,
                                what: format!("keys out of order at {}", escape(&e.key)),
                            });
                            break;
                        }
                    }
                    last = Some((e.key.clone(), e.seq));
                    count += 1;
                }
                if count != t.properties().entries {
                    problems.push(Problem {
                        offset: t.footer().properties.offset,
                        what: format!(
                            "properties say {} entries, the blocks hold {count}",
                            t.properties().entries
                        ),
                    });
                }
            }
        }
    }
    let doc = VerifyJson {
        file: file.display().to_string(),
        blocks_checked: checked,
        ok: problems.is_empty(),
        problems,
    };
    if json {
        print_json(&doc)?;
    } else {
        let mut out = std::io::stdout().lock();
        for p in &doc.problems {
            line(
                &mut out,
                &format!("CORRUPT {} at offset {}: {}", doc.file, p.offset, p.what),
            )?;
        }
        if doc.ok {
            line(
                &mut out,
                &format!(
                    "OK {}: {} blocks and the footer verified",
                    doc.file, doc.blocks_checked
                ),
            )?;
        }
    }
    if doc.ok {
        Ok(())
    } else {
        Err(CliError::found_problems(format!(
            "{} problem(s) found in {}",
            doc.problems.len(),
            doc.file
        )))
    }
}
