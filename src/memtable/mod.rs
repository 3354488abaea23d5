//! The memtable: recent writes in a skiplist ([`skiplist`]) ordered by internal key.
//!
//! Readers never block writers: a get or an iterator sees only entries at or below its
//! sequence number, and the writer publishes a group's sequence number only after every entry
//! of the group is inserted, which makes groups (batches) appear atomically.
//!
//! A [`ScalableBloom`] filter over its user keys sits in front of the skiplist, so a get for a
//! key the memtable does not hold usually skips the skiplist walk.
//!
//! Entries are slices of their batch's encoding, which the write path copies into shared
//! 64 KiB chunks ([`MemWriter::hold_from`]); a get hands out its own copy of a small value, so
//! that a caller who keeps one does not keep a chunk (scans copy what they yield anyway).
//!
//! Range tombstones sit beside the skiplist ([`MemRangeDels`]): the fragments built so far and
//! the few written since, which are folded in once they number more than the square root of
//! the built ones (at least 32), so that a range delete costs amortised `O(sqrt n)` however
//! many a memtable takes, and a get asks one binary search and a short list. A memtable that
//! never saw one answers "none" from a flag. (Short as the square root of the built pieces,
//! which count every sequence number of every fragment: nested range deletes, each over the
//! last, as a log's purges make, give about n^2 / 2 pieces, and the list grows to about
//! 0.7 n, some 1,200 entries in a memtable that holds nothing else. Bounding it by fragments
//! instead would make each fold, which copies every piece, run every few dozen deletes.
//! Left so, found by review in session 24.)

mod entry_cell;
mod skiplist;

use crate::error::{Error, Result};
use crate::filter::hash_key;
use crate::filter::scalable::ScalableBloom;
use crate::key::{self, InternalKey, KeyRef, SeqNo, ValueKind};
use crate::range_del::{Fragments, RangeTombstone};
use arc_swap::ArcSwap;
use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use skiplist::{ListWriter, Refused, SkipList};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

/// Approximate bytes of skiplist bookkeeping per entry.
const ENTRY_OVERHEAD: usize = 64;

/// The most entries a memtable sealed at `memtable_size` holds: every entry counts at least
/// its trailer and overhead towards it.
fn max_entries(memtable_size: usize) -> usize {
    memtable_size / (key::TRAILER_LEN + ENTRY_OVERHEAD) + 1
}

/// [`Memtable::growth`]: the writer ran out of chunks made ahead.
const GROWTH_WANTED: u8 = 1;
/// [`Memtable::growth`]: the flush thread was told.
const GROWTH_ASKED: u8 = 2;

/// Bytes of one chunk of a memtable's batch arena (see [`MemWriter::hold_from`]): under glibc's
/// mmap threshold, so a chunk is a heap allocation, not a system call.
const ARENA_CHUNK: usize = 64 << 10;
/// Spare chunks left at or below which each chunk the writer takes asks for more (1 MiB,
/// ~2.5 ms of a sequential load's writer): the flush thread makes them while the writer uses
/// these, instead of the writer making (and faulting in) its own once none is left.
const GROWTH_LOW_WATER: usize = 16;

/// What the memtable knows about a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// The newest visible version is a value, written at this sequence number.
    Value(Bytes, SeqNo),
    /// The newest visible version is a tombstone, written at this sequence number.
    Deleted(SeqNo),
    /// Versions of the key are here, all newer than the read's sequence number: look
    /// further down (the filter's "maybe" was right).
    Newer,
    /// No version of the key here: look further down.
    Absent,
    /// The memtable's filter says it holds no version of the key (the skiplist was not
    /// searched): look further down.
    Filtered,
}

/// One memtable, tied to the WAL file that holds the same writes.
#[derive(Debug)]
pub(crate) struct Memtable {
    map: SkipList,
    filter: ScalableBloom,
    /// The point entries' share of [`approx_bytes`](Memtable::approx_bytes), written by the
    /// one writer.
    point_bytes: AtomicUsize,
    /// The range tombstones' share of [`approx_bytes`](Memtable::approx_bytes), written
    /// under `range_writer`.
    range_approx_bytes: AtomicUsize,
    wal_number: u64,
    /// Range tombstones as readers see them; the mutex orders writers of them.
    range_dels: ArcSwap<MemRangeDels>,
    range_writer: Mutex<()>,
    has_range_dels: AtomicBool,
    /// Bytes copied into chunks so far ([`MemWriter::hold_from`]), written by the one writer.
    held: AtomicUsize,
    /// Bytes allocated for the batch encodings the entries slice: the chunks taken (new or
    /// made ahead) and encodings too large for one, which keep their own allocation.
    encoding_bytes: AtomicUsize,
    /// Range tombstones' share of `approx_bytes`, less their keys' bytes (which are in the
    /// encodings counted in `encoding_bytes`), written under `range_writer`.
    range_bytes: AtomicUsize,
    /// Chunks made ahead of the writer ([`Memtable::grow_ahead`]), taken before new ones.
    spare_chunks: Mutex<Vec<BytesMut>>,
    /// Set by the first [`Memtable::grow_ahead`]: it runs once a memtable.
    grown: AtomicBool,
    /// [`GROWTH_WANTED`] once the writer took a new chunk because no spare was left, or a
    /// spare with at most [`GROWTH_LOW_WATER`] left after it, [`GROWTH_ASKED`] once the
    /// write path told the flush thread, which sets it back to 0 as it grows the memtable
    /// ahead of itself ([`Memtable::grow_itself`]).
    growth: AtomicU8,
    /// Set while [`grow_ahead`](Memtable::grow_ahead) or [`grow_itself`](Memtable::grow_itself)
    /// runs: an insert that reaches an index array being made waits for it, so a writer
    /// holding the state lock must not count on inserting without waiting
    /// ([`is_growing`](Memtable::is_growing)).
    growing: AtomicBool,
    /// The writer of the test-only [`insert`](Memtable::insert) and [`hold`](Memtable::hold).
    #[cfg(test)]
    test_writer: Mutex<Option<MemWriter>>,
    /// Set (under `spare_chunks`' lock) when the memtable is sealed: a
    /// [`Memtable::grow_ahead`] still running then keeps none of the chunks it made.
    sealed: AtomicBool,
}

/// A memtable's range tombstones: fragments built so far, and the tombstones written since
/// (newest first, a shared list: adding one copies nothing).
#[derive(Debug, Default)]
pub(crate) struct MemRangeDels {
    built: Arc<Fragments>,
    /// `built.len()`, kept: counting walks every piece.
    built_len: usize,
    recent: Option<Arc<Recent>>,
    recent_len: usize,
    /// `built` and `recent` fragmented together, made by the first scan that asks: every scan
    /// of this view (it is replaced, not changed, by the next range delete) shares it. About
    /// the size of `built`; [`Memtable::memory_bytes`] counts it once it exists.
    merged: std::sync::OnceLock<Arc<Fragments>>,
}

/// One node of the list of recent range tombstones.
#[derive(Debug)]
struct Recent {
    t: RangeTombstone,
    next: Option<Arc<Recent>>,
}

impl MemRangeDels {
    /// The newest sequence number at or below `read_seq` of a tombstone covering `key`; 0 if
    /// none (see [`Fragments::covering_seq`]).
    pub(crate) fn covering_seq(&self, key: &[u8], read_seq: SeqNo) -> SeqNo {
        let recent = self
            .recent()
            .filter(|t| t.seq <= read_seq && t.start[..] <= *key)
            .filter(|t| t.end.as_ref().is_none_or(|e| *key < e[..]))
            .map(|t| t.seq)
            .max()
            .unwrap_or(0);
        recent.max(self.built.covering_seq(key, read_seq))
    }

    /// Heap bytes of the merged view, once a scan has made it; 0 before.
    fn merged_bytes(&self) -> usize {
        self.merged.get().map_or(0, |f| f.heap_bytes())
    }

    /// The tombstones written since the last fold, newest first.
    fn recent(&self) -> impl Iterator<Item = &RangeTombstone> {
        std::iter::successors(self.recent.as_deref(), |n| n.next.as_deref()).map(|n| &n.t)
    }

    /// All of them, fragmented.
    pub(crate) fn fragments(&self) -> Arc<Fragments> {
        if self.recent.is_none() {
            return self.built.clone();
        }
        self.merged
            .get_or_init(|| {
                let recent = Fragments::build(self.recent().cloned());
                Arc::new(self.built.union(&recent))
            })
            .clone()
    }

    /// With `t` added: at the head of the recent list, or, once that holds more than the
    /// square root of the built pieces (at least 32), everything folded into new fragments.
    fn with(&self, t: RangeTombstone) -> MemRangeDels {
        let limit = ((self.built_len as f64).sqrt() as usize).max(32);
        let next = MemRangeDels {
            built: self.built.clone(),
            built_len: self.built_len,
            recent: Some(Arc::new(Recent {
                t,
                next: self.recent.clone(),
            })),
            recent_len: self.recent_len + 1,
            merged: std::sync::OnceLock::new(),
        };
        if next.recent_len <= limit {
            return next;
        }
        let built = next.fragments();
        MemRangeDels {
            built_len: built.len(),
            built,
            recent: None,
            recent_len: 0,
            merged: std::sync::OnceLock::new(),
        }
    }
}

/// A memtable's one writer ([`Memtable::take_writer`]): what only the writer touches (the
/// skiplist's insert state and the chunk batch encodings are copied into), so that an insert
/// takes no lock; the caller's `&mut` is the proof that it is alone. Used with any other
/// memtable than its own, it refuses (an error, nothing written).
pub(crate) struct MemWriter {
    list: ListWriter,
    /// The chunk batch encodings are copied into ([`MemWriter::hold_from`]).
    arena: BytesMut,
}

impl std::fmt::Debug for MemWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemWriter").finish_non_exhaustive()
    }
}

impl MemWriter {
    /// True if this is `mem`'s writer.
    pub(crate) fn writes_to(&self, mem: &Memtable) -> bool {
        self.list.list_id() == mem.map.id()
    }

    /// A copy of a batch's encoding that the memtable's entries can slice: small encodings
    /// are packed into shared 64 KiB chunks, so a write leaves no allocation of its own in the
    /// memtable, and the memory goes back to the allocator a chunk at a time when the memtable
    /// (flushed, in the flush thread) and its readers let go of it, not one allocation per
    /// write freed by another thread than the one that made it (which with glibc's
    /// per-thread arenas made the writer and the flush thread contend on the writer's arena
    /// lock). An encoding larger than a quarter chunk keeps its own allocation: it is taken
    /// from `encoded`, which is left empty; a smaller one is copied, and `encoded` is left
    /// as it was, for the caller to reuse or free.
    ///
    /// # Errors
    /// An `Error::Io` of kind `Other` if this is not `mem`'s writer (nothing is copied then).
    pub(crate) fn hold_from(&mut self, mem: &Memtable, encoded: &mut Vec<u8>) -> Result<Bytes> {
        if !self.writes_to(mem) {
            return Err(not_its_writer());
        }
        if encoded.len() > ARENA_CHUNK / 4 {
            mem.encoding_bytes
                .fetch_add(encoded.capacity(), Ordering::Relaxed);
            return Ok(Bytes::from(std::mem::take(encoded)));
        }
        add_ordered(&mem.held, encoded.len());
        Ok(crate::chunk::copy_into_or(&mut self.arena, encoded, || {
            // Under the spares' lock, so that `memory_bytes` counts the chunk once, spare
            // or taken.
            let mut spare = mem.spare_chunks.lock();
            let chunk = spare.pop();
            // Out of chunks made ahead (or none were), or down to the last
            // `GROWTH_LOW_WATER`: ask for more (a plain store: the write path tells the
            // flush thread, `Memtable::wants_growth`), before the last ones are gone. (An
            // answer that made too few to rise above the mark is asked again at the next
            // chunk: a memtable growing ahead of itself doubles.)
            if spare.len() <= GROWTH_LOW_WATER && mem.growth.load(Ordering::Relaxed) == 0 {
                mem.growth.store(GROWTH_WANTED, Ordering::Relaxed);
            }
            let chunk = chunk.unwrap_or_else(|| BytesMut::with_capacity(ARENA_CHUNK));
            mem.encoding_bytes.fetch_add(ARENA_CHUNK, Ordering::Relaxed);
            chunk
        }))
    }

    /// Inserts an entry into `mem`.
    ///
    /// # Errors
    /// An `Error::Io` of kind `Other` if this is not `mem`'s writer, or if the list is at its
    /// capacity, which the write path never lets it reach: it seals a memtable once
    /// [`Memtable::is_full`] says so (nothing is inserted then).
    pub(crate) fn insert(
        &mut self,
        mem: &Memtable,
        user_key: Bytes,
        seq: SeqNo,
        kind: ValueKind,
        value: Bytes,
    ) -> Result<()> {
        let size = user_key.len() + value.len() + key::TRAILER_LEN + ENTRY_OVERHEAD;
        // The filter first, by the one writer (the filter has one writer at a time): a
        // reader that can see the entry must see its bits.
        let hash = hash_key(&user_key);
        let key = InternalKey::new(user_key, seq, kind);
        let first = || {
            mem.filter.add(hash);
            add_ordered(&mem.point_bytes, size);
        };
        match mem.map.insert_with(&mut self.list, key, value, first) {
            Ok(()) => Ok(()),
            Err(Refused::NotItsWriter) => Err(not_its_writer()),
            Err(Refused::Full) => Err(Error::other(format!(
                "memtable full: {} entries, one write group too many for its skiplist",
                mem.map.len()
            ))),
        }
    }
}

fn not_its_writer() -> Error {
    Error::other("a memtable writer was used on another memtable")
}

/// An entry copied out of the memtable.
pub(crate) type Entry = (InternalKey, Bytes);

/// What a get hands out of the memtable (scans copy what they yield into vectors of their
/// own): its own copy of a value of up to 16 KiB, which may share a batch arena chunk ([`MemWriter::hold_from`]), so that a caller who keeps a
/// small value keeps that value, not the 64 KiB chunk around it (and with it the memtable's
/// other writes). A larger one is shared as it is: it still keeps the rest of its batch's
/// encoding (or, in a memtable rebuilt by recovery, of its WAL record) alive, which it
/// outweighs unless that batch held much more than it.
fn detach(b: &Bytes) -> Bytes {
    if b.len() <= ARENA_CHUNK / 4 {
        Bytes::copy_from_slice(b)
    } else {
        b.clone()
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
            map: SkipList::new(),
            filter,
            point_bytes: AtomicUsize::new(0),
            range_approx_bytes: AtomicUsize::new(0),
            wal_number,
            range_dels: ArcSwap::from_pointee(MemRangeDels::default()),
            range_writer: Mutex::new(()),
            has_range_dels: AtomicBool::new(false),
            held: AtomicUsize::new(0),
            encoding_bytes: AtomicUsize::new(0),
            range_bytes: AtomicUsize::new(0),
            spare_chunks: Mutex::new(Vec::new()),
            grown: AtomicBool::new(false),
            growth: AtomicU8::new(0),
            growing: AtomicBool::new(false),
            sealed: AtomicBool::new(false),
            #[cfg(test)]
            test_writer: Mutex::new(None),
        }
    }

    /// The memtable's one writer, the first time it is asked for (`None` after that):
    /// every insert goes through it ([`MemWriter`]).
    pub(crate) fn take_writer(&self) -> Option<MemWriter> {
        Some(MemWriter {
            list: self.map.take_writer()?,
            arena: BytesMut::new(),
        })
    }

    /// (Tests: [`MemWriter::hold_from`] by the memtable's writer, taken by the first call of
    /// this or of [`insert`](Self::insert).)
    #[cfg(test)]
    pub(crate) fn hold(&self, mut encoded: Vec<u8>) -> Bytes {
        self.with_test_writer(|w| w.hold_from(self, &mut encoded))
            .and_then(|held| held)
            .expect("the memtable's writer is the test writer")
    }

    /// (Tests: [`MemWriter::insert`] by the memtable's writer, taken by the first call of
    /// this or of [`hold`](Self::hold).)
    #[cfg(test)]
    pub(crate) fn insert(
        &self,
        user_key: Bytes,
        seq: SeqNo,
        kind: ValueKind,
        value: Bytes,
    ) -> Result<()> {
        self.with_test_writer(|w| w.insert(self, user_key, seq, kind, value))?
    }

    #[cfg(test)]
    fn with_test_writer<T>(&self, f: impl FnOnce(&mut MemWriter) -> T) -> Result<T> {
        let mut slot = self.test_writer.lock();
        if slot.is_none() {
            *slot = self.take_writer();
        }
        let w = slot
            .as_mut()
            .ok_or_else(|| Error::other("the memtable's writer was taken"))?;
        Ok(f(w))
    }

    /// Prepares this memtable, off the write path, for as much as `like` holds: the index
    /// arrays `like` used (see [`SkipList::grow_like`]) and as many 64 KiB chunks for batch
    /// encodings as `like` filled, each written once so that its pages are there, made in
    /// doubling steps (arrays for a share of the entries, then that share of the chunks, which
    /// the writer may take at once) so that what the writer reaches first is made first. The
    /// flush thread calls it for the memtable being written when the one sealed before it was
    /// full: a steady load fills the next one alike, and the writer then neither stops for
    /// the multi-megabyte arrays a full index needs nor faults in the chunks' pages. Runs
    /// once a memtable (later calls return at once), and not at all once it is sealed.
    /// Memory: at most what `like` used, and at most what a memtable sealed at
    /// `memtable_size` holds (so a memtable that one huge batch filled is not a model for
    /// more than that), made early; chunks still unused when this memtable is sealed go back
    /// then ([`drop_spare_chunks`](Self::drop_spare_chunks)), and one that is sealed while
    /// this runs keeps none.
    pub(crate) fn grow_ahead(&self, like: &Memtable, memtable_size: usize) {
        if self.grown.swap(true, Ordering::AcqRel) || self.sealed.load(Ordering::Relaxed) {
            return;
        }
        // A request its writer made before this ran (its first write takes a chunk) is
        // answered too: it grows ahead of itself only once it runs out of these.
        self.growing_while(|| {
            let most = max_entries(memtable_size);
            let chunks = (like.held.load(Ordering::Relaxed) / ARENA_CHUNK)
                .min(memtable_size / ARENA_CHUNK + 1);
            if chunks == 0 {
                // A model that filled no chunk (its batches were large) still shapes the
                // arrays.
                self.map.grow_like(&like.map, most);
                return;
            }
            // In doubling steps, each the arrays for a share of the entries and then that
            // share of the chunks, in the order the writer, which starts at once, takes
            // them: the chunks and slots it reaches first are made first, and each step's
            // chunks are its to take as soon as they are made (made all at once, arrays
            // first, the writer made ~300 chunks of its own in a 1M sequential load while it
            // waited for them). The last step's share is the whole model.
            let mut made = 0;
            let mut step = 4;
            while made < chunks && !self.sealed.load(Ordering::Relaxed) {
                let n = step.min(chunks - made);
                let share = (
                    u32::try_from(made + n).unwrap_or(u32::MAX),
                    u32::try_from(chunks).unwrap_or(u32::MAX),
                );
                self.map.grow_scaled(&like.map, share, most);
                self.add_spare_chunks(n);
                made += n;
                step *= 2;
            }
        });
    }

    /// Runs `grow` with [`is_growing`](Self::is_growing) set, having cleared any growth
    /// request first (what `grow` makes answers it; a request made while it runs, which
    /// what it makes may not answer, is kept for the flush thread's next look).
    fn growing_while(&self, grow: impl FnOnce()) {
        self.growing.store(true, Ordering::Relaxed);
        self.growth.store(0, Ordering::Relaxed);
        grow();
        self.growing.store(false, Ordering::Relaxed);
    }

    /// Makes `n` chunks, each written once so that its pages are there, and keeps them for
    /// the writer, unless the memtable is sealed by then.
    fn add_spare_chunks(&self, n: usize) {
        let mut made = Vec::with_capacity(n);
        for _ in 0..n {
            if self.sealed.load(Ordering::Relaxed) {
                return;
            }
            let mut chunk = BytesMut::with_capacity(ARENA_CHUNK);
            chunk.resize(ARENA_CHUNK, 0);
            chunk.clear();
            made.push(chunk);
        }
        let mut spare = self.spare_chunks.lock();
        if !self.sealed.load(Ordering::Relaxed) {
            spare.append(&mut made);
        }
    }

    /// True when the writer ran out of chunks made ahead, or is down to the last
    /// [`GROWTH_LOW_WATER`] (see [`grow_itself`](Self::grow_itself)).
    pub(crate) fn wants_growth(&self) -> bool {
        self.growth.load(Ordering::Relaxed) != 0
    }

    /// True while the flush thread makes index arrays or chunks for this memtable (see
    /// `growing`).
    pub(crate) fn is_growing(&self) -> bool {
        self.growing.load(Ordering::Relaxed)
    }

    /// Sets what [`is_growing`](Self::is_growing) says (tests).
    #[cfg(test)]
    pub(crate) fn set_growing(&self, growing: bool) {
        self.growing.store(growing, Ordering::Relaxed);
    }

    /// True the first time it is asked after the writer asked for chunks
    /// ([`wants_growth`](Self::wants_growth)): the write path then wakes the flush thread
    /// (once, not after every write until it runs).
    pub(crate) fn take_growth_request(&self) -> bool {
        if self.growth.load(Ordering::Relaxed) != GROWTH_WANTED {
            return false;
        }
        self.growth.store(GROWTH_ASKED, Ordering::Relaxed);
        true
    }

    /// Grows this memtable ahead of itself, off the write path, when its writer ran out of
    /// chunks made ahead, or is down to the last [`GROWTH_LOW_WATER`]
    /// ([`wants_growth`](Self::wants_growth)): index arrays for twice the entries it holds and
    /// spare chunks up to as many as it has filled (those left counted), each written once so
    /// that its pages are there, but never beyond what it will hold when full, projected from
    /// what it holds now (its entries and chunk bytes scaled by `memtable_size` over the bytes
    /// it counts towards it). The flush thread calls it when it has nothing to flush. A memtable
    /// with no model to grow like ([`grow_ahead`](Self::grow_ahead): the first after an open,
    /// or one after a memtable sealed early) thus doubles ahead of its writer, as a vector
    /// does, instead of faulting in every page of its chunks and arrays on the writer's thread
    /// (~4,000 of the ~13,000 page faults of a sequential load's writer in 1M inserts).
    /// Memory: at most what the full memtable would hold (the arrays, which double, up to
    /// twice its slots); chunks unused when it is sealed go back then. Clears the request.
    pub(crate) fn grow_itself(&self, memtable_size: usize) {
        self.growing_while(|| self.grow_itself_now(memtable_size));
    }

    fn grow_itself_now(&self, memtable_size: usize) {
        let counted = self.approx_bytes();
        if self.sealed.load(Ordering::Relaxed) || counted == 0 {
            return;
        }
        // The share of `memtable_size` filled so far: what the full memtable will hold is
        // this memtable's figures scaled by `memtable_size / counted`.
        let scale = |x: usize| -> usize {
            let full = (x as u128 * memtable_size as u128).div_ceil(counted as u128);
            usize::try_from(full).unwrap_or(usize::MAX)
        };
        let entries = self.map.len();
        let most = max_entries(memtable_size).min(scale(entries).max(entries));
        self.map.grow_scaled(&self.map, (2, 1), most);
        let held = self.held.load(Ordering::Relaxed);
        let max_chunks = (memtable_size / ARENA_CHUNK + 1).min(scale(held) / ARENA_CHUNK + 1);
        let used = held / ARENA_CHUNK + 1;
        let spare = self.spare_chunks.lock().len();
        // Spares up to as many as it filled, counting those still left: a request at each
        // chunk taken below the low-water mark tops them up, it does not add that many again
        // each time (which grew a small memtable's chunks far past twice what it filled).
        let more = used.saturating_sub(spare);
        self.add_spare_chunks(more.min(max_chunks.saturating_sub(used + spare)));
    }

    /// Frees the chunks [`grow_ahead`](Self::grow_ahead) made that no write used, and makes
    /// a `grow_ahead` that runs now or later keep none: the writer calls it when it seals
    /// this memtable, which takes no more writes.
    pub(crate) fn drop_spare_chunks(&self) {
        let mut spare = self.spare_chunks.lock();
        self.sealed.store(true, Ordering::Relaxed);
        spare.clear();
    }

    /// Number of the WAL whose records this memtable holds.
    pub(crate) fn wal_number(&self) -> u64 {
        self.wal_number
    }

    /// Starts loading the filter line a [`MemWriter::insert`] of `user_key` will set
    /// bits in (see [`ScalableBloom::prefetch`]): the write path calls it for the first keys
    /// of a group before it writes the group's WAL record.
    pub(crate) fn prefetch(&self, user_key: &[u8]) {
        self.filter.prefetch(hash_key(user_key));
    }

    /// Records a range tombstone `[start, end)` at `seq` (`end = None`: to the end of the key
    /// space). Readers see it before the writer publishes `seq`.
    pub(crate) fn insert_range_delete(&self, start: Bytes, end: Option<Bytes>, seq: SeqNo) {
        let keys = start.len() + end.as_ref().map_or(0, |e| e.len());
        let mut size = keys + ENTRY_OVERHEAD;
        let _writer = self.range_writer.lock();
        let cur = self.range_dels.load_full();
        let next = cur.with(RangeTombstone { start, end, seq });
        // Nested ranges make pieces that each keep many sequence numbers: count them, so that
        // the memtable fills (and flushes, which collapses them) as they grow.
        size += next.built_len.saturating_sub(cur.built_len) * 16;
        self.range_dels.store(Arc::new(next));
        self.has_range_dels.store(true, Ordering::Release);
        add_ordered(&self.range_approx_bytes, size);
        // The keys are in the chunks (or the record) the entries slice, counted there.
        add_ordered(&self.range_bytes, size - keys);
    }

    /// The memtable's range tombstones; `None` if it has none (the common case, answered
    /// from a flag).
    pub(crate) fn range_tombstones(&self) -> Option<Arc<MemRangeDels>> {
        self.has_range_dels
            .load(Ordering::Acquire)
            .then(|| self.range_dels.load_full())
    }

    /// Approximate memory held, in bytes.
    pub(crate) fn approx_bytes(&self) -> usize {
        self.point_bytes.load(Ordering::Relaxed) + self.range_approx_bytes.load(Ordering::Relaxed)
    }

    /// True once the writer should seal it: it holds `memtable_size` bytes (see
    /// [`approx_bytes`](Self::approx_bytes)) or is [full](Self::is_full).
    pub(crate) fn is_due(&self, memtable_size: usize) -> bool {
        self.approx_bytes() >= memtable_size || self.is_full()
    }

    /// True once the memtable holds as many entries as it should (14 Mi), whatever their
    /// bytes: the writer seals it then, as it does at `memtable_size`.
    pub(crate) fn is_full(&self) -> bool {
        self.map.is_full()
    }

    /// True if it holds no entry and no range tombstone.
    pub(crate) fn is_empty(&self) -> bool {
        self.map.len() == 0 && !self.has_range_dels.load(Ordering::Acquire)
    }

    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// Bytes of the chunks [`grow_ahead`](Self::grow_ahead) made that no write has taken
    /// yet (not in [`approx_bytes`](Self::approx_bytes), which decides when the memtable is
    /// full).
    #[cfg(test)]
    pub(crate) fn spare_bytes(&self) -> usize {
        self.spare_chunks.lock().len() * ARENA_CHUNK
    }

    /// Bytes of memory the memtable holds, what [`approx_bytes`](Self::approx_bytes) leaves
    /// out included: the chunks its entries' encodings live in (whole, the last one's unused
    /// tail too), encodings too large for a chunk and the replayed WAL records a recovered
    /// memtable slices ([`count_shared`](Self::count_shared)), its index arrays (those made
    /// ahead of the entries that will fill them too), the chunks made ahead that no write has
    /// taken, its filter, and its range tombstones' bookkeeping (as `approx_bytes` counts it,
    /// their keys being in the encodings, with the merged view scans share once one has made
    /// it).
    pub(crate) fn memory_bytes(&self) -> usize {
        let chunks = {
            // A chunk moves from the spares to the encodings under this lock.
            let spare = self.spare_chunks.lock();
            spare.len() * ARENA_CHUNK + self.encoding_bytes.load(Ordering::Relaxed)
        };
        chunks
            + self.map.allocated_bytes()
            + self.filter_bytes()
            + self.range_bytes.load(Ordering::Relaxed)
            + self.range_dels.load().merged_bytes()
    }

    /// Counts `bytes` of shared buffers the entries slice that [`MemWriter::hold_from`] did not
    /// copy: the WAL records recovery replays, whose operations are slices of the record.
    pub(crate) fn count_shared(&self, bytes: usize) {
        self.encoding_bytes.fetch_add(bytes, Ordering::Relaxed);
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

    /// The newest version of `user_key` with sequence at most `seq`. One search: the entry
    /// just before the one it lands on tells versions newer than `seq` from none.
    pub(crate) fn get(&self, user_key: &[u8], seq: SeqNo) -> Lookup {
        let probe = KeyRef::new(user_key, key::lookup_trailer(seq));
        let (found, prev) = self.map.seek_with_prev(&probe);
        match found.map(|c| c.entry()) {
            Some((k, v)) if k.user_key.as_ref() == user_key => {
                let seq = key::trailer_seq(k.trailer);
                match k.kind() {
                    Some(ValueKind::Put) => Lookup::Value(detach(v), seq),
                    _ => Lookup::Deleted(seq),
                }
            }
            _ if prev.is_some_and(|c| c.entry().0.user_key.as_ref() == user_key) => Lookup::Newer,
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
                self.map.lower_bound(&probe, inclusive)
            }
            None => self.map.front(),
        };
        while let Some(e) = cur {
            out.push_back(e.entry().clone());
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
            .upper_bound(&probe, inclusive)
            .map(|e| e.entry().clone())
    }

    /// The first entry of the memtable.
    pub(crate) fn first(&self) -> Option<Entry> {
        self.map.front().map(|e| e.entry().clone())
    }

    /// The last entry of the memtable.
    pub(crate) fn last(&self) -> Option<Entry> {
        self.map.back().map(|e| e.entry().clone())
    }

    /// Every entry in internal-key order (for flushing a sealed memtable), borrowed: a flush
    /// copies each into its table and needs no reference count of its own (four locked
    /// instructions an entry, taken and dropped, on the thread that shares the cores with the
    /// writer).
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Entry> + '_ {
        std::iter::successors(self.map.front(), |c| c.next()).map(|e| e.entry())
    }
}

/// Adds `v` to a counter that one thread at a time writes (the memtable's one writer, or a
/// lock the caller holds): a load and a store rather than a locked read-modify-write, which the write path would pay once an
/// operation. Readers see the old or the new value.
fn add_ordered(counter: &AtomicUsize, v: usize) {
    counter.store(counter.load(Ordering::Relaxed) + v, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    /// A memtable hands out one writer; used on another memtable, a writer refuses, leaving
    /// both memtables as they were (its own included: nothing half-written).
    #[test]
    fn a_memtable_has_one_writer_which_writes_to_no_other() {
        let a = Memtable::new(1);
        let b = Memtable::new(2);
        let mut wa = a.take_writer().expect("first writer");
        assert!(a.take_writer().is_none());
        let mut wb = b.take_writer().expect("b's own writer");
        assert!(wa.writes_to(&a) && !wa.writes_to(&b));

        let err = wa.insert(
            &b,
            Bytes::from_static(b"k"),
            1,
            ValueKind::Put,
            Bytes::from_static(b"v"),
        );
        assert!(matches!(&err, Err(Error::Io(e)) if e.kind() == std::io::ErrorKind::Other));
        let err = wa.hold_from(&b, &mut b"kv".to_vec());
        assert!(matches!(&err, Err(Error::Io(e)) if e.kind() == std::io::ErrorKind::Other));
        assert!(b.is_empty() && b.approx_bytes() == 0 && b.held.load(Ordering::Relaxed) == 0);

        // Each writer still writes to its own, and reads see exactly that.
        let held = wa.hold_from(&a, &mut b"kv".to_vec()).unwrap();
        wa.insert(&a, held.slice(0..1), 1, ValueKind::Put, held.slice(1..2))
            .unwrap();
        wb.insert(
            &b,
            Bytes::from_static(b"x"),
            2,
            ValueKind::Put,
            Bytes::from_static(b"y"),
        )
        .unwrap();
        assert_eq!(a.get(b"k", 10), Lookup::Value(Bytes::from_static(b"v"), 1));
        assert!(matches!(a.get(b"x", 10), Lookup::Filtered | Lookup::Absent));
        assert_eq!(b.get(b"x", 10), Lookup::Value(Bytes::from_static(b"y"), 2));
        assert_eq!((a.len(), b.len()), (1, 1));
    }

    #[test]
    fn held_encodings_are_exact_and_small_ones_are_packed_into_shared_chunks() {
        let m = Memtable::new(1);
        let want = |i: usize| vec![i as u8; 100 + i % 7];
        let held: Vec<Bytes> = (0..2000).map(|i| m.hold(want(i))).collect();
        for (i, h) in held.iter().enumerate() {
            assert_eq!(h[..], want(i)[..], "encoding {i}");
        }
        // Packed one after another (2000 of ~103 bytes span several chunks).
        let adjacent = held
            .windows(2)
            .filter(|w| w[0].as_ptr() as usize + w[0].len() == w[1].as_ptr() as usize)
            .count();
        let chunks = 2000 * 103 / ARENA_CHUNK + 1;
        assert!(adjacent >= 1999 - chunks, "{adjacent} adjacent");
        // A large encoding keeps its own allocation: no copy.
        let big = vec![7u8; ARENA_CHUNK / 4 + 1];
        let at = big.as_ptr();
        let held_big = m.hold(big);
        assert_eq!(held_big.as_ptr(), at);
        assert_eq!(held_big.len(), ARENA_CHUNK / 4 + 1);
        // The chunks outlive the memtable for as long as entries are held.
        drop(m);
        assert_eq!(held[1999][..], want(1999)[..]);
    }

    #[test]
    fn grown_ahead_a_memtable_holds_encodings_in_the_chunks_made_for_it_once() {
        let like = Memtable::new(1);
        for i in 0..3000u64 {
            let key = Bytes::from(i.to_be_bytes().to_vec());
            like.insert(key, i + 1, ValueKind::Put, like.hold(vec![i as u8; 100]))
                .unwrap();
        }
        let m = Memtable::new(2);
        m.grow_ahead(&like, usize::MAX);
        let made = 3000 * 100 / ARENA_CHUNK;
        assert_eq!(m.spare_chunks.lock().len(), made);
        assert_eq!(m.spare_bytes(), made * ARENA_CHUNK);
        assert!(m.map.allocated_bytes() >= 3000 * (16 + 88));
        // Runs once.
        m.grow_ahead(&like, usize::MAX);
        assert_eq!(m.spare_chunks.lock().len(), made);
        let spare_at: Vec<usize> = m
            .spare_chunks
            .lock()
            .iter()
            .map(|c| c.as_ptr() as usize)
            .collect();
        let held: Vec<Bytes> = (0..3000)
            .map(|i| m.hold(vec![(i % 251) as u8; 100]))
            .collect();
        for (i, h) in held.iter().enumerate() {
            assert_eq!(h[..], vec![(i % 251) as u8; 100][..], "encoding {i}");
        }
        // Every chunk made ahead was used, before any new one.
        assert!(m.spare_chunks.lock().is_empty());
        let starts: Vec<usize> = std::iter::once(held[0].as_ptr() as usize)
            .chain(
                held.windows(2)
                    .filter(|w| w[0].as_ptr() as usize + w[0].len() != w[1].as_ptr() as usize)
                    .map(|w| w[1].as_ptr() as usize),
            )
            .collect();
        assert!(starts.len() > made, "{} chunks started", starts.len());
        for at in &starts[..made] {
            assert!(
                spare_at.contains(at),
                "a chunk not made ahead was used first"
            );
        }
        // Chunks no write took go back at the seal.
        let m = Memtable::new(3);
        m.grow_ahead(&like, usize::MAX);
        assert_eq!(m.spare_chunks.lock().len(), made);
        m.drop_spare_chunks();
        assert!(m.spare_chunks.lock().is_empty());
        assert_eq!(m.spare_bytes(), 0);
    }

    #[test]
    fn memory_counts_what_is_allocated_chunks_index_spares_filter_and_range_tombstones() {
        let m = Memtable::new(1);
        assert_eq!(m.memory_bytes(), m.filter_bytes());
        // 1000 encodings of 100 bytes: two chunks, counted whole from the first byte.
        let first = m.hold(vec![1u8; 100]);
        let index0 = m.map.allocated_bytes();
        assert_eq!(m.memory_bytes(), ARENA_CHUNK + index0 + m.filter_bytes());
        for i in 0..999u64 {
            let enc = m.hold(vec![i as u8; 100]);
            m.insert(enc.slice(0..8), i + 1, ValueKind::Put, enc.slice(8..))
                .unwrap();
        }
        drop(first);
        let chunks = 2 * ARENA_CHUNK;
        let index = m.map.allocated_bytes();
        assert!(index >= 999 * (16 + 88), "{index}");
        assert_eq!(m.memory_bytes(), chunks + index + m.filter_bytes());
        // More than the estimate that decides when the memtable is full.
        assert!(m.memory_bytes() > m.approx_bytes());
        // An encoding too large for a chunk counts its own allocation.
        let mut big = Vec::with_capacity(ARENA_CHUNK);
        big.resize(ARENA_CHUNK / 2, 3);
        let _big = m.hold(big);
        assert_eq!(
            m.memory_bytes(),
            chunks + ARENA_CHUNK + index + m.filter_bytes()
        );
        // A range tombstone counts what the fill estimate counts for it, but its keys (which
        // live in the encodings).
        let before = (m.memory_bytes(), m.approx_bytes());
        m.insert_range_delete(
            Bytes::from_static(b"a"),
            Some(Bytes::from_static(b"bc")),
            2000,
        );
        let grew = m.approx_bytes() - before.1;
        assert!(grew > 3);
        assert_eq!(m.memory_bytes(), before.0 + grew - 3);
        // Shared buffers a recovered memtable slices count as they are told.
        let before = m.memory_bytes();
        m.count_shared(12_345);
        assert_eq!(m.memory_bytes(), before + 12_345);

        // A memtable grown ahead counts its arrays and the chunks made for it before any
        // write, and a chunk once, whether spare or taken.
        let next = Memtable::new(2);
        next.grow_ahead(&m, usize::MAX);
        let made = next.spare_bytes();
        assert_eq!(made, ARENA_CHUNK);
        assert_eq!(
            next.memory_bytes(),
            made + next.map.allocated_bytes() + next.filter_bytes()
        );
        assert!(next.map.allocated_bytes() >= index);
        let grown = next.memory_bytes();
        let _e = next.hold(vec![9u8; 100]);
        assert_eq!(next.spare_bytes(), 0);
        assert_eq!(next.memory_bytes(), grown);
    }

    /// Inserts keys `*next..` with 100-byte values into `m` until it holds `chunks` chunks'
    /// worth of encodings (or, with `chunks` 0, `writes` more entries); `*next` moves on.
    fn fill(m: &Memtable, next: &mut u64, chunks: usize, writes: usize) {
        let value = vec![7u8; 100];
        let until = *next + writes as u64;
        while m.held.load(Ordering::Relaxed) < chunks * ARENA_CHUNK || *next < until {
            let key = Bytes::from(next.to_be_bytes().to_vec());
            m.insert(key, *next + 1, ValueKind::Put, m.hold(value.clone()))
                .unwrap();
            *next += 1;
        }
    }

    /// A memtable with no chunks made ahead asks to grow once its writer takes a new chunk;
    /// the write path is told once; growing tops its spares up to as many chunks as it filled
    /// (whole pages written) and index arrays for twice its entries, no more than it will hold
    /// when full (projected from what it counts towards `memtable_size`), and nothing once
    /// sealed; with no more spares than the low-water mark, the next chunk it takes asks again.
    #[test]
    fn a_memtable_that_ran_out_of_chunks_grows_ahead_of_itself() {
        let value = vec![7u8; 100];
        let m = Memtable::new(1);
        assert!(!m.wants_growth());
        let mut i = 0u64;
        // Three chunks' worth of ~110-byte encodings.
        fill(&m, &mut i, 3, 0);
        assert!(m.wants_growth());
        assert!(m.take_growth_request());
        assert!(!m.take_growth_request(), "told once");
        assert!(m.wants_growth());
        let arrays = m.map.allocated_bytes();
        m.grow_itself(usize::MAX);
        assert!(!m.wants_growth());
        // As many chunks again as it filled.
        assert_eq!(m.spare_bytes(), 4 * ARENA_CHUNK);
        assert!(m.map.allocated_bytes() > arrays);
        // Fewer than the low-water mark: the first of them it takes asks again, while the
        // others are left (a memtable growing ahead of itself doubles).
        let spares = m.spare_chunks.lock().len();
        while m.spare_chunks.lock().len() == spares {
            assert!(!m.wants_growth());
            fill(&m, &mut i, 0, 100);
        }
        assert!(m.wants_growth());
        assert_eq!(m.spare_chunks.lock().len(), spares - 1);
        assert!(m.take_growth_request());
        // That request tops the spares up to as many as it filled, those left counted: not
        // as many again on top of them at every request.
        let used = m.held.load(Ordering::Relaxed) / ARENA_CHUNK + 1;
        m.grow_itself(usize::MAX);
        assert_eq!(m.spare_chunks.lock().len(), used);
        // At most what a memtable sealed at `memtable_size` holds, spares included.
        let small = Memtable::new(2);
        fill(&small, &mut 0, 3, 0);
        // Sealed at twice what it counts now: it will hold about twice its chunk bytes.
        let size = 2 * small.approx_bytes();
        let full_held = 2 * small.held.load(Ordering::Relaxed);
        let used = small.held.load(Ordering::Relaxed) / ARENA_CHUNK + 1;
        small.grow_itself(size);
        let spare = small.spare_bytes();
        assert!(spare > 0);
        assert!(
            used * ARENA_CHUNK + spare <= full_held + ARENA_CHUNK,
            "{spare}"
        );
        // Nothing more until the writer uses them.
        small.grow_itself(size);
        assert_eq!(small.spare_bytes(), spare);
        // One that counts as full already gets none.
        let full = Memtable::new(4);
        fill(&full, &mut 0, 3, 0);
        full.grow_itself(full.approx_bytes());
        assert_eq!(full.spare_bytes(), 0);
        // A memtable grown ahead like a full one (after a rotation) forgets the request its
        // first write made before that ran: it grows itself only once it runs out again.
        let next = Memtable::new(5);
        next.hold(value.clone());
        assert!(next.wants_growth());
        next.grow_ahead(&m, usize::MAX);
        assert!(!next.wants_growth() && !next.is_growing());
        assert!(next.spare_bytes() > 0);
        // Sealed: nothing.
        let sealed = Memtable::new(3);
        sealed.hold(value.clone());
        sealed.drop_spare_chunks();
        sealed.grow_itself(usize::MAX);
        assert_eq!(sealed.spare_bytes(), 0);
        assert!(!sealed.wants_growth());
    }

    /// A memtable grown ahead with more chunks than the low-water mark asks for more once it
    /// is down to the mark, not before, and while it still has those to use; a request made
    /// while the flush thread grows it outlives that growth.
    #[test]
    fn a_writer_asks_for_chunks_at_the_low_water_mark() {
        let like = Memtable::new(1);
        fill(&like, &mut 0, 40, 0);
        let m = Memtable::new(2);
        m.grow_ahead(&like, usize::MAX);
        assert!(m.spare_chunks.lock().len() > GROWTH_LOW_WATER + 1);
        let mut i = 0;
        while m.spare_chunks.lock().len() > GROWTH_LOW_WATER {
            assert!(
                !m.wants_growth(),
                "asked with {} spares",
                m.spare_chunks.lock().len()
            );
            fill(&m, &mut i, 0, 100);
        }
        assert!(m.wants_growth());
        assert_eq!(m.spare_chunks.lock().len(), GROWTH_LOW_WATER);
        // The flush thread's growth answers the request made before it ran, not one made
        // while it runs.
        m.growing_while(|| {
            assert!(!m.wants_growth());
            m.growth.store(GROWTH_WANTED, Ordering::Relaxed);
        });
        assert!(m.wants_growth());
    }

    #[test]
    fn grow_ahead_makes_nothing_for_a_sealed_memtable_and_no_more_than_memtable_size_holds() {
        let like = Memtable::new(1);
        for i in 0..3000u64 {
            let key = Bytes::from(i.to_be_bytes().to_vec());
            like.insert(key, i + 1, ValueKind::Put, like.hold(vec![i as u8; 100]))
                .unwrap();
        }
        // Sealed before the flush thread came to it: no chunks and no arrays.
        let sealed = Memtable::new(2);
        sealed.drop_spare_chunks();
        sealed.grow_ahead(&like, usize::MAX);
        assert_eq!(sealed.spare_bytes(), 0);
        assert_eq!(sealed.map.allocated_bytes(), 0);
        // A memtable sealed at 72 * 100 bytes holds at most ~100 entries and one chunk: no
        // more is made for it, however much `like` held.
        let small = Memtable::new(3);
        small.grow_ahead(&like, 72 * 100);
        assert_eq!(small.spare_bytes(), ARENA_CHUNK);
        let full = Memtable::new(4);
        full.grow_ahead(&like, usize::MAX);
        assert!(small.map.allocated_bytes() * 4 < full.map.allocated_bytes());
        // Enough for those ~100 entries: inserting them allocates no array.
        let ready = small.map.allocated_bytes();
        for i in 0..100u64 {
            let key = Bytes::from(i.to_be_bytes().to_vec());
            small
                .insert(key, i + 1, ValueKind::Put, Bytes::from_static(b"v"))
                .unwrap();
        }
        assert_eq!(small.map.allocated_bytes(), ready);
    }

    #[test]
    fn gets_copy_small_arena_values_and_other_reads_share_them() {
        let m = Memtable::new(1);
        let enc = m.hold(b"keyvalue".to_vec());
        m.insert(enc.slice(0..3), 1, ValueKind::Put, enc.slice(3..8))
            .unwrap();
        let Lookup::Value(v, 1) = m.get(b"key", 5) else {
            panic!("expected the value");
        };
        assert_eq!(&v[..], b"value");
        assert_ne!(v.as_ptr(), enc[3..].as_ptr());
        // Scans and flushes share (scans copy what they hand their caller).
        let mut out = std::collections::VecDeque::new();
        m.entries_from(None, 10, &mut out);
        let (k, v) = m.iter().next().unwrap().clone();
        for (k, v) in [
            (k, v),
            out[0].clone(),
            m.first().unwrap(),
            m.last().unwrap(),
        ] {
            assert_eq!(
                (k.user_key.as_ptr(), v.as_ptr()),
                (enc.as_ptr(), enc[3..].as_ptr())
            );
        }
        // A value too large for the arena is shared by gets too.
        let big = vec![5u8; ARENA_CHUNK / 4 + 1];
        assert_eq!(detach(&Bytes::from(big.clone())).len(), big.len());
        let held = m.hold(big);
        assert_eq!(detach(&held).as_ptr(), held.as_ptr());
    }

    #[test]
    fn get_sees_newest_version_at_or_below_seq() {
        let m = Memtable::new(1);
        m.insert(b("k"), 1, ValueKind::Put, b("v1")).unwrap();
        m.insert(b("k"), 3, ValueKind::Put, b("v3")).unwrap();
        m.insert(b("k"), 5, ValueKind::Delete, Bytes::new())
            .unwrap();
        m.insert(b("ka"), 2, ValueKind::Put, b("x")).unwrap();
        // Versions only newer than the read are told apart from no version at all.
        assert_eq!(m.get(b"k", 0), Lookup::Newer);
        assert_eq!(m.get(b"ka", 1), Lookup::Newer);
        assert_eq!(m.get(b"kb", 9), Lookup::Absent);
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
        assert_eq!(f.fragments().covering_seq(b"g", 6), 4);
    }

    #[test]
    fn nested_range_deletes_count_their_pieces_sequence_numbers() {
        let m = Memtable::new(1);
        let n = 2000u64;
        for i in 1..=n {
            m.insert_range_delete(Bytes::new(), Some(b(&format!("k{i:05}"))), i);
        }
        // Piece j is covered by n - j removes: n^2 / 2 sequence numbers in all, each counted.
        let pairs = m.range_tombstones().unwrap().fragments().len() as u64;
        assert!(pairs > n * n / 2 - 1, "{pairs}");
        assert!(m.approx_bytes() as u64 > pairs * 8, "{}", m.approx_bytes());
    }

    #[test]
    fn many_range_deletes_fold_into_fragments_and_answer_the_same() {
        let m = Memtable::new(1);
        // Disjoint and nested ranges, far more than the recent list holds.
        for i in 0..2000u64 {
            let start = format!("k{:05}", (i * 7919) % 10_000);
            let end = format!("k{:05}", (i * 7919) % 10_000 + 1 + i % 50);
            m.insert_range_delete(b(&start), Some(b(&end)), i + 1);
        }
        let view = m.range_tombstones().unwrap();
        let limit = ((view.built.len() as f64).sqrt() as usize).max(32);
        assert!(!view.built.is_empty() && view.recent_len <= limit);
        assert_eq!(view.recent().count(), view.recent_len);
        let before = m.memory_bytes();
        let all = view.fragments();
        // Every scan of this view shares one merged view, made once, and the memtable's
        // memory counts it.
        assert!(Arc::ptr_eq(&all, &view.fragments()));
        assert!(all.heap_bytes() > 0);
        assert_eq!(m.memory_bytes(), before + all.heap_bytes());
        for probe in (0..10_100u64).step_by(37) {
            let key = format!("k{probe:05}");
            for read in [500, 1500, 3000] {
                let want = (0..2000u64)
                    .filter(|i| *i < read)
                    .filter(|i| {
                        let s = (i * 7919) % 10_000;
                        (s..s + 1 + i % 50).contains(&probe)
                    })
                    .map(|i| i + 1)
                    .max()
                    .unwrap_or(0);
                assert_eq!(
                    view.covering_seq(key.as_bytes(), read),
                    want,
                    "{key}@{read}"
                );
                assert_eq!(all.covering_seq(key.as_bytes(), read), want);
            }
        }
    }

    #[test]
    fn seeks_walk_internal_order_both_ways() {
        let m = Memtable::new(1);
        for (i, k) in ["a", "b", "c"].iter().enumerate() {
            m.insert(b(k), i as u64 + 1, ValueKind::Put, b(k)).unwrap();
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
        let all: Vec<_> = m.iter().map(|(k, _)| k.user_key.clone()).collect();
        assert_eq!(all, vec![b("a"), b("b"), b("c")]);
    }
}
