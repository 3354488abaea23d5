//! [`Value`]: the bytes of a value as a get returns them, shared with the block (or, over
//! 16 KiB, the memtable entry) they came from instead of copied out.

use bytes::Bytes;
use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;

/// A value returned by a get. It shares the memory of the cached data block it was read from,
/// so returning it copies nothing (a memtable value is shared if over 16 KiB and copied
/// otherwise); cloning it is cheap (a reference count).
/// It derefs to `[u8]`: `value.len()`, `&value[..]`, `value.to_vec()`, and
/// `db.get(k)?.as_deref()` (an `Option<&[u8]>`) all work as with a `Vec<u8>`.
///
/// Holding a `Value` keeps the block it came from in memory (a few KiB) even after the cache
/// evicts it; call [`to_vec`](slice::to_vec) to keep a small value for a long time without
/// its block.
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Value(Bytes);

impl Value {
    pub(crate) fn from_bytes(b: Bytes) -> Value {
        Value(b)
    }

    /// The value as a `Vec<u8>` (a copy).
    pub fn into_vec(self) -> Vec<u8> {
        self.0.to_vec()
    }
}

impl Deref for Value {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl AsRef<[u8]> for Value {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl Borrow<[u8]> for Value {
    fn borrow(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl From<Value> for Vec<u8> {
    fn from(v: Value) -> Vec<u8> {
        v.into_vec()
    }
}

impl From<Vec<u8>> for Value {
    fn from(v: Vec<u8>) -> Value {
        Value(Bytes::from(v))
    }
}

impl From<&[u8]> for Value {
    fn from(v: &[u8]) -> Value {
        Value(Bytes::copy_from_slice(v))
    }
}

impl PartialEq<[u8]> for Value {
    fn eq(&self, other: &[u8]) -> bool {
        self.0 == other
    }
}

impl PartialEq<&[u8]> for Value {
    fn eq(&self, other: &&[u8]) -> bool {
        self.0 == *other
    }
}

impl PartialEq<Vec<u8>> for Value {
    fn eq(&self, other: &Vec<u8>) -> bool {
        self.0 == other
    }
}

impl PartialEq<str> for Value {
    fn eq(&self, other: &str) -> bool {
        self.0 == other.as_bytes()
    }
}

impl PartialEq<&str> for Value {
    fn eq(&self, other: &&str) -> bool {
        self.0 == other.as_bytes()
    }
}

impl PartialEq<String> for Value {
    fn eq(&self, other: &String) -> bool {
        self.0 == other.as_bytes()
    }
}

impl<const N: usize> PartialEq<[u8; N]> for Value {
    fn eq(&self, other: &[u8; N]) -> bool {
        self.0 == other[..]
    }
}

impl<const N: usize> PartialEq<&[u8; N]> for Value {
    fn eq(&self, other: &&[u8; N]) -> bool {
        self.0 == other[..]
    }
}

impl PartialEq<Value> for Vec<u8> {
    fn eq(&self, other: &Value) -> bool {
        other == self
    }
}

impl PartialEq<Value> for [u8] {
    fn eq(&self, other: &Value) -> bool {
        other == self
    }
}

impl PartialEq<Value> for &[u8] {
    fn eq(&self, other: &Value) -> bool {
        other == self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compares_and_converts_like_bytes() {
        let block = Bytes::from_static(b"..hello..");
        let v = Value::from_bytes(block.slice(2..7));
        assert_eq!(v, *b"hello");
        assert_eq!(v, b"hello");
        assert_eq!(v, "hello");
        assert_eq!(v, b"hello".to_vec());
        assert_eq!(b"hello".to_vec(), v);
        assert_eq!(Some(v.clone()).as_deref(), Some(&b"hello"[..]));
        assert_eq!(v.to_vec(), b"hello");
        assert_eq!(Vec::from(v.clone()), b"hello");
        assert_eq!(v.len(), 5);
        assert_ne!(v, "hellO");
        assert_eq!(format!("{v:?}"), "b\"hello\"");
    }
}
