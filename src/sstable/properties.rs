//! The properties block: facts about a table, as tagged fields.
//!
//! ```text
//! properties := field*
//! field      := tag varint | len varint | bytes[len]
//! ```
//!
//! Integer fields hold one varint. Unknown tags are skipped, so fields can be added without a
//! format version change. Decoding checks what the fields say about each other (sequence
//! numbers in range and ordered, counts within the entries, a key range in order).

use crate::encoding::{put_bytes, put_varint, Reader};
use crate::key::{self, MAX_SEQ};

const T_ENTRIES: u64 = 1;
const T_DELETIONS: u64 = 2;
const T_SMALLEST: u64 = 3;
const T_LARGEST: u64 = 4;
const T_MIN_SEQ: u64 = 5;
const T_MAX_SEQ: u64 = 6;
const T_RAW_KEY_BYTES: u64 = 7;
const T_RAW_VALUE_BYTES: u64 = 8;
const T_DATA_BLOCKS: u64 = 9;
const T_FILTER_MILLIBITS: u64 = 10;
const T_USER_KEYS: u64 = 11;
const T_LEVEL: u64 = 12;
const T_DATA_BYTES: u64 = 13;
const T_RANGE_DELETIONS: u64 = 14;
const T_RANGE_DEL_BLOCK: u64 = 15;
const T_REPLAYED_WALS: u64 = 16;

/// What the properties block of a table records.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TableProperties {
    /// Entries (versions, including tombstones).
    pub entries: u64,
    /// Tombstones among them.
    pub deletions: u64,
    /// Distinct user keys (the keys the filter was built over).
    pub user_keys: u64,
    /// Smallest internal key (user key ++ 8-byte trailer).
    pub smallest: Vec<u8>,
    /// Largest internal key.
    pub largest: Vec<u8>,
    /// Smallest sequence number.
    pub min_seq: u64,
    /// Largest sequence number.
    pub max_seq: u64,
    /// Sum of user key lengths.
    pub raw_key_bytes: u64,
    /// Sum of value lengths.
    pub raw_value_bytes: u64,
    /// Number of data blocks.
    pub data_blocks: u64,
    /// Bytes of data blocks (trailers included).
    pub data_bytes: u64,
    /// Bits per key the filter was asked for, in thousandths (0: no filter).
    pub filter_millibits_per_key: u64,
    /// The level the table was written for.
    pub level: u64,
    /// Range tombstones in the range-deletion block (one per fragment and sequence number;
    /// 0 for a table without that block). Not counted in `entries`.
    pub range_deletions: u64,
    /// Where the range-deletion block is (offset and size of its contents); `None` if the
    /// table has none. Written only by format version 2 tables.
    pub range_del_block: Option<(u64, u64)>,
    /// For a table an open wrote from the WALs it replayed: the numbers of the first and the
    /// last of those WALs. `None` (the default) for tables written by flushes and
    /// compactions, and for tables written before 2026-12-05. The next open tells from it a
    /// table left by a replay that never committed, which it may remove, from one a lost
    /// manifest edit left, which it must not (`docs/durability.md`).
    pub replayed_wals: Option<(u64, u64)>,
}

impl TableProperties {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut int = |tag: u64, v: u64| {
            let mut b = Vec::new();
            put_varint(&mut b, v);
            put_varint(&mut out, tag);
            put_bytes(&mut out, &b);
        };
        int(T_ENTRIES, self.entries);
        int(T_DELETIONS, self.deletions);
        int(T_USER_KEYS, self.user_keys);
        int(T_MIN_SEQ, self.min_seq);
        int(T_MAX_SEQ, self.max_seq);
        int(T_RAW_KEY_BYTES, self.raw_key_bytes);
        int(T_RAW_VALUE_BYTES, self.raw_value_bytes);
        int(T_DATA_BLOCKS, self.data_blocks);
        int(T_DATA_BYTES, self.data_bytes);
        int(T_FILTER_MILLIBITS, self.filter_millibits_per_key);
        int(T_LEVEL, self.level);
        if self.range_deletions > 0 {
            int(T_RANGE_DELETIONS, self.range_deletions);
        }
        // Two varints in one field.
        let pairs = [
            (T_RANGE_DEL_BLOCK, self.range_del_block),
            (T_REPLAYED_WALS, self.replayed_wals),
        ];
        for (tag, (a, b)) in pairs.into_iter().filter_map(|(t, v)| Some((t, v?))) {
            let mut field = Vec::new();
            put_varint(&mut field, a);
            put_varint(&mut field, b);
            put_varint(&mut out, tag);
            put_bytes(&mut out, &field);
        }
        put_varint(&mut out, T_SMALLEST);
        put_bytes(&mut out, &self.smallest);
        put_varint(&mut out, T_LARGEST);
        put_bytes(&mut out, &self.largest);
        out
    }

    /// Decodes a properties block; `Err` says what is malformed or impossible.
    pub(crate) fn decode(buf: &[u8]) -> Result<TableProperties, String> {
        let p = Self::decode_fields(buf).ok_or("malformed field")?;
        p.check()?;
        Ok(p)
    }

    /// What a writer cannot have produced: sequence numbers past [`MAX_SEQ`] or out of order,
    /// more tombstones or user keys than entries, and for a table with entries, bounding keys
    /// that are not internal keys in order.
    fn check(&self) -> Result<(), String> {
        if self.max_seq > MAX_SEQ || self.min_seq > MAX_SEQ {
            return Err(format!(
                "sequence numbers {}..={} go past the largest, {MAX_SEQ}",
                self.min_seq, self.max_seq
            ));
        }
        if self.deletions > self.entries || self.user_keys > self.entries {
            return Err(format!(
                "{} tombstones and {} user keys among {} entries",
                self.deletions, self.user_keys, self.entries
            ));
        }
        if self.range_del_block.is_some() != (self.range_deletions > 0) {
            return Err(format!(
                "{} range tombstones, and {} range-deletion block",
                self.range_deletions,
                if self.range_del_block.is_some() {
                    "a"
                } else {
                    "no"
                }
            ));
        }
        if let Some((first, last)) = self.replayed_wals {
            if first > last {
                return Err(format!(
                    "replayed from WALs {first}..={last}: the first is above the last"
                ));
            }
        }
        if self.entries == 0 {
            return Ok(());
        }
        if self.min_seq > self.max_seq {
            return Err(format!(
                "min_seq {} is above max_seq {}",
                self.min_seq, self.max_seq
            ));
        }
        if key::decode(&self.smallest).is_none() || key::decode(&self.largest).is_none() {
            return Err("malformed smallest or largest key".into());
        }
        if key::cmp_encoded(&self.smallest, &self.largest).is_gt() {
            return Err("smallest key is above the largest".into());
        }
        Ok(())
    }

    fn decode_fields(buf: &[u8]) -> Option<TableProperties> {
        let mut p = TableProperties::default();
        let mut r = Reader::new(buf);
        while !r.is_empty() {
            let tag = r.varint()?;
            let field = r.length_prefixed()?;
            let int = || Reader::new(field).varint();
            match tag {
                T_ENTRIES => p.entries = int()?,
                T_DELETIONS => p.deletions = int()?,
                T_USER_KEYS => p.user_keys = int()?,
                T_MIN_SEQ => p.min_seq = int()?,
                T_MAX_SEQ => p.max_seq = int()?,
                T_RAW_KEY_BYTES => p.raw_key_bytes = int()?,
                T_RAW_VALUE_BYTES => p.raw_value_bytes = int()?,
                T_DATA_BLOCKS => p.data_blocks = int()?,
                T_DATA_BYTES => p.data_bytes = int()?,
                T_FILTER_MILLIBITS => p.filter_millibits_per_key = int()?,
                T_LEVEL => p.level = int()?,
                T_RANGE_DELETIONS => p.range_deletions = int()?,
                T_RANGE_DEL_BLOCK => {
                    let mut f = Reader::new(field);
                    p.range_del_block = Some((f.varint()?, f.varint()?));
                }
                T_REPLAYED_WALS => {
                    let mut f = Reader::new(field);
                    p.replayed_wals = Some((f.varint()?, f.varint()?));
                }
                T_SMALLEST => p.smallest = field.to_vec(),
                T_LARGEST => p.largest = field.to_vec(),
                _ => {}
            }
        }
        Some(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_unknown_tags() {
        let p = TableProperties {
            entries: 10,
            deletions: 2,
            user_keys: 9,
            smallest: b"a\0\0\0\0\0\0\0\0".to_vec(),
            largest: b"z\0\0\0\0\0\0\0\0".to_vec(),
            min_seq: 1,
            max_seq: 99,
            raw_key_bytes: 30,
            raw_value_bytes: 300,
            data_blocks: 1,
            data_bytes: 400,
            filter_millibits_per_key: 10_000,
            level: 0,
            range_deletions: 3,
            range_del_block: Some((400, 20)),
            replayed_wals: Some((7, 12)),
        };
        let mut enc = p.encode();
        enc.extend_from_slice(&[99, 2, 7, 7]); // a future field
        assert_eq!(TableProperties::decode(&enc), Ok(p));
        assert!(TableProperties::decode(&[1, 5, 0]).is_err());
        // An empty table (no field set) is well-formed.
        assert_eq!(TableProperties::decode(&[]), Ok(TableProperties::default()));
    }

    #[test]
    fn impossible_values_are_rejected() {
        let good = TableProperties {
            entries: 2,
            deletions: 1,
            user_keys: 2,
            smallest: key::encode(b"a", key::trailer(7, key::ValueKind::Put)),
            largest: key::encode(b"b", key::trailer(3, key::ValueKind::Delete)),
            min_seq: 3,
            max_seq: 7,
            ..TableProperties::default()
        };
        assert!(TableProperties::decode(&good.encode()).is_ok());
        let bad: [fn(&mut TableProperties); 11] = [
            |p| p.replayed_wals = Some((5, 4)),
            |p| p.range_deletions = 2,
            |p| p.range_del_block = Some((1, 2)),
            |p| p.max_seq = MAX_SEQ + 1,
            |p| p.max_seq = u64::MAX,
            |p| p.min_seq = 8,
            |p| p.deletions = 3,
            |p| p.user_keys = 3,
            |p| p.smallest = b"short".to_vec(),
            |p| std::mem::swap(&mut p.smallest, &mut p.largest),
            |p| {
                p.entries = 0;
                p.deletions = 0;
                p.user_keys = 0;
                p.min_seq = u64::MAX;
            },
        ];
        for (i, f) in bad.iter().enumerate() {
            let mut p = good.clone();
            f(&mut p);
            assert!(TableProperties::decode(&p.encode()).is_err(), "case {i}");
        }
    }
}
