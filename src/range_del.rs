//! Range tombstones: `[start, end)` deletes at a sequence number, fragmented into
//! non-overlapping pieces so that "is this key covered, and by what" is one binary search.
//!
//! A [`RangeTombstone`] deletes every version of every key in `[start, end)` whose sequence
//! number is below its own, for readers at or above its sequence number. `end = None` is the
//! end of the key space. [`Fragments`] is the form every holder keeps (a memtable, each
//! table, a scan, a compaction): pieces sorted by start that never overlap, each with the
//! sequence numbers of every tombstone covering it, newest first, as RocksDB's and Pebble's
//! fragmenters produce. The same form is the range-deletion block of a table
//! ([`Fragments::encode`], specified in `docs/format.md` §5.7), which decoding checks whole:
//! nothing read from disk is trusted unchecked.

use crate::batch::MAX_KEY_SIZE;
use crate::encoding::{put_bytes, put_varint, Reader};
use crate::key::{SeqNo, MAX_SEQ};
use bytes::Bytes;
use std::ops::Bound;

/// The longest start or end a tombstone can have: a key plus one byte (an `Excluded` start
/// or an `Included` end becomes the key's immediate successor, `key ++ 0x00`).
pub(crate) const MAX_BOUND_LEN: usize = MAX_KEY_SIZE + 1;

/// One range deletion as written: `[start, end)` at `seq`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RangeTombstone {
    pub(crate) start: Bytes,
    /// `None`: up to the end of the key space.
    pub(crate) end: Option<Bytes>,
    pub(crate) seq: SeqNo,
}

/// One piece of the fragmented tombstones: `[start, end)` with the sequence numbers of the
/// tombstones that cover it, strictly descending.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Fragment {
    pub(crate) start: Bytes,
    pub(crate) end: Option<Bytes>,
    pub(crate) seqs: Vec<SeqNo>,
}

impl Fragment {
    fn contains(&self, key: &[u8]) -> bool {
        self.start[..] <= *key && end_above(&self.end, key)
    }

    /// The newest of its sequence numbers at or below `read_seq`; 0 if none.
    fn visible_seq(&self, read_seq: SeqNo) -> SeqNo {
        self.seqs
            .iter()
            .copied()
            .find(|&s| s <= read_seq)
            .unwrap_or(0)
    }
}

/// True if an exclusive `end` lies above `key`.
fn end_above(end: &Option<Bytes>, key: &[u8]) -> bool {
    end.as_ref().is_none_or(|e| key < &e[..])
}

/// The smallest key above `key`: `key ++ 0x00`.
pub(crate) fn successor(key: &[u8]) -> Bytes {
    let mut v = Vec::with_capacity(key.len() + 1);
    v.extend_from_slice(key);
    v.push(0);
    Bytes::from(v)
}

/// The `[start, end)` form of a range's bounds: an excluded start and an included end become
/// the key's [`successor`]; `None` is unbounded on that side.
pub(crate) fn half_open(start: Bound<&[u8]>, end: Bound<&[u8]>) -> (Option<Bytes>, Option<Bytes>) {
    let start = match start {
        Bound::Included(k) => Some(Bytes::copy_from_slice(k)),
        Bound::Excluded(k) => Some(successor(k)),
        Bound::Unbounded => None,
    };
    let end = match end {
        Bound::Included(k) => Some(successor(k)),
        Bound::Excluded(k) => Some(Bytes::copy_from_slice(k)),
        Bound::Unbounded => None,
    };
    (start, end)
}

/// The non-empty `tombstones` sorted by start, and every start and end among them, sorted
/// and deduplicated: between two neighbouring points the set of covering tombstones is
/// constant.
fn sweep_points(
    tombstones: impl IntoIterator<Item = RangeTombstone>,
) -> (Vec<RangeTombstone>, Vec<Bytes>) {
    let mut ts: Vec<RangeTombstone> = tombstones
        .into_iter()
        .filter(|t| end_above(&t.end, &t.start))
        .collect();
    ts.sort_by(|a, b| a.start.cmp(&b.start));
    let mut points: Vec<Bytes> = ts
        .iter()
        .flat_map(|t| std::iter::once(t.start.clone()).chain(t.end.clone()))
        .collect();
    points.sort();
    points.dedup();
    (ts, points)
}

/// Range tombstones in fragmented form (see the module doc). Empty by default.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Fragments {
    frags: Vec<Fragment>,
}

impl Fragments {
    /// Fragments `tombstones` (any order, may overlap, empty ranges ignored).
    pub(crate) fn build(tombstones: impl IntoIterator<Item = RangeTombstone>) -> Fragments {
        let (ts, points) = sweep_points(tombstones);
        if ts.is_empty() {
            return Fragments::default();
        }
        let mut frags = Vec::new();
        let mut active: Vec<&RangeTombstone> = Vec::new();
        let mut next = 0;
        for (i, p) in points.iter().enumerate() {
            active.retain(|t| end_above(&t.end, p));
            while next < ts.len() && ts[next].start == *p {
                active.push(&ts[next]);
                next += 1;
            }
            if active.is_empty() {
                continue;
            }
            let mut seqs: Vec<SeqNo> = active.iter().map(|t| t.seq).collect();
            seqs.sort_unstable_by(|a, b| b.cmp(a));
            seqs.dedup();
            frags.push(Fragment {
                start: p.clone(),
                end: points.get(i + 1).cloned(),
                seqs,
            });
        }
        Fragments { frags }
    }

    /// `tombstones` cut into pieces that do not overlap, each with the newest sequence number
    /// of the tombstones covering it: what the range deletes of one write group become in a
    /// memtable. A group is published whole, so no reader reads at a sequence number between
    /// two of its own: an older tombstone of the group under a newer one deletes nothing the
    /// newer one does not. Keeping every covering number, as [`build`](Self::build) does,
    /// would make one batch of nested ranges quadratic in memory (and its replay too). At most
    /// twice as many pieces as tombstones; `O(n log n)`.
    pub(crate) fn newest_pieces(tombstones: Vec<RangeTombstone>) -> Vec<RangeTombstone> {
        let (ts, points) = sweep_points(tombstones);
        // The tombstones begun so far, newest on top; one that has ended is dropped when it
        // comes to the top (one under a live newer one does not matter until then).
        let mut begun: std::collections::BinaryHeap<(SeqNo, usize)> = Default::default();
        let mut next = 0;
        let mut out: Vec<RangeTombstone> = Vec::new();
        for (i, p) in points.iter().enumerate() {
            while next < ts.len() && ts[next].start == *p {
                begun.push((ts[next].seq, next));
                next += 1;
            }
            while let Some(&(_, j)) = begun.peek() {
                if end_above(&ts[j].end, p) {
                    break;
                }
                begun.pop();
            }
            let Some(&(seq, _)) = begun.peek() else {
                continue;
            };
            let end = points.get(i + 1).cloned();
            match out.last_mut() {
                // The piece before, at the same number, ends here: extend it.
                Some(last) if last.seq == seq && last.end.as_ref() == Some(p) => last.end = end,
                _ => out.push(RangeTombstone {
                    start: p.clone(),
                    end,
                    seq,
                }),
            }
        }
        out
    }

    /// The union of two fragmented sets, fragmented: one sweep over both (they are sorted),
    /// `O(n + m)`, where [`build`](Self::build) sorts everything again.
    pub(crate) fn union(&self, other: &Fragments) -> Fragments {
        fn bounds(f: &Fragments) -> impl Iterator<Item = &Bytes> {
            f.frags
                .iter()
                .flat_map(|f| std::iter::once(&f.start).chain(f.end.as_ref()))
        }
        let mut points: Vec<&Bytes> =
            Vec::with_capacity(2 * (self.frags.len() + other.frags.len()));
        let (mut a, mut b) = (bounds(self).peekable(), bounds(other).peekable());
        loop {
            let next = match (a.peek(), b.peek()) {
                (Some(x), Some(y)) if x <= y => a.next(),
                (Some(_), Some(_)) => b.next(),
                (Some(_), None) => a.next(),
                (None, Some(_)) => b.next(),
                (None, None) => break,
            };
            if let Some(p) = next {
                if points.last() != Some(&p) {
                    points.push(p);
                }
            }
        }
        // The fragment of `f` covering `p`, moving `i` forward.
        fn at<'a>(f: &'a Fragments, i: &mut usize, p: &[u8]) -> Option<&'a Fragment> {
            while f.frags.get(*i).is_some_and(|x| !end_above(&x.end, p)) {
                *i += 1;
            }
            f.frags.get(*i).filter(|x| x.start[..] <= *p)
        }
        let (mut i, mut j) = (0, 0);
        let mut frags = Vec::new();
        for (k, p) in points.iter().enumerate() {
            let (x, y) = (at(self, &mut i, p), at(other, &mut j, p));
            let seqs = match (x, y) {
                (None, None) => continue,
                (Some(f), None) | (None, Some(f)) => f.seqs.clone(),
                (Some(f), Some(g)) => {
                    let mut s: Vec<SeqNo> = f.seqs.iter().chain(&g.seqs).copied().collect();
                    s.sort_unstable_by(|a, b| b.cmp(a));
                    s.dedup();
                    s
                }
            };
            frags.push(Fragment {
                start: (*p).clone(),
                end: points.get(k + 1).map(|e| (*e).clone()),
                seqs,
            });
        }
        Fragments { frags }
    }

    /// Every tombstone the fragments hold, one per fragment and sequence number.
    pub(crate) fn tombstones(&self) -> impl Iterator<Item = RangeTombstone> + '_ {
        self.frags.iter().flat_map(|f| {
            f.seqs.iter().map(|&seq| RangeTombstone {
                start: f.start.clone(),
                end: f.end.clone(),
                seq,
            })
        })
    }

    /// The fragments, sorted by start.
    #[cfg(test)]
    pub(crate) fn fragments(&self) -> &[Fragment] {
        &self.frags
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.frags.is_empty()
    }

    /// Heap bytes of the fragment list: its vector and each fragment's sequence numbers. The
    /// keys are not counted: they are `Bytes` shared with the tombstones they came from.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.frags.capacity() * std::mem::size_of::<Fragment>()
            + self
                .frags
                .iter()
                .map(|f| f.seqs.capacity() * std::mem::size_of::<SeqNo>())
                .sum::<usize>()
    }

    /// Number of (fragment, sequence number) pairs: the tombstones a table records.
    pub(crate) fn len(&self) -> usize {
        self.frags.iter().map(|f| f.seqs.len()).sum()
    }

    /// Index of the fragment containing `key`, if any.
    fn find(&self, key: &[u8]) -> Option<usize> {
        let i = self.frags.partition_point(|f| f.start[..] <= *key);
        let i = i.checked_sub(1)?;
        self.frags[i].contains(key).then_some(i)
    }

    /// The newest sequence number at or below `read_seq` of a tombstone covering `key`;
    /// 0 if none does. A version of `key` with a smaller sequence number is deleted for a
    /// reader at `read_seq`.
    pub(crate) fn covering_seq(&self, key: &[u8], read_seq: SeqNo) -> SeqNo {
        self.find(key)
            .map_or(0, |i| self.frags[i].visible_seq(read_seq))
    }

    /// The fragment covering `key` for a reader at `read_seq`, as (its visible sequence
    /// number, its end); `None` if no visible tombstone covers `key`.
    pub(crate) fn covering(&self, key: &[u8], read_seq: SeqNo) -> Option<(SeqNo, Option<&[u8]>)> {
        let f = &self.frags[self.find(key)?];
        let seq = f.visible_seq(read_seq);
        (seq > 0).then_some((seq, f.end.as_deref()))
    }

    /// [`covering`](Self::covering) with the fragment's start instead of its end: what a
    /// walk from the back skips down to.
    pub(crate) fn covering_from(&self, key: &[u8], read_seq: SeqNo) -> Option<(SeqNo, &[u8])> {
        let f = &self.frags[self.find(key)?];
        let seq = f.visible_seq(read_seq);
        (seq > 0).then_some((seq, &f.start[..]))
    }

    /// True if tombstones that every reader at or above `snapshot` sees, each newer than
    /// `seq`, cover every key of `[lo, hi]` (inclusive): all versions of those keys up to
    /// `seq` are deleted for every reader. Compaction drops a table this says of its key
    /// range and sequence range without reading it.
    pub(crate) fn covers_span(&self, lo: &[u8], hi: &[u8], seq: SeqNo, snapshot: SeqNo) -> bool {
        let Some(mut i) = self.find(lo) else {
            return false;
        };
        loop {
            let f = &self.frags[i];
            if f.visible_seq(snapshot) <= seq {
                return false;
            }
            if end_above(&f.end, hi) {
                return true;
            }
            // Covered to `f.end`: the next piece must start right there.
            match (self.frags.get(i + 1), &f.end) {
                (Some(next), Some(end)) if next.start == *end => i += 1,
                _ => return false,
            }
        }
    }

    /// The smallest start, if any.
    pub(crate) fn smallest(&self) -> Option<&Fragment> {
        self.frags.first()
    }

    /// The fragment that ends last, if any.
    pub(crate) fn last(&self) -> Option<&Fragment> {
        self.frags.last()
    }

    /// Smallest and largest sequence numbers held; `None` if empty.
    pub(crate) fn seq_range(&self) -> Option<(SeqNo, SeqNo)> {
        let lo = self.frags.iter().filter_map(|f| f.seqs.last()).min()?;
        let hi = self.frags.iter().filter_map(|f| f.seqs.first()).max()?;
        Some((*lo, *hi))
    }

    /// The pieces inside `[lo, hi)` (`None`: unbounded on that side), cut at `lo` and `hi`.
    /// The pieces are sorted and disjoint: this finds the first that reaches past `lo` by
    /// binary search and stops at the first that starts at `hi`, so a short scan over many
    /// tombstones pays for the pieces it meets, not for all of them.
    pub(crate) fn clip(&self, lo: Option<&[u8]>, hi: Option<&[u8]>) -> Fragments {
        self.clip_keeping(lo, hi, |f| Some(f.seqs.clone()))
    }

    /// [`clip`](Self::clip) for one reader at `read_seq`: each piece keeps only the sequence
    /// number that reader sees (the newest at or below `read_seq`), and pieces it sees none
    /// of are left out. A memtable keeps every number of every piece (`n` nested deletes give
    /// `n^2 / 2` pairs), so a scan's view built from full pieces would cost as much per scan;
    /// this view answers [`covering`](Self::covering) and
    /// [`covering_seq`](Self::covering_seq) at `read_seq` exactly as the full one does.
    pub(crate) fn clip_visible(
        &self,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
        read_seq: SeqNo,
    ) -> Fragments {
        self.clip_keeping(lo, hi, |f| match f.visible_seq(read_seq) {
            0 => None,
            seq => Some(vec![seq]),
        })
    }

    /// The pieces inside `[lo, hi)`, cut there, each with the sequence numbers `keep` gives
    /// it (`None`: the piece is left out).
    fn clip_keeping(
        &self,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
        mut keep: impl FnMut(&Fragment) -> Option<Vec<SeqNo>>,
    ) -> Fragments {
        let first = lo.map_or(0, |l| self.frags.partition_point(|f| !end_above(&f.end, l)));
        let mut frags = Vec::new();
        for f in &self.frags[first..] {
            if hi.is_some_and(|h| f.start[..] >= *h) {
                break;
            }
            let Some(seqs) = keep(f) else {
                continue;
            };
            let start = match lo {
                Some(l) if f.start[..] < *l => Bytes::copy_from_slice(l),
                _ => f.start.clone(),
            };
            let end = match hi {
                Some(h) if end_above(&f.end, h) => Some(Bytes::copy_from_slice(h)),
                _ => f.end.clone(),
            };
            if end_above(&end, &start) {
                frags.push(Fragment { start, end, seqs });
            }
        }
        Fragments { frags }
    }

    /// Keeps, in each fragment, the sequence numbers above `smallest_snapshot` and the newest
    /// at or below it (no reader can tell the older ones apart), and drops the fragments for
    /// which `droppable(fragment)` says the newest at or below it may go too (nothing below
    /// it is left to delete). Compaction's garbage collection.
    pub(crate) fn collapse(
        &self,
        smallest_snapshot: SeqNo,
        mut droppable: impl FnMut(&Fragment) -> bool,
    ) -> Fragments {
        let mut frags = Vec::new();
        for f in &self.frags {
            let mut seqs: Vec<SeqNo> = f
                .seqs
                .iter()
                .copied()
                .filter(|&s| s > smallest_snapshot)
                .collect();
            if let Some(&old) = f.seqs.iter().find(|&&s| s <= smallest_snapshot) {
                if !droppable(f) {
                    seqs.push(old);
                }
            }
            if !seqs.is_empty() {
                frags.push(Fragment {
                    start: f.start.clone(),
                    end: f.end.clone(),
                    seqs,
                });
            }
        }
        Fragments { frags }
    }

    /// The range-deletion block's contents (`docs/format.md` §5.7).
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        put_varint(&mut out, self.frags.len() as u64);
        for f in &self.frags {
            put_bytes(&mut out, &f.start);
            match &f.end {
                Some(e) => {
                    out.push(0);
                    put_bytes(&mut out, e);
                }
                None => out.push(1),
            }
            put_varint(&mut out, f.seqs.len() as u64);
            for &s in &f.seqs {
                put_varint(&mut out, s);
            }
        }
        out
    }

    /// Decodes and checks a range-deletion block: `Err` says what no writer can have
    /// produced (malformed fields, a bound over [`MAX_BOUND_LEN`], an empty or inverted
    /// piece, pieces out of order or overlapping, an unbounded piece that is not the last,
    /// sequence numbers not strictly descending or outside `1..=MAX_SEQ`, trailing bytes).
    pub(crate) fn decode(buf: &[u8]) -> Result<Fragments, String> {
        let mut r = Reader::new(buf);
        let n = r.varint().ok_or("malformed fragment count")?;
        // Each fragment takes at least 4 bytes (start length, end tag, count, one seq).
        if n > (buf.len() / 4) as u64 {
            return Err(format!("{n} fragments cannot fit in {} bytes", buf.len()));
        }
        let mut frags: Vec<Fragment> = Vec::with_capacity((n as usize).min(1024));
        for i in 0..n {
            let bad = |what: &str| format!("fragment {i}: {what}");
            let start = r.length_prefixed().ok_or_else(|| bad("malformed start"))?;
            let end = match r.u8() {
                Some(0) => Some(r.length_prefixed().ok_or_else(|| bad("malformed end"))?),
                Some(1) => None,
                Some(t) => return Err(bad(&format!("unknown end tag {t}"))),
                None => return Err(bad("missing end tag")),
            };
            if start.len() > MAX_BOUND_LEN || end.is_some_and(|e| e.len() > MAX_BOUND_LEN) {
                return Err(bad("bound longer than a key"));
            }
            if end.is_some_and(|e| e <= start) {
                return Err(bad("empty or inverted range"));
            }
            if let Some(prev) = frags.last() {
                match &prev.end {
                    None => return Err(bad("follows an unbounded fragment")),
                    Some(pe) if start < &pe[..] => {
                        return Err(bad("overlaps or precedes the fragment before it"))
                    }
                    _ => {}
                }
            }
            let count = r.varint().ok_or_else(|| bad("malformed count"))?;
            if count == 0 || count > r.remaining() as u64 {
                return Err(bad(&format!("impossible count {count}")));
            }
            let mut seqs = Vec::with_capacity(count as usize);
            for _ in 0..count {
                let s = r.varint().ok_or_else(|| bad("malformed sequence number"))?;
                if s == 0 || s > MAX_SEQ {
                    return Err(bad(&format!("sequence number {s} out of range")));
                }
                if seqs.last().is_some_and(|&p| s >= p) {
                    return Err(bad("sequence numbers not strictly descending"));
                }
                seqs.push(s);
            }
            frags.push(Fragment {
                start: Bytes::copy_from_slice(start),
                end: end.map(Bytes::copy_from_slice),
                seqs,
            });
        }
        if !r.is_empty() {
            return Err(format!("{} bytes after the last fragment", r.remaining()));
        }
        Ok(Fragments { frags })
    }
}

/// Merges the fragments of several holders into one fragmented view.
pub(crate) fn merge<'a>(parts: impl IntoIterator<Item = &'a Fragments>) -> Fragments {
    Fragments::build(parts.into_iter().flat_map(|f| f.tombstones()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn t(start: &str, end: Option<&str>, seq: SeqNo) -> RangeTombstone {
        RangeTombstone {
            start: Bytes::copy_from_slice(start.as_bytes()),
            end: end.map(|e| Bytes::copy_from_slice(e.as_bytes())),
            seq,
        }
    }

    #[test]
    fn overlapping_tombstones_fragment_into_disjoint_pieces() {
        let f = Fragments::build([
            t("b", Some("f"), 5),
            t("d", Some("h"), 9),
            t("a", Some("c"), 2),
        ]);
        type Piece<'a> = (&'a [u8], Option<&'a [u8]>, Vec<u64>);
        let got: Vec<Piece> = f
            .fragments()
            .iter()
            .map(|f| (&f.start[..], f.end.as_deref(), f.seqs.clone()))
            .collect();
        assert_eq!(
            got,
            vec![
                (&b"a"[..], Some(&b"b"[..]), vec![2]),
                (b"b", Some(b"c"), vec![5, 2]),
                (b"c", Some(b"d"), vec![5]),
                (b"d", Some(b"f"), vec![9, 5]),
                (b"f", Some(b"h"), vec![9]),
            ]
        );
        assert_eq!(f.covering_seq(b"e", 100), 9);
        assert_eq!(f.covering_seq(b"e", 8), 5);
        assert_eq!(f.covering_seq(b"e", 4), 0);
        assert_eq!(f.covering_seq(b"h", 100), 0);
        assert_eq!(f.covering_seq(b"", 100), 0);
        assert_eq!(f.len(), 7);
        assert_eq!(f.seq_range(), Some((2, 9)));
    }

    #[test]
    fn unbounded_end_covers_everything_above_its_start() {
        let f = Fragments::build([t("m", None, 3), t("a", Some("n"), 4)]);
        assert_eq!(f.covering_seq(b"zzzz", 10), 3);
        assert_eq!(f.covering_seq(b"m", 10), 4);
        assert!(f.last().unwrap().end.is_none());
        let back = Fragments::decode(&f.encode()).unwrap();
        assert_eq!(back, f);
    }

    #[test]
    fn empty_ranges_are_ignored() {
        assert!(Fragments::build([t("b", Some("b"), 1), t("c", Some("a"), 2)]).is_empty());
    }

    #[test]
    fn clip_cuts_at_both_bounds() {
        let f = Fragments::build([t("a", Some("z"), 3), t("c", None, 5)]);
        let c = f.clip(Some(b"b"), Some(b"d"));
        let got: Vec<(&[u8], Option<&[u8]>)> = c
            .fragments()
            .iter()
            .map(|f| (&f.start[..], f.end.as_deref()))
            .collect();
        assert_eq!(got, vec![(&b"b"[..], Some(&b"c"[..])), (b"c", Some(b"d"))]);
        assert!(f
            .clip(Some(b"zz"), None)
            .fragments()
            .iter()
            .all(|x| x.end.is_none()));
    }

    /// The binary search and the early stop give what cutting every piece gives.
    #[test]
    fn clip_finds_the_same_pieces_as_a_walk_over_all_of_them() {
        let key = |i: u32| format!("{i:04}");
        let f = Fragments::build((0..300u32).map(|i| {
            let end = (i % 7 != 0).then(|| key(i * 3 + i % 5));
            t(&key(i * 3), end.as_deref(), u64::from(i % 11) + 1)
        }));
        let all = |lo: Option<&[u8]>, hi: Option<&[u8]>| {
            let whole = Fragments {
                frags: f.frags.clone(),
            };
            let mut out = Vec::new();
            for p in &whole.frags {
                let start = lo
                    .filter(|l| p.start[..] < **l)
                    .map_or(p.start.to_vec(), <[u8]>::to_vec);
                let end = match hi {
                    Some(h) if end_above(&p.end, h) => Some(h.to_vec()),
                    _ => p.end.as_ref().map(|e| e.to_vec()),
                };
                if end.as_ref().is_none_or(|e| start < *e) {
                    out.push((start, end, p.seqs.clone()));
                }
            }
            out
        };
        let bounds: Vec<Option<String>> = std::iter::once(None)
            .chain((0..1000u32).step_by(37).map(|i| Some(key(i))))
            .collect();
        for lo in &bounds {
            for hi in &bounds {
                let (lo, hi) = (
                    lo.as_deref().map(str::as_bytes),
                    hi.as_deref().map(str::as_bytes),
                );
                let got: Vec<_> = f
                    .clip(lo, hi)
                    .frags
                    .iter()
                    .map(|p| {
                        (
                            p.start.to_vec(),
                            p.end.as_ref().map(|e| e.to_vec()),
                            p.seqs.clone(),
                        )
                    })
                    .collect();
                assert_eq!(got, all(lo, hi), "{lo:?} {hi:?}");
            }
        }
    }

    #[test]
    fn collapse_keeps_what_a_snapshot_can_tell_apart() {
        let f = Fragments::build([
            t("a", Some("c"), 3),
            t("a", Some("c"), 5),
            t("a", Some("c"), 9),
        ]);
        let c = f.collapse(6, |_| false);
        assert_eq!(c.fragments()[0].seqs, vec![9, 5]);
        let c = f.collapse(6, |_| true);
        assert_eq!(c.fragments()[0].seqs, vec![9]);
        assert!(f.collapse(10, |_| true).is_empty());
    }

    #[test]
    fn covers_span_needs_contiguous_visible_newer_pieces() {
        let f = Fragments::build([t("a", Some("f"), 9), t("d", Some("m"), 7), t("p", None, 8)]);
        assert!(f.covers_span(b"b", b"l", 6, 100));
        assert!(!f.covers_span(b"b", b"m", 6, 100), "m is past the end");
        assert!(
            !f.covers_span(b"b", b"l", 7, 100),
            "not newer than seq 7 over [f, m)"
        );
        assert!(
            !f.covers_span(b"b", b"l", 6, 8),
            "the 9 is not visible; 7 is, 8 over [f,m) no"
        );
        assert!(!f.covers_span(b"l", b"q", 1, 100), "gap [m, p)");
        assert!(f.covers_span(b"q", b"zzzz", 1, 100));
        assert!(!f.covers_span(b"", b"b", 1, 100));
    }

    #[test]
    fn decode_rejects_what_no_writer_produces() {
        let good = Fragments::build([t("a", Some("c"), 3), t("d", None, 5)]).encode();
        assert!(Fragments::decode(&good).is_ok());
        for cut in 0..good.len() {
            assert!(Fragments::decode(&good[..cut]).is_err(), "cut at {cut}");
        }
        let mut trailing = good.clone();
        trailing.push(0);
        assert!(Fragments::decode(&trailing).is_err());
        let handmade = |frags: Vec<Fragment>| Fragments { frags }.encode();
        let fr = |s: &str, e: Option<&str>, seqs: Vec<u64>| Fragment {
            start: Bytes::copy_from_slice(s.as_bytes()),
            end: e.map(|e| Bytes::copy_from_slice(e.as_bytes())),
            seqs,
        };
        for bad in [
            vec![fr("b", Some("a"), vec![1])],
            vec![fr("a", Some("a"), vec![1])],
            vec![fr("a", Some("c"), vec![1]), fr("b", Some("d"), vec![2])],
            vec![fr("a", None, vec![1]), fr("b", Some("d"), vec![2])],
            vec![fr("a", Some("c"), vec![])],
            vec![fr("a", Some("c"), vec![1, 2])],
            vec![fr("a", Some("c"), vec![0])],
            vec![fr("a", Some("c"), vec![MAX_SEQ + 1])],
        ] {
            assert!(
                Fragments::decode(&handmade(bad.clone())).is_err(),
                "{bad:?}"
            );
        }
    }

    fn key() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(0u8..4, 0..3)
    }

    proptest! {
        /// Fragmenting never changes which tombstone covers a key at any read point, and its
        /// encoding round-trips.
        #[test]
        fn fragments_answer_like_the_tombstones(
            raw in proptest::collection::vec((key(), proptest::option::of(key()), 1u64..20), 0..8),
            probes in proptest::collection::vec((key(), 0u64..22), 1..30),
        ) {
            let ts: Vec<RangeTombstone> = raw.iter().map(|(s, e, q)| RangeTombstone {
                start: Bytes::copy_from_slice(s),
                end: e.as_ref().map(|e| Bytes::copy_from_slice(e)),
                seq: *q,
            }).collect();
            let f = Fragments::build(ts.clone());
            for (k, read) in &probes {
                let want = ts.iter()
                    .filter(|t| t.start[..] <= k[..] && end_above(&t.end, k) && t.seq <= *read)
                    .map(|t| t.seq).max().unwrap_or(0);
                prop_assert_eq!(f.covering_seq(k, *read), want);
            }
            prop_assert_eq!(Fragments::decode(&f.encode()).unwrap(), f.clone());
            prop_assert_eq!(merge([&f, &Fragments::default()]), f.clone());
            // A union of two halves answers like fragmenting the whole.
            let (x, y) = ts.split_at(ts.len() / 2);
            let u = Fragments::build(x.to_vec()).union(&Fragments::build(y.to_vec()));
            for (k, read) in &probes {
                prop_assert_eq!(u.covering_seq(k, *read), f.covering_seq(k, *read));
            }
            prop_assert!(u.frags.windows(2).all(|w| w[0].end.as_ref().is_some_and(|e| *e <= w[1].start)));
            prop_assert_eq!(Fragments::decode(&u.encode()).unwrap(), u);
        }

        /// A scan's view (the pieces inside its range, each with the one number its reader
        /// sees) answers like the full pieces for that reader, inside the range, with one
        /// number per piece.
        #[test]
        fn visible_clip_answers_like_the_clip(
            raw in proptest::collection::vec((key(), proptest::option::of(key()), 1u64..20), 0..8),
            lo in proptest::option::of(key()),
            hi in proptest::option::of(key()),
            read in 0u64..22,
            probes in proptest::collection::vec(key(), 1..30),
        ) {
            let ts: Vec<RangeTombstone> = raw.iter().map(|(s, e, q)| RangeTombstone {
                start: Bytes::copy_from_slice(s),
                end: e.as_ref().map(|e| Bytes::copy_from_slice(e)),
                seq: *q,
            }).collect();
            let f = Fragments::build(ts);
            let full = f.clip(lo.as_deref(), hi.as_deref());
            let seen = f.clip_visible(lo.as_deref(), hi.as_deref(), read);
            prop_assert_eq!(seen.len(), seen.fragments().len());
            for k in &probes {
                prop_assert_eq!(seen.covering_seq(k, read), full.covering_seq(k, read));
                prop_assert_eq!(seen.covering(k, read), full.covering(k, read));
            }
        }

        /// A write group's tombstones cut to their newest pieces answer like all of them for
        /// every reader at or after the group (the only readers a group has), and not at all
        /// before it; the pieces do not overlap and are at most twice as many.
        #[test]
        fn newest_pieces_answer_like_the_group(
            raw in proptest::collection::vec((key(), proptest::option::of(key()), 0u64..12), 0..10),
            probes in proptest::collection::vec((key(), 0u64..30), 1..30),
        ) {
            let base = 10;
            let ts: Vec<RangeTombstone> = raw.iter().map(|(s, e, q)| RangeTombstone {
                start: Bytes::copy_from_slice(s),
                end: e.as_ref().map(|e| Bytes::copy_from_slice(e)),
                seq: base + *q,
            }).collect();
            let last = base + 11;
            let whole = Fragments::build(ts.clone());
            let pieces = Fragments::newest_pieces(ts.clone());
            prop_assert!(pieces.len() <= 2 * ts.len());
            prop_assert!(pieces.windows(2).all(|w| w[0].end.as_ref().is_some_and(|e| *e <= w[1].start)));
            let cut = Fragments::build(pieces);
            for (k, read) in &probes {
                let read = if *read < base { *read } else { last + read };
                prop_assert_eq!(cut.covering_seq(k, read), whole.covering_seq(k, read), "{:?} at {}", k, read);
            }
        }
    }

    #[test]
    fn nested_ranges_of_one_group_cut_to_linear_pieces() {
        // 2,000 ranges ["", k_i), each inside the next: all of them would keep ~2 million
        // sequence numbers; the newest pieces keep one per piece.
        let nested = |seq: fn(u64) -> u64| -> Vec<RangeTombstone> {
            (0..2000u64)
                .map(|i| RangeTombstone {
                    start: Bytes::new(),
                    end: Some(Bytes::from(format!("k{i:05}"))),
                    seq: seq(i),
                })
                .collect()
        };
        let top = u64::MAX >> 8;
        // The widest range newest: it covers everything, one piece.
        let ts = nested(|i| 100 + i);
        let pieces = Fragments::newest_pieces(ts.clone());
        assert_eq!(pieces.len(), 1);
        assert_eq!(
            (pieces[0].seq, pieces[0].end.as_deref()),
            (2099, Some(&b"k01999"[..]))
        );
        // The narrowest newest: piece [k_(i-1), k_i) is newest under range i.
        let ts = nested(|i| 2099 - i);
        let pieces = Fragments::newest_pieces(ts.clone());
        assert_eq!(pieces.len(), 2000);
        let f = Fragments::build(pieces);
        assert_eq!(f.covering_seq(b"a", top), 2099);
        assert_eq!(f.covering_seq(b"k00000", top), 2098);
        assert_eq!(f.covering_seq(b"k01998x", top), 100);
        assert_eq!(f.covering_seq(b"k01999", top), 0);
        // One number per piece, against every covering one: 2000 * 2001 / 2 of them.
        assert_eq!(f.len(), 2000);
        assert_eq!(Fragments::build(ts).len(), 2000 * 2001 / 2);
    }
}
