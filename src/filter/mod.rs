//! Per-table filters: the serialized filter block, its reader, and sizing helpers.
//!
//! A filter block is the filter's payload followed by a fixed 28-byte trailer (see
//! `docs/format.md`). Two kinds exist: the blocked Bloom filter (kind 1, any bits per key,
//! built in the flush path) and the binary fuse filter (kind 2, 4- to 16-bit
//! fingerprints, for long-lived tables; see [`fuse`](self::fuse) for its layout). Every kind's
//! trailer starts with the marker, kind, version and hash id and ends with the checksum; the
//! Bloom trailer is:
//!
//! ```text
//! payload                       lines * 64 bytes (blocked Bloom)
//! 0   u8   marker   0xF1        (another marker: a filter family this build does not know)
//! 1   u8   kind     1 = blocked Bloom, 512-bit lines
//! 2   u8   version  1
//! 3   u8   hash id  1 = xxh3-64 of the user key
//! 4   u32  hash seed (0)
//! 8   u8   probes k (1..=30)
//! 9   [u8; 3] reserved, 0
//! 12  u32  lines
//! 16  u64  keys
//! 24  u32  crc = mask(crc32(payload ++ trailer[0..24]))
//! ```
//!
//! A checksum mismatch is corruption. A well-formed filter of a kind, version, hash or layout
//! that this build does not know reads as "may contain" for every key: filtering is lost, but
//! no answer is ever wrong. A filter over zero keys says "definitely not" to everything.

mod bloom;
pub(crate) mod fuse;
pub(crate) mod ribbon;

pub use bloom::{
    bits_for, bits_per_key_for_fpr, fpr_from_fill, lines_for, predicted_fpr,
    predicted_fpr_for_bits, probe_positions, probes_for, probes_for_millibits, standard_bloom_fpr,
    LINE_BITS,
};

pub(crate) mod allocation;
pub(crate) mod scalable;

use crate::record::mask_crc;
use bloom::Line;
use std::fmt;
use std::sync::OnceLock;

/// Length of the filter trailer.
pub const TRAILER_LEN: usize = 28;
/// The marker byte of siltdb's filter family.
pub const MARKER: u8 = 0xF1;
/// Kind byte of the blocked Bloom filter.
pub const KIND_BLOCKED_BLOOM: u8 = 1;
/// Current version of the blocked Bloom layout.
pub const VERSION: u8 = 1;
/// Hash id of xxh3-64.
pub const HASH_XXH3_64: u8 = 1;
/// Kind byte of the binary fuse filter (3-wise or 4-wise: the arity is in its trailer).
pub const KIND_BINARY_FUSE: u8 = 2;
/// Current version of the binary fuse layout.
pub const FUSE_VERSION: u8 = 1;

pub use fuse::{Geometry as FuseGeometry, MAX_ATTEMPTS as FUSE_MAX_ATTEMPTS};
pub use ribbon::{
    decode_trailer as decode_ribbon_trailer, Geometry as RibbonGeometry, RibbonFilter, RibbonProbe,
    RibbonTrailer, KIND_RIBBON, MAX_ATTEMPTS as RIBBON_MAX_ATTEMPTS, RIBBON_VERSION,
};

/// Bits per key of a (4-wise, as tables are written) binary fuse filter over `keys` keys with
/// `fingerprint_bits`-bit fingerprints (4 to 16): its slots times the fingerprint width over
/// the keys. About 8.6 at 8 bits for 10 million keys, 9.1 at 70,000 keys, more for small
/// sets. `None` for another width or more keys than a fuse filter can hold (2^29).
pub fn fuse_bits_per_key(keys: u64, fingerprint_bits: u32) -> Option<f64> {
    fuse::bits_per_key(keys, fingerprint_bits, fuse::DEFAULT_ARITY)
}

/// `8 * bytes / keys` (0 without keys): a fingerprint filter's bits per key.
pub(crate) fn bits_per_key_of(bytes: usize, keys: u64) -> f64 {
    if keys == 0 {
        0.0
    } else {
        bytes as f64 * 8.0 / keys as f64
    }
}

/// The table size a fuse filter's nominal bits per key are quoted at (what the table
/// properties record and `FilterPolicy::nominal_bits_per_key` reports).
pub(crate) const NOMINAL_TABLE_KEYS: u64 = 100_000;

/// The filter a table gets when it is written.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum TableFilter {
    /// No filter block.
    None,
    /// A blocked Bloom filter.
    Bloom { bits_per_key: f64 },
    /// A binary fuse filter, unless it would take more than `max_bits_per_key` (then a Bloom
    /// filter at that size) or cannot be built (then a Bloom filter of the fuse's size).
    Fuse {
        fingerprint_bits: u32,
        max_bits_per_key: f64,
    },
    /// A Ribbon filter at about `bits_per_key`, unless the set is too small for one to beat a
    /// Bloom filter of that size (then that Bloom filter) or no seed solves it (the same,
    /// reported as a fallback).
    Ribbon { bits_per_key: f64 },
}

impl TableFilter {
    /// The bits per key this asks for (a fuse filter's at [`NOMINAL_TABLE_KEYS`]).
    pub(crate) fn nominal_bits_per_key(&self) -> f64 {
        match *self {
            TableFilter::None => 0.0,
            TableFilter::Bloom { bits_per_key } => bits_per_key,
            TableFilter::Fuse {
                fingerprint_bits,
                max_bits_per_key,
            } => fuse_bits_per_key(NOMINAL_TABLE_KEYS, fingerprint_bits)
                .unwrap_or(0.0)
                .min(max_bits_per_key),
            TableFilter::Ribbon { bits_per_key } => bits_per_key,
        }
    }
}

/// A finished filter block and whether a fuse or Ribbon filter had to fall back to Bloom.
#[derive(Debug)]
pub(crate) struct FinishedFilter {
    pub(crate) block: Vec<u8>,
    pub(crate) fuse_fell_back: bool,
}

/// The hash every filter uses: xxh3-64 of the user key, seed 0. A get computes it once and
/// reuses it for every table.
#[inline]
pub fn hash_key(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key)
}

/// Collects key hashes while a table is written and serializes the filter at the end.
#[derive(Debug, Default)]
pub(crate) struct FilterBuilder {
    hashes: Vec<u64>,
    last: Option<u64>,
}

impl FilterBuilder {
    pub(crate) fn new() -> Self {
        FilterBuilder::default()
    }

    /// Adds a user key's hash. Consecutive repeats (versions of one key) are skipped.
    pub(crate) fn add_hash(&mut self, hash: u64) {
        if self.last != Some(hash) {
            self.hashes.push(hash);
            self.last = Some(hash);
        }
    }

    /// The serialized filter block for `bits_per_key` (> 0).
    #[cfg(test)]
    pub(crate) fn finish(&self, bits_per_key: f64) -> Vec<u8> {
        BloomFilter::build(&self.hashes, bits_per_key).encode()
    }

    /// The serialized filter block of the kind asked for. A fuse filter never fails the
    /// table: if it would be larger than allowed it becomes a Bloom filter of the allowed
    /// size, and if no seed builds it, a Bloom filter of the fuse's own size (reported).
    pub(crate) fn finish_as(mut self, spec: TableFilter) -> FinishedFilter {
        let keys = self.hashes.len() as u64;
        // What to build as Bloom filter: (bits per key, whether a fuse filter fell back).
        let (bits, fuse_fell_back) = match spec {
            // A table without a filter has no builder; an empty filter is the safe answer.
            TableFilter::None => {
                self.hashes.clear();
                (1.0, false)
            }
            TableFilter::Bloom { bits_per_key } => (bits_per_key, false),
            TableFilter::Fuse {
                fingerprint_bits,
                max_bits_per_key,
            } => match fuse_bits_per_key(keys, fingerprint_bits) {
                None => {
                    log::warn!("fuse filter: {keys} keys are too many; using Bloom");
                    (max_bits_per_key.min(20.0), true)
                }
                // No keys: the empty filter, whatever the kind.
                Some(_) if keys == 0 => (1.0, false),
                Some(bits) if bits > max_bits_per_key => (max_bits_per_key, false),
                Some(bits) => {
                    let built = FuseFilter::build_in_place(
                        &mut self.hashes,
                        fingerprint_bits,
                        fuse::DEFAULT_ARITY,
                    );
                    if let Some(f) = built {
                        return FinishedFilter {
                            block: f.encode(),
                            fuse_fell_back: false,
                        };
                    }
                    log::warn!(
                        "fuse filter over {keys} keys failed for {} seeds; using Bloom",
                        fuse::MAX_ATTEMPTS
                    );
                    (bits, true)
                }
            },
            TableFilter::Ribbon { .. } if keys == 0 => (1.0, false),
            TableFilter::Ribbon { bits_per_key } => {
                if ribbon::bits_and_fpr(keys, bits_per_key).is_none() {
                    // Too few keys (or bits) for Ribbon to beat Bloom: Bloom, by design.
                    (bits_per_key, false)
                } else if let Some(f) = RibbonFilter::build(&self.hashes, bits_per_key) {
                    return FinishedFilter {
                        block: f.encode(),
                        fuse_fell_back: false,
                    };
                } else {
                    log::warn!(
                        "Ribbon filter over {keys} keys failed for {} seeds; using Bloom",
                        ribbon::MAX_ATTEMPTS
                    );
                    (bits_per_key, true)
                }
            }
        };
        FinishedFilter {
            block: BloomFilter::build(&self.hashes, bits).encode(),
            fuse_fell_back,
        }
    }
}

fn encode_blocked(lines: &[Line], probes: u32, keys: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(lines.len() * 64 + TRAILER_LEN);
    bloom::lines_to_bytes(lines, &mut out);
    out.push(MARKER);
    out.push(KIND_BLOCKED_BLOOM);
    out.push(VERSION);
    out.push(HASH_XXH3_64);
    out.extend_from_slice(&0u32.to_le_bytes());
    out.push(probes as u8);
    out.extend_from_slice(&[0, 0, 0]);
    out.extend_from_slice(&(lines.len() as u32).to_le_bytes());
    out.extend_from_slice(&keys.to_le_bytes());
    seal(&mut out);
    out
}

/// Appends the filter checksum, `mask(crc32(everything before it))`, to a block.
fn seal(out: &mut Vec<u8>) {
    let crc = mask_crc(crc32fast::hash(out));
    out.extend_from_slice(&crc.to_le_bytes());
}

/// Rewrites the checksum at the end of a filter block so that it matches the bytes before it
/// (for tests and fuzzing, which forge filter fields).
#[cfg(any(test, fuzzing))]
pub(crate) fn reseal(block: &mut [u8]) {
    let n = block.len();
    let crc = mask_crc(crc32fast::hash(&block[..n - 4]));
    block[n - 4..].copy_from_slice(&crc.to_le_bytes());
}

/// Why a filter block could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterError {
    /// Offset inside the filter block of the problem.
    pub offset: u64,
    /// What is wrong.
    pub detail: String,
}

impl fmt::Display for FilterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (at filter offset {})", self.detail, self.offset)
    }
}

/// The decoded trailer of a filter block, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterTrailer {
    /// Family marker (0xF1 for siltdb filters).
    pub marker: u8,
    /// Filter kind (1 = blocked Bloom).
    pub kind: u8,
    /// Layout version.
    pub version: u8,
    /// Hash function id (1 = xxh3-64).
    pub hash_id: u8,
    /// Hash seed.
    pub seed: u32,
    /// Probes per key.
    pub probes: u8,
    /// Reserved bytes (0 when written by this version).
    pub reserved: [u8; 3],
    /// Number of 512-bit lines.
    pub lines: u32,
    /// Number of keys added.
    pub keys: u64,
    /// Stored checksum.
    pub crc: u32,
}

/// A filter loaded into memory, ready to answer "may this table hold the key?".
#[derive(Clone, PartialEq, Eq)]
pub enum Filter {
    /// A filter over zero keys: every key is definitely absent.
    Empty,
    /// A filter this build cannot interpret (unknown family, kind, version or hash): every key
    /// may be present. The string says why.
    Unknown(String),
    /// A blocked Bloom filter.
    Bloom(BloomFilter),
    /// A binary fuse filter.
    Fuse(FuseFilter),
    /// A Ribbon filter.
    Ribbon(RibbonFilter),
}

impl fmt::Debug for Filter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Filter::Empty => write!(f, "Filter::Empty"),
            Filter::Unknown(why) => write!(f, "Filter::Unknown({why})"),
            Filter::Bloom(b) => write!(
                f,
                "Filter::Bloom {{ lines: {}, keys: {}, probes: {} }}",
                b.lines.len(),
                b.keys,
                b.probes
            ),
            Filter::Fuse(x) => write!(
                f,
                "Filter::Fuse {{ fingerprint_bits: {}, slots: {}, keys: {} }}",
                x.fingerprint_bits(),
                x.array_length(),
                x.keys
            ),
            Filter::Ribbon(r) => write!(
                f,
                "Filter::Ribbon {{ geometry: {:?}, keys: {} }}",
                r.geometry(),
                r.keys()
            ),
        }
    }
}

/// A blocked Bloom filter in memory: 64-byte aligned lines.
#[derive(Clone)]
pub struct BloomFilter {
    lines: Vec<Line>,
    probes: u32,
    keys: u64,
    /// [`BloomFilter::predicted_fpr`] (as `f64` bits), computed the first time it is asked
    /// for: the Poisson sum costs a few hundred `powf` calls, and `Db::stats`/`Db::levels` ask
    /// for it for every table on every call. Not computed when a filter is decoded, so that a
    /// table open does not pay for it.
    predicted_fpr_bits: OnceLock<u64>,
}

/// Filters are equal when their lines, probes and keys are (the cached rate follows from
/// those).
impl PartialEq for BloomFilter {
    fn eq(&self, other: &Self) -> bool {
        self.lines == other.lines && self.probes == other.probes && self.keys == other.keys
    }
}

impl Eq for BloomFilter {}

/// The most bits per key [`BloomFilter::build`] spends: what an option may ask for.
const MAX_BUILD_BITS_PER_KEY: f64 = 100.0;

impl BloomFilter {
    /// Builds a filter over keys given by their [`hash_key`] hashes, at `bits_per_key`
    /// (fractions honoured; at least one line for a non-empty set). Duplicate hashes are
    /// harmless. This is what a table build does; it is public for benchmarks and tools.
    /// `bits_per_key` is taken within what [`Options`](crate::Options) accepts, `(0, 100]`: a
    /// larger one (or infinity) builds at 100, zero, a negative one or NaN at the least
    /// (one line).
    pub fn build(hashes: &[u64], bits_per_key: f64) -> BloomFilter {
        let bits = if bits_per_key.is_nan() {
            f64::MIN_POSITIVE
        } else {
            bits_per_key.clamp(f64::MIN_POSITIVE, MAX_BUILD_BITS_PER_KEY)
        };
        let (lines, probes) = bloom::build_lines(hashes, bits);
        BloomFilter::from_parts(lines, probes, hashes.len() as u64)
    }

    fn from_parts(lines: Vec<Line>, probes: u32, keys: u64) -> BloomFilter {
        BloomFilter {
            lines,
            probes,
            keys,
            predicted_fpr_bits: OnceLock::new(),
        }
    }

    /// The serialized filter block (payload and trailer), as stored in a table.
    pub fn encode(&self) -> Vec<u8> {
        encode_blocked(&self.lines, self.probes, self.keys)
    }

    /// Probes per key (`k`).
    pub fn probes(&self) -> u32 {
        self.probes
    }

    /// Number of 512-bit lines.
    pub fn lines(&self) -> u32 {
        self.lines.len() as u32
    }

    /// Keys the filter was built over (`n`).
    pub fn keys(&self) -> u64 {
        self.keys
    }

    /// Total bits (`m`).
    pub fn bits(&self) -> u64 {
        u64::from(self.lines()) * u64::from(LINE_BITS)
    }

    /// Bits per key actually allocated (`m / n`).
    pub fn bits_per_key(&self) -> f64 {
        if self.keys == 0 {
            0.0
        } else {
            self.bits() as f64 / self.keys as f64
        }
    }

    /// Bytes held in memory.
    pub fn memory_bytes(&self) -> usize {
        self.lines.len() * std::mem::size_of::<Line>()
    }

    /// True if the key with this hash may be present.
    #[inline]
    pub fn may_contain_hash(&self, hash: u64) -> bool {
        bloom::may_contain(&self.lines, hash, self.probes)
    }

    /// The line a hash maps to.
    pub fn line_of(&self, hash: u64) -> u32 {
        (((hash as u32 as u64) * u64::from(self.lines())) >> 32) as u32
    }

    /// Whether each probed bit of `hash` is set: `(bit position in line, set)`.
    pub fn probe_bits(&self, hash: u64) -> Vec<(u32, bool)> {
        let line = self.lines.get(self.line_of(hash) as usize);
        probe_positions(hash, self.probes)
            .map(|bit| {
                let set = line
                    .map(|l| (l.0[(bit >> 6) as usize & 7] >> (bit & 63)) & 1 == 1)
                    .unwrap_or(false);
                (bit, set)
            })
            .collect()
    }

    /// Bits set in each line.
    pub fn set_bits_per_line(&self) -> Vec<u32> {
        self.lines
            .iter()
            .map(|l| l.0.iter().map(|w| w.count_ones()).sum())
            .collect()
    }

    /// Fraction of all bits that are set.
    pub fn fill_ratio(&self) -> f64 {
        if self.lines.is_empty() {
            return 0.0;
        }
        let set: u64 = self.set_bits_per_line().iter().map(|&c| u64::from(c)).sum();
        set as f64 / self.bits() as f64
    }

    /// The false-positive rate theory predicts for this filter's `(m, n, k)`.
    pub fn predicted_fpr(&self) -> f64 {
        f64::from_bits(
            *self
                .predicted_fpr_bits
                .get_or_init(|| predicted_fpr(self.lines(), self.keys, self.probes).to_bits()),
        )
    }

    /// The false-positive rate estimated from the bits themselves: the mean over lines of
    /// `(bits set in line / 512)^k`, which is exact for a random absent key.
    pub fn estimated_fpr_from_lines(&self) -> f64 {
        if self.lines.is_empty() {
            return 0.0;
        }
        let sum: f64 = self
            .set_bits_per_line()
            .iter()
            .map(|&c| fpr_from_fill(f64::from(c) / f64::from(LINE_BITS), self.probes))
            .sum();
        sum / self.lines.len() as f64
    }
}

impl Filter {
    /// True if a key with this hash may be in the table.
    #[inline]
    pub fn may_contain_hash(&self, hash: u64) -> bool {
        match self {
            Filter::Bloom(b) => b.may_contain_hash(hash),
            Filter::Fuse(f) => f.may_contain_hash(hash),
            Filter::Ribbon(r) => r.may_contain_hash(hash),
            Filter::Empty => false,
            Filter::Unknown(_) => true,
        }
    }

    /// True if `key` may be in the table.
    pub fn may_contain(&self, key: &[u8]) -> bool {
        self.may_contain_hash(hash_key(key))
    }

    /// Bytes held in memory.
    pub fn memory_bytes(&self) -> usize {
        match self {
            Filter::Bloom(b) => b.memory_bytes(),
            Filter::Fuse(f) => f.memory_bytes(),
            Filter::Ribbon(r) => r.memory_bytes(),
            _ => 0,
        }
    }

    /// The false-positive rate theory predicts (1 for an unknown filter, 0 for an empty one).
    pub fn predicted_fpr(&self) -> f64 {
        match self {
            Filter::Bloom(b) => b.predicted_fpr(),
            Filter::Fuse(f) => f.predicted_fpr(),
            Filter::Ribbon(r) => r.predicted_fpr(),
            Filter::Empty => 0.0,
            Filter::Unknown(_) => 1.0,
        }
    }

    /// Keys the filter was built over (0 if unknown).
    pub fn keys(&self) -> u64 {
        match self {
            Filter::Bloom(b) => b.keys,
            Filter::Fuse(f) => f.keys,
            Filter::Ribbon(r) => r.keys(),
            _ => 0,
        }
    }

    /// Bits per key allocated (0 if empty or unknown).
    pub fn bits_per_key(&self) -> f64 {
        match self {
            Filter::Bloom(b) => b.bits_per_key(),
            Filter::Fuse(f) => f.bits_per_key(),
            Filter::Ribbon(r) => r.bits_per_key(),
            _ => 0.0,
        }
    }

    /// The filter's kind as `silt` and `levels()` name it: "bloom", "fuse4" .. "fuse16" (the
    /// fingerprint width), "ribbon", "empty" or "unknown".
    pub fn kind_name(&self) -> &'static str {
        // By width, from fuse::MIN_WIDTH (4) to fuse::MAX_WIDTH (16), the only ones decoded.
        const FUSE: [&str; 13] = [
            "fuse4", "fuse5", "fuse6", "fuse7", "fuse8", "fuse9", "fuse10", "fuse11", "fuse12",
            "fuse13", "fuse14", "fuse15", "fuse16",
        ];
        match self {
            Filter::Bloom(_) => "bloom",
            Filter::Fuse(f) => f
                .fingerprint_bits()
                .checked_sub(fuse::MIN_WIDTH)
                .and_then(|i| FUSE.get(i as usize))
                .copied()
                .unwrap_or("fuse"),
            Filter::Ribbon(_) => "ribbon",
            Filter::Empty => "empty",
            Filter::Unknown(_) => "unknown",
        }
    }
}

#[derive(Clone, PartialEq, Eq)]
enum FuseArray {
    Bits8(fuse::Fuse<Box<[u8]>>),
    Bits16(fuse::Fuse<Box<[u16]>>),
    Packed(fuse::Fuse<fuse::Packed>),
}

/// Runs `$body` with `$f` bound to the `fuse::Fuse` inside a [`FuseArray`].
macro_rules! with_fuse {
    ($array:expr, $f:ident => $body:expr) => {
        match $array {
            FuseArray::Bits8($f) => $body,
            FuseArray::Bits16($f) => $body,
            FuseArray::Packed($f) => $body,
        }
    };
}

/// A binary fuse filter in memory (see the layout in `docs/format.md`): an array of 4- to
/// 16-bit fingerprints; a key may be present iff its fingerprint equals the XOR of its 3 or 4
/// slots. False-positive rate `2^-bits`, at about `1.08 * bits` bits per key (4-wise, large
/// tables).
#[derive(Clone, PartialEq, Eq)]
pub struct FuseFilter {
    array: FuseArray,
    keys: u64,
}

/// Where one key lands in a fuse filter: what `silt sst filter --key` prints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FuseProbe {
    /// The key's slots (array indexes), one per segment of its window (`arity` of them).
    pub slots: Vec<u64>,
    /// The key's fingerprint.
    pub fingerprint: u32,
    /// The fingerprints stored in those slots.
    pub stored: Vec<u32>,
    /// True if the key may be present (fingerprint == XOR of the stored values).
    pub may_contain: bool,
}

impl FuseFilter {
    /// Builds a filter over keys given by their [`hash_key`] hashes with `fingerprint_bits`
    /// (4 to 16; 8 and 16 probe fastest) bit fingerprints. Duplicate hashes are harmless.
    /// `None` for another width, more than 2^29 keys, or no seed of [`FUSE_MAX_ATTEMPTS`] peels the
    /// set (a table then gets a Bloom filter). Public for benchmarks and tools.
    pub fn build(hashes: &[u64], fingerprint_bits: u32) -> Option<FuseFilter> {
        FuseFilter::build_with_arity(hashes, fingerprint_bits, fuse::DEFAULT_ARITY)
    }

    /// [`FuseFilter::build`] over hashes the caller gives up (no copy; what a table build
    /// does with the hashes it collected).
    pub fn build_owned(mut hashes: Vec<u64>, fingerprint_bits: u32) -> Option<FuseFilter> {
        FuseFilter::build_in_place(&mut hashes, fingerprint_bits, fuse::DEFAULT_ARITY)
    }

    /// [`FuseFilter::build`] with 3 or 4 slots per key (tables use 4; 3 is for comparison
    /// and for tests of readers). `None` for another arity.
    pub fn build_with_arity(hashes: &[u64], fingerprint_bits: u32, arity: u32) -> Option<Self> {
        let mut scratch = hashes.to_vec();
        FuseFilter::build_in_place(&mut scratch, fingerprint_bits, arity)
    }

    /// [`FuseFilter::build`] using `hashes` as scratch (see `fuse::build`).
    pub(crate) fn build_in_place(
        hashes: &mut Vec<u64>,
        fingerprint_bits: u32,
        arity: u32,
    ) -> Option<Self> {
        let array = match fingerprint_bits {
            8 => FuseArray::Bits8(fuse::build(hashes, arity, 8)?),
            16 => FuseArray::Bits16(fuse::build(hashes, arity, 16)?),
            w => FuseArray::Packed(fuse::build(hashes, arity, w)?),
        };
        Some(FuseFilter {
            array,
            keys: hashes.len() as u64,
        })
    }

    fn geometry(&self) -> &FuseGeometry {
        with_fuse!(&self.array, f => &f.geometry)
    }

    /// Fingerprint width in bits (4 to 16).
    pub fn fingerprint_bits(&self) -> u32 {
        use fuse::Array;
        with_fuse!(&self.array, f => f.fingerprints.width())
    }

    /// Slots per key (3 or 4).
    pub fn arity(&self) -> u32 {
        self.geometry().arity
    }

    /// The seed the construction settled on.
    pub fn seed(&self) -> u64 {
        with_fuse!(&self.array, f => f.seed)
    }

    /// Slots per segment (a power of two).
    pub fn segment_length(&self) -> u32 {
        self.geometry().segment_length()
    }

    /// Segments a key's first slot may fall in (the array holds `arity - 1` more).
    pub fn segment_count(&self) -> u32 {
        self.geometry().segment_count
    }

    /// Slots (fingerprints) in the array.
    pub fn array_length(&self) -> u64 {
        self.geometry().array_length()
    }

    /// Keys the filter was built over (distinct hashes).
    pub fn keys(&self) -> u64 {
        self.keys
    }

    /// Bytes held in memory (the fingerprint array).
    pub fn memory_bytes(&self) -> usize {
        fuse::Packed::stream_len(self.array_length(), self.fingerprint_bits()) as usize
    }

    /// Bits per key (`8 * bytes / keys`).
    pub fn bits_per_key(&self) -> f64 {
        bits_per_key_of(self.memory_bytes(), self.keys)
    }

    /// The false-positive rate: `2^-fingerprint_bits`.
    pub fn predicted_fpr(&self) -> f64 {
        (-f64::from(self.fingerprint_bits())).exp2()
    }

    /// Fraction of slots holding a zero fingerprint (about `2^-bits` plus the slots no key
    /// uses; a filter of random bytes would show `2^-bits`).
    pub fn zero_fraction(&self) -> f64 {
        use fuse::Array;
        let len = self.array_length() as usize;
        let zeros = with_fuse!(&self.array, f => f.fingerprints.zeros(len));
        zeros as f64 / len.max(1) as f64
    }

    /// True if the key with this hash may be present.
    #[inline]
    pub fn may_contain_hash(&self, hash: u64) -> bool {
        with_fuse!(&self.array, f => f.may_contain(hash))
    }

    /// The slots, fingerprint and stored values of a hash.
    pub fn probe(&self, hash: u64) -> FuseProbe {
        use fuse::Array;
        let (slots, fp) = with_fuse!(&self.array, f => f.explain(hash));
        let stored: Vec<u32> = slots
            .iter()
            .map(|&s| with_fuse!(&self.array, f => f.fingerprints.get(s).unwrap_or(0)))
            .collect();
        FuseProbe {
            slots: slots.iter().map(|&s| s as u64).collect(),
            fingerprint: fp,
            may_contain: fp == stored.iter().fold(0, |a, &b| a ^ b),
            stored,
        }
    }

    /// The serialized filter block (payload and trailer), as stored in a table.
    pub fn encode(&self) -> Vec<u8> {
        let g = *self.geometry();
        let mut out = Vec::with_capacity(self.memory_bytes() + TRAILER_LEN);
        {
            use fuse::Array;
            with_fuse!(&self.array, f => f.fingerprints.write_to(&mut out));
        }
        out.push(MARKER);
        out.push(KIND_BINARY_FUSE);
        out.push(FUSE_VERSION);
        out.push(HASH_XXH3_64);
        out.push(self.fingerprint_bits() as u8);
        out.push(g.arity as u8);
        out.push(g.segment_length_log2 as u8);
        out.push(0);
        out.extend_from_slice(&g.segment_count.to_le_bytes());
        out.extend_from_slice(&(self.keys as u32).to_le_bytes());
        out.extend_from_slice(&self.seed().to_le_bytes());
        seal(&mut out);
        out
    }
}

/// The decoded trailer of a binary fuse filter block, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FuseTrailer {
    /// Layout version (1).
    pub version: u8,
    /// Hash function id (1 = xxh3-64).
    pub hash_id: u8,
    /// Fingerprint width in bits (4 to 16).
    pub fingerprint_bits: u8,
    /// Slots per key (3 or 4).
    pub arity: u8,
    /// log2 of the segment length (at most 18).
    pub segment_length_log2: u8,
    /// Reserved (0).
    pub reserved: u8,
    /// Segments a key's first slot may fall in.
    pub segment_count: u32,
    /// Keys the filter was built over.
    pub keys: u32,
    /// The mixing seed.
    pub seed: u64,
}

/// Reads the fields of a binary fuse trailer as stored, checking nothing but the length (not
/// the marker, kind or checksum: see `decode` for that). Errors: a block shorter than the
/// 28-byte trailer is a `FilterError` at offset 0.
pub fn decode_fuse_trailer(block: &[u8]) -> Result<FuseTrailer, FilterError> {
    decode_trailer(block)?;
    let t = &block[block.len() - TRAILER_LEN..];
    let u32_at = |i: usize| u32::from_le_bytes([t[i], t[i + 1], t[i + 2], t[i + 3]]);
    let mut seed = [0u8; 8];
    seed.copy_from_slice(&t[16..24]);
    Ok(FuseTrailer {
        version: t[2],
        hash_id: t[3],
        fingerprint_bits: t[4],
        arity: t[5],
        segment_length_log2: t[6],
        reserved: t[7],
        segment_count: u32_at(8),
        keys: u32_at(12),
        seed: u64::from_le_bytes(seed),
    })
}

/// Decodes a checksum-verified block of the fuse kind.
fn decode_fuse(block: &[u8]) -> Result<Filter, FilterError> {
    let t = decode_fuse_trailer(block)?;
    let start = block.len() - TRAILER_LEN;
    if t.version != FUSE_VERSION {
        return Ok(Filter::Unknown(format!(
            "unknown fuse filter version {}",
            t.version
        )));
    }
    if t.hash_id != HASH_XXH3_64 || !(3..=4).contains(&t.arity) || t.reserved != 0 {
        return Ok(Filter::Unknown(format!(
            "unknown fuse hash id {} or arity {}",
            t.hash_id, t.arity
        )));
    }
    if !(fuse::MIN_WIDTH..=fuse::MAX_WIDTH).contains(&u32::from(t.fingerprint_bits)) {
        return Ok(Filter::Unknown(format!(
            "unknown fuse fingerprint width {}",
            t.fingerprint_bits
        )));
    }
    let bad = |at: usize, detail: String| FilterError {
        offset: (start + at) as u64,
        detail,
    };
    if u32::from(t.segment_length_log2) > 18 {
        return Err(bad(
            6,
            format!(
                "fuse segment length 2^{} is above 2^18",
                t.segment_length_log2
            ),
        ));
    }
    if t.segment_count == 0 {
        return Err(bad(8, "fuse filter has no segments".into()));
    }
    let geometry = FuseGeometry {
        arity: u32::from(t.arity),
        segment_length_log2: u32::from(t.segment_length_log2),
        segment_count: t.segment_count,
    };
    let slots = geometry.array_length();
    let width = u32::from(t.fingerprint_bits);
    if slots > u64::from(u32::MAX) || start as u64 != fuse::Packed::stream_len(slots, width) {
        return Err(bad(
            8,
            format!(
                "fuse filter of {slots} {}-bit slots holds {start} payload bytes",
                t.fingerprint_bits
            ),
        ));
    }
    let used_bits = (slots * u64::from(width)) % 8;
    if used_bits != 0 && start > 0 && block[start - 1] >> used_bits != 0 {
        return Err(FilterError {
            offset: (start - 1) as u64,
            detail: "fuse filter's unused bits after the last fingerprint are set".into(),
        });
    }
    if t.keys == 0 {
        return Ok(Filter::Empty);
    }
    if u64::from(t.keys) > slots {
        return Err(bad(
            12,
            format!("fuse filter of {slots} slots claims {} keys", t.keys),
        ));
    }
    let payload = &block[..start];
    let array = match width {
        8 => FuseArray::Bits8(fuse::Fuse {
            seed: t.seed,
            geometry,
            fingerprints: payload.into(),
        }),
        16 => FuseArray::Bits16(fuse::Fuse {
            seed: t.seed,
            geometry,
            fingerprints: payload
                .chunks_exact(2)
                .map(|c| u16::from_le_bytes([c[0], c[1]]))
                .collect(),
        }),
        w => FuseArray::Packed(fuse::Fuse {
            seed: t.seed,
            geometry,
            fingerprints: fuse::Packed::from_stream(payload, slots as usize, w),
        }),
    };
    Ok(Filter::Fuse(FuseFilter {
        array,
        keys: u64::from(t.keys),
    }))
}

/// Reads the trailer of a filter block without checking anything but its length.
pub fn decode_trailer(block: &[u8]) -> Result<FilterTrailer, FilterError> {
    let start = block
        .len()
        .checked_sub(TRAILER_LEN)
        .ok_or_else(|| FilterError {
            offset: 0,
            detail: format!(
                "filter block of {} bytes is shorter than its {TRAILER_LEN}-byte trailer",
                block.len()
            ),
        })?;
    let t = &block[start..];
    let u32_at = |i: usize| u32::from_le_bytes([t[i], t[i + 1], t[i + 2], t[i + 3]]);
    let mut keys = [0u8; 8];
    keys.copy_from_slice(&t[16..24]);
    Ok(FilterTrailer {
        marker: t[0],
        kind: t[1],
        version: t[2],
        hash_id: t[3],
        seed: u32_at(4),
        probes: t[8],
        reserved: [t[9], t[10], t[11]],
        lines: u32_at(12),
        keys: u64::from_le_bytes(keys),
        crc: u32_at(24),
    })
}

/// True if the block's stored checksum matches its bytes.
pub fn checksum_ok(block: &[u8]) -> bool {
    match decode_trailer(block) {
        Ok(t) => mask_crc(crc32fast::hash(&block[..block.len() - 4])) == t.crc,
        Err(_) => false,
    }
}

/// Decodes a filter block. A bad checksum or an inconsistent known layout is an error; a
/// well-formed block of an unknown kind decodes to [`Filter::Unknown`]. Allocates at most the
/// block's own size.
pub fn decode(block: &[u8]) -> Result<Filter, FilterError> {
    let t = decode_trailer(block)?;
    let start = block.len() - TRAILER_LEN;
    if !checksum_ok(block) {
        return Err(FilterError {
            offset: (start + 24) as u64,
            detail: "filter checksum mismatch".into(),
        });
    }
    if t.marker != MARKER {
        return Ok(Filter::Unknown(format!(
            "unknown filter family 0x{:02x}",
            t.marker
        )));
    }
    if t.kind == KIND_BINARY_FUSE {
        return decode_fuse(block);
    }
    if t.kind == KIND_RIBBON {
        return ribbon::decode(block);
    }
    if t.kind != KIND_BLOCKED_BLOOM {
        return Ok(Filter::Unknown(format!("unknown filter kind {}", t.kind)));
    }
    if t.version != VERSION {
        return Ok(Filter::Unknown(format!(
            "unknown filter version {}",
            t.version
        )));
    }
    if t.hash_id != HASH_XXH3_64 || t.seed != 0 {
        return Ok(Filter::Unknown(format!(
            "unknown hash id {} seed {}",
            t.hash_id, t.seed
        )));
    }
    if t.reserved != [0, 0, 0] || !(1..=30).contains(&t.probes) {
        return Ok(Filter::Unknown("reserved trailer fields are set".into()));
    }
    let payload = &block[..start];
    if payload.len() as u64 != u64::from(t.lines) * 64 {
        return Err(FilterError {
            offset: (start + 12) as u64,
            detail: format!(
                "filter declares {} lines but holds {} payload bytes",
                t.lines,
                payload.len()
            ),
        });
    }
    if t.keys == 0 {
        return Ok(Filter::Empty);
    }
    if t.lines == 0 {
        return Err(FilterError {
            offset: (start + 12) as u64,
            detail: format!("filter over {} keys has no lines", t.keys),
        });
    }
    Ok(Filter::Bloom(BloomFilter::from_parts(
        bloom::lines_from_bytes(payload),
        u32::from(t.probes),
        t.keys,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn build(keys: &[&[u8]], bpk: f64) -> Vec<u8> {
        let mut b = FilterBuilder::new();
        for k in keys {
            b.add_hash(hash_key(k));
        }
        b.finish(bpk)
    }

    #[test]
    fn roundtrip_and_no_false_negatives() {
        let keys: Vec<Vec<u8>> = (0..1000u32).map(|i| i.to_be_bytes().to_vec()).collect();
        let refs: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
        let block = build(&refs, 10.0);
        let f = decode(&block).unwrap();
        assert!(keys.iter().all(|k| f.may_contain(k)));
        let Filter::Bloom(b) = &f else { panic!() };
        assert_eq!(b.keys(), 1000);
        // 20 lines for 1000 keys is 10.24 bits/key, which gets 7 probes.
        assert_eq!(b.lines(), 20);
        assert_eq!(b.probes(), 7);
        assert!((b.bits_per_key() - 10.24).abs() < 0.01);
        assert!(b.fill_ratio() > 0.3 && b.fill_ratio() < 0.8);
        assert_eq!(b.set_bits_per_line().len(), 20);
        let t = decode_trailer(&block).unwrap();
        assert_eq!((t.marker, t.kind, t.version, t.hash_id), (0xF1, 1, 1, 1));
    }

    #[test]
    fn public_build_matches_the_table_builder() {
        let hashes: Vec<u64> = (0..500u32).map(|i| hash_key(&i.to_le_bytes())).collect();
        let mut b = FilterBuilder::new();
        for &h in &hashes {
            b.add_hash(h);
        }
        let built = BloomFilter::build(&hashes, 9.5);
        assert_eq!(built.encode(), b.finish(9.5));
        assert_eq!(decode(&built.encode()).unwrap(), Filter::Bloom(built));
    }

    #[test]
    fn cached_predicted_fpr_is_the_formula_and_equality_ignores_the_cache() {
        for (n, bpk) in [(1u32, 10.0), (500, 9.5), (3000, 4.2), (20_000, 14.0)] {
            let hashes: Vec<u64> = (0..n).map(|i| hash_key(&i.to_le_bytes())).collect();
            let built = BloomFilter::build(&hashes, bpk);
            let formula = predicted_fpr(built.lines(), built.keys(), built.probes());
            assert!(
                formula > 0.0 && formula < 1.0,
                "{n} keys at {bpk}: {formula}"
            );
            assert_eq!(built.predicted_fpr(), formula);
            let decoded = decode(&built.encode()).unwrap();
            // Equal before and after the decoded copy caches its rate.
            assert_eq!(decoded, Filter::Bloom(built.clone()));
            assert_eq!(decoded.predicted_fpr(), formula);
            assert_eq!(decoded, Filter::Bloom(built.clone()));
        }
    }

    #[test]
    fn empty_filter_rejects_everything() {
        let block = build(&[], 10.0);
        assert_eq!(block.len(), TRAILER_LEN);
        let f = decode(&block).unwrap();
        assert_eq!(f, Filter::Empty);
        assert!(!f.may_contain(b""));
        assert!(!f.may_contain(b"anything"));
    }

    #[test]
    fn unknown_kind_or_version_means_may_contain() {
        let block = build(&[b"a"], 10.0);
        for (pos, val) in [(0usize, 0x77u8), (1, 9), (2, 2), (3, 5), (9, 1)] {
            let mut b = block.clone();
            let start = b.len() - TRAILER_LEN;
            b[start + pos] = val;
            reseal(&mut b);
            let f = decode(&b).unwrap();
            assert!(matches!(f, Filter::Unknown(_)), "{pos}");
            assert!(f.may_contain(b"zzz"));
        }
    }

    #[test]
    fn a_bloom_build_takes_bits_per_key_within_what_options_accept() {
        // Infinity once sized u32::MAX lines (256 GiB: an abort).
        let hashes: Vec<u64> = (0..1000u64).map(|i| hash_key(&i.to_le_bytes())).collect();
        let at_100 = BloomFilter::build(&hashes, 100.0);
        for huge in [f64::INFINITY, 1e12, 101.0] {
            assert_eq!(
                BloomFilter::build(&hashes, huge).lines(),
                at_100.lines(),
                "{huge}"
            );
        }
        for tiny in [f64::NAN, 0.0, -5.0, f64::NEG_INFINITY] {
            let f = BloomFilter::build(&hashes, tiny);
            assert_eq!(f.lines(), 1, "{tiny}");
            assert!(hashes.iter().all(|&h| f.may_contain_hash(h)), "{tiny}");
        }
    }

    #[test]
    fn geometries_with_fields_no_filter_has_do_not_overflow() {
        let g = FuseGeometry {
            arity: 0,
            segment_length_log2: 40,
            segment_count: u32::MAX,
        };
        assert_eq!(g.segment_length(), u32::MAX);
        assert_eq!(g.array_length(), u64::MAX);
        let r = RibbonGeometry {
            blocks: 2,
            columns: u32::MAX,
            upper_start: 1,
        };
        assert_eq!(r.columns_of(1), u32::MAX);
        assert!(r.predicted_fpr() >= 0.0);
        // More words than 128 bits each fit in a u64.
        let huge = RibbonGeometry {
            blocks: u32::MAX,
            columns: u32::MAX,
            upper_start: 0,
        };
        let expect = huge.words() as f64 * 128.0;
        assert_eq!(huge.bits_per_key(1), expect);
        assert_eq!(huge.bits_per_key(0), expect);
    }

    #[test]
    fn every_bit_flip_is_detected() {
        let block = build(&[b"a", b"b", b"c"], 10.0);
        for bit in 0..block.len() * 8 {
            let mut b = block.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            assert!(decode(&b).is_err(), "bit {bit}");
        }
    }

    #[test]
    fn short_blocks_are_errors() {
        assert!(decode(&[]).is_err());
        assert!(decode(&[0xF1; 27]).is_err());
    }

    fn fuse_block(n: u32, bits: u32) -> (Vec<u64>, Vec<u8>) {
        let hashes: Vec<u64> = (0..n).map(|i| hash_key(&i.to_be_bytes())).collect();
        let f = FuseFilter::build(&hashes, bits).unwrap();
        (hashes, f.encode())
    }

    #[test]
    fn fuse_roundtrip_both_widths_and_arities() {
        let hashes: Vec<u64> = (0..3000u32).map(|i| hash_key(&i.to_le_bytes())).collect();
        for bits in [8u32, 16] {
            let f = FuseFilter::build_with_arity(&hashes, bits, 3).unwrap();
            assert_eq!(f.arity(), 3);
            let d = decode(&f.encode()).unwrap();
            assert_eq!(d, Filter::Fuse(f));
            assert!(hashes.iter().all(|&h| d.may_contain_hash(h)));
        }
        assert!(FuseFilter::build_with_arity(&hashes, 8, 5).is_none());
        assert!(FuseFilter::build(&hashes, 17).is_none());
        assert!(FuseFilter::build(&hashes, 3).is_none());
        for bits in 4..=16u32 {
            let f = FuseFilter::build(&hashes, bits).unwrap();
            assert_eq!(f.fingerprint_bits(), bits);
            let block = f.encode();
            assert_eq!(block.len(), f.memory_bytes() + TRAILER_LEN);
            let d = decode(&block).unwrap();
            assert_eq!(d, Filter::Fuse(f));
            assert!(hashes.iter().all(|&h| d.may_contain_hash(h)));
            assert_eq!(d.kind_name(), format!("fuse{bits}"));
            assert!((d.predicted_fpr() - (-(bits as f64)).exp2()).abs() < 1e-15);
        }
        for bits in [8u32, 16] {
            let (hashes, block) = fuse_block(5000, bits);
            let f = decode(&block).unwrap();
            let Filter::Fuse(x) = &f else { panic!("{f:?}") };
            assert_eq!(x.fingerprint_bits(), bits);
            assert_eq!(x.keys(), 5000);
            assert_eq!(block.len(), x.memory_bytes() + TRAILER_LEN);
            assert!(hashes.iter().all(|&h| f.may_contain_hash(h)));
            assert_eq!(f.kind_name(), if bits == 8 { "fuse8" } else { "fuse16" });
            let t = decode_fuse_trailer(&block).unwrap();
            assert_eq!((t.version, t.fingerprint_bits, t.arity), (1, bits as u8, 4));
            assert_eq!(decode_trailer(&block).unwrap().kind, KIND_BINARY_FUSE);
            let p = x.probe(hashes[0]);
            assert!(p.may_contain);
            assert_eq!(p.fingerprint, p.stored.iter().fold(0, |a, &b| a ^ b));
            assert_eq!(p.slots.len(), 4);
        }
    }

    #[test]
    fn fuse_every_bit_flip_is_detected() {
        let (_, block) = fuse_block(40, 8);
        for bit in 0..block.len() * 8 {
            let mut b = block.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            assert!(decode(&b).is_err(), "bit {bit}");
        }
    }

    #[test]
    fn fuse_unknown_parameters_read_as_may_contain() {
        let (_, block) = fuse_block(100, 8);
        let start = block.len() - TRAILER_LEN;
        // version, hash id, fingerprint width, arity, reserved
        for (pos, val) in [
            (2usize, 2u8),
            (3, 7),
            (4, 17),
            (4, 3),
            (5, 5),
            (5, 2),
            (7, 1),
        ] {
            let mut b = block.clone();
            b[start + pos] = val;
            reseal(&mut b);
            let f = decode(&b).unwrap();
            assert!(matches!(f, Filter::Unknown(_)), "{pos}");
            assert!(f.may_contain(b"anything"));
        }
    }

    #[test]
    fn fuse_inconsistent_geometry_is_an_error_at_its_field() {
        let (_, block) = fuse_block(100, 16);
        let start = block.len() - TRAILER_LEN;
        for (pos, val, field) in [(6usize, 19u8, 6u64), (6, 2, 8), (8, 0, 8), (8, 99, 8)] {
            let mut b = block.clone();
            b[start + pos] = val;
            if pos == 8 {
                b[start + 9..start + 12].fill(0);
            }
            reseal(&mut b);
            let e = decode(&b).unwrap_err();
            assert_eq!(e.offset, (start as u64) + field, "{pos}={val}");
        }
        let mut b = block.clone();
        b[start + 12..start + 16].copy_from_slice(&u32::MAX.to_le_bytes());
        reseal(&mut b);
        assert_eq!(decode(&b).unwrap_err().offset, start as u64 + 12);
        // Zero keys over a well-formed array: empty.
        let mut b = block.clone();
        b[start + 12..start + 16].fill(0);
        reseal(&mut b);
        assert_eq!(decode(&b).unwrap(), Filter::Empty);
    }

    #[test]
    fn fuse_false_positive_rate_is_two_to_the_minus_bits() {
        // Seeded: the keys and probes are fixed, so this is a deterministic check that the
        // measured rate is within 5% of 2^-8 over 2M absent keys (sd of the count ~ 1.4%).
        let (_, block) = fuse_block(200_000, 8);
        let f = decode(&block).unwrap();
        let probes = 2_000_000u32;
        let fp = (0..probes)
            .filter(|i| f.may_contain(&(u64::from(*i) | 1 << 40).to_le_bytes()))
            .count();
        let rate = fp as f64 / f64::from(probes);
        assert!((rate / f.predicted_fpr() - 1.0).abs() < 0.05, "{rate}");
        let (_, block) = fuse_block(200_000, 16);
        let f = decode(&block).unwrap();
        let fp = (0..probes)
            .filter(|i| f.may_contain(&(u64::from(*i) | 1 << 40).to_le_bytes()))
            .count();
        // 2^-16 * 2M = 30.5 expected.
        assert!((10..=60).contains(&fp), "{fp}");
        // A packed width: 2^-10 * 2M = 1953 expected.
        let (_, block) = fuse_block(200_000, 10);
        let f = decode(&block).unwrap();
        let fp = (0..probes)
            .filter(|i| f.may_contain(&(u64::from(*i) | 1 << 40).to_le_bytes()))
            .count();
        let rate = fp as f64 / f64::from(probes);
        assert!((rate / f.predicted_fpr() - 1.0).abs() < 0.05, "{rate}");
    }

    #[test]
    fn fuse_table_filter_falls_back_to_bloom_only_when_too_big() {
        let mut b = FilterBuilder::new();
        for i in 0..1000u32 {
            b.add_hash(hash_key(&i.to_le_bytes()));
        }
        let spec = TableFilter::Fuse {
            fingerprint_bits: 8,
            max_bits_per_key: 5.0,
        };
        let done = b.finish_as(spec);
        assert!(!done.fuse_fell_back);
        let f = decode(&done.block).unwrap();
        assert_eq!(f.kind_name(), "bloom");
        assert!(f.bits_per_key() <= 5.2, "{}", f.bits_per_key());
    }

    #[test]
    fn ribbon_table_filter_is_ribbon_bloom_for_tiny_sets_and_empty_for_none() {
        let build = |n: u32, bits: f64| {
            let mut b = FilterBuilder::new();
            for i in 0..n {
                b.add_hash(hash_key(&i.to_le_bytes()));
            }
            let done = b.finish_as(TableFilter::Ribbon { bits_per_key: bits });
            assert!(!done.fuse_fell_back);
            decode(&done.block).unwrap()
        };
        let f = build(5000, 7.0);
        assert_eq!(f.kind_name(), "ribbon");
        assert!(
            (f.bits_per_key() - 7.0).abs() < 0.05,
            "{}",
            f.bits_per_key()
        );
        assert!((0..5000u32).all(|i| f.may_contain(&i.to_le_bytes())));
        // Ten keys cannot fill 256 slots with one result bit each, and 40 keys would get a
        // Ribbon filter worse than Bloom: Bloom filters, by design.
        for n in [10, 40] {
            let f = build(n, 7.0);
            assert_eq!(f.kind_name(), "bloom");
            assert!((0..n).all(|i| f.may_contain(&i.to_le_bytes())));
        }
        assert_eq!(build(0, 7.0), Filter::Empty);
    }

    #[test]
    fn ribbon_false_positive_rate_is_within_five_percent_of_prediction() {
        let hashes: Vec<u64> = (0..70_000u32).map(|i| hash_key(&i.to_le_bytes())).collect();
        for bits in [5.0, 7.0, 9.6] {
            let f = RibbonFilter::build(&hashes, bits).unwrap();
            let probes = 1_000_000u64;
            let fp = (0..probes)
                .filter(|i| f.may_contain_hash(hash_key(&(i | 1 << 40).to_le_bytes())))
                .count();
            let rate = fp as f64 / probes as f64;
            assert!(
                (rate / f.predicted_fpr() - 1.0).abs() < 0.05,
                "{bits}: {rate} vs {}",
                f.predicted_fpr()
            );
        }
    }

    /// The keys of the no-false-negative properties: `keys`, a long key `repeat + 1` times and
    /// the empty key.
    fn with_edge_keys<'a>(keys: &'a [Vec<u8>], long: &'a [u8], repeat: usize) -> Vec<&'a [u8]> {
        let mut all: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
        all.push(long);
        all.push(b"");
        all.extend(std::iter::repeat_n(long, repeat));
        all
    }

    proptest! {
        #[test]
        fn ribbon_no_false_negatives_for_any_key_set(
            keys in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 100..400),
            long in proptest::collection::vec(any::<u8>(), 1000..3000),
            bits in 2.0f64..20.0,
            repeat in 0usize..3,
        ) {
            let all = with_edge_keys(&keys, &long, repeat);
            let hashes: Vec<u64> = all.iter().map(|k| hash_key(k)).collect();
            if let Some(f) = RibbonFilter::build(&hashes, bits) {
                let f = decode(&f.encode()).unwrap();
                for k in &all {
                    prop_assert!(f.may_contain(k));
                }
            }
        }

        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = decode(&bytes);
        }

        #[test]
        fn decode_never_panics_with_valid_crc(mut bytes in proptest::collection::vec(any::<u8>(), 28..300)) {
            reseal(&mut bytes);
            let _ = decode(&bytes);
        }

        #[test]
        fn fuse_decode_never_panics(mut bytes in proptest::collection::vec(any::<u8>(), 28..400), width in prop_oneof![Just(8u8), Just(16u8), 4u8..=16, any::<u8>()], log2 in 0u8..24, segs in 0u32..8, arity in 3u8..=4) {
            let n = bytes.len();
            let t = n - TRAILER_LEN;
            bytes[t] = MARKER;
            bytes[t + 1] = KIND_BINARY_FUSE;
            bytes[t + 2] = FUSE_VERSION;
            bytes[t + 3] = HASH_XXH3_64;
            bytes[t + 4] = width;
            bytes[t + 5] = arity;
            bytes[t + 6] = log2;
            bytes[t + 7] = 0;
            bytes[t + 8..t + 12].copy_from_slice(&segs.to_le_bytes());
            reseal(&mut bytes);
            if let Ok(f) = decode(&bytes) {
                let _ = f.may_contain(b"probe");
            }
        }

        #[test]
        fn fuse_no_false_negatives_for_any_key_set(
            keys in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 0..300),
            long in proptest::collection::vec(any::<u8>(), 1000..3000),
            width in 4u32..=16,
            repeat in 0usize..3,
        ) {
            let all = with_edge_keys(&keys, &long, repeat);
            let hashes: Vec<u64> = all.iter().map(|k| hash_key(k)).collect();
            let f = FuseFilter::build(&hashes, width).unwrap();
            let f = decode(&f.encode()).unwrap();
            for k in &all {
                prop_assert!(f.may_contain(k));
            }
        }

        #[test]
        fn no_false_negatives_for_any_key_set(
            keys in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 0..300),
            long in proptest::collection::vec(any::<u8>(), 1000..3000),
            bpk in 0.5f64..30.0,
        ) {
            let all = with_edge_keys(&keys, &long, 0);
            let f = decode(&build(&all, bpk)).unwrap();
            for k in &all {
                prop_assert!(f.may_contain(k));
            }
        }
    }
}
