//! The read path: what a read sees ([`ReadState`]: memtables and version, swapped atomically
//! as a whole), the sequence number of the last visible write, the registry of live
//! snapshots, and the point get ([`get`]).
//!
//! [`ReadPath`] knows nothing of the engine that feeds it: the write path publishes new read
//! states and sequence numbers into it, and the public [`Db`](crate::Db),
//! [`Snapshot`](crate::Snapshot) and [`Iter`](crate::Iter) read through it. Data flows one
//! way: engine -> read path -> version -> table -> filter and block.

mod get;
mod snapshots;

use crate::key::SeqNo;
use crate::memtable::Memtable;
use crate::stats::Counters;
use crate::version::Version;
use arc_swap::ArcSwap;
use snapshots::SnapshotList;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// What a read sees: the memtables and the version, swapped atomically as a whole.
#[derive(Debug)]
pub(crate) struct ReadState {
    pub(crate) mem: Arc<Memtable>,
    /// Sealed memtables waiting for flush, newest first.
    pub(crate) imms: Vec<Arc<Memtable>>,
    pub(crate) version: Arc<Version>,
}

/// The shared state every read goes through.
#[derive(Debug)]
pub(crate) struct ReadPath {
    state: ArcSwap<ReadState>,
    /// Sequence number of the last write whose whole group is in the memtable.
    visible_seq: AtomicU64,
    snapshots: SnapshotList,
    /// Read counters live here; the engine adds its write and background counters to the
    /// same set.
    pub(crate) counters: Arc<Counters>,
    /// Set when the database starts closing: reads fail with `Closed` from then on, and
    /// running jobs give up.
    pub(crate) closed: Arc<AtomicBool>,
}

impl ReadPath {
    pub(crate) fn new(
        initial: ReadState,
        visible_seq: SeqNo,
        counters: Arc<Counters>,
        closed: Arc<AtomicBool>,
    ) -> ReadPath {
        ReadPath {
            state: ArcSwap::from_pointee(initial),
            visible_seq: AtomicU64::new(visible_seq),
            snapshots: SnapshotList::default(),
            counters,
            closed,
        }
    }

    /// Makes `state` what new reads see.
    pub(crate) fn publish(&self, state: ReadState) {
        self.state.store(Arc::new(state));
    }

    /// Makes writes up to `seq` visible to new reads.
    pub(crate) fn publish_seq(&self, seq: SeqNo) {
        self.visible_seq.store(seq, Ordering::Release);
    }

    /// The current read state, held for as long as the caller needs it (an `Arc`, not an
    /// `arc-swap` guard: scans and snapshots keep it for a long time).
    pub(crate) fn load(&self) -> Arc<ReadState> {
        self.state.load_full()
    }

    /// Sequence number of the last visible write.
    pub(crate) fn visible_seq(&self) -> SeqNo {
        self.visible_seq.load(Ordering::Acquire)
    }

    /// The read state and the sequence number of a read at this moment. The state is loaded
    /// first: every version it holds was built with a smallest snapshot at or below the
    /// sequence number read after it, so no version the read can see was dropped.
    pub(crate) fn read_point(&self) -> (Arc<ReadState>, SeqNo) {
        let state = self.load();
        (state, self.visible_seq())
    }

    /// True once the database is closing.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// `Err(Closed)` once the database is closing.
    pub(crate) fn check_open(&self) -> crate::Result<()> {
        if self.is_closed() {
            Err(crate::Error::Closed)
        } else {
            Ok(())
        }
    }

    /// Registers a snapshot at the last visible write and returns its sequence number.
    pub(crate) fn register_snapshot(&self) -> SeqNo {
        self.snapshots.register(|| self.visible_seq())
    }

    /// Releases a snapshot registered by [`register_snapshot`](Self::register_snapshot).
    pub(crate) fn release_snapshot(&self, seq: SeqNo) {
        self.snapshots.release(seq);
    }

    /// The oldest sequence number a reader may still read at: the oldest snapshot, or the
    /// last visible write. Compaction keeps every version visible at or above it.
    pub(crate) fn smallest_snapshot(&self) -> SeqNo {
        self.snapshots.smallest(self.visible_seq())
    }
}
