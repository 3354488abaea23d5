//! The write-ahead log: one record per committed write group.
//!
//! A WAL file `NNNNNN.wal` is a record log (see [`crate::record`]) whose payloads are
//!
//! ```text
//! payload := first_seq u64 LE | count u32 LE | op*count
//! op      := kind u8 | varint key_len | key | [varint value_len | value]
//! kind    := 0 delete key | 1 put key -> value | 2 range delete [key, value) |
//!            3 range delete [key, end of the key space) (no value)
//! ```
//!
//! The ops of a payload get sequence numbers `first_seq, first_seq + 1, ...`. A payload is
//! applied whole or not at all, which is what makes a batch atomic across a crash.
//!
//! Read back, a payload must be one a writer can have produced: its sequence numbers lie in
//! `1..MAX_SEQ` (0 is never assigned, and `MAX_SEQ` is kept for reads that see every write),
//! `count` fits in its bytes, and inside one file each record's sequence numbers start above
//! the previous record's.

use crate::batch::{MAX_KEY_SIZE, MAX_VALUE_SIZE};
use crate::encoding::{put_bytes, Reader};
use crate::error::{io_context, Error, Result};
use crate::fs::{FileSystem, WritableFile};
use crate::key::{SeqNo, MAX_SEQ};
use crate::options::LogWrites;
use crate::range_del::MAX_BOUND_LEN;
use crate::record::{self, RecordReader, RecordWriter, TailReport, HEADER_LEN};
use bytes::Bytes;
use parking_lot::{Condvar, Mutex};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Size of the fixed part of a payload (`first_seq`, `count`).
pub(crate) const PAYLOAD_HEADER_LEN: usize = 12;

/// The fewest bytes one op takes: the kind and a one-byte key length (an empty delete).
const MIN_OP_LEN: usize = 2;

/// Pieces a WAL record goes to the log in: its payload header, then up to `PIECES - 1`
/// batches copied into place as they are (a larger group is gathered into one buffer).
const PIECES: usize = 8;

/// What one operation of a batch does (its byte in the WAL op encoding).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum OpKind {
    /// Deletes `key`.
    Delete = 0,
    /// Sets `key` to `value`.
    Put = 1,
    /// Deletes every key in `[key, value)`.
    RangeDelete = 2,
    /// Deletes every key at or above `key`.
    RangeDeleteToEnd = 3,
}

impl OpKind {
    fn from_u8(b: u8) -> Option<OpKind> {
        match b {
            0 => Some(OpKind::Delete),
            1 => Some(OpKind::Put),
            2 => Some(OpKind::RangeDelete),
            3 => Some(OpKind::RangeDeleteToEnd),
            _ => None,
        }
    }

    /// True if the op carries a second byte string (a value, or a range's end).
    fn has_value(self) -> bool {
        matches!(self, OpKind::Put | OpKind::RangeDelete)
    }
}

/// Appends one operation in the WAL op encoding.
pub(crate) fn encode_op(out: &mut Vec<u8>, kind: OpKind, key: &[u8], value: &[u8]) {
    out.push(kind as u8);
    put_bytes(out, key);
    if kind.has_value() {
        put_bytes(out, value);
    }
}

/// One decoded operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Op<K> {
    pub(crate) kind: OpKind,
    pub(crate) key: K,
    /// The value of a put, the end of a bounded range delete; empty otherwise.
    pub(crate) value: K,
}

/// Decodes the ops of `count` operations; `None` if the bytes are malformed.
pub(crate) fn decode_ops(ops: &[u8], count: u32) -> Option<Vec<Op<&[u8]>>> {
    // A forged count (up to half the payload's bytes) reserves no more than this up front.
    let mut out = Vec::with_capacity((count as usize).min(ops.len()).min(1 << 16));
    walk_ops(ops, count, |op| out.push(op)).then_some(out)
}

/// Calls `f` with each of the `count` operations encoded in `ops`, in order; false if the
/// bytes are malformed (after calling `f` for the well-formed ones before the fault: check a
/// batch with a no-op `f` first where nothing may be applied from a malformed one).
pub(crate) fn walk_ops<'a>(ops: &'a [u8], count: u32, mut f: impl FnMut(Op<&'a [u8]>)) -> bool {
    let mut r = Reader::new(ops);
    for _ in 0..count {
        let Some(op) = next_op(&mut r) else {
            return false;
        };
        f(op);
    }
    r.is_empty()
}

fn next_op<'a>(r: &mut Reader<'a>) -> Option<Op<&'a [u8]>> {
    let kind = OpKind::from_u8(r.u8()?)?;
    let key = r.length_prefixed()?;
    let value = if kind.has_value() {
        r.length_prefixed()?
    } else {
        &[][..]
    };
    // No writer makes longer keys and values than a batch accepts (a range's bounds: a key
    // and one byte): a longer one would reach tables whose readers rely on the limits.
    // Nor an empty or inverted range (a batch refuses one; a table's fragments are checked
    // the same way), which would cover no key and still take a sequence number.
    let ranged = matches!(kind, OpKind::RangeDelete | OpKind::RangeDeleteToEnd);
    let fits = if ranged {
        key.len() <= MAX_BOUND_LEN
            && value.len() <= MAX_BOUND_LEN
            && (kind == OpKind::RangeDeleteToEnd || key < value)
    } else {
        key.len() <= MAX_KEY_SIZE && value.len() <= MAX_VALUE_SIZE
    };
    fits.then_some(Op { kind, key, value })
}

/// A decoded WAL payload.
#[derive(Debug)]
pub(crate) struct WalBatch {
    /// Offset of its record in the WAL file (0 when decoded from bytes alone).
    pub(crate) offset: u64,
    pub(crate) first_seq: SeqNo,
    pub(crate) ops: Vec<Op<Bytes>>,
}

impl WalBatch {
    /// The sequence number of the last op; `None` for a record without ops. Cannot overflow:
    /// [`decode_payload`] checked that it is below [`MAX_SEQ`].
    pub(crate) fn last_seq(&self) -> Option<SeqNo> {
        let count = u64::try_from(self.ops.len()).ok()?;
        self.first_seq.checked_add(count.checked_sub(1)?)
    }
}

/// Checks the fixed fields of a payload against each other and its size: `Err` says why no
/// writer can have written them.
fn check_counts(first_seq: SeqNo, count: u32, ops_len: usize) -> std::result::Result<(), String> {
    let room = ops_len / MIN_OP_LEN;
    if usize::try_from(count).ok().is_none_or(|c| c > room) {
        return Err(format!(
            "{count} ops cannot fit in {ops_len} bytes (each takes at least {MIN_OP_LEN})"
        ));
    }
    if count == 0 {
        // No op gets a sequence number; still, no writer puts one out of range there.
        return if first_seq <= MAX_SEQ {
            Ok(())
        } else {
            Err(format!("sequence number {first_seq} is above {MAX_SEQ}"))
        };
    }
    if first_seq == 0 {
        return Err("sequence number 0 is never assigned".into());
    }
    // No writer assigns `MAX_SEQ` itself: reads use it as "newest" (see `engine::write`).
    match first_seq.checked_add(u64::from(count) - 1) {
        Some(last) if last < MAX_SEQ => Ok(()),
        _ => Err(format!(
            "{count} ops from sequence number {first_seq} reach {MAX_SEQ}, which no writer assigns"
        )),
    }
}

/// Decodes a payload; the ops share the payload's buffer. `Err` says what is malformed.
pub(crate) fn decode_payload(payload: Vec<u8>) -> std::result::Result<WalBatch, String> {
    let mut r = Reader::new(&payload);
    let (first_seq, count) = match (r.u64(), r.u32()) {
        (Some(s), Some(c)) => (s, c),
        _ => {
            return Err(format!(
                "payload of {} bytes is shorter than its {PAYLOAD_HEADER_LEN}-byte header",
                payload.len()
            ))
        }
    };
    let buf = Bytes::from(payload);
    let ops_bytes = &buf[PAYLOAD_HEADER_LEN..];
    check_counts(first_seq, count, ops_bytes.len())?;
    let decoded = decode_ops(ops_bytes, count).ok_or("malformed ops")?;
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
    Ok(WalBatch {
        offset: 0,
        first_seq,
        ops,
    })
}

/// The outcome of a WAL's seal (its fsync, sync mark and cut) when another thread runs it
/// after the next WAL has taken over: the next WAL waits for it before any fsync of its own
/// ([`WalWriter::follow`]), so that a later WAL is never made durable while an earlier one may
/// still lose its end to a power loss, and recovery can read a WAL that lost its end as the
/// end of the history (`docs/durability.md`).
#[derive(Debug, Default)]
pub(crate) struct WalSeal {
    outcome: Mutex<Option<Result<()>>>,
    done: Condvar,
}

impl WalSeal {
    /// Records the seal's outcome and wakes its waiters; only the first outcome counts.
    pub(crate) fn complete(&self, outcome: Result<()>) {
        let mut o = self.outcome.lock();
        if o.is_none() {
            *o = Some(outcome);
        }
        self.done.notify_all();
    }

    /// True once the seal has an outcome (a wait would return at once).
    pub(crate) fn is_complete(&self) -> bool {
        self.outcome.lock().is_some()
    }

    /// Waits until the seal is complete and returns its outcome.
    pub(crate) fn wait(&self) -> Result<()> {
        let mut o = self.outcome.lock();
        loop {
            if let Some(r) = &*o {
                return r.clone();
            }
            self.done.wait(&mut o);
        }
    }
}

/// The WAL file being appended to.
#[derive(Debug)]
pub(crate) struct WalWriter {
    log: RecordWriter,
    number: u64,
    path: PathBuf,
    buf: Vec<u8>,
    /// The first failed append or fsync: every later one fails with it. After a failed fsync
    /// the kernel may have dropped the dirty pages, so a later fsync that succeeds proves
    /// nothing; no write may be acknowledged through this WAL again.
    failed: Option<Error>,
    /// The sequence number of the last operation appended (0 before any).
    last_seq: SeqNo,
    /// Records were appended since the last sync mark (see [`is_sync_mark`]).
    unmarked: bool,
    /// The seal of the WAL before this one, still running on another thread: every fsync of
    /// this WAL waits for it first (see [`follow`](Self::follow)).
    after: Option<Arc<WalSeal>>,
}

/// True if a WAL payload is a *sync mark*: no operations (`count` 0). The writer appends one
/// after every fsync of a WAL that got records since the last one (a synced write group,
/// `Db::sync`, the seal or close of the WAL), so that recovery can tell a page lost by a power
/// loss in the unsynced end of the log, which it cuts off, from damage to bytes an fsync wrote,
/// which is corruption (`docs/format.md` §3). Any record with no operations counts: no other
/// writer appends one.
pub(crate) fn is_sync_mark(payload: &[u8]) -> bool {
    payload.len() == PAYLOAD_HEADER_LEN && payload[8..12] == [0, 0, 0, 0]
}

impl WalWriter {
    /// Creates a new WAL file, written as `how` says. The caller syncs the directory before
    /// any fsync of it returns (the seal of the WAL before it does, see [`follow`](Self::follow)).
    pub(crate) fn create(
        fs: &dyn FileSystem,
        path: &Path,
        number: u64,
        how: LogWrites,
    ) -> Result<WalWriter> {
        let file: Box<dyn WritableFile> = match how {
            LogWrites::Mapped => fs.create_log(path),
            LogWrites::Syscall => fs.create(path),
        }
        .map_err(|e| io_context("create", path, e))?;
        Ok(WalWriter {
            log: RecordWriter::new(file),
            number,
            path: path.to_path_buf(),
            buf: Vec::new(),
            failed: None,
            last_seq: 0,
            unmarked: false,
            after: None,
        })
    }

    /// The WAL's file number.
    pub(crate) fn number(&self) -> u64 {
        self.number
    }

    /// The WAL's file.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Makes every fsync of this WAL wait until `seal`, the seal of the WAL before it, is
    /// complete, and fail with its error if it failed: a record of this WAL is made durable
    /// only once every earlier WAL is durable whole. Appends do not wait.
    pub(crate) fn follow(&mut self, seal: Arc<WalSeal>) {
        self.after = Some(seal);
    }

    /// Tells the file that appends are coming soon ([`WritableFile::expect_appends`]): a WAL
    /// started by a memtable rotation, whose writer is busy, so that its first space is
    /// allocated while the rotation puts the new WAL and memtable in place. (A WAL started
    /// by `open` gets no hint: a database opened to read grows no 1 MiB WAL.)
    pub(crate) fn expect_appends(&mut self) {
        self.log.expect_appends();
    }

    /// True if a record of `ops_len` bytes of encoded ops would be appended with a copy into
    /// memory already in place ([`WritableFile::appends_in_memory`]), and this WAL has not
    /// failed.
    pub(crate) fn appends_in_memory(&self, ops_len: usize) -> bool {
        self.failed.is_none() && self.log.appends_in_memory(PAYLOAD_HEADER_LEN + ops_len)
    }

    /// Appends one record holding `count` ops (already encoded, in `parts`) starting at
    /// `first_seq`, with a single write: when this returns, the record is in the OS.
    pub(crate) fn append<'a>(
        &mut self,
        first_seq: SeqNo,
        count: u32,
        parts: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<()> {
        self.check_not_failed()?;
        // The payload: the sequence number and count, then the batches. Its CRC comes from
        // those pieces, not read back from a buffer just written (see `record::header`).
        let mut prefix = [0u8; PAYLOAD_HEADER_LEN];
        prefix[..8].copy_from_slice(&first_seq.to_le_bytes());
        prefix[8..].copy_from_slice(&count.to_le_bytes());
        let mut crc = crc32fast::Hasher::new();
        crc.update(&prefix);
        self.buf.clear();
        let res = if self.log.takes_pieces() {
            // Up to `PIECES - 1` batches go to the file as they are, each copied once into
            // place; a larger group is gathered into `buf` first.
            let mut len = PAYLOAD_HEADER_LEN;
            let mut pieces: [&[u8]; PIECES] = [&[]; PIECES];
            pieces[0] = &prefix;
            let mut used = 1;
            for p in parts {
                crc.update(p);
                len += p.len();
                if used < PIECES {
                    pieces[used] = p;
                    used += 1;
                } else {
                    if self.buf.is_empty() {
                        for q in &pieces[1..] {
                            self.buf.extend_from_slice(q);
                        }
                    }
                    self.buf.extend_from_slice(p);
                }
            }
            if !self.buf.is_empty() {
                pieces[1] = &self.buf;
                used = 2;
            }
            // (A group is one batch or at most 1 MiB of them: always under `MAX_PAYLOAD`.)
            let head = record::header(len, crc.finalize(), self.number);
            self.log.append_framed_parts(&head, &pieces[..used])
        } else {
            // A file that would only concatenate the pieces: the record is built in `buf`,
            // reused from one append to the next, and written with one call.
            self.buf.resize(HEADER_LEN, 0);
            self.buf.extend_from_slice(&prefix);
            for p in parts {
                crc.update(p);
                self.buf.extend_from_slice(p);
            }
            let head = record::header(self.buf.len() - HEADER_LEN, crc.finalize(), self.number);
            self.buf[..HEADER_LEN].copy_from_slice(&head);
            self.log.append_framed(&self.buf)
        };
        if self.buf.capacity() > (1 << 20) {
            self.buf = Vec::new();
        }
        let res = res.map_err(|e| io_context("append", &self.path, e));
        if res.is_ok() && count > 0 {
            self.last_seq = first_seq + u64::from(count) - 1;
        }
        self.unmarked = true;
        self.remember_failure(res)
    }

    /// fdatasyncs the WAL file, then appends a sync mark if records came since the last one.
    /// Errors: the fsync's (or an earlier append's or fsync's); a failed mark does not fail
    /// a sync that succeeded (see [`mark`](Self::mark)).
    pub(crate) fn sync(&mut self) -> Result<()> {
        self.durable(RecordWriter::sync)?;
        self.mark();
        Ok(())
    }

    /// Appends a sync mark after a successful fsync, if records came since the last one:
    /// after, never before, so that a mark that reached the disk proves every byte before it
    /// did. Its `first_seq` is the last operation it follows; it has none of its own. It is
    /// synced by the next fsync, or lost with the unsynced end. A failed append is logged and
    /// latched (every later append and sync returns it, as for any failed append), but the
    /// writes the fsync covered are durable, so it does not fail that sync; the log is only
    /// left without this mark.
    fn mark(&mut self) {
        if !self.unmarked {
            return;
        }
        if let Err(e) = self.append(self.last_seq, 0, std::iter::empty()) {
            log::warn!("{}: no sync mark after a sync: {e}", self.path.display());
        }
        // (`append` sets it for records, this one included.)
        self.unmarked = false;
    }

    /// Ends the WAL (it is no longer written): syncs it and appends a sync mark (if records
    /// came since the last one), then gives back the space allocated ahead of the writer and
    /// syncs the file and its length. A mark that could not be appended does not stop the
    /// rest (the records before it are whole), but its failure is returned afterwards: the
    /// WAL is not written again, so returning it is what stops writes, as any failed append
    /// of the WAL does. Errors: a failed fsync, or an earlier failure (an append's, a
    /// mark's).
    pub(crate) fn finish(&mut self) -> Result<()> {
        self.check_not_failed()?;
        if self.unmarked {
            self.sync()?;
        }
        // Only a failed mark can stand here (latched by its append): the cut and the sync
        // run regardless, then it is returned.
        self.run(RecordWriter::finish)?;
        self.check_not_failed()
    }

    /// Runs `op` (a sync of the log), unless an earlier failure stands; a failure stands for
    /// every later call.
    fn durable(&mut self, op: fn(&mut RecordWriter) -> std::io::Result<()>) -> Result<()> {
        self.check_not_failed()?;
        self.run(op)
    }

    /// The seal of the WAL before this one, while this WAL has not seen it complete: a caller
    /// that must not hold the lock around this writer while it waits (`Db::sync`, whose wait
    /// would hold up unsynced writers) waits on it first.
    pub(crate) fn previous_seal(&self) -> Option<Arc<WalSeal>> {
        self.after.clone()
    }

    /// Waits until the WAL before this one is sealed, if it is not yet (see
    /// [`follow`](Self::follow)): what every fsync of this WAL does first. A caller that times
    /// its fsync calls this before it starts the clock. Errors: the seal's failure, which
    /// stands for every later append and fsync.
    pub(crate) fn wait_for_previous_seal(&mut self) -> Result<()> {
        if let Some(seal) = &self.after {
            let sealed = seal.wait();
            if sealed.is_err() {
                return self.remember_failure(sealed);
            }
            self.after = None;
        }
        Ok(())
    }

    /// Runs `op` (a sync of the log), once the WAL before this one is sealed; its failure
    /// (or the seal's) stands for every later call.
    fn run(&mut self, op: fn(&mut RecordWriter) -> std::io::Result<()>) -> Result<()> {
        self.wait_for_previous_seal()?;
        if crate::sabotage::planted(crate::sabotage::Bug::SkipWalFsync) {
            return Ok(());
        }
        let res = op(&mut self.log).map_err(|e| io_context("sync", &self.path, e));
        self.remember_failure(res)
    }

    /// The earlier failure every later append and fsync returns, if there was one.
    pub(crate) fn check_not_failed(&self) -> Result<()> {
        self.failed.clone().map_or(Ok(()), Err)
    }

    /// Passes `res` on, keeping its error for every later call.
    fn remember_failure(&mut self, res: Result<()>) -> Result<()> {
        if let Err(e) = &res {
            self.failed = Some(e.clone());
        }
        res
    }
}

/// Replays the WAL at `path`, calling `apply` for every payload in order. Returns what was cut
/// off as a torn tail. A malformed payload inside a record with a valid checksum, a record
/// whose sequence numbers do not start above the previous record's in this file, or a bad
/// record with valid ones after it, is [`Error::Corruption`]. `live`: another process may be
/// appending to the WAL as it is read (a read-only open), see [`RecordReader::live`].
pub(crate) fn replay(
    fs: &dyn FileSystem,
    path: &Path,
    number: u64,
    live: bool,
    mut apply: impl FnMut(WalBatch) -> Result<()>,
) -> Result<TailReport> {
    let file = fs.open(path).map_err(|e| io_context("open", path, e))?;
    let mut reader = RecordReader::new(file, path, number).lost_pages_after_sync(is_sync_mark);
    if live {
        reader = reader.live();
    }
    let mut prev_last: Option<SeqNo> = None;
    while let Some(rec) = reader.next()? {
        let offset = rec.offset;
        let mut batch = decode_payload(rec.payload).map_err(|d| {
            Error::corruption(
                path,
                offset,
                format!("WAL record has a valid checksum but bad contents: {d}"),
            )
        })?;
        if let Some(last) = batch.last_seq() {
            if let Some(prev) = prev_last.filter(|&p| batch.first_seq <= p) {
                return Err(Error::corruption(
                    path,
                    offset,
                    format!(
                        "sequence numbers go backwards: the record starts at {} but the one before it ended at {prev}",
                        batch.first_seq
                    ),
                ));
            }
            prev_last = Some(last);
        }
        batch.offset = offset;
        apply(batch)?;
    }
    Ok(reader.tail())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encoding::{put_u32, put_u64};
    use crate::fs::MemFs;

    #[test]
    fn a_failed_sync_fails_every_later_append_and_sync() {
        use crate::fs::{FaultPlan, OpKind as FsOp};
        let fs = MemFs::new();
        fs.create_dir_all(Path::new("/d")).unwrap();
        let p = Path::new("/d/000001.wal");
        let mut w = WalWriter::create(&fs, p, 1, LogWrites::Mapped).unwrap();
        let mut ops = Vec::new();
        encode_op(&mut ops, OpKind::Put, b"k", b"v");
        w.append(1, 1, [&ops[..]]).unwrap();
        fs.set_fault(Some(FaultPlan::nth(FsOp::Sync, 0)));
        assert!(matches!(w.sync(), Err(Error::Io(_))));
        assert_eq!(fs.faults_injected(), 1);
        fs.set_fault(None);
        // The device works again, but the pages the failed fsync dropped are gone: nothing
        // may succeed through this WAL any more, and the file system is not even asked.
        let ops_before = fs.op_count();
        assert!(matches!(w.sync(), Err(Error::Io(_))));
        assert!(matches!(w.append(2, 1, [&ops[..]]), Err(Error::Io(_))));
        assert_eq!(fs.op_count(), ops_before);
    }

    #[test]
    fn append_and_replay() {
        let fs = MemFs::new();
        fs.create_dir_all(Path::new("/d")).unwrap();
        let p = Path::new("/d/000001.wal");
        let mut w = WalWriter::create(&fs, p, 1, LogWrites::Mapped).unwrap();
        let mut ops = Vec::new();
        encode_op(&mut ops, OpKind::Put, b"k1", b"v1");
        encode_op(&mut ops, OpKind::Delete, b"k2", b"");
        w.append(10, 2, [&ops[..]]).unwrap();
        let mut more = Vec::new();
        encode_op(&mut more, OpKind::Put, b"", b"empty key");
        w.append(12, 1, [&more[..]]).unwrap();
        w.sync().unwrap();

        let mut seen = Vec::new();
        let tail = replay(&fs, p, 1, false, |b| {
            seen.push(b);
            Ok(())
        })
        .unwrap();
        assert_eq!(tail.torn_at, None);
        // The two records, and the sync mark after them.
        assert_eq!(seen.len(), 3);
        assert_eq!((seen[2].first_seq, seen[2].ops.len()), (12, 0));
        assert_eq!(seen[0].first_seq, 10);
        assert_eq!(seen[0].ops[0].key, &b"k1"[..]);
        assert_eq!(seen[0].ops[0].value, &b"v1"[..]);
        assert_eq!(seen[0].ops[1].kind, OpKind::Delete);
        assert_eq!(seen[1].ops[0].key, &b""[..]);
    }

    /// A group of batches goes to the log in pieces (up to `PIECES - 1` batches as they are,
    /// more gathered into one buffer): on the OS file system (a mapped log) and in memory,
    /// every group size reads back as the same operations, in order.
    #[test]
    fn groups_of_any_number_of_batches_read_back_whole() {
        let dir = tempfile::tempdir().unwrap();
        let mem = MemFs::new();
        mem.create_dir_all(Path::new("/d")).unwrap();
        let os_path = dir.path().join("000001.wal");
        let systems: [(&dyn FileSystem, &Path); 2] = [
            (&crate::fs::OsFs, os_path.as_path()),
            (&mem, Path::new("/d/000001.wal")),
        ];
        for (fs, p) in systems {
            let mut w = WalWriter::create(fs, p, 1, LogWrites::Mapped).unwrap();
            let mut want = Vec::new();
            let mut seq = 1;
            for batches in [1usize, PIECES - 1, PIECES, PIECES + 5, 3 * PIECES] {
                let encoded: Vec<Vec<u8>> = (0..batches)
                    .map(|b| {
                        let mut ops = Vec::new();
                        let key = format!("g{batches}b{b}");
                        encode_op(&mut ops, OpKind::Put, key.as_bytes(), &vec![b as u8; b * 3]);
                        want.push((key.into_bytes(), vec![b as u8; b * 3]));
                        ops
                    })
                    .collect();
                w.append(seq, batches as u32, encoded.iter().map(Vec::as_slice))
                    .unwrap();
                seq += batches as u64;
            }
            w.sync().unwrap();
            let mut got = Vec::new();
            let mut next_seq = 1;
            let tail = replay(fs, p, 1, false, |b| {
                if !b.ops.is_empty() {
                    assert_eq!(b.first_seq, next_seq);
                    next_seq += b.ops.len() as u64;
                }
                for op in &b.ops {
                    got.push((op.key.to_vec(), op.value.to_vec()));
                }
                Ok(())
            })
            .unwrap();
            assert_eq!(tail.torn_at, None);
            assert_eq!(got, want);
        }
    }

    #[test]
    fn range_delete_bounds_longer_than_a_key_and_a_byte_are_malformed() {
        for (start, end) in [
            (MAX_BOUND_LEN, 1),
            (1, MAX_BOUND_LEN),
            (MAX_BOUND_LEN + 1, 1),
            (1, MAX_BOUND_LEN + 1),
        ] {
            let mut ops = Vec::new();
            encode_op(
                &mut ops,
                OpKind::RangeDelete,
                &vec![0; start],
                &vec![1; end],
            );
            let ok = start <= MAX_BOUND_LEN && end <= MAX_BOUND_LEN;
            assert_eq!(decode_ops(&ops, 1).is_some(), ok, "{start} {end}");
        }
        let mut ops = Vec::new();
        encode_op(
            &mut ops,
            OpKind::RangeDeleteToEnd,
            &vec![0; MAX_BOUND_LEN + 1],
            &[],
        );
        assert!(decode_ops(&ops, 1).is_none());
        // An empty or inverted range: no writer logs one.
        for (start, end, ok) in [("a", "b", true), ("a", "a", false), ("b", "a", false)] {
            let mut ops = Vec::new();
            encode_op(
                &mut ops,
                OpKind::RangeDelete,
                start.as_bytes(),
                end.as_bytes(),
            );
            assert_eq!(decode_ops(&ops, 1).is_some(), ok, "{start}..{end}");
        }
        // Puts and deletes: keys and values as a batch accepts them, no longer.
        for (kind, key, value, ok) in [
            (OpKind::Put, MAX_KEY_SIZE, 1, true),
            (OpKind::Put, MAX_KEY_SIZE + 1, 1, false),
            (OpKind::Delete, MAX_KEY_SIZE, 0, true),
            (OpKind::Delete, MAX_KEY_SIZE + 1, 0, false),
            (OpKind::Put, 1, MAX_VALUE_SIZE + 1, false),
        ] {
            let mut ops = Vec::new();
            encode_op(&mut ops, kind, &vec![7; key], &vec![8; value]);
            assert_eq!(decode_ops(&ops, 1).is_some(), ok, "{kind:?} {key} {value}");
        }
    }

    #[test]
    fn walking_ops_sees_each_in_order_and_fails_on_a_short_or_long_count() {
        let mut ops = Vec::new();
        encode_op(&mut ops, OpKind::Put, b"a", b"1");
        encode_op(&mut ops, OpKind::Delete, b"b", &[]);
        encode_op(&mut ops, OpKind::Put, b"c", b"33");
        let mut seen = Vec::new();
        assert!(walk_ops(&ops, 3, |op| seen.push((
            op.kind,
            op.key.to_vec(),
            op.value.to_vec()
        ))));
        assert_eq!(
            seen,
            vec![
                (OpKind::Put, b"a".to_vec(), b"1".to_vec()),
                (OpKind::Delete, b"b".to_vec(), vec![]),
                (OpKind::Put, b"c".to_vec(), b"33".to_vec()),
            ]
        );
        // Bytes left over, or missing, make the batch malformed.
        assert!(!walk_ops(&ops, 2, |_| ()));
        assert!(!walk_ops(&ops, 4, |_| ()));
        assert!(!walk_ops(&ops[..ops.len() - 1], 3, |_| ()));
        assert_eq!(decode_ops(&ops, 3).map(|v| v.len()), Some(3));
    }

    #[test]
    fn decode_rejects_garbage_without_panicking() {
        assert!(decode_payload(vec![]).is_err());
        assert!(decode_payload(vec![0; 12]).is_ok()); // zero ops is well-formed
        let mut p = vec![0u8; 8];
        p.extend_from_slice(&5u32.to_le_bytes());
        p.extend_from_slice(&[1, 0xff, 0xff, 0xff, 0xff, 0x0f]);
        assert!(decode_payload(p).is_err());
        // Trailing bytes after the declared ops are rejected.
        let mut p = vec![0u8; 8];
        p.extend_from_slice(&0u32.to_le_bytes());
        p.push(7);
        assert!(decode_payload(p).is_err());
    }

    /// A payload of `count` empty deletes starting at `first_seq`.
    fn payload(first_seq: u64, count: u32) -> Vec<u8> {
        let mut p = Vec::new();
        put_u64(&mut p, first_seq);
        put_u32(&mut p, count);
        for _ in 0..count {
            encode_op(&mut p, OpKind::Delete, b"", b"");
        }
        p
    }

    #[test]
    fn decode_range_checks_sequence_numbers() {
        assert_eq!(
            decode_payload(payload(MAX_SEQ - 1, 1)).unwrap().last_seq(),
            Some(MAX_SEQ - 1)
        );
        assert_eq!(
            decode_payload(payload(MAX_SEQ - 3, 3)).unwrap().last_seq(),
            Some(MAX_SEQ - 1)
        );
        assert_eq!(decode_payload(payload(7, 0)).unwrap().last_seq(), None);
        // A sync mark (no ops) may carry any first_seq up to MAX_SEQ itself.
        assert_eq!(
            decode_payload(payload(MAX_SEQ, 0)).unwrap().last_seq(),
            None
        );
        for (first, count) in [
            (MAX_SEQ, 1),     // the last op would get MAX_SEQ, which no writer assigns
            (MAX_SEQ - 2, 3), // likewise, reached from below
            (MAX_SEQ, 2),
            (MAX_SEQ + 1, 1),
            (u64::MAX, 1),
            (u64::MAX - 1, 3), // first_seq + count - 1 overflows a u64
            (0, 1),            // sequence 0 is never assigned
            (u64::MAX, 0),
        ] {
            assert!(
                decode_payload(payload(first, count)).is_err(),
                "first_seq {first} count {count}"
            );
        }
    }

    #[test]
    fn decode_rejects_a_count_the_bytes_cannot_hold() {
        let mut p = payload(5, 2);
        p[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode_payload(p).is_err());
        let mut p = payload(5, 2);
        p[8..12].copy_from_slice(&3u32.to_le_bytes());
        assert!(decode_payload(p).is_err());
    }

    /// Writes records with the given (first_seq, count) to a WAL and replays it.
    fn replay_records(records: &[(u64, u32)]) -> (PathBuf, Vec<u64>, Result<TailReport>) {
        let fs = MemFs::new();
        fs.create_dir_all(Path::new("/d")).unwrap();
        let p = PathBuf::from("/d/000003.wal");
        let mut offsets = Vec::new();
        let mut bytes = Vec::new();
        for &(first, count) in records {
            offsets.push(bytes.len() as u64);
            bytes.extend_from_slice(&record::frame(&payload(first, count), 3).unwrap());
        }
        fs.write_file(&p, &bytes).unwrap();
        let res = replay(&fs, &p, 3, false, |_| Ok(()));
        (p, offsets, res)
    }

    #[test]
    fn sequence_numbers_going_backwards_in_a_file_are_corruption() {
        assert!(replay_records(&[(1, 2), (3, 1), (10, 5), (20, 0), (15, 1)])
            .2
            .is_ok());
        for (records, bad) in [
            (&[(1, 2), (2, 1)][..], 1),         // overlaps the record before
            (&[(5, 1), (5, 1)][..], 1),         // repeats it
            (&[(1, 1), (9, 3), (4, 1)][..], 2), // goes back
            (&[(1, 1), (8, 0), (1, 1)][..], 2), // an empty record in between changes nothing
        ] {
            let (path, offsets, res) = replay_records(records);
            match res {
                Err(Error::Corruption { file, offset, .. }) => {
                    assert_eq!((file, offset), (path, offsets[bad]), "{records:?}");
                }
                other => panic!("{records:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn overflowing_record_is_corruption_naming_the_wal() {
        let (path, offsets, res) = replay_records(&[(1, 1), (u64::MAX - 1, 3)]);
        match res {
            Err(Error::Corruption { file, offset, .. }) => {
                assert_eq!((file, offset), (path, offsets[1]));
            }
            other => panic!("{other:?}"),
        }
    }

    /// A database whose WAL holds two writes (sequence numbers 1 and 2), closed without a
    /// flush, and the path of that WAL.
    fn db_with_unflushed_wal() -> (MemFs, PathBuf) {
        let fs = MemFs::new();
        let opts = crate::Options::default().file_system(std::sync::Arc::new(fs.clone()));
        let db = crate::Db::open_with("/db", opts).unwrap();
        db.insert("a", "1").unwrap();
        db.insert("b", "2").unwrap();
        db.close().unwrap();
        let wal = fs
            .list(Path::new("/db"))
            .unwrap()
            .into_iter()
            .find(|n| n.ends_with(".wal"))
            .unwrap();
        (fs, Path::new("/db").join(wal))
    }

    /// Appends a record to the WAL at `path` and reopens the database: the error, and the
    /// offset the record went to.
    fn append_and_open(fs: &MemFs, path: &Path, payload: &[u8]) -> (Error, u64) {
        let number = wal_number(path);
        let mut bytes = fs.read_file(path).unwrap();
        let offset = bytes.len() as u64;
        bytes.extend_from_slice(&record::frame(payload, number).unwrap());
        fs.write_file(path, &bytes).unwrap();
        let opts = crate::Options::default().file_system(std::sync::Arc::new(fs.clone()));
        (crate::Db::open_with("/db", opts).unwrap_err(), offset)
    }

    #[test]
    fn open_refuses_a_wal_going_backwards() {
        let (fs, wal) = db_with_unflushed_wal();
        let (e, at) = append_and_open(&fs, &wal, &payload(2, 1));
        assert!(
            matches!(&e, Error::Corruption { file, offset, .. } if *file == wal && *offset == at),
            "{e:?}"
        );
    }

    #[test]
    fn open_refuses_a_wal_record_overflowing_the_sequence_numbers() {
        for (first, count) in [(u64::MAX - 1, 3), (MAX_SEQ, 2), (MAX_SEQ, 1), (3, u32::MAX)] {
            let (fs, wal) = db_with_unflushed_wal();
            let mut p = payload(first, count.min(4));
            p[8..12].copy_from_slice(&count.to_le_bytes());
            let (e, at) = append_and_open(&fs, &wal, &p);
            assert!(
                matches!(&e, Error::Corruption { file, offset, .. } if *file == wal && *offset == at),
                "{first} {count}: {e:?}"
            );
        }
    }

    #[test]
    fn open_refuses_a_wal_record_with_an_inverted_range_delete() {
        let (fs, wal) = db_with_unflushed_wal();
        let mut p = Vec::new();
        put_u64(&mut p, 3);
        put_u32(&mut p, 1);
        encode_op(&mut p, OpKind::RangeDelete, b"b", b"a");
        let (e, at) = append_and_open(&fs, &wal, &p);
        assert!(
            matches!(&e, Error::Corruption { file, offset, .. } if *file == wal && *offset == at),
            "{e:?}"
        );
    }

    fn put_payload(first_seq: u64, value: &[u8]) -> Vec<u8> {
        let mut p = Vec::new();
        put_u64(&mut p, first_seq);
        put_u32(&mut p, 1);
        encode_op(
            &mut p,
            OpKind::Put,
            format!("k{first_seq}").as_bytes(),
            value,
        );
        p
    }

    fn wal_number(path: &Path) -> u64 {
        match crate::filename::parse(path.file_name().unwrap().to_str().unwrap()) {
            Some(crate::filename::FileKind::Wal(n)) => n,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_writer_marks_each_sync_after_it_and_only_when_records_came() {
        let fs = MemFs::new();
        fs.create_dir_all(Path::new("/d")).unwrap();
        let p = Path::new("/d/000005.wal");
        let mut w = WalWriter::create(&fs, p, 5, LogWrites::Syscall).unwrap();
        w.sync().unwrap(); // nothing to mark
        w.append(1, 1, [payload(1, 1)[12..].as_ref()]).unwrap();
        w.append(2, 1, [payload(2, 1)[12..].as_ref()]).unwrap();
        w.sync().unwrap();
        w.sync().unwrap(); // no record since the mark: no second mark
        w.append(3, 1, [payload(3, 1)[12..].as_ref()]).unwrap();
        w.finish().unwrap();
        let mut seen = Vec::new();
        replay(&fs, p, 5, false, |b| {
            seen.push((b.first_seq, b.ops.len()));
            Ok(())
        })
        .unwrap();
        // Each mark names the last operation before it, and the whole file is synced.
        assert_eq!(seen, vec![(1, 1), (2, 1), (2, 0), (3, 1), (3, 0)]);
        assert!(is_sync_mark(&payload(2, 0)));
        assert!(!is_sync_mark(&payload(2, 1)));
        let image = fs.crash_image(crate::fs::CrashImageOptions {
            unsynced_data: crate::fs::UnsyncedData::Drop,
            keep_unsynced_dir_entries: true,
        });
        assert_eq!(image.read_file(p).unwrap(), fs.read_file(p).unwrap());
    }

    #[test]
    fn a_failed_mark_does_not_fail_the_sync_it_follows_but_every_later_append() {
        use crate::fs::{FaultPlan, OpKind as FsOp};
        let fs = MemFs::new();
        fs.create_dir_all(Path::new("/d")).unwrap();
        let p = Path::new("/d/000001.wal");
        let mut w = WalWriter::create(&fs, p, 1, LogWrites::Syscall).unwrap();
        let ops = &payload(1, 1)[12..];
        w.append(1, 1, [ops]).unwrap();
        // The next append is the mark after the sync.
        fs.set_fault(Some(FaultPlan::nth(FsOp::Write, 0)));
        w.sync().unwrap();
        assert_eq!(fs.faults_injected(), 1);
        fs.set_fault(None);
        assert!(matches!(w.append(2, 1, [ops]), Err(Error::Io(_))));
        assert!(matches!(w.sync(), Err(Error::Io(_))));
        // The synced record is whole; the half-written mark after it reads as a torn tail.
        let mut seen = Vec::new();
        let tail = replay(&fs, p, 1, false, |b| {
            seen.push((b.first_seq, b.ops.len()));
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, vec![(1, 1)]);
        assert!(tail.torn_at.is_some());
        // Ending a WAL whose last mark fails still cuts and syncs it, then returns the
        // failure (a rotation's, which stops writes; on a fresh writer).
        let q = Path::new("/d/000002.wal");
        let mut w = WalWriter::create(&fs, q, 2, LogWrites::Syscall).unwrap();
        fs.sync_dir(Path::new("/d")).unwrap();
        w.append(1, 1, [ops]).unwrap();
        fs.set_fault(Some(FaultPlan::nth(FsOp::Write, 0)));
        assert!(matches!(w.finish(), Err(Error::Io(_))));
        assert_eq!(fs.faults_injected(), 2);
        fs.set_fault(None);
        // The record was synced: a power loss keeps it.
        let image = fs.crash_image(crate::fs::CrashImageOptions::POWER_LOSS);
        let mut seen = Vec::new();
        replay(&image, q, 2, false, |b| {
            seen.push((b.first_seq, b.ops.len()));
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, vec![(1, 1)]);
    }

    #[test]
    fn a_wal_cut_at_lost_pages_ends_the_history_unless_a_later_wal_holds_a_sync_mark() {
        // A closed WAL (ends with a sync mark), then unsynced records over three pages, the
        // second of which a power loss lost.
        let (fs, wal) = db_with_unflushed_wal();
        let number = wal_number(&wal);
        let mut bytes = fs.read_file(&wal).unwrap();
        let mut seq = 3;
        while bytes.len() < 3 * 4096 {
            bytes.extend_from_slice(&record::frame(&put_payload(seq, &[7; 100]), number).unwrap());
            seq += 1;
        }
        bytes[4096..8192].fill(0);
        fs.write_file(&wal, &bytes).unwrap();
        let copy = fs.crash_image(crate::fs::CrashImageOptions::PROCESS_CRASH);
        let opts =
            |fs: &MemFs| crate::Options::default().file_system(std::sync::Arc::new(fs.clone()));
        // Alone, it is cut where the lost page starts to show.
        let db = crate::Db::open_with("/db", opts(&fs)).unwrap();
        assert_eq!(db.stats().wal_torn_tails, 1);
        assert!(db.get("k3").unwrap().is_some());
        assert!(db.get(format!("k{}", seq - 1)).unwrap().is_none());
        drop(db);
        // A later WAL's record after such a cut was never synced (a WAL is sealed whole before
        // any fsync of the next returns): it is dropped with the cut.
        let later = wal.with_file_name(format!("{:06}.wal", number + 1));
        let mut later_bytes = record::frame(&put_payload(seq, b"v"), number + 1).unwrap();
        let image = copy.crash_image(crate::fs::CrashImageOptions::PROCESS_CRASH);
        image.write_file(&later, &later_bytes).unwrap();
        let db = crate::Db::open_with("/db", opts(&image)).unwrap();
        assert!(db.get("k3").unwrap().is_some());
        assert!(db.get(format!("k{}", seq - 1)).unwrap().is_none());
        assert!(db.get(format!("k{seq}")).unwrap().is_none());
        drop(db);
        // A sync mark after it proves an fsync of the later WAL returned, which happens only
        // once the cut one was whole: the cut is damage.
        let mut mark = Vec::new();
        put_u64(&mut mark, seq);
        put_u32(&mut mark, 0);
        later_bytes.extend_from_slice(&record::frame(&mark, number + 1).unwrap());
        copy.write_file(&later, &later_bytes).unwrap();
        let e = crate::Db::open_with("/db", opts(&copy)).unwrap_err();
        assert!(
            matches!(&e, Error::Corruption { file, .. } if *file == later),
            "{e:?}"
        );
    }
}
