//! Entry points for the fuzz targets in `fuzz/`, compiled only under `--cfg fuzzing` (which
//! cargo-fuzz sets) and in this crate's unit tests, which replay the checked-in corpus
//! (`fuzz/corpus/<target>/`) through them on stable Rust: every input that ever found new
//! coverage must still decode without a panic. Each entry point takes arbitrary bytes, runs one
//! decoder over them, and must never panic or allocate more than a small multiple of the
//! input. [`directory`] goes further: it opens a whole database directory built from the bytes
//! and judges the answers too. Not part of the API.
//!
//! `cargo test --release --lib fuzzing -- --ignored write_seeds` regenerates the seed inputs
//! (real blocks, filters, footers, tables, WALs, manifests and whole directories).

pub mod directory;

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

/// A filter block: decode, and probe a few keys.
pub fn filter(data: &[u8]) {
    if let Ok(f) = crate::filter::decode(data) {
        for k in [&b""[..], b"a", b"key", data] {
            let _ = f.may_contain(k);
        }
        if let crate::filter::Filter::Bloom(b) = &f {
            let _ = b.fill_ratio();
            let _ = b.probe_bits(7);
            let _ = b.predicted_fpr();
        }
    }
    let _ = crate::filter::decode_trailer(data);
}

/// A table footer (the first 64 bytes of the input).
pub fn footer(data: &[u8]) {
    if data.len() >= FOOTER_LEN {
        let mut f = [0u8; FOOTER_LEN];
        f.copy_from_slice(&data[..FOOTER_LEN]);
        let _ = Footer::decode(&f);
    }
}

fn log_records(data: &[u8], number: u64) -> Vec<Vec<u8>> {
    let fs = MemFs::new();
    let dir = Path::new("/f");
    let _ = fs.create_dir_all(dir);
    let p = dir.join("log");
    let _ = fs.write_file(&p, data);
    let mut out = Vec::new();
    if let Ok(file) = fs.open(&p) {
        let mut r = RecordReader::new(file, &p, number);
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
/// batch.
pub fn wal(data: &[u8]) {
    let (number, data) = split_number(data);
    for payload in log_records(data, number) {
        let _ = crate::wal::decode_payload(payload);
    }
}

/// A manifest file: the file number (8 bytes LE) then the file. Reads every record and decodes
/// its edit.
pub fn manifest(data: &[u8]) {
    let (number, data) = split_number(data);
    for payload in log_records(data, number) {
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
    use crate::fs::{FileSystem, MemFs};
    use crate::sstable::TableReader;
    use crate::{Db, Options, WriteBatch};
    use std::path::{Path, PathBuf};
    use std::sync::Arc;

    type Target = (&'static str, fn(&[u8]));

    const TARGETS: [Target; 7] = [
        ("block", super::block),
        ("filter", super::filter),
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
    #[ignore]
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
    #[ignore]
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
