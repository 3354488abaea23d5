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
//! An unknown tag is corruption: a manifest must be understood whole. So is a number no
//! writer can have produced: [`VersionEdit::decode`] range-checks every field on its own
//! (sequence numbers, file numbers, sizes, a table's key range against its sequence range),
//! and the replay in [`super::set`] checks what depends on the edits before it.

use crate::encoding::{put_bytes, put_varint, Reader};
use crate::filename::MAX_FILE_NUMBER;
use crate::key::{self, MAX_SEQ};
use crate::sstable::TableBounds;
use bytes::Bytes;

/// Number of levels, L0..L6.
pub const NUM_LEVELS: usize = 7;

/// The largest table size a manifest may record (1 TiB). Far above any table siltdb writes
/// (tables are cut at the target size between user keys; one value is at most 256 MiB), and
/// low enough that summing the sizes (or entry counts, which are at most the size) of every
/// table in a tree cannot overflow a `u64`.
pub const MAX_TABLE_SIZE: u64 = 1 << 40;

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
    /// Number of entries, range tombstones included.
    pub entries: u64,
}

impl FileMeta {
    /// The record of table `number`, of `size` bytes, with these bounds.
    pub(crate) fn new(number: u64, size: u64, b: &TableBounds) -> FileMeta {
        FileMeta {
            number,
            size,
            smallest: Bytes::copy_from_slice(&b.smallest),
            largest: Bytes::copy_from_slice(&b.largest),
            min_seq: b.min_seq,
            max_seq: b.max_seq,
            entries: b.entries,
        }
    }

    /// Smallest user key.
    pub fn smallest_user(&self) -> &[u8] {
        key::user_key(&self.smallest)
    }

    /// Largest user key.
    pub fn largest_user(&self) -> &[u8] {
        key::user_key(&self.largest)
    }

    /// Checks what the record of one table can show on its own: a number in range, a size
    /// a table can have, at least one entry and no more entries than bytes (a table holds no
    /// empty tables, and every entry takes bytes), sequence numbers in range and ordered, and
    /// smallest and largest keys that are well-formed internal keys in order whose sequence
    /// numbers lie in `min_seq..=max_seq` (both are entries of the table).
    fn check(&self) -> Result<(), String> {
        let n = self.number;
        if !(1..=MAX_FILE_NUMBER).contains(&n) {
            return Err(format!("table number {n} is out of range"));
        }
        if !(1..=MAX_TABLE_SIZE).contains(&self.size) {
            return Err(format!("table {n} has an impossible size {}", self.size));
        }
        if !(1..=self.size).contains(&self.entries) {
            return Err(format!(
                "table {n} of {} bytes claims {} entries",
                self.size, self.entries
            ));
        }
        if self.max_seq > MAX_SEQ {
            return Err(format!(
                "table {n} has sequence number {} above the largest possible {MAX_SEQ}",
                self.max_seq
            ));
        }
        if self.min_seq > self.max_seq {
            return Err(format!(
                "table {n} has min_seq {} above max_seq {}",
                self.min_seq, self.max_seq
            ));
        }
        let (Some((_, lo)), Some((_, hi))) =
            (key::decode(&self.smallest), key::decode(&self.largest))
        else {
            return Err(format!("table {n} has a malformed key range"));
        };
        if key::cmp_encoded(&self.smallest, &self.largest).is_gt() {
            return Err(format!("table {n} has its smallest key above its largest"));
        }
        for t in [lo, hi] {
            let seq = key::trailer_seq(t);
            if key::trailer_kind(t).is_none() || !(self.min_seq..=self.max_seq).contains(&seq) {
                return Err(format!(
                    "table {n} has a bounding key with trailer {t:#x} outside its sequence range {}..={}",
                    self.min_seq, self.max_seq
                ));
            }
        }
        Ok(())
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

    /// Decodes an edit; `Err` names what is wrong. Every number is range-checked here, where
    /// it is decoded (see [`FileMeta`] for a table's checks); an edit that decodes can still
    /// contradict the edits before it, which the manifest replay checks.
    pub(crate) fn decode(buf: &[u8]) -> Result<VersionEdit, String> {
        let mut e = VersionEdit::default();
        let mut r = Reader::new(buf);
        let level = |r: &mut Reader<'_>| -> Result<u32, String> {
            match r.varint() {
                Some(l) if l < NUM_LEVELS as u64 => u32::try_from(l).map_err(|e| e.to_string()),
                Some(l) => Err(format!("level {l} out of range")),
                None => Err("truncated level".into()),
            }
        };
        // `lo` for numbers that name files, where 0 is never handed out.
        let bounded = |v: u64, lo: u64, hi: u64, what: &str| -> Result<u64, String> {
            if (lo..=hi).contains(&v) {
                Ok(v)
            } else {
                Err(format!("{what} {v} is out of range {lo}..={hi}"))
            }
        };
        while !r.is_empty() {
            let at = r.pos();
            let tag = r.varint().ok_or("truncated tag")?;
            let trunc = || format!("truncated field with tag {tag} at byte {at}");
            match tag {
                T_LOG => {
                    let v = r.varint().ok_or_else(trunc)?;
                    e.log_number = Some(bounded(v, 0, MAX_FILE_NUMBER, "log number")?);
                }
                T_NEXT_FILE => {
                    // Up to one past the largest: every number is used up.
                    let v = r.varint().ok_or_else(trunc)?;
                    e.next_file_number =
                        Some(bounded(v, 1, MAX_FILE_NUMBER + 1, "next file number")?);
                }
                T_LAST_SEQ => {
                    let v = r.varint().ok_or_else(trunc)?;
                    e.last_sequence = Some(bounded(v, 0, MAX_SEQ, "last sequence")?);
                }
                T_COMPACT_POINTER => {
                    let l = level(&mut r)?;
                    let k = r.length_prefixed().ok_or_else(trunc)?;
                    // Empty: no pointer; otherwise the largest key of an earlier compaction.
                    if !k.is_empty() && key::decode(k).is_none() {
                        return Err(format!("compaction pointer of L{l} is a malformed key"));
                    }
                    e.compact_pointers.push((l, k.to_vec()));
                }
                T_DELETED => {
                    let l = level(&mut r)?;
                    let n = r.varint().ok_or_else(trunc)?;
                    e.deleted
                        .push((l, bounded(n, 1, MAX_FILE_NUMBER, "deleted table number")?));
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
                    meta.check()?;
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

    fn decode_added(m: FileMeta) -> Result<VersionEdit, String> {
        VersionEdit::decode(
            &VersionEdit {
                added: vec![(1, m)],
                ..VersionEdit::default()
            }
            .encode(),
        )
    }

    #[test]
    fn rejects_levels_that_truncate_to_a_valid_one() {
        // 2^32 + 1 would read as level 1 if narrowed before the range check.
        let mut buf = Vec::new();
        put_varint(&mut buf, T_DELETED);
        put_varint(&mut buf, (1 << 32) + 1);
        put_varint(&mut buf, 5);
        assert!(VersionEdit::decode(&buf).is_err());
    }

    #[test]
    fn rejects_counters_out_of_range() {
        let with = |f: fn(&mut VersionEdit)| {
            let mut e = VersionEdit::default();
            f(&mut e);
            VersionEdit::decode(&e.encode())
        };
        assert!(with(|e| e.last_sequence = Some(u64::MAX)).is_err());
        assert!(with(|e| e.last_sequence = Some(MAX_SEQ + 1)).is_err());
        assert!(with(|e| e.last_sequence = Some(MAX_SEQ)).is_ok());
        assert!(with(|e| e.next_file_number = Some(0)).is_err());
        assert!(with(|e| e.next_file_number = Some(MAX_FILE_NUMBER + 1)).is_ok());
        assert!(with(|e| e.next_file_number = Some(MAX_FILE_NUMBER + 2)).is_err());
        assert!(with(|e| e.log_number = Some(u64::MAX)).is_err());
        assert!(with(|e| e.log_number = Some(0)).is_ok());
        assert!(with(|e| e.deleted = vec![(1, 0)]).is_err());
        assert!(with(|e| e.deleted = vec![(1, MAX_FILE_NUMBER + 1)]).is_err());
        assert!(with(|e| e.compact_pointers = vec![(1, b"short".to_vec())]).is_err());
        assert!(with(|e| e.compact_pointers = vec![(1, Vec::new())]).is_ok());
    }

    #[test]
    fn rejects_impossible_tables() {
        assert!(decode_added(meta(3)).is_ok());
        type Change = fn(&mut FileMeta);
        let bad: [(&str, Change); 12] = [
            ("number 0", |m| m.number = 0),
            ("number too large", |m| m.number = MAX_FILE_NUMBER + 1),
            ("size 0", |m| m.size = 0),
            ("size too large", |m| m.size = MAX_TABLE_SIZE + 1),
            ("no entries", |m| m.entries = 0),
            ("more entries than bytes", |m| m.entries = m.size + 1),
            ("max_seq past MAX_SEQ", |m| {
                m.max_seq = MAX_SEQ + 1;
                m.largest = Bytes::from(encode(b"z", u64::MAX));
            }),
            ("max_seq u64::MAX", |m| m.max_seq = u64::MAX),
            ("min_seq above max_seq", |m| m.min_seq = 10),
            ("smallest above largest", |m| {
                std::mem::swap(&mut m.smallest, &mut m.largest)
            }),
            ("key seq outside the range", |m| {
                m.largest = Bytes::from(encode(b"z", trailer(10, ValueKind::Put)))
            }),
            ("unknown key kind", |m| {
                m.smallest = Bytes::from(encode(b"a", trailer(1, ValueKind::Put) | 0x7f))
            }),
        ];
        for (what, f) in bad {
            let mut m = meta(3);
            f(&mut m);
            assert!(decode_added(m).is_err(), "{what}");
        }
        // Same user key at both ends, newest version first: in order.
        let mut m = meta(3);
        m.smallest = Bytes::from(encode(b"k", trailer(9, ValueKind::Put)));
        m.largest = Bytes::from(encode(b"k", trailer(1, ValueKind::Delete)));
        assert!(decode_added(m.clone()).is_ok());
        std::mem::swap(&mut m.smallest, &mut m.largest);
        assert!(decode_added(m).is_err());
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..100)) {
            let _ = VersionEdit::decode(&bytes);
        }
    }
}
