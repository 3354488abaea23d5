//! How many bits per key each level's filters get.
//!
//! An absent-key get probes the filter of every table whose key range holds the key: each
//! overlapping L0 table, then at most one table per deeper level. Its expected wasted block
//! reads are the sum of those filters' false-positive rates, each weighted by how often a get
//! meets it. Monkey (Dayan et al., SIGMOD 2017) minimizes that sum for a fixed filter memory:
//! with the Lagrangian, each level gets the bits where the marginal FPR saved per bit spent is
//! the same everywhere, so small levels (cheap to protect) get many bits and the largest level
//! a little under the average.
//!
//! Two refinements over the paper's setting, both measured (see `docs/filters.md`):
//! - Each level is weighted by the expected number of its tables an absent key meets
//!   ([`LevelShape::probes`]), not assumed to be probed by every get: a tree built by a load
//!   often has levels that cover only part of the key space.
//! - The curve is the blocked Bloom filter's own FPR (one-line filters gain less from extra
//!   bits than unblocked ones), solved numerically.

use super::bloom::predicted_fpr_for_bits;
use std::sync::OnceLock;

/// Bits-per-key grid step of the solver.
const STEP: f64 = 0.05;
/// Largest bits per key the solver hands out.
const MAX_BITS: f64 = 40.0;
/// The least bits per key a memory limit may reduce a level to: a limit never removes
/// filtering altogether.
pub(crate) const MIN_BITS: f64 = 1.0;

/// One level as the allocator sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct LevelShape {
    /// Keys held in the level.
    pub(crate) keys: u64,
    /// Expected number of this level's tables an absent-key get probes (L0: up to its table
    /// count; deeper levels: the fraction of the key space the level covers, at most 1).
    pub(crate) probes: f64,
    /// True if the level's filter memory counts against the budget. L0 is transient (its
    /// tables are rewritten within seconds), so its extra bits are not paid for by the levels
    /// that hold the data for good.
    pub(crate) in_budget: bool,
}

fn fpr_grid() -> &'static [f64] {
    static GRID: OnceLock<Vec<f64>> = OnceLock::new();
    GRID.get_or_init(|| {
        let n = (MAX_BITS / STEP) as usize;
        (0..=n)
            .map(|i| {
                if i == 0 {
                    1.0
                } else {
                    predicted_fpr_for_bits(i as f64 * STEP)
                }
            })
            .collect()
    })
}

/// The FPR of a blocked Bloom filter at `bits` per key (0 bits: no filter, FPR 1).
#[cfg(test)]
pub(crate) fn fpr_at(bits: f64) -> f64 {
    let grid = fpr_grid();
    let i = (bits / STEP).round().clamp(0.0, (grid.len() - 1) as f64) as usize;
    grid[i]
}

/// For multiplier `mu`: each level's bits minimizing `probes * fpr(b) + mu * keys * b`.
fn best_for(levels: &[LevelShape], mu: f64, floor: f64) -> Vec<f64> {
    let grid = fpr_grid();
    let start = (floor / STEP).ceil() as usize;
    levels
        .iter()
        .map(|l| {
            if l.keys == 0 {
                return 0.0;
            }
            // A level that holds keys is never left without a filter by a zero weight.
            let runs = l.probes.max(0.01);
            let keys = l.keys as f64;
            let mut best = (f64::INFINITY, 0usize);
            for (i, &f) in grid.iter().enumerate().skip(start) {
                let cost = runs * f + mu * keys * (i as f64 * STEP);
                if cost < best.0 {
                    best = (cost, i);
                }
            }
            best.1 as f64 * STEP
        })
        .collect()
}

fn memory_bits(levels: &[LevelShape], bits: &[f64]) -> f64 {
    levels
        .iter()
        .zip(bits)
        .map(|(l, b)| l.keys as f64 * b)
        .sum()
}

fn budget_bits(levels: &[LevelShape], bits: &[f64]) -> f64 {
    levels
        .iter()
        .zip(bits)
        .filter(|(l, _)| l.in_budget)
        .map(|(l, b)| l.keys as f64 * b)
        .sum()
}

/// Monkey: bits per key for each level so that the levels in the budget hold
/// `avg_bits * their keys` bits and the weighted sum of FPRs is minimal. Levels without keys
/// get 0.
pub(crate) fn monkey(levels: &[LevelShape], avg_bits: f64, floor: f64) -> Vec<f64> {
    let total_keys: u64 = levels.iter().filter(|l| l.in_budget).map(|l| l.keys).sum();
    if total_keys == 0 || avg_bits <= 0.0 {
        return vec![avg_bits.max(0.0); levels.len()];
    }
    let budget = avg_bits * total_keys as f64;
    // Bisection on log(mu): larger mu, fewer bits.
    let (mut lo, mut hi) = (-60.0f64, 10.0f64);
    let mut best = best_for(levels, hi.exp(), floor);
    for _ in 0..60 {
        let mid = 0.5 * (lo + hi);
        let bits = best_for(levels, mid.exp(), floor);
        if budget_bits(levels, &bits) > budget {
            lo = mid;
        } else {
            hi = mid;
            best = bits;
        }
    }
    best
}

/// Lowers bits per key, largest levels first, until the levels' filters fit in
/// `limit_bits`; never below [`MIN_BITS`]. Returns the new bits and whether they had to change.
pub(crate) fn fit_to_limit(
    levels: &[LevelShape],
    bits: &[f64],
    limit_bits: f64,
) -> (Vec<f64>, bool) {
    let mut out = bits.to_vec();
    if memory_bits(levels, &out) <= limit_bits {
        return (out, false);
    }
    let mut order: Vec<usize> = (0..levels.len()).collect();
    order.sort_by(|&a, &b| levels[b].keys.cmp(&levels[a].keys));
    for &i in &order {
        if levels[i].keys == 0 || out[i] <= MIN_BITS {
            continue;
        }
        let others = memory_bits(levels, &out) - levels[i].keys as f64 * out[i];
        let room = (limit_bits - others) / levels[i].keys as f64;
        if room >= out[i] {
            break;
        }
        out[i] = room.max(MIN_BITS);
        if memory_bits(levels, &out) <= limit_bits {
            break;
        }
    }
    (out, true)
}

/// Expected wasted data-block reads of an absent-key get: the probe-weighted sum of FPRs.
#[cfg(test)]
pub(crate) fn expected_wasted_reads(levels: &[LevelShape], bits: &[f64]) -> f64 {
    levels
        .iter()
        .zip(bits)
        .filter(|(l, _)| l.keys > 0)
        .map(|(l, &b)| l.probes * fpr_at(b))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(sizes: &[u64]) -> Vec<LevelShape> {
        sizes
            .iter()
            .map(|&keys| LevelShape {
                keys,
                probes: 1.0,
                in_budget: true,
            })
            .collect()
    }

    #[test]
    fn monkey_keeps_the_budget_and_favours_small_levels() {
        let levels = tree(&[10_000, 100_000, 1_000_000, 10_000_000]);
        let bits = monkey(&levels, 10.0, 0.0);
        let total: u64 = levels.iter().map(|l| l.keys).sum();
        let used = memory_bits(&levels, &bits);
        assert!(used <= 10.0 * total as f64 * 1.0001, "{used}");
        assert!(used >= 10.0 * total as f64 * 0.99, "{used}");
        assert!(bits.windows(2).all(|w| w[0] >= w[1]), "{bits:?}");
        assert!(bits[3] < 10.0 && bits[0] > 15.0, "{bits:?}");
        let uniform = expected_wasted_reads(&levels, &[10.0; 4]);
        let mk = expected_wasted_reads(&levels, &bits);
        assert!(uniform / mk > 2.0, "uniform {uniform} monkey {mk}");
    }

    fn shape(keys: u64, probes: f64, in_budget: bool) -> LevelShape {
        LevelShape {
            keys,
            probes,
            in_budget,
        }
    }

    #[test]
    fn more_probes_more_bits() {
        let one = monkey(
            &[shape(40_000, 1.0, true), shape(1_000_000, 1.0, true)],
            10.0,
            0.0,
        );
        let four = monkey(
            &[shape(40_000, 4.0, true), shape(1_000_000, 1.0, true)],
            10.0,
            0.0,
        );
        assert!(four[0] > one[0], "{one:?} {four:?}");
    }

    #[test]
    fn partitioned_levels_are_not_starved() {
        // Two big levels that each cover half the key space: a get meets one of them, so
        // the smaller one must not be favoured as if every get met both.
        let half = monkey(
            &[shape(800_000, 0.5, true), shape(1_600_000, 0.5, true)],
            10.0,
            0.0,
        );
        let full = monkey(
            &[shape(800_000, 1.0, true), shape(1_600_000, 0.5, true)],
            10.0,
            0.0,
        );
        assert!(full[0] > half[0], "{half:?} {full:?}");
        let w = |b: &[f64], p: [f64; 2]| p[0] * fpr_at(b[0]) + p[1] * fpr_at(b[1]);
        assert!(w(&half, [0.5, 0.5]) <= w(&[10.0, 10.0], [0.5, 0.5]) * 1.0001);
    }

    #[test]
    fn transient_l0_is_not_charged_to_the_budget() {
        let levels = [shape(100_000, 4.0, false), shape(900_000, 1.0, true)];
        let bits = monkey(&levels, 10.0, 0.0);
        assert!((bits[1] - 10.0).abs() < 0.1, "{bits:?}");
        assert!(bits[0] > 15.0, "{bits:?}");
    }

    #[test]
    fn limit_cuts_largest_level_first_and_never_to_zero() {
        let levels = tree(&[1_000, 1_000_000]);
        let (bits, changed) = fit_to_limit(&levels, &[10.0, 10.0], 5.0 * 1_001_000.0);
        assert!(changed);
        assert_eq!(bits[0], 10.0);
        assert!(bits[1] < 5.0 && bits[1] >= MIN_BITS);
        let (bits, changed) = fit_to_limit(&levels, &[10.0, 10.0], 1.0);
        assert!(changed);
        assert!(bits.iter().all(|&b| b >= MIN_BITS));
        let (_, changed) = fit_to_limit(&levels, &[10.0, 10.0], 1e12);
        assert!(!changed);
    }

    #[test]
    fn empty_tree_gets_the_average() {
        assert_eq!(monkey(&tree(&[0, 0]), 10.0, 0.0), vec![10.0, 10.0]);
        assert!(fpr_at(0.0) == 1.0 && fpr_at(10.0) < 0.01);
    }
}
