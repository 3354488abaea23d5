//! [`Iter`]: the public scan behind `range`, `prefix` and `iter`.
//!
//! A scan holds the [`ReadState`] it started with (memtables and version, so its tables'
//! files stay alive) and a sequence number; it merges every source from both ends and keeps,
//! per user key, the newest version at or below its sequence number, skipping tombstones.
//!
//! Range tombstones: a scan gathers, when it starts, the range tombstones of every memtable
//! and table its range touches (all in memory) into one fragmented view, and skips a key
//! whose newest visible version is older than the newest visible tombstone covering it. A
//! scan over a tree without range tombstones has no view and pays nothing.

use crate::error::{Error, Result};
use crate::iter::{BoxedIter, Entry, InternalIter, KeyRange, MergeIter};
use crate::key::END_OF_KEYS;
use crate::key::{self, InternalKey, SeqNo, ValueKind};
use crate::memtable::Memtable;
use crate::range_del::{self, Fragments};
use crate::read::{ReadPath, ReadState};
use crate::sstable::CacheUse;
use crate::version::{level_entries, table_entries, NUM_LEVELS};
use bytes::Bytes;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

/// Converts user range bounds into owned key bounds.
pub(crate) fn bounds<K: AsRef<[u8]>, R: RangeBounds<K>>(range: &R) -> KeyRange {
    let conv = |b: Bound<&K>| match b {
        Bound::Included(k) => Bound::Included(Bytes::copy_from_slice(k.as_ref())),
        Bound::Excluded(k) => Bound::Excluded(Bytes::copy_from_slice(k.as_ref())),
        Bound::Unbounded => Bound::Unbounded,
    };
    KeyRange {
        lo: conv(range.start_bound()),
        hi: conv(range.end_bound()),
    }
}

/// The key range of all keys starting with `prefix`.
pub(crate) fn prefix_bounds(prefix: &[u8]) -> KeyRange {
    let mut end = prefix.to_vec();
    while let Some(&last) = end.last() {
        if last == 0xff {
            end.pop();
        } else {
            let n = end.len();
            end[n - 1] += 1;
            break;
        }
    }
    KeyRange {
        lo: Bound::Included(Bytes::copy_from_slice(prefix)),
        hi: if end.is_empty() {
            Bound::Unbounded
        } else {
            Bound::Excluded(Bytes::from(end))
        },
    }
}

/// One memtable's entries in a range, walked by re-seeking from the last key each end
/// returned, so that no borrow of the skiplist is held. The front takes a batch per seek
/// (4 entries, doubling up to 64 as the scan goes on), so a long scan searches the skiplist
/// rarely and a short one copies little. A batch is safe to hold: every entry the scan can
/// see was in the memtable before the scan started.
struct MemIter {
    mem: Arc<Memtable>,
    range: KeyRange,
    front: Option<InternalKey>,
    back: Option<InternalKey>,
    /// Entries fetched for the front and not yet returned.
    ahead: std::collections::VecDeque<(InternalKey, Bytes)>,
    batch: usize,
    done: bool,
}

impl MemIter {
    /// The entry as the merge takes it: still sharing the memtable's batch arena, which the
    /// scan's read state keeps alive anyway (the scan hands its caller copies).
    fn to_entry((k, v): (InternalKey, Bytes)) -> Entry {
        Entry {
            user_key: k.user_key,
            trailer: k.trailer,
            value: v,
        }
    }
}

impl Iterator for MemIter {
    type Item = Result<Entry>;
    fn next(&mut self) -> Option<Result<Entry>> {
        if self.done {
            return None;
        }
        if self.ahead.is_empty() {
            let from = match &self.front {
                Some(k) => Some((&k.user_key[..], k.trailer, false)),
                None => match &self.range.lo {
                    Bound::Included(b) => Some((&b[..], u64::MAX, true)),
                    Bound::Excluded(b) => Some((&b[..], 0, false)),
                    Bound::Unbounded => None,
                },
            };
            self.mem.entries_from(from, self.batch, &mut self.ahead);
            self.batch = (self.batch * 2).min(64);
        }
        let cand = self.ahead.pop_front();
        let Some(cand) = cand else {
            self.done = true;
            return None;
        };
        let past_back = self.back.as_ref().is_some_and(|b| cand.0 >= *b);
        if past_back || !self.range.below_hi(&cand.0.user_key) {
            self.done = true;
            return None;
        }
        self.front = Some(cand.0.clone());
        Some(Ok(Self::to_entry(cand)))
    }
}

/// A memtable does not know how old its entries are: it never skips.
impl InternalIter for MemIter {}

impl DoubleEndedIterator for MemIter {
    fn next_back(&mut self) -> Option<Result<Entry>> {
        if self.done {
            return None;
        }
        let cand = match &self.back {
            Some(k) => self.mem.seek_backward(&k.user_key, k.trailer, false),
            None => match &self.range.hi {
                Bound::Included(b) => self.mem.seek_backward(b, 0, true),
                Bound::Excluded(b) => self.mem.seek_backward(b, u64::MAX, false),
                Bound::Unbounded => self.mem.last(),
            },
        };
        let Some(cand) = cand else {
            self.done = true;
            return None;
        };
        let past_front = self.front.as_ref().is_some_and(|f| cand.0 <= *f);
        if past_front || !self.range.above_lo(&cand.0.user_key) {
            self.done = true;
            return None;
        }
        self.back = Some(cand.0.clone());
        Some(Ok(Self::to_entry(cand)))
    }
}

/// An iterator over the key/value pairs of a range, as of one point in time, in ascending key
/// order (descending from the back: it is a [`DoubleEndedIterator`]).
///
/// Each item is a `Result`: a damaged block or an I/O error ends the scan with an `Err`
/// (never a silently skipped key). After [`Db::close`](crate::Db::close), the next item is
/// [`Error::Closed`].
pub struct Iter {
    read: Arc<ReadPath>,
    _state: Arc<ReadState>,
    seq: SeqNo,
    merge: MergeIter,
    /// The range tombstones of every source, merged; `None` if no source has any.
    range_dels: Option<Fragments>,
    last_front: Option<Bytes>,
    last_back: Option<Bytes>,
    done: bool,
}

impl std::fmt::Debug for Iter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Iter")
            .field("seq", &self.seq)
            .field("done", &self.done)
            .finish()
    }
}

fn failed(e: Error) -> BoxedIter {
    Box::new(std::iter::once(Err(e)))
}

/// Builds a scan of `range` at `seq` over `state`.
pub(crate) fn new_iter(
    read: Arc<ReadPath>,
    state: Arc<ReadState>,
    seq: SeqNo,
    range: KeyRange,
) -> Iter {
    let mut sources: Vec<BoxedIter> = Vec::new();
    let mut range_dels = None;
    if !range.is_empty() {
        match gather_range_dels(&state, &range, seq) {
            Ok(rd) => range_dels = rd,
            Err(e) => sources.push(failed(e)),
        }
        for mem in std::iter::once(&state.mem).chain(state.imms.iter()) {
            sources.push(Box::new(MemIter {
                mem: mem.clone(),
                range: range.clone(),
                front: None,
                back: None,
                ahead: std::collections::VecDeque::new(),
                batch: 4,
                done: false,
            }));
        }
        for t in &state.version.levels[0] {
            if !range.overlaps(t.meta.smallest_user(), t.meta.largest_user()) {
                continue;
            }
            match table_entries(t, range.clone(), CacheUse::Fill) {
                Ok(it) => sources.push(Box::new(it)),
                Err(e) => sources.push(failed(e)),
            }
        }
        for level in 1..NUM_LEVELS {
            let tables = &state.version.levels[level];
            if !tables.is_empty() {
                sources.push(Box::new(level_entries(
                    tables,
                    range.clone(),
                    CacheUse::Fill,
                )));
            }
        }
    }
    Iter {
        read,
        _state: state,
        seq,
        merge: MergeIter::new(sources),
        range_dels,
        last_front: None,
        last_back: None,
        done: false,
    }
}

/// The range tombstones of every memtable and table that `range` touches, as a reader at
/// `seq` sees them, merged; `None` if there are none. Tables' tombstones are in memory
/// (opening a table that is not open yet is the only possible I/O).
fn gather_range_dels(state: &ReadState, range: &KeyRange, seq: SeqNo) -> Result<Option<Fragments>> {
    // Only the pieces inside the scan's range matter, and of each only the number this
    // scan sees: clip each holder's to them.
    let (lo, hi) = range_del::half_open(
        range.lo.as_ref().map(|k| &k[..]),
        range.hi.as_ref().map(|k| &k[..]),
    );
    let clip = |f: &Fragments| f.clip_visible(lo.as_deref(), hi.as_deref(), seq);
    let mut parts: Vec<Fragments> = Vec::new();
    for mem in std::iter::once(&state.mem).chain(state.imms.iter()) {
        parts.extend(mem.range_tombstones().map(|r| clip(&r.fragments())));
    }
    for (level, tables) in state.version.levels.iter().enumerate() {
        // L1+ is sorted and disjoint: start at the first table that can reach the range.
        let first = match (&range.lo, level) {
            (Bound::Included(k) | Bound::Excluded(k), 1..) => {
                tables.partition_point(|t| t.meta.largest_user() < &k[..])
            }
            _ => 0,
        };
        for t in &tables[first..] {
            if !range.overlaps(t.meta.smallest_user(), t.meta.largest_user()) {
                if level > 0 && !range.below_hi(t.meta.smallest_user()) {
                    break;
                }
                continue;
            }
            parts.extend(t.reader()?.range_dels().map(|f| clip(f)));
        }
    }
    parts.retain(|p| !p.is_empty());
    // One holder's pieces are already sorted and disjoint.
    Ok(match parts.len() {
        0 => None,
        1 => parts.pop(),
        _ => Some(range_del::merge(&parts)),
    })
}

impl Iter {
    /// True if a range tombstone visible to this scan deletes `e`.
    fn covered(&self, e: &Entry) -> bool {
        self.range_dels
            .as_ref()
            .is_some_and(|rd| rd.covering_seq(&e.user_key, self.seq) > e.seq())
    }

    /// Before the front walks on from `e`, a key a range tombstone deletes: the sources skip
    /// what they know that tombstone deletes up to its end (tables and blocks whose entries
    /// are all older pass unread). Memtables, and tables with newer writes, are walked.
    fn skip_covered(&mut self, e: &Entry) -> Result<()> {
        let Some(rd) = &self.range_dels else {
            return Ok(());
        };
        let Some((seq, end)) = rd.covering(&e.user_key, self.seq) else {
            return Ok(());
        };
        // Disjoint fields: the end is borrowed from the fragments, not copied.
        self.merge
            .skip_front_to(end.unwrap_or(&END_OF_KEYS[..]), seq)
    }

    /// The mirror of [`skip_covered`](Self::skip_covered) for the back end, after a key a
    /// range tombstone deletes: the sources skip back over what they know that tombstone
    /// deletes down to its start.
    fn skip_covered_back(&mut self, e: &Entry) -> Result<()> {
        let Some(rd) = &self.range_dels else {
            return Ok(());
        };
        let Some((seq, start)) = rd.covering_from(&e.user_key, self.seq) else {
            return Ok(());
        };
        self.merge.skip_back_to(start, seq)
    }

    fn fail(&mut self, e: Error) -> Option<Result<(Vec<u8>, Vec<u8>)>> {
        self.done = true;
        Some(Err(e))
    }

    fn closed(&mut self) -> bool {
        self.read.is_closed()
    }
}

impl Iterator for Iter {
    type Item = Result<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        if self.closed() {
            return self.fail(Error::Closed);
        }
        loop {
            let e = match self.merge.pop_front() {
                Ok(Some(e)) => e,
                Ok(None) => {
                    self.done = true;
                    return None;
                }
                Err(e) => return self.fail(e),
            };
            if self.last_back.as_ref().is_some_and(|b| e.user_key >= *b) {
                self.done = true;
                return None;
            }
            if e.seq() > self.seq || self.last_front.as_ref() == Some(&e.user_key) {
                continue;
            }
            self.last_front = Some(e.user_key.clone());
            if self.covered(&e) {
                if let Err(err) = self.skip_covered(&e) {
                    return self.fail(err);
                }
                continue;
            }
            match e.kind() {
                Some(ValueKind::Put) => return Some(Ok((e.user_key.to_vec(), e.value.to_vec()))),
                Some(ValueKind::Delete) => continue,
                None => {
                    return self.fail(Error::InvalidArgument(format!(
                        "entry with unknown kind {}",
                        e.trailer as u8
                    )))
                }
            }
        }
    }
}

impl DoubleEndedIterator for Iter {
    fn next_back(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        if self.closed() {
            return self.fail(Error::Closed);
        }
        loop {
            let first = match self.merge.pop_back() {
                Ok(Some(e)) => e,
                Ok(None) => {
                    self.done = true;
                    return None;
                }
                Err(e) => return self.fail(e),
            };
            if self
                .last_front
                .as_ref()
                .is_some_and(|f| first.user_key <= *f)
            {
                self.done = true;
                return None;
            }
            let user_key = first.user_key.clone();
            let mut newest: Option<Entry> = (first.seq() <= self.seq).then_some(first);
            loop {
                match self.merge.peek_back() {
                    Ok(Some(e)) if e.user_key == user_key => {}
                    Ok(_) => break,
                    Err(e) => return self.fail(e),
                }
                match self.merge.pop_back() {
                    Ok(Some(e)) => {
                        if e.seq() <= self.seq {
                            newest = Some(e);
                        }
                    }
                    Ok(None) => break,
                    Err(e) => return self.fail(e),
                }
            }
            self.last_back = Some(user_key);
            if let Some(e) = newest {
                match key::trailer_kind(e.trailer) {
                    Some(_) if self.covered(&e) => {
                        if let Err(err) = self.skip_covered_back(&e) {
                            return self.fail(err);
                        }
                        continue;
                    }
                    Some(ValueKind::Put) => {
                        return Some(Ok((e.user_key.to_vec(), e.value.to_vec())))
                    }
                    Some(ValueKind::Delete) => continue,
                    None => {
                        return self.fail(Error::InvalidArgument(format!(
                            "entry with unknown kind {}",
                            e.trailer as u8
                        )))
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_bounds_cover_exactly_the_prefix() {
        let r = prefix_bounds(b"ab");
        assert!(
            r.contains(b"ab")
                && r.contains(b"ab\xff\xff")
                && !r.contains(b"ac")
                && !r.contains(b"aa")
        );
        let r = prefix_bounds(b"a\xff");
        assert!(r.contains(b"a\xff\x00") && !r.contains(b"b") && r.contains(b"a\xff"));
        assert!(matches!(r.hi, Bound::Excluded(ref b) if &b[..] == b"b"));
        let r = prefix_bounds(b"\xff\xff");
        assert!(matches!(r.hi, Bound::Unbounded));
        let r = prefix_bounds(b"");
        assert!(matches!(r.hi, Bound::Unbounded) && r.contains(b""));
    }

    /// Review finding (session 22): a scan's tombstone view copied every sequence number of
    /// every memtable piece: after `n` nested deletes (a log purged again and again, as the
    /// Raft log store does) each scan built and sorted ~n^2/2 tombstones. It keeps the one
    /// number per piece the scan sees.
    #[test]
    fn a_scans_tombstone_view_holds_one_number_per_piece() {
        let opts = crate::Options::default()
            .file_system(Arc::new(crate::fs::MemFs::new()))
            .auto_compaction(false);
        let db = crate::Db::open_with("/db", opts).unwrap();
        for i in 0..300u32 {
            db.insert(format!("log/{i:06}"), "x").unwrap();
            db.remove_range(format!("log/")..format!("log/{:06}", i + 1))
                .unwrap();
        }
        db.insert("log/999999", "kept").unwrap();
        let mut it = db.prefix("log/");
        let view = it.range_dels.as_ref().expect("the deletes");
        assert_eq!(view.len(), view.fragments().len());
        assert!(view.fragments().len() <= 301, "{}", view.fragments().len());
        let (k, v) = it.next().unwrap().unwrap();
        assert_eq!((&k[..], &v[..]), (&b"log/999999"[..], &b"kept"[..]));
        assert!(it.next().is_none());
    }

    #[test]
    fn mem_iter_meets_in_the_middle() {
        let m = Arc::new(Memtable::new(1));
        for (i, k) in ["a", "b", "c", "d"].iter().enumerate() {
            m.insert(
                Bytes::copy_from_slice(k.as_bytes()),
                i as u64 + 1,
                ValueKind::Put,
                Bytes::new(),
            )
            .unwrap();
        }
        let mut it = MemIter {
            mem: m,
            range: bounds(&(&b"b"[..]..)),
            front: None,
            back: None,
            ahead: std::collections::VecDeque::new(),
            batch: 4,
            done: false,
        };
        assert_eq!(it.next().unwrap().unwrap().user_key, "b");
        assert_eq!(it.next_back().unwrap().unwrap().user_key, "d");
        assert_eq!(it.next_back().unwrap().unwrap().user_key, "c");
        assert!(it.next().is_none());
    }
}
