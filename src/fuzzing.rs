//! Entry points for the fuzz targets in `fuzz/` and for the test that replays their corpus on
//! stable Rust. Each takes arbitrary bytes, runs one decoder over them, and must never panic
//! or allocate more than a small multiple of the input. [`directory`] goes further: it opens a
//! whole database directory built from the bytes and judges the answers too. Not part of the
//! stable API.

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
