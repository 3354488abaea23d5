//! How many bits per key each level's filters get.
//!
//! An absent-key get probes one filter per sorted run: every L0 table, then one table per
//! deeper level. Its expected wasted block reads are the sum of those filters' false-positive
//! rates. Monkey (Dayan et al., SIGMOD 2017) minimizes that sum for a fixed filter memory:
//! with the Lagrangian, each level gets the bits where the marginal FPR saved per bit spent is
//! the same everywhere, so small levels (cheap to protect) get many bits and the largest level
//! a little under the average. We solve it numerically on the blocked Bloom filter's own FPR
//! curve rather than the unblocked formula, because one-line filters gain less from extra bits.

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
    /// Sorted runs an absent-key get probes in this level (L0: its table count; else 1).
    pub(crate) runs: u32,
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

/// For multiplier `mu`: each level's bits minimizing `runs * fpr(b) + mu * keys * b`.
fn best_for(levels: &[LevelShape], mu: f64, floor: f64) -> Vec<f64> {
    let grid = fpr_grid();
    let start = (floor / STEP).ceil() as usize;
    levels
        .iter()
        .map(|l| {
            if l.keys == 0 {
                return 0.0;
            }
            let runs = f64::from(l.runs.max(1));
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

/// Monkey: bits per key for each level so that the total is `avg_bits * total keys` (or
/// `memory_limit_bits` if smaller) and the summed FPR is minimal. Levels without keys get 0.
pub(crate) fn monkey(levels: &[LevelShape], avg_bits: f64, floor: f64) -> Vec<f64> {
    let total_keys: u64 = levels.iter().map(|l| l.keys).sum();
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
        if memory_bits(levels, &bits) > budget {
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

/// Expected wasted data-block reads of an absent-key get: the sum over runs of their FPR.
#[cfg(test)]
pub(crate) fn expected_wasted_reads(levels: &[LevelShape], bits: &[f64]) -> f64 {
    levels
        .iter()
        .zip(bits)
        .filter(|(l, _)| l.keys > 0)
        .map(|(l, &b)| f64::from(l.runs.max(1)) * fpr_at(b))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(sizes: &[u64]) -> Vec<LevelShape> {
        sizes
            .iter()
            .map(|&keys| LevelShape { keys, runs: 1 })
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

    #[test]
    fn l0_runs_count_once_each() {
        let one = monkey(
            &[
                LevelShape {
                    keys: 40_000,
                    runs: 1,
                },
                LevelShape {
                    keys: 1_000_000,
                    runs: 1,
                },
            ],
            10.0,
            0.0,
        );
        let four = monkey(
            &[
                LevelShape {
                    keys: 40_000,
                    runs: 4,
                },
                LevelShape {
                    keys: 1_000_000,
                    runs: 1,
                },
            ],
            10.0,
            0.0,
        );
        assert!(four[0] > one[0], "{one:?} {four:?}");
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
