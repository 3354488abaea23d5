//! `silt db info|get`: read-only views of a database directory (`db compact|size` are in
//! `dbspace`).

use crate::output::{escape, flush, line, parse_key, print_json, show, CliError};
use clap::Args;
use serde::Serialize;
use siltdb::inspect::table::TableReader;
use siltdb::{Db, TableOutcome};
use std::path::{Path, PathBuf};

fn check_dir(dir: &Path) -> Result<(), CliError> {
    if !dir.exists() {
        return Err(CliError::input(format!("not found: {}", dir.display())));
    }
    if !dir.is_dir() {
        return Err(CliError::input(format!(
            "{} is not a directory",
            dir.display()
        )));
    }
    Ok(())
}

#[derive(Serialize)]
struct TableRow {
    number: u64,
    bytes: u64,
    entries: u64,
    /// Distinct user keys (what the filter is built over; `entries` counts every version).
    keys: u64,
    smallest: String,
    largest: String,
    filter_bytes: u64,
    bits_per_key: f64,
    /// "bloom", "fuse4" to "fuse16", "ribbon", "empty", "unknown" or "none" (as `Db::tables`
    /// names it); "damaged" or "unreadable" for a table that could not be opened.
    filter_kind: String,
    predicted_fpr: f64,
    index_bytes: u64,
    /// Why the table could not be opened, with its file (and offset, for damage); `null` for
    /// a table that opened. Its keys, filter, index and predicted false-positive rate count
    /// 0 and its filter kind is "damaged" (its bytes are corrupt) or "unreadable" (the file
    /// system refused to read it: permissions, not a file, an I/O error); the report goes
    /// on, and the command exits 1.
    damage: Option<String>,
}

#[derive(Serialize)]
struct LevelRow {
    level: usize,
    tables: usize,
    bytes: u64,
    entries: u64,
    smallest: Option<String>,
    largest: Option<String>,
    filter_bytes: u64,
    bits_per_key: f64,
    /// The kind of the level's filters, as `Db::levels` names it: "bloom", "fuse4" to
    /// "fuse16", "ribbon", "none", or "mixed" when its tables differ ("" without tables).
    filter_kind: String,
    /// False-positive rate an absent key meets here (L0: summed over its tables).
    expected_fpr: f64,
    table_list: Vec<TableRow>,
}

#[derive(Serialize)]
struct InfoJson {
    dir: String,
    manifest: String,
    log_number: u64,
    next_file_number: u64,
    last_sequence: u64,
    levels: Vec<LevelRow>,
    filter_bytes: u64,
    expected_wasted_reads_per_absent_get: f64,
    memory: MemoryJson,
}

/// Memory a writer holding this database open pins (the memory fields of `siltdb::Stats`).
#[derive(Serialize)]
struct MemoryJson {
    /// Filters of every table (each is kept in memory).
    filter_bytes: u64,
    /// Indexes of every table (each is kept in memory).
    index_bytes: u64,
    /// Bytes of the records in the WALs not yet flushed: what a running writer holds in its
    /// memtables (give or take a per-entry overhead). Not the files' lengths: a mapped WAL
    /// is allocated ahead, 1 MiB at a time.
    memtable_bytes: u64,
    /// Always 0: the block cache holds what reads brought in, up to the writer's
    /// `block_cache_size` (64 MiB by default), which the files do not record. Kept so that
    /// the fields match `siltdb::Stats`'s memory fields.
    block_cache_bytes: u64,
}

/// Bytes of the records in the WALs numbered at or above `log_number` (those not yet
/// flushed), as recovery would read them. A directory that cannot be listed is an input error
/// naming it (never an "output error").
fn unflushed_wal_bytes(dir: &Path, log_number: u64) -> Result<u64, CliError> {
    let unlisted =
        |e: std::io::Error| CliError::input(format!("cannot list {}: {e}", dir.display()));
    let mut total = 0;
    for entry in std::fs::read_dir(dir).map_err(unlisted)? {
        let entry = entry.map_err(unlisted)?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(siltdb::inspect::files::FileKind::Wal(n)) = siltdb::inspect::files::parse(name)
        {
            if n >= log_number {
                // A WAL flushed and removed since the listing holds nothing any more; a
                // damaged one holds what was read before the damage (`wal dump` says more).
                match siltdb::inspect::visit_log(&entry.path(), |r| total += r.len) {
                    Ok(_) => {}
                    Err(siltdb::Error::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => {
                        return Err(CliError::input(format!(
                            "cannot read {}: {e}",
                            entry.path().display()
                        )))
                    }
                }
            }
        }
    }
    Ok(total)
}

/// The kind of a level's filters from its tables' kinds, by `Db::levels`'s rule: filters
/// over no keys do not count, and tables that differ make it "mixed".
fn level_filter_kind(tables: &[TableRow]) -> String {
    let mut kind = "";
    for t in tables.iter().filter(|t| t.filter_kind != "empty") {
        if kind.is_empty() {
            kind = &t.filter_kind;
        } else if kind != t.filter_kind {
            return "mixed".into();
        }
    }
    kind.into()
}

/// `silt db info DIR`.
pub fn info(dir: &Path, json: bool) -> Result<(), CliError> {
    check_dir(dir)?;
    let m = siltdb::inspect::read_manifest(dir)?;
    let mut levels = Vec::new();
    for (level, metas) in m.levels.iter().enumerate() {
        let mut rows = Vec::new();
        for meta in metas {
            let path = dir.join(siltdb::inspect::files::table_name(meta.number));
            let t = match TableReader::open_file(&path) {
                Ok(t) => t,
                // A table gone since the manifest was read: a running writer compacted it.
                Err(siltdb::Error::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Err(CliError::input(format!(
                        "{} is gone (the database changed while it was read; try again): {e}",
                        path.display(),
                    )));
                }
                // A damaged (or unreadable) table is reported in its row, and the rest of the
                // database still is: an operator sees every table, not the first bad one. A
                // table whose bytes are corrupt is damaged; one the file system would not read
                // (permissions, a directory in its place, an I/O error) may be whole.
                Err(e) => {
                    let kind = if e.is_corruption() {
                        "damaged"
                    } else {
                        "unreadable"
                    };
                    rows.push(TableRow {
                        number: meta.number,
                        bytes: meta.size,
                        entries: meta.entries,
                        keys: 0,
                        smallest: escape(meta.smallest_user()),
                        largest: escape(meta.largest_user()),
                        filter_bytes: 0,
                        bits_per_key: 0.0,
                        filter_kind: kind.into(),
                        predicted_fpr: 0.0,
                        index_bytes: 0,
                        damage: Some(crate::output::describe(&e)),
                    });
                    continue;
                }
            };
            let (fbytes, bpk, kind, fpr) = match t.filter() {
                Some(f) => (
                    f.memory_bytes() as u64,
                    f.bits_per_key(),
                    f.kind_name(),
                    f.predicted_fpr(),
                ),
                None => (0, 0.0, "none", 1.0),
            };
            rows.push(TableRow {
                number: meta.number,
                bytes: meta.size,
                entries: meta.entries,
                keys: t.properties().user_keys,
                smallest: escape(meta.smallest_user()),
                largest: escape(meta.largest_user()),
                filter_bytes: fbytes,
                bits_per_key: bpk,
                filter_kind: kind.into(),
                predicted_fpr: fpr,
                index_bytes: t.index_memory_bytes() as u64,
                damage: None,
            });
        }
        // Sizes and counts come from the manifest, each bounded but not their number.
        let entries = rows.iter().map(|r| r.entries).fold(0, u64::saturating_add);
        let filter_bytes: u64 = rows.iter().map(|r| r.filter_bytes).sum();
        // Per key of what the filters cover, as each table's row and `Db::levels` count it:
        // distinct user keys, not every version and tombstone.
        let keys: f64 = rows.iter().map(|r| r.keys as f64).sum();
        let expected_fpr = if level == 0 {
            rows.iter().map(|r| r.predicted_fpr).sum()
        } else if entries > 0 {
            rows.iter()
                .map(|r| r.predicted_fpr * r.entries as f64)
                .sum::<f64>()
                / entries as f64
        } else {
            0.0
        };
        levels.push(LevelRow {
            level,
            tables: rows.len(),
            bytes: rows.iter().map(|r| r.bytes).fold(0, u64::saturating_add),
            entries,
            smallest: metas.iter().map(|t| t.smallest_user()).min().map(escape),
            largest: metas.iter().map(|t| t.largest_user()).max().map(escape),
            filter_bytes,
            bits_per_key: if keys > 0.0 {
                filter_bytes as f64 * 8.0 / keys
            } else {
                0.0
            },
            filter_kind: level_filter_kind(&rows),
            expected_fpr,
            table_list: rows,
        });
    }
    let index_bytes = levels
        .iter()
        .flat_map(|l| &l.table_list)
        .map(|t| t.index_bytes)
        .sum();
    let memory = MemoryJson {
        filter_bytes: levels.iter().map(|l| l.filter_bytes).sum(),
        index_bytes,
        memtable_bytes: unflushed_wal_bytes(dir, m.log_number)?,
        block_cache_bytes: 0,
    };
    let doc = InfoJson {
        memory,
        dir: dir.display().to_string(),
        manifest: m.manifest.display().to_string(),
        log_number: m.log_number,
        next_file_number: m.next_file_number,
        last_sequence: m.last_sequence,
        filter_bytes: levels.iter().map(|l| l.filter_bytes).sum(),
        expected_wasted_reads_per_absent_get: levels.iter().map(|l| l.expected_fpr).sum(),
        levels,
    };
    let damaged = doc
        .levels
        .iter()
        .flat_map(|l| &l.table_list)
        .filter(|t| t.damage.is_some())
        .count();
    let verdict = || {
        if damaged == 0 {
            Ok(())
        } else {
            Err(CliError::found_problems(format!(
                "{damaged} table(s) could not be read (`silt sst verify` says more)"
            )))
        }
    };
    if json {
        print_json(&doc)?;
        return verdict();
    }
    let mut out = std::io::stdout().lock();
    line(&mut out, &format!("database   {}", doc.dir))?;
    line(
        &mut out,
        &format!(
            "manifest   {} (log number {}, next file {}, last sequence {})",
            doc.manifest, doc.log_number, doc.next_file_number, doc.last_sequence
        ),
    )?;
    line(
        &mut out,
        &format!(
            "{:<5} {:>6} {:>12} {:>10} {:<7} {:>12} {:>8} {:>10}  key range",
            "level", "tables", "bytes", "entries", "filter", "filter B", "bits/key", "exp. FPR"
        ),
    )?;
    for l in doc.levels.iter().filter(|l| l.tables > 0) {
        line(
            &mut out,
            &format!(
                "L{:<4} {:>6} {:>12} {:>10} {:<7} {:>12} {:>8.2} {:>9.4}%  {} .. {}",
                l.level,
                l.tables,
                l.bytes,
                l.entries,
                if l.filter_kind.is_empty() {
                    "-"
                } else {
                    &l.filter_kind
                },
                l.filter_bytes,
                l.bits_per_key,
                l.expected_fpr * 100.0,
                l.smallest.as_deref().unwrap_or(""),
                l.largest.as_deref().unwrap_or("")
            ),
        )?;
    }
    line(
        &mut out,
        &format!("filters in RAM: {} bytes", doc.filter_bytes),
    )?;
    line(
        &mut out,
        &format!(
            "memory an open handle pins: filters {} B, indexes {} B, memtables ~{} B (the unflushed WALs' records), block cache {} B (not known from the files: up to the writer's block_cache_size)",
            doc.memory.filter_bytes,
            doc.memory.index_bytes,
            doc.memory.memtable_bytes,
            doc.memory.block_cache_bytes
        ),
    )?;
    line(
        &mut out,
        &format!(
            "expected wasted block reads per absent-key get: {:.5} (sum over levels of the false-positive rates such a get meets)",
            doc.expected_wasted_reads_per_absent_get
        ),
    )?;
    for l in doc.levels.iter().filter(|l| l.tables > 0) {
        line(&mut out, &format!("L{}:", l.level))?;
        for t in &l.table_list {
            line(
                &mut out,
                &format!(
                    "  {:06}.sst {:>10} bytes {:>9} entries  filter {:<7} {:>9} B {:>6.2} bits/key FPR {:.4}%  {} .. {}",
                    t.number,
                    t.bytes,
                    t.entries,
                    t.filter_kind,
                    t.filter_bytes,
                    t.bits_per_key,
                    t.predicted_fpr * 100.0,
                    t.smallest,
                    t.largest
                ),
            )?;
            if let Some(damage) = &t.damage {
                let what = t.filter_kind.to_uppercase();
                line(&mut out, &format!("    {what}: {damage}"))?;
            }
        }
    }
    flush(&mut out)?;
    verdict()
}

/// Arguments of `silt db get`.
#[derive(Args, Debug)]
pub struct GetArgs {
    /// The database directory.
    dir: PathBuf,
    /// The key.
    key: String,
    /// Show what the read did in each table.
    #[arg(long)]
    explain: bool,
    /// The key is hex, and the value is printed as hex.
    #[arg(long)]
    hex: bool,
}

#[derive(Serialize)]
struct Visit {
    level: usize,
    table: u64,
    outcome: &'static str,
    block_reads: u64,
    /// Where the block came from: "cache", "file", or "" when none was read.
    block_source: &'static str,
    bytes_read: u64,
}

#[derive(Serialize)]
struct GetJson {
    key: String,
    found: bool,
    value: Option<String>,
    memtables_searched: usize,
    memtable_hit: bool,
    range_tombstone_checks: u64,
    range_covered: bool,
    tables: Vec<Visit>,
    data_block_reads: u64,
    block_cache_hits: u64,
    bytes_read: u64,
}

fn outcome_name(o: TableOutcome) -> &'static str {
    match o {
        TableOutcome::OutOfRange => "out of range",
        TableOutcome::FilterNegative => "filter: definitely not",
        TableOutcome::FalsePositive => "filter: maybe; false positive",
        TableOutcome::NotFound => "no usable filter; not found",
        TableOutcome::Found => "found",
        TableOutcome::Tombstone => "tombstone",
        TableOutcome::NewerOnly => "only versions newer than the read",
        TableOutcome::RangeDeleted => "covered by a range tombstone",
        // `TableOutcome` is non-exhaustive: an outcome added after this CLI was written.
        _ => "another outcome",
    }
}

/// `silt db get DIR KEY [--explain]`: a read-only open, so it is safe beside a running writer.
pub fn get(args: &GetArgs, json: bool) -> Result<(), CliError> {
    check_dir(&args.dir)?;
    let key = parse_key(&args.key, args.hex)?;
    let db = Db::open_read_only(&args.dir)?;
    let (value, trace) = db.get_traced(&key)?;
    let doc = GetJson {
        key: show(&key, args.hex),
        found: value.is_some(),
        value: value.as_deref().map(|v| show(v, args.hex)),
        memtables_searched: trace.memtables_searched,
        memtable_hit: trace.memtable_hit,
        range_tombstone_checks: trace.range_tombstone_checks,
        range_covered: trace.range_covered,
        tables: trace
            .tables
            .iter()
            .map(|v| Visit {
                level: v.level,
                table: v.table_id,
                outcome: outcome_name(v.outcome),
                block_reads: v.block_reads,
                block_source: match (v.block_reads, v.block_cache_hits) {
                    (0, _) => "",
                    (_, 0) => "file",
                    _ => "cache",
                },
                bytes_read: v.bytes_read,
            })
            .collect(),
        data_block_reads: trace.data_block_reads,
        block_cache_hits: trace.block_cache_hits,
        bytes_read: trace.bytes_read,
    };
    if json {
        return print_json(&doc);
    }
    let mut out = std::io::stdout().lock();
    match &doc.value {
        Some(v) => line(&mut out, v)?,
        None => line(&mut out, "(not found)")?,
    }
    if args.explain {
        line(
            &mut out,
            &format!(
                "memtables searched: {}{}",
                doc.memtables_searched,
                if doc.memtable_hit {
                    " (answered by a memtable)"
                } else {
                    ""
                }
            ),
        )?;
        if doc.range_tombstone_checks > 0 {
            line(
                &mut out,
                &format!(
                    "range tombstones asked in {} memtables or tables{}",
                    doc.range_tombstone_checks,
                    if doc.range_covered {
                        "; the key is covered by a range tombstone (deleted)"
                    } else {
                        "; none covers the key"
                    }
                ),
            )?;
        }
        line(
            &mut out,
            &format!(
                "{:<6} {:<12} {:<32} {:>7} {:<6} {:>7}",
                "level", "table", "outcome", "blocks", "from", "bytes"
            ),
        )?;
        for v in &doc.tables {
            line(
                &mut out,
                &format!(
                    "L{:<5} {:06}.sst   {:<32} {:>7} {:<6} {:>7}",
                    v.level, v.table, v.outcome, v.block_reads, v.block_source, v.bytes_read
                ),
            )?;
        }
        line(
            &mut out,
            &format!(
                "total: {} data blocks ({} from the block cache), {} bytes read from files",
                doc.data_block_reads, doc.block_cache_hits, doc.bytes_read
            ),
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_that_cannot_be_listed_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let gone = dir.path().join("gone");
        let e = unflushed_wal_bytes(&gone, 1).unwrap_err();
        assert_eq!(e.code, 2);
        assert!(
            e.message.contains(&gone.display().to_string()) && !e.message.contains("output"),
            "{}",
            e.message
        );
    }
}
