//! The whole-directory fuzz target: arbitrary bytes become a database directory in a
//! [`MemFs`], which is opened and then read, written, flushed, compacted, closed and reopened.
//! A panic, an error that is not damage ([`Error::Corruption`], [`Error::Io`]), or a wrong
//! answer is a finding.
//!
//! Input format:
//!
//! ```text
//! input := flags u8 | file*             (at most MAX_FILES files; any rest is ignored)
//! file  := kind u8 | number u64 LE | len u16 LE | contents[len]
//!          (a short last file takes what is left)
//! kind % 6: 0 CURRENT, 1 MANIFEST-<number>, 2 <number>.sst, 3 <number>.wal,
//!           4 <number>.dbtmp, 5 <number>.txt (not a siltdb file)
//! flags: FIX_WAL, FIX_MANIFEST, FIX_TABLES, READ_ONLY, WRITE, COMPACT (see the constants)
//! ```
//!
//! The fix-up flags recompute checksums after the fuzzer's mutations, so that damage reaches
//! the decoders behind them: WAL and manifest records are framed again for their file's
//! number, and a table's footer, filter, index and properties blocks get their checksums back.
//! Data blocks never do: the entries a table holds are always ones a writer wrote, in order.
//!
//! The oracle. Scans forward and backward must agree and ascend; a get of every scanned key
//! must return the scanned value and a get of a key the scan lacks must return nothing; a
//! flush, a compaction and a reopen must not change what a scan returns; a write must be read
//! back. Gets and scans may only disagree on a tree that breaks an invariant a get relies on
//! and that opening cannot check without reading every table (see [`answerable`]): for such a
//! tree only panics and error kinds are judged.

use crate::error::Error;
use crate::filename::{self, FileKind};
use crate::fs::{FileSystem, MemFs};
use crate::key;
use crate::record;
use crate::sstable::format::{
    block_crc, BlockHandle, BlockKind, Footer, BLOCK_TRAILER_LEN, FOOTER_LEN,
};
use crate::version::{table_entries, NUM_LEVELS};
use crate::{Db, Options};
use bytes::Bytes;
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

/// Re-frame the records of every WAL.
pub const FIX_WAL: u8 = 1;
/// Re-frame the records of every manifest.
pub const FIX_MANIFEST: u8 = 2;
/// Recompute every table's footer and its filter, index and properties checksums.
pub const FIX_TABLES: u8 = 4;
/// Open read-only (no writes, flush or compaction).
pub const READ_ONLY: u8 = 8;
/// Write a key before flushing.
pub const WRITE: u8 = 16;
/// Compact after flushing.
pub const COMPACT: u8 = 32;

/// Most files one input makes.
pub const MAX_FILES: usize = 12;
/// Most entries a scan or the audit reads (inputs are small; this only bounds the loops).
const MAX_ENTRIES: usize = 200_000;
const DIR: &str = "/db";
const FILE_HEADER_LEN: usize = 11;

/// Runs one input (see the module documentation).
pub fn directory(data: &[u8]) {
    let Some((&flags, files)) = data.split_first() else {
        return;
    };
    let fs = MemFs::new();
    let dir = Path::new(DIR);
    fs.create_dir_all(dir).expect("MemFs directory");
    for (name, contents) in split_files(files, flags) {
        fs.write_file(&dir.join(name), &contents)
            .expect("MemFs write");
    }
    check_database(&fs, flags);
}

/// Encodes a directory as an input: `files` are (name, contents) pairs as they lie in a
/// database directory (`LOCK` is left out; a name siltdb does not use becomes a `.txt` file).
pub fn directory_input(flags: u8, files: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut out = vec![flags];
    for (name, contents) in files {
        let (kind, number) = match filename::parse(name) {
            Some(FileKind::Current) => (0u8, 0),
            Some(FileKind::Manifest(n)) => (1, n),
            Some(FileKind::Table(n)) => (2, n),
            Some(FileKind::Wal(n)) => (3, n),
            Some(FileKind::Temp(n)) => (4, n),
            Some(FileKind::Lock) => continue,
            None => (5, 0),
        };
        let len = u16::try_from(contents.len()).expect("seed files are under 64 KiB");
        out.push(kind);
        out.extend_from_slice(&number.to_le_bytes());
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(contents);
    }
    out
}

/// The files an input describes, with the fix-ups its flags ask for.
fn split_files(mut rest: &[u8], flags: u8) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    while out.len() < MAX_FILES && rest.len() >= FILE_HEADER_LEN {
        let (header, tail) = rest.split_at(FILE_HEADER_LEN);
        let kind = header[0] % 6;
        let mut n = [0u8; 8];
        n.copy_from_slice(&header[1..9]);
        let number = u64::from_le_bytes(n);
        let len = usize::from(u16::from_le_bytes([header[9], header[10]])).min(tail.len());
        let (contents, tail) = tail.split_at(len);
        rest = tail;
        let mut contents = contents.to_vec();
        let name = match kind {
            0 => filename::CURRENT.to_string(),
            1 => {
                if flags & FIX_MANIFEST != 0 {
                    fix_records(&mut contents, number);
                }
                filename::manifest_name(number)
            }
            2 => {
                if flags & FIX_TABLES != 0 {
                    fix_table(&mut contents);
                }
                filename::table_name(number)
            }
            3 => {
                if flags & FIX_WAL != 0 {
                    fix_records(&mut contents, number);
                }
                filename::wal_name(number)
            }
            4 => filename::temp_name(number),
            _ => format!("{number:06}.txt"),
        };
        out.push((name, contents));
    }
    out
}

/// Frames every record again (whole records only, as far as their lengths chain).
fn fix_records(bytes: &mut [u8], number: u64) {
    let mut pos = 0usize;
    while let Some(header) = bytes.get(pos..pos + record::HEADER_LEN) {
        let len = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
        let start = pos + record::HEADER_LEN;
        let Some(end) = usize::try_from(len)
            .ok()
            .and_then(|l| start.checked_add(l))
            .filter(|&e| e <= bytes.len())
        else {
            return;
        };
        let Ok(framed) = record::frame(&bytes[start..end], number) else {
            return;
        };
        bytes[pos..end].copy_from_slice(&framed);
        pos = end;
    }
}

/// Recomputes the footer checksum (and magic) and the checksums of the blocks it names.
fn fix_table(bytes: &mut [u8]) {
    let Some(footer_at) = bytes.len().checked_sub(FOOTER_LEN) else {
        return;
    };
    let field = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&bytes[footer_at + at..footer_at + at + 8]);
        u64::from_le_bytes(b)
    };
    let handle = |at: usize| BlockHandle {
        offset: field(at),
        size: field(at + 8),
    };
    let v = &bytes[footer_at + 48..footer_at + 52];
    let filter = handle(16);
    let footer = Footer {
        index: handle(0),
        filter: (filter != BlockHandle::default()).then_some(filter),
        properties: handle(32),
        version: u32::from_le_bytes([v[0], v[1], v[2], v[3]]),
    };
    let blocks = [
        footer.filter.map(|h| (BlockKind::Filter, h)),
        Some((BlockKind::Index, footer.index)),
        Some((BlockKind::Properties, footer.properties)),
    ];
    for (kind, h) in blocks.into_iter().flatten() {
        fix_block(&mut bytes[..footer_at], kind, h);
    }
    bytes[footer_at..].copy_from_slice(&footer.encode());
}

/// Rewrites the trailer of the block at `h` (if it lies inside `bytes`); for a filter, also
/// the filter's own checksum.
fn fix_block(bytes: &mut [u8], kind: BlockKind, h: BlockHandle) {
    let (Ok(start), Ok(size)) = (usize::try_from(h.offset), usize::try_from(h.size)) else {
        return;
    };
    let Some(end) = start.checked_add(size).filter(|&e| {
        e.checked_add(BLOCK_TRAILER_LEN)
            .is_some_and(|t| t <= bytes.len())
    }) else {
        return;
    };
    let contents = &mut bytes[start..end];
    if kind == BlockKind::Filter && size >= crate::filter::TRAILER_LEN {
        let (body, crc) = contents.split_at_mut(size - 4);
        crc.copy_from_slice(&record::mask_crc(crc32fast::hash(body)).to_le_bytes());
    }
    let crc = block_crc(&bytes[start..end], kind as u8, h.offset);
    bytes[end] = kind as u8;
    bytes[end + 1..end + BLOCK_TRAILER_LEN].copy_from_slice(&crc.to_le_bytes());
}

/// Panics unless `e` is damage: corruption, or an I/O error (`InvalidArgument` too where
/// `invalid_ok`).
fn expect_damage(e: &Error, what: &str, invalid_ok: bool) {
    match e {
        Error::Corruption { .. } | Error::Io(_) => {}
        Error::InvalidArgument(_) if invalid_ok => {}
        other => panic!("{what}: {other:?} is not an error damage can cause"),
    }
}

fn options(fs: &MemFs, flags: u8) -> Options {
    Options::default()
        .auto_compaction(false)
        .read_only(flags & READ_ONLY != 0)
        .file_system(Arc::new(fs.clone()))
}

type Contents = BTreeMap<Vec<u8>, Vec<u8>>;

fn check_database(fs: &MemFs, flags: u8) {
    let read_only = flags & READ_ONLY != 0;
    let had_database = fs.exists(&Path::new(DIR).join(filename::CURRENT));
    let db = match Db::open_with(DIR, options(fs, flags)) {
        Ok(db) => db,
        Err(e) => return expect_damage(&e, "open", !had_database),
    };
    if let Err(why) = db.core().read_path().load().version.check_invariants() {
        panic!("open accepted a tree that breaks the level invariants: {why}");
    }
    let sane = answerable(&db);
    let mut expected = read_everything(&db, sane);
    let _ = (db.stats(), db.tables(), db.levels());
    if !read_only {
        if flags & WRITE != 0 {
            match db.insert("fuzz-key", "fuzz-value") {
                Ok(()) => {
                    let got = db.get("fuzz-key");
                    if !matches!(&got, Ok(Some(v)) if v == b"fuzz-value") {
                        assert!(got.is_err(), "a write reads back as {got:?}");
                        expect_damage(&got.unwrap_err(), "get after write", false);
                    }
                    if let Some(c) = expected.as_mut() {
                        c.insert(b"fuzz-key".to_vec(), b"fuzz-value".to_vec());
                    }
                }
                // Sequence numbers run out near MAX_SEQ: refused, with nothing written.
                Err(e) => expect_damage(&e, "insert", true),
            }
        }
        if let Err(e) = db.flush() {
            expect_damage(&e, "flush", false);
        }
        if flags & COMPACT != 0 {
            if let Err(e) = db.compact() {
                expect_damage(&e, "compact", false);
            }
        }
        let now = read_everything(&db, sane);
        same_contents(&expected, &now, sane, "after flush and compaction");
    }
    if let Err(e) = db.close() {
        expect_damage(&e, "close", false);
    }
    drop(db);
    let db = match Db::open_with(DIR, options(fs, flags)) {
        Ok(db) => db,
        // The session may have used up the last file numbers (the input named one near the
        // largest); then the next open has none left for its manifest.
        Err(e) if numbers_near_the_largest(fs) => return expect_damage(&e, "reopen", false),
        Err(e) => panic!("a database that opened and closed does not reopen: {e:?}"),
    };
    let again = read_everything(&db, sane);
    same_contents(&expected, &again, sane, "after reopening");
}

/// True if a file in the directory has a number within a few thousand of
/// [`filename::MAX_FILE_NUMBER`] or beyond it.
fn numbers_near_the_largest(fs: &MemFs) -> bool {
    let names = fs.list(Path::new(DIR)).unwrap_or_default();
    names.iter().any(|name| {
        let digits: String = name.chars().filter(char::is_ascii_digit).collect();
        digits
            .parse::<u128>()
            .is_ok_and(|n| n + 4096 > u128::from(filename::MAX_FILE_NUMBER))
            || (digits.len() > 20)
    })
}

/// Panics if both scans completed, on a tree gets and scans agree on, and differ.
fn same_contents(before: &Option<Contents>, after: &Option<Contents>, sane: bool, when: &str) {
    if let (Some(b), Some(a), true) = (before, after, sane) {
        assert!(b == a, "{when}: the contents changed from {b:?} to {a:?}");
    }
}

/// Scans forward and backward and checks each key with a get; `None` if damage stopped a
/// read. With `sane` false (see [`answerable`]), gets are not compared with the scan.
fn read_everything(db: &Db, sane: bool) -> Option<Contents> {
    let forward = scan(db.iter())?;
    for w in forward.windows(2) {
        assert!(
            w[0].0 < w[1].0,
            "a scan goes from {:?} to {:?}",
            w[0].0,
            w[1].0
        );
    }
    let mut backward = scan(db.iter().rev())?;
    backward.reverse();
    if !sane {
        return Some(forward.into_iter().collect());
    }
    assert!(
        forward == backward,
        "forward scan {forward:?} != backward {backward:?}"
    );
    let contents: Contents = forward.into_iter().collect();
    let mut absent: Vec<Vec<u8>> = vec![Vec::new(), vec![0xff; 4], b"fuzz-key".to_vec()];
    for (k, v) in &contents {
        match db.get(k) {
            Ok(Some(got)) => assert!(&got == v, "get({k:?}) = {got:?}, the scan says {v:?}"),
            Ok(None) => panic!("get({k:?}) finds nothing, the scan finds {v:?}"),
            Err(e) => expect_damage(&e, "get", false),
        }
        if absent.len() < 64 {
            let mut next = k.clone();
            next.push(0);
            absent.push(next);
            absent.push(k[..k.len().saturating_sub(1)].to_vec());
        }
    }
    for k in absent.iter().filter(|k| !contents.contains_key(*k)) {
        match db.get(k) {
            Ok(None) => {}
            Ok(Some(v)) => panic!("get({k:?}) = {v:?}, the scan does not have it"),
            Err(e) => expect_damage(&e, "get", false),
        }
    }
    Some(contents)
}

fn scan(
    items: impl Iterator<Item = crate::Result<(Vec<u8>, Vec<u8>)>>,
) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut out = Vec::new();
    for item in items.take(MAX_ENTRIES) {
        match item {
            Ok(kv) => out.push(kv),
            Err(e) => {
                expect_damage(&e, "scan", false);
                return None;
            }
        }
    }
    Some(out)
}

/// What the audit knows of one user key.
struct Versions {
    /// The first source on a get's path that holds a visible version, and its newest one.
    first: usize,
    first_newest: u64,
    /// The newest visible version anywhere, the last source holding it, and how many do.
    newest: u64,
    newest_at: usize,
    holders: u32,
}

/// True if a get can answer every key the way a scan does. A get asks the memtables, then
/// the L0 tables newest first, then the one table of each deeper level whose range holds the
/// key, and stops at the first that knows the key; a scan merges everything and takes the
/// newest version. They agree when, for every key, the newest visible version is in the first
/// place a get looks and nowhere else, every table's entries lie in its manifest key range,
/// and its filter passes them. Open checks what it can without reading every table (disjoint
/// L0 sequence ranges, no overlap in L1+, data blocks where the index says); this checks the
/// rest, which a tree of valid checksums can still break (a table moved to another level by a
/// re-checksummed manifest edit, a filter re-checksummed after damage).
fn answerable(db: &Db) -> bool {
    let (rs, seq) = db.core().read_path().read_point();
    let mut seen: HashMap<Bytes, Versions> = HashMap::new();
    let mut budget = MAX_ENTRIES;
    // Versions of a key compare by trailer, as a get within one source and a scan pick them.
    let mut note = |source: usize, user: Bytes, trailer: u64| {
        if key::trailer_seq(trailer) > seq {
            return;
        }
        match seen.entry(user) {
            Entry::Vacant(e) => {
                e.insert(Versions {
                    first: source,
                    first_newest: trailer,
                    newest: trailer,
                    newest_at: source,
                    holders: 1,
                });
            }
            Entry::Occupied(mut e) => {
                let v = e.get_mut();
                if source == v.first {
                    v.first_newest = v.first_newest.max(trailer);
                }
                if trailer > v.newest {
                    (v.newest, v.newest_at, v.holders) = (trailer, source, 1);
                } else if trailer == v.newest && source != v.newest_at {
                    (v.newest_at, v.holders) = (source, v.holders + 1);
                }
            }
        }
    };
    let mut source = 0;
    for mem in std::iter::once(&rs.mem).chain(rs.imms.iter()) {
        for (k, _) in mem.iter().take(MAX_ENTRIES) {
            note(source, k.user_key.clone(), k.trailer);
        }
        source += 1;
    }
    for level in 0..NUM_LEVELS {
        for t in &rs.version.levels[level] {
            let Ok(reader) = t.reader() else {
                return false;
            };
            let Ok(entries) = table_entries(
                t,
                crate::iter::KeyRange::all(),
                crate::sstable::CacheUse::Bypass,
            ) else {
                return false;
            };
            for e in entries {
                let Ok(e) = e else {
                    return false;
                };
                budget = budget.saturating_sub(1);
                let in_range = t.meta.smallest_user() <= &e.user_key[..]
                    && &e.user_key[..] <= t.meta.largest_user();
                let passes = reader.filter().is_none_or(|f| f.may_contain(&e.user_key));
                if budget == 0 || !in_range || !passes {
                    return false;
                }
                note(source, e.user_key, e.trailer);
            }
            // L0 tables are asked one by one; a deeper level as one source.
            if level == 0 {
                source += 1;
            }
        }
        if level > 0 {
            source += 1;
        }
    }
    seen.values()
        .all(|v| v.first_newest == v.newest && v.holders == 1)
}
