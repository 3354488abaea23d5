//! The memtable's ordered index: a skiplist with one writer and any number of concurrent
//! readers, whose nodes live in arrays owned by the list instead of an allocation each.
//!
//! Nodes are never removed, so there is nothing to reclaim while the list lives: a node is
//! an index into a sequence of node arrays whose sizes double (256, 512, ... nodes), the
//! links between nodes are indices in atomics, and the whole list goes back to the allocator
//! in a few frees when the memtable is dropped. The nodes (16 bytes) and towers (8 bytes a
//! slot) double all the way, so a full 24 MiB memtable carries about 2 MB of them unused; the
//! entries (88 bytes) double up to 32,768 slots and then stay at that size, so that at most
//! ~2.9 MB of them stand unused and no insert initialises more at once. A list holds about
//! 2^25 entries; it reports itself full at 14 Mi, and the writer seals the memtable then,
//! whatever its byte size. Compared with a general concurrent
//! skiplist this saves a `malloc` per insert (and the flush thread's `free` of each, which
//! contends on the writer's malloc arena), the epoch and reference-count bookkeeping of a list
//! that supports removal, and memory: a node's links above the bottom level sit in one small
//! shared array (a quarter of the nodes have any, at branching factor 4), which stays in
//! cache while a search walks the upper levels.
//!
//! A search touches as little memory as it can. A node is 16 bytes, its bottom link and its
//! key's 8-byte [prefix](crate::key::key_prefix); its entry (key and value) sits in a separate
//! array, read only when two prefixes tie, so the nodes a search steps through stay in cache
//! far longer. Every link is one 64-bit word: the index of the next node (or tower) and the
//! top 32 bits of that node's key prefix, so a search decides whether to step right without
//! loading the next node, unless the two keys share their first four bytes. The levels above
//! the bottom, and the bottom link of every node that has them, live apart from the nodes in
//! one array of towers (a node of height `h >= 2` owns `h + 2` adjacent slots there:
//! `[prefix, node index, link at level 0, ..., link at level h - 1]`), about a tenth of the
//! nodes' size, which stays in cache: a search walks the upper levels there, and loads a node
//! only for each step it takes to the right on the bottom level.
//!
//! Publication: the writer fills a node (its entry, its prefix and its links) and then makes
//! it reachable level by level from the bottom with `Release` stores; readers load links
//! with `Acquire`, so a node a reader can reach is complete. Inserts need no lock: a list hands
//! out one [`ListWriter`], which holds what only the writer touches, and an insert borrows it
//! mutably.

use super::entry_cell::EntryCell;
use crate::key::{cmp_parts, InternalKey, KeyView};
use bytes::Bytes;
use std::cmp::Ordering;
use std::sync::atomic::{
    AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering as AtomicOrdering,
};
use std::sync::OnceLock;

/// Most levels a node can have: with branching factor 4, enough for 4^12 (16 million)
/// entries before searches get longer than logarithmic.
const MAX_HEIGHT: usize = 12;

/// log2 of the first array's size: the first [`DOUBLING`] arrays hold `2^(k + FIRST_BITS)`
/// slots each (256 to 32,768), so that a small memtable allocates little.
const FIRST_BITS: u32 = 8;

/// Arrays of doubling size of a capped [`Slots`] (up to 32,768 slots each).
const DOUBLING: usize = 8;

/// Arrays of doubling size of an uncapped [`Slots`]: exactly enough for its [`CAPACITY`]
/// (arrays `0 ..= k` hold `2^(k + 1 + FIRST_BITS) - 2^FIRST_BITS` slots).
const DOUBLING_ALL: usize = 25 - FIRST_BITS as usize;

/// Slots in the doubling arrays together.
const DOUBLING_SLOTS: u32 = (1 << (DOUBLING as u32 + FIRST_BITS)) - (1 << FIRST_BITS);

/// Slots of each array after the doubling ones: at most this many are allocated and not yet
/// used (about 3.4 MB of nodes and entries), and at most this many are initialised at once,
/// by the insert that needs the array.
const FIXED_LEN: u32 = 1 << (DOUBLING as u32 - 1 + FIRST_BITS);

/// Arrays after the doubling ones, in a directory allocated by the first that is needed.
const FIXED_ARRAYS: usize = 1022;

/// Slots a [`Slots`] can hold: about 2^25.
const CAPACITY: u32 = DOUBLING_SLOTS + FIXED_LEN * FIXED_ARRAYS as u32;

// Capped and uncapped slots hold the same number of slots.
const _: () = assert!(CAPACITY == (1 << (DOUBLING_ALL as u32 + FIRST_BITS)) - (1 << FIRST_BITS));

/// A node or tower reference: 0 is "none", `i + 1` is node (or tower) `i`.
type Link = u32;

/// A link as stored: the target's [`Link`] in the low half, the top half of its key prefix in
/// the high half.
fn pack(link: Link, prefix: u64) -> u64 {
    (prefix & !0xffff_ffff) | u64::from(link)
}

fn link_of(word: u64) -> Link {
    word as u32
}

/// Marks a node's `next0` as naming its tower (which holds its bottom link) rather than
/// being the link: nodes and towers are numbered below it.
const TOWER_FLAG: u64 = 1 << 31;

/// The largest node or tower-slot index (below [`TOWER_FLAG`]).
const MAX_INDEX: u32 = CAPACITY - 1;

/// Entries past which the list reports itself full ([`SkipList::is_full`]): 14 Mi, which
/// leaves room (to the [`CAPACITY`] of about 32 Mi) for a write group: one batch of at most
/// [`crate::MAX_BATCH_OPS`] (16 Mi) and at most 1 MiB of smaller ones (3 bytes or more an
/// operation). It also keeps a full list's nodes and towers inside arrays of at most 2^23 and
/// 2^24 slots (128 and 128 MiB) rather than making it allocate the next ones (256 and 256 MiB)
/// for a handful of entries.
const NEARLY_FULL: usize = 14 << 20;

/// A node: its bottom link, or, if it has a tower, `TOWER_FLAG | tower index` (the tower
/// holds its bottom link then), and its key's prefix. 16 bytes, so that the nodes a search
/// steps through on the bottom level are mostly in cache; its entry is in a separate array,
/// read only when prefixes tie.
#[derive(Default)]
struct Node {
    next0: AtomicU64,
    prefix: AtomicU64,
}

/// A node's entry, set once (by the list's one writer) before the node is linked.
type EntrySlot = EntryCell<(InternalKey, Bytes)>;

/// What [`SkipList::seek_with_prev`] finds: the first entry at or after the probe, and the
/// one before it.
pub(crate) type SeekWithPrev<'a> = (Option<Cursor<'a>>, Option<Cursor<'a>>);

/// Slots addressed by a `u32` index, in arrays allocated as the index grows: growing never
/// moves a slot, so readers hold plain references while the writer adds more.
///
/// Uncapped (`CAPPED = false`), every array doubles: the fewest steps from an index to its
/// slot, for the nodes and towers a search walks, whose slots are small (16 and 8 bytes), so
/// that up to half of the last array unused costs little. Capped, arrays double up to
/// [`FIXED_LEN`] slots and then stay at that size, in a directory allocated by the first
/// that needs it: for the entries (88 bytes each, read only when prefixes tie), so that at
/// most one such array stands allocated and unused, and the insert that allocates one
/// initialises no more.
struct Slots<T, const CAPPED: bool> {
    doubling: [Array<T>; DOUBLING_ALL],
    fixed: OnceLock<Box<[Array<T>]>>,
}

/// One array of slots, allocated when first needed.
type Array<T> = OnceLock<Box<[T]>>;

/// Where a slot lives: which array, and the offset in it.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
enum Place {
    Doubling(usize, usize),
    Fixed(usize, usize),
}

impl<T: Default, const CAPPED: bool> Slots<T, CAPPED> {
    fn new() -> Self {
        Slots {
            doubling: std::array::from_fn(|_| OnceLock::new()),
            fixed: OnceLock::new(),
        }
    }

    /// The array holding slot `i`, and `i`'s offset in it.
    fn locate(i: u32) -> Place {
        if !CAPPED || i < DOUBLING_SLOTS {
            let biased = u64::from(i) + (1 << FIRST_BITS);
            let k = biased.ilog2() - FIRST_BITS;
            Place::Doubling(k as usize, (biased - (1 << (k + FIRST_BITS))) as usize)
        } else {
            let j = i - DOUBLING_SLOTS;
            Place::Fixed((j / FIXED_LEN) as usize, (j % FIXED_LEN) as usize)
        }
    }

    fn array_len(place: Place) -> usize {
        match place {
            Place::Doubling(k, _) => 1 << (k as u32 + FIRST_BITS),
            Place::Fixed(..) => FIXED_LEN as usize,
        }
    }

    fn array(&self, place: Place) -> Option<&Array<T>> {
        match place {
            Place::Doubling(k, _) => self.doubling.get(k),
            Place::Fixed(k, _) => self.fixed.get()?.get(k),
        }
    }

    /// Slot `i`, if its array exists.
    #[inline]
    fn get(&self, i: u32) -> Option<&T> {
        let place = Self::locate(i);
        let (Place::Doubling(_, off) | Place::Fixed(_, off)) = place;
        self.array(place)?.get()?.get(off)
    }

    /// Slot `i`, creating its array if needed (the writer, or [`SkipList::grow_like`] on
    /// another thread: each array is created once). `None` past [`CAPACITY`].
    fn get_or_grow(&self, i: u32) -> Option<&T> {
        if i > MAX_INDEX {
            return None;
        }
        let place = Self::locate(i);
        let (Place::Doubling(_, off) | Place::Fixed(_, off)) = place;
        if matches!(place, Place::Fixed(..)) {
            self.fixed
                .get_or_init(|| (0..FIXED_ARRAYS).map(|_| OnceLock::new()).collect());
        }
        let len = Self::array_len(place);
        self.array(place)?
            .get_or_init(|| (0..len).map(|_| T::default()).collect())
            .get(off)
    }

    /// Creates, if they are not yet, every array up to the one holding slot `last` (or up to
    /// the last array, past [`CAPACITY`]).
    fn grow_to(&self, last: u32) {
        let mut i = 0;
        while self.get_or_grow(i).is_some() {
            let next = Self::next_array_start(i);
            if next > last || next <= i {
                return;
            }
            i = next;
        }
    }

    /// True if slots `from ..= from + span - 1` lie in one array.
    fn one_array(from: u32, span: u32) -> bool {
        from.checked_add(span - 1).is_some_and(|last| {
            let same = |a: Place, b: Place| match (a, b) {
                (Place::Doubling(x, _), Place::Doubling(y, _)) => x == y,
                (Place::Fixed(x, _), Place::Fixed(y, _)) => x == y,
                _ => false,
            };
            same(Self::locate(from), Self::locate(last))
        })
    }

    /// First index of the array after the one holding `i`.
    fn next_array_start(i: u32) -> u32 {
        match Self::locate(i) {
            Place::Doubling(k, _) => {
                let start = (1u64 << (k as u32 + 1 + FIRST_BITS)) - (1 << FIRST_BITS);
                u32::try_from(start).unwrap_or(u32::MAX)
            }
            Place::Fixed(k, _) => {
                DOUBLING_SLOTS.saturating_add(FIXED_LEN.saturating_mul(k as u32 + 1))
            }
        }
    }

    /// Bytes allocated so far.
    fn allocated_bytes(&self) -> usize {
        let arrays = self
            .doubling
            .iter()
            .chain(self.fixed.get().into_iter().flat_map(|d| d.iter()));
        arrays
            .filter_map(|a| a.get())
            .map(|a| a.len() * std::mem::size_of::<T>())
            .sum()
    }
}

/// The list's one writer ([`SkipList::take_writer`]): what only the writer touches, so that
/// an insert takes no lock (the caller's `&mut` is the proof that it is alone).
pub(crate) struct ListWriter {
    /// The [`SkipList::id`] of the list it writes to: any other refuses it.
    list: u64,
    /// The next node index to hand out.
    next_node: u32,
    /// The next free slot of `towers`.
    next_tower: u32,
    /// xorshift state for node heights.
    rng: u64,
    /// If the last insert appended its node at the end of the list: where a search for a key
    /// after it would stop on every level (its `bottom` is that node). An ascending load (a
    /// sequential fill) then inserts with one comparison instead of a search (RocksDB's
    /// insert hint).
    tail: Option<Preds>,
}

/// A sorted map from internal key to value, one writer, lock-free readers.
pub(crate) struct SkipList {
    nodes: Slots<Node, false>,
    entries: Slots<EntrySlot, true>,
    towers: Slots<AtomicU64, false>,
    /// The head's links: level 0 to a node, the others to towers.
    head: [AtomicU64; MAX_HEIGHT],
    /// Levels in use (at least 1): readers start their searches there.
    height: AtomicUsize,
    len: AtomicUsize,
    /// Tower slots in use (`ListWriter::next_tower` as of the last insert), for
    /// [`grow_like`](SkipList::grow_like).
    towers_used: AtomicU32,
    /// Unique among the lists of this process: binds a [`ListWriter`] to its list.
    id: u64,
    /// Set once the list's writer has been handed out.
    writer_taken: AtomicBool,
    /// The writer of the test-only [`insert`](SkipList::insert).
    #[cfg(test)]
    test_writer: parking_lot::Mutex<Option<ListWriter>>,
}

/// Where list ids come from.
static NEXT_LIST_ID: AtomicU64 = AtomicU64::new(1);

impl std::fmt::Debug for SkipList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SkipList")
            .field("len", &self.len())
            .field("height", &self.height.load(AtomicOrdering::Relaxed))
            .finish()
    }
}

/// Where a walk stands: at the head, at a node reached through its tower, or at a node.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Pos {
    Head,
    Tower(u32),
    Node(u32),
}

/// A position in the list: a node whose entry can be read, and which knows its successor.
#[derive(Clone, Copy)]
pub(crate) struct Cursor<'a> {
    list: &'a SkipList,
    index: u32,
    node: &'a Node,
}

impl<'a> Cursor<'a> {
    /// The entry here.
    pub(crate) fn entry(&self) -> &'a (InternalKey, Bytes) {
        self.list.entry(self.index)
    }

    /// The next entry in order, if any.
    pub(crate) fn next(&self) -> Option<Cursor<'a>> {
        let word = self
            .list
            .bottom_slot_of(self.node)?
            .load(AtomicOrdering::Acquire);
        self.list.cursor(link_of(word))
    }
}

/// How a key compares with `probe`, given the link word that leads to it (its prefix's top
/// half), its full prefix and its entry (both asked for only if the halves are equal).
fn cmp_linked<'a>(
    word: u64,
    prefix: impl FnOnce() -> Option<u64>,
    entry: impl FnOnce() -> Option<&'a (InternalKey, Bytes)>,
    probe: &impl KeyView,
) -> Ordering {
    let p = probe.prefix();
    match (word >> 32).cmp(&(p >> 32)) {
        Ordering::Equal => {}
        o => return o,
    }
    match prefix().map(|x| x.cmp(&p)) {
        Some(Ordering::Equal) => {}
        Some(o) => return o,
        None => return Ordering::Greater,
    }
    match entry() {
        Some((k, _)) => cmp_parts(&k.user_key, k.trailer, probe.user_key(), probe.trailer()),
        None => Ordering::Greater,
    }
}

/// Where a search stopped on each level: the last position before the probe.
#[derive(Clone, Copy)]
struct Preds {
    /// Levels 1 and up: `Head` or `Tower`.
    upper: [Pos; MAX_HEIGHT],
    /// Level 0.
    bottom: Pos,
    /// The link out of `bottom` that the search stopped at (0: none), as it read it: a
    /// reader must not read it again, or it may find a node inserted since, which can be
    /// before the probe (a newer version of the key it looks for, say).
    after: Link,
}

impl SkipList {
    pub(crate) fn new() -> SkipList {
        SkipList {
            nodes: Slots::new(),
            entries: Slots::new(),
            towers: Slots::new(),
            head: std::array::from_fn(|_| AtomicU64::new(0)),
            height: AtomicUsize::new(1),
            len: AtomicUsize::new(0),
            towers_used: AtomicU32::new(0),
            id: NEXT_LIST_ID.fetch_add(1, AtomicOrdering::Relaxed),
            writer_taken: AtomicBool::new(false),
            #[cfg(test)]
            test_writer: parking_lot::Mutex::new(None),
        }
    }

    /// The list's writer, the first time it is asked for; `None` after that: a list has one
    /// writer, whose inserts need no lock.
    pub(crate) fn take_writer(&self) -> Option<ListWriter> {
        if self.writer_taken.swap(true, AtomicOrdering::AcqRel) {
            return None;
        }
        Some(ListWriter {
            list: self.id,
            next_node: 0,
            next_tower: 0,
            rng: 0x2545_f491_4f6c_dd1d,
            tail: None,
        })
    }

    /// This list's id (see [`ListWriter`]).
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Entries in the list.
    pub(crate) fn len(&self) -> usize {
        self.len.load(AtomicOrdering::Acquire)
    }

    /// True once the list holds 14 Mi entries: the memtable should be sealed, which leaves
    /// room for a write group more.
    pub(crate) fn is_full(&self) -> bool {
        self.len() >= NEARLY_FULL
    }

    /// Allocates and initialises, where that is not done yet, the node, entry and tower
    /// arrays that `like`'s inserts used, for at most `max_entries` of them (and at most a
    /// [full](Self::is_full) list's; the towers in proportion), so that as many inserts here
    /// find them ready instead of filling megabytes of fresh memory themselves. Any thread may
    /// call it while the writer inserts: each array is created once, by whichever asks first,
    /// and an insert that needs an array being created here waits for it. Arrays this list
    /// never reaches stay allocated until it is dropped.
    pub(crate) fn grow_like(&self, like: &SkipList, max_entries: usize) {
        self.grow_scaled(like, (1, 1), max_entries);
    }

    /// [`grow_like`](Self::grow_like) for `times.0 / times.1` as many inserts as `like`'s (a
    /// list grown ahead of itself: `like` is this list, `times` `(2, 1)`; a part of what
    /// `like` used, made first: a fraction such as `(1, 8)`).
    pub(crate) fn grow_scaled(&self, like: &SkipList, times: (u32, u32), max_entries: usize) {
        let scale = |n: u32| -> u32 {
            let scaled = u64::from(n) * u64::from(times.0) / u64::from(times.1.max(1));
            u32::try_from(scaled).unwrap_or(u32::MAX)
        };
        // Both as of some insert, perhaps apart by the inserts between the two loads (a
        // size to grow to, not an invariant).
        let nodes = scale(u32::try_from(like.len()).unwrap_or(u32::MAX));
        let towers = scale(like.towers_used.load(AtomicOrdering::Relaxed));
        let cap = max_entries.min(NEARLY_FULL);
        let cap = u32::try_from(cap).unwrap_or(u32::MAX);
        let grown = nodes.min(cap);
        // Towers grow with the nodes (a quarter of the nodes get one, of 1.33 slots on
        // average): as many as `like` used for the nodes grown here.
        let towers = if nodes == 0 {
            0
        } else {
            u32::try_from(u64::from(towers) * u64::from(grown) / u64::from(nodes)).unwrap_or(towers)
        };
        if let Some(last) = grown.checked_sub(1) {
            self.nodes.grow_to(last);
            self.entries.grow_to(last);
        }
        if let Some(last) = towers.checked_sub(1) {
            self.towers.grow_to(last);
        }
    }

    /// Bytes of the node, entry and tower arrays allocated so far, those made ahead by
    /// [`grow_like`](Self::grow_like) included (not the keys and values, which the entries
    /// slice).
    pub(crate) fn allocated_bytes(&self) -> usize {
        self.nodes.allocated_bytes()
            + self.entries.allocated_bytes()
            + self.towers.allocated_bytes()
    }

    fn node(&self, link: Link) -> Option<&Node> {
        self.nodes.get(link.checked_sub(1)?)
    }

    fn cursor(&self, link: Link) -> Option<Cursor<'_>> {
        Some(Cursor {
            list: self,
            index: link.checked_sub(1)?,
            node: self.node(link)?,
        })
    }

    /// Node `index`'s entry: it is set before the node is linked, and links are loaded with
    /// `Acquire`, so a reachable node always has one.
    fn entry(&self, index: u32) -> &(InternalKey, Bytes) {
        self.entries
            .get(index)
            .and_then(EntryCell::get)
            .expect("a node is linked only after its entry is set")
    }

    fn tower_slot(&self, tower: u32, i: usize) -> Option<&AtomicU64> {
        self.towers.get(tower.checked_add(u32::try_from(i).ok()?)?)
    }

    /// The node index a tower belongs to.
    fn tower_node(&self, tower: u32) -> Option<u32> {
        u32::try_from(self.tower_slot(tower, 1)?.load(AtomicOrdering::Relaxed)).ok()
    }

    /// The bottom link slot of `node`: in its tower if it has one.
    fn bottom_slot_of<'a>(&'a self, node: &'a Node) -> Option<&'a AtomicU64> {
        let w = node.next0.load(AtomicOrdering::Relaxed);
        if w & TOWER_FLAG != 0 {
            self.tower_slot((w & !TOWER_FLAG) as u32, 2)
        } else {
            Some(&node.next0)
        }
    }

    /// The slot of the link leaving `pos` at `level` (a `Node` position only at level 0).
    fn slot(&self, pos: Pos, level: usize) -> Option<&AtomicU64> {
        match pos {
            Pos::Head => self.head.get(level),
            Pos::Tower(t) => self.tower_slot(t, 2 + level),
            Pos::Node(n) => self.bottom_slot_of(self.nodes.get(n)?),
        }
    }

    /// The last position before `probe` (or, if `or_equal`, not after it) on every level
    /// below the list's height.
    fn search(&self, probe: &impl KeyView, or_equal: bool) -> Preds {
        let goes_right =
            |ord: Ordering| ord == Ordering::Less || (or_equal && ord == Ordering::Equal);
        let mut preds = Preds {
            upper: [Pos::Head; MAX_HEIGHT],
            bottom: Pos::Head,
            after: 0,
        };
        let mut pos = Pos::Head;
        let top = self.height.load(AtomicOrdering::Acquire);
        for level in (1..top).rev() {
            while let Some(slot) = self.slot(pos, level) {
                let word = slot.load(AtomicOrdering::Acquire);
                let Some(next) = link_of(word).checked_sub(1) else {
                    break;
                };
                let prefix = || Some(self.tower_slot(next, 0)?.load(AtomicOrdering::Relaxed));
                let entry = || Some(self.entry(self.tower_node(next)?));
                if !goes_right(cmp_linked(word, prefix, entry, probe)) {
                    break;
                }
                pos = Pos::Tower(next);
            }
            preds.upper[level] = pos;
        }
        while let Some(slot) = self.slot(pos, 0) {
            let word = slot.load(AtomicOrdering::Acquire);
            let Some(next) = self.node(link_of(word)) else {
                break;
            };
            let prefix = || Some(next.prefix.load(AtomicOrdering::Relaxed));
            let entry = || Some(self.entry(link_of(word) - 1));
            if !goes_right(cmp_linked(word, prefix, entry, probe)) {
                preds.after = link_of(word);
                break;
            }
            pos = Pos::Node(link_of(word) - 1);
        }
        preds.bottom = pos;
        preds
    }

    /// The node at a bottom-level position (`None` for the head).
    fn at(&self, pos: Pos) -> Option<Cursor<'_>> {
        let n = match pos {
            Pos::Head => return None,
            Pos::Tower(t) => self.tower_node(t)?,
            Pos::Node(n) => n,
        };
        self.cursor(n.checked_add(1)?)
    }

    /// The first entry at or after `probe` (after it if not `inclusive`).
    pub(crate) fn lower_bound(&self, probe: &impl KeyView, inclusive: bool) -> Option<Cursor<'_>> {
        self.cursor(self.search(probe, !inclusive).after)
    }

    /// The first entry at or after `probe`, and the entry just before it (`None` at the
    /// front): what one search finds on its way down.
    pub(crate) fn seek_with_prev(&self, probe: &impl KeyView) -> SeekWithPrev<'_> {
        let preds = self.search(probe, false);
        (self.cursor(preds.after), self.at(preds.bottom))
    }

    /// The last entry at or before `probe` (before it if not `inclusive`).
    pub(crate) fn upper_bound(&self, probe: &impl KeyView, inclusive: bool) -> Option<Cursor<'_>> {
        self.at(self.search(probe, inclusive).bottom)
    }

    /// The first entry.
    pub(crate) fn front(&self) -> Option<Cursor<'_>> {
        self.cursor(link_of(self.head[0].load(AtomicOrdering::Acquire)))
    }

    /// The last entry.
    pub(crate) fn back(&self) -> Option<Cursor<'_>> {
        let mut pos = Pos::Head;
        let top = self.height.load(AtomicOrdering::Acquire);
        for level in (0..top).rev() {
            while let Some(slot) = self.slot(pos, level) {
                let Some(next) = link_of(slot.load(AtomicOrdering::Acquire)).checked_sub(1) else {
                    break;
                };
                pos = if level == 0 {
                    Pos::Node(next)
                } else {
                    Pos::Tower(next)
                };
            }
        }
        self.at(pos)
    }

    /// Inserts `key -> value`. Keys are unique in a memtable (every write has its own
    /// sequence number); an equal key would go in before the one there, and be found first.
    /// Returns false, inserting nothing, if the list is at its capacity (about 2^25 nodes; it
    /// reports itself [full](Self::is_full) long before).
    /// (Tests: with the list's writer, taken by the first call.)
    #[cfg(test)]
    pub(crate) fn insert(&self, key: InternalKey, value: Bytes) -> bool {
        let mut slot = self.test_writer.lock();
        if slot.is_none() {
            *slot = self.take_writer();
        }
        let Some(w) = slot.as_mut() else {
            return false;
        };
        self.insert_with(w, key, value, || ()).is_ok()
    }

    /// [`insert`](Self::insert) by the list's writer `w`, calling `first` before the entry
    /// can be reached: what `first` writes is ordered before every later insert (the caller
    /// holds the one writer) and seen by any reader that finds the entry (the memtable sets
    /// its filter's bits there). Refused, with nothing inserted and `first` not called, if
    /// `w` is another list's writer or the list is at its capacity.
    pub(crate) fn insert_with(
        &self,
        w: &mut ListWriter,
        key: InternalKey,
        value: Bytes,
        first: impl FnOnce(),
    ) -> Result<(), Refused> {
        if w.list != self.id {
            return Err(Refused::NotItsWriter);
        }
        let height = random_height(&mut w.rng);
        let index = w.next_node;
        // `None` past the capacity, so `index + 1` below fits.
        let (Some(node), Some(entry)) = (
            self.nodes.get_or_grow(index),
            self.entries.get_or_grow(index),
        ) else {
            return Err(Refused::Full);
        };
        // Only for an entry that goes in (a refused one counts no bytes).
        first();
        let link = index + 1;
        let prefix = key.prefix();
        let mut tower = None;
        let grown = if height > 1 {
            self.grow_tower(w.next_tower, height + 2)
        } else {
            None
        };
        // Out of tower slots (never before the list reports itself full), a node goes in
        // with no tower: searches get longer, nothing is lost.
        let height = if grown.is_some() { height } else { 1 };
        if let Some((base, next_free)) = grown {
            w.next_tower = next_free;
            for i in 0..height + 2 {
                let v = match i {
                    0 => prefix,
                    1 => u64::from(index),
                    _ => 0,
                };
                if let Some(slot) = self.tower_slot(base, i) {
                    slot.store(v, AtomicOrdering::Relaxed);
                }
            }
            tower = Some(base);
        }
        w.next_node = link;
        node.prefix.store(prefix, AtomicOrdering::Relaxed);
        if let Some(t) = tower {
            node.next0
                .store(TOWER_FLAG | u64::from(t), AtomicOrdering::Relaxed);
        }
        let preds = match w.tail.take() {
            Some(
                preds @ Preds {
                    bottom: Pos::Node(last),
                    ..
                },
            ) if key > self.entry(last).0 => preds,
            _ => self.search(&key, false),
        };
        // SAFETY: only this list's one writer (`w`, borrowed mutably) sets entries, and
        // `index` is new (`next_node` only grows), so no other `set` of this cell can run.
        #[allow(unsafe_code)]
        let _ = unsafe { entry.set((key, value)) };
        let mut appended = false;
        // Bottom up, each level's link is set on the new node before the node is made
        // reachable there.
        if let (Some(from), Some(mine)) = (self.slot(preds.bottom, 0), self.bottom_slot_of(node)) {
            let after = from.load(AtomicOrdering::Relaxed);
            appended = link_of(after) == 0;
            mine.store(after, AtomicOrdering::Relaxed);
            from.store(pack(link, prefix), AtomicOrdering::Release);
        }
        if let Some(t) = tower {
            // Levels above the old height start at the head, which `preds` says.
            if height > self.height.load(AtomicOrdering::Relaxed) {
                self.height.store(height, AtomicOrdering::Release);
            }
            for level in 1..height {
                let (Some(from), Some(mine)) = (
                    self.slot(preds.upper[level], level),
                    self.slot(Pos::Tower(t), level),
                ) else {
                    continue;
                };
                mine.store(from.load(AtomicOrdering::Relaxed), AtomicOrdering::Relaxed);
                from.store(pack(t + 1, prefix), AtomicOrdering::Release);
            }
        }
        if appended {
            let mut next = preds;
            next.bottom = Pos::Node(index);
            if let Some(t) = tower {
                for p in next.upper.iter_mut().take(height).skip(1) {
                    *p = Pos::Tower(t);
                }
            }
            w.tail = Some(next);
        }
        // By the one writer: a load and a store, not a locked add.
        self.towers_used
            .store(w.next_tower, AtomicOrdering::Relaxed);
        let len = self.len.load(AtomicOrdering::Relaxed);
        self.len.store(len + 1, AtomicOrdering::Release);
        Ok(())
    }

    /// Every level, walked from the head: its keys ascend, and each level holds every node
    /// of the level above it (tests).
    #[cfg(test)]
    fn assert_levels_sorted(&self) {
        let top = self.height.load(AtomicOrdering::Acquire);
        let mut above: Option<Vec<u32>> = None;
        for level in (0..top).rev() {
            let mut nodes = Vec::new();
            let mut pos = Pos::Head;
            while let Some(slot) = self.slot(pos, level) {
                let word = slot.load(AtomicOrdering::Acquire);
                let Some(next) = link_of(word).checked_sub(1) else {
                    break;
                };
                let (node, next_pos) = if level == 0 {
                    (next, Pos::Node(next))
                } else {
                    (self.tower_node(next).unwrap(), Pos::Tower(next))
                };
                assert_eq!(word >> 32, self.entry(node).0.prefix() >> 32, "link prefix");
                nodes.push(node);
                pos = next_pos;
            }
            for w in nodes.windows(2) {
                assert!(
                    self.entry(w[0]).0 < self.entry(w[1]).0,
                    "level {level} out of order"
                );
            }
            if let Some(above) = &above {
                let here: std::collections::HashSet<u32> = nodes.iter().copied().collect();
                assert!(
                    above.iter().all(|n| here.contains(n)),
                    "level {level} lost a node"
                );
            }
            above = Some(nodes);
        }
        assert_eq!(above.map_or(0, |n| n.len()), self.len());
    }

    /// Room for a tower of `slots` adjacent slots at or after `from`, in one array (writer
    /// only): its first slot and the first one after it, or `None` past the capacity.
    fn grow_tower(&self, from: u32, slots: usize) -> Option<(u32, u32)> {
        let span = u32::try_from(slots).ok()?;
        let mut base = from;
        if !Slots::<AtomicU64, false>::one_array(base, span) {
            base = Slots::<AtomicU64, false>::next_array_start(base);
        }
        if !Slots::<AtomicU64, false>::one_array(base, span) {
            return None;
        }
        // `one_array` proved this does not overflow; `get_or_grow` refuses it past the capacity.
        let last = base + span - 1;
        self.towers.get_or_grow(last)?;
        Some((base, last + 1))
    }
}

/// Why [`SkipList::insert_with`] inserted nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The list is at its capacity (about 2^25 nodes).
    Full,
    /// The writer is another list's.
    NotItsWriter,
}

impl ListWriter {
    /// The [`SkipList::id`] of the list it writes to.
    pub(crate) fn list_id(&self) -> u64 {
        self.list
    }
}

/// A height with `P(h) = 3/4 * (1/4)^(h-1)`, at most [`MAX_HEIGHT`] (branching factor 4).
fn random_height(rng: &mut u64) -> usize {
    let mut x = *rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *rng = x;
    (1 + (x.trailing_zeros() / 2) as usize).min(MAX_HEIGHT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::{KeyRef, ValueKind};
    use proptest::prelude::*;
    use std::collections::BTreeMap;
    use std::sync::Arc;

    fn ikey(user: &[u8], seq: u64) -> InternalKey {
        InternalKey::new(Bytes::copy_from_slice(user), seq, ValueKind::Put)
    }

    /// The model's order: user key ascending, then sequence descending.
    type Model = BTreeMap<(Vec<u8>, std::cmp::Reverse<u64>), u64>;

    fn seq_of(k: &InternalKey) -> u64 {
        crate::key::trailer_seq(k.trailer)
    }

    /// Steps a 64-bit linear congruential generator (the tests' deterministic randomness).
    fn lcg(rng: &mut u64) {
        *rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
    }

    fn collect(list: &SkipList) -> Vec<(Vec<u8>, u64)> {
        std::iter::successors(list.front(), |c| c.next())
            .map(|c| (c.entry().0.user_key.to_vec(), seq_of(&c.entry().0)))
            .collect()
    }

    #[test]
    fn slots_locate_every_index_once_arrays_double_then_stay_and_capacity_ends() {
        // Walk the places in order: each array's offsets run from 0 to its length - 1.
        let mut arrays: Vec<(Place, usize)> = Vec::new();
        for i in 0..(DOUBLING_SLOTS + 3 * FIXED_LEN) {
            let place = Slots::<u8, true>::locate(i);
            let (Place::Doubling(_, off) | Place::Fixed(_, off)) = place;
            if off == 0 {
                arrays.push((place, 0));
                if i > 0 {
                    assert_eq!(Slots::<u8, true>::next_array_start(i - 1), i, "slot {i}");
                }
            }
            let last = arrays.last_mut().unwrap();
            assert_eq!(off, last.1, "slot {i}");
            last.1 += 1;
        }
        let lens: Vec<usize> = arrays.iter().map(|a| a.1).collect();
        let mut want: Vec<usize> = (0..DOUBLING as u32)
            .map(|k| 1usize << (k + FIRST_BITS))
            .collect();
        want.extend([FIXED_LEN as usize; 3]);
        assert_eq!(lens, want);
        assert_eq!(
            Slots::<u8, true>::locate(MAX_INDEX),
            Place::Fixed(FIXED_ARRAYS - 1, FIXED_LEN as usize - 1)
        );
        // Past the capacity there is no slot, and nothing is allocated for it.
        let slots = Slots::<u8, true>::new();
        assert!(slots.get_or_grow(MAX_INDEX + 1).is_none());
        assert!(slots.get_or_grow(u32::MAX).is_none());
        assert_eq!(slots.allocated_bytes(), 0);
        assert_eq!(slots.get_or_grow(MAX_INDEX).copied(), Some(0));
        assert_eq!(slots.allocated_bytes(), FIXED_LEN as usize);
        assert!(
            slots.get(MAX_INDEX - FIXED_LEN).is_none(),
            "only the array asked for exists"
        );
    }

    #[test]
    fn uncapped_slots_double_up_to_the_capacity() {
        assert_eq!(Slots::<u8, false>::locate(0), Place::Doubling(0, 0));
        assert_eq!(
            Slots::<u8, false>::locate(DOUBLING_SLOTS),
            Place::Doubling(DOUBLING, 0)
        );
        let Place::Doubling(k, _) = Slots::<u8, false>::locate(MAX_INDEX) else {
            panic!("an uncapped slot is in a doubling array");
        };
        assert!(k < DOUBLING_ALL);
        let slots = Slots::<u8, false>::new();
        assert!(slots.get_or_grow(MAX_INDEX + 1).is_none());
        assert!(slots.get(u32::MAX).is_none());
        assert_eq!(slots.get_or_grow(300).copied(), Some(0));
        assert_eq!(
            slots.allocated_bytes(),
            512,
            "only the second array, of 512 slots"
        );
    }

    #[test]
    fn towers_never_straddle_two_arrays() {
        let list = SkipList::new();
        // Start just before the end of the first array: a tower of 5 slots must move on.
        let first_len = 1u32 << FIRST_BITS;
        let (base, next) = list.grow_tower(first_len - 2, 5).unwrap();
        assert_eq!(base, first_len);
        assert_eq!(next, first_len + 5);
        let (base, _) = list.grow_tower(next, 5).unwrap();
        assert_eq!(base, next);
        // The same at a later boundary, and at the end of the capacity.
        let (base, _) = list.grow_tower(DOUBLING_SLOTS - 1, 4).unwrap();
        assert_eq!(base, DOUBLING_SLOTS);
        assert!(list.grow_tower(MAX_INDEX - 1, 4).is_none());
    }

    #[test]
    fn ordered_by_internal_key_and_bounds_agree_with_a_model() {
        let list = SkipList::new();
        let mut model = Model::new();
        let mut rng = 7u64;
        // Keys share their first four (and often eight) bytes, so that the packed prefixes
        // tie and searches fall back to whole keys.
        for seq in 1..=20_000u64 {
            lcg(&mut rng);
            let user = format!("user{:06}", (rng >> 33) % 3000).into_bytes();
            assert!(list.insert(ikey(&user, seq), Bytes::from(seq.to_be_bytes().to_vec())));
            model.insert((user, std::cmp::Reverse(seq)), seq);
        }
        assert_eq!(list.len(), model.len());
        let want: Vec<(Vec<u8>, u64)> = model.keys().map(|(u, s)| (u.clone(), s.0)).collect();
        assert_eq!(collect(&list), want);
        list.assert_levels_sorted();
        for probe_user in [
            "user000000",
            "user001500",
            "user002999",
            "user9",
            "a",
            "userz",
        ] {
            for seq in [0u64, 1, 10_000, 20_000, u64::MAX >> 8] {
                let probe = KeyRef::new(probe_user.as_bytes(), crate::key::lookup_trailer(seq));
                let pk = (probe_user.as_bytes().to_vec(), std::cmp::Reverse(seq));
                let at_or_after = model
                    .range(pk.clone()..)
                    .next()
                    .map(|(k, _)| (k.0.clone(), k.1 .0));
                let got = list
                    .lower_bound(&probe, true)
                    .map(|c| (c.entry().0.user_key.to_vec(), seq_of(&c.entry().0)));
                assert_eq!(got, at_or_after, "lower_bound {probe_user} {seq}");
                let before = model
                    .range(..pk.clone())
                    .next_back()
                    .map(|(k, _)| (k.0.clone(), k.1 .0));
                let got = list
                    .upper_bound(&probe, false)
                    .map(|c| (c.entry().0.user_key.to_vec(), seq_of(&c.entry().0)));
                assert_eq!(got, before, "upper_bound {probe_user} {seq}");
            }
        }
        let last = model.keys().next_back().map(|(u, s)| (u.clone(), s.0));
        let got = list
            .back()
            .map(|c| (c.entry().0.user_key.to_vec(), seq_of(&c.entry().0)));
        assert_eq!(got, last);
    }

    /// A list hands out one writer, and an insert by another list's writer is refused with
    /// nothing changed (the writer's position hints belong to its own list).
    #[test]
    fn a_list_has_one_writer_and_refuses_another_lists() {
        let a = SkipList::new();
        let b = SkipList::new();
        let mut wa = a.take_writer().expect("first writer");
        assert!(a.take_writer().is_none());
        assert_eq!(
            a.insert_with(&mut wa, ikey(b"k", 1), Bytes::new(), || ()),
            Ok(())
        );
        let mut called = false;
        let refused = b.insert_with(&mut wa, ikey(b"k", 2), Bytes::new(), || called = true);
        assert_eq!(refused, Err(Refused::NotItsWriter));
        assert!(!called);
        assert_eq!((a.len(), b.len()), (1, 0));
        assert!(b.front().is_none());
        // `b`'s own writer is still there, and starts at its first node.
        let mut wb = b.take_writer().expect("b's writer");
        assert_eq!(
            b.insert_with(&mut wb, ikey(b"j", 3), Bytes::new(), || ()),
            Ok(())
        );
        assert_eq!(collect(&b), vec![(b"j".to_vec(), 3)]);
        assert_eq!(collect(&a), vec![(b"k".to_vec(), 1)]);
    }

    #[test]
    fn empty_list_has_no_entries_and_no_bounds() {
        let list = SkipList::new();
        let probe = KeyRef::new(b"k", crate::key::lookup_trailer(5));
        assert_eq!(list.len(), 0);
        assert!(list.front().is_none());
        assert!(list.back().is_none());
        assert!(list.lower_bound(&probe, true).is_none());
        assert!(list.upper_bound(&probe, true).is_none());
        assert_eq!(list.allocated_bytes(), 0);
    }

    #[test]
    fn readers_during_inserts_see_sorted_complete_prefixes() {
        let list = Arc::new(SkipList::new());
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (list, done) = (list.clone(), done.clone());
                std::thread::spawn(move || {
                    let mut rounds = 0u64;
                    while !done.load(AtomicOrdering::Acquire) || rounds < 3 {
                        let len_before = list.len();
                        let seen = collect(&list);
                        assert!(
                            seen.len() >= len_before,
                            "an acknowledged insert went missing"
                        );
                        assert!(seen.windows(2).all(|w| (&w[0].0, std::cmp::Reverse(w[0].1))
                            < (&w[1].0, std::cmp::Reverse(w[1].1))));
                        for (user, seq) in seen.iter().step_by(97) {
                            let probe = KeyRef::new(user, crate::key::lookup_trailer(*seq));
                            let c = list.lower_bound(&probe, true).expect("present");
                            assert_eq!(
                                (c.entry().0.user_key.as_ref(), seq_of(&c.entry().0)),
                                (&user[..], *seq)
                            );
                        }
                        rounds += 1;
                    }
                })
            })
            .collect();
        // Fewer under Miri (`cargo +nightly miri test --lib memtable::skiplist::tests::readers`),
        // which checks the readers' and the writer's accesses for data races.
        let n = if cfg!(miri) { 300 } else { 30_000u64 };
        for seq in 1..=n {
            let user = (seq.wrapping_mul(0x9e37_79b9_7f4a_7c15)).to_be_bytes();
            assert!(list.insert(ikey(&user, seq), Bytes::new()));
        }
        done.store(true, AtomicOrdering::Release);
        for r in readers {
            r.join().unwrap();
        }
        assert_eq!(collect(&list).len() as u64, n);
    }

    /// A list of `n` entries inserted in a hashed order.
    fn hashed(n: u64, salt: u64) -> SkipList {
        let list = SkipList::new();
        for seq in 1..=n {
            let user = (seq.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ salt).to_be_bytes();
            assert!(list.insert(ikey(&user, seq), Bytes::new()));
        }
        list
    }

    /// Grown in shares (as `Memtable::grow_ahead` does, a step at a time), a list has arrays
    /// for about that share of the model's entries, and once the whole share is grown, the
    /// model's arrays.
    #[test]
    fn grown_by_shares_a_list_ends_with_the_models_arrays() {
        let like = hashed(50_000, 0);
        let list = SkipList::new();
        list.grow_scaled(&like, (1, 8), usize::MAX);
        let eighth = list.allocated_bytes();
        // 6,250 entries: their arrays, well short of a quarter of the model's (doubling
        // arrays overshoot by at most twice).
        assert!(eighth >= 6_250 * (16 + 88), "{eighth}");
        assert!(eighth * 4 < like.allocated_bytes(), "{eighth}");
        list.grow_scaled(&like, (4, 8), usize::MAX);
        assert!(list.allocated_bytes() > eighth);
        list.grow_scaled(&like, (8, 8), usize::MAX);
        assert_eq!(list.allocated_bytes(), like.allocated_bytes());
        // Twice the model (a list growing ahead of itself) is more.
        let twice = SkipList::new();
        twice.grow_scaled(&like, (2, 1), usize::MAX);
        assert!(twice.allocated_bytes() > like.allocated_bytes());
    }

    #[test]
    fn grown_like_another_list_the_same_inserts_allocate_nothing_more() {
        // 50,000 entries: eight doubling arrays of entries, nine of nodes, and towers.
        let like = hashed(50_000, 0);
        let list = SkipList::new();
        list.grow_like(&like, usize::MAX);
        // The same arrays as `like` (the heights come from the same seed), made before any
        // insert.
        assert_eq!(list.allocated_bytes(), like.allocated_bytes());
        assert!(list.allocated_bytes() >= 50_000 * (16 + 88));
        for seq in 1..=50_000u64 {
            let user = (seq.wrapping_mul(0x9e37_79b9_7f4a_7c15)).to_be_bytes();
            assert!(list.insert(ikey(&user, seq), Bytes::new()));
        }
        assert_eq!(list.allocated_bytes(), like.allocated_bytes());
        // Growing again, or like an empty list, allocates nothing.
        list.grow_like(&like, usize::MAX);
        assert_eq!(list.allocated_bytes(), like.allocated_bytes());
        let empty = SkipList::new();
        empty.grow_like(&SkipList::new(), usize::MAX);
        assert_eq!(empty.allocated_bytes(), 0);
        list.assert_levels_sorted();
        assert_eq!(collect(&list).len(), 50_000);
        // Past the doubling entry arrays: the fixed ones are made ahead too.
        let big = hashed(u64::from(DOUBLING_SLOTS) + 2 * u64::from(FIXED_LEN), 1);
        let list = SkipList::new();
        list.grow_like(&big, usize::MAX);
        assert_eq!(
            list.entries.allocated_bytes(),
            big.entries.allocated_bytes()
        );
        let made = |d: &[Array<EntrySlot>], k: usize| d[k].get().is_some();
        let fixed = list
            .entries
            .fixed
            .get()
            .expect("the fixed arrays' directory");
        assert!(made(fixed, 0) && made(fixed, 1) && !made(fixed, 2));
    }

    #[test]
    fn grown_like_a_larger_list_up_to_a_cap_gets_the_arrays_of_that_many_entries() {
        let like = hashed(50_000, 0);
        let small = hashed(10_000, 0);
        let list = SkipList::new();
        list.grow_like(&like, 10_000);
        assert_eq!(list.nodes.allocated_bytes(), small.nodes.allocated_bytes());
        assert_eq!(
            list.entries.allocated_bytes(),
            small.entries.allocated_bytes()
        );
        // The towers in proportion: a fifth of `like`'s slots, so not its last array.
        assert!(list.towers.allocated_bytes() < like.towers.allocated_bytes());
        assert!(list.towers.allocated_bytes() > 0);
        // No cap past a full list's entries.
        let none = SkipList::new();
        none.grow_like(&SkipList::new(), 10_000);
        assert_eq!(none.allocated_bytes(), 0);
    }

    #[test]
    fn growing_like_another_list_while_the_writer_inserts_loses_nothing() {
        let like = hashed(120_000, 9);
        let like = Arc::new(like);
        for round in 0..4u64 {
            let list = Arc::new(SkipList::new());
            let start = Arc::new(std::sync::Barrier::new(2));
            let grower = {
                let (list, like, start) = (list.clone(), like.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    list.grow_like(&like, usize::MAX);
                })
            };
            start.wait();
            let mut model = Model::new();
            for seq in 1..=120_000u64 {
                let user = (seq.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ round).to_be_bytes();
                assert!(list.insert(ikey(&user, seq), Bytes::new()));
                model.insert((user.to_vec(), std::cmp::Reverse(seq)), seq);
            }
            grower.join().unwrap();
            let want: Vec<(Vec<u8>, u64)> = model.keys().map(|(u, s)| (u.clone(), s.0)).collect();
            assert_eq!(collect(&list), want);
            list.assert_levels_sorted();
            // Every array the grower was asked for exists, whoever made it (what growing
            // makes is the test above's; this one is about the race).
            assert!(list.allocated_bytes() >= like.allocated_bytes());
        }
    }

    #[test]
    fn a_bound_never_returns_an_entry_inserted_after_the_search_passed_it() {
        // Every insert lands right where the reader's search stops: after everything before
        // the probe, before the entry the probe looks for.
        let list = Arc::new(SkipList::new());
        list.insert(ikey(b"k", 1), Bytes::new());
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let reader = {
            let (list, done) = (list.clone(), done.clone());
            std::thread::spawn(move || {
                let probe = KeyRef::new(b"k", crate::key::lookup_trailer(1));
                let mut checks = 0u64;
                while !done.load(AtomicOrdering::Acquire) {
                    let c = list.lower_bound(&probe, true).expect("k is there");
                    assert_eq!(&c.entry().0.user_key[..], b"k", "a bound before the probe");
                    checks += 1;
                }
                checks
            })
        };
        for seq in 2..300_000u64 {
            let mut user = b"j".to_vec();
            user.extend_from_slice(&seq.to_be_bytes());
            list.insert(ikey(&user, seq), Bytes::new());
        }
        done.store(true, AtomicOrdering::Release);
        assert!(reader.join().unwrap() > 0);
    }

    #[test]
    fn ascending_runs_with_dips_stay_sorted_and_searchable() {
        // Mostly appends (which skip the search), now and then a key below the last.
        let list = SkipList::new();
        let mut model = Model::new();
        let mut rng = 99u64;
        for seq in 1..=20_000u64 {
            lcg(&mut rng);
            let n = if (rng >> 60) == 0 {
                (rng >> 20) % seq
            } else {
                seq
            };
            let user = n.to_be_bytes().to_vec();
            assert!(list.insert(ikey(&user, seq), Bytes::new()));
            model.insert((user, std::cmp::Reverse(seq)), seq);
        }
        let want: Vec<(Vec<u8>, u64)> = model.keys().map(|(u, s)| (u.clone(), s.0)).collect();
        assert_eq!(collect(&list), want);
        list.assert_levels_sorted();
        for ((user, seq), _) in model.iter().step_by(37) {
            let probe = KeyRef::new(user, crate::key::lookup_trailer(seq.0));
            let c = list.lower_bound(&probe, true).expect("present");
            assert_eq!(
                (&c.entry().0.user_key[..], seq_of(&c.entry().0)),
                (&user[..], seq.0)
            );
            let before = model
                .range(..(user.clone(), *seq))
                .next_back()
                .map(|(k, _)| (k.0.clone(), k.1 .0));
            let got = list
                .upper_bound(&probe, false)
                .map(|c| (c.entry().0.user_key.to_vec(), seq_of(&c.entry().0)));
            assert_eq!(got, before);
        }
        assert_eq!(
            list.back().map(|c| c.entry().0.user_key.to_vec()),
            model.keys().next_back().map(|k| k.0.clone())
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn any_insert_order_iterates_sorted(users in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..12), 1..300)) {
            let list = SkipList::new();
            let mut model = Model::new();
            for (i, u) in users.iter().enumerate() {
                let seq = i as u64 + 1;
                list.insert(ikey(u, seq), Bytes::new());
                model.insert((u.clone(), std::cmp::Reverse(seq)), seq);
            }
            let want: Vec<(Vec<u8>, u64)> = model.keys().map(|(u, s)| (u.clone(), s.0)).collect();
            prop_assert_eq!(collect(&list), want);
            list.assert_levels_sorted();
        }
    }
}
