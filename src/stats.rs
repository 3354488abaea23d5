//! Read-amplification accounting: [`Stats`] (cumulative, exact) and [`ReadTrace`] (one get).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Cumulative counters of a database since it was opened. Every field is exact: each get adds
/// what it did, nothing is sampled.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct Stats {
    /// Point reads (`get`, `contains_key`, `get_traced`, snapshot gets); a get refused for
    /// its key ([`Error::InvalidArgument`](crate::Error::InvalidArgument)) is not one.
    pub gets: u64,
    /// Gets answered by a memtable: by a version there, or by its range tombstone alone.
    pub memtable_hits: u64,
    /// Memtables skipped because their filter said "definitely not" (no skiplist walk).
    pub memtable_filter_negatives: u64,
    /// Memtables whose filter said "maybe" that did not hold the key. A memtable that held
    /// only versions newer than the read (a snapshot's get) is not counted: its filter was
    /// right. (A get racing the insert of a newer version of its key can count one here:
    /// the insert sets the filter's bits before it links the entry the get's search passes.)
    pub memtable_filter_false_positives: u64,
    /// Bytes of the memtables' filters now (active and sealed memtables).
    pub memtable_filter_bytes: u64,
    /// Range-tombstone lookups by gets: one per memtable or table with range tombstones
    /// whose tombstones a get asked (a binary search in memory, no I/O). Memtables and tables
    /// without range tombstones add nothing.
    pub range_tombstone_checks: u64,
    /// Gets answered "not found" because a range tombstone covers the key.
    pub range_tombstone_covered: u64,
    /// Tables whose key range held the key, over all gets (not those whose every entry is
    /// newer than the read: [`TableOutcome::OutOfRange`]).
    pub tables_considered: u64,
    /// Filter checks (tables considered that have a filter this build can use; a filter of
    /// an unknown kind is not one: its table is read as if it had none).
    pub filter_probes: u64,
    /// Tables skipped because their filter said "definitely not" (no block read; see
    /// [`bytes_read`](Self::bytes_read) for a table a get had to open first).
    pub filter_negatives: u64,
    /// Filter said "maybe" and the table did not hold the key. A data block was read, unless
    /// the table's index showed the key is past its last entry (a table whose key range a
    /// range tombstone extends past its last key: see `docs/format.md` §5.7).
    pub filter_false_positives: u64,
    /// Filter said "maybe" and the table held the key: a value or a tombstone, visible to
    /// the read or newer than it (a snapshot's get, [`TableOutcome::NewerOnly`]).
    pub filter_true_positives: u64,
    /// Data blocks gets needed, whether the block cache or a file supplied them.
    pub data_block_reads: u64,
    /// Bytes gets read from table files (block contents and trailers); blocks the cache
    /// supplied count nothing here. A get that had to open a table (one whose open failed
    /// when the database opened) also counts the footer and blocks that open read.
    pub bytes_read: u64,
    /// Data blocks gets found in the block cache.
    pub block_cache_hits: u64,
    /// Data blocks gets looked for in the block cache and read from a file.
    pub block_cache_misses: u64,
    /// Table files opened (first opens and reopens after the table cache closed them).
    pub table_opens: u64,
    /// Table files open now (at most `max_open_files`).
    pub open_files: u64,
    /// Bytes of keys and values written by users (inserts, removes, batches), and those of
    /// the writes an open recovered from the WAL into tables (which `flushes` and
    /// `bytes_flushed` count), so that [`write_amplification`](Self::write_amplification)
    /// of a reopened handle relates the tables it wrote to the writes behind them.
    pub user_bytes_written: u64,
    /// Memtables flushed to L0 tables, and the L0 tables an open wrote from the WAL.
    pub flushes: u64,
    /// Bytes of L0 tables written by flushes (an open's replay included).
    pub bytes_flushed: u64,
    /// Compactions run (trivial moves included).
    pub compactions: u64,
    /// Compactions that moved a table down a level without rewriting it.
    pub trivial_moves: u64,
    /// Compaction input tables dropped without being read, because a range tombstone that
    /// every reader sees covered all of them (RocksDB's "delete files in range").
    pub tables_dropped_unread: u64,
    /// Bytes of input tables read by compactions.
    pub bytes_compacted_read: u64,
    /// Bytes of output tables written by compactions.
    pub bytes_compacted_written: u64,
    /// Flushes or compactions that failed (their inputs were kept).
    pub background_errors: u64,
    /// Writes delayed because L0 reached `l0_slowdown_trigger`.
    pub write_slowdowns: u64,
    /// Times a write group stopped (however long it waited, counted once) because L0 reached
    /// `l0_stop_trigger` or too many memtables waited for flush.
    pub write_stops: u64,
    /// Microseconds write groups spent waiting in slowdowns and stops (the leader's wait; the
    /// writers queued behind it wait as long).
    pub write_stall_micros: u64,
    /// Write groups committed: each is one WAL record holding one or more writers' batches.
    pub write_groups: u64,
    /// Fsyncs of the WAL done for writes that asked for one (one per group, however many of
    /// its writes asked) and for [`Db::sync`](crate::Db::sync).
    pub wal_syncs: u64,
    /// Microseconds spent in the fsyncs [`wal_syncs`](Self::wal_syncs) counts (summed; the
    /// fsyncs never overlap, so `wal_sync_micros / wal_syncs` is the mean fsync time).
    pub wal_sync_micros: u64,
    /// Torn WAL tails cut off when the database was opened.
    pub wal_torn_tails: u64,
    /// Bytes of those torn tails.
    pub wal_torn_bytes: u64,
    /// Tables that could not be opened (reads that need them fail).
    pub broken_tables: u64,
    /// Obsolete files (compacted tables, flushed WALs) whose deletion failed: each stays on
    /// disk, not counted by [`Db::disk_size`](crate::Db::disk_size), until the next open
    /// removes it. 0 normally; above 0, the file system refused an `unlink`.
    pub obsolete_delete_failures: u64,
    /// Bytes of memory the filters of the current tree pin (every table's filter is kept in
    /// memory while the table is live).
    pub filter_memory_bytes: u64,
    /// Bytes of memory the indexes of the current tree pin (every table's index is kept in
    /// memory while the table is live).
    pub index_memory_bytes: u64,
    /// Bytes of memory the memtables hold: the active one and those waiting for flush. Counted
    /// as allocated, not estimated: the 64 KiB chunks their writes' encodings are copied into
    /// (keys and values with their batch framing; the last chunk whole), writes too large for
    /// a chunk, the skiplist index arrays (with the slots and chunks the flush thread made
    /// ahead of the writer that no write has used yet), their filters (which
    /// `memtable_filter_bytes` also counts on their own) and their range tombstones. This is
    /// more than the bytes that [`Options::memtable_size`](crate::Options::memtable_size)
    /// measures a memtable's fill by: with 16-byte keys and 100-byte values, ~270 bytes an
    /// entry (~130 of encoding, ~105-135 of index) against the 188 it counts, so a full
    /// 24 MiB memtable holds ~34 MiB. A flushed memtable's chunks go back to the allocator
    /// once no reader holds one of its values.
    pub memtable_memory_bytes: u64,
    /// Bytes of data blocks the block cache holds now (at most its capacity). A cache shared
    /// by several databases ([`Options::block_cache`](crate::Options::block_cache)) is counted
    /// whole by each of them; 0 with the cache off.
    pub block_cache_bytes: u64,
    /// Tables that were to get a binary fuse or Ribbon filter and got a Bloom filter of the
    /// same size instead, because no seed of `FUSE_MAX_ATTEMPTS` (`RIBBON_MAX_ATTEMPTS`)
    /// built it (expected: never in practice). A flush or compaction never fails because of
    /// its filter. (A table too small for a Ribbon filter gets Bloom by design, not counted.)
    pub filter_fuse_fallbacks: u64,
    /// Per-level shape of the tree now.
    pub levels: Vec<LevelStats>,
}

impl Stats {
    /// Bytes written to tables (flushes and compactions) per user byte written; 0 before any
    /// write.
    pub fn write_amplification(&self) -> f64 {
        if self.user_bytes_written == 0 {
            return 0.0;
        }
        (self.bytes_flushed as f64 + self.bytes_compacted_written as f64)
            / self.user_bytes_written as f64
    }

    /// Bytes of memory the database pins: filters, indexes, memtables and block cache.
    pub fn memory_bytes(&self) -> u64 {
        // Saturating: the fields are public, any values may be put in them.
        self.filter_memory_bytes
            .saturating_add(self.index_memory_bytes)
            .saturating_add(self.memtable_memory_bytes)
            .saturating_add(self.block_cache_bytes)
    }

    /// Data blocks gets needed per get, whether the block cache or a file supplied them
    /// ([`data_block_reads`](Self::data_block_reads) over [`gets`](Self::gets)); 0 before any
    /// get.
    pub fn data_blocks_per_get(&self) -> f64 {
        if self.gets == 0 {
            0.0
        } else {
            self.data_block_reads as f64 / self.gets as f64
        }
    }

    /// Measured filter false-positive rate: false positives over probes of tables that did not
    /// hold the key.
    pub fn measured_fpr(&self) -> f64 {
        let absent = self.filter_false_positives as f64 + self.filter_negatives as f64;
        if absent == 0.0 {
            0.0
        } else {
            self.filter_false_positives as f64 / absent
        }
    }
}

/// One level of the tree.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct LevelStats {
    /// Level number (0 = L0).
    pub level: usize,
    /// Tables in the level.
    pub tables: usize,
    /// Bytes of those tables.
    pub bytes: u64,
    /// Entries (versions and tombstones) in the level.
    pub entries: u64,
    /// Distinct user keys per table, summed (what the filters are built over).
    pub filter_keys: u64,
    /// Bytes of filters of the level held in memory.
    pub filter_bytes: u64,
    /// Filter bits per key of the level (`8 * filter_bytes / filter_keys`).
    pub bits_per_key: f64,
    /// The kind of the level's filters: "bloom", "fuse4" to "fuse16" (the fingerprint
    /// width), "ribbon", "none", or "mixed" when its tables differ (a policy change, a hybrid
    /// policy's choice per table, or a level between two compactions); "" for a level without
    /// tables, or whose tables' filters are all empty or could not be read.
    pub filter_kind: String,
    /// The false-positive rate an absent key meets in this level, from the filters' own
    /// parameters (for L0, the sum over its tables, since a get probes each).
    pub expected_fpr: f64,
}

/// One table of the tree, as [`Db::tables`](crate::Db::tables) lists it.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct TableInfo {
    /// Level of the table.
    pub level: usize,
    /// Table file number (`NNNNNN.sst`).
    pub table_id: u64,
    /// File size.
    pub bytes: u64,
    /// Entries (versions and tombstones, range tombstones included).
    pub entries: u64,
    /// Range tombstones among them (one per fragment and sequence number).
    pub range_deletions: u64,
    /// Smallest user key (a range tombstone's start counts).
    pub smallest: Vec<u8>,
    /// Largest user key (a range tombstone's end counts; see `docs/format.md` §5.7).
    pub largest: Vec<u8>,
    /// Bytes of filter held in memory (0: no filter).
    pub filter_bytes: u64,
    /// Filter bits per key (0: no filter).
    pub filter_bits_per_key: f64,
    /// The filter's kind: "bloom", "fuse4" to "fuse16" (the fingerprint width), "ribbon",
    /// "empty", "unknown" or "none".
    pub filter_kind: String,
    /// The filter's false-positive rate from its (m, n, k); 1 without a filter.
    pub predicted_fpr: f64,
}

/// What one get did to one table. `#[non_exhaustive]`: a new kind of table (or of
/// tombstone) may add an outcome in a minor release, as range deletes added
/// [`TableOutcome::RangeDeleted`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TableOutcome {
    /// The key is outside the table's key range, or every entry of the table was written
    /// after the read (its smallest sequence number is above the read's: a snapshot's get):
    /// skipped with no I/O, not counted as considered.
    OutOfRange,
    /// The filter said "definitely not": no block read (the visit's `bytes_read` is 0 unless
    /// the get had to open the table first: see [`TableVisit::bytes_read`]).
    FilterNegative,
    /// The filter said "maybe" and the key was not there. A block was read, unless the
    /// table's index showed the key is past its last entry (only where a range tombstone
    /// extends the table's key range past its last key).
    FalsePositive,
    /// The table has no filter (or one of a kind this build cannot use) and the key was not
    /// there. A block was read, unless the table's index showed the key is past its last
    /// entry, as for [`FalsePositive`](Self::FalsePositive).
    NotFound,
    /// The table held a value for the key.
    Found,
    /// The table held a tombstone for the key.
    Tombstone,
    /// The table held versions of the key, all newer than the read (a snapshot's get, or a
    /// write that raced it): the get went on. A block was read, unless the index showed that
    /// the table's last entry is such a version. The filter's "maybe" counts as a true
    /// positive.
    NewerOnly,
    /// One of the table's range tombstones covers the key (newer than any version the table
    /// holds): the key is deleted. A block is read unless the filter said "definitely not"
    /// or the table's index showed the key is past its last entry.
    RangeDeleted,
}

/// One table touched by a get.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableVisit {
    /// Level of the table.
    pub level: usize,
    /// Table file number (`NNNNNN.sst`).
    pub table_id: u64,
    /// What happened.
    pub outcome: TableOutcome,
    /// Data blocks this get needed from this table (0 or 1), from the cache or the file.
    pub block_reads: u64,
    /// Of those, blocks the block cache supplied (no file read).
    pub block_cache_hits: u64,
    /// Bytes read from this table's file: the block, if one was read from the file, and, when
    /// this get opened the table (its open failed when the database opened), the footer and
    /// blocks that open read.
    pub bytes_read: u64,
}

/// What one get did, table by table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadTrace {
    /// Memtables the get asked (the active one and those waiting for flush), those whose
    /// filter ruled the key out without a search included.
    pub memtables_searched: usize,
    /// True if a memtable answered (with a value or a tombstone).
    pub memtable_hit: bool,
    /// Tables touched, in the order the get visited them.
    pub tables: Vec<TableVisit>,
    /// Data blocks needed in total (from the cache or files).
    pub data_block_reads: u64,
    /// Of those, blocks the block cache supplied.
    pub block_cache_hits: u64,
    /// Bytes read from files in total.
    pub bytes_read: u64,
    /// Memtables and tables whose range tombstones the get asked.
    pub range_tombstone_checks: u64,
    /// True if a range tombstone answered: the key is deleted by a range removal.
    pub range_covered: bool,
}

/// The counters of one get, added to the totals at its end.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct GetCounters {
    pub(crate) memtable_hit: bool,
    pub(crate) tables_considered: u64,
    pub(crate) filter_probes: u64,
    pub(crate) filter_negatives: u64,
    pub(crate) filter_false_positives: u64,
    pub(crate) filter_true_positives: u64,
    pub(crate) data_block_reads: u64,
    pub(crate) bytes_read: u64,
    pub(crate) block_cache_hits: u64,
    pub(crate) block_cache_misses: u64,
    pub(crate) memtable_filter_negatives: u64,
    pub(crate) memtable_filter_false_positives: u64,
    pub(crate) range_tombstone_checks: u64,
    pub(crate) range_covered: bool,
}

/// The per-get counters, one set per stripe: each thread adds to its own stripe (its own
/// cache lines), and `Stats` sums the stripes, so concurrent readers do not bounce one
/// counter's cache line between cores while every count stays exact.
#[derive(Debug, Default)]
#[repr(align(128))]
struct GetStripe {
    gets: AtomicU64,
    memtable_hits: AtomicU64,
    tables_considered: AtomicU64,
    filter_probes: AtomicU64,
    filter_negatives: AtomicU64,
    filter_false_positives: AtomicU64,
    filter_true_positives: AtomicU64,
    data_block_reads: AtomicU64,
    bytes_read: AtomicU64,
    block_cache_hits: AtomicU64,
    block_cache_misses: AtomicU64,
    memtable_filter_negatives: AtomicU64,
    memtable_filter_false_positives: AtomicU64,
    range_tombstone_checks: AtomicU64,
    range_tombstone_covered: AtomicU64,
}

/// Stripes of per-get counters.
const STRIPES: usize = 16;

/// The stripe of the calling thread: threads take stripes round robin as they first count.
fn stripe_index() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static INDEX: usize = NEXT.fetch_add(1, Ordering::Relaxed) % STRIPES;
    }
    INDEX.with(|i| *i)
}

/// Live atomic counters.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    get_stripes: [GetStripe; STRIPES],
    pub(crate) user_bytes_written: AtomicU64,
    pub(crate) flushes: AtomicU64,
    pub(crate) bytes_flushed: AtomicU64,
    pub(crate) compactions: AtomicU64,
    pub(crate) trivial_moves: AtomicU64,
    pub(crate) tables_dropped_unread: AtomicU64,
    pub(crate) bytes_compacted_read: AtomicU64,
    pub(crate) bytes_compacted_written: AtomicU64,
    pub(crate) background_errors: AtomicU64,
    pub(crate) write_slowdowns: AtomicU64,
    pub(crate) write_stops: AtomicU64,
    pub(crate) write_stall_micros: AtomicU64,
    pub(crate) write_groups: AtomicU64,
    pub(crate) wal_syncs: AtomicU64,
    pub(crate) wal_sync_micros: AtomicU64,
    pub(crate) wal_torn_tails: AtomicU64,
    pub(crate) wal_torn_bytes: AtomicU64,
}

fn add(c: &AtomicU64, v: u64) {
    if v != 0 {
        c.fetch_add(v, Ordering::Relaxed);
    }
}

impl Counters {
    pub(crate) fn add(c: &AtomicU64, v: u64) {
        add(c, v)
    }

    /// [`add`](Self::add) to a counter whose writers a lock orders (the caller holds it,
    /// and every other writer takes it too or runs before the database is shared): a load
    /// and a store rather than a locked read-modify-write, which the write path would pay
    /// once a write group.
    pub(crate) fn add_ordered(c: &AtomicU64, v: u64) {
        c.store(c.load(Ordering::Relaxed) + v, Ordering::Relaxed);
    }

    pub(crate) fn record_get(&self, g: &GetCounters) {
        let s = &self.get_stripes[stripe_index()];
        add(&s.gets, 1);
        add(&s.memtable_hits, u64::from(g.memtable_hit));
        add(&s.tables_considered, g.tables_considered);
        add(&s.filter_probes, g.filter_probes);
        add(&s.filter_negatives, g.filter_negatives);
        add(&s.filter_false_positives, g.filter_false_positives);
        add(&s.filter_true_positives, g.filter_true_positives);
        add(&s.data_block_reads, g.data_block_reads);
        add(&s.bytes_read, g.bytes_read);
        add(&s.block_cache_hits, g.block_cache_hits);
        add(&s.block_cache_misses, g.block_cache_misses);
        add(&s.memtable_filter_negatives, g.memtable_filter_negatives);
        add(
            &s.memtable_filter_false_positives,
            g.memtable_filter_false_positives,
        );
        if g.range_tombstone_checks > 0 {
            add(&s.range_tombstone_checks, g.range_tombstone_checks);
            add(&s.range_tombstone_covered, u64::from(g.range_covered));
        }
    }

    pub(crate) fn snapshot(&self) -> Stats {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let sum = |f: fn(&GetStripe) -> &AtomicU64| self.get_stripes.iter().map(|s| l(f(s))).sum();
        Stats {
            gets: sum(|s| &s.gets),
            memtable_hits: sum(|s| &s.memtable_hits),
            memtable_filter_negatives: sum(|s| &s.memtable_filter_negatives),
            memtable_filter_false_positives: sum(|s| &s.memtable_filter_false_positives),
            range_tombstone_checks: sum(|s| &s.range_tombstone_checks),
            range_tombstone_covered: sum(|s| &s.range_tombstone_covered),
            tables_considered: sum(|s| &s.tables_considered),
            filter_probes: sum(|s| &s.filter_probes),
            filter_negatives: sum(|s| &s.filter_negatives),
            filter_false_positives: sum(|s| &s.filter_false_positives),
            filter_true_positives: sum(|s| &s.filter_true_positives),
            data_block_reads: sum(|s| &s.data_block_reads),
            bytes_read: sum(|s| &s.bytes_read),
            block_cache_hits: sum(|s| &s.block_cache_hits),
            block_cache_misses: sum(|s| &s.block_cache_misses),
            table_opens: 0,
            open_files: 0,
            memtable_filter_bytes: 0,
            user_bytes_written: l(&self.user_bytes_written),
            flushes: l(&self.flushes),
            bytes_flushed: l(&self.bytes_flushed),
            compactions: l(&self.compactions),
            trivial_moves: l(&self.trivial_moves),
            tables_dropped_unread: l(&self.tables_dropped_unread),
            bytes_compacted_read: l(&self.bytes_compacted_read),
            bytes_compacted_written: l(&self.bytes_compacted_written),
            background_errors: l(&self.background_errors),
            write_slowdowns: l(&self.write_slowdowns),
            write_stops: l(&self.write_stops),
            write_stall_micros: l(&self.write_stall_micros),
            write_groups: l(&self.write_groups),
            wal_syncs: l(&self.wal_syncs),
            wal_sync_micros: l(&self.wal_sync_micros),
            wal_torn_tails: l(&self.wal_torn_tails),
            wal_torn_bytes: l(&self.wal_torn_bytes),
            broken_tables: 0,
            obsolete_delete_failures: 0,
            filter_memory_bytes: 0,
            index_memory_bytes: 0,
            memtable_memory_bytes: 0,
            block_cache_bytes: 0,
            filter_fuse_fallbacks: 0,
            levels: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_figures() {
        let s = Stats {
            gets: 4,
            data_block_reads: 2,
            filter_false_positives: 1,
            filter_negatives: 9,
            user_bytes_written: 100,
            bytes_flushed: 120,
            bytes_compacted_written: 280,
            ..Stats::default()
        };
        assert_eq!(s.data_blocks_per_get(), 0.5);
        assert_eq!(s.measured_fpr(), 0.1);
        assert_eq!(s.write_amplification(), 4.0);
        assert_eq!(Stats::default().write_amplification(), 0.0);
    }

    #[test]
    fn counters_accumulate() {
        let c = Counters::default();
        c.record_get(&GetCounters {
            tables_considered: 3,
            filter_negatives: 2,
            ..GetCounters::default()
        });
        c.record_get(&GetCounters::default());
        let s = c.snapshot();
        assert_eq!((s.gets, s.tables_considered, s.filter_negatives), (2, 3, 2));
    }

    #[test]
    fn striped_counts_from_many_threads_are_exact() {
        let c = std::sync::Arc::new(Counters::default());
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let c = c.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        c.record_get(&GetCounters {
                            data_block_reads: 1,
                            block_cache_hits: 1,
                            ..GetCounters::default()
                        });
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let s = c.snapshot();
        assert_eq!(
            (s.gets, s.data_block_reads, s.block_cache_hits),
            (8000, 8000, 8000)
        );
    }
}
