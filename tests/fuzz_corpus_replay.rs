//! Replays the checked-in fuzz corpus (`fuzz/corpus/<target>/`) through the same entry points
//! the cargo-fuzz targets call, on stable Rust: every input that ever found new coverage must
//! still decode without a panic.
//!
//! `cargo test --release --test fuzz_corpus_replay -- --ignored write_seeds` regenerates the
//! seed inputs (real blocks, filters, footers, tables, WALs and manifests).
mod common;

use siltdb::sstable::TableReader;
use siltdb::{Db, Options, WriteBatch};
use std::path::{Path, PathBuf};

type Target = (&'static str, fn(&[u8]));

const TARGETS: [Target; 6] = [
    ("block", siltdb::fuzzing::block),
    ("filter", siltdb::fuzzing::filter),
    ("footer", siltdb::fuzzing::footer),
    ("wal", siltdb::fuzzing::wal),
    ("manifest", siltdb::fuzzing::manifest),
    ("table", siltdb::fuzzing::table),
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
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
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
    match siltdb::filename::parse(name) {
        Some(siltdb::filename::FileKind::Wal(n))
        | Some(siltdb::filename::FileKind::Manifest(n)) => n,
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
