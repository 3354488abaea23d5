//! Entry points for the fuzz targets in `fuzz/`, compiled only under `--cfg fuzzing` (which
//! cargo-fuzz sets) and in this crate's unit tests, which replay the checked-in corpus
//! (`fuzz/corpus/<target>/`) through them on stable Rust: every input that ever found new
//! coverage must still decode without a panic. Each entry point takes arbitrary bytes, runs one
//! decoder over them, and must never panic or allocate more than a small multiple of the
//! input. [`directory`] goes further: it opens a whole database directory built from the bytes
//! and judges the answers too; [`filter`], [`fuse_filter`] and [`ribbon_filter`] check that a
//! decoded fuse or Ribbon filter answers consistently and re-encodes to the same bytes. Not
//! part of the API.
//!
//! `cargo test --release --lib fuzzing -- --ignored write_seeds` regenerates the seed inputs
//! (real blocks, filters, footers, tables, WALs, manifests and whole directories).

pub mod directory;
pub mod ribbon;

pub use ribbon::ribbon_filter;

use crate::filter::{self, Filter, FuseFilter};
use crate::fs::{FileSystem, MemFs};
use crate::key;
use crate::record::RecordReader;
use crate::sstable::block::Block;
use crate::sstable::format::{Footer, FOOTER_LEN};
use crate::sstable::TableReader;
use bytes::Bytes;
use std::path::Path;

/// A data or index block: parse, decode every entry, seek.
pub fn block(data: &[u8]) {
    if let Some(b) = Block::parse(Bytes::copy_from_slice(data)) {
        let _ = b.entries();
        let _ = b.seek(b"key", key::lookup_trailer(7));
        let _ = b.seek(b"", 0);
    }
}

/// A filter block: decode, and probe a few keys. A fuse filter also goes through
/// [`check_fuse`] (its accessors, and re-encoding it must give back the same filter and bytes).
pub fn filter(data: &[u8]) {
    if let Ok(f) = filter::decode(data) {
        for k in [&b""[..], b"a", b"key", data] {
            let _ = f.may_contain(k);
        }
        let _ = (
            f.memory_bytes(),
            f.predicted_fpr(),
            f.keys(),
            f.bits_per_key(),
        );
        let _ = (f.kind_name(), format!("{f:?}"));
        match &f {
            Filter::Bloom(b) => {
                let _ = b.fill_ratio();
                let _ = b.probe_bits(7);
                let _ = b.predicted_fpr();
            }
            Filter::Fuse(x) => check_fuse(x, data),
            Filter::Ribbon(r) => ribbon::check_ribbon(r, data),
            _ => {}
        }
    }
    let _ = filter::decode_trailer(data);
    let _ = filter::decode_fuse_trailer(data);
    let _ = filter::decode_ribbon_trailer(data);
}

/// [`fuse_filter`]'s first input byte: which trailer fields it sets to valid values.
/// Version 1, hash id 1, arity 3 (4 with [`FUSE_ARITY4`]), reserved 0.
pub const FUSE_FIX_FIELDS: u8 = 1;
/// The fingerprint width: 16 bits with [`FUSE_WIDE`], else 8; with [`FUSE_PACKED`], the stored
/// width if it is 4..=16, else 4 plus it mod 13.
pub const FUSE_FIX_WIDTH: u8 = 2;
/// With [`FUSE_FIX_WIDTH`]: 16-bit fingerprints.
pub const FUSE_WIDE: u8 = 4;
/// With [`FUSE_FIX_FIELDS`]: arity 4.
pub const FUSE_ARITY4: u8 = 32;
/// With [`FUSE_FIX_WIDTH`]: any width from 4 to 16 (a packed bit stream).
pub const FUSE_PACKED: u8 = 64;
/// The geometry: `segment_length_log2` (the stored one mod 19, lowered until three segments
/// fit) and `segment_count` chosen so the array fills the payload, whose tail is cut to a
/// whole number of segments. Unchanged for a well-formed block.
pub const FUSE_FIX_GEOMETRY: u8 = 8;
/// Keys: a count above the array's slots is reduced modulo `slots + 1`.
pub const FUSE_FIX_KEYS: u8 = 16;

/// A binary fuse filter block (kind 2) whose fields get past the checksum: the first byte is
/// a set of `FUSE_FIX_*` flags, the rest the block (payload and trailer, zero-padded to a
/// trailer). The marker and kind are always set to a fuse filter's, the fields the flags name
/// to valid values, and the checksum is recomputed; then the block is decoded, and a decoded
/// fuse filter goes through [`check_fuse`].
pub fn fuse_filter(data: &[u8]) {
    fixed_block_target(data, fuse_block_from, |f, block| {
        let _ = filter::decode_fuse_trailer(block);
        match f {
            Filter::Fuse(x) => check_fuse(x, block),
            _ => return false,
        }
        true
    });
}

/// The body of the kind-specific filter targets: the first byte of `data` is a flag set,
/// `block_from(flags, rest)` forges the block, which is decoded; `check` gets the filter and
/// the block and says whether it checked it (a filter of its kind); any other decoded filter
/// is probed with a few keys.
pub(crate) fn fixed_block_target(
    data: &[u8],
    block_from: fn(u8, &[u8]) -> Vec<u8>,
    check: fn(&Filter, &[u8]) -> bool,
) {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let block = block_from(flags, rest);
    if let Ok(f) = filter::decode(&block) {
        if !check(&f, &block) {
            for k in [&b""[..], b"a", rest] {
                let _ = f.may_contain(k);
            }
        }
    }
}

/// The block [`fuse_filter`] decodes (see there).
pub fn fuse_block_from(flags: u8, input: &[u8]) -> Vec<u8> {
    use crate::filter::{FUSE_VERSION, HASH_XXH3_64, KIND_BINARY_FUSE, MARKER, TRAILER_LEN};
    let mut payload = input.to_vec();
    payload.resize(payload.len().max(TRAILER_LEN), 0);
    let mut t = payload.split_off(payload.len() - TRAILER_LEN);
    t[0] = MARKER;
    t[1] = KIND_BINARY_FUSE;
    if flags & FUSE_FIX_FIELDS != 0 {
        t[2] = FUSE_VERSION;
        t[3] = HASH_XXH3_64;
        t[5] = if flags & FUSE_ARITY4 != 0 { 4 } else { 3 };
        t[7] = 0;
    }
    if flags & FUSE_FIX_WIDTH != 0 {
        t[4] = if flags & FUSE_PACKED != 0 {
            if (4..=16).contains(&t[4]) {
                t[4]
            } else {
                4 + t[4] % 13
            }
        } else if flags & FUSE_WIDE != 0 {
            16
        } else {
            8
        };
    }
    let extra = usize::from(t[5]).saturating_sub(1);
    if flags & FUSE_FIX_GEOMETRY != 0 && (1..=16).contains(&t[4]) {
        let width = usize::from(t[4]);
        let available = payload.len() * 8 / width;
        let mut log2 = u32::from(t[6]) % 19;
        while log2 > 0 && available >> log2 < extra + 1 {
            log2 -= 1;
        }
        if let Ok(segments) = u32::try_from((available >> log2).saturating_sub(extra)) {
            if segments > 0 {
                let slots = (segments as usize + extra) << log2;
                payload.truncate((slots * width).div_ceil(8));
                if !(slots * width).is_multiple_of(8) {
                    // The stream's unused high bits are zero in a well-formed block.
                    if let Some(last) = payload.last_mut() {
                        *last &= (1u8 << ((slots * width) % 8)) - 1;
                    }
                }
                t[6] = log2 as u8;
                t[8..12].copy_from_slice(&segments.to_le_bytes());
            }
        }
    }
    if flags & FUSE_FIX_KEYS != 0 {
        let u32_at = |i: usize| u32::from_le_bytes([t[i], t[i + 1], t[i + 2], t[i + 3]]);
        let slots = (u64::from(u32_at(8)) + extra as u64) << (t[6] % 64);
        let keys = u64::from(u32_at(12));
        if keys > slots {
            let keys = (keys % (slots + 1)) as u32;
            t[12..16].copy_from_slice(&keys.to_le_bytes());
        }
    }
    payload.extend_from_slice(&t);
    crate::filter::reseal(&mut payload);
    payload
}

/// Probes a decoded fuse filter and calls its accessors; panics if its answers disagree
/// (a probe's verdict against `may_contain`, a slot outside the array, a zero fraction
/// outside [0, 1]) or if re-encoding it does not give back `block` and the same filter.
pub fn check_fuse(f: &FuseFilter, block: &[u8]) {
    let mut hashes = vec![0, u64::MAX, f.seed(), f.seed().wrapping_neg()];
    for k in [&b""[..], b"a", b"key", block] {
        hashes.push(filter::hash_key(k));
    }
    for h in hashes {
        let p = f.probe(h);
        assert_eq!(p.may_contain, f.may_contain_hash(h), "probe of {h:#x}");
        assert!(
            p.slots.iter().all(|&s| s < f.array_length()),
            "slots {:?} outside {} slots",
            p.slots,
            f.array_length()
        );
    }
    let _ = (
        f.fingerprint_bits(),
        f.arity(),
        f.segment_length(),
        f.segment_count(),
    );
    let _ = (
        f.keys(),
        f.memory_bytes(),
        f.predicted_fpr(),
        f.bits_per_key(),
    );
    let zeros = f.zero_fraction();
    assert!((0.0..=1.0).contains(&zeros), "zero fraction {zeros}");
    let encoded = f.encode();
    match filter::decode(&encoded) {
        Ok(Filter::Fuse(g)) if g == *f => {}
        other => panic!("a decoded fuse filter re-encodes to {other:?}"),
    }
    assert!(
        encoded == block,
        "a decoded fuse filter re-encodes to other bytes"
    );
}

/// A table footer (the first 64 bytes of the input).
pub fn footer(data: &[u8]) {
    if data.len() >= FOOTER_LEN {
        let mut f = [0u8; FOOTER_LEN];
        f.copy_from_slice(&data[..FOOTER_LEN]);
        let _ = Footer::decode(&f);
    }
}

/// The records read from a log before its end, a torn tail or corruption; `sync_marks`: read
/// as a WAL, whose pages lost after its last sync mark are cut (`docs/format.md` §2).
fn log_records(data: &[u8], number: u64, sync_marks: bool) -> Vec<Vec<u8>> {
    let fs = MemFs::new();
    let dir = Path::new("/f");
    let _ = fs.create_dir_all(dir);
    let p = dir.join("log");
    let _ = fs.write_file(&p, data);
    let mut out = Vec::new();
    if let Ok(file) = fs.open(&p) {
        let mut r = RecordReader::new(file, &p, number);
        if sync_marks {
            r = r.lost_pages_after_sync(crate::wal::is_sync_mark);
        }
        while let Ok(Some(rec)) = r.next() {
            out.push(rec.payload);
        }
    }
    out
}

/// The file number a log's records are bound to (first 8 input bytes), and the log bytes.
fn split_number(data: &[u8]) -> (u64, &[u8]) {
    if data.len() < 8 {
        return (1, data);
    }
    let mut n = [0u8; 8];
    n.copy_from_slice(&data[..8]);
    (u64::from_le_bytes(n), &data[8..])
}

/// A WAL file: the file number (8 bytes LE) then the file. Reads every record and decodes its
/// batch. Read as a WAL (lost pages after the last sync mark cut) and strictly, the same
/// records come back: the two differ only in how the log ends.
pub fn wal(data: &[u8]) {
    let (number, data) = split_number(data);
    let records = log_records(data, number, true);
    assert!(
        records == log_records(data, number, false),
        "reading with and without sync marks gave different records"
    );
    for payload in records {
        let _ = crate::wal::decode_payload(payload);
    }
}

/// A manifest file: the file number (8 bytes LE) then the file. Reads every record and decodes
/// its edit.
pub fn manifest(data: &[u8]) {
    let (number, data) = split_number(data);
    for payload in log_records(data, number, false) {
        let _ = crate::version::VersionEdit::decode(&payload);
    }
}

/// A whole database directory (files split from the input as [`directory::directory_input`]
/// encodes them): open it, scan both ways, get every key, write, flush, compact, close,
/// reopen. Panics on an error damage cannot cause (anything but corruption or I/O, such as a
/// background thread's panic turned into [`Error::Poisoned`](crate::Error::Poisoned)) and on
/// a wrong answer.
pub fn directory(data: &[u8]) {
    directory::directory(data);
}

/// A whole table file: open it, read every entry, look some keys up.
pub fn table(data: &[u8]) {
    let fs = MemFs::new();
    let dir = Path::new("/f");
    let _ = fs.create_dir_all(dir);
    let p = dir.join("000001.sst");
    let _ = fs.write_file(&p, data);
    if let Ok(t) = TableReader::open(&fs, &p) {
        for e in t.entries().take(10_000) {
            if e.is_err() {
                break;
            }
        }
        for k in [&b""[..], b"a", b"key", b"\xff"] {
            let _ = t.find(k);
        }
        for b in t.blocks() {
            let _ = t.verify_block(&b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::directory::{
        directory_input, COMPACT, FIX_MANIFEST, FIX_TABLES, FIX_WAL, READ_ONLY, WRITE,
    };
    use super::{
        fuse_block_from, FUSE_ARITY4, FUSE_FIX_FIELDS, FUSE_FIX_GEOMETRY, FUSE_FIX_KEYS,
        FUSE_FIX_WIDTH, FUSE_PACKED, FUSE_WIDE,
    };
    use crate::filter::FuseFilter;
    use crate::fs::{FileSystem, MemFs};
    use crate::sstable::TableReader;
    use crate::{Db, Options, WriteBatch};
    use std::path::{Path, PathBuf};
    use std::sync::Arc;

    type Target = (&'static str, fn(&[u8]));

    const TARGETS: [Target; 9] = [
        ("block", super::block),
        ("filter", super::filter),
        ("fuse_filter", super::fuse_filter),
        ("ribbon_filter", super::ribbon_filter),
        ("footer", super::footer),
        ("wal", super::wal),
        ("manifest", super::manifest),
        ("table", super::table),
        ("directory", super::directory),
    ];

    fn corpus_dir(target: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fuzz/corpus")
            .join(target)
    }

    #[test]
    fn replay_checked_in_corpus() {
        let mut report = Vec::new();
        for (target, run) in TARGETS {
            let dir = corpus_dir(target);
            let mut n = 0;
            for entry in
                std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            {
                let bytes = std::fs::read(entry.unwrap().path()).unwrap();
                run(&bytes);
                n += 1;
            }
            assert!(n > 0, "no corpus for {target}");
            report.push(format!("{target}={n}"));
        }
        println!("fuzz corpus replay: {} inputs, no panics", report.join(" "));
    }

    fn number(path: &Path) -> u64 {
        let name = path.file_name().unwrap().to_str().unwrap();
        match crate::filename::parse(name) {
            Some(crate::filename::FileKind::Wal(n))
            | Some(crate::filename::FileKind::Manifest(n)) => n,
            _ => 0,
        }
    }

    #[test]
    fn wal_readers_agree_on_damaged_logs() {
        // The WAL seeds of more than a page, damaged 400 ways each (a 4 KiB page of the log
        // zeroed, as a power loss that writes pages out of order leaves it; a run of zeros; a
        // flipped bit; a cut): reading as a WAL (lost pages cut) and strictly never panics and
        // returns the same records (the assertion is in `wal`).
        let mut seeds: Vec<Vec<u8>> = std::fs::read_dir(corpus_dir("wal"))
            .unwrap()
            .map(|e| std::fs::read(e.unwrap().path()).unwrap())
            .filter(|b| b.len() > 8 + 4096)
            .collect();
        seeds.sort();
        assert!(seeds.len() >= 2, "too few WAL seeds over a page");
        let mut rng = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = |n: usize| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            (rng % n as u64) as usize
        };
        for seed in &seeds {
            let log_len = seed.len() - 8;
            for _ in 0..400 {
                let mut d = seed.clone();
                match next(4) {
                    0 => {
                        let page = next(log_len.div_ceil(4096));
                        let end = (8 + (page + 1) * 4096).min(d.len());
                        d[8 + page * 4096..end].fill(0);
                    }
                    1 => {
                        let at = 8 + next(log_len);
                        let end = (at + 1 + next(200)).min(d.len());
                        d[at..end].fill(0);
                    }
                    2 => d[8 + next(log_len)] ^= 1 << next(8),
                    _ => d.truncate(8 + next(log_len)),
                }
                super::wal(&d);
            }
        }
    }

    #[test]
    #[ignore = "a tool, not a check: regenerates the fuzz seed inputs in fuzz/corpus"]
    fn write_seeds() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open_with(
            dir.path(),
            Options::default().auto_compaction(false).block_size(512),
        )
        .unwrap();
        for i in 0..300u32 {
            db.insert(format!("key{i:04}"), format!("value-{i}"))
                .unwrap();
        }
        db.remove("key0007").unwrap();
        db.flush().unwrap();
        let mut b = WriteBatch::new();
        b.insert("batch", "x")
            .remove("key0001")
            .insert("", "empty key");
        db.write(b).unwrap();
        let files: Vec<PathBuf> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        let write = |target: &str, name: &str, bytes: &[u8]| {
            let d = corpus_dir(target);
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join(format!("seed-{name}")), bytes).unwrap();
        };
        for f in &files {
            let bytes = std::fs::read(f).unwrap();
            let name = f.file_name().unwrap().to_str().unwrap().to_string();
            if name.ends_with(".sst") {
                write("table", &name, &bytes);
                write("footer", &name, &bytes[bytes.len() - 64..]);
                let t = TableReader::open_file(f).unwrap();
                let h = t.index()[0].handle;
                write(
                    "block",
                    "data",
                    &bytes[h.offset as usize..(h.offset + h.size) as usize],
                );
                let h = t.footer().index;
                write(
                    "block",
                    "index",
                    &bytes[h.offset as usize..(h.offset + h.size) as usize],
                );
                let h = t.footer().filter.unwrap();
                write(
                    "filter",
                    "bloom",
                    &bytes[h.offset as usize..(h.offset + h.size) as usize],
                );
            }
            if name.ends_with(".wal") || name.starts_with("MANIFEST-") {
                let mut framed = number(f).to_le_bytes().to_vec();
                framed.extend_from_slice(&bytes);
                write(
                    if name.ends_with(".wal") {
                        "wal"
                    } else {
                        "manifest"
                    },
                    &name,
                    &framed,
                );
            }
        }
    }

    /// The flags that set every field of a fuse block of this width (a no-op on a real one).
    /// The flags that fix every field of a 4-wise filter of `bits`-bit fingerprints.
    fn fuse_fix_all(bits: u32) -> u8 {
        let width = match bits {
            16 => FUSE_WIDE,
            8 => 0,
            _ => FUSE_PACKED,
        };
        FUSE_FIX_FIELDS | FUSE_ARITY4 | FUSE_FIX_WIDTH | width | FUSE_FIX_GEOMETRY | FUSE_FIX_KEYS
    }

    /// Real fuse filter blocks of widths 5, 8, 12 and 16 over 0, 1, 2, 100 and 5000 keys, as
    /// (name, bits, keys, block).
    fn fuse_seeds() -> Vec<(String, u32, u32, Vec<u8>)> {
        let mut out = Vec::new();
        for bits in [5u32, 8, 12, 16] {
            for n in [0u32, 1, 2, 100, 5000] {
                let hashes: Vec<u64> = (0..n)
                    .map(|i| crate::filter::hash_key(format!("key{i:04}").as_bytes()))
                    .collect();
                let block = FuseFilter::build(&hashes, bits).unwrap().encode();
                out.push((format!("fuse{bits}-{n}"), bits, n, block));
            }
        }
        out
    }

    /// The fuse seeds: for `filter` the blocks as stored, for `fuse_filter` behind a flag
    /// byte of none and of every fix.
    #[test]
    #[ignore = "a tool, not a check: regenerates the fuzz seed inputs in fuzz/corpus"]
    fn write_seeds_fuse() {
        for (name, bits, _, block) in fuse_seeds() {
            for (target, tag, input) in [
                ("filter", "", block.clone()),
                ("fuse_filter", "-plain", [&[0u8][..], &block].concat()),
                (
                    "fuse_filter",
                    "-fixed",
                    [&[fuse_fix_all(bits)][..], &block].concat(),
                ),
            ] {
                let d = corpus_dir(target);
                std::fs::create_dir_all(&d).unwrap();
                std::fs::write(d.join(format!("seed-{name}{tag}")), input).unwrap();
            }
        }
    }

    /// The fuse seeds decode to what they were built as, pass both targets' checks, and the
    /// `fuse_filter` fixes leave them unchanged.
    #[test]
    fn fuse_seeds_decode_and_survive_the_fixes() {
        for (name, bits, n, block) in fuse_seeds() {
            assert_eq!(fuse_block_from(0, &block), block, "{name}");
            assert_eq!(fuse_block_from(fuse_fix_all(bits), &block), block, "{name}");
            let f = crate::filter::decode(&block).unwrap();
            if n == 0 {
                assert_eq!(f, crate::filter::Filter::Empty, "{name}");
            } else {
                let crate::filter::Filter::Fuse(x) = &f else {
                    panic!("{name}: {f:?}")
                };
                assert_eq!((x.fingerprint_bits(), x.keys()), (bits, u64::from(n)));
            }
            super::filter(&block);
            super::fuse_filter(&[&[0u8][..], &block].concat());
            super::fuse_filter(&[&[fuse_fix_all(bits)][..], &block].concat());
        }
    }

    /// The files of a database directory, as (name, contents).
    type Files = Vec<(String, Vec<u8>)>;

    /// The files of the database directory `/db` of `fs`.
    fn directory_files(fs: &MemFs) -> Files {
        let dir = Path::new("/db");
        let mut names = fs.list(dir).unwrap();
        names.sort();
        names
            .into_iter()
            .map(|n| {
                let bytes = fs.read_file(&dir.join(&n)).unwrap();
                (n, bytes)
            })
            .collect()
    }

    fn memfs_options(fs: &MemFs) -> Options {
        Options::default()
            .auto_compaction(false)
            .block_size(256)
            .file_system(Arc::new(fs.clone()))
    }

    /// Whole directories of real databases, each under several flag combinations: the inputs of
    /// the `directory` target (see `siltdb::fuzzing::directory`).
    fn directory_seeds() -> Vec<(&'static str, Files)> {
        let mut out = Vec::new();
        // A table in L0, a manifest of several edits, and unflushed writes in the WAL.
        let fs = MemFs::new();
        let db = Db::open_with("/db", memfs_options(&fs)).unwrap();
        for i in 0..40u32 {
            db.insert(format!("key{i:03}"), format!("value-{i}"))
                .unwrap();
        }
        db.remove("key005").unwrap();
        db.flush().unwrap();
        let mut b = WriteBatch::new();
        b.insert("batch", "x")
            .remove("key001")
            .insert("", "empty key");
        db.write(b).unwrap();
        db.insert("key010", "newer").unwrap();
        db.close().unwrap();
        out.push(("l0-and-wal", directory_files(&fs)));
        // Reopened: the writes of the WAL recovered into a second L0 table, a fresh manifest, an
        // empty WAL; then compacted into L1 with newer versions in L0 and in the WAL on top.
        let db = Db::open_with("/db", memfs_options(&fs)).unwrap();
        db.close().unwrap();
        out.push(("recovered", directory_files(&fs)));
        let db = Db::open_with("/db", memfs_options(&fs)).unwrap();
        db.compact().unwrap();
        for i in (0..40u32).step_by(3) {
            db.insert(format!("key{i:03}"), format!("again-{i}"))
                .unwrap();
        }
        db.flush().unwrap();
        db.remove("key020").unwrap();
        db.insert("zzz", "last").unwrap();
        db.close().unwrap();
        out.push(("levels", directory_files(&fs)));
        // A new database that was never written to.
        let fs = MemFs::new();
        Db::open_with("/db", memfs_options(&fs))
            .unwrap()
            .close()
            .unwrap();
        out.push(("empty", directory_files(&fs)));
        out
    }

    #[test]
    #[ignore = "a tool, not a check: regenerates the fuzz seed inputs in fuzz/corpus"]
    fn write_seeds_directory() {
        let d = corpus_dir("directory");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("seed-nothing"), [0u8]).unwrap();
        for (name, files) in directory_seeds() {
            for (tag, flags) in [
                ("plain", 0),
                ("fixed", FIX_WAL | FIX_MANIFEST | FIX_TABLES),
                ("read-only", READ_ONLY),
                ("write-compact", WRITE | COMPACT),
                ("all", FIX_WAL | FIX_MANIFEST | FIX_TABLES | WRITE | COMPACT),
            ] {
                let input = directory_input(flags, &files);
                std::fs::write(d.join(format!("seed-{name}-{tag}")), input).unwrap();
            }
        }
    }

    /// The seeds describe databases that open and read back: the target runs them cleanly (each
    /// seed is a database the oracle fully judges, not one rejected at open).
    #[test]
    fn directory_seeds_open_and_read_back() {
        for (name, files) in directory_seeds() {
            for flags in [
                0,
                WRITE | COMPACT,
                READ_ONLY,
                FIX_WAL | FIX_MANIFEST | FIX_TABLES,
            ] {
                super::directory(&directory_input(flags, &files));
            }
            let fs = MemFs::new();
            let dir = Path::new("/db");
            fs.create_dir_all(dir).unwrap();
            for (n, bytes) in &files {
                fs.write_file(&dir.join(n), bytes).unwrap();
            }
            let db = Db::open_with("/db", memfs_options(&fs)).unwrap();
            assert!(db.iter().count() > 0 || name == "empty", "{name}");
        }
    }
}
