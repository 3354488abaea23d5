//! [`ScalableBloom`]: a filter in front of a memtable, which does not know how many keys it
//! will hold. A chain of blocked Bloom filters (the same 512-bit-line layout as the tables'):
//! keys go into the newest stage until it holds its planned count, then a stage twice as large
//! with half the false-positive rate is added. The chain's false-positive rate stays below the
//! sum of the stages' (at most twice the first stage's), whatever the final key count.
//!
//! Bits are set by one writer at a time (the memtable adds through its one `MemWriter`) with
//! relaxed loads and stores, and read with relaxed loads. A key's bits are set before it
//! is inserted into the skiplist, and writes become visible to gets through the
//! release/acquire of the engine's visible sequence number, so a get that may see a key also
//! sees its bits: no false negatives.

use super::bloom::{lines_for, locate, probes_for, GOLDEN, LINE_BITS};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Keys the first stage is planned for, unless the memtable says how many it expects.
const FIRST_STAGE_KEYS: u64 = 4096;
/// False-positive rate of the first stage; stage `i` gets `FIRST_STAGE_FPR / 2^i`. (What
/// [`STAGE_BITS_PER_KEY`] is computed from, and checked against in a test.)
#[cfg_attr(not(test), allow(dead_code))]
const FIRST_STAGE_FPR: f64 = 0.005;
/// Stages at most (the last one takes every key beyond the plan: 4096 * 2^23 keys).
const MAX_STAGES: usize = 24;

/// Bits per key of each stage: [`bits_per_key_for_fpr`](super::bits_per_key_for_fpr) of
/// `FIRST_STAGE_FPR / 2^i`, as a table. Computing it (a bisection over a sum of a few hundred
/// `powf` terms for each stage) took ~6 ms, and it happened in the first insert of a process,
/// whose latency it was; a unit test checks the table against the computation.
const STAGE_BITS_PER_KEY: [f64; MAX_STAGES] = [
    11.504128000000044,
    13.172224000000007,
    14.908416000000035,
    16.720384000000045,
    18.617344000000017,
    20.597760000000022,
    22.664704000000057,
    24.891904000000054,
    27.30956800000004,
    29.662208000000057,
    32.10854400000001,
    34.814464000000044,
    37.69190400000001,
    40.940032000000016,
    44.55731200000001,
    48.550400000000025,
    52.40371200000004,
    55.996928000000054,
    59.83488000000003,
    63.93753600000005,
    64.0,
    64.0,
    64.0,
    64.0,
];

#[derive(Debug)]
struct Stage {
    lines: Vec<[AtomicU64; 8]>,
    probes: u32,
    capacity: u64,
    keys: AtomicU64,
}

impl Stage {
    fn new(index: usize, first: u64) -> Stage {
        let capacity = first << index;
        let lines = lines_for(capacity, STAGE_BITS_PER_KEY[index]);
        Stage {
            lines: (0..lines).map(|_| Default::default()).collect(),
            probes: probes_for(capacity, lines),
            capacity,
            keys: AtomicU64::new(0),
        }
    }

    /// Sets the hash's bits. One writer at a time (see [`ScalableBloom::add`]), so a bit is set
    /// with a plain load and store instead of a locked `fetch_or` (each of which would stall
    /// the writer on a cache line it just missed: ~8% of a sequential load's profile).
    fn add(&self, hash: u64) {
        let (idx, mut h) = locate(hash, self.lines.len() as u32);
        if let Some(line) = self.lines.get(idx) {
            for _ in 0..self.probes {
                let bit = h >> 23;
                let word = &line[(bit >> 6) as usize & 7];
                word.store(
                    word.load(Ordering::Relaxed) | 1u64 << (bit & 63),
                    Ordering::Relaxed,
                );
                h = h.wrapping_mul(GOLDEN);
            }
        }
        self.keys
            .store(self.keys.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    /// Asks the CPU to load the line `add(hash)` will set bits in.
    fn prefetch(&self, hash: u64) {
        let (idx, _) = locate(hash, self.lines.len() as u32);
        if let Some(line) = self.lines.get(idx) {
            crate::prefetch::for_read(line.as_ptr().cast());
        }
    }

    fn may_contain(&self, hash: u64) -> bool {
        let (idx, mut h) = locate(hash, self.lines.len() as u32);
        let Some(line) = self.lines.get(idx) else {
            return false;
        };
        for _ in 0..self.probes {
            let bit = h >> 23;
            if (line[(bit >> 6) as usize & 7].load(Ordering::Relaxed) >> (bit & 63)) & 1 == 0 {
                return false;
            }
            h = h.wrapping_mul(GOLDEN);
        }
        true
    }

    fn bytes(&self) -> usize {
        self.lines.len() * (LINE_BITS as usize / 8)
    }
}

/// A growing chain of blocked Bloom filters; see the module documentation.
#[derive(Debug)]
pub(crate) struct ScalableBloom {
    stages: [OnceLock<Stage>; MAX_STAGES],
    /// Index of the stage keys go into now.
    current: AtomicUsize,
    /// Keys the first stage is planned for.
    first: u64,
}

impl Default for ScalableBloom {
    fn default() -> Self {
        ScalableBloom::with_first_stage(FIRST_STAGE_KEYS)
    }
}

impl ScalableBloom {
    /// A filter whose first stage is planned for `keys` keys (at least 1,024): planned for
    /// what the memtable will hold, one or two stages answer every get.
    pub(crate) fn with_first_stage(keys: u64) -> ScalableBloom {
        ScalableBloom {
            stages: Default::default(),
            current: AtomicUsize::new(0),
            first: keys.clamp(1024, 1 << 24),
        }
    }

    /// Adds a key's hash (from [`hash_key`](super::hash_key)). One writer at a time: two at
    /// once could lose each other's bits (the memtable adds through its one `MemWriter`).
    pub(crate) fn add(&self, hash: u64) {
        let mut i = self.current.load(Ordering::Acquire);
        let mut stage = self.stages[i].get_or_init(|| Stage::new(i, self.first));
        if stage.keys.load(Ordering::Relaxed) >= stage.capacity && i + 1 < MAX_STAGES {
            i += 1;
            stage = self.stages[i].get_or_init(|| Stage::new(i, self.first));
            self.current.store(i, Ordering::Release);
        }
        stage.add(hash);
    }

    /// Starts loading the cache line that [`add`](Self::add) of this hash will write, so
    /// that the writer does other work (its WAL record, its checksum) while the line comes
    /// from memory: a memtable's filter is a few hundred KiB, written at random, and by the
    /// time a key's bits are set the writer's stream of log and arena bytes has pushed most
    /// of it out of the near caches. A hint only: it changes no bit.
    pub(crate) fn prefetch(&self, hash: u64) {
        let i = self.current.load(Ordering::Acquire);
        if let Some(stage) = self.stages[i].get() {
            stage.prefetch(hash);
        }
    }

    /// False if no key with this hash was added.
    pub(crate) fn may_contain(&self, hash: u64) -> bool {
        let last = self.current.load(Ordering::Acquire);
        self.stages[..=last]
            .iter()
            .any(|s| s.get().is_some_and(|s| s.may_contain(hash)))
    }

    /// Bytes of filter memory.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.stages
            .iter()
            .filter_map(|s| s.get())
            .map(Stage::bytes)
            .sum()
    }

    /// Stages in use.
    #[cfg(test)]
    fn stages(&self) -> usize {
        self.stages.iter().filter(|s| s.get().is_some()).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::hash_key;

    #[test]
    fn no_false_negatives_and_a_bounded_false_positive_rate_as_it_grows() {
        let f = ScalableBloom::default();
        assert!(
            !f.may_contain(hash_key(b"anything")),
            "an empty filter says no"
        );
        let n = 100_000u64;
        for i in 0..n {
            f.add(hash_key(format!("key{i}").as_bytes()));
            if i % 997 == 0 {
                // Every key added so far is still a "maybe", across stage changes.
                for j in (0..=i).step_by(101) {
                    assert!(f.may_contain(hash_key(format!("key{j}").as_bytes())));
                }
            }
        }
        assert!(f.stages() >= 4, "{} stages for {n} keys", f.stages());
        let probes = 200_000u64;
        let fp = (0..probes)
            .filter(|i| f.may_contain(hash_key(format!("absent{i}").as_bytes())))
            .count() as f64
            / probes as f64;
        // The stages' rates sum to at most 2 * 0.5%; measured with margin for chance.
        assert!(fp < 0.012, "false-positive rate {fp}");
        assert!(fp > 0.0005, "false-positive rate {fp} is implausibly low");
        // Memory grows with the keys: each stage is planned for its full count, so a young
        // last stage can double the bits of the keys it holds (here ~22 bits per key).
        let bits_per_key = f.memory_bytes() as f64 * 8.0 / n as f64;
        assert!((8.0..32.0).contains(&bits_per_key), "{bits_per_key}");
    }

    #[test]
    fn the_stage_table_is_the_computed_bits_per_key() {
        for (i, &bits) in STAGE_BITS_PER_KEY.iter().enumerate() {
            let fpr = FIRST_STAGE_FPR / f64::from(1u32 << i);
            let computed = crate::filter::bits_per_key_for_fpr(fpr);
            // The bisection ends on a step of a function of whole lines: another libm may
            // land a step away (about 0.0005 bits per key), never further.
            assert!(
                (bits - computed).abs() < 0.01,
                "stage {i}: {bits} against {computed}"
            );
        }
    }
}
