//! [`WriteBatch`]: several inserts, removes and range removes applied atomically by
//! [`Db::write`].
//!
//! [`Db::write`]: crate::Db::write

use crate::range_del::half_open;
use crate::wal::{self, OpKind};
use std::cell::Cell;
use std::ops::{Bound, RangeBounds};

/// Largest key accepted: 64 KiB.
pub const MAX_KEY_SIZE: usize = 64 << 10;
/// Largest value accepted: 256 MiB.
pub const MAX_VALUE_SIZE: usize = 256 << 20;
/// Largest encoded batch accepted: 1 GiB.
pub const MAX_BATCH_SIZE: usize = 1 << 30;
/// Most operations one batch may hold: 16,777,216 (2^24), so that a batch always fits in a
/// memtable, which holds at most about 2^25 entries and is sealed at about 14.7 million.
/// Adding more makes the batch invalid: `Db::write` then returns
/// [`Error::InvalidArgument`](crate::Error) and writes nothing.
pub const MAX_BATCH_OPS: u32 = 1 << 24;

/// An ordered list of inserts, removes and range removes that [`Db::write`](crate::Db::write) applies all
/// together or not at all, also across a crash. Later operations on the same key win.
///
/// Invalid operations (a key over [`MAX_KEY_SIZE`], a value over [`MAX_VALUE_SIZE`], more
/// than [`MAX_BATCH_OPS`] operations or [`MAX_BATCH_SIZE`] bytes) are remembered and make
/// `Db::write` return [`Error::InvalidArgument`](crate::Error) without writing anything.
#[derive(Clone, Debug, Default)]
pub struct WriteBatch {
    pub(crate) ops: Vec<u8>,
    pub(crate) count: u32,
    pub(crate) user_bytes: u64,
    pub(crate) invalid: Option<String>,
    /// Where the one operation of a batch made by [`WriteBatch::one`] lies in `ops`, so that
    /// the write path inserts it without decoding what it just encoded; `None` for any other
    /// batch (decoded and checked as usual).
    pub(crate) one: Option<OneOp>,
}

/// The one operation of a [`WriteBatch::one`] batch: its kind, and its key's and value's
/// byte ranges in the batch's encoding (the value runs to the encoding's end).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct OneOp {
    pub(crate) kind: OpKind,
    pub(crate) key_at: usize,
    pub(crate) key_len: usize,
    pub(crate) value_at: usize,
}

thread_local! {
    /// A batch buffer the write path is done with, for [`WriteBatch::for_one`].
    static SPARE_OPS: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// Buffers larger than this are freed rather than kept by [`recycle`].
const SPARE_OPS_MAX: usize = 4096;

/// Keeps `ops`, a batch's buffer whose contents were copied, emptied, for this thread's next
/// [`WriteBatch::for_one`] (up to [`SPARE_OPS_MAX`] bytes of capacity; a larger one is freed).
pub(crate) fn recycle(mut ops: Vec<u8>) {
    if ops.capacity() > 0 && ops.capacity() <= SPARE_OPS_MAX {
        ops.clear();
        let _ = SPARE_OPS.try_with(|s| s.set(ops));
    }
}

impl WriteBatch {
    /// An empty batch.
    pub fn new() -> WriteBatch {
        WriteBatch::default()
    }

    /// An empty batch with room for `bytes` of encoded operations (about key and value
    /// lengths plus 12 bytes per operation) before it reallocates; `new()` reserves nothing.
    /// The room is capped at [`MAX_BATCH_SIZE`]. No errors: over-limit operations are
    /// reported by `Db::write` as for any batch.
    pub fn with_capacity(bytes: usize) -> WriteBatch {
        WriteBatch {
            ops: Vec::with_capacity(bytes.min(MAX_BATCH_SIZE)),
            ..WriteBatch::default()
        }
    }

    /// An empty batch with room for `bytes` of one operation, in the buffer of a single
    /// write this thread led before ([`recycle`]) if there is one: a single write's batch
    /// is copied into the memtable, and its buffer would otherwise be freed and allocated
    /// again for the next write.
    pub(crate) fn for_one(bytes: usize) -> WriteBatch {
        let mut ops = SPARE_OPS.try_with(Cell::take).unwrap_or_default();
        ops.reserve(bytes);
        WriteBatch {
            ops,
            ..WriteBatch::default()
        }
    }

    /// A batch of one insert (`Put`) or removal (`Delete`) of `key`, whose sizes the caller
    /// has checked ([`check_sizes`]), in this thread's spare buffer ([`for_one`](Self::for_one)),
    /// knowing where its key and value lie ([`OneOp`]).
    fn one(kind: OpKind, key: &[u8], value: &[u8]) -> WriteBatch {
        debug_assert!(matches!(kind, OpKind::Put | OpKind::Delete));
        debug_assert!(check_sizes(key, value).is_ok());
        let mut b = WriteBatch::for_one(key.len() + value.len() + 12);
        b.push_checked(kind, key, value);
        // The encoding: kind, key length, key, then for an insert the value's length and
        // the value (`wal::encode_op`).
        let key_at = 1 + crate::encoding::varint_len(key.len() as u64);
        let value_at = b.ops.len() - if kind == OpKind::Put { value.len() } else { 0 };
        debug_assert_eq!(&b.ops[key_at..key_at + key.len()], key);
        debug_assert_eq!(
            &b.ops[value_at..],
            if kind == OpKind::Put { value } else { &[] }
        );
        b.one = Some(OneOp {
            kind,
            key_at,
            key_len: key.len(),
            value_at,
        });
        b
    }

    /// [`one`](Self::one) insert of `key` -> `value` (sizes checked by the caller).
    pub(crate) fn one_insert(key: &[u8], value: &[u8]) -> WriteBatch {
        WriteBatch::one(OpKind::Put, key, value)
    }

    /// [`one`](Self::one) removal of `key` (its size checked by the caller).
    pub(crate) fn one_remove(key: &[u8]) -> WriteBatch {
        WriteBatch::one(OpKind::Delete, key, &[])
    }

    fn push(&mut self, kind: OpKind, key: &[u8], value: &[u8]) {
        if self.invalid.is_some() {
            return;
        }
        if let Err(msg) = check_sizes(key, value) {
            self.invalid = Some(msg);
            return;
        }
        self.push_checked(kind, key, value);
    }

    fn push_checked(&mut self, kind: OpKind, key: &[u8], value: &[u8]) {
        // A second operation (or any change) makes the batch an ordinary one.
        self.one = None;
        if self.ops.len() + key.len() + value.len() + 24 > MAX_BATCH_SIZE
            || self.count >= MAX_BATCH_OPS
        {
            self.invalid = Some(format!(
                "batch larger than {MAX_BATCH_SIZE} bytes or {MAX_BATCH_OPS} operations"
            ));
            return;
        }
        wal::encode_op(&mut self.ops, kind, key, value);
        self.count += 1;
        self.user_bytes += (key.len() + value.len()) as u64;
    }

    /// Adds an insert of `key` -> `value`. A key over [`MAX_KEY_SIZE`] or a value over
    /// [`MAX_VALUE_SIZE`] makes the batch invalid: `Db::write` then returns
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) and writes none of it.
    pub fn insert(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> &mut Self {
        self.push(OpKind::Put, key.as_ref(), value.as_ref());
        self
    }

    /// Adds a removal of `key` (a tombstone). A key over [`MAX_KEY_SIZE`] makes the batch
    /// invalid, as for [`insert`](WriteBatch::insert).
    pub fn remove(&mut self, key: impl AsRef<[u8]>) -> &mut Self {
        self.push(OpKind::Delete, key.as_ref(), &[]);
        self
    }

    /// Adds a removal of every key in `range` (any [`RangeBounds`], as
    /// [`Db::range`](crate::Db::range) takes): one operation, whatever the number of keys.
    /// Like the batch's other operations it applies to what was written before it: a later
    /// insert into the range in the same batch survives.
    ///
    /// A range that holds no key (`a..a`, or an inverted one such as `b..a`) or whose bound
    /// is over [`MAX_KEY_SIZE`] makes the batch invalid: `Db::write` then returns
    /// [`Error::InvalidArgument`](crate::Error) and writes nothing.
    pub fn remove_range<K: AsRef<[u8]>, R: RangeBounds<K>>(&mut self, range: R) -> &mut Self {
        if self.invalid.is_some() {
            return self;
        }
        match range_bounds(&range) {
            Ok((start, Some(end))) => self.push_checked(OpKind::RangeDelete, &start, &end),
            Ok((start, None)) => self.push_checked(OpKind::RangeDeleteToEnd, &start, &[]),
            Err(msg) => self.invalid = Some(msg),
        }
        self
    }

    /// Number of operations in the batch.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// True if the batch holds no operation.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Removes every operation (and any remembered invalid one).
    pub fn clear(&mut self) {
        *self = WriteBatch::default();
    }
}

/// The `[start, end)` form of a range of keys (`end = None`: to the end of the key space);
/// `Err` if a bound is over [`MAX_KEY_SIZE`] or the range holds no key.
pub(crate) fn range_bounds<K: AsRef<[u8]>, R: RangeBounds<K>>(
    range: &R,
) -> Result<(Vec<u8>, Option<Vec<u8>>), String> {
    for b in [range.start_bound(), range.end_bound()] {
        if let Bound::Included(k) | Bound::Excluded(k) = b {
            check_sizes(k.as_ref(), &[])?;
        }
    }
    let (start, end) = half_open(
        range.start_bound().map(AsRef::as_ref),
        range.end_bound().map(AsRef::as_ref),
    );
    let start = start.map_or_else(Vec::new, |s| s.to_vec());
    let end = end.map(|e| e.to_vec());
    if end.as_ref().is_some_and(|e| *e <= start) {
        return Err("range delete over an empty or inverted range".to_string());
    }
    Ok((start, end))
}

/// Checks the size limits of one operation.
pub(crate) fn check_sizes(key: &[u8], value: &[u8]) -> Result<(), String> {
    if key.len() > MAX_KEY_SIZE {
        return Err(format!(
            "key of {} bytes is over the limit of {MAX_KEY_SIZE}",
            key.len()
        ));
    }
    if value.len() > MAX_VALUE_SIZE {
        return Err(format!(
            "value of {} bytes is over the limit of {MAX_VALUE_SIZE}",
            value.len()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_ops_in_order() {
        let mut b = WriteBatch::new();
        b.insert("a", "1").remove("b").insert("", "");
        assert_eq!(b.len(), 3);
        let ops = wal::decode_ops(&b.ops, b.count).unwrap();
        assert_eq!(ops[0].key, b"a");
        assert_eq!(ops[1].kind, OpKind::Delete);
        assert_eq!(ops[2].key, b"");
        assert!(b.invalid.is_none());
        b.clear();
        assert!(b.is_empty());
    }

    #[test]
    fn a_single_operation_knows_where_its_key_and_value_lie() {
        for (klen, vlen) in [
            (0, 0),
            (1, 0),
            (16, 100),
            (127, 128),
            (128, 127),
            (300, 20_000),
        ] {
            let key: Vec<u8> = (0..klen).map(|i| i as u8 ^ 0x5a).collect();
            let value: Vec<u8> = (0..vlen).map(|i| (i * 7) as u8).collect();
            for (b, kind) in [
                (WriteBatch::one_insert(&key, &value), OpKind::Put),
                (WriteBatch::one_remove(&key), OpKind::Delete),
            ] {
                // The same encoding as the ordinary batch, and offsets that say what it holds.
                let mut plain = WriteBatch::new();
                if kind == OpKind::Put {
                    plain.insert(&key, &value);
                } else {
                    plain.remove(&key);
                }
                assert_eq!(
                    (b.ops.as_slice(), b.count, b.user_bytes),
                    (plain.ops.as_slice(), 1, plain.user_bytes)
                );
                let one = b.one.expect("a single operation");
                let op = &wal::decode_ops(&b.ops, 1).unwrap()[0];
                assert_eq!(one.kind, op.kind);
                assert_eq!(&b.ops[one.key_at..one.key_at + one.key_len], op.key);
                assert_eq!(&b.ops[one.value_at..], op.value);
                assert_eq!(plain.one, None);
            }
        }
        // Another operation makes it an ordinary batch.
        let mut b = WriteBatch::one_insert(b"k", b"v");
        b.remove("x");
        assert_eq!((b.one, b.len()), (None, 2));
    }

    #[test]
    fn a_batch_holds_at_most_max_batch_ops_operations() {
        let mut b = WriteBatch::with_capacity(MAX_BATCH_OPS as usize * 3);
        for _ in 0..MAX_BATCH_OPS {
            b.remove("");
        }
        assert!(b.invalid.is_none());
        assert_eq!(b.len(), MAX_BATCH_OPS as usize);
        b.remove("");
        assert!(b.invalid.is_some(), "one operation over the limit");
        assert_eq!(b.len(), MAX_BATCH_OPS as usize, "the one over is not added");
    }

    #[test]
    fn range_removes_normalise_their_bounds() {
        let mut b = WriteBatch::new();
        b.remove_range(&b"a"[..]..=&b"c"[..])
            .remove_range::<&[u8], _>((Bound::Excluded(&b"x"[..]), Bound::Unbounded))
            .remove_range::<&[u8], _>(..);
        let ops = wal::decode_ops(&b.ops, b.count).unwrap();
        assert_eq!(
            (ops[0].kind, ops[0].key, ops[0].value),
            (OpKind::RangeDelete, &b"a"[..], &b"c\0"[..])
        );
        assert_eq!(
            (ops[1].kind, ops[1].key),
            (OpKind::RangeDeleteToEnd, &b"x\0"[..])
        );
        assert_eq!(
            (ops[2].kind, ops[2].key),
            (OpKind::RangeDeleteToEnd, &b""[..])
        );
        assert!(b.invalid.is_none());
    }

    #[test]
    fn empty_inverted_or_oversized_ranges_mark_the_batch_invalid() {
        let big = vec![0u8; MAX_KEY_SIZE + 1];
        let cases: Vec<WriteBatch> = vec![
            WriteBatch::new().remove_range("a".."a").clone(),
            WriteBatch::new().remove_range("b".."a").clone(),
            WriteBatch::new().remove_range(&big[..]..).clone(),
            WriteBatch::new()
                .remove_range::<&str, _>((Bound::Excluded("a"), Bound::Excluded("a\0")))
                .clone(),
        ];
        for b in cases {
            assert!(b.invalid.is_some() && b.is_empty(), "{b:?}");
        }
    }

    #[test]
    fn oversized_key_marks_batch_invalid() {
        let mut b = WriteBatch::new();
        b.insert(vec![0u8; MAX_KEY_SIZE], "ok");
        assert!(b.invalid.is_none());
        b.insert(vec![0u8; MAX_KEY_SIZE + 1], "no");
        assert!(b.invalid.is_some());
        assert_eq!(b.len(), 1);
        // Writing it is refused as an invalid argument, and nothing of it is written.
        let fs = crate::fs::MemFs::new();
        let opts = crate::Options::default()
            .file_system(std::sync::Arc::new(fs) as std::sync::Arc<dyn crate::fs::FileSystem>);
        let db = crate::Db::open_with("/db", opts).unwrap();
        assert!(matches!(db.write(b), Err(crate::Error::InvalidArgument(_))));
        assert_eq!(db.get(vec![0u8; MAX_KEY_SIZE]).unwrap(), None);
    }
}
