//! The point get: memtables newest first, then L0 newest first, then one candidate table per
//! deeper level, asking each table's in-memory filter before touching its file.
//!
//! Range tombstones: every holder (memtable or table) that has some is asked first, in
//! memory, for the newest visible tombstone covering the key. A filter says nothing about
//! them, so a table's "definitely not" does not end the question: if the table's tombstone
//! covers the key, the key is deleted for this read whatever older tables hold (a version
//! older than a tombstone lives in the same holder or a later one, never an earlier one). A
//! version found in the same holder wins only if it is newer than the tombstone. A holder
//! without range tombstones costs one `None` check.
//!
//! The read state is pinned with a cheap `arc-swap` guard while the get only looks at memory
//! (memtables, key ranges, filters). Before the first file read the guard is upgraded to an
//! owned `Arc`, so no guard is held across I/O: a thread holding guards for long makes other
//! loads take `arc-swap`'s slow path.

use super::{ReadPath, ReadState};
use crate::batch::check_sizes;
use crate::error::{Error, Result};
use crate::filter::{hash_key, Filter};
use crate::key::SeqNo;
use crate::memtable::Lookup;
use crate::sstable::{ReadCost, TableLookup};
use crate::stats::{GetCounters, ReadTrace, TableOutcome, TableVisit};
use crate::version::{TableHandle, NUM_LEVELS};
use arc_swap::Guard;
use bytes::Bytes;
use std::sync::Arc;

/// The read state a get holds: a guard while it reads memory, an `Arc` once it reads files.
enum Pinned {
    Guard(Guard<Arc<ReadState>>),
    Owned(Arc<ReadState>),
}

impl Pinned {
    fn state(&self) -> &ReadState {
        match self {
            Pinned::Guard(g) => g,
            Pinned::Owned(a) => a,
        }
    }

    /// Trades the guard for an owned `Arc` of the same state (once), before a file read.
    fn own(&mut self) {
        if let Pinned::Guard(g) = self {
            let owned = Arc::clone(&**g);
            *self = Pinned::Owned(owned);
        }
    }
}

/// What a table's key range, range tombstones and filter say about a key, before any file
/// read.
enum Probe {
    /// The table cannot hold the key (range or filter) and no tombstone of it covers the key:
    /// go on.
    Skip,
    /// The filter says the table holds no version of the key, and one of its range
    /// tombstones covers it: the key is deleted.
    Covered,
    /// The table may hold the key: read it.
    Read(Read),
}

impl ReadPath {
    /// [`get`](Self::get) with a trace of what it did per table, refused once the database
    /// is closed: the read behind `Db::get_traced` and `Snapshot::get_traced`.
    pub(crate) fn get_traced(
        &self,
        key: &[u8],
        seq: Option<SeqNo>,
    ) -> Result<(Option<Bytes>, ReadTrace)> {
        self.check_open()?;
        let mut trace = ReadTrace::default();
        let v = self.get(key, seq, Some(&mut trace))?;
        Ok((v, trace))
    }

    /// The point read behind every get: at `seq` (a snapshot), or at the latest write.
    pub(crate) fn get(
        &self,
        key: &[u8],
        seq: Option<SeqNo>,
        mut trace: Option<&mut ReadTrace>,
    ) -> Result<Option<Bytes>> {
        // A key over `MAX_KEY_SIZE` cannot be stored: a wrong argument, as it is for a write,
        // and no get (it would lower every per-get mean).
        if let Err(why) = check_sizes(key, &[]) {
            return Err(Error::InvalidArgument(why));
        }
        let mut pinned = Pinned::Guard(self.state.load());
        let seq = seq.unwrap_or_else(|| self.visible_seq());
        let mut g = GetCounters::default();
        let res = get_in(&mut pinned, key, seq, &mut g, trace.as_deref_mut());
        self.counters.record_get(&g);
        if let Some(t) = trace {
            t.data_block_reads = g.data_block_reads;
            t.block_cache_hits = g.block_cache_hits;
            t.bytes_read = g.bytes_read;
            t.memtable_hit = g.memtable_hit;
            t.range_tombstone_checks = g.range_tombstone_checks;
            t.range_covered = g.range_covered;
        }
        res
    }
}

/// The key a get looks for, its filter hash, and the sequence number it reads at.
struct Wanted<'k> {
    key: &'k [u8],
    hash: u64,
    seq: SeqNo,
}

fn get_in(
    pinned: &mut Pinned,
    key: &[u8],
    seq: SeqNo,
    g: &mut GetCounters,
    mut trace: Option<&mut ReadTrace>,
) -> Result<Option<Bytes>> {
    let rs = pinned.state();
    let hash = hash_key(key);
    for mem in std::iter::once(&rs.mem).chain(rs.imms.iter()) {
        if let Some(t) = trace.as_deref_mut() {
            t.memtables_searched += 1;
        }
        let covered = match mem.range_tombstones() {
            Some(rd) => {
                g.range_tombstone_checks += 1;
                rd.covering_seq(key, seq)
            }
            None => 0,
        };
        match mem.get_hashed(key, hash, seq) {
            Lookup::Value(v, s) if s > covered => {
                g.memtable_hit = true;
                return Ok(Some(v));
            }
            Lookup::Deleted(s) if s > covered => {
                g.memtable_hit = true;
                return Ok(None);
            }
            Lookup::Value(..) | Lookup::Deleted(_) => {
                g.memtable_hit = true;
                g.range_covered = true;
                return Ok(None);
            }
            Lookup::Newer => {}
            Lookup::Absent => g.memtable_filter_false_positives += 1,
            Lookup::Filtered => g.memtable_filter_negatives += 1,
        }
        if covered > 0 {
            // Answered by this memtable's range tombstone alone.
            g.memtable_hit = true;
            g.range_covered = true;
            return Ok(None);
        }
    }
    let w = Wanted { key, hash, seq };
    let l0 = rs.version.levels[0].len();
    for i in 0..l0 {
        if let Some(found) = ask(pinned, (0, i), &w, g, trace.as_deref_mut())? {
            return Ok(found);
        }
    }
    for level in 1..NUM_LEVELS {
        let Some(i) = pinned.state().version.candidate_index(level, key) else {
            continue;
        };
        if let Some(found) = ask(pinned, (level, i), &w, g, trace.as_deref_mut())? {
            return Ok(found);
        }
    }
    Ok(None)
}

/// Asks table `i` of `level`: its range and filter in memory, then, if they say "maybe", its
/// file (after trading the guard for an `Arc`). `Some(answer)` ends the get.
fn ask(
    pinned: &mut Pinned,
    (level, i): (usize, usize),
    w: &Wanted<'_>,
    g: &mut GetCounters,
    mut trace: Option<&mut ReadTrace>,
) -> Result<Option<Option<Bytes>>> {
    // A table whose open failed when the database opened is opened by the probe, which
    // reads its file: that I/O is not done under the guard either.
    if !pinned.state().version.levels[level][i].is_open() {
        pinned.own();
    }
    let t = &pinned.state().version.levels[level][i];
    let read = match probe(t, level, w, g, trace.as_deref_mut())? {
        Probe::Skip => return Ok(None),
        Probe::Covered => return Ok(Some(None)),
        Probe::Read(read) => read,
    };
    // A block in the cache is read under the guard: no file, no shared reference count.
    let mut cost = ReadCost::default();
    if let Some(found) = t.reader()?.get_cached(w.key, w.seq, &mut cost) {
        return answer(t, read, found, cost, g, trace);
    }
    pinned.own();
    let t = &pinned.state().version.levels[level][i];
    read_table(t, read, w, g, trace)
}

/// A table read under way: where, whether a filter said "maybe", and the sequence number of
/// the table's newest visible tombstone over the key (0: none), which a version found must be
/// newer than.
#[derive(Clone, Copy)]
struct Read {
    level: usize,
    filtered: bool,
    covered: SeqNo,
    /// Bytes the get read to open the table (counted already; the trace's visit shows them).
    open_bytes: u64,
}

fn visit(
    trace: Option<&mut ReadTrace>,
    t: &TableHandle,
    level: usize,
    outcome: TableOutcome,
    cost: ReadCost,
) {
    if let Some(tr) = trace {
        tr.tables.push(TableVisit {
            level,
            table_id: t.number(),
            outcome,
            block_reads: cost.blocks,
            block_cache_hits: cost.cache_hits,
            bytes_read: cost.bytes,
        });
    }
}

/// Asks a table's key range and filter, in memory.
#[inline]
fn probe(
    t: &TableHandle,
    level: usize,
    w: &Wanted<'_>,
    g: &mut GetCounters,
    trace: Option<&mut ReadTrace>,
) -> Result<Probe> {
    if w.key < t.meta.smallest_user() || w.key > t.meta.largest_user() || t.meta.min_seq > w.seq {
        visit(
            trace,
            t,
            level,
            TableOutcome::OutOfRange,
            ReadCost::default(),
        );
        return Ok(Probe::Skip);
    }
    g.tables_considered += 1;
    // A table whose open failed when the database opened is opened here: the get read it.
    let (reader, open_bytes) = t.reader_opening()?;
    g.bytes_read += open_bytes;
    let opening = ReadCost {
        bytes: open_bytes,
        ..ReadCost::default()
    };
    let covered = match reader.range_dels() {
        Some(rd) => {
            g.range_tombstone_checks += 1;
            rd.covering_seq(w.key, w.seq)
        }
        None => 0,
    };
    // A filter of a kind this build does not know is no filter: the table is read, and no
    // probe or verdict is counted for it.
    match reader.filter().filter(|f| !matches!(f, Filter::Unknown(_))) {
        Some(f) => {
            g.filter_probes += 1;
            if f.may_contain_hash(w.hash) {
                Ok(Probe::Read(Read {
                    level,
                    filtered: true,
                    covered,
                    open_bytes,
                }))
            } else {
                g.filter_negatives += 1;
                let outcome = if covered > 0 {
                    g.range_covered = true;
                    TableOutcome::RangeDeleted
                } else {
                    TableOutcome::FilterNegative
                };
                visit(trace, t, level, outcome, opening);
                Ok(if covered > 0 {
                    Probe::Covered
                } else {
                    Probe::Skip
                })
            }
        }
        None => Ok(Probe::Read(Read {
            level,
            filtered: false,
            covered,
            open_bytes,
        })),
    }
}

/// Reads a table that may hold the key. `Some(answer)` ends the get; `None` goes on to the
/// next table.
fn read_table(
    t: &TableHandle,
    read: Read,
    w: &Wanted<'_>,
    g: &mut GetCounters,
    trace: Option<&mut ReadTrace>,
) -> Result<Option<Option<Bytes>>> {
    let reader = t.reader()?;
    let mut cost = ReadCost::default();
    let found = reader.get(w.key, w.seq, &mut cost);
    answer(t, read, found, cost, g, trace)
}

/// Counts what a table read cost and turns its lookup into the get's answer.
fn answer(
    t: &TableHandle,
    read: Read,
    found: Result<TableLookup>,
    cost: ReadCost,
    g: &mut GetCounters,
    trace: Option<&mut ReadTrace>,
) -> Result<Option<Option<Bytes>>> {
    let Read {
        level,
        filtered,
        covered,
        open_bytes,
    } = read;
    g.data_block_reads += cost.blocks;
    g.bytes_read += cost.bytes;
    g.block_cache_hits += cost.cache_hits;
    g.block_cache_misses += cost.cache_misses;
    let found = found?;
    // What the filter's "maybe" was worth: the table held a version of the key, or not.
    let held = !matches!(found, TableLookup::Absent);
    g.filter_true_positives += u64::from(filtered && held);
    g.filter_false_positives += u64::from(filtered && !held);
    let (outcome, result) = match found {
        TableLookup::Value(v, s) if s > covered => (TableOutcome::Found, Some(Some(v))),
        TableLookup::Deleted(s) if s > covered => (TableOutcome::Tombstone, Some(None)),
        TableLookup::Absent if covered == 0 && filtered => (TableOutcome::FalsePositive, None),
        TableLookup::Absent if covered == 0 => (TableOutcome::NotFound, None),
        TableLookup::Newer if covered == 0 => (TableOutcome::NewerOnly, None),
        // A version older than the table's own tombstone, or none: the tombstone answers.
        _ => (TableOutcome::RangeDeleted, Some(None)),
    };
    g.range_covered |= outcome == TableOutcome::RangeDeleted;
    let cost = ReadCost {
        bytes: cost.bytes + open_bytes,
        ..cost
    };
    visit(trace, t, level, outcome, cost);
    Ok(result)
}
