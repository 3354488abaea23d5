//! `silt sst info|filter|dump|verify`.

use crate::output::{escape, flush, line, parse_key, print_json, show, CliError};
use clap::Args;
use serde::Serialize;
use siltdb::inspect::filter::{
    self, BloomFilter, Filter, FilterTrailer, FuseTrailer, RibbonTrailer,
};
use siltdb::inspect::table::TableReader;
use siltdb::inspect::table::{BlockHandle, BlockKind, Footer, FOOTER_LEN, MAGIC};
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
    /// Bloom probes per key (`k`); null for other kinds.
    probes: Option<u32>,
    /// Fuse fingerprint width; null for other kinds.
    fingerprint_bits: Option<u32>,
    /// Fuse slots per key; null for other kinds.
    arity: Option<u32>,
    /// Fuse array length or Ribbon slots; null for other kinds.
    slots: Option<u64>,
    /// Ribbon: mean result bits per slot; null for other kinds.
    columns: Option<f64>,
    bytes: u64,
    predicted_fpr: f64,
}

impl FilterSummary {
    fn new(kind: String, f: &Filter, bytes: u64) -> FilterSummary {
        FilterSummary {
            kind,
            keys: f.keys(),
            bits: 0,
            bits_per_key: f.bits_per_key(),
            probes: None,
            fingerprint_bits: None,
            arity: None,
            slots: None,
            columns: None,
            bytes,
            predicted_fpr: f.predicted_fpr(),
        }
    }

    /// The `filter` line of `silt sst info`.
    fn text(&self) -> String {
        let size = format!("{} bits ({:.2} bits/key)", self.bits, self.bits_per_key);
        let shape = match (self.fingerprint_bits, self.arity, self.slots, self.probes) {
            (Some(w), Some(a), Some(slots), _) => {
                format!("{w}-bit fingerprints, {a}-wise, {slots} slots, {size}")
            }
            (_, _, _, Some(k)) => format!("{size}, k={k}"),
            (None, None, Some(slots), None) => format!(
                "{:.2} result bits per slot, {slots} slots, {size}",
                self.columns.unwrap_or(0.0)
            ),
            _ => size,
        };
        format!(
            "{}: {} keys, {shape}, {} bytes, predicted FPR {:.4}%",
            self.kind,
            self.keys,
            self.bytes,
            self.predicted_fpr * 100.0
        )
    }
}

fn filter_summary(t: &TableReader) -> Option<FilterSummary> {
    let f = t.filter()?;
    let bytes = t.footer().filter?.size;
    Some(match f {
        Filter::Bloom(b) => FilterSummary {
            bits: b.bits(),
            probes: Some(b.probes()),
            ..FilterSummary::new("blocked-bloom-512".into(), f, bytes)
        },
        Filter::Fuse(x) => FilterSummary {
            bits: x.memory_bytes() as u64 * 8,
            fingerprint_bits: Some(x.fingerprint_bits()),
            arity: Some(x.arity()),
            slots: Some(x.array_length()),
            ..FilterSummary::new(format!("binary-fuse-{}", x.fingerprint_bits()), f, bytes)
        },
        Filter::Ribbon(r) => {
            let g = r.geometry();
            FilterSummary {
                bits: r.memory_bytes() as u64 * 8,
                slots: Some(g.slots()),
                columns: Some((g.words() * 128) as f64 / g.slots() as f64),
                ..FilterSummary::new("ribbon-128".into(), f, bytes)
            }
        }
        Filter::Empty => FilterSummary::new("empty (no keys)".into(), f, bytes),
        Filter::Unknown(why) => FilterSummary::new(format!("unknown: {why}"), f, bytes),
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
    /// The first and last WAL an open's replay wrote the table from (null: a flush's,
    /// a compaction's, or a table from before 2026-12-05).
    replayed_wals: Option<[u64; 2]>,
    filter: Option<FilterSummary>,
    /// Range tombstones (one per fragment and sequence number), and the fragments.
    range_deletions: u64,
    range_tombstones: Vec<RangeJson>,
}

/// One range tombstone of a table: `[start, end)` at `seq` (`end` null: to the end of the
/// key space).
#[derive(Serialize)]
struct RangeJson {
    start: String,
    end: Option<String>,
    seq: u64,
}

fn range_tombstones(t: &TableReader) -> Vec<RangeJson> {
    t.range_tombstones()
        .into_iter()
        .map(|(start, end, seq)| RangeJson {
            start: show(&start, false),
            end: end.map(|e| show(&e, false)),
            seq,
        })
        .collect()
}

impl RangeJson {
    fn text(&self) -> String {
        format!(
            "[{}, {}) @{} RANGE DELETED",
            self.start,
            self.end.as_deref().unwrap_or("<end of keys>"),
            self.seq
        )
    }
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
        replayed_wals: p.replayed_wals.map(|(a, b)| [a, b]),
        filter: filter_summary(&t),
        range_deletions: p.range_deletions,
        range_tombstones: range_tombstones(&t),
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
    if let Some([first, last]) = doc.replayed_wals {
        line(
            &mut out,
            &format!("written by      an open's replay of WALs {first} .. {last}"),
        )?;
    }
    line(
        &mut out,
        &format!("range deletes   {}", doc.range_deletions),
    )?;
    for r in &doc.range_tombstones {
        line(&mut out, &format!("  {}", r.text()))?;
    }
    match &doc.filter {
        Some(f) => line(&mut out, &format!("filter          {}", f.text()))?,
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

/// Where a key lands in a binary fuse filter.
#[derive(Serialize)]
struct FuseKeyProbe {
    /// The key's slots (array indexes), one per slot of the arity.
    slots: Vec<u64>,
    /// The key's fingerprint.
    fingerprint: u32,
    /// The fingerprints stored in those slots: the key may be present iff their XOR is its
    /// fingerprint.
    stored: Vec<u32>,
}

/// Where a key lands in a Ribbon filter.
#[derive(Serialize)]
struct RibbonKeyProbe {
    /// First slot of the key's 128-slot window.
    start: u64,
    /// The key's 128 coefficients, hex (bit i: slot start + i).
    coefficients: String,
    /// The result bits its sums must give, one per column of its block.
    result: u32,
    /// Per column: whether the stored solution gives that bit.
    columns_match: Vec<bool>,
}

#[derive(Serialize)]
struct KeyProbe {
    key: String,
    verdict: &'static str,
    /// Bloom: the line the key maps to (null for other kinds).
    line: Option<u32>,
    /// Bloom: each probed bit of the line and whether it is set (null for other kinds).
    probes: Option<Vec<(u32, bool)>>,
    /// Fuse: the key's slots and fingerprints (null for other kinds).
    fuse: Option<FuseKeyProbe>,
    /// Ribbon: the key's window, coefficients and columns (null for other kinds).
    ribbon: Option<RibbonKeyProbe>,
    /// Whether the table holds the key; null when the table could not be opened (its filter
    /// checksum fails), so that a damaged filter never makes a stored key read as absent.
    in_table: Option<bool>,
}

/// A binary fuse filter's parameters, from its trailer (and its array, once decoded).
#[derive(Serialize)]
struct FuseJson {
    fingerprint_bits: u8,
    arity: u8,
    segment_length_log2: u8,
    /// `2^segment_length_log2` (null if that does not fit in 64 bits).
    segment_length: Option<u64>,
    segment_count: u32,
    /// Slots in the array, `(segment_count + arity - 1) * segment_length` (null on overflow).
    array_length: Option<u64>,
    /// The mixing seed the construction settled on, hex.
    seed: String,
    keys: u64,
    /// Bytes of the fingerprint array: the block without its trailer.
    bytes: u64,
    bits_per_key: f64,
    /// `2^-fingerprint_bits`.
    predicted_fpr: f64,
    /// Fraction of slots holding a zero fingerprint (null unless the filter decoded).
    zero_fraction: Option<f64>,
}

/// A Ribbon filter's parameters, from its trailer.
#[derive(Serialize)]
struct RibbonJson {
    /// Coefficient width in bits (128).
    width: u32,
    /// Result bits of the lower blocks.
    columns: u8,
    /// 128-slot blocks.
    blocks: u32,
    /// First block with `columns + 1` result bits.
    upper_start: u32,
    /// Slots, `128 * blocks`.
    slots: u64,
    /// The mixing seed the construction settled on, hex.
    seed: String,
    keys: u64,
    /// Bytes of the solution: the block without its trailer.
    bytes: u64,
    bits_per_key: f64,
    /// Mean over start positions of `2^-columns of the block`.
    predicted_fpr: f64,
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
    /// The Bloom trailer's hash seed (null for fuse: its mixing seed is `fuse.seed`).
    seed: Option<u32>,
    keys: u64,
    bits: u64,
    bits_per_key: f64,
    /// Bloom probes per key (null for fuse).
    probes: Option<u8>,
    /// Bloom 512-bit lines (null for fuse).
    lines: Option<u32>,
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
    /// The binary fuse filter's parameters (null for other kinds).
    fuse: Option<FuseJson>,
    /// The Ribbon filter's parameters (null for other kinds).
    ribbon: Option<RibbonJson>,
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
    let size = usize::try_from(size)
        .map_err(|_| CliError::input(format!("{}: a block of {size} bytes", file.display())))?;
    let mut buf = vec![0u8; size];
    f.read_exact_at(&mut buf, offset)
        .map_err(|e| CliError::input(format!("{}: reading filter block: {e}", file.display())))?;
    Ok(buf)
}

/// The one-line error for damage at `offset` of `file`.
fn corrupt_at(file: &Path, offset: u64, detail: impl std::fmt::Display) -> CliError {
    CliError::input(format!(
        "corrupt file {} at offset {offset}: {detail}",
        file.display()
    ))
}

/// The filter block's handle and raw contents, read from the footer and the file directly
/// (not through `TableReader`), so that a filter whose checksum fails can still be shown.
/// `None` if the table has no filter block.
fn read_filter_block(file: &Path) -> Result<Option<(BlockHandle, Vec<u8>)>, CliError> {
    let len = std::fs::metadata(file)
        .map_err(|e| CliError::input(format!("{}: {e}", file.display())))?
        .len();
    if len < FOOTER_LEN as u64 {
        return Err(corrupt_at(
            file,
            0,
            format!("{len} bytes is too short to be an SSTable"),
        ));
    }
    let footer_at = len - FOOTER_LEN as u64;
    let fbytes = raw_block(file, footer_at, FOOTER_LEN as u64)?;
    let mut farr = [0u8; FOOTER_LEN];
    farr.copy_from_slice(&fbytes);
    let footer =
        Footer::decode(&farr).map_err(|e| corrupt_at(file, footer_at + e.field_offset(), e))?;
    let Some(fh) = footer.filter else {
        return Ok(None);
    };
    // Checked: the handle comes from the file (a forged one must not wrap around).
    let end = fh
        .offset
        .checked_add(fh.size)
        .and_then(|e| e.checked_add(5));
    if end.is_none_or(|e| e > footer_at) {
        return Err(corrupt_at(
            file,
            footer_at + 16,
            "filter block handle reaches past the end of the data",
        ));
    }
    Ok(Some((fh, raw_block(file, fh.offset, fh.size)?)))
}

/// Keys that are certainly not in any table siltdb writes from user data in tests: a fixed
/// prefix then a counter.
fn probe_key(i: u64) -> Vec<u8> {
    let mut k = b"\xff\xfesilt-measure-".to_vec();
    k.extend_from_slice(&i.to_be_bytes());
    k
}

/// Bits over keys (0 without keys).
fn per_key(bits: u64, keys: u64) -> f64 {
    if keys > 0 {
        bits as f64 / keys as f64
    } else {
        0.0
    }
}

/// What the `kind` line says about the block.
fn kind_name(
    decoded: Option<&Filter>,
    trailer: &FilterTrailer,
    fuse: Option<&FuseTrailer>,
    ribbon: Option<&RibbonTrailer>,
) -> String {
    if let Some(Filter::Unknown(why)) = decoded {
        return format!("unknown ({why}): every key reads as maybe present");
    }
    let base = match (trailer.marker, trailer.kind, fuse) {
        (filter::MARKER, _, Some(t)) => format!(
            "binary fuse, {}-wise, {}-bit fingerprints",
            t.arity, t.fingerprint_bits
        ),
        (filter::MARKER, filter::KIND_RIBBON, _) => match ribbon {
            Some(t) => format!(
                "Ribbon, 128-bit coefficients, {} or {} result bits per slot",
                t.columns,
                u32::from(t.columns) + 1
            ),
            None => "Ribbon".into(),
        },
        (filter::MARKER, filter::KIND_BLOCKED_BLOOM, _) => "blocked Bloom, 512-bit lines".into(),
        _ => return "unknown".into(),
    };
    match decoded {
        Some(Filter::Empty) => format!("{base} (empty: no keys)"),
        _ => base,
    }
}

/// The fields of a fuse trailer, with the geometry they imply.
fn fuse_json(t: &FuseTrailer, payload_bytes: u64, decoded: Option<&Filter>) -> FuseJson {
    let segment_length = 1u64.checked_shl(u32::from(t.segment_length_log2));
    let extra = u64::from(t.arity).saturating_sub(1);
    let array_length =
        segment_length.and_then(|l| (u64::from(t.segment_count) + extra).checked_mul(l));
    let keys = u64::from(t.keys);
    FuseJson {
        fingerprint_bits: t.fingerprint_bits,
        arity: t.arity,
        segment_length_log2: t.segment_length_log2,
        segment_length,
        segment_count: t.segment_count,
        array_length,
        seed: format!("0x{:016x}", t.seed),
        keys,
        bytes: payload_bytes,
        bits_per_key: per_key(payload_bytes.saturating_mul(8), keys),
        predicted_fpr: (-f64::from(t.fingerprint_bits)).exp2(),
        zero_fraction: match decoded {
            Some(Filter::Fuse(x)) => Some(x.zero_fraction()),
            _ => None,
        },
    }
}

/// The fields of a Ribbon trailer, with the geometry they imply.
fn ribbon_json(t: &RibbonTrailer, payload_bytes: u64) -> RibbonJson {
    let g = filter::RibbonGeometry {
        blocks: t.blocks.max(2),
        columns: u32::from(t.columns),
        upper_start: t.upper_start.min(t.blocks),
    };
    let keys = u64::from(t.keys);
    RibbonJson {
        width: 128,
        columns: t.columns,
        blocks: t.blocks,
        upper_start: t.upper_start,
        slots: u64::from(t.blocks) * 128,
        seed: format!("0x{:08x}", t.seed),
        keys,
        bytes: payload_bytes,
        bits_per_key: per_key(payload_bytes.saturating_mul(8), keys),
        predicted_fpr: g.predicted_fpr(),
    }
}

/// Set bits per line of a Bloom filter, in buckets of 32.
fn line_histogram(per_line: &[u32]) -> Histogram {
    let width = 32u32;
    let mut counts = vec![0u64; (512 / width) as usize + 1];
    for &c in per_line {
        counts[(c / width).min(512 / width) as usize] += 1;
    }
    while counts.len() > 1 && counts.last() == Some(&0) {
        counts.pop();
    }
    Histogram {
        bucket_width: width,
        counts,
    }
}

/// Fills in what only a decoded Bloom filter can tell.
fn add_bloom_fields(doc: &mut FilterJson, b: &BloomFilter) {
    let per_line = b.set_bits_per_line();
    doc.fill_ratio = Some(b.fill_ratio());
    doc.fpr_from_fill_ratio = Some(filter::fpr_from_fill(b.fill_ratio(), b.probes()));
    doc.fpr_from_line_fill = Some(b.estimated_fpr_from_lines());
    doc.standard_bloom_fpr = Some(filter::standard_bloom_fpr(
        b.bits() as f64,
        b.keys() as f64,
        f64::from(b.probes()),
    ));
    doc.set_bits_per_line_min = per_line.iter().min().copied();
    doc.set_bits_per_line_mean =
        Some(per_line.iter().map(|&c| f64::from(c)).sum::<f64>() / per_line.len().max(1) as f64);
    doc.set_bits_per_line_max = per_line.iter().max().copied();
    doc.histogram = Some(line_histogram(&per_line));
}

/// Probes `n` keys that are not in the table and counts the filter's false positives.
fn measure(f: &Filter, t: &TableReader, n: u64) -> Result<Measured, CliError> {
    let mut fp = 0u64;
    for i in 0..n {
        let k = probe_key(i);
        if f.may_contain_hash(filter::hash_key(&k)) && t.find(&k)?.is_none() {
            fp += 1;
        }
    }
    Ok(Measured {
        probes: n,
        false_positives: fp,
        fpr: fp as f64 / n.max(1) as f64,
    })
}

fn verdict(may_contain: bool) -> &'static str {
    if may_contain {
        "maybe present"
    } else {
        "definitely absent"
    }
}

/// The filter's answer for one key, and why (a filter that did not decode says "maybe"), and
/// whether `t` holds it (unknown without `t`).
fn probe_one(
    key: &[u8],
    shown: String,
    f: Option<&Filter>,
    t: Option<&TableReader>,
) -> Result<KeyProbe, CliError> {
    let h = filter::hash_key(key);
    let mut p = KeyProbe {
        key: shown,
        verdict: verdict(f.is_none_or(|f| f.may_contain_hash(h))),
        line: None,
        probes: None,
        fuse: None,
        ribbon: None,
        in_table: match t {
            Some(t) => Some(t.find(key)?.is_some()),
            None => None,
        },
    };
    match f {
        Some(Filter::Bloom(b)) => {
            p.line = Some(b.line_of(h));
            p.probes = Some(b.probe_bits(h));
        }
        Some(Filter::Fuse(x)) => {
            let probe = x.probe(h);
            p.verdict = verdict(probe.may_contain);
            p.fuse = Some(FuseKeyProbe {
                slots: probe.slots,
                fingerprint: probe.fingerprint,
                stored: probe.stored,
            });
        }
        Some(Filter::Ribbon(r)) => {
            let probe = r.probe(h);
            p.verdict = verdict(probe.may_contain);
            p.ribbon = Some(RibbonKeyProbe {
                start: probe.start,
                coefficients: format!("0x{:032x}", probe.coefficients),
                result: probe.result,
                columns_match: probe.columns_match,
            });
        }
        _ => {}
    }
    Ok(p)
}

/// `silt sst filter FILE`.
pub fn filter(args: &FilterArgs, json: bool) -> Result<(), CliError> {
    let file = &args.file;
    if args.measure == Some(0) {
        return Err(CliError::input(
            "--measure must probe at least 1 key (leave it out to measure nothing)",
        ));
    }
    if !file.exists() {
        return Err(CliError::input(format!("not found: {}", file.display())));
    }
    // The keys are checked before anything is read or measured: a bad one is refused
    // whether or not the table has a filter, and not after a long `--measure`.
    let keys_given = args
        .keys
        .iter()
        .map(|k| parse_key(k, args.hex))
        .collect::<Result<Vec<_>, _>>()?;
    let Some((fh, block)) = read_filter_block(file)? else {
        if json {
            return print_json(
                &serde_json::json!({"file": file.display().to_string(), "filter": null}),
            );
        }
        let mut out = std::io::stdout().lock();
        line(
            &mut out,
            &format!(
                "{}: no filter block (written with 0 bits per key)",
                file.display()
            ),
        )?;
        return flush(&mut out);
    };
    let bad_trailer = |e: filter::FilterError| corrupt_at(file, fh.offset + e.offset, e.detail);
    let trailer = filter::decode_trailer(&block).map_err(bad_trailer)?;
    let fuse_trailer =
        if trailer.marker == filter::MARKER && trailer.kind == filter::KIND_BINARY_FUSE {
            Some(filter::decode_fuse_trailer(&block).map_err(bad_trailer)?)
        } else {
            None
        };
    let ribbon_trailer = if trailer.marker == filter::MARKER && trailer.kind == filter::KIND_RIBBON
    {
        Some(filter::decode_ribbon_trailer(&block).map_err(bad_trailer)?)
    } else {
        None
    };
    let crc_ok = filter::checksum_ok(&block);
    let decoded = if crc_ok {
        Some(filter::decode(&block).map_err(bad_trailer)?)
    } else {
        None
    };
    let table = if crc_ok { Some(open(file)?) } else { None };
    let payload_bytes = (block.len() - filter::TRAILER_LEN) as u64;
    let fuse = fuse_trailer
        .as_ref()
        .map(|t| fuse_json(t, payload_bytes, decoded.as_ref()));
    let ribbon = ribbon_trailer
        .as_ref()
        .map(|t| ribbon_json(t, payload_bytes));
    let (keys, bits) = match (&fuse, &ribbon) {
        (Some(x), _) => (x.keys, payload_bytes * 8),
        (None, Some(r)) => (r.keys, payload_bytes * 8),
        (None, None) => (trailer.keys, u64::from(trailer.lines) * 512),
    };
    let bloom_trailer = fuse.is_none() && ribbon.is_none();
    let measured = match (args.measure, &decoded, &table) {
        (Some(n), Some(f), Some(t)) => Some(measure(f, t, n)?),
        _ => None,
    };
    let mut keys_probed = Vec::new();
    for key in keys_given {
        let shown = show(&key, args.hex);
        keys_probed.push(probe_one(&key, shown, decoded.as_ref(), table.as_ref())?);
    }
    let mut doc = FilterJson {
        file: file.display().to_string(),
        offset: fh.offset,
        block_bytes: fh.size,
        marker: format!("0x{:02x}", trailer.marker),
        kind: trailer.kind,
        kind_name: kind_name(
            decoded.as_ref(),
            &trailer,
            fuse_trailer.as_ref(),
            ribbon_trailer.as_ref(),
        ),
        version: trailer.version,
        hash: if trailer.hash_id == filter::HASH_XXH3_64 {
            "xxh3-64".into()
        } else {
            format!("unknown id {}", trailer.hash_id)
        },
        seed: bloom_trailer.then_some(trailer.seed),
        keys,
        bits,
        bits_per_key: per_key(bits, keys),
        probes: bloom_trailer.then_some(trailer.probes),
        lines: bloom_trailer.then_some(trailer.lines),
        crc_stored: format!("0x{:08x}", trailer.crc),
        crc_ok,
        fill_ratio: None,
        predicted_fpr: match &decoded {
            Some(f @ (Filter::Bloom(_) | Filter::Fuse(_) | Filter::Ribbon(_))) => {
                Some(f.predicted_fpr())
            }
            _ => None,
        },
        fpr_from_fill_ratio: None,
        fpr_from_line_fill: None,
        standard_bloom_fpr: None,
        set_bits_per_line_min: None,
        set_bits_per_line_mean: None,
        set_bits_per_line_max: None,
        histogram: None,
        fuse,
        ribbon,
        measured,
        keys_probed,
    };
    if let Some(Filter::Bloom(b)) = &decoded {
        add_bloom_fields(&mut doc, b);
    }
    let printed = if json {
        print_json(&doc)
    } else {
        print_filter_text(&doc)
    };
    // A reader that closed the pipe early ends the output quietly, unless the filter is
    // known to be corrupt: then the status still says so (as in `verify`).
    if let Err(e) = printed {
        if e.code != 0 || crc_ok {
            return Err(e);
        }
    }
    if !crc_ok {
        return Err(corrupt_at(
            file,
            fh.offset + fh.size - 4,
            "filter checksum mismatch",
        ));
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
    let seed = d.seed.map_or(String::new(), |s| format!(", seed {s}"));
    line(&mut out, &format!("hash                 {}{seed}", d.hash))?;
    line(&mut out, &format!("keys (n)             {}", d.keys))?;
    match (&d.fuse, &d.ribbon) {
        (Some(x), _) => print_fuse_text(&mut out, d, x)?,
        (None, Some(r)) => print_ribbon_text(&mut out, d, r)?,
        (None, None) => print_bloom_text(&mut out, d)?,
    }
    let digits = d
        .fuse
        .as_ref()
        .map_or(2, |x| usize::from(x.fingerprint_bits).div_ceil(4));
    for k in &d.keys_probed {
        line(&mut out, &key_probe_text(k, digits))?;
    }
    Ok(())
}

fn crc_line(d: &FilterJson) -> String {
    format!(
        "crc                  {} ({})",
        d.crc_stored,
        if d.crc_ok { "ok" } else { "MISMATCH" }
    )
}

fn print_measured(out: &mut impl Write, d: &FilterJson) -> Result<(), CliError> {
    if let Some(m) = &d.measured {
        line(
            out,
            &format!(
                "FPR measured         {:.4}% ({} false positives in {} absent keys)",
                m.fpr * 100.0,
                m.false_positives,
                m.probes
            ),
        )?;
    }
    Ok(())
}

fn print_fuse_text(out: &mut impl Write, d: &FilterJson, x: &FuseJson) -> Result<(), CliError> {
    let or_dash = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
    line(out, &format!("fingerprint bits     {}", x.fingerprint_bits))?;
    line(
        out,
        &format!("arity                {} (slots per key)", x.arity),
    )?;
    line(
        out,
        &format!(
            "segment length       {} (2^{})",
            or_dash(x.segment_length),
            x.segment_length_log2
        ),
    )?;
    line(out, &format!("segment count        {}", x.segment_count))?;
    line(
        out,
        &format!(
            "array length         {} slots = ({} + {}) * {}",
            or_dash(x.array_length),
            x.segment_count,
            u32::from(x.arity).saturating_sub(1),
            or_dash(x.segment_length)
        ),
    )?;
    line(out, &format!("seed                 {}", x.seed))?;
    line(
        out,
        &format!(
            "bytes                {} ({:.3} bits/key)",
            x.bytes, x.bits_per_key
        ),
    )?;
    line(out, &crc_line(d))?;
    if let Some(z) = x.zero_fraction {
        line(
            out,
            &format!("zero fingerprints    {z:.4} of slots (unused slots stay 0)"),
        )?;
    }
    line(
        out,
        &format!(
            "FPR predicted        {} (2^-{}, binary fuse)",
            pct(Some(x.predicted_fpr)),
            x.fingerprint_bits
        ),
    )?;
    print_measured(out, d)
}

fn print_ribbon_text(out: &mut impl Write, d: &FilterJson, r: &RibbonJson) -> Result<(), CliError> {
    line(out, &format!("coefficient width    {} bits", r.width))?;
    line(
        out,
        &format!(
            "result bits          {} in blocks 0..{}, {} in blocks {}..{}",
            r.columns,
            r.upper_start,
            u32::from(r.columns) + 1,
            r.upper_start,
            r.blocks
        ),
    )?;
    line(
        out,
        &format!(
            "slots                {} = {} blocks * 128",
            r.slots, r.blocks
        ),
    )?;
    line(out, &format!("seed                 {}", r.seed))?;
    line(
        out,
        &format!(
            "bytes                {} ({:.3} bits/key)",
            r.bytes, r.bits_per_key
        ),
    )?;
    line(out, &crc_line(d))?;
    line(
        out,
        &format!(
            "FPR predicted        {} (mean of 2^-result bits over start slots, Ribbon)",
            pct(Some(r.predicted_fpr))
        ),
    )?;
    print_measured(out, d)
}

fn print_bloom_text(out: &mut impl Write, d: &FilterJson) -> Result<(), CliError> {
    let or_dash = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    line(
        out,
        &format!(
            "bits (m)             {} in {} lines of 512 ({:.3} bits/key)",
            d.bits,
            or_dash(d.lines.map(|l| l.to_string())),
            d.bits_per_key
        ),
    )?;
    line(
        out,
        &format!(
            "probes (k)           {}",
            or_dash(d.probes.map(|k| k.to_string()))
        ),
    )?;
    line(out, &crc_line(d))?;
    if let Some(f) = d.fill_ratio {
        line(out, &format!("fill ratio           {:.4} of bits set", f))?;
    }
    line(
        out,
        &format!(
            "FPR predicted        {} (blocked Bloom, from m, n, k)",
            pct(d.predicted_fpr)
        ),
    )?;
    line(
        out,
        &format!(
            "FPR from fill ratio  {} (fill^k) / {} (per-line fill^k)",
            pct(d.fpr_from_fill_ratio),
            pct(d.fpr_from_line_fill)
        ),
    )?;
    line(
        out,
        &format!(
            "FPR unblocked Bloom  {} (same m, n, k, for comparison)",
            pct(d.standard_bloom_fpr)
        ),
    )?;
    print_measured(out, d)?;
    if let (Some(min), Some(mean), Some(max)) = (
        d.set_bits_per_line_min,
        d.set_bits_per_line_mean,
        d.set_bits_per_line_max,
    ) {
        line(
            out,
            &format!("set bits per line    min {min}, mean {mean:.1}, max {max} (of 512)"),
        )?;
    }
    if let Some(h) = &d.histogram {
        print_histogram(out, h)?;
    }
    Ok(())
}

fn print_histogram(out: &mut impl Write, h: &Histogram) -> Result<(), CliError> {
    let peak = h.counts.iter().copied().max().unwrap_or(1).max(1);
    let first = h.counts.iter().position(|&c| c > 0).unwrap_or(0);
    for (i, &c) in h.counts.iter().enumerate().skip(first) {
        let lo = i as u32 * h.bucket_width;
        let bar = "#".repeat(((c as f64 / peak as f64) * 40.0).round() as usize);
        line(
            out,
            &format!(
                "  {:>3}-{:<3} {:>9} {}",
                lo,
                lo + h.bucket_width - 1,
                c,
                bar
            ),
        )?;
    }
    Ok(())
}

/// One `key ...` line: the verdict and why; `digits` hex digits per fuse fingerprint.
fn key_probe_text(k: &KeyProbe, digits: usize) -> String {
    let why = match (&k.probes, &k.fuse) {
        (Some(probes), _) => {
            let bits: Vec<String> = probes
                .iter()
                .map(|(b, set)| format!("{b}{}", if *set { "" } else { "(0)" }))
                .collect();
            format!(" line {} bits [{}]", k.line.unwrap_or(0), bits.join(" "))
        }
        (None, Some(f)) => {
            let hex = |v: u32| format!("0x{v:0digits$x}");
            let slots: Vec<String> = f.slots.iter().map(|s| s.to_string()).collect();
            let stored: Vec<String> = f.stored.iter().map(|&v| hex(v)).collect();
            format!(
                " slots [{}] fingerprint {}, stored {} = {}",
                slots.join(" "),
                hex(f.fingerprint),
                stored.join(" ^ "),
                hex(f.stored.iter().fold(0, |a, &b| a ^ b))
            )
        }
        (None, None) => match &k.ribbon {
            Some(r) => {
                let cols: String = r
                    .columns_match
                    .iter()
                    .map(|&m| if m { '1' } else { '0' })
                    .collect();
                format!(
                    " start slot {} coefficients {} result 0x{:x}, columns matching [{cols}]",
                    r.start, r.coefficients, r.result
                )
            }
            None => String::new(),
        },
    };
    format!(
        "key {:<24} {:<17}{why}; in table: {}",
        k.key,
        k.verdict,
        match k.in_table {
            Some(true) => "yes",
            Some(false) => "no",
            // Only a filter whose checksum fails leaves the table unopened (see `filter`).
            None => "unknown (the table did not open: its filter checksum fails)",
        }
    )
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
    // As `db size` and `db compact` do: an empty range is a mistake, not an empty dump.
    if let (Some(lo), Some(hi)) = (&from, &to) {
        if lo >= hi {
            return Err(CliError::input(format!(
                "the range [{}, {}) holds no key: --from must be below --to",
                show(lo, args.hex),
                show(hi, args.hex)
            )));
        }
    }
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
    // Range tombstones come after the entries: those that meet [--from, --to).
    for (start, end, seq) in t.range_tombstones() {
        let before_from = from
            .as_ref()
            .is_some_and(|f| end.as_ref().is_some_and(|e| e <= f));
        if before_from || to.as_ref().is_some_and(|t| start >= *t) {
            continue;
        }
        // A range tombstone is a record too: --limit counts it.
        if args.limit.is_some_and(|l| printed >= l) {
            break;
        }
        printed += 1;
        let r = RangeJson {
            start: show(&start, args.hex),
            end: end.map(|e| show(&e, args.hex)),
            seq,
        };
        if json {
            let doc = serde_json::json!({ "range_delete": r });
            line(&mut out, &serde_json::to_string(&doc)?)?;
        } else {
            line(&mut out, &r.text())?;
        }
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

/// Prints `verify`'s report as text: a line per problem, or one `OK` line.
fn print_verdict(doc: &VerifyJson) -> Result<(), CliError> {
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
    flush(&mut out)
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
            // A file that is not an SSTable at all is bad input, not a damaged table; so is
            // one from a format version this build does not read (its footer checked: it was
            // written that way).
            if detail.contains("too short")
                || detail.contains("bad magic")
                || detail.contains("unsupported table format version")
            {
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
            // Opening checked the footer and every block but the data blocks (index, filter,
            // range deletions, properties: those the table has); now every data block.
            checked = t
                .blocks()
                .iter()
                .filter(|b| b.kind != BlockKind::Data)
                .count() as u64;
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
                // Set when a problem ends the walk: the entries counted are then not the
                // table's, and comparing them with the properties would report a second,
                // false problem.
                let mut stopped = false;
                for e in t.entries() {
                    // A block whose checksum passed but whose contents do not fit the table
                    // (keys outside its index range, an empty block) is a problem found,
                    // like any other.
                    let e = match e {
                        Ok(e) => e,
                        Err(siltdb::Error::Corruption { offset, detail, .. }) => {
                            problems.push(Problem {
                                offset,
                                what: detail,
                            });
                            stopped = true;
                            break;
                        }
                        Err(other) => return Err(other.into()),
                    };
                    if let Some((lk, ls)) = &last {
                        if (lk.as_slice(), std::cmp::Reverse(*ls))
                            >= (e.key.as_slice(), std::cmp::Reverse(e.seq))
                        {
                            problems.push(Problem {
                                offset: 0,
                                what: format!("keys out of order at {}", escape(&e.key)),
                            });
                            stopped = true;
                            break;
                        }
                    }
                    last = Some((e.key.clone(), e.seq));
                    count += 1;
                }
                if !stopped && count != t.properties().entries {
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
    let printed = if json {
        print_json(&doc)
    } else {
        print_verdict(&doc)
    };
    // A reader that closed the pipe early (`| head -1`) ends the output quietly, but the
    // status still says whether problems were found; any other failure to write is an error.
    if let Err(e) = printed {
        if e.code != 0 {
            return Err(e);
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
