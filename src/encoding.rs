//! Little-endian fixed-width integers and LEB128 varints: the primitives of every on-disk
//! format in siltdb. Decoders never panic: they return `None` on truncated or overlong input.

use byteorder::{ByteOrder, LittleEndian};

/// Appends `v` as a LEB128 varint (1-10 bytes).
pub(crate) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Number of bytes [`put_varint`] writes for `v`.
pub(crate) fn varint_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

/// Appends a varint length followed by the bytes.
pub(crate) fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

pub(crate) fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

pub(crate) fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// A cursor over a byte slice with checked reads.
#[derive(Debug, Clone)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    /// Bytes consumed so far.
    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    pub(crate) fn varint(&mut self) -> Option<u64> {
        let mut v: u64 = 0;
        for shift in (0..64).step_by(7) {
            let b = *self.buf.get(self.pos)?;
            self.pos += 1;
            if shift == 63 && b > 1 {
                return None; // overflows 64 bits
            }
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Some(v);
            }
        }
        None
    }

    /// A varint that must fit in `usize` and be at most `max`.
    pub(crate) fn varint_len(&mut self, max: usize) -> Option<usize> {
        let v = usize::try_from(self.varint()?).ok()?;
        (v <= max).then_some(v)
    }

    pub(crate) fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let s = self.buf.get(self.pos..end)?;
        self.pos = end;
        Some(s)
    }

    /// A varint length then that many bytes.
    pub(crate) fn length_prefixed(&mut self) -> Option<&'a [u8]> {
        let n = self.varint_len(self.remaining())?;
        self.bytes(n)
    }

    pub(crate) fn u8(&mut self) -> Option<u8> {
        let b = *self.buf.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }

    pub(crate) fn u32(&mut self) -> Option<u32> {
        self.bytes(4).map(LittleEndian::read_u32)
    }

    pub(crate) fn u64(&mut self) -> Option<u64> {
        self.bytes(8).map(LittleEndian::read_u64)
    }
}

/// Reads a little-endian u32 at `pos`, or `None` if out of bounds.
pub(crate) fn u32_at(buf: &[u8], pos: usize) -> Option<u32> {
    buf.get(pos..pos.checked_add(4)?)
        .map(LittleEndian::read_u32)
}

/// Reads a little-endian u64 at `pos`, or `None` if out of bounds.
pub(crate) fn u64_at(buf: &[u8], pos: usize) -> Option<u64> {
    buf.get(pos..pos.checked_add(8)?)
        .map(LittleEndian::read_u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn varint_boundaries() {
        for v in [0u64, 1, 127, 128, 16383, 16384, u32::MAX as u64, u64::MAX] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(out.len(), varint_len(v));
            let mut r = Reader::new(&out);
            assert_eq!(r.varint(), Some(v));
            assert!(r.is_empty());
        }
    }

    #[test]
    fn overlong_and_truncated_varints_are_rejected() {
        assert_eq!(Reader::new(&[0x80]).varint(), None);
        assert_eq!(Reader::new(&[0xff; 10]).varint(), None);
        assert_eq!(Reader::new(&[0xff; 11]).varint(), None);
        let mut r = Reader::new(&[5, 1, 2]);
        assert_eq!(r.length_prefixed(), None);
    }

    proptest! {
        #[test]
        fn varint_roundtrip(v in any::<u64>()) {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            prop_assert_eq!(Reader::new(&out).varint(), Some(v));
        }

        #[test]
        fn reader_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..32)) {
            let mut r = Reader::new(&bytes);
            let _ = r.varint();
            let _ = r.length_prefixed();
            let _ = r.u32();
            let _ = r.u64();
            let _ = u32_at(&bytes, usize::MAX);
        }
    }
}
