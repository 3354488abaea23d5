//! The registry of live snapshots: how many are open at each sequence number, so that
//! compaction knows the oldest version any reader may still need.

use crate::key::SeqNo;
use parking_lot::Mutex;
use std::collections::BTreeMap;

/// Live snapshots, counted per sequence number.
#[derive(Debug, Default)]
pub(super) struct SnapshotList {
    by_seq: Mutex<BTreeMap<SeqNo, usize>>,
}

impl SnapshotList {
    /// Registers one snapshot at the sequence number `visible` returns, read under the lock so
    /// that [`smallest`](Self::smallest) never misses a snapshot being taken.
    pub(super) fn register(&self, visible: impl FnOnce() -> SeqNo) -> SeqNo {
        let mut snaps = self.by_seq.lock();
        let seq = visible();
        *snaps.entry(seq).or_insert(0) += 1;
        seq
    }

    pub(super) fn release(&self, seq: SeqNo) {
        let mut snaps = self.by_seq.lock();
        if let Some(c) = snaps.get_mut(&seq) {
            *c -= 1;
            if *c == 0 {
                snaps.remove(&seq);
            }
        }
    }

    /// The oldest live snapshot, or `visible` if it is older (or there is none).
    pub(super) fn smallest(&self, visible: SeqNo) -> SeqNo {
        let snaps = self.by_seq.lock();
        snaps.keys().next().copied().unwrap_or(visible).min(visible)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smallest_follows_registrations_and_releases() {
        let s = SnapshotList::default();
        assert_eq!(s.smallest(10), 10);
        assert_eq!(s.register(|| 4), 4);
        assert_eq!(s.register(|| 4), 4);
        assert_eq!(s.register(|| 7), 7);
        assert_eq!(s.smallest(10), 4);
        s.release(4);
        assert_eq!(s.smallest(10), 4, "one snapshot at 4 is still open");
        s.release(4);
        assert_eq!(s.smallest(10), 7);
        s.release(7);
        s.release(7); // releasing more than registered is harmless
        assert_eq!(s.smallest(10), 10);
        assert_eq!(s.smallest(3), 3);
    }
}
