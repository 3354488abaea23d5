//! SSTable framing: block handles, the 5-byte block trailer, and the 64-byte footer.
//!
//! Every block is followed by `kind u8 | crc u32 LE` where
//! `crc = mask(crc32(contents ++ kind ++ block offset as u64 LE))`: mixing the offset in makes
//! a block copied to the wrong place fail its checksum like random damage would.

use crate::encoding::{put_u32, put_u64, u32_at, u64_at};
use crate::record::mask_crc;

/// Bytes after each block's contents.
pub const BLOCK_TRAILER_LEN: usize = 5;
/// Size of the footer at the end of every table.
pub const FOOTER_LEN: usize = 64;
/// The last 8 bytes of every siltdb table.
pub const MAGIC: [u8; 8] = *b"siltSST1";
/// The table format version of tables without range tombstones (all tables written before
/// range deletes existed, and every table without one since).
pub const FORMAT_VERSION: u32 = 1;
/// The table format version of tables with a range-deletion block: a build that predates
/// range deletes refuses them (it would not see their tombstones) instead of reading them
/// wrong. This build reads both.
pub const RANGE_DEL_FORMAT_VERSION: u32 = 2;

/// What a block holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum BlockKind {
    /// Key/value entries.
    Data = 1,
    /// One entry per data block: a key between its last key and the next block's first key
    /// (see `docs/format.md`), and its handle.
    Index = 2,
    /// The serialized filter.
    Filter = 3,
    /// Table properties.
    Properties = 4,
    /// The table's range tombstones, fragmented.
    RangeDel = 5,
}

impl BlockKind {
    /// Decodes a kind byte.
    pub fn from_u8(b: u8) -> Option<BlockKind> {
        match b {
            1 => Some(BlockKind::Data),
            2 => Some(BlockKind::Index),
            3 => Some(BlockKind::Filter),
            4 => Some(BlockKind::Properties),
            5 => Some(BlockKind::RangeDel),
            _ => None,
        }
    }

    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            BlockKind::Data => "data",
            BlockKind::Index => "index",
            BlockKind::Filter => "filter",
            BlockKind::Properties => "properties",
            BlockKind::RangeDel => "range-deletion",
        }
    }
}

/// Where a block's contents are in the file (the trailer follows them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockHandle {
    /// Offset of the first byte of the contents.
    pub offset: u64,
    /// Length of the contents, trailer excluded.
    pub size: u64,
}

impl BlockHandle {
    /// Offset just past the block's trailer (`u64::MAX` if a damaged handle overflows).
    pub fn end(&self) -> u64 {
        self.checked_end().unwrap_or(u64::MAX)
    }

    /// Offset just past the block's trailer; `None` if it does not fit in a `u64`, as only a
    /// handle read from damaged bytes can.
    pub(crate) fn checked_end(&self) -> Option<u64> {
        self.offset
            .checked_add(self.size)?
            .checked_add(BLOCK_TRAILER_LEN as u64)
    }
}

/// The checksum stored in a block trailer.
pub(crate) fn block_crc(contents: &[u8], kind: u8, offset: u64) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(contents);
    h.update(&[kind]);
    h.update(&offset.to_le_bytes());
    mask_crc(h.finalize())
}

/// Appends the trailer for a block written at `offset`.
pub(crate) fn put_block_trailer(
    out: &mut Vec<u8>,
    contents_start: usize,
    kind: BlockKind,
    offset: u64,
) {
    let crc = block_crc(&out[contents_start..], kind as u8, offset);
    out.push(kind as u8);
    put_u32(out, crc);
}

/// The table footer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Footer {
    /// The index block.
    pub index: BlockHandle,
    /// The filter block; `None` if the table has no filter.
    pub filter: Option<BlockHandle>,
    /// The properties block.
    pub properties: BlockHandle,
    /// Format version.
    pub version: u32,
}

/// Why a footer could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FooterError {
    /// The last 8 bytes are not [`MAGIC`].
    BadMagic,
    /// The footer checksum does not match.
    BadChecksum,
    /// The footer is from a format version this build cannot read.
    UnsupportedVersion(u32),
}

impl std::fmt::Display for FooterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FooterError::BadMagic => write!(f, "not an SSTable (bad magic number)"),
            FooterError::BadChecksum => write!(f, "footer checksum mismatch"),
            FooterError::UnsupportedVersion(v) => write!(
                f,
                "unsupported table format version {v} (this build reads {FORMAT_VERSION} and {RANGE_DEL_FORMAT_VERSION})"
            ),
        }
    }
}

impl FooterError {
    /// Offset of the field at fault, from the start of the footer.
    pub fn field_offset(&self) -> u64 {
        match self {
            FooterError::BadMagic => 56,
            FooterError::BadChecksum => 52,
            FooterError::UnsupportedVersion(_) => 48,
        }
    }
}

impl Footer {
    /// Encodes the 64-byte footer.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(FOOTER_LEN);
        put_u64(&mut out, self.index.offset);
        put_u64(&mut out, self.index.size);
        let f = self.filter.unwrap_or_default();
        put_u64(&mut out, f.offset);
        put_u64(&mut out, f.size);
        put_u64(&mut out, self.properties.offset);
        put_u64(&mut out, self.properties.size);
        put_u32(&mut out, self.version);
        let crc = footer_crc(&out);
        put_u32(&mut out, crc);
        out.extend_from_slice(&MAGIC);
        debug_assert_eq!(out.len(), FOOTER_LEN);
        out
    }

    /// Decodes a footer from exactly [`FOOTER_LEN`] bytes.
    pub fn decode(buf: &[u8; FOOTER_LEN]) -> Result<Footer, FooterError> {
        if buf[56..64] != MAGIC {
            return Err(FooterError::BadMagic);
        }
        let stored = u32_at(buf, 52).unwrap_or(0);
        if footer_crc(&buf[..52]) != stored {
            return Err(FooterError::BadChecksum);
        }
        let version = u32_at(buf, 48).unwrap_or(0);
        if !(FORMAT_VERSION..=RANGE_DEL_FORMAT_VERSION).contains(&version) {
            return Err(FooterError::UnsupportedVersion(version));
        }
        let h = |at: usize| BlockHandle {
            offset: u64_at(buf, at).unwrap_or(0),
            size: u64_at(buf, at + 8).unwrap_or(0),
        };
        let filter = h(16);
        Ok(Footer {
            index: h(0),
            filter: (filter != BlockHandle::default()).then_some(filter),
            properties: h(32),
            version,
        })
    }
}

fn footer_crc(first52: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(first52);
    h.update(&MAGIC);
    mask_crc(h.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn footer_roundtrip_and_damage() {
        let f = Footer {
            index: BlockHandle {
                offset: 100,
                size: 20,
            },
            filter: None,
            properties: BlockHandle {
                offset: 125,
                size: 30,
            },
            version: FORMAT_VERSION,
        };
        let enc = f.encode();
        let arr: [u8; FOOTER_LEN] = enc.clone().try_into().unwrap();
        assert_eq!(Footer::decode(&arr).unwrap(), f);
        for bit in 0..FOOTER_LEN * 8 {
            let mut b = arr;
            b[bit / 8] ^= 1 << (bit % 8);
            assert!(Footer::decode(&b).is_err(), "bit {bit}");
        }
    }

    #[test]
    fn future_version_is_reported() {
        let f = Footer {
            index: BlockHandle::default(),
            filter: Some(BlockHandle { offset: 1, size: 2 }),
            properties: BlockHandle::default(),
            version: 9,
        };
        let arr: [u8; FOOTER_LEN] = f.encode().try_into().unwrap();
        assert_eq!(
            Footer::decode(&arr),
            Err(FooterError::UnsupportedVersion(9))
        );
    }

    #[test]
    fn handle_end_does_not_overflow() {
        let h = |offset, size| BlockHandle { offset, size };
        assert_eq!(h(10, 20).checked_end(), Some(35));
        assert_eq!(h(u64::MAX - 4, 0).checked_end(), None);
        assert_eq!(h(1, u64::MAX).checked_end(), None);
        assert_eq!(h(1, u64::MAX - 5).checked_end(), None);
        assert_eq!(h(u64::MAX, u64::MAX).end(), u64::MAX);
    }

    #[test]
    fn block_crc_depends_on_offset() {
        assert_ne!(block_crc(b"abc", 1, 0), block_crc(b"abc", 1, 4096));
        assert_ne!(block_crc(b"abc", 1, 0), block_crc(b"abc", 2, 0));
    }
}
