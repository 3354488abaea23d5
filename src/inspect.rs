//! The inspection API, for tools such as the `silt` CLI: the internals of the file formats
//! that an application embedding siltdb never needs. Tables ([`table`]), their filters
//! ([`filter`]), file names ([`files`]), WAL and manifest records (the functions here), and
//! the tree's invariants ([`check_invariants`]).
//!
//! What is here follows the on-disk format (`docs/format.md`) and may change with it; the
//! stable API is the crate root. Everything here reads and never writes; it is safe on a
//! database that another process has open (a file removed underneath is reported as an I/O
//! error).

use crate::error::{io_context, Result};
use crate::fs::{FileSystem, OsFs};
use crate::key::ValueKind;
use crate::record::{RecordReader, HEADER_LEN};
use crate::version::set as vset;
use crate::wal::{self, OpKind};
use std::path::{Path, PathBuf};

pub use crate::version::{FileMeta, VersionEdit, NUM_LEVELS};

/// SSTables: open one with [`TableReader::open`](table::TableReader::open) to read its
/// footer, index, properties, filter, blocks and entries; the constants and records of the
/// byte layout.
pub mod table {
    pub use crate::sstable::format::{
        BlockHandle, BlockKind, Footer, FooterError, BLOCK_TRAILER_LEN, FOOTER_LEN, FORMAT_VERSION,
        MAGIC,
    };
    pub use crate::sstable::{
        BlockInfo, IndexEntry, TableEntries, TableEntry, TableProperties, TableReader,
    };
}

/// Filter blocks: decoding, probing, and the false-positive arithmetic of the blocked Bloom,
/// binary fuse and Ribbon filters.
pub mod filter {
    pub use crate::filter::{
        bits_for, bits_per_key_for_fpr, checksum_ok, decode, decode_fuse_trailer, decode_trailer,
        fpr_from_fill, fuse_bits_per_key, hash_key, lines_for, predicted_fpr,
        predicted_fpr_for_bits, probe_positions, probes_for, probes_for_millibits,
        standard_bloom_fpr, BloomFilter, Filter, FilterError, FilterTrailer, FuseFilter,
        FuseGeometry, FuseProbe, FuseTrailer, FUSE_MAX_ATTEMPTS, FUSE_VERSION, HASH_XXH3_64,
        KIND_BINARY_FUSE, KIND_BLOCKED_BLOOM, LINE_BITS, MARKER, TRAILER_LEN, VERSION,
    };
    pub use crate::filter::{
        decode_ribbon_trailer, RibbonFilter, RibbonGeometry, RibbonProbe, RibbonTrailer,
        KIND_RIBBON, RIBBON_MAX_ATTEMPTS, RIBBON_VERSION,
    };
}

/// The names of a database's files.
pub mod files {
    pub use crate::filename::{manifest_name, parse, table_name, wal_name, FileKind};
}

/// One record of a WAL or manifest.
#[derive(Clone, Debug)]
pub struct LogRecord {
    /// Offset of the record header in the file.
    pub offset: u64,
    /// Bytes of the record, header included.
    pub len: u64,
    /// The payload (its checksum matched).
    pub payload: Vec<u8>,
}

/// How a log ended. More endings may be told apart in later versions (`LostPages` came with
/// WAL sync marks), so a `match` needs a wildcard arm.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LogEnd {
    /// Every byte belonged to a valid record.
    Clean,
    /// The last record was incomplete or failed its checksum, with nothing valid after it:
    /// an interrupted write, which recovery cuts off.
    TornTail {
        /// Where it starts.
        offset: u64,
        /// Its length.
        bytes: u64,
    },
    /// In a WAL: a bad record, valid records after it but no sync mark, and zeros where a
    /// page a power loss lost would leave them, or a record whole but for a header checksum
    /// word of zeros (a header writeback caught half-stored) (`docs/format.md` §2): the unsynced end of the
    /// log, from `offset` on, which recovery cuts off, with the records of any later WAL (or
    /// reports as corruption if a later WAL holds a sync mark).
    LostPages {
        /// Where the bad record starts.
        offset: u64,
        /// Bytes from there to the end of the file.
        bytes: u64,
    },
    /// A record fails its checksum and valid records follow: corruption.
    Corrupt {
        /// Where the bad record starts.
        offset: u64,
        /// What is wrong.
        detail: String,
    },
}

/// Reads every record of a log file (`NNNNNN.wal` or `MANIFEST-NNNNNN`) on the real file
/// system. Records are bound to the number in the file's name (see `docs/format.md`).
///
/// Errors: [`Error::InvalidArgument`](crate::Error::InvalidArgument) if the name is not a
/// log's name, [`Error::Io`](crate::Error::Io) if the file cannot be read. Corruption is
/// reported in [`LogEnd`], after the records before it.
pub fn read_log(path: &Path) -> Result<(Vec<LogRecord>, LogEnd)> {
    let mut records = Vec::new();
    let end = visit_log(path, |r| records.push(r))?;
    Ok((records, end))
}

/// [`read_log`], handing each record to `visit` as it is read instead of keeping them all
/// (a WAL holds a whole memtable: tens of megabytes by default).
///
/// Errors: as [`read_log`].
pub fn visit_log(path: &Path, mut visit: impl FnMut(LogRecord)) -> Result<LogEnd> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let (number, is_wal) = match crate::filename::parse(name) {
        Some(crate::filename::FileKind::Wal(n)) => (n, true),
        Some(crate::filename::FileKind::Manifest(n)) => (n, false),
        _ => {
            return Err(crate::Error::InvalidArgument(format!(
                "{}: not a log file name (NNNNNN.wal or MANIFEST-NNNNNN): its records are bound to that number",
                path.display()
            )))
        }
    };
    let fs = OsFs;
    let file = fs.open(path).map_err(|e| io_context("open", path, e))?;
    // The log may be live (a WAL of a database in use): read it as such.
    let mut reader = RecordReader::new(file, path, number).live();
    if is_wal {
        // Judged as recovery judges it: pages a power loss lost after the last sync mark end
        // the log like a torn tail.
        reader = reader.lost_pages_after_sync(wal::is_sync_mark);
    }
    loop {
        match reader.next() {
            Ok(Some(r)) => visit(LogRecord {
                offset: r.offset,
                len: (HEADER_LEN + r.payload.len()) as u64,
                payload: r.payload,
            }),
            Ok(None) => {
                let tail = reader.tail();
                let end = match tail.torn_at {
                    Some(offset) if tail.lost_pages => LogEnd::LostPages {
                        offset,
                        bytes: tail.dropped_bytes,
                    },
                    Some(offset) => LogEnd::TornTail {
                        offset,
                        bytes: tail.dropped_bytes,
                    },
                    None => LogEnd::Clean,
                };
                return Ok(end);
            }
            Err(crate::Error::Corruption { offset, detail, .. }) => {
                return Ok(LogEnd::Corrupt { offset, detail })
            }
            Err(e) => return Err(e),
        }
    }
}

/// One operation of a WAL record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WalOp {
    /// Sequence number of the operation.
    pub seq: u64,
    /// True for a removal (of one key or of a range).
    pub tombstone: bool,
    /// The key (for a range removal, the range's inclusive start).
    pub key: Vec<u8>,
    /// The value (empty for a removal).
    pub value: Vec<u8>,
    /// `Some` for a range removal of `[key, end)`: `Some(end)`, or `None` for a range that
    /// runs to the end of the key space. `None` for a point operation.
    pub range_end: Option<Option<Vec<u8>>>,
}

/// Decodes a WAL record payload into its operations; `None` if it is malformed.
pub fn decode_wal_payload(payload: &[u8]) -> Option<Vec<WalOp>> {
    let batch = wal::decode_payload(payload.to_vec()).ok()?;
    Some(
        batch
            .ops
            .into_iter()
            .enumerate()
            .map(|(i, op)| {
                let (tombstone, value, range_end) = match op.kind {
                    OpKind::Put => (false, op.value.to_vec(), None),
                    OpKind::Delete => (true, Vec::new(), None),
                    OpKind::RangeDelete => (true, Vec::new(), Some(Some(op.value.to_vec()))),
                    OpKind::RangeDeleteToEnd => (true, Vec::new(), Some(None)),
                };
                WalOp {
                    seq: batch.first_seq + i as u64,
                    tombstone,
                    key: op.key.to_vec(),
                    value,
                    range_end,
                }
            })
            .collect(),
    )
}

/// Decodes a manifest record payload.
///
/// Errors: a description of what is malformed.
pub fn decode_manifest_payload(payload: &[u8]) -> std::result::Result<VersionEdit, String> {
    VersionEdit::decode(payload)
}

/// The tree a database's manifest describes, read without opening the database.
#[derive(Clone, Debug)]
pub struct ManifestSummary {
    /// The live manifest file.
    pub manifest: PathBuf,
    /// WALs numbered below this are obsolete.
    pub log_number: u64,
    /// Next file number.
    pub next_file_number: u64,
    /// Largest sequence number in a table.
    pub last_sequence: u64,
    /// Edits read.
    pub edits: u64,
    /// Bytes of a torn last record that were ignored.
    pub torn_bytes: u64,
    /// Tables per level, L0 newest first, deeper levels by key.
    pub levels: Vec<Vec<FileMeta>>,
}

/// The path of the live manifest of the database in `dir`.
///
/// Errors: [`Error::InvalidArgument`](crate::Error::InvalidArgument) if `dir` holds no
/// database; [`Error::Corruption`](crate::Error::Corruption) for a bad `CURRENT`.
pub fn current_manifest(dir: &Path) -> Result<PathBuf> {
    match vset::read_current(&OsFs, dir)? {
        Some(n) => Ok(dir.join(crate::filename::manifest_name(n))),
        None => Err(no_database(dir)),
    }
}

fn no_database(dir: &Path) -> crate::Error {
    crate::Error::InvalidArgument(format!(
        "{} holds no database (no CURRENT file)",
        dir.display()
    ))
}

/// Reads the live manifest of the database in `dir`.
///
/// Errors: as [`current_manifest`], and [`Error::Corruption`](crate::Error::Corruption) for a
/// damaged manifest.
pub fn read_manifest(dir: &Path) -> Result<ManifestSummary> {
    let Some(number) = vset::read_current(&OsFs, dir)? else {
        return Err(no_database(dir));
    };
    // Beside a writer that replaces its manifest meanwhile, the new one is read instead.
    let (number, st) = vset::replay_current_manifest(&OsFs, dir, number, true)?;
    let manifest = dir.join(crate::filename::manifest_name(number));
    let mut levels: Vec<Vec<FileMeta>> = st
        .levels
        .iter()
        .map(|l| l.values().cloned().collect())
        .collect();
    if let Some(l0) = levels.first_mut() {
        l0.sort_by_key(|m| std::cmp::Reverse((m.max_seq, m.number)));
    }
    for l in levels.iter_mut().skip(1) {
        l.sort_by(|a, b| crate::key::cmp_encoded(&a.smallest, &b.smallest));
    }
    Ok(ManifestSummary {
        manifest,
        log_number: st.log_number,
        next_file_number: st.next_file_number,
        last_sequence: st.last_sequence,
        edits: st.edits,
        torn_bytes: st.torn_bytes,
        levels,
    })
}

/// Splits an internal key (user key ++ 8-byte trailer) into user key, sequence number and
/// tombstone flag; `None` if it is shorter than a trailer.
pub fn split_internal_key(ikey: &[u8]) -> Option<(&[u8], u64, bool)> {
    let (user, t) = crate::key::decode(ikey)?;
    Some((
        user,
        crate::key::trailer_seq(t),
        crate::key::trailer_kind(t) != Some(ValueKind::Put),
    ))
}

/// Checks the invariants of an open database's tree (levels 1 and deeper sorted and not
/// overlapping; every table file in the directory referenced by the current version, being
/// written by a job, held by a reader of an older version, or queued for deletion) and returns
/// a description of the first violation. For tests and tools; it takes the version lock
/// briefly and may wait up to a second for deletions in flight.
pub fn check_invariants(db: &crate::Db) -> std::result::Result<(), String> {
    db.core().check_invariants()
}
