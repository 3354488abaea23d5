//! [`WriteBatch`]: several inserts and removes applied atomically by [`Db::write`].
//!
//! [`Db::write`]: crate::Db::write

use crate::key::ValueKind;
use crate::wal;

/// Largest key accepted: 64 KiB.
pub const MAX_KEY_SIZE: usize = 64 << 10;
/// Largest value accepted: 256 MiB.
pub const MAX_VALUE_SIZE: usize = 256 << 20;
/// Largest encoded batch accepted: 1 GiB.
pub const MAX_BATCH_SIZE: usize = 1 << 30;

/// An ordered list of inserts and removes that [`Db::write`](crate::Db::write) applies all
/// together or not at all, also across a crash. Later operations on the same key win.
///
/// Invalid operations (a key over [`MAX_KEY_SIZE`], a value over [`MAX_VALUE_SIZE`]) are
/// remembered and make `Db::write` return [`Error::InvalidArgument`](crate::Error) without
/// writing anything.
#[derive(Clone, Debug, Default)]
pub struct WriteBatch {
    pub(crate) ops: Vec<u8>,
    pub(crate) count: u32,
    pub(crate) user_bytes: u64,
    pub(crate) invalid: Option<String>,
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

    fn push(&mut self, kind: ValueKind, key: &[u8], value: &[u8]) {
        if self.invalid.is_some() {
            return;
        }
        if let Err(msg) = check_sizes(key, value) {
            self.invalid = Some(msg);
            return;
        }
        if self.ops.len() + key.len() + value.len() + 24 > MAX_BATCH_SIZE || self.count == u32::MAX
        {
            self.invalid = Some(format!(
                "batch larger than {MAX_BATCH_SIZE} bytes or {} operations",
                u32::MAX
            ));
            return;
        }
        wal::encode_op(&mut self.ops, kind, key, value);
        self.count += 1;
        self.user_bytes += (key.len() + value.len()) as u64;
    }

    /// Adds an insert of `key` -> `value`.
    pub fn insert(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> &mut Self {
        self.push(ValueKind::Put, key.as_ref(), value.as_ref());
        self
    }

    /// Adds a removal of `key` (a tombstone).
    pub fn remove(&mut self, key: impl AsRef<[u8]>) -> &mut Self {
        self.push(ValueKind::Delete, key.as_ref(), &[]);
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
        assert_eq!(ops[1].kind, ValueKind::Delete);
        assert_eq!(ops[2].key, b"");
        assert!(b.invalid.is_none());
        b.clear();
        assert!(b.is_empty());
    }

    #[test]
    fn oversized_key_marks_batch_invalid() {
        let mut b = WriteBatch::new();
        b.insert(vec![0u8; MAX_KEY_SIZE], "ok");
        assert!(b.invalid.is_none());
        b.insert(vec![0u8; MAX_KEY_SIZE + 1], "no");
        assert!(b.invalid.as_deref().unwrap().contains("key of 65537 bytes"));
        assert_eq!(b.len(), 1);
    }
}
