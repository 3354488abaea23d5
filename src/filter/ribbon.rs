//! The standard Ribbon filter (Dillinger & Walzer, "Ribbon filter: practically smaller than
//! Bloom and Xor", 2021), 128 coefficients wide, with interleaved solution storage and any
//! fractional number of bits per key: a static filter over an immutable key set a few percent
//! above the information-theoretic bound, where a Bloom filter is 44% above it.
//!
//! Each key is one linear equation over GF(2). Its 64-bit hash `h` (xxh3-64, already well
//! mixed) is moved by the filter's seed, `m = h ^ (seed * 0xd6e8feb86659fd93)`; then
//!
//! ```text
//! start  = mulhi(m, slots - 127)                          first slot of its 128-slot window
//! coeff  = (hilo(m * K1) as u128) << 64 | hilo(m * K2) | 1 which of the 128 slots it sums
//! result = m & 0xffff_ffff                                 the bits the sum must give
//! ```
//!
//! (`hilo(x)` = high 64 bits XOR low 64 bits of the 128-bit product.) The solution `S` has
//! `slots = 128 * blocks` rows; block `b` (slots `128b .. 128b + 127`) stores `cols(b)`
//! columns, `r` for the first `upper_start` blocks and `r + 1` for the rest, so the average
//! bits per slot is any fraction between `r` and `r + 1`. A key whose window starts in block
//! `b` may be present iff for every column `c < cols(b)`, the parity of
//! `coeff AND S[start .. start + 128][c]` equals bit `c` of `result`; an absent key passes a
//! column with probability 1/2, so the false-positive rate is `2^-cols(b)` for the block its
//! window starts in. A probe checks the first two columns without a branch between them,
//! then the rest only if both matched (see `docs/filters.md` for the variants measured).
//!
//! Construction ("banding"): keys are bucket-sorted by the block of their start, then each
//! equation is added by on-the-fly Gaussian elimination: while the row at its current pivot
//! slot is taken, XOR that row in and move to the new lowest set bit. An equation that
//! reduces to `0 = 0` is a duplicate (harmless); `0 = 1` means this seed fails, and the
//! build retries with the next seed, up to [`MAX_ATTEMPTS`]. Back-substitution then fills the
//! solution from the last slot down, one 128-bit window per column. Builds are deterministic.
//!
//! Scratch memory: the caller's hashes are bucket-sorted through a second buffer of 8 bytes
//! per key; the band holds a 16-byte coefficient row and a result row per slot (1 byte up to
//! 8 columns, 2 up to 16, else 4; the solution itself is `bits_per_key / 8` bytes per key):
//! at 7 bits per key about `8 + 17 * 1.04 ≈ 26` bytes per key beyond the hashes (up to
//! `8 + 20 * 1.13 ≈ 31` for wide filters near the largest key count), freed when the build returns.

/// Most seeds a build tries before it gives up.
pub const MAX_ATTEMPTS: u32 = 8;
/// Fewest result bits (columns) of the lower blocks.
pub const MIN_COLUMNS: u32 = 1;
/// One more than the most result bits of the lower blocks (30; upper blocks hold one more,
/// 31, so that a key's result bits fit in 32). A request needing more (about 31 bits per
/// key) gets a Bloom filter.
pub const MAX_COLUMNS: u32 = 31;
/// Keys a Ribbon filter may hold: slots and block counts must fit in 32 bits.
pub const MAX_KEYS: u64 = 1 << 30;

const K1: u64 = 0x9e37_79b9_7f4a_7c15;
const K2: u64 = 0xc28f_8282_2b65_0bed;
const SEED_STEP: u64 = 0xd6e8_feb8_6659_fd93;

#[inline(always)]
fn hilo(a: u64, k: u64) -> u64 {
    let p = u128::from(a) * u128::from(k);
    (p >> 64) as u64 ^ p as u64
}

/// One key's equation under a seed: start slot, coefficient row, result bits.
#[inline(always)]
pub(crate) fn equation(hash: u64, seed: u32, starts: u64) -> (usize, u128, u32) {
    equation_mixed(hash ^ seed_mix(seed), starts)
}

/// What a seed XORs into every key hash. The key hash is xxh3-64, already well mixed: the
/// seed only has to move it.
#[inline(always)]
fn seed_mix(seed: u32) -> u64 {
    u64::from(seed).wrapping_mul(SEED_STEP)
}

/// [`equation`] for a hash with the seed already mixed in.
#[inline(always)]
fn equation_mixed(m: u64, starts: u64) -> (usize, u128, u32) {
    let start = start_of(m, starts);
    let coeff = (u128::from(hilo(m, K1)) << 64) | u128::from(hilo(m, K2)) | 1;
    (start, coeff, m as u32)
}

/// Extra slots over keys a build asks for, as a fraction of the keys. Measured (see
/// `docs/filters.md`): with 3% a set of 70,000 keys fails for ~8% of seeds, one of a million
/// for all of them; the band needs ~0.75% more per doubling of the set beyond 100,000 keys.
/// Small sets get a little more for the ragged tail.
pub(crate) fn overhead(keys: u64) -> f64 {
    let n = keys.max(1) as f64;
    let growth = 0.0075 * (n / 100_000.0).log2().max(0.0);
    0.03 + growth + 0.48 / n.sqrt() / 100.0
}

/// The shape of a Ribbon filter: `blocks` of 128 slots, `columns` result bits in the first
/// `upper_start` blocks and `columns + 1` in the rest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// 128-slot blocks (at least 2).
    pub blocks: u32,
    /// Result bits of the lower blocks (1..=30).
    pub columns: u32,
    /// First block with `columns + 1` result bits (`blocks`: none).
    pub upper_start: u32,
}

impl Geometry {
    /// The geometry for `keys` keys at (about) `bits_per_key`, or `None` for more than
    /// 2^30 keys or a size outside what `columns` can express.
    pub fn for_keys(keys: u64, bits_per_key: f64) -> Option<Geometry> {
        if keys > MAX_KEYS || !bits_per_key.is_finite() {
            return None;
        }
        let keys = keys.max(1);
        let slots_wanted = (keys as f64 * (1.0 + overhead(keys))).ceil() as u64 + 127;
        let blocks = slots_wanted.div_ceil(128).max(2);
        let slots = blocks * 128;
        let total_bits = bits_per_key * keys as f64;
        let per_slot = total_bits / slots as f64;
        let columns = per_slot.floor();
        if columns < f64::from(MIN_COLUMNS) || columns >= f64::from(MAX_COLUMNS) {
            return None;
        }
        // Blocks that get one more column, so the total matches the request.
        // Rounded down, so that the filter never takes more than it was given.
        let extra = ((per_slot - columns) * blocks as f64).floor() as u64;
        let upper_start = blocks - extra.min(blocks);
        Some(Geometry {
            blocks: u32::try_from(blocks).ok()?,
            columns: columns as u32,
            upper_start: upper_start as u32,
        })
    }

    /// Slots (`128 * blocks`).
    pub fn slots(&self) -> u64 {
        u64::from(self.blocks) * 128
    }

    /// Start positions a key may get (`slots - 127`).
    pub fn starts(&self) -> u64 {
        self.slots().saturating_sub(127).max(1)
    }

    /// Result bits stored for block `b`.
    #[inline(always)]
    pub fn columns_of(&self, b: u32) -> u32 {
        self.columns
            .saturating_add(u32::from(b >= self.upper_start))
    }

    /// 128-bit words of the solution.
    pub fn words(&self) -> u64 {
        u64::from(self.blocks) * u64::from(self.columns)
            + u64::from(self.blocks - self.upper_start.min(self.blocks))
    }

    /// Index of block `b`'s first word.
    #[inline(always)]
    fn word_of(&self, b: u32) -> usize {
        let upper = b.saturating_sub(self.upper_start);
        (b as usize) * self.columns as usize + upper as usize
    }

    /// Bits per key of this geometry over `keys` keys.
    pub fn bits_per_key(&self, keys: u64) -> f64 {
        // In floating point: a geometry made by hand (its fields are public) may have more
        // words than 128 bits each fit in a `u64`.
        self.words() as f64 * 128.0 / keys.max(1) as f64
    }

    /// The false-positive rate: the mean over start positions of `2^-cols(block)`.
    pub fn predicted_fpr(&self) -> f64 {
        let lower = (u64::from(self.upper_start) * 128).min(self.starts());
        let upper = self.starts() - lower;
        let f = |c: u32| (-f64::from(c)).exp2();
        (lower as f64 * f(self.columns) + upper as f64 * f(self.columns.saturating_add(1)))
            / self.starts() as f64
    }
}

/// Bits per key and false-positive rate of a Ribbon filter over `keys` keys asking for
/// `bits_per_key`, or `None` where no geometry fits or a blocked Bloom filter of the same
/// size would do better (small sets, where the 127-slot tail and the two-block minimum cost
/// more than Ribbon saves): those tables get Bloom filters.
pub fn bits_and_fpr(keys: u64, bits_per_key: f64) -> Option<(f64, f64)> {
    let g = Geometry::for_keys(keys, bits_per_key)?;
    let (bits, fpr) = (g.bits_per_key(keys), g.predicted_fpr());
    (fpr < super::bloom::predicted_fpr_for_bits(bits)).then_some((bits, fpr))
}

/// A built Ribbon filter: its geometry, seed and solution words.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Ribbon {
    pub(crate) geometry: Geometry,
    pub(crate) seed: u32,
    /// The solution words, block by block.
    pub(crate) words: Box<[u128]>,
    /// `seed_mix(seed)` and `geometry.starts()`, kept so that a probe does not recompute them.
    mix: u64,
    starts: u64,
}

impl Ribbon {
    fn new(geometry: Geometry, seed: u32, words: Box<[u128]>) -> Ribbon {
        Ribbon {
            geometry,
            seed,
            words,
            mix: seed_mix(seed),
            starts: geometry.starts(),
        }
    }
}

/// The parity of a 128-bit word, where the target has a POPCNT instruction.
#[inline(always)]
#[cfg(target_feature = "popcnt")]
fn parity(x: u128) -> u32 {
    x.count_ones() & 1
}

/// The parity of a 128-bit word without POPCNT (not in the baseline x86-64 target): fold to
/// 64 bits, then sum the bits of each nibble into its low bit and add the 16 nibbles with one
/// multiply (the top nibble of the product collects them all).
#[inline(always)]
#[cfg(not(target_feature = "popcnt"))]
fn parity(x: u128) -> u32 {
    const NIBBLES: u64 = 0x1111_1111_1111_1111;
    let mut y = (x as u64) ^ ((x >> 64) as u64);
    y ^= y >> 1;
    y ^= y >> 2;
    (((y & NIBBLES).wrapping_mul(NIBBLES)) >> 60) as u32 & 1
}

/// The parities of two 128-bit words as bits 0 and 1: each folded to 32 bits, side by side
/// in one word, nibble sums, and one multiply by eight nibble ones, which collects the first
/// word's sum in nibble 7 and the second's in nibble 15 (no nibble sum exceeds 8, so nothing
/// carries between them).
#[inline(always)]
fn parity_pair(a: u128, b: u128) -> u32 {
    let fold = |x: u128| {
        let y = (x as u64) ^ ((x >> 64) as u64);
        (y ^ (y >> 32)) & 0xffff_ffff
    };
    let mut y = fold(a) | (fold(b) << 32);
    y ^= y >> 1;
    y ^= y >> 2;
    let sums = (y & 0x1111_1111_1111_1111).wrapping_mul(0x1111_1111);
    ((sums >> 28) & 1 | (sums >> 59) & 2) as u32
}

impl Ribbon {
    /// True if the key with this hash may be present.
    #[inline]
    pub(crate) fn may_contain(&self, hash: u64) -> bool {
        let g = &self.geometry;
        let (start, coeff, result) = equation_mixed(hash ^ self.mix, self.starts);
        let cols = g.columns_of((start >> 7) as u32);
        let (lo, hi, c_lo, c_hi) = match self.window(start, coeff, cols as usize) {
            Some(w) => w,
            None => return true,
        };
        let want = result & mask(cols);
        // The first two columns without a branch between them, their parities from one
        // multiply (an absent key passes both with probability 1/4, so the one exit branch
        // rarely mispredicts), then the rest, which only keys that may be present and a
        // quarter of the others reach.
        let (mut got, mut from) = (0u32, 0);
        if let ([l0, l1, ..], [h0, h1, ..]) = (lo, hi) {
            got = parity_pair((l0 & c_lo) ^ (h0 & c_hi), (l1 & c_lo) ^ (h1 & c_hi));
            if got != want & 3 {
                return false;
            }
            from = 2;
        }
        for (c, (&l, &h)) in lo.iter().zip(hi).enumerate().skip(from) {
            got |= parity((l & c_lo) ^ (h & c_hi)) << c;
        }
        got == want
    }

    /// The words of a key's window: `n` words from block `b`'s first column and from block
    /// `b + 1`'s (block `b`'s again when the window is aligned), and the coefficients shifted
    /// to meet them:
    /// `S[start + i] = bit (o + i) of block b` for `i < 128 - o`, `bit (i - (128 - o))` of
    /// block `b + 1` after, so `coeff << o` masks the first and `coeff >> (128 - o)` the
    /// second. `None` if the words are missing (a decoder bug: reads as "may contain").
    #[inline(always)]
    fn window(
        &self,
        start: usize,
        coeff: u128,
        n: usize,
    ) -> Option<(&[u128], &[u128], u128, u128)> {
        let g = &self.geometry;
        let b = (start >> 7) as u32;
        let o = (start & 127) as u32;
        let at = g.word_of(b);
        // Block b + 1's words follow block b's `n` (its column count).
        debug_assert_eq!(n, g.columns_of(b) as usize);
        let next = if o == 0 { at } else { at + n };
        let lo = self.words.get(at..at + n)?;
        let hi = self.words.get(next..next + n)?;
        Some((lo, hi, coeff << o, coeff.checked_shr(128 - o).unwrap_or(0)))
    }

    /// Where a key lands: its start slot, coefficient row, result bits and, per column,
    /// whether the stored solution gives that bit.
    pub(crate) fn explain(&self, hash: u64) -> (u64, u128, u32, Vec<bool>) {
        let g = &self.geometry;
        let (start, coeff, result) = equation_mixed(hash ^ self.mix, self.starts);
        let cols = g.columns_of((start >> 7) as u32);
        let bits = match self.window(start, coeff, cols as usize) {
            Some((lo, hi, c_lo, c_hi)) => lo
                .iter()
                .zip(hi)
                .enumerate()
                .map(|(c, (&l, &h))| parity((l & c_lo) ^ (h & c_hi)) == (result >> c) & 1)
                .collect(),
            None => vec![true; cols as usize],
        };
        (start as u64, coeff, result & mask(cols), bits)
    }
}

fn mask(cols: u32) -> u32 {
    if cols >= 32 {
        u32::MAX
    } else {
        (1u32 << cols) - 1
    }
}

/// Builds a Ribbon filter over `hashes` at `bits_per_key`. `None` if no
/// geometry fits or no seed of [`MAX_ATTEMPTS`] solves (two distinct keys can collide in
/// all 64 hash bits only as duplicates, which are harmless, so failures are rare).
pub(crate) fn build(hashes: &[u64], bits_per_key: f64) -> Option<Ribbon> {
    let geometry = Geometry::for_keys(hashes.len() as u64, bits_per_key)?;
    // Result rows as narrow as the widest block's columns allow: at 7 bits per key a byte per
    // slot instead of four (3 of the build's ~29 bytes of scratch per key).
    match geometry.columns_of(geometry.blocks - 1) {
        0..=8 => build_with::<u8>(hashes, geometry),
        9..=16 => build_with::<u16>(hashes, geometry),
        _ => build_with::<u32>(hashes, geometry),
    }
}

/// A result row of the banding: the result bits of one slot's equation.
trait ResultRow: Copy + Default + Eq + std::ops::BitXorAssign + Into<u32> {
    /// The low bits of `r` (the geometry guarantees the rest are not stored).
    fn low_bits(r: u32) -> Self;
}

impl ResultRow for u8 {
    fn low_bits(r: u32) -> Self {
        r as u8
    }
}

impl ResultRow for u16 {
    fn low_bits(r: u32) -> Self {
        r as u16
    }
}

impl ResultRow for u32 {
    fn low_bits(r: u32) -> Self {
        r
    }
}

fn build_with<R: ResultRow>(hashes: &[u64], geometry: Geometry) -> Option<Ribbon> {
    let keys = hashes.len() as u64;
    let slots = geometry.slots() as usize;
    let mut coeffs: Vec<u128> = Vec::new();
    let mut results: Vec<R> = Vec::new();
    let mut sorted: Vec<u64> = Vec::new();
    let attempts = if crate::sabotage::planted(crate::sabotage::Bug::RibbonBuildFails) {
        0
    } else {
        MAX_ATTEMPTS
    };
    for attempt in 0..attempts {
        let seed = attempt.wrapping_mul(0x9e37_79b9) ^ (keys as u32);
        #[cfg(test)]
        ATTEMPTS.with(|a| a.set(attempt + 1));
        bucket_sort(hashes, &mut sorted, seed, &geometry);
        if attempt == 0 {
            // Fresh zeroed memory (no pass writing zeros over it).
            coeffs = vec![0; slots];
            results = vec![R::default(); slots];
        } else {
            coeffs.fill(0);
            results.fill(R::default());
        }
        if band(&sorted, seed, &geometry, &mut coeffs, &mut results) {
            let words = back_substitute(&geometry, &coeffs, &results);
            return Some(Ribbon::new(geometry, seed, words));
        }
    }
    None
}

#[cfg(test)]
thread_local! {
    /// Seeds the last build on this thread tried (for tests).
    pub(crate) static ATTEMPTS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// log2 of the blocks above which [`bucket_sort`] sorts in two passes (1,024 blocks, about
/// 120,000 keys: larger than the tables a default tree writes).
const ONE_PASS_BLOCKS_LOG2: u32 = 10;

/// Sorts the hashes by the block their start falls in (a stable counting sort) into `out`.
/// Past 2^[`ONE_PASS_BLOCKS_LOG2`] blocks, one scatter would write to as many places at once
/// as there are blocks (a cache miss per key over the whole output); the sort then first
/// scatters by group of blocks (at most 1,024 groups, so the writes stay in cache) and then
/// sorts each group by block (a group of a few MB at most; a few hundred KB for 10M keys).
fn bucket_sort(hashes: &[u64], out: &mut Vec<u64>, seed: u32, g: &Geometry) {
    let blocks = g.blocks as usize;
    let starts = g.starts();
    let block_of = |h: u64| equation_start(h, seed, starts) >> 7;
    let shift =
        (usize::BITS - (blocks.max(1) - 1).leading_zeros()).saturating_sub(ONE_PASS_BLOCKS_LOG2);
    if out.len() != hashes.len() {
        *out = vec![0; hashes.len()];
    }
    let groups = counting_scatter(hashes, out, ((blocks - 1) >> shift) + 1, |h| {
        block_of(h) >> shift
    });
    if shift == 0 {
        return;
    }
    let mut scratch: Vec<u64> = Vec::new();
    let mut from = 0;
    for end in groups {
        let group = &mut out[from..end as usize];
        if group.len() > 1 {
            scratch.clear();
            scratch.extend_from_slice(group);
            let first = block_of(group[0]) >> shift << shift;
            counting_scatter(&scratch, group, 1 << shift, |h| block_of(h) - first);
        }
        from = end as usize;
    }
}

/// Writes `items` into `out` in order of `bucket` (a stable counting sort over `buckets`
/// buckets); returns each bucket's end in `out`.
fn counting_scatter(
    items: &[u64],
    out: &mut [u64],
    buckets: usize,
    bucket: impl Fn(u64) -> usize,
) -> Vec<u32> {
    let mut next = vec![0u32; buckets + 1];
    for &h in items {
        next[bucket(h) + 1] += 1;
    }
    for i in 1..next.len() {
        next[i] += next[i - 1];
    }
    for &h in items {
        let b = bucket(h);
        out[next[b] as usize] = h;
        next[b] += 1;
    }
    next.truncate(buckets);
    next
}

#[inline(always)]
fn equation_start(hash: u64, seed: u32, starts: u64) -> usize {
    start_of(hash ^ seed_mix(seed), starts)
}

/// The start slot of a hash with the seed mixed in: `m` scaled to `0..starts`.
#[inline(always)]
fn start_of(m: u64, starts: u64) -> usize {
    ((u128::from(m) * u128::from(starts)) >> 64) as usize
}

/// Adds every equation; false if one contradicts the others.
fn band<R: ResultRow>(
    sorted: &[u64],
    seed: u32,
    g: &Geometry,
    coeffs: &mut [u128],
    results: &mut [R],
) -> bool {
    let starts = g.starts();
    // Only the columns the widest (last) block stores: the rest of a key's result bits are
    // never checked, and keeping them would not fit a narrow row.
    let keep = mask(g.columns_of(g.blocks - 1));
    for &h in sorted {
        let (start, mut c, r) = equation(h, seed, starts);
        let mut r = R::low_bits(r & keep);
        let mut i = start;
        loop {
            // Every stored row's highest bit is at most its key's start + 127 < slots, and
            // XOR with stored rows keeps `c`'s there, so the pivot never leaves the band.
            let Some(row) = coeffs.get(i).copied() else {
                return false;
            };
            if row == 0 {
                coeffs[i] = c;
                results[i] = r;
                break;
            }
            c ^= row;
            r ^= results[i];
            if c == 0 {
                if r != R::default() {
                    return false;
                }
                break;
            }
            let tz = c.trailing_zeros();
            i += tz as usize;
            c >>= tz;
        }
    }
    true
}

/// Solves the banded system from the last slot down into interleaved column words.
fn back_substitute<R: ResultRow>(g: &Geometry, coeffs: &[u128], results: &[R]) -> Box<[u128]> {
    let mut words = vec![0u128; g.words() as usize].into_boxed_slice();
    let max_cols = (g.columns + 1) as usize;
    // state[c] bit k = S[i + k][c] for the slot i being solved.
    let mut state = vec![0u128; max_cols];
    for b in (0..g.blocks).rev() {
        let cols = g.columns_of(b) as usize;
        let base = b as usize * 128;
        for i in (base..base + 128).rev() {
            let row = coeffs[i];
            let r: u32 = results[i].into();
            for (c, s) in state.iter_mut().enumerate().take(cols) {
                let shifted = *s << 1;
                let bit = if row == 0 {
                    0
                } else {
                    (parity(row & shifted) ^ (r >> c)) & 1
                };
                *s = shifted | u128::from(bit);
            }
        }
        let at = g.word_of(b);
        words[at..at + cols].copy_from_slice(&state[..cols]);
    }
    words
}

/// Kind byte of the Ribbon filter.
pub const KIND_RIBBON: u8 = 3;
/// Current version of the Ribbon layout.
pub const RIBBON_VERSION: u8 = 1;
/// log2 of [`WIDTH`], as the trailer stores it.
const WIDTH_LOG2: u8 = 7;

/// A Ribbon filter in memory (see the layout in `docs/format.md`): 128-bit solution words,
/// `columns` or `columns + 1` per 128-slot block. A key may be present iff its equation holds
/// in every column of its block. False-positive rate `2^-columns` to `2^-(columns + 1)` by
/// block, at about `1.03 * columns` bits per key for tables of ~70,000 keys (more overhead
/// for sets of millions of keys, see `docs/filters.md`).
#[derive(Clone, PartialEq, Eq)]
pub struct RibbonFilter {
    pub(crate) ribbon: Ribbon,
    pub(crate) keys: u64,
}

/// Where one key lands in a Ribbon filter: what `silt sst filter --key` prints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RibbonProbe {
    /// First slot of the key's 128-slot window.
    pub start: u64,
    /// The key's 128 coefficients (bit `i`: slot `start + i` is in its sums).
    pub coefficients: u128,
    /// The result bits the sums must give (one per column of its block).
    pub result: u32,
    /// Per column: whether the stored solution gives that column's bit.
    pub columns_match: Vec<bool>,
    /// True if the key may be present (every column matches).
    pub may_contain: bool,
}

impl RibbonFilter {
    /// Builds a filter over keys given by their `hash_key` hashes at about `bits_per_key`
    /// (fractions honoured by giving some blocks one more column). Duplicate hashes are
    /// harmless. `None` if no geometry fits (fewer than ~1 result bit per slot: tiny sets at
    /// low bits per key, or more than 2^30 keys) or no seed of `RIBBON_MAX_ATTEMPTS` (8)
    /// solves the set (a table then gets a Bloom filter). Public for benchmarks and tools.
    pub fn build(hashes: &[u64], bits_per_key: f64) -> Option<RibbonFilter> {
        let ribbon = build(hashes, bits_per_key)?;
        Some(RibbonFilter {
            ribbon,
            keys: hashes.len() as u64,
        })
    }

    /// The filter's shape.
    pub fn geometry(&self) -> Geometry {
        self.ribbon.geometry
    }

    /// The seed the construction settled on.
    pub fn seed(&self) -> u32 {
        self.ribbon.seed
    }

    /// Keys the filter was built over.
    pub fn keys(&self) -> u64 {
        self.keys
    }

    /// Bytes held in memory (the solution words, as the block stores them).
    pub fn memory_bytes(&self) -> usize {
        self.ribbon.words.len() * 16
    }

    /// Bits per key (`8 * bytes / keys`).
    pub fn bits_per_key(&self) -> f64 {
        super::bits_per_key_of(self.memory_bytes(), self.keys)
    }

    /// The false-positive rate the geometry predicts.
    pub fn predicted_fpr(&self) -> f64 {
        self.ribbon.geometry.predicted_fpr()
    }

    /// True if the key with this hash may be present.
    #[inline]
    pub fn may_contain_hash(&self, hash: u64) -> bool {
        self.ribbon.may_contain(hash)
    }

    /// Where a hash lands and which columns match.
    pub fn probe(&self, hash: u64) -> RibbonProbe {
        let (start, coefficients, result, columns_match) = self.ribbon.explain(hash);
        RibbonProbe {
            start,
            coefficients,
            result,
            may_contain: columns_match.iter().all(|&m| m),
            columns_match,
        }
    }

    /// The serialized filter block (payload and trailer), as stored in a table.
    pub fn encode(&self) -> Vec<u8> {
        let g = self.ribbon.geometry;
        let mut out = Vec::with_capacity(self.memory_bytes() + super::TRAILER_LEN);
        for w in self.ribbon.words.iter() {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out.push(super::MARKER);
        out.push(KIND_RIBBON);
        out.push(RIBBON_VERSION);
        out.push(super::HASH_XXH3_64);
        out.push(g.columns as u8);
        out.push(WIDTH_LOG2);
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(&g.blocks.to_le_bytes());
        out.extend_from_slice(&g.upper_start.to_le_bytes());
        out.extend_from_slice(&(self.keys as u32).to_le_bytes());
        out.extend_from_slice(&self.ribbon.seed.to_le_bytes());
        super::seal(&mut out);
        out
    }
}

/// The decoded trailer of a Ribbon filter block, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RibbonTrailer {
    /// Layout version (1).
    pub version: u8,
    /// Hash function id (1 = xxh3-64).
    pub hash_id: u8,
    /// Result bits of the lower blocks (1 to 30).
    pub columns: u8,
    /// log2 of the coefficient width (7: 128 bits).
    pub width_log2: u8,
    /// Reserved (0).
    pub reserved: u16,
    /// 128-slot blocks.
    pub blocks: u32,
    /// First block with `columns + 1` result bits.
    pub upper_start: u32,
    /// Keys the filter was built over.
    pub keys: u32,
    /// The mixing seed.
    pub seed: u32,
}

/// Reads the fields of a Ribbon trailer as stored, checking nothing but the length (not the
/// marker, kind or checksum: see `decode` for that). Errors: a block shorter than the 28-byte
/// trailer is a `FilterError` at offset 0.
pub fn decode_trailer(block: &[u8]) -> Result<RibbonTrailer, super::FilterError> {
    super::decode_trailer(block)?;
    let t = &block[block.len() - super::TRAILER_LEN..];
    let u32_at = |i: usize| u32::from_le_bytes([t[i], t[i + 1], t[i + 2], t[i + 3]]);
    Ok(RibbonTrailer {
        version: t[2],
        hash_id: t[3],
        columns: t[4],
        width_log2: t[5],
        reserved: u16::from_le_bytes([t[6], t[7]]),
        blocks: u32_at(8),
        upper_start: u32_at(12),
        keys: u32_at(16),
        seed: u32_at(20),
    })
}

/// Decodes a checksum-verified block of the Ribbon kind.
pub(crate) fn decode(block: &[u8]) -> Result<super::Filter, super::FilterError> {
    use super::{Filter, FilterError};
    let t = decode_trailer(block)?;
    let start = block.len() - super::TRAILER_LEN;
    if t.version != RIBBON_VERSION {
        return Ok(Filter::Unknown(format!(
            "unknown Ribbon filter version {}",
            t.version
        )));
    }
    if t.hash_id != super::HASH_XXH3_64 || t.width_log2 != WIDTH_LOG2 || t.reserved != 0 {
        return Ok(Filter::Unknown(format!(
            "unknown Ribbon hash id {} or width 2^{}",
            t.hash_id, t.width_log2
        )));
    }
    let bad = |at: usize, detail: String| FilterError {
        offset: (start + at) as u64,
        detail,
    };
    if !(MIN_COLUMNS..MAX_COLUMNS).contains(&u32::from(t.columns)) {
        return Err(bad(4, format!("Ribbon filter with {} columns", t.columns)));
    }
    if t.blocks < 2 || t.upper_start > t.blocks {
        return Err(bad(
            8,
            format!(
                "Ribbon filter of {} blocks, upper blocks from {}",
                t.blocks, t.upper_start
            ),
        ));
    }
    let geometry = Geometry {
        blocks: t.blocks,
        columns: u32::from(t.columns),
        upper_start: t.upper_start,
    };
    if geometry.words().checked_mul(16) != Some(start as u64) {
        return Err(bad(
            8,
            format!(
                "Ribbon filter of {} words holds {start} payload bytes",
                geometry.words()
            ),
        ));
    }
    if t.keys == 0 {
        return Ok(Filter::Empty);
    }
    if u64::from(t.keys) > geometry.slots() {
        return Err(bad(
            16,
            format!(
                "Ribbon filter of {} slots claims {} keys",
                geometry.slots(),
                t.keys
            ),
        ));
    }
    let words = block[..start]
        .chunks_exact(16)
        .map(|c| u128::from_le_bytes(c.try_into().unwrap_or([0; 16])))
        .collect();
    Ok(Filter::Ribbon(RibbonFilter {
        ribbon: Ribbon::new(geometry, t.seed, words),
        keys: u64::from(t.keys),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::fuse::fmix64;

    #[test]
    fn bucket_sort_is_a_stable_sort_by_block_in_one_pass_and_in_two() {
        // 500 blocks sort in one pass; 300,000 keys (about 2,500 blocks) in two.
        for n in [60_000u64, 300_000] {
            let hs = hashes(n, 11);
            let g = Geometry::for_keys(n, 7.0).unwrap();
            let block = |h: u64| equation_start(h, 5, g.starts()) >> 7;
            let mut want = hs.clone();
            want.sort_by_key(|&h| block(h));
            let mut got = Vec::new();
            bucket_sort(&hs, &mut got, 5, &g);
            assert_eq!(got, want, "{n} keys, {} blocks", g.blocks);
            let f = RibbonFilter::build(&hs, 7.0).unwrap();
            assert!(hs.iter().all(|&h| f.may_contain_hash(h)));
        }
    }

    #[test]
    fn parities_are_the_bit_counts_mod_two() {
        let mut x = 0x0123_4567_89ab_cdef_u128;
        for i in 0..10_000u32 {
            x = x
                .wrapping_mul(0x2360_ed05_1fc6_5da4_4385_df64_9fcc_f645)
                .wrapping_add(1);
            let y = x >> (i % 128);
            assert_eq!(parity(y), y.count_ones() & 1, "{y:#x}");
        }
        for y in [
            0,
            1,
            u128::MAX,
            u128::MAX >> 1,
            u128::from(u64::MAX),
            1 << 127,
            0x1111,
        ] {
            assert_eq!(parity(y), y.count_ones() & 1, "{y:#x}");
        }
    }

    fn hashes(n: u64, salt: u64) -> Vec<u64> {
        (0..n)
            .map(|i| fmix64(i ^ (salt << 40)).wrapping_add(salt))
            .collect()
    }

    #[test]
    fn no_false_negatives_and_rate_near_prediction() {
        for (n, bits) in [
            (300u64, 12.0),
            (1000, 6.5),
            (70_000, 7.0),
            (70_000, 9.3),
            (70_000, 3.4),
        ] {
            let keys = hashes(n, n);
            let r = build(&keys, bits).expect("builds");
            for &h in &keys {
                assert!(r.may_contain(h), "false negative at n={n}");
            }
            let probes = 400_000u64;
            let fp = hashes(probes, 99 + n)
                .iter()
                .filter(|&&h| r.may_contain(h))
                .count();
            let measured = fp as f64 / probes as f64;
            let predicted = r.geometry.predicted_fpr();
            assert!(
                (measured - predicted).abs() < 0.1 * predicted + 0.0005,
                "n={n} bits={bits}: measured {measured} predicted {predicted}"
            );
        }
    }

    #[test]
    fn block_boundaries_and_duplicates() {
        for n in (120u64..140).chain(250..262).chain(1015..1030) {
            let mut keys = hashes(n, 7 * n);
            // Duplicates are harmless: the same equation twice reduces to 0 = 0.
            keys.extend_from_slice(&keys.clone()[..(n as usize / 3)]);
            let r = build(&keys, 9.0).unwrap_or_else(|| panic!("n={n}"));
            assert!(keys.iter().all(|&h| r.may_contain(h)), "n={n}");
        }
    }

    #[test]
    fn fractional_bits_are_honoured_and_buy_lower_rates() {
        let keys = hashes(70_000, 3);
        let mut last = 1.0;
        for bits in [4.0, 6.0, 6.25, 6.5, 6.75, 7.0, 12.3] {
            let f = RibbonFilter::build(&keys, bits).unwrap();
            assert!(
                (f.bits_per_key() - bits).abs() < 0.05,
                "{bits}: {}",
                f.bits_per_key()
            );
            let p = f.predicted_fpr();
            assert!(p < last, "{bits}: {p} >= {last}");
            last = p;
        }
        // A set too small for one result bit per slot has no Ribbon geometry.
        assert!(Geometry::for_keys(10, 7.0).is_none());
        assert!(Geometry::for_keys(MAX_KEYS + 1, 7.0).is_none());
        assert!(Geometry::for_keys(1000, f64::NAN).is_none());
    }

    fn small_block() -> Vec<u8> {
        RibbonFilter::build(&hashes(300, 1), 12.0).unwrap().encode()
    }

    #[test]
    fn codec_roundtrips_and_every_flipped_byte_is_caught() {
        let f = RibbonFilter::build(&hashes(5000, 2), 7.5).unwrap();
        let block = f.encode();
        assert_eq!(block.len(), f.memory_bytes() + crate::filter::TRAILER_LEN);
        let t = decode_trailer(&block).unwrap();
        assert_eq!(
            (t.version, t.hash_id, t.width_log2, t.keys),
            (1, 1, 7, 5000)
        );
        match crate::filter::decode(&block).unwrap() {
            crate::filter::Filter::Ribbon(g) => assert!(g == f),
            other => panic!("{other:?}"),
        }
        let block = small_block();
        for i in 0..block.len() {
            let mut b = block.clone();
            b[i] ^= 0x20;
            assert!(crate::filter::decode(&b).is_err(), "flip at {i} not caught");
        }
        for cut in [0, 1, 27, block.len() - 1] {
            assert!(crate::filter::decode(&block[..cut]).is_err(), "cut {cut}");
        }
    }

    #[test]
    fn unknown_versions_read_as_may_contain_and_bad_layouts_are_errors() {
        use crate::filter::{decode, reseal, Filter, TRAILER_LEN};
        let block = small_block();
        let at = block.len() - TRAILER_LEN;
        for (field, value) in [(2usize, 2u8), (3, 9), (5, 6), (6, 1)] {
            let mut b = block.clone();
            b[at + field] = value;
            reseal(&mut b);
            assert!(
                matches!(decode(&b), Ok(Filter::Unknown(_))),
                "field {field}"
            );
        }
        let set_u32 = |b: &mut Vec<u8>, field: usize, v: u32| {
            b[at + field..at + field + 4].copy_from_slice(&v.to_le_bytes());
            reseal(b);
        };
        let mut cases: Vec<(Vec<u8>, u64)> = Vec::new();
        for (field, value) in [(8usize, 1u32), (8, 3), (12, 1000), (16, 100_000)] {
            let mut b = block.clone();
            set_u32(&mut b, field, value);
            let offset = if field == 12 { 8 } else { field as u64 };
            cases.push((b, offset));
        }
        for columns in [0u8, 31, 200] {
            let mut b = block.clone();
            b[at + 4] = columns;
            reseal(&mut b);
            cases.push((b, 4));
        }
        for (b, offset) in cases {
            let e = decode(&b).unwrap_err();
            assert_eq!(e.offset, at as u64 + offset, "{e}");
        }
        // Zero keys: the empty filter, whatever the payload.
        let mut b = block.clone();
        set_u32(&mut b, 16, 0);
        assert_eq!(decode(&b).unwrap(), Filter::Empty);
    }

    #[test]
    fn probes_explain_the_verdict() {
        let keys = hashes(3000, 4);
        let f = RibbonFilter::build(&keys, 8.0).unwrap();
        let g = f.geometry();
        for h in keys.iter().copied().chain(hashes(3000, 5)) {
            let p = f.probe(h);
            assert_eq!(p.may_contain, f.may_contain_hash(h));
            assert!(p.start < g.starts());
            assert_eq!(p.coefficients & 1, 1);
            assert_eq!(
                p.columns_match.len() as u32,
                g.columns_of((p.start / 128) as u32)
            );
        }
    }

    proptest::proptest! {
        #[test]
        fn no_false_negatives(n in 0u64..3000, salt in proptest::prelude::any::<u64>(), bits in 1.2f64..24.0) {
            let keys = hashes(n, salt);
            if let Some(r) = build(&keys, bits) {
                proptest::prop_assert!(keys.iter().all(|&h| r.may_contain(h)));
            } else {
                proptest::prop_assert!(Geometry::for_keys(n, bits).is_none());
            }
        }

        #[test]
        fn arbitrary_blocks_decode_or_fail_cleanly(mut payload in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600), fields in proptest::collection::vec(proptest::prelude::any::<u8>(), 26)) {
            use crate::filter::{decode, reseal, MARKER};
            payload.extend_from_slice(&[MARKER, KIND_RIBBON]);
            payload.extend_from_slice(&fields);
            reseal(&mut payload);
            if let Ok(f) = decode(&payload) {
                for h in [0u64, 1, u64::MAX, 0x1234_5678_9abc_def0] {
                    let _ = f.may_contain_hash(h);
                }
                if let crate::filter::Filter::Ribbon(r) = &f {
                    let _ = r.probe(7);
                    proptest::prop_assert_eq!(r.encode(), payload);
                }
            }
        }
    }
}
