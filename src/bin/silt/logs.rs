//! `silt wal dump` and `silt manifest dump`.

use crate::output::{line, show, CliError, DiscardAfterClosedPipe};
use serde::Serialize;
use siltdb::inspect::{self, LogEnd, LogRecord};
use std::path::Path;

#[derive(Serialize)]
struct Op {
    seq: u64,
    op: &'static str,
    key: String,
    value: Option<String>,
    /// For a range delete `[key, end)`: the end (absent for one running to the end of the
    /// key space).
    #[serde(skip_serializing_if = "Option::is_none")]
    end: Option<String>,
}

#[derive(Serialize)]
struct Record {
    offset: u64,
    length: u64,
    crc: &'static str,
    ops: Option<Vec<Op>>,
    edit: Option<serde_json::Value>,
    error: Option<String>,
}

#[derive(Serialize)]
struct End {
    status: &'static str,
    offset: Option<u64>,
    bytes: Option<u64>,
    detail: Option<String>,
}

/// What a log whose first record is already torn may be: the file holds bytes but no record
/// of the log its name numbers.
const NO_RECORD: &str = "no valid record at all: a log whose first write was cut short, or not a siltdb log, or one renamed from another number (records are bound to the number in the file name)";

fn end_json(end: &LogEnd) -> End {
    match end {
        LogEnd::Clean => End {
            status: "clean",
            offset: None,
            bytes: None,
            detail: None,
        },
        LogEnd::TornTail { offset, bytes } => End {
            status: "torn tail (an interrupted write; recovery cuts it off)",
            offset: Some(*offset),
            bytes: Some(*bytes),
            detail: (*offset == 0).then(|| NO_RECORD.to_string()),
        },
        LogEnd::LostPages { offset, bytes } => End {
            status:
                "pages lost by a power loss (unsynced writes after them; recovery cuts them off)",
            offset: Some(*offset),
            bytes: Some(*bytes),
            detail: None,
        },
        LogEnd::Corrupt { offset, detail } => End {
            status: "CORRUPT",
            offset: Some(*offset),
            bytes: None,
            detail: Some(detail.clone()),
        },
        // An ending this build does not know how to name.
        other => End {
            status: "unknown ending",
            offset: None,
            bytes: None,
            detail: Some(format!("{other:?}")),
        },
    }
}

fn read(file: &Path) -> Result<(Vec<LogRecord>, LogEnd), CliError> {
    if !file.exists() {
        return Err(CliError::input(format!("not found: {}", file.display())));
    }
    Ok(inspect::read_log(file)?)
}

fn finish(
    file: &Path,
    end: &LogEnd,
    json: bool,
    out: &mut impl std::io::Write,
) -> Result<(), CliError> {
    let e = end_json(end);
    if json {
        line(
            out,
            &serde_json::to_string(&serde_json::json!({ "end": e }))?,
        )?;
    } else {
        match end {
            LogEnd::Clean => line(out, "end: clean")?,
            LogEnd::TornTail { offset, bytes } => {
                line(out, &format!("end: torn tail of {bytes} bytes at offset {offset} (an interrupted write; recovery cuts it off)"))?;
                if *offset == 0 {
                    line(out, &format!("note: {NO_RECORD}"))?;
                }
            }
            LogEnd::LostPages { offset, bytes } => line(out, &format!("end: pages lost by a power loss at offset {offset}: the {bytes} bytes from there on hold unsynced writes after a gap; recovery cuts them off, with any later WAL's records (corruption if a later WAL holds a sync mark)"))?,
            LogEnd::Corrupt { .. } => {}
            other => line(out, &format!("end: {other:?}"))?,
        }
    }
    if let LogEnd::Corrupt { offset, detail } = end {
        return Err(CliError::input(format!(
            "corrupt file {} at offset {offset}: {detail}",
            file.display()
        )));
    }
    Ok(())
}

/// `silt wal dump FILE`: one line (or JSON line) per record.
pub fn wal_dump(file: &Path, hex: bool, json: bool) -> Result<(), CliError> {
    if file
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("MANIFEST-"))
    {
        return Err(CliError::input(format!(
            "{} is a manifest, not a WAL: use `silt manifest dump DIR`",
            file.display()
        )));
    }
    let (records, end) = read(file)?;
    // A reader that stops early (`| head -1`) cuts the dump short, not its verdict.
    let mut out = std::io::BufWriter::new(DiscardAfterClosedPipe::new(std::io::stdout().lock()));
    // The first record recovery would refuse though its checksum is right, and why.
    let mut refused: Option<(u64, String)> = None;
    let mut prev_last: Option<u64> = None;
    for r in &records {
        let ops = inspect::decode_wal_payload(&r.payload);
        let error = match ops.as_deref() {
            None => Some("checksum ok but the payload does not decode".to_string()),
            Some([first, .., last]) | Some([first @ last]) => {
                // Recovery refuses both: numbers that go backwards, and a gap (a lost
                // record; within one WAL the groups follow each other without one).
                let refused = prev_last.and_then(|p| {
                    if first.seq <= p {
                        Some(format!(
                            "sequence numbers go backwards: the record starts at {} but the one before it ended at {p}",
                            first.seq
                        ))
                    } else if first.seq > p + 1 {
                        Some(format!(
                            "sequence numbers {}..{} are missing before this record",
                            p + 1,
                            first.seq - 1
                        ))
                    } else {
                        None
                    }
                });
                prev_last = Some(last.seq);
                refused
            }
            Some([]) => None,
        };
        if let Some(e) = &error {
            refused.get_or_insert((r.offset, e.clone()));
        }
        let rec = Record {
            offset: r.offset,
            length: r.len,
            crc: "ok",
            ops: ops.as_ref().map(|ops| {
                ops.iter()
                    .map(|o| Op {
                        seq: o.seq,
                        op: match (&o.range_end, o.tombstone) {
                            (Some(_), _) => "range_delete",
                            (None, true) => "delete",
                            (None, false) => "put",
                        },
                        key: show(&o.key, hex),
                        value: (!o.tombstone).then(|| show(&o.value, hex)),
                        end: o
                            .range_end
                            .as_ref()
                            .and_then(|e| e.as_ref())
                            .map(|e| show(e, hex)),
                    })
                    .collect()
            }),
            edit: None,
            error,
        };
        if json {
            line(&mut out, &serde_json::to_string(&rec)?)?;
            continue;
        }
        match &rec.ops {
            Some(ops) if ops.is_empty() => line(
                &mut out,
                &format!(
                    "record @{} len {} crc ok: sync mark (every byte before it was synced)",
                    rec.offset, rec.length
                ),
            )?,
            Some(ops) => {
                let first = ops.first().map_or(0, |o| o.seq);
                line(
                    &mut out,
                    &format!(
                        "record @{} len {} crc ok: {} ops from seq {first}",
                        rec.offset,
                        rec.length,
                        ops.len()
                    ),
                )?;
                for o in ops {
                    match (&o.value, o.op) {
                        (Some(v), _) => {
                            line(&mut out, &format!("  {} put {} => {}", o.seq, o.key, v))?
                        }
                        (None, "range_delete") => line(
                            &mut out,
                            &format!(
                                "  {} range_delete [{}, {})",
                                o.seq,
                                o.key,
                                o.end.as_deref().unwrap_or("<end of keys>")
                            ),
                        )?,
                        (None, _) => line(&mut out, &format!("  {} delete {}", o.seq, o.key))?,
                    }
                }
            }
            None => line(
                &mut out,
                &format!(
                    "record @{} len {} crc ok: MALFORMED payload",
                    rec.offset, rec.length
                ),
            )?,
        }
        if let (Some(e), Some(_)) = (&rec.error, &rec.ops) {
            line(&mut out, &format!("  REFUSED by recovery: {e}"))?;
        }
    }
    finish(file, &end, json, &mut out)?;
    crate::output::flush(&mut out)?;
    match refused {
        None => Ok(()),
        Some((offset, detail)) => Err(CliError::input(format!(
            "corrupt file {} at offset {offset}: {detail}",
            file.display()
        ))),
    }
}

/// A record whose checksum is right but whose contents do not decode is corruption (recovery
/// refuses the file): after the dump shows it, the command fails at the first one.
fn malformed_is_corrupt(file: &Path, first: Option<u64>, what: &str) -> Result<(), CliError> {
    match first {
        None => Ok(()),
        Some(offset) => Err(CliError::input(format!(
            "corrupt file {} at offset {offset}: the {what} does not decode though its checksum is right",
            file.display()
        ))),
    }
}

fn edit_json(e: &inspect::VersionEdit) -> serde_json::Value {
    let table = |l: &u32, m: &inspect::FileMeta| {
        serde_json::json!({
            "level": l, "number": m.number, "size": m.size, "entries": m.entries,
            "smallest": crate::output::escape(m.smallest_user()),
            "largest": crate::output::escape(m.largest_user()),
            "min_seq": m.min_seq, "max_seq": m.max_seq,
        })
    };
    serde_json::json!({
        "log_number": e.log_number,
        "next_file_number": e.next_file_number,
        "last_sequence": e.last_sequence,
        // The user key, as the text line and the tables' `smallest`/`largest` show keys.
        "compact_pointers": e.compact_pointers.iter().map(|(l, k)| serde_json::json!({"level": l, "key": crate::output::escape(inspect::split_internal_key(k).map_or(&k[..], |s| s.0))})).collect::<Vec<_>>(),
        "deleted": e.deleted.iter().map(|(l, n)| serde_json::json!({"level": l, "number": n})).collect::<Vec<_>>(),
        "added": e.added.iter().map(|(l, m)| table(l, m)).collect::<Vec<_>>(),
    })
}

/// `silt manifest dump DIR`: every edit of the live manifest.
pub fn manifest_dump(dir: &Path, json: bool) -> Result<(), CliError> {
    if !dir.is_dir() {
        return Err(CliError::input(format!(
            "not found or not a directory: {}",
            dir.display()
        )));
    }
    let path = inspect::current_manifest(dir)?;
    let (records, end) = read(&path)?;
    // A reader that stops early (`| head -1`) cuts the dump short, not its verdict.
    let mut out = std::io::BufWriter::new(DiscardAfterClosedPipe::new(std::io::stdout().lock()));
    if !json {
        line(&mut out, &format!("manifest {}", path.display()))?;
    }
    let mut malformed = None;
    for r in &records {
        let edit = inspect::decode_manifest_payload(&r.payload);
        if edit.is_err() {
            malformed.get_or_insert(r.offset);
        }
        if json {
            let rec = Record {
                offset: r.offset,
                length: r.len,
                crc: "ok",
                ops: None,
                edit: edit.as_ref().ok().map(edit_json),
                error: edit.as_ref().err().cloned(),
            };
            line(&mut out, &serde_json::to_string(&rec)?)?;
            continue;
        }
        match edit {
            Ok(e) => {
                let mut parts = Vec::new();
                if let Some(n) = e.log_number {
                    parts.push(format!("log_number={n}"));
                }
                if let Some(n) = e.next_file_number {
                    parts.push(format!("next_file={n}"));
                }
                if let Some(n) = e.last_sequence {
                    parts.push(format!("last_seq={n}"));
                }
                line(
                    &mut out,
                    &format!(
                        "edit @{} len {} crc ok: {}",
                        r.offset,
                        r.len,
                        parts.join(" ")
                    ),
                )?;
                for (l, k) in &e.compact_pointers {
                    line(
                        &mut out,
                        &format!(
                            "  compact pointer L{l} {}",
                            crate::output::escape(
                                inspect::split_internal_key(k).map_or(&k[..], |s| s.0)
                            )
                        ),
                    )?;
                }
                for (l, n) in &e.deleted {
                    line(&mut out, &format!("  - L{l} {n:06}.sst"))?;
                }
                for (l, m) in &e.added {
                    line(
                        &mut out,
                        &format!(
                            "  + L{l} {:06}.sst {} bytes {} entries seq {}..{} keys {} .. {}",
                            m.number,
                            m.size,
                            m.entries,
                            m.min_seq,
                            m.max_seq,
                            crate::output::escape(m.smallest_user()),
                            crate::output::escape(m.largest_user())
                        ),
                    )?;
                }
            }
            Err(d) => line(
                &mut out,
                &format!("edit @{} len {} crc ok: MALFORMED ({d})", r.offset, r.len),
            )?,
        }
    }
    finish(&path, &end, json, &mut out)?;
    crate::output::flush(&mut out)?;
    malformed_is_corrupt(&path, malformed, "edit")?;
    // Each edit decodes; replaying them checks, as an open does, what must hold across
    // edits (docs/format.md section 4: no live table added again, no overlap in L1+, ...).
    inspect::read_manifest(dir)?;
    Ok(())
}
