//! Version edits: the records of the manifest.
//!
//! ```text
//! edit  := field*
//! field := tag varint | body
//!   1 log_number        varint          WALs numbered below it are obsolete
//!   2 next_file_number  varint
//!   3 last_sequence     varint
//!   4 compact_pointer   level varint | bytes (varint length + internal key)
//!   5 deleted_table     level varint | number varint
//!   6 added_table       level varint | number varint | size varint | smallest bytes |
//!                       largest bytes | min_seq varint | max_seq varint | entries varint
//! ```
//!
//! An unknown tag is corruption: a manifest must be understood whole.

use crate::encoding::{put_bytes, put_varint, Reader};
use crate::key;
use bytes::Bytes;

/// Number of levels, L0..L6.
pub const NUM_LEVELS: usize = 7;

const T_LOG: u64 = 1;
const T_NEXT_FILE: u64 = 2;
const T_LAST_SEQ: u64 = 3;
const T_COMPACT_POINTER: u64 = 4;
const T_DELETED: u64 = 5;
const T_ADDED: u64 = 6;

/// What the manifest records about one table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileMeta {
    /// File number (`NNNNNN.sst`).
    pub number: u64,
    /// File size in bytes.
    pub size: u64,
    /// Smallest internal key.
    pub smallest: Bytes,
    /// Largest internal key.
    pub largest: Bytes,
    /// Smallest sequence number in the table.
    pub min_seq: u64,
    /// Largest sequence number in the table.
    pub max_seq: u64,
    /// Number of entries.
    pub entries: u64,
}

impl FileMeta {
    /// Smallest user key.
    pub fn smallest_user(&self) -> &[u8] {
        key::user_key(&self.smallest)
    }

    /// Largest user key.
    pub fn largest_user(&self) -> &[u8] {
        key::user_key(&self.largest)
    }
}

/// A change to the set of tables and to the counters recorded in the manifest.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VersionEdit {
    /// WALs numbered below this are no longer needed.
    pub log_number: Option<u64>,
    /// The next file number to hand out.
    pub next_file_number: Option<u64>,
    /// The largest sequence number written to a table.
    pub last_sequence: Option<u64>,
    /// Where the next compaction of a level starts (round robin).
    pub compact_pointers: Vec<(u32, Vec<u8>)>,
    /// Tables removed: (level, number).
    pub deleted: Vec<(u32, u64)>,
    /// Tables added: (level, meta).
    pub added: Vec<(u32, FileMeta)>,
}

impl VersionEdit {
    /// Encodes the edit.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for (tag, v) in [
            (T_LOG, self.log_number),
            (T_NEXT_FILE, self.next_file_number),
            (T_LAST_SEQ, self.last_sequence),
        ] {
            if let Some(v) = v {
                put_varint(&mut out, tag);
                put_varint(&mut out, v);
            }
        }
        for (level, k) in &self.compact_pointers {
            put_varint(&mut out, T_COMPACT_POINTER);
            put_varint(&mut out, u64::from(*level));
            put_bytes(&mut out, k);
        }
        for (level, n) in &self.deleted {
            put_varint(&mut out, T_DELETED);
            put_varint(&mut out, u64::from(*level));
            put_varint(&mut out, *n);
        }
        for (level, f) in &self.added {
            put_varint(&mut out, T_ADDED);
            put_varint(&mut out, u64::from(*level));
            put_varint(&mut out, f.number);
            put_varint(&mut out, f.size);
            put_bytes(&mut out, &f.smallest);
            put_bytes(&mut out, &f.largest);
            put_varint(&mut out, f.min_seq);
            put_varint(&mut out, f.max_seq);
            put_varint(&mut out, f.entries);
        }
        out
    }

    /// Decodes an edit; `Err` names what is wrong.
    pub(crate) fn decode(buf: &[u8]) -> Result<VersionEdit, String> {
        let mut e = VersionEdit::default();
        let mut r = Reader::new(buf);
        let level = |r: &mut Reader<'_>| -> Result<u32, String> {
            match r.varint() {
                Some(l) if (l as usize) < NUM_LEVELS => Ok(l as u32),
                Some(l) => Err(format!("level {l} out of range")),
                None => Err("truncated level".into()),
            }
        };
        while !r.is_empty() {
            let at = r.pos();
            let tag = r.varint().ok_or("truncated tag")?;
            let trunc = || format!("truncated field with tag {tag} at byte {at}");
            match tag {
                T_LOG => e.log_number = Some(r.varint().ok_or_else(trunc)?),
                T_NEXT_FILE => e.next_file_number = Some(r.varint().ok_or_else(trunc)?),
                T_LAST_SEQ => e.last_sequence = Some(r.varint().ok_or_else(trunc)?),
                T_COMPACT_POINTER => {
                    let l = level(&mut r)?;
                    let k = r.length_prefixed().ok_or_else(trunc)?;
                    e.compact_pointers.push((l, k.to_vec()));
                }
                T_DELETED => {
                    let l = level(&mut r)?;
                    e.deleted.push((l, r.varint().ok_or_else(trunc)?));
                }
                T_ADDED => {
                    let l = level(&mut r)?;
                    let mut f = || -> Option<FileMeta> {
                        Some(FileMeta {
                            number: r.varint()?,
                            size: r.varint()?,
                            smallest: Bytes::copy_from_slice(r.length_prefixed()?),
                            largest: Bytes::copy_from_slice(r.length_prefixed()?),
                            min_seq: r.varint()?,
                            max_seq: r.varint()?,
                            entries: r.varint()?,
                        })
                    };
                    let meta = f().ok_or_else(trunc)?;
                    if key::decode(&meta.smallest).is_none() || key::decode(&meta.largest).is_none()
                    {
                        return Err(format!("table {} has a malformed key range", meta.number));
                    }
                    e.added.push((l, meta));
                }
                other => return Err(format!("unknown field tag {other} at byte {at}")),
            }
        }
        Ok(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::{encode, trailer, ValueKind};
    use proptest::prelude::*;

    fn meta(n: u64) -> FileMeta {
        FileMeta {
            number: n,
            size: 1000 + n,
            smallest: Bytes::from(encode(b"a", trailer(1, ValueKind::Put))),
            largest: Bytes::from(encode(b"z", trailer(9, ValueKind::Delete))),
            min_seq: 1,
            max_seq: 9,
            entries: 42,
        }
    }

    #[test]
    fn roundtrip() {
        let e = VersionEdit {
            log_number: Some(7),
            next_file_number: Some(12),
            last_sequence: Some(99),
            compact_pointers: vec![(1, b"kkkkkkkkk".to_vec())],
            deleted: vec![(0, 3), (1, 4)],
            added: vec![(1, meta(10)), (2, meta(11))],
        };
        assert_eq!(VersionEdit::decode(&e.encode()), Ok(e));
        assert_eq!(VersionEdit::decode(&[]), Ok(VersionEdit::default()));
    }

    #[test]
    fn rejects_unknown_tags_bad_levels_and_truncation() {
        assert!(VersionEdit::decode(&[99, 1]).is_err());
        assert!(VersionEdit::decode(&[5, 9, 1]).is_err());
        let enc = VersionEdit {
            added: vec![(0, meta(1))],
            ..VersionEdit::default()
        }
        .encode();
        for cut in 1..enc.len() {
            assert!(VersionEdit::decode(&enc[..cut]).is_err(), "cut {cut}");
        }
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..100)) {
            let _ = VersionEdit::decode(&bytes);
        }
    }
}
