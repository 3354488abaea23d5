//! [`BlockCache`]: checksum-verified, parsed data blocks, keyed by (table id, block offset),
//! so that a hit skips the read, the checksum and the parse.
//!
//! Built on `quick_cache`'s sharded cache: concurrent readers do not serialise on one lock,
//! entries are weighted by their bytes, and its eviction policy (a Clock-PRO variant close to
//! S3-FIFO) keeps blocks read once in a small probation queue, so a scan does not push the hot
//! set out. A second admission policy, [`Admission::SecondSighting`], admits a block only the
//! second time it is missed (a doorkeeper: a small Bloom filter of recently missed blocks);
//! `examples/cache_figures.rs` compares the two on a zipfian read mix with a concurrent full
//! scan, and the default is the one that held the higher hit rate there (see
//! `docs/benchmarks.md`).
//!
//! Table ids are unique for the life of the process (see [`next_table_id`]), so a block of a
//! deleted table is never served for a new table that reuses its file number or its memory.

use super::block::Block;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Which blocks a [`BlockCache`] admits on a miss.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Admission {
    /// Every block read is inserted; the cache's own eviction policy (Clock-PRO / S3-FIFO,
    /// with a probation queue for blocks seen once) decides what stays. The default.
    #[default]
    Always,
    /// A block is inserted only the second time it is missed within a window (a doorkeeper
    /// Bloom filter of recently missed blocks, cleared every `capacity / 4 KiB` misses), as
    /// CDN caches keep one-hit wonders out.
    SecondSighting,
}

/// Weighs a cached block by its bytes plus its parsed header and the cache's own entry.
#[derive(Clone, Copy, Debug, Default)]
struct BlockWeighter;

/// Bytes a cached block costs beyond its contents: the parsed header (restart offsets and key
/// prefixes kept inline, in an `Arc`) and about 64 for the cache's entry.
const BLOCK_OVERHEAD: u64 = (std::mem::size_of::<super::block::Parsed>() + 16 + 64) as u64;

impl quick_cache::Weighter<(u64, u64), Block> for BlockWeighter {
    fn weight(&self, _key: &(u64, u64), block: &Block) -> u64 {
        block.len() as u64 + BLOCK_OVERHEAD
    }
}

/// Bits of the doorkeeper filter per block the cache can hold.
const DOORKEEPER_BITS_PER_ENTRY: u64 = 8;

/// The "seen once" filter of [`Admission::SecondSighting`]: two bits per block key, cleared
/// after as many insertions as the cache holds blocks.
#[derive(Debug)]
struct Doorkeeper {
    bits: Vec<AtomicU64>,
    inserted: AtomicU64,
    reset_every: u64,
}

impl Doorkeeper {
    fn new(entries: u64) -> Doorkeeper {
        let words = (entries * DOORKEEPER_BITS_PER_ENTRY).div_ceil(64).max(1);
        Doorkeeper {
            bits: (0..words).map(|_| AtomicU64::new(0)).collect(),
            inserted: AtomicU64::new(0),
            reset_every: entries.max(1),
        }
    }

    fn positions(&self, key: (u64, u64)) -> [(usize, u64); 2] {
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&key.0.to_le_bytes());
        bytes[8..].copy_from_slice(&key.1.to_le_bytes());
        let h = xxhash_rust::xxh3::xxh3_64(&bytes);
        let n = self.bits.len() as u64 * 64;
        let a = h % n;
        let b = h.rotate_left(32) % n;
        [
            ((a / 64) as usize, 1 << (a % 64)),
            ((b / 64) as usize, 1 << (b % 64)),
        ]
    }

    /// Marks `key` as seen; true if it was (probably) seen before.
    fn check_and_mark(&self, key: (u64, u64)) -> bool {
        let mut seen = true;
        for (word, bit) in self.positions(key) {
            let before = self.bits[word].fetch_or(bit, Ordering::Relaxed);
            seen &= before & bit != 0;
        }
        if !seen && self.inserted.fetch_add(1, Ordering::Relaxed) + 1 >= self.reset_every {
            self.inserted.store(0, Ordering::Relaxed);
            for w in &self.bits {
                w.store(0, Ordering::Relaxed);
            }
        }
        seen
    }
}

/// A cache of data blocks, shared by every table of a database, or by several databases
/// ([`Options::block_cache`](crate::Options::block_cache)). Cheap to clone: clones are the
/// same cache.
#[derive(Clone)]
pub struct BlockCache {
    inner: Arc<Inner>,
}

struct Inner {
    cache: quick_cache::sync::Cache<(u64, u64), Block, BlockWeighter>,
    capacity: u64,
    doorkeeper: Option<Doorkeeper>,
}

impl std::fmt::Debug for BlockCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockCache")
            .field("capacity", &self.inner.capacity)
            .field("usage", &self.usage())
            .field("blocks", &self.len())
            .finish()
    }
}

/// Blocks are assumed to be about this large when sizing the cache's tables.
const TYPICAL_BLOCK: u64 = 4096;

/// The most blocks a [`BlockCache`] sizes its tables and its doorkeeper for: 2^24 (64 GiB of
/// 4 KiB blocks).
const MAX_SIZED_BLOCKS: u64 = 1 << 24;

/// The fewest bytes each shard of a cache made with [`BlockCache::new`] holds: twice the
/// largest `Options::block_size` (16 MiB), since such a cache may be shared by databases of
/// any block size. `quick_cache` splits the byte budget evenly over its shards and drops,
/// without a word, an entry heavier than 97% of one shard's share: with the shard count it
/// picks by itself (four per CPU), a cache of 64 MiB on two CPUs could not keep a block over
/// 8 MiB, nor one of 8 MiB a block over 256 KiB on eight.
const MIN_SHARD_BYTES: u64 = 32 << 20;

/// The fewest bytes each shard of a database's own cache holds (with twice its block size,
/// if that is more): the default 64 MiB cache keeps four shards per CPU up to 16 CPUs.
const MIN_OWN_SHARD_BYTES: u64 = 4 << 20;

/// Shards for a cache of `capacity` bytes: four per CPU, as `quick_cache` would pick, but no
/// more than leave each `floor` bytes; a power of two (what `quick_cache` rounds to).
fn shards_for(capacity: u64, floor: u64) -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    let n = (capacity / floor.max(1)).clamp(1, cpus.saturating_mul(4).max(1));
    1 << (63 - n.leading_zeros())
}

impl BlockCache {
    /// A cache of at most `capacity_bytes` of blocks, admitting every block read
    /// ([`Admission::Always`]). A capacity of 0 keeps nothing (every block is read from its
    /// file, as with no cache).
    pub fn new(capacity_bytes: u64) -> BlockCache {
        BlockCache::with_admission(capacity_bytes, Admission::Always)
    }

    /// A cache of at most `capacity_bytes` with the given admission policy. Its tables (and
    /// its doorkeeper) are sized for `capacity_bytes` of 4 KiB blocks, but for no more than
    /// 2^24 of them (64 GiB): a larger capacity is still honoured, it only sizes nothing
    /// ahead for it (so `u64::MAX`, "unbounded", allocates the bookkeeping of a 64 GiB cache,
    /// not an impossible amount). The budget is split over up to four shards per CPU (for
    /// concurrent readers), each of at least 32 MiB: a cache of 32 MiB or more keeps a block
    /// of up to 16 MiB (the largest [`block_size`](crate::Options::block_size); a block
    /// holding one larger entry is not kept), a smaller one any block up to 97% of its
    /// capacity.
    pub fn with_admission(capacity_bytes: u64, admission: Admission) -> BlockCache {
        BlockCache::with_shard_floor(capacity_bytes, admission, MIN_SHARD_BYTES)
    }

    /// A database's own cache ([`Options::block_cache_size`](crate::Options::block_cache_size)):
    /// its shards hold at least twice the database's `block_size` (and 4 MiB), enough for
    /// every block but one holding an entry larger than a block, and as many shards as
    /// `quick_cache` would make for readers on many CPUs.
    pub(crate) fn for_block_size(capacity_bytes: u64, block_size: usize) -> BlockCache {
        let floor = (2 * block_size as u64).max(MIN_OWN_SHARD_BYTES);
        BlockCache::with_shard_floor(capacity_bytes, Admission::Always, floor)
    }

    fn with_shard_floor(capacity_bytes: u64, admission: Admission, floor: u64) -> BlockCache {
        let items = (capacity_bytes / TYPICAL_BLOCK).clamp(16, MAX_SIZED_BLOCKS) as usize;
        let weight = capacity_bytes.max(1);
        let options = quick_cache::OptionsBuilder::new()
            .estimated_items_capacity(items)
            .weight_capacity(weight)
            .shards(shards_for(weight, floor))
            .build();
        let cache = match options {
            Ok(o) => quick_cache::sync::Cache::with_options(
                o,
                BlockWeighter,
                Default::default(),
                Default::default(),
            ),
            // Only a capacity left unset is refused, and both are set above.
            Err(_) => quick_cache::sync::Cache::with_weighter(items, weight, BlockWeighter),
        };
        BlockCache {
            inner: Arc::new(Inner {
                cache,
                capacity: capacity_bytes,
                doorkeeper: (admission == Admission::SecondSighting)
                    .then(|| Doorkeeper::new(items as u64)),
            }),
        }
    }

    /// The most bytes the cache holds.
    pub fn capacity(&self) -> u64 {
        self.inner.capacity
    }

    /// Bytes of blocks held now.
    pub fn usage(&self) -> u64 {
        self.inner.cache.weight()
    }

    /// Blocks held now.
    pub fn len(&self) -> usize {
        self.inner.cache.len()
    }

    /// True if no block is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn get(&self, table: u64, offset: u64) -> Option<Block> {
        self.inner.cache.get(&(table, offset))
    }

    /// Offers a verified, parsed block read from a file; the admission policy decides whether
    /// it is kept.
    pub(crate) fn insert(&self, table: u64, offset: u64, block: Block) {
        if let Some(d) = &self.inner.doorkeeper {
            if !d.check_and_mark((table, offset)) {
                return;
            }
        }
        self.inner.cache.insert((table, offset), block);
    }
}

static NEXT_TABLE_ID: AtomicU64 = AtomicU64::new(1);

/// A table id never used before in this process: the block cache's key for an open table.
pub(crate) fn next_table_id() -> u64 {
    NEXT_TABLE_ID.fetch_add(1, Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::{encode, trailer, ValueKind};
    use crate::sstable::block::BlockBuilder;
    use bytes::Bytes;

    /// A parsed data block of about `bytes` bytes.
    fn block_of(bytes: usize) -> Block {
        let mut b = BlockBuilder::new(16);
        let value = vec![b'v'; 64 << 10];
        for i in 0..bytes / value.len() {
            b.add(
                &encode(format!("k{i:08}").as_bytes(), trailer(1, ValueKind::Put)),
                &value,
            );
        }
        let mut raw = Vec::new();
        b.finish_into(&mut raw);
        Block::parse(Bytes::from(raw)).unwrap()
    }

    #[test]
    fn a_block_of_the_largest_block_size_is_kept() {
        // quick_cache's own sharding (four shards per CPU) gave a 64 MiB cache shards of
        // 8 MiB on two CPUs, and it drops an entry over 97% of a shard without a word: a
        // table built with `block_size(16 MiB)` was never cached.
        let block = block_of(16 << 20);
        assert!(block.len() >= 16 << 20);
        for capacity in [64u64 << 20, 32 << 20, 1 << 30] {
            let c = BlockCache::new(capacity);
            c.insert(1, 0, block.clone());
            assert!(c.get(1, 0).is_some(), "capacity {capacity}");
        }
        // A cache under 32 MiB is one shard: it keeps a block of 90% of its capacity.
        let c = BlockCache::new(8 << 20);
        c.insert(1, 0, block_of(7 << 20));
        assert!(c.get(1, 0).is_some());
    }

    #[test]
    fn shards_are_a_power_of_two_of_at_least_the_floor() {
        let capacities = [
            0u64,
            1,
            31 << 20,
            32 << 20,
            64 << 20,
            100 << 20,
            1 << 40,
            u64::MAX,
        ];
        for floor in [MIN_SHARD_BYTES, MIN_OWN_SHARD_BYTES, 0] {
            for capacity in capacities {
                let n = shards_for(capacity, floor) as u64;
                assert!(n.is_power_of_two(), "{capacity}: {n}");
                assert!(n == 1 || capacity / n >= floor, "{capacity}: {n}");
            }
        }
        assert_eq!(shards_for(63 << 20, MIN_SHARD_BYTES), 1);
    }

    #[test]
    fn a_databases_own_cache_keeps_blocks_of_its_block_size() {
        // 16 MiB blocks in a 64 MiB cache: its shards hold 32 MiB or more.
        let c = BlockCache::for_block_size(64 << 20, 16 << 20);
        c.insert(1, 0, block_of(16 << 20));
        assert!(c.get(1, 0).is_some());
        // 4 KiB blocks: shards of at least 4 MiB keep a 3 MiB block (a few large entries).
        let c = BlockCache::for_block_size(64 << 20, 4096);
        c.insert(1, 0, block_of(3 << 20));
        assert!(c.get(1, 0).is_some());
    }

    #[test]
    fn a_cache_of_any_capacity_is_made_without_a_huge_allocation() {
        // u64::MAX once sized a doorkeeper of 4 PiB (an abort) and overflowed its bit count.
        let mut b = BlockBuilder::new(16);
        b.add(&encode(b"k", trailer(1, ValueKind::Put)), b"v");
        let mut raw = Vec::new();
        b.finish_into(&mut raw);
        let block = Block::parse(Bytes::from(raw)).unwrap();
        for admission in [Admission::Always, Admission::SecondSighting] {
            let c = BlockCache::with_admission(u64::MAX, admission);
            assert_eq!(c.capacity(), u64::MAX);
            // The second sighting admits it, the first already with `Always`.
            c.insert(1, 0, block.clone());
            c.insert(1, 0, block.clone());
            assert!(c.get(1, 0).is_some(), "{admission:?}");
        }
    }
}
