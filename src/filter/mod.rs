//! Per-table filters: the serialized filter block, its reader, and sizing helpers.
//!
//! A filter block is the filter's payload followed by a fixed 28-byte trailer (see
//! `docs/format.md`):
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
    pub(crate) fn finish(&self, bits_per_key: f64) -> Vec<u8> {
        BloomFilter::build(&self.hashes, bits_per_key).encode()
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
    let crc = mask_crc(crc32fast::hash(&out));
    out.extend_from_slice(&crc.to_le_bytes());
    out
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
        }
    }
}

/// A blocked Bloom filter in memory: 64-byte aligned lines.
#[derive(Clone, PartialEq, Eq)]
pub struct BloomFilter {
    lines: Vec<Line>,
    probes: u32,
    keys: u64,
}

impl BloomFilter {
    /// Builds a filter over keys given by their [`hash_key`] hashes, at `bits_per_key`
    /// (fractions honoured; at least one line for a non-empty set). Duplicate hashes are
    /// harmless. This is what a table build does; it is public for benchmarks and tools.
    pub fn build(hashes: &[u64], bits_per_key: f64) -> BloomFilter {
        let (lines, probes) = bloom::build_lines(hashes, bits_per_key.max(f64::MIN_POSITIVE));
        BloomFilter {
            lines,
            probes,
            keys: hashes.len() as u64,
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
        predicted_fpr(self.lines(), self.keys, self.probes)
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
            _ => 0,
        }
    }

    /// The false-positive rate theory predicts (1 for an unknown filter, 0 for an empty one).
    pub fn predicted_fpr(&self) -> f64 {
        match self {
            Filter::Bloom(b) => b.predicted_fpr(),
            Filter::Empty => 0.0,
            Filter::Unknown(_) => 1.0,
        }
    }

    /// Keys the filter was built over (0 if unknown).
    pub fn keys(&self) -> u64 {
        match self {
            Filter::Bloom(b) => b.keys,
            _ => 0,
        }
    }

    /// Bits per key allocated (0 if empty or unknown).
    pub fn bits_per_key(&self) -> f64 {
        match self {
            Filter::Bloom(b) => b.bits_per_key(),
            _ => 0.0,
        }
    }
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
    Ok(Filter::Bloom(BloomFilter {
        lines: bloom::lines_from_bytes(payload),
        probes: u32::from(t.probes),
        keys: t.keys,
    }))
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
            let n = b.len();
            let crc = mask_crc(crc32fast::hash(&b[..n - 4]));
            b[n - 4..].copy_from_slice(&crc.to_le_bytes());
            let f = decode(&b).unwrap();
            assert!(matches!(f, Filter::Unknown(_)), "{pos}");
            assert!(f.may_contain(b"zzz"));
        }
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

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = decode(&bytes);
        }

        #[test]
        fn decode_never_panics_with_valid_crc(mut bytes in proptest::collection::vec(any::<u8>(), 28..300)) {
            let n = bytes.len();
            let crc = mask_crc(crc32fast::hash(&bytes[..n - 4]));
            bytes[n - 4..].copy_from_slice(&crc.to_le_bytes());
            let _ = decode(&bytes);
        }

        #[test]
        fn no_false_negatives_for_any_key_set(
            keys in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 0..300),
            long in proptest::collection::vec(any::<u8>(), 1000..3000),
            bpk in 0.5f64..30.0,
        ) {
            let mut all: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
            all.push(&long);
            all.push(b"");
            let f = decode(&build(&all, bpk)).unwrap();
            for k in &all {
                prop_assert!(f.may_contain(k));
            }
        }
    }
}
