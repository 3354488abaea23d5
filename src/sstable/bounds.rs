//! A table's bounds as the manifest records them: the key range and sequence range over its
//! entries *and* its range tombstones, and its entry count.
//!
//! A range tombstone widens a table's key range, so that the level invariants (no two tables
//! of L1+ overlap; a compaction takes every table its range touches) hold for the tombstones
//! as for keys. Bounds are inclusive user keys, so a tombstone's exclusive end `e` is
//! recorded as the largest key it covers when that is known exactly (`e = p ++ 0x00` covers
//! up to `p`, which is how compaction cuts tombstones between output tables), and as `e`
//! itself otherwise (one key too wide: harmless, a table may claim more range than it
//! holds). An unbounded end is recorded as [`END_OF_KEYS`], above every key siltdb accepts.
//! The bounding keys of tombstones carry the tombstone's sequence number with the delete
//! kind, so they stay inside the table's sequence range.

use super::properties::TableProperties;
use crate::key::{self, SeqNo, ValueKind, END_OF_KEYS};
use crate::range_del::Fragments;

/// What the manifest records about a table's contents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TableBounds {
    /// Smallest internal key.
    pub(crate) smallest: Vec<u8>,
    /// Largest internal key.
    pub(crate) largest: Vec<u8>,
    pub(crate) min_seq: SeqNo,
    pub(crate) max_seq: SeqNo,
    /// Entries plus range tombstones.
    pub(crate) entries: u64,
}

/// The bounds of a table with properties `p` and range tombstones `rd`.
pub(crate) fn table_bounds(p: &TableProperties, rd: Option<&Fragments>) -> TableBounds {
    let mut b = TableBounds {
        smallest: p.smallest.clone(),
        largest: p.largest.clone(),
        min_seq: p.min_seq,
        max_seq: p.max_seq,
        entries: p.entries,
    };
    let Some(rd) = rd.filter(|f| !f.is_empty()) else {
        return b;
    };
    let (Some(first), Some(last), Some((lo, hi))) = (rd.smallest(), rd.last(), rd.seq_range())
    else {
        return b;
    };
    let bound = |user: &[u8], seq: SeqNo| key::encode(user, key::trailer(seq, ValueKind::Delete));
    let start = bound(&first.start, first.seqs[0]);
    let end_user: &[u8] = match &last.end {
        None => &END_OF_KEYS,
        Some(e) if e.last() == Some(&0) => &e[..e.len() - 1],
        Some(e) => e,
    };
    let end = bound(end_user, last.seqs[0]);
    if p.entries == 0 {
        b = TableBounds {
            smallest: start,
            largest: end,
            min_seq: lo,
            max_seq: hi,
            entries: 0,
        };
    } else {
        if key::cmp_encoded(&start, &b.smallest).is_lt() {
            b.smallest = start;
        }
        if key::cmp_encoded(&end, &b.largest).is_gt() {
            b.largest = end;
        }
        b.min_seq = b.min_seq.min(lo);
        b.max_seq = b.max_seq.max(hi);
    }
    b.entries += rd.len() as u64;
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::range_del::RangeTombstone;
    use bytes::Bytes;

    fn rd(start: &str, end: Option<&[u8]>, seq: SeqNo) -> Fragments {
        Fragments::build([RangeTombstone {
            start: Bytes::copy_from_slice(start.as_bytes()),
            end: end.map(Bytes::copy_from_slice),
            seq,
        }])
    }

    fn points() -> TableProperties {
        TableProperties {
            entries: 2,
            smallest: key::encode(b"c", key::trailer(5, ValueKind::Put)),
            largest: key::encode(b"f", key::trailer(6, ValueKind::Put)),
            min_seq: 5,
            max_seq: 6,
            ..TableProperties::default()
        }
    }

    #[test]
    fn tombstones_widen_the_key_and_sequence_ranges() {
        let b = table_bounds(&points(), Some(&rd("a", Some(b"m"), 9)));
        assert_eq!(key::user_key(&b.smallest), b"a");
        assert_eq!(key::user_key(&b.largest), b"m");
        assert_eq!((b.min_seq, b.max_seq, b.entries), (5, 9, 3));
        // A cut end `p ++ 0` is recorded exactly as `p`.
        let b = table_bounds(&points(), Some(&rd("d", Some(b"g\0"), 2)));
        assert_eq!(key::user_key(&b.largest), b"g");
        assert_eq!(key::user_key(&b.smallest), b"c");
        assert_eq!(b.min_seq, 2);
        // Unbounded: above every key.
        let b = table_bounds(&points(), Some(&rd("d", None, 7)));
        assert_eq!(key::user_key(&b.largest), &END_OF_KEYS[..]);
        assert!(key::user_key(&b.largest) > &[0xffu8; crate::batch::MAX_KEY_SIZE][..]);
    }

    #[test]
    fn a_table_of_tombstones_only_is_bounded_by_them() {
        let b = table_bounds(&TableProperties::default(), Some(&rd("k", Some(b"q"), 4)));
        assert_eq!(
            (key::user_key(&b.smallest), key::user_key(&b.largest)),
            (&b"k"[..], &b"q"[..])
        );
        assert_eq!((b.min_seq, b.max_seq, b.entries), (4, 4, 1));
        assert_eq!(table_bounds(&points(), None).entries, 2);
    }
}
