//! The `ribbon_filter` fuzz target: Ribbon filter blocks (kind 3) whose trailer fields the
//! first input byte can set to valid values, so that the fuzzer reaches the decoder's layout
//! checks and the probe, not only the checksum.

use crate::filter::{self, Filter, RibbonFilter};

/// [`ribbon_filter`]'s first input byte: version 1, hash id 1, width 2^7, reserved 0.
pub const RIBBON_FIX_FIELDS: u8 = 1;
/// The geometry: `columns` (the stored one if 1..=30, else 1 plus it mod 30, lowered until it
/// fits), `blocks` and `upper_start` chosen so the words fill the payload, whose tail is cut
/// to whole 16-byte words. Unchanged for a well-formed block.
pub const RIBBON_FIX_GEOMETRY: u8 = 2;
/// Keys: a count above the slots is reduced modulo `slots + 1`.
pub const RIBBON_FIX_KEYS: u8 = 4;

/// A Ribbon filter block whose fields get past the checksum: the first byte is a set of
/// `RIBBON_FIX_*` flags, the rest the block (payload and trailer, zero-padded to a trailer).
/// The marker and kind are always set to a Ribbon filter's, the fields the flags name to
/// valid values, and the checksum is recomputed; then the block is decoded, and a decoded
/// Ribbon filter goes through [`check_ribbon`].
pub fn ribbon_filter(data: &[u8]) {
    super::fixed_block_target(data, ribbon_block_from, |f, block| {
        let _ = filter::decode_ribbon_trailer(block);
        match f {
            Filter::Ribbon(r) => check_ribbon(r, block),
            _ => return false,
        }
        true
    });
}

/// The block [`ribbon_filter`] decodes (see there).
pub fn ribbon_block_from(flags: u8, input: &[u8]) -> Vec<u8> {
    use crate::filter::{HASH_XXH3_64, KIND_RIBBON, MARKER, RIBBON_VERSION, TRAILER_LEN};
    let mut payload = input.to_vec();
    payload.resize(payload.len().max(TRAILER_LEN), 0);
    let mut t = payload.split_off(payload.len() - TRAILER_LEN);
    t[0] = MARKER;
    t[1] = KIND_RIBBON;
    if flags & RIBBON_FIX_FIELDS != 0 {
        t[2] = RIBBON_VERSION;
        t[3] = HASH_XXH3_64;
        t[5] = 7;
        t[6] = 0;
        t[7] = 0;
    }
    if flags & RIBBON_FIX_GEOMETRY != 0 {
        if payload.len() < 32 {
            payload.resize(32, 0);
        }
        payload.truncate(payload.len() / 16 * 16);
        let words = (payload.len() / 16) as u64;
        let u32_at = |i: usize| u64::from(u32::from_le_bytes([t[i], t[i + 1], t[i + 2], t[i + 3]]));
        let (blocks, upper) = (u32_at(8), u32_at(12));
        let c = u64::from(t[4]);
        let consistent = (1..=30).contains(&c)
            && blocks >= 2
            && upper <= blocks
            && blocks * c + (blocks - upper) == words;
        let columns = if (1..=30).contains(&t[4]) {
            u64::from(t[4])
        } else {
            1 + u64::from(t[4]) % 30
        };
        // blocks * columns + (blocks - upper_start) = words, upper_start <= blocks, blocks >= 2.
        if !consistent {
            for columns in (1..=columns).rev() {
                let blocks = words / columns;
                let extra = words - blocks * columns;
                if blocks >= 2 && extra <= blocks {
                    if let Ok(b) = u32::try_from(blocks) {
                        t[4] = columns as u8;
                        t[8..12].copy_from_slice(&b.to_le_bytes());
                        t[12..16].copy_from_slice(&((blocks - extra) as u32).to_le_bytes());
                    }
                    break;
                }
            }
        }
    }
    if flags & RIBBON_FIX_KEYS != 0 {
        let u32_at = |i: usize| u32::from_le_bytes([t[i], t[i + 1], t[i + 2], t[i + 3]]);
        let slots = u64::from(u32_at(8)) * 128;
        let keys = u64::from(u32_at(16));
        if keys > slots {
            let keys = (keys % (slots + 1)) as u32;
            t[16..20].copy_from_slice(&keys.to_le_bytes());
        }
    }
    payload.extend_from_slice(&t);
    crate::filter::reseal(&mut payload);
    payload
}

/// Probes a decoded Ribbon filter and calls its accessors; panics if its answers disagree (a
/// probe's verdict against `may_contain`, a window outside the slots, a column count other
/// than its block's) or if re-encoding it does not give back `block` and the same filter.
pub fn check_ribbon(f: &RibbonFilter, block: &[u8]) {
    let g = f.geometry();
    let mut hashes = vec![0, u64::MAX, u64::from(f.seed()), 0x9e37_79b9_7f4a_7c15];
    for k in [&b""[..], b"a", b"key", block] {
        hashes.push(filter::hash_key(k));
    }
    for h in hashes {
        let p = f.probe(h);
        assert_eq!(p.may_contain, f.may_contain_hash(h), "probe of {h:#x}");
        assert!(
            p.start < g.starts(),
            "start {} of {} slots",
            p.start,
            g.slots()
        );
        assert_eq!(
            p.columns_match.len() as u32,
            g.columns_of((p.start / 128) as u32)
        );
    }
    let fpr = f.predicted_fpr();
    assert!((0.0..=1.0).contains(&fpr), "predicted FPR {fpr}");
    let _ = (f.keys(), f.memory_bytes(), f.bits_per_key());
    let encoded = f.encode();
    match filter::decode(&encoded) {
        Ok(Filter::Ribbon(g)) if g == *f => {}
        other => panic!("a decoded Ribbon filter re-encodes to {other:?}"),
    }
    assert!(
        encoded == block,
        "a decoded Ribbon filter re-encodes to other bytes"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    const FIX_ALL: u8 = RIBBON_FIX_FIELDS | RIBBON_FIX_GEOMETRY | RIBBON_FIX_KEYS;

    /// Real Ribbon filter blocks over 300, 2,000 and 20,000 keys at 3.5, 7 and 12.25 bits per
    /// key, as (name, keys, block) (none over 0 keys: that is the empty Bloom filter).
    fn seeds() -> Vec<(String, u64, Vec<u8>)> {
        let mut out = Vec::new();
        for bits in [3.5f64, 7.0, 12.25] {
            for n in [300u32, 2000, 20_000] {
                let hashes: Vec<u64> = (0..n)
                    .map(|i| filter::hash_key(format!("key{i:05}").as_bytes()))
                    .collect();
                let block = match RibbonFilter::build(&hashes, bits) {
                    Some(f) => f.encode(),
                    None => continue,
                };
                out.push((format!("ribbon{bits}-{n}"), u64::from(n), block));
            }
        }
        out
    }

    /// The seeds decode to what they were built as, pass both targets' checks, and the fixes
    /// leave them unchanged.
    #[test]
    fn seeds_decode_and_survive_the_fixes() {
        let seeds = seeds();
        assert!(seeds.len() >= 9);
        for (name, n, block) in seeds {
            assert_eq!(ribbon_block_from(0, &block), block, "{name}");
            assert_eq!(ribbon_block_from(FIX_ALL, &block), block, "{name}");
            match filter::decode(&block).unwrap() {
                Filter::Ribbon(r) => assert_eq!(r.keys(), n),
                other => panic!("{name}: {other:?}"),
            }
            super::super::filter(&block);
            ribbon_filter(&[&[0u8][..], &block].concat());
            ribbon_filter(&[&[FIX_ALL][..], &block].concat());
        }
    }

    /// Arbitrary bytes behind every flag byte: decoded or refused, never a panic.
    #[test]
    fn arbitrary_inputs_behind_every_flag() {
        let mut x = 0x1234_5678u64;
        for len in [0usize, 1, 20, 28, 29, 44, 60, 61, 200, 1000] {
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                    (x >> 56) as u8
                })
                .collect();
            for flags in 0..8u8 {
                ribbon_filter(&[&[flags][..], &bytes].concat());
            }
        }
    }

    /// Regenerates the seed inputs of `filter` and `ribbon_filter`.
    #[test]
    #[ignore = "a tool, not a check: regenerates the fuzz seed inputs in fuzz/corpus"]
    fn write_seeds_ribbon() {
        let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
        for (name, _, block) in seeds() {
            for (target, tag, input) in [
                ("filter", "", block.clone()),
                ("ribbon_filter", "-plain", [&[0u8][..], &block].concat()),
                ("ribbon_filter", "-fixed", [&[FIX_ALL][..], &block].concat()),
            ] {
                let d = corpus.join(target);
                std::fs::create_dir_all(&d).unwrap();
                std::fs::write(d.join(format!("seed-{name}{tag}")), input).unwrap();
            }
        }
    }
}
