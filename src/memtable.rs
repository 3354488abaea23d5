//! The memtable: recent writes in a lock-free skiplist ordered by internal key.
//!
//! Readers never block writers: a get or an iterator sees only entries at or below its
//! sequence number, and the writer publishes a group's sequence number only after every entry
//! of the group is inserted, which makes groups (batches) appear atomically.
//!
//! A [`ScalableBloom`] filter over its user keys sits in front of the skiplist, so a get for a
//! key the memtable does not hold usually skips the skiplist walk.
//!
//! Range tombstones sit beside the skiplist, kept fragmented ([`Fragments`], rebuilt on each
//! range delete: they are few), so that a get or a scan asks them with one binary search. A
//! memtable that never saw one answers "none" from a flag.

use crate::filter::hash_key;
use crate::filter::scalable::ScalableBloom;
use crate::key::{self, InternalKey, KeyRef, KeyView, SeqNo, ValueKind};
use crate::range_del::{Fragments, RangeTombstone};
use arc_swap::ArcSwap;
use bytes::Bytes;
use crossbeam_skiplist::SkipMap;
use parking_lot::Mutex;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// Approximate bytes of skiplist bookkeeping per entry.
const ENTRY_OVERHEAD: usize = 64;

/// What the memtable knows about a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// The newest visible version is a value, written at this sequence number.
    Value(Bytes, SeqNo),
    /// The newest visible version is a tombstone, written at this sequence number.
    Deleted(SeqNo),
    /// No visible version here: look further down.
    Absent,
    /// The memtable's filter says it holds no version of the key (the skiplist was not
    /// searched): look further down.
    Filtered,
}

/// One memtable, tied to the WAL file that holds the same writes.
#[derive(Debug)]
pub(crate) struct Memtable {
    map: SkipMap<InternalKey, Bytes>,
    filter: ScalableBloom,
    approx_bytes: AtomicUsize,
    wal_number: u64,
    /// Range tombstones as written, and fragmented (what readers ask).
    range_dels: Mutex<Vec<RangeTombstone>>,
    range_frags: ArcSwap<Fragments>,
    has_range_dels: AtomicBool,
}

/// An entry copied out of the memtable.
pub(crate) type Entry = (InternalKey, Bytes);

/// A skiplist bound at `probe`, including it or not.
fn bound<'a>(probe: &'a KeyRef<'_>, inclusive: bool) -> Bound<&'a dyn KeyView> {
    let probe: &dyn KeyView = probe;
    if inclusive {
        Bound::Included(probe)
    } else {
        Bound::Excluded(probe)
    }
}

impl Memtable {
    pub(crate) fn new(wal_number: u64) -> Self {
        Memtable::with_filter(wal_number, ScalableBloom::default())
    }

    /// A memtable that will be sealed at about `bytes`: its filter's first stage is planned
    /// for the entries that many bytes hold when entries are small (96 bytes with overhead).
    pub(crate) fn sized_for(wal_number: u64, bytes: usize) -> Self {
        let keys = (bytes / 96) as u64;
        Memtable::with_filter(wal_number, ScalableBloom::with_first_stage(keys))
    }

    fn with_filter(wal_number: u64, filter: ScalableBloom) -> Self {
        Memtable {
            map: SkipMap::new(),
            filter,
            approx_bytes: AtomicUsize::new(0),
            wal_number,
            range_dels: Mutex::new(Vec::new()),
            range_frags: ArcSwap::from_pointee(Fragments::default()),
            has_range_dels: AtomicBool::new(false),
        }
    }

    /// Number of the WAL whose records this memtable holds.
    pub(crate) fn wal_number(&self) -> u64 {
        self.wal_number
    }

    pub(crate) fn insert(&self, user_key: Bytes, seq: SeqNo, kind: ValueKind, value: Bytes) {
        let size = user_key.len() + value.len() + key::TRAILER_LEN + ENTRY_OVERHEAD;
        // The filter first: a reader that can see the entry must see its bits.
        self.filter.add(hash_key(&user_key));
        self.map
            .insert(InternalKey::new(user_key, seq, kind), value);
        self.approx_bytes.fetch_add(size, Ordering::Relaxed);
    }

    /// Records a range tombstone `[start, end)` at `seq` (`end = None`: to the end of the key
    /// space). Readers see it before the writer publishes `seq`.
    pub(crate) fn insert_range_delete(&self, start: Bytes, end: Option<Bytes>, seq: SeqNo) {
        let size = start.len() + end.as_ref().map_or(0, |e| e.len()) + ENTRY_OVERHEAD;
        let mut raw = self.range_dels.lock();
        raw.push(RangeTombstone { start, end, seq });
        self.range_frags
            .store(Arc::new(Fragments::build(raw.iter().cloned())));
        self.has_range_dels.store(true, Ordering::Release);
        self.approx_bytes.fetch_add(size, Ordering::Relaxed);
    }

    /// The memtable's range tombstones, fragmented; `None` if it has none (the common case,
    /// answered from a flag).
    pub(crate) fn range_tombstones(&self) -> Option<Arc<Fragments>> {
        self.has_range_dels
            .load(Ordering::Acquire)
            .then(|| self.range_frags.load_full())
    }

    /// Approximate memory held, in bytes.
    pub(crate) fn approx_bytes(&self) -> usize {
        self.approx_bytes.load(Ordering::Relaxed)
    }

    /// True if it holds no entry and no range tombstone.
    pub(crate) fn is_empty(&self) -> bool {
        self.map.is_empty() && !self.has_range_dels.load(Ordering::Acquire)
    }

    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// Bytes of the memtable's filter.
    pub(crate) fn filter_bytes(&self) -> usize {
        self.filter.memory_bytes()
    }

    /// [`get`](Self::get) behind the filter: `hash` is [`hash_key`] of `user_key`.
    pub(crate) fn get_hashed(&self, user_key: &[u8], hash: u64, seq: SeqNo) -> Lookup {
        if !self.filter.may_contain(hash) {
            return Lookup::Filtered;
        }
        self.get(user_key, seq)
    }

    /// The newest version of `user_key` with sequence at most `seq`.
    pub(crate) fn get(&self, user_key: &[u8], seq: SeqNo) -> Lookup {
        let probe = KeyRef::new(user_key, key::lookup_trailer(seq));
        let probe: &dyn KeyView = &probe;
        match self.map.lower_bound(Bound::Included(probe)) {
            Some(e) if e.key().user_key.as_ref() == user_key => {
                let seq = key::trailer_seq(e.key().trailer);
                match e.key().kind() {
                    Some(ValueKind::Put) => Lookup::Value(e.value().clone(), seq),
                    _ => Lookup::Deleted(seq),
                }
            }
            _ => Lookup::Absent,
        }
    }

    /// Up to `max` entries in internal order, starting after (`user_key`, `trailer`) (or at
    /// it if `inclusive`), or at the first entry if `from` is `None`; appended to `out`. One
    /// skiplist search, then a walk along the bottom level.
    pub(crate) fn entries_from(
        &self,
        from: Option<(&[u8], u64, bool)>,
        max: usize,
        out: &mut std::collections::VecDeque<Entry>,
    ) {
        let mut cur = match from {
            Some((user_key, trailer, inclusive)) => {
                let probe = KeyRef::new(user_key, trailer);
                self.map.lower_bound(bound(&probe, inclusive))
            }
            None => self.map.front(),
        };
        while let Some(e) = cur {
            out.push_back((e.key().clone(), e.value().clone()));
            if out.len() >= max {
                break;
            }
            cur = e.next();
        }
    }

    /// The last entry before (`user_key`, `trailer`) in internal order, or at it if
    /// `inclusive`.
    pub(crate) fn seek_backward(
        &self,
        user_key: &[u8],
        trailer: u64,
        inclusive: bool,
    ) -> Option<Entry> {
        let probe = KeyRef::new(user_key, trailer);
        self.map
            .upper_bound(bound(&probe, inclusive))
            .map(|e| (e.key().clone(), e.value().clone()))
    }

    /// The first entry of the memtable.
    pub(crate) fn first(&self) -> Option<Entry> {
        self.map
            .front()
            .map(|e| (e.key().clone(), e.value().clone()))
    }

    /// The last entry of the memtable.
    pub(crate) fn last(&self) -> Option<Entry> {
        self.map
            .back()
            .map(|e| (e.key().clone(), e.value().clone()))
    }

    /// Every entry in internal-key order (for flushing a sealed memtable).
    pub(crate) fn iter(&self) -> impl Iterator<Item = Entry> + '_ {
        self.map
            .iter()
            .map(|e| (e.key().clone(), e.value().clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn get_sees_newest_version_at_or_below_seq() {
        let m = Memtable::new(1);
        m.insert(b("k"), 1, ValueKind::Put, b("v1"));
        m.insert(b("k"), 3, ValueKind::Put, b("v3"));
        m.insert(b("k"), 5, ValueKind::Delete, Bytes::new());
        m.insert(b("ka"), 2, ValueKind::Put, b("x"));
        assert_eq!(m.get(b"k", 0), Lookup::Absent);
        assert_eq!(m.get(b"k", 1), Lookup::Value(b("v1"), 1));
        assert_eq!(m.get(b"k", 4), Lookup::Value(b("v3"), 3));
        assert_eq!(m.get(b"k", 5), Lookup::Deleted(5));
        assert_eq!(m.get(b"j", 9), Lookup::Absent);
        assert_eq!(m.get(b"ka", 9), Lookup::Value(b("x"), 2));
        assert_eq!(m.get(b"", 9), Lookup::Absent);
        assert!(m.approx_bytes() > 0);
        assert_eq!(m.len(), 4);
    }

    #[test]
    fn range_tombstones_make_the_memtable_non_empty_and_are_fragmented() {
        let m = Memtable::new(1);
        assert!(m.range_tombstones().is_none() && m.is_empty());
        m.insert_range_delete(b("a"), Some(b("m")), 4);
        m.insert_range_delete(b("f"), None, 7);
        assert!(!m.is_empty());
        let f = m.range_tombstones().unwrap();
        assert_eq!(f.covering_seq(b"g", 10), 7);
        assert_eq!(f.covering_seq(b"g", 6), 4);
        assert_eq!(f.covering_seq(b"zz", 6), 0);
    }

    #[test]
    fn seeks_walk_internal_order_both_ways() {
        let m = Memtable::new(1);
        for (i, k) in ["a", "b", "c"].iter().enumerate() {
            m.insert(b(k), i as u64 + 1, ValueKind::Put, b(k));
        }
        let mut out = std::collections::VecDeque::new();
        m.entries_from(
            Some((b"b", key::lookup_trailer(key::MAX_SEQ), true)),
            1,
            &mut out,
        );
        let (k, _) = out.pop_front().unwrap();
        assert_eq!(k.user_key, b("b"));
        m.entries_from(Some((&k.user_key, k.trailer, false)), 5, &mut out);
        // After "b": "c" only (a batch stops at the end, or at `max`).
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].0.user_key, b("c"));
        out.clear();
        m.entries_from(None, 2, &mut out);
        let keys: Vec<Bytes> = out.iter().map(|(k, _)| k.user_key.clone()).collect();
        assert_eq!(keys, vec![b("a"), b("b")]);
        let (k, _) = m.seek_backward(b"c", 0, true).unwrap();
        assert_eq!(k.user_key, b("c"));
        let (k, _) = m.seek_backward(&k.user_key, k.trailer, false).unwrap();
        assert_eq!(k.user_key, b("b"));
        assert_eq!(m.first().unwrap().0.user_key, b("a"));
        assert_eq!(m.last().unwrap().0.user_key, b("c"));
        let all: Vec<_> = m.iter().map(|(k, _)| k.user_key).collect();
        assert_eq!(all, vec![b("a"), b("b"), b("c")]);
    }
}
