//! [`Options`]: how a database is opened, with a builder method per setting.

use crate::error::{Error, Result};
use crate::fs::{FileSystem, OsFs};
use crate::sstable::BlockCache;
use std::fmt;
use std::sync::Arc;

/// The largest `memtable_size` and `target_table_size`: 64 GiB, far inside the 1 TiB a
/// manifest allows a table (a table can pass its target by one key's versions).
const MAX_TABLE_TARGET: u64 = 64 << 30;

/// The filter one level's tables get, in [`FilterPolicy::Levels`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LevelFilter {
    /// No filter: every table whose key range holds the key costs a block read.
    None,
    /// A blocked Bloom filter at any bits per key (fractions honoured).
    Bloom {
        /// Bits per key, 0 to 100.
        bits_per_key: f64,
    },
    /// A 4-wise binary fuse filter with `fingerprint_bits`-bit fingerprints: false-positive
    /// rate `2^-bits` (0.39% at 8 bits) at about `1.08 * bits` bits per key for large tables
    /// (`1.14 * bits` at 70,000 keys, the default 8 MiB table of 100-byte values). Built once
    /// per table in compaction; a table whose fuse filter cannot be built gets a Bloom filter
    /// of the same size, counted in `Stats::filter_fuse_fallbacks`.
    Fuse {
        /// Fingerprint width, 4 to 16 (anything else is `InvalidArgument`); 8 and 16 probe
        /// fastest.
        fingerprint_bits: u8,
    },
    /// A Ribbon filter (128-bit coefficients, interleaved solution) at about `bits_per_key`,
    /// any fraction of a bit honoured (never more): false-positive rate 0.96% at 7 bits per
    /// key for tables of ~70,000 keys, where a Bloom filter needs 10 (about 3% above the space
    /// bound; more for sets of millions of keys). Built
    /// once per table, at about twice a fuse filter's build cost; a table too small for a
    /// Ribbon filter to beat Bloom (a few hundred keys), a request of about 31 bits per key or
    /// more, or a Ribbon filter that cannot be solved, gets a Bloom filter of the same size
    /// (only the last counted, in `Stats::filter_fuse_fallbacks`).
    Ribbon {
        /// Bits per key, 0 to 100.
        bits_per_key: f64,
    },
}

/// How filter memory is spread over the levels and which filter kind each level uses.
/// Default: `Hybrid { bits_per_key: 10.0, fuse_from_level: 1 }`.
#[derive(Clone, Debug, PartialEq)]
pub enum FilterPolicy {
    /// No filters: every table whose key range holds the key costs a block read.
    None,
    /// The same bits per key for every table.
    Uniform {
        /// Bits per key (fractions are honoured).
        bits_per_key: f64,
    },
    /// Bits per key by level: entry `i` is for level `i`, the last entry repeats for deeper
    /// levels. An entry of 0 means no filter for that level.
    PerLevel(Vec<f64>),
    /// Monkey (Dayan et al., SIGMOD 2017): the same total filter memory as
    /// `Uniform { bits_per_key }`, spread so that each level's false-positive rate is in
    /// proportion to its share of the keys. Small levels get more bits, the largest level a
    /// little fewer, and the expected wasted block reads per absent-key get fall by a factor
    /// that grows with the number of levels (see `docs/filters.md`). Like `Hybrid` and
    /// `RibbonHybrid`, it accepts 0 to 100 bits per key but gives no level more than 40
    /// (its solver's range; a Bloom false-positive rate below 10^-8, where more bits buy
    /// nothing measurable), so an average above 40 spends at most 40 a key.
    Monkey {
        /// Average bits per key over the whole tree.
        bits_per_key: f64,
    },
    /// The filter kind of each level: entry `i` is for level `i`, the last entry repeats for
    /// deeper levels.
    Levels(Vec<LevelFilter>),
    /// Monkey's allocation over two filter kinds (the default, at 10 bits per key from L1):
    /// levels above `fuse_from_level` get Bloom filters (L0 tables are built in the flush
    /// path and live seconds), levels from `fuse_from_level` down get whichever of a binary
    /// fuse filter (fingerprints of 4 to 16 bits) or a Bloom filter of any size makes the
    /// expected wasted block reads of an absent-key get smallest for the same total memory.
    /// With 10 bits per key the largest level typically gets fuse filters of 8 or 9 bits
    /// (fuse8: 0.39% false positives at ~9.1 bits per key) and the smaller levels what is
    /// left; see `docs/filters.md`.
    Hybrid {
        /// Average bits per key over the levels below L0 (as for `Monkey`).
        bits_per_key: f64,
        /// The first level whose tables may get fuse filters (1 by default; 0 allows L0; a
        /// level past the deepest, `NUM_LEVELS` or more, means Bloom filters everywhere).
        fuse_from_level: usize,
    },
    /// Monkey's allocation over Bloom and Ribbon filters (opt-in; the default is `Hybrid`):
    /// as `Hybrid`, with Ribbon filters (any bits per key, ~3% above the space bound for
    /// default-sized tables) in place of fuse filters from `ribbon_from_level` down. For the
    /// same memory it wastes about half the block reads of `Hybrid`; at 7 bits per key it
    /// wastes what `Monkey` over Bloom wastes at 10, with 30% less filter memory. The price
    /// (see `docs/filters.md` section 5): a negative probe ~3x a Bloom probe's cost in
    /// cache, a build about twice a fuse filter's at default table size, paid in
    /// compaction. Open fails with `InvalidArgument` for bits per key outside 0..=100.
    RibbonHybrid {
        /// Average bits per key over the levels below L0 (as for `Monkey`).
        bits_per_key: f64,
        /// The first level whose tables may get Ribbon filters (no default: 1 is the usual
        /// choice; 0 allows L0; `NUM_LEVELS` or more means Bloom filters everywhere).
        ribbon_from_level: usize,
    },
}

impl FilterPolicy {
    /// The average bits per key the policy aims for (for explicit vectors, the last entry).
    pub fn nominal_bits_per_key(&self) -> f64 {
        match self {
            FilterPolicy::None => 0.0,
            FilterPolicy::Uniform { bits_per_key } | FilterPolicy::Monkey { bits_per_key } => {
                *bits_per_key
            }
            FilterPolicy::PerLevel(v) => v.last().copied().unwrap_or(0.0),
            FilterPolicy::Hybrid { bits_per_key, .. }
            | FilterPolicy::RibbonHybrid { bits_per_key, .. } => *bits_per_key,
            FilterPolicy::Levels(v) => match v.last() {
                Some(LevelFilter::Bloom { bits_per_key }) => *bits_per_key,
                Some(LevelFilter::Fuse { fingerprint_bits }) => crate::filter::fuse_bits_per_key(
                    crate::filter::NOMINAL_TABLE_KEYS,
                    u32::from(*fingerprint_bits),
                )
                .unwrap_or(0.0),
                Some(LevelFilter::Ribbon { bits_per_key }) => *bits_per_key,
                Some(LevelFilter::None) | None => 0.0,
            },
        }
    }

    fn validate(&self) -> Result<()> {
        let check = |b: f64| {
            if b.is_finite() && (0.0..=100.0).contains(&b) {
                Ok(())
            } else {
                Err(Error::InvalidArgument(format!(
                    "bits per key must be between 0 and 100, got {b}"
                )))
            }
        };
        match self {
            FilterPolicy::None => Ok(()),
            FilterPolicy::Uniform { bits_per_key } | FilterPolicy::Monkey { bits_per_key } => {
                check(*bits_per_key)
            }
            FilterPolicy::PerLevel(v) => {
                if v.is_empty() {
                    return Err(Error::InvalidArgument(
                        "per-level filter policy needs at least one entry".into(),
                    ));
                }
                v.iter().try_for_each(|&b| check(b))
            }
            FilterPolicy::Hybrid { bits_per_key, .. }
            | FilterPolicy::RibbonHybrid { bits_per_key, .. } => check(*bits_per_key),
            FilterPolicy::Levels(v) => {
                if v.is_empty() {
                    return Err(Error::InvalidArgument(
                        "per-level filter kinds need at least one entry".into(),
                    ));
                }
                v.iter().try_for_each(|l| match *l {
                    LevelFilter::None => Ok(()),
                    LevelFilter::Bloom { bits_per_key } | LevelFilter::Ribbon { bits_per_key } => {
                        check(bits_per_key)
                    }
                    LevelFilter::Fuse {
                        fingerprint_bits: 4..=16,
                    } => Ok(()),
                    LevelFilter::Fuse { fingerprint_bits } => Err(Error::InvalidArgument(format!(
                        "fuse filters have 4- to 16-bit fingerprints, not {fingerprint_bits}"
                    ))),
                })
            }
        }
    }
}

/// How the WAL's appends reach the file system ([`Options::log_writes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum LogWrites {
    /// Through [`FileSystem::create_log`](crate::fs::FileSystem::create_log): on Linux,
    /// [`OsFs`](crate::fs::OsFs) maps the WAL on ext2/3/4, XFS and tmpfs and an append is a
    /// copy into the page cache; elsewhere a `write(2)`. The default.
    #[default]
    Mapped,
    /// Every append is one `write(2)` (through [`FileSystem::create`](crate::fs::FileSystem::create)).
    Syscall,
}

/// Settings for [`Db::open_with`](crate::Db::open_with). Start from `Options::default()` and
/// change what you need; [`Db::open_with`](crate::Db::open_with) checks them and returns
/// [`Error::InvalidArgument`] for values out of range.
#[derive(Clone)]
pub struct Options {
    pub(crate) filter_policy: FilterPolicy,
    pub(crate) filter_memory_limit: Option<u64>,
    pub(crate) memtable_size: usize,
    pub(crate) max_immutable_memtables: usize,
    pub(crate) block_size: usize,
    pub(crate) sync_writes: bool,
    pub(crate) log_writes: LogWrites,
    pub(crate) l0_compaction_trigger: usize,
    pub(crate) l0_slowdown_trigger: usize,
    pub(crate) l0_stop_trigger: usize,
    pub(crate) level_base_size: u64,
    pub(crate) level_size_ratio: u64,
    pub(crate) target_table_size: u64,
    pub(crate) auto_compaction: bool,
    pub(crate) create_if_missing: bool,
    pub(crate) error_if_exists: bool,
    pub(crate) read_only: bool,
    pub(crate) file_system: Arc<dyn FileSystem>,
    pub(crate) block_cache_size: u64,
    pub(crate) block_cache: Option<BlockCache>,
    pub(crate) max_open_files: usize,
    pub(crate) max_manifest_size: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            filter_policy: FilterPolicy::Hybrid {
                bits_per_key: 10.0,
                fuse_from_level: 1,
            },
            filter_memory_limit: None,
            memtable_size: Options::DEFAULT_MEMTABLE_SIZE,
            max_immutable_memtables: 4,
            block_size: 4096,
            sync_writes: false,
            log_writes: LogWrites::Mapped,
            l0_compaction_trigger: 4,
            l0_slowdown_trigger: 8,
            l0_stop_trigger: 12,
            level_base_size: 64 << 20,
            level_size_ratio: 10,
            target_table_size: 8 << 20,
            auto_compaction: true,
            create_if_missing: true,
            error_if_exists: false,
            read_only: false,
            file_system: Arc::new(OsFs),
            block_cache_size: 64 << 20,
            block_cache: None,
            max_open_files: 1000,
            max_manifest_size: 16 << 20,
        }
    }
}

impl fmt::Debug for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Options")
            .field("filter_policy", &self.filter_policy)
            .field("filter_memory_limit", &self.filter_memory_limit)
            .field("memtable_size", &self.memtable_size)
            .field("max_manifest_size", &self.max_manifest_size)
            .field("max_immutable_memtables", &self.max_immutable_memtables)
            .field("block_size", &self.block_size)
            .field("sync_writes", &self.sync_writes)
            .field("log_writes", &self.log_writes)
            .field("l0_compaction_trigger", &self.l0_compaction_trigger)
            .field("l0_slowdown_trigger", &self.l0_slowdown_trigger)
            .field("l0_stop_trigger", &self.l0_stop_trigger)
            .field("level_base_size", &self.level_base_size)
            .field("level_size_ratio", &self.level_size_ratio)
            .field("target_table_size", &self.target_table_size)
            .field("auto_compaction", &self.auto_compaction)
            .field("create_if_missing", &self.create_if_missing)
            .field("error_if_exists", &self.error_if_exists)
            .field("read_only", &self.read_only)
            .field("file_system", &self.file_system)
            .field("block_cache_size", &self.block_cache_size)
            .field("block_cache", &self.block_cache)
            .field("max_open_files", &self.max_open_files)
            .finish()
    }
}

impl Options {
    /// The default [`memtable_size`](Self::memtable_size): 24 MiB.
    pub const DEFAULT_MEMTABLE_SIZE: usize = 24 << 20;

    /// Every table gets a Bloom filter of `bits` bits per key (fractions honoured);
    /// `0.0` means no filters. Shorthand for
    /// `filter_policy(FilterPolicy::Uniform { bits_per_key: bits })`.
    ///
    /// Default: none of this: the default policy is `FilterPolicy::Hybrid { bits_per_key:
    /// 10.0, fuse_from_level: 1 }`, the same memory as 10 bits per key everywhere, spread by
    /// level over Bloom and binary fuse filters.
    /// Open fails with `InvalidArgument` unless `0 <= bits <= 100`.
    pub fn bloom_bits_per_key(mut self, bits: f64) -> Self {
        self.filter_policy = if bits == 0.0 {
            FilterPolicy::None
        } else {
            FilterPolicy::Uniform { bits_per_key: bits }
        };
        self
    }

    /// How filter bits are spread over levels and which filter kind each level gets. Default
    /// `FilterPolicy::Hybrid { bits_per_key: 10.0, fuse_from_level: 1 }`. Open fails with
    /// `InvalidArgument` for bits per key outside 0..=100, an empty per-level list, or a fuse
    /// fingerprint width outside 4..=16.
    pub fn filter_policy(mut self, policy: FilterPolicy) -> Self {
        self.filter_policy = policy;
        self
    }

    /// Keeps the filters of the whole tree under `bytes` of memory: tables written while the
    /// projected total is over the limit get smaller filters, largest levels first, never
    /// fewer than 1 bit per key (or the bits per key the policy asks for, if fewer); the
    /// limit covers L0's filters too, which a Monkey policy's own average leaves out. A limit
    /// never raises a filter. The log says when it binds. Default: no limit. Any
    /// value is accepted: a limit below what 1 bit per key of every table takes (0 included)
    /// leaves every table at 1 bit per key.
    pub fn filter_memory_limit(mut self, bytes: u64) -> Self {
        self.filter_memory_limit = Some(bytes);
        self
    }

    /// Bytes of writes a memtable collects before it is sealed and flushed to an L0 table:
    /// each write counts its key and value and 72 bytes more. The memory a memtable holds is
    /// larger ([`Stats::memtable_memory_bytes`](crate::Stats::memtable_memory_bytes) counts
    /// it): with 16-byte keys and 100-byte values, a full 24 MiB memtable holds ~34 MiB, and
    /// while it is flushed the next one, prepared alike, holds as much. Default 24 MiB: the four L0 tables that trigger a compaction then outweigh L1's 64 MiB
    /// target, which keeps L0 -> L1 write amplification under 2. A random load of 16M keys
    /// wrote ~7.2 bytes per user byte with 24 MiB, ~8.1-8.3 with 16 MiB and ~14 with 4 MiB;
    /// a larger memtable writes less still but makes every insert search a longer skiplist
    /// (see `docs/benchmarks.md` section 8). At least 1 KiB, at most 64 GiB (a memtable
    /// flushes to one table, and a manifest records tables of at most 1 TiB). A memtable is
    /// also sealed at 14 Mi entries, whatever their bytes: with small writes a size above
    /// ~1 GiB (~2.6 GiB for 16-byte keys and 100-byte values) is never reached.
    pub fn memtable_size(mut self, bytes: usize) -> Self {
        self.memtable_size = bytes;
        self
    }

    /// Bytes of manifest (the log of the tree's changes) past which it is rewritten as a fresh
    /// snapshot of the tree, once it is also twice that snapshot's size: a new manifest is
    /// written and synced, `CURRENT` is switched to it, and the old one removed, crash-safely
    /// at every step (`docs/durability.md`). Default 16 MiB; at least 1 KiB, at most 64 GiB
    /// (open fails with `InvalidArgument` otherwise). Smaller rewrites more often and keeps
    /// reopening quick; the rewrite runs on the thread that records an edit (a flush or a
    /// compaction).
    pub fn max_manifest_size(mut self, bytes: u64) -> Self {
        self.max_manifest_size = bytes;
        self
    }

    /// Sealed memtables that may wait for flushing before writers stop and wait. Default 4;
    /// at least 1 (open fails with `InvalidArgument` for 0).
    pub fn max_immutable_memtables(mut self, n: usize) -> Self {
        self.max_immutable_memtables = n;
        self
    }

    /// Target size of a data block. Default 4096 bytes; between 256 bytes and 16 MiB (open
    /// fails with `InvalidArgument` outside).
    pub fn block_size(mut self, bytes: usize) -> Self {
        self.block_size = bytes;
        self
    }

    /// If true, every write fsyncs the WAL before it returns (concurrent writers share one
    /// fsync), so it survives power loss. If false, a write survives a process crash but the
    /// last unsynced writes may be lost on power loss ([`Db::sync`](crate::Db::sync) syncs).
    /// Default false. Never an error.
    pub fn sync_writes(mut self, sync: bool) -> Self {
        self.sync_writes = sync;
        self
    }

    /// How WAL appends reach the file system. Default [`LogWrites::Mapped`]: through
    /// [`FileSystem::create_log`](crate::fs::FileSystem::create_log), which on Linux with
    /// [`OsFs`](crate::fs::OsFs) writes through a shared memory map (ext2/3/4, XFS, tmpfs);
    /// [`LogWrites::Syscall`] makes every append one `write(2)` (`FileSystem::create`). Both
    /// keep every durability guarantee (`docs/durability.md`); the map needs no system call
    /// per write. Never an error.
    pub fn log_writes(mut self, how: LogWrites) -> Self {
        self.log_writes = how;
        self
    }

    /// L0 tables that trigger a compaction into L1. Default 4; at least 1 (open fails with
    /// `InvalidArgument` for 0).
    pub fn l0_compaction_trigger(mut self, n: usize) -> Self {
        self.l0_compaction_trigger = n;
        self
    }

    /// L0 tables at which each write group (one writer's write, or the writes one leader
    /// commits together) is delayed by 1 ms to let compaction catch up, with automatic
    /// compaction on. Default 8; at least `l0_compaction_trigger` (open fails with
    /// `InvalidArgument` below it).
    pub fn l0_slowdown_trigger(mut self, n: usize) -> Self {
        self.l0_slowdown_trigger = n;
        self
    }

    /// L0 tables at which writes wait (they do not fail) until compaction reduces L0, with
    /// automatic compaction on. As in LevelDB, the wait begins when the memtable is full
    /// (writes go on into the memtable until then, as no flush could add to L0 meanwhile).
    /// Default 12; at least `l0_slowdown_trigger` (open fails with `InvalidArgument` below it).
    pub fn l0_stop_trigger(mut self, n: usize) -> Self {
        self.l0_stop_trigger = n;
        self
    }

    /// Target size of L1; level `n` targets `level_base_size * level_size_ratio^(n-1)`.
    /// Default 64 MiB; at least 1 KiB (open fails with `InvalidArgument` below).
    pub fn level_base_size(mut self, bytes: u64) -> Self {
        self.level_base_size = bytes;
        self
    }

    /// Size ratio between adjacent levels. Default 10; at least 2 (open fails with
    /// `InvalidArgument` below).
    pub fn level_size_ratio(mut self, ratio: u64) -> Self {
        self.level_size_ratio = ratio;
        self
    }

    /// Size at which compaction output is split into a new table. Default 8 MiB; at least
    /// 1 KiB, at most 64 GiB (a manifest records tables of at most 1 TiB, and a table can
    /// pass its target by the versions of one key); open fails with `InvalidArgument` outside.
    /// (Open descriptors are bounded by [`max_open_files`](Options::max_open_files), not by
    /// the number of tables.)
    pub fn target_table_size(mut self, bytes: u64) -> Self {
        self.target_table_size = bytes;
        self
    }

    /// If false, no background compaction runs (flushes still do); L0 then grows without
    /// bound and the write stall triggers are ignored. For benchmarks of tree shapes and for
    /// tests. [`Db::compact`](crate::Db::compact) still works. Default true. Never an error.
    pub fn auto_compaction(mut self, on: bool) -> Self {
        self.auto_compaction = on;
        self
    }

    /// If false, opening a directory without a database fails with `InvalidArgument`.
    /// Default true. Never an error itself.
    pub fn create_if_missing(mut self, create: bool) -> Self {
        self.create_if_missing = create;
        self
    }

    /// If true, opening a directory that already holds a database (a `CURRENT` file) fails
    /// with `InvalidArgument` and changes nothing: the mirror of
    /// [`create_if_missing`](Options::create_if_missing), for code that must start from an
    /// empty database. Both are checked before the directory lock is taken and again once it
    /// is held (another process may create or destroy the database in between). Default
    /// false. Never an error itself.
    pub fn error_if_exists(mut self, error: bool) -> Self {
        self.error_if_exists = error;
        self
    }

    /// If true, open without the directory lock and without writing anything (see
    /// [`Db::open_read_only`](crate::Db::open_read_only)). Default false. Never an error
    /// itself (an open of a directory without a database fails with `InvalidArgument`).
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// The file system to use. Default [`OsFs`]; tests use [`MemFs`](crate::fs::MemFs).
    /// Never an error (the file system's own errors are [`Error::Io`](crate::Error::Io)).
    pub fn file_system(mut self, fs: Arc<dyn FileSystem>) -> Self {
        self.file_system = fs;
        self
    }

    /// Target bytes of level `level` (>= 1).
    pub(crate) fn level_target(&self, level: usize) -> u64 {
        let mut t = self.level_base_size;
        for _ in 1..level {
            t = t.saturating_mul(self.level_size_ratio);
        }
        t
    }

    /// Bytes of data blocks kept in an in-memory cache of verified, parsed blocks, so that a
    /// read of a hot block skips the file read, the checksum and the parse. Default 64 MiB;
    /// `0` turns the cache off (every block a get needs is read from the file). Ignored when
    /// [`block_cache`](Options::block_cache) gives a cache to share. Never an error.
    pub fn block_cache_size(mut self, bytes: u64) -> Self {
        self.block_cache_size = bytes;
        self
    }

    /// Uses `cache` as the block cache, so that several databases share one memory budget.
    /// Default: none (each database makes its own of
    /// [`block_cache_size`](Options::block_cache_size) bytes). Never an error.
    pub fn block_cache(mut self, cache: BlockCache) -> Self {
        self.block_cache = Some(cache);
        self
    }

    /// Most table files this database keeps open at once. Filters and indexes of every live
    /// table stay in memory regardless; only descriptors are closed and reopened on demand.
    /// Default 1000; at least 1 (open fails with `InvalidArgument` for 0). The table cache keeps at most this many, and at most three
    /// quarters of the process's soft `RLIMIT_NOFILE` (read at open; the rest is left for
    /// WALs, the manifest and the application), though that cap is never below 16 however
    /// low the limit; when descriptors run out anyway it closes cached ones and retries
    /// instead of failing.
    pub fn max_open_files(mut self, n: usize) -> Self {
        self.max_open_files = n;
        self
    }

    /// The block cache this database uses: the shared one, a new one of
    /// `block_cache_size` bytes, or none.
    pub(crate) fn make_block_cache(&self) -> Option<BlockCache> {
        match &self.block_cache {
            Some(c) => Some(c.clone()),
            None if self.block_cache_size > 0 => Some(BlockCache::for_block_size(
                self.block_cache_size,
                self.block_size,
            )),
            None => None,
        }
    }

    /// `max_open_files`, capped at three quarters of the soft open-file limit.
    pub(crate) fn effective_max_open_files(&self) -> usize {
        match soft_nofile_limit() {
            Some(limit) => self.max_open_files.min((limit / 4 * 3).max(16) as usize),
            None => self.max_open_files,
        }
    }

    pub(crate) fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidArgument(m));
        self.filter_policy.validate()?;
        // Compared as u64: on a 32-bit target the 64 GiB bound does not fit a usize.
        if !(1024..=MAX_TABLE_TARGET).contains(&(self.memtable_size as u64)) {
            return bad(format!(
                "memtable_size must be between 1 KiB and 64 GiB, got {}",
                self.memtable_size
            ));
        }
        if !(256..=16 << 20).contains(&self.block_size) {
            return bad(format!(
                "block_size must be between 256 and 16 MiB, got {}",
                self.block_size
            ));
        }
        if self.max_open_files == 0 {
            return bad("max_open_files must be at least 1".into());
        }
        if !(1024..=MAX_TABLE_TARGET).contains(&self.max_manifest_size) {
            return bad(format!(
                "max_manifest_size must be between 1 KiB and 64 GiB, got {}",
                self.max_manifest_size
            ));
        }
        if self.max_immutable_memtables == 0 {
            return bad("max_immutable_memtables must be at least 1".into());
        }
        if self.l0_compaction_trigger == 0
            || self.l0_slowdown_trigger < self.l0_compaction_trigger
            || self.l0_stop_trigger < self.l0_slowdown_trigger
        {
            return bad(format!(
                "need 1 <= l0_compaction_trigger ({}) <= l0_slowdown_trigger ({}) <= l0_stop_trigger ({})",
                self.l0_compaction_trigger, self.l0_slowdown_trigger, self.l0_stop_trigger
            ));
        }
        if self.level_base_size < 1024 || self.target_table_size < 1024 {
            return bad("level_base_size and target_table_size must be at least 1024".into());
        }
        if self.target_table_size > MAX_TABLE_TARGET {
            return bad(format!(
                "target_table_size must be at most 64 GiB, got {}",
                self.target_table_size
            ));
        }
        if self.level_size_ratio < 2 {
            return bad(format!(
                "level_size_ratio must be at least 2, got {}",
                self.level_size_ratio
            ));
        }
        Ok(())
    }
}

/// The soft `RLIMIT_NOFILE` of this process, from `/proc/self/limits` (Linux); `None` where
/// that cannot be read or says "unlimited".
fn soft_nofile_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_documented_values() {
        let o = Options::default();
        o.validate().unwrap();
        assert_eq!(o.memtable_size, 24 << 20);
        assert_eq!(Options::DEFAULT_MEMTABLE_SIZE, o.memtable_size);
        assert_eq!(o.block_size, 4096);
        assert!(!o.sync_writes);
        assert_eq!(o.filter_policy.nominal_bits_per_key(), 10.0);
        assert_eq!(
            (
                o.l0_compaction_trigger,
                o.l0_slowdown_trigger,
                o.l0_stop_trigger
            ),
            (4, 8, 12)
        );
        assert_eq!(o.level_target(1), 64 << 20);
        assert_eq!(o.level_target(3), 6400 << 20);
    }

    #[test]
    fn bad_values_are_rejected() {
        assert!(Options::default()
            .bloom_bits_per_key(-1.0)
            .validate()
            .is_err());
        assert!(Options::default()
            .bloom_bits_per_key(f64::NAN)
            .validate()
            .is_err());
        assert!(Options::default().memtable_size(10).validate().is_err());
        assert_eq!(Options::default().max_manifest_size, 16 << 20);
        for bad in [0, 1023, MAX_TABLE_TARGET + 1] {
            let e = Options::default().max_manifest_size(bad).validate();
            assert!(matches!(e, Err(Error::InvalidArgument(_))), "{bad}");
        }
        assert!(Options::default()
            .max_manifest_size(1024)
            .validate()
            .is_ok());
        assert!(Options::default().block_size(0).validate().is_err());
        assert!(Options::default().l0_stop_trigger(2).validate().is_err());
        assert!(Options::default().level_size_ratio(1).validate().is_err());
        assert!(Options::default()
            .filter_policy(FilterPolicy::PerLevel(vec![]))
            .validate()
            .is_err());
        assert_eq!(
            Options::default().bloom_bits_per_key(0.0).filter_policy,
            FilterPolicy::None
        );
    }
}
