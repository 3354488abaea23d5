//! The write-ahead log: one record per committed write group.
//!
//! A WAL file `NNNNNN.wal` is a record log (see [`crate::record`]) whose payloads are
//!
//! ```text
//! payload := first_seq u64 LE | count u32 LE | op*count
//! op      := kind u8 (1 = put, 0 = delete) | varint key_len | key | [varint value_len | value]
//! ```
//!
//! The ops of a payload get sequence numbers `first_seq, first_seq + 1, ...`. A payload is
//! applied whole or not at all, which is what makes a batch atomic across a crash.

use crate::encoding::{put_bytes, put_u32, put_u64, Reader};
use crate::error::{io_context, Error, Result};
use crate::fs::{FileSystem, WritableFile};
use crate::key::{SeqNo, ValueKind};
use crate::record::{self, RecordReader, RecordWriter, TailReport, HEADER_LEN};
use bytes::Bytes;
use std::path::{Path, PathBuf};

/// Size of the fixed part of a payload (`first_seq`, `count`).
pub(crate) const PAYLOAD_HEADER_LEN: usize = 12;

/// Appends one operation in the WAL op encoding.
pub(crate) fn encode_op(out: &mut Vec<u8>, kind: ValueKind, key: &[u8], value: &[u8]) {
    out.push(kind as u8);
    put_bytes(out, key);
    if kind == ValueKind::Put {
        put_bytes(out, value);
    }
}

/// One decoded operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Op<K> {
    pub(crate) kind: ValueKind,
    pub(crate) key: K,
    pub(crate) value: K,
}

/// Decodes the ops of `count` operations; `None` if the bytes are malformed.
pub(crate) fn decode_ops(ops: &[u8], count: u32) -> Option<Vec<Op<&[u8]>>> {
    let mut r = Reader::new(ops);
    let mut out = Vec::with_capacity((count as usize).min(ops.len()));
    for _ in 0..count {
        let kind = ValueKind::from_u8(r.u8()?)?;
        let key = r.length_prefixed()?;
        let value = match kind {
            ValueKind::Put => r.length_prefixed()?,
            ValueKind::Delete => &[][..],
        };
        out.push(Op { kind, key, value });
    }
    r.is_empty().then_some(out)
}

/// A decoded WAL payload.
#[derive(Debug)]
pub(crate) struct WalBatch {
    /// Offset of its record in the WAL file (0 when decoded from bytes alone).
    pub(crate) offset: u64,
    pub(crate) first_seq: SeqNo,
    pub(crate) ops: Vec<Op<Bytes>>,
}

/// Decodes a payload; the ops share the payload's buffer.
pub(crate) fn decode_payload(payload: Vec<u8>) -> Option<WalBatch> {
    let mut r = Reader::new(&payload);
    let first_seq = r.u64()?;
    let count = r.u32()?;
    let buf = Bytes::from(payload);
    let ops_bytes = &buf[PAYLOAD_HEADER_LEN..];
    let decoded = decode_ops(ops_bytes, count)?;
    let base = buf.as_ptr() as usize;
    let slice = |s: &[u8]| {
        let start = s.as_ptr() as usize - base;
        buf.slice(start..start + s.len())
    };
    let ops = decoded
        .into_iter()
        .map(|op| Op {
            kind: op.kind,
            key: if op.key.is_empty() {
                Bytes::new()
            } else {
                slice(op.key)
            },
            value: if op.value.is_empty() {
                Bytes::new()
            } else {
                slice(op.value)
            },
        })
        .collect();
    Some(WalBatch {
        offset: 0,
        first_seq,
        ops,
    })
}

/// The WAL file being appended to.
#[derive(Debug)]
pub(crate) struct WalWriter {
    log: RecordWriter,
    number: u64,
    path: PathBuf,
    buf: Vec<u8>,
}

impl WalWriter {
    /// Creates a new WAL file. The caller syncs the directory before acknowledging writes.
    pub(crate) fn create(fs: &dyn FileSystem, path: &Path, number: u64) -> Result<WalWriter> {
        let file: Box<dyn WritableFile> =
            fs.create(path).map_err(|e| io_context("create", path, e))?;
        Ok(WalWriter {
            log: RecordWriter::new(file),
            number,
            path: path.to_path_buf(),
            buf: Vec::new(),
        })
    }

    /// Appends one record holding `count` ops (already encoded, in `parts`) starting at
    /// `first_seq`, with a single write: when this returns, the record is in the OS.
    pub(crate) fn append(&mut self, first_seq: SeqNo, count: u32, parts: &[&[u8]]) -> Result<()> {
        self.buf.clear();
        self.buf.resize(HEADER_LEN, 0);
        put_u64(&mut self.buf, first_seq);
        put_u32(&mut self.buf, count);
        for p in parts {
            self.buf.extend_from_slice(p);
        }
        record::frame_in_place(&mut self.buf, self.number);
        let res = self.log.append_framed(&self.buf);
        if self.buf.capacity() > (1 << 20) {
            self.buf = Vec::new();
        }
        res.map_err(|e| io_context("append", &self.path, e))
    }

    /// fdatasync of the WAL file.
    pub(crate) fn sync(&mut self) -> Result<()> {
        if crate::sabotage::planted(crate::sabotage::Bug::SkipWalFsync) {
            return Ok(());
        }
        self.log
            .sync()
            .map_err(|e| io_context("sync", &self.path, e))
    }
}

/// Replays the WAL at `path`, calling `apply` for every payload in order. Returns what was cut
/// off as a torn tail. A malformed payload inside a record with a valid checksum, or a bad
/// record with valid ones after it, is [`Error::Corruption`].
pub(crate) fn replay(
    fs: &dyn FileSystem,
    path: &Path,
    number: u64,
    mut apply: impl FnMut(WalBatch) -> Result<()>,
) -> Result<TailReport> {
    let file = fs.open(path).map_err(|e| io_context("open", path, e))?;
    let mut reader = RecordReader::new(file, path, number);
    while let Some(rec) = reader.next()? {
        let offset = rec.offset;
        let mut batch = decode_payload(rec.payload).ok_or_else(|| {
            Error::corruption(
                path,
                offset,
                "WAL record has a valid checksum but bad contents",
            )
        })?;
        batch.offset = offset;
        apply(batch)?;
    }
    Ok(reader.tail())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::MemFs;

    #[test]
    fn append_and_replay() {
        let fs = MemFs::new();
        fs.create_dir_all(Path::new("/d")).unwrap();
        let p = Path::new("/d/000001.wal");
        let mut w = WalWriter::create(&fs, p, 1).unwrap();
        let mut ops = Vec::new();
        encode_op(&mut ops, ValueKind::Put, b"k1", b"v1");
        encode_op(&mut ops, ValueKind::Delete, b"k2", b"");
        w.append(10, 2, &[&ops]).unwrap();
        let mut more = Vec::new();
        encode_op(&mut more, ValueKind::Put, b"", b"empty key");
        w.append(12, 1, &[&more]).unwrap();
        w.sync().unwrap();

        let mut seen = Vec::new();
        let tail = replay(&fs, p, 1, |b| {
            seen.push(b);
            Ok(())
        })
        .unwrap();
        assert_eq!(tail.torn_at, None);
        assert_eq!(seen.len(), 2);
        assert_eq!(seen[0].first_seq, 10);
        assert_eq!(seen[0].ops[0].key, &b"k1"[..]);
        assert_eq!(seen[0].ops[0].value, &b"v1"[..]);
        assert_eq!(seen[0].ops[1].kind, ValueKind::Delete);
        assert_eq!(seen[1].ops[0].key, &b""[..]);
    }

    #[test]
    fn decode_rejects_garbage_without_panicking() {
        assert!(decode_payload(vec![]).is_none());
        assert!(decode_payload(vec![0; 12]).is_some()); // zero ops is well-formed
        let mut p = vec![0u8; 8];
        p.extend_from_slice(&5u32.to_le_bytes());
        p.extend_from_slice(&[1, 0xff, 0xff, 0xff, 0xff, 0x0f]);
        assert!(decode_payload(p).is_none());
        // Trailing bytes after the declared ops are rejected.
        let mut p = vec![0u8; 8];
        p.extend_from_slice(&0u32.to_le_bytes());
        p.push(7);
        assert!(decode_payload(p).is_none());
    }
}
