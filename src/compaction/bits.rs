//! Bits per key for a table about to be written to a level, from the filter policy, the tree's
//! shape and the filter memory limit.

use crate::filter::allocation::{self, LevelShape};
use crate::options::{FilterPolicy, Options};
use crate::version::{Version, NUM_LEVELS};

/// The shape of the tree as the filter allocator sees it.
pub(crate) fn level_shapes(version: &Version) -> Vec<LevelShape> {
    version
        .levels
        .iter()
        .enumerate()
        .map(|(l, tables)| LevelShape {
            keys: tables.iter().map(|t| t.meta.entries).sum(),
            runs: if l == 0 { tables.len() as u32 } else { 1 },
        })
        .collect()
}

/// Bits per key the policy gives each level of a tree shaped like `shape`.
pub(crate) fn bits_per_level(opts: &Options, shape: &[LevelShape]) -> Vec<f64> {
    let total_keys: u64 = shape.iter().map(|l| l.keys).sum();
    let limit_bits = opts.filter_memory_limit.map(|b| b as f64 * 8.0);
    let bits: Vec<f64> = match &opts.filter_policy {
        FilterPolicy::None => vec![0.0; NUM_LEVELS],
        FilterPolicy::Uniform { bits_per_key } => vec![*bits_per_key; NUM_LEVELS],
        FilterPolicy::PerLevel(v) => (0..NUM_LEVELS)
            .map(|l| v.get(l).or(v.last()).copied().unwrap_or(0.0))
            .collect(),
        FilterPolicy::Monkey { bits_per_key } => {
            let mut avg = *bits_per_key;
            if let Some(limit) = limit_bits {
                if total_keys > 0 && avg * total_keys as f64 > limit {
                    let reduced = (limit / total_keys as f64).max(allocation::MIN_BITS);
                    log::info!(
                        "filter memory limit: Monkey average lowered from {avg:.2} to {reduced:.2} bits/key"
                    );
                    avg = reduced;
                }
            }
            let floor = if opts.filter_memory_limit.is_some() {
                allocation::MIN_BITS
            } else {
                0.0
            };
            return allocation::monkey(shape, avg, floor);
        }
    };
    match limit_bits {
        Some(limit) if total_keys > 0 => {
            let (fitted, changed) = allocation::fit_to_limit(shape, &bits, limit);
            if changed {
                log::info!(
                    "filter memory limit: bits per key by level lowered from {bits:?} to {fitted:?}"
                );
            }
            fitted
        }
        _ => bits,
    }
}

/// Bits per key for a table of `incoming_keys` keys about to join `level`.
pub(crate) fn bits_for_new_table(
    opts: &Options,
    version: &Version,
    level: usize,
    incoming_keys: u64,
) -> f64 {
    if opts.filter_policy == FilterPolicy::None {
        return 0.0;
    }
    let mut shape = level_shapes(version);
    shape[level].keys += incoming_keys;
    if level == 0 {
        shape[0].runs += 1;
    }
    bits_per_level(opts, &shape)[level]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(keys: &[u64]) -> Vec<LevelShape> {
        keys.iter()
            .enumerate()
            .map(|(l, &k)| LevelShape {
                keys: k,
                runs: if l == 0 && k > 0 { 2 } else { 1 },
            })
            .collect()
    }

    #[test]
    fn policies() {
        let s = shape(&[1000, 10_000, 100_000, 0, 0, 0, 0]);
        let o = Options::default().bloom_bits_per_key(7.5);
        assert_eq!(bits_per_level(&o, &s), vec![7.5; 7]);
        let o = Options::default().filter_policy(FilterPolicy::PerLevel(vec![12.0, 9.0]));
        assert_eq!(bits_per_level(&o, &s)[0], 12.0);
        assert_eq!(bits_per_level(&o, &s)[5], 9.0);
        let o = Options::default().filter_policy(FilterPolicy::Monkey { bits_per_key: 10.0 });
        let b = bits_per_level(&o, &s);
        assert!(b[0] > b[1] && b[1] > b[2], "{b:?}");
    }

    #[test]
    fn memory_limit_applies_to_every_policy_and_keeps_a_filter() {
        let s = shape(&[1000, 10_000, 100_000, 0, 0, 0, 0]);
        let limit_bytes = 111_000u64 * 4 / 8; // room for 4 bits/key on average
        for policy in [
            FilterPolicy::Uniform { bits_per_key: 10.0 },
            FilterPolicy::Monkey { bits_per_key: 10.0 },
        ] {
            let o = Options::default()
                .filter_policy(policy.clone())
                .filter_memory_limit(limit_bytes);
            let b = bits_per_level(&o, &s);
            let used: f64 = s.iter().zip(&b).map(|(l, b)| l.keys as f64 * b).sum();
            assert!(used <= limit_bytes as f64 * 8.0 * 1.001, "{policy:?} {b:?}");
            assert!(b[2] >= allocation::MIN_BITS, "{policy:?} {b:?}");
        }
    }
}
