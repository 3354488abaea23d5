//! Read-amplification accounting: [`Stats`] (cumulative, exact) and [`ReadTrace`] (one get).

use std::sync::atomic::{AtomicU64, Ordering};

/// Cumulative counters of a database since it was opened. Every field is exact: each get adds
/// what it did, nothing is sampled.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct Stats {
    /// Point reads (`get`, `contains_key`, `get_traced`, snapshot gets).
    pub gets: u64,
    /// Gets answered by a memtable.
    pub memtable_hits: u64,
    /// Tables whose key range held the key, over all gets.
    pub tables_considered: u64,
    /// Filter checks (tables considered that have a filter).
    pub filter_probes: u64,
    /// Tables skipped because their filter said "definitely not" (zero I/O).
    pub filter_negatives: u64,
    /// Filter said "maybe", a data block was read, the table did not hold the key.
    pub filter_false_positives: u64,
    /// Filter said "maybe" and the table held the key (a value or a tombstone).
    pub filter_true_positives: u64,
    /// Data blocks read by gets.
    pub data_block_reads: u64,
    /// Bytes read from table files by gets (block contents and trailers).
    pub bytes_read: u64,
    /// Bytes of keys and values written by users (inserts, removes, batches).
    pub user_bytes_written: u64,
    /// Memtables flushed to L0 tables.
    pub flushes: u64,
    /// Bytes of L0 tables written by flushes.
    pub bytes_flushed: u64,
    /// Compactions run (trivial moves included).
    pub compactions: u64,
    /// Compactions that moved a table down a level without rewriting it.
    pub trivial_moves: u64,
    /// Bytes of input tables read by compactions.
    pub bytes_compacted_read: u64,
    /// Bytes of output tables written by compactions.
    pub bytes_compacted_written: u64,
    /// Flushes or compactions that failed (their inputs were kept).
    pub background_errors: u64,
    /// Writes delayed because L0 reached `l0_slowdown_trigger`.
    pub write_slowdowns: u64,
    /// Times a writer waited because L0 reached `l0_stop_trigger` or too many memtables
    /// waited for flush.
    pub write_stops: u64,
    /// Torn WAL tails cut off when the database was opened.
    pub wal_torn_tails: u64,
    /// Bytes of those torn tails.
    pub wal_torn_bytes: u64,
    /// Tables that could not be opened (reads that need them fail).
    pub broken_tables: u64,
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
        (self.bytes_flushed + self.bytes_compacted_written) as f64 / self.user_bytes_written as f64
    }

    /// Data blocks read per get.
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
        let absent = self.filter_false_positives + self.filter_negatives;
        if absent == 0 {
            0.0
        } else {
            self.filter_false_positives as f64 / absent as f64
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
    /// Entries (versions and tombstones).
    pub entries: u64,
    /// Smallest user key.
    pub smallest: Vec<u8>,
    /// Largest user key.
    pub largest: Vec<u8>,
    /// Bytes of filter held in memory (0: no filter).
    pub filter_bytes: u64,
    /// Filter bits per key (0: no filter).
    pub filter_bits_per_key: f64,
    /// The filter's false-positive rate from its (m, n, k); 1 without a filter.
    pub predicted_fpr: f64,
}

/// What one get did to one table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableOutcome {
    /// The key is outside the table's key range: not counted as considered.
    OutOfRange,
    /// The filter said "definitely not": no I/O.
    FilterNegative,
    /// The filter said "maybe", a block was read, the key was not there.
    FalsePositive,
    /// The table has no filter; a block was read and the key was not there.
    NotFound,
    /// The table held a value for the key.
    Found,
    /// The table held a tombstone for the key.
    Tombstone,
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
    /// Data blocks read from this table (0 or 1).
    pub block_reads: u64,
    /// Bytes read from this table.
    pub bytes_read: u64,
}

/// What one get did, table by table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadTrace {
    /// Memtables searched (the active one and those waiting for flush).
    pub memtables_searched: usize,
    /// True if a memtable answered (with a value or a tombstone).
    pub memtable_hit: bool,
    /// Tables touched, in the order the get visited them.
    pub tables: Vec<TableVisit>,
    /// Data blocks read in total.
    pub data_block_reads: u64,
    /// Bytes read in total.
    pub bytes_read: u64,
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
}

/// Live atomic counters.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) gets: AtomicU64,
    pub(crate) memtable_hits: AtomicU64,
    pub(crate) tables_considered: AtomicU64,
    pub(crate) filter_probes: AtomicU64,
    pub(crate) filter_negatives: AtomicU64,
    pub(crate) filter_false_positives: AtomicU64,
    pub(crate) filter_true_positives: AtomicU64,
    pub(crate) data_block_reads: AtomicU64,
    pub(crate) bytes_read: AtomicU64,
    pub(crate) user_bytes_written: AtomicU64,
    pub(crate) flushes: AtomicU64,
    pub(crate) bytes_flushed: AtomicU64,
    pub(crate) compactions: AtomicU64,
    pub(crate) trivial_moves: AtomicU64,
    pub(crate) bytes_compacted_read: AtomicU64,
    pub(crate) bytes_compacted_written: AtomicU64,
    pub(crate) background_errors: AtomicU64,
    pub(crate) write_slowdowns: AtomicU64,
    pub(crate) write_stops: AtomicU64,
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

    pub(crate) fn record_get(&self, g: &GetCounters) {
        add(&self.gets, 1);
        add(&self.memtable_hits, u64::from(g.memtable_hit));
        add(&self.tables_considered, g.tables_considered);
        add(&self.filter_probes, g.filter_probes);
        add(&self.filter_negatives, g.filter_negatives);
        add(&self.filter_false_positives, g.filter_false_positives);
        add(&self.filter_true_positives, g.filter_true_positives);
        add(&self.data_block_reads, g.data_block_reads);
        add(&self.bytes_read, g.bytes_read);
    }

    pub(crate) fn snapshot(&self) -> Stats {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Stats {
            gets: l(&self.gets),
            memtable_hits: l(&self.memtable_hits),
            tables_considered: l(&self.tables_considered),
            filter_probes: l(&self.filter_probes),
            filter_negatives: l(&self.filter_negatives),
            filter_false_positives: l(&self.filter_false_positives),
            filter_true_positives: l(&self.filter_true_positives),
            data_block_reads: l(&self.data_block_reads),
            bytes_read: l(&self.bytes_read),
            user_bytes_written: l(&self.user_bytes_written),
            flushes: l(&self.flushes),
            bytes_flushed: l(&self.bytes_flushed),
            compactions: l(&self.compactions),
            trivial_moves: l(&self.trivial_moves),
            bytes_compacted_read: l(&self.bytes_compacted_read),
            bytes_compacted_written: l(&self.bytes_compacted_written),
            background_errors: l(&self.background_errors),
            write_slowdowns: l(&self.write_slowdowns),
            write_stops: l(&self.write_stops),
            wal_torn_tails: l(&self.wal_torn_tails),
            wal_torn_bytes: l(&self.wal_torn_bytes),
            broken_tables: 0,
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
}
