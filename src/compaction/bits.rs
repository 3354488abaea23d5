//! Bits per key for a table about to be written to a level, from the filter policy, the tree's
//! shape and the filter memory limit.

use crate::filter::allocation::{self, LevelShape};
use crate::options::{FilterPolicy, Options};
use crate::version::{Version, NUM_LEVELS};

/// The position of a key on a number line that keeps the order of its first 8 bytes.
fn key_pos(k: &[u8]) -> f64 {
    let mut b = [0u8; 8];
    let n = k.len().min(8);
    b[..n].copy_from_slice(&k[..n]);
    u64::from_be_bytes(b) as f64
}

/// Where the tree's keys lie: each table spreads its entries evenly over its key range. Used
/// to estimate how often an absent key (drawn like the stored ones) falls inside a table.
struct KeyDistribution {
    /// Breakpoints, ascending.
    xs: Vec<f64>,
    /// Mass at or below each breakpoint.
    cum: Vec<f64>,
    /// Density just after each breakpoint.
    dens: Vec<f64>,
    /// Point masses at each breakpoint.
    point: Vec<f64>,
    total: f64,
}

impl KeyDistribution {
    fn new(tables: &[(f64, f64, f64)]) -> Self {
        // (position, density change, point mass)
        let mut events: Vec<(f64, f64, f64)> = Vec::with_capacity(tables.len() * 2);
        for &(lo, hi, e) in tables {
            if hi > lo {
                let d = e / (hi - lo);
                events.push((lo, d, 0.0));
                events.push((hi, -d, 0.0));
            } else {
                events.push((lo, 0.0, e));
            }
        }
        events.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (mut xs, mut cum, mut dens, mut point) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut m, mut d, mut last) = (0.0f64, 0.0f64, f64::NEG_INFINITY);
        for (x, dd, pm) in events {
            if x != last {
                if last.is_finite() {
                    m += d * (x - last);
                }
                xs.push(x);
                cum.push(m);
                dens.push(d);
                point.push(0.0);
                last = x;
            }
            d = (d + dd).max(0.0);
            m += pm;
            let n = xs.len() - 1;
            cum[n] = m;
            dens[n] = d;
            point[n] += pm;
        }
        KeyDistribution {
            xs,
            cum,
            dens,
            point,
            total: m,
        }
    }

    /// Mass at or below `x`.
    fn le(&self, x: f64) -> f64 {
        let i = self.xs.partition_point(|&p| p <= x);
        if i == 0 {
            return 0.0;
        }
        self.cum[i - 1] + self.dens[i - 1] * (x - self.xs[i - 1])
    }

    /// Mass strictly below `x`.
    fn lt(&self, x: f64) -> f64 {
        let i = self.xs.partition_point(|&p| p < x);
        if i == 0 {
            return 0.0;
        }
        let j = i - 1;
        self.cum[j] + self.dens[j] * (x - self.xs[j])
    }

    /// Fraction of the keys inside `[lo, hi]`; 1 for an empty tree.
    fn share(&self, lo: &[u8], hi: &[u8]) -> f64 {
        if self.total <= 0.0 {
            return 1.0;
        }
        let (lo, hi) = (key_pos(lo), key_pos(hi));
        let exact_point = if lo == hi {
            let i = self.xs.partition_point(|&p| p < lo);
            self.point.get(i).copied().unwrap_or(0.0)
        } else {
            0.0
        };
        ((self.le(hi) - self.lt(lo)).max(exact_point) / self.total).clamp(0.0, 1.0)
    }
}

/// A table about to be written, as the allocator needs to know it.
pub(crate) struct Incoming<'a> {
    pub(crate) level: usize,
    /// Keys entering the level (compaction: from the level above; the rest are there already).
    pub(crate) keys: u64,
    /// Keys in the tables being written (compaction: every input).
    pub(crate) output_keys: u64,
    /// User-key range of the new data.
    pub(crate) range: (&'a [u8], &'a [u8]),
    /// Filter bytes of the tables the job replaces (compaction inputs): freed when it commits.
    pub(crate) replaced_filter_bytes: u64,
}

/// The shape of the tree as the filter allocator sees it, with the incoming table added:
/// keys per level, and how many tables of each level an absent key meets on average.
pub(crate) fn level_shapes(version: &Version, incoming: Option<&Incoming<'_>>) -> Vec<LevelShape> {
    let ranges: Vec<(f64, f64, f64)> = version
        .levels
        .iter()
        .flatten()
        .map(|t| {
            (
                key_pos(t.meta.smallest_user()),
                key_pos(t.meta.largest_user()),
                t.meta.entries as f64,
            )
        })
        .collect();
    let dist = KeyDistribution::new(&ranges);
    let mut shape: Vec<LevelShape> = version
        .levels
        .iter()
        .enumerate()
        .map(|(l, tables)| {
            let probes: f64 = tables
                .iter()
                .map(|t| dist.share(t.meta.smallest_user(), t.meta.largest_user()))
                .sum();
            LevelShape {
                keys: tables.iter().map(|t| t.meta.entries).sum(),
                probes: if l == 0 { probes } else { probes.min(1.0) },
                in_budget: l > 0,
            }
        })
        .collect();
    if let Some(inc) = incoming {
        let share = dist.share(inc.range.0, inc.range.1);
        let s = &mut shape[inc.level];
        s.keys += inc.keys;
        s.probes = if inc.level == 0 {
            s.probes + share
        } else {
            s.probes.max(share)
        };
    }
    // Until data reaches L1, L0 is the whole tree and pays for itself.
    if shape.iter().skip(1).all(|l| l.keys == 0) {
        shape[0].in_budget = true;
    }
    shape
}

/// Bits per key the policy gives each level of a tree shaped like `shape`.
pub(crate) fn bits_per_level(opts: &Options, shape: &[LevelShape]) -> Vec<f64> {
    let total_keys: u64 = shape.iter().filter(|l| l.in_budget).map(|l| l.keys).sum();
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

/// Bits per key for a table about to join a level.
///
/// With a filter memory limit, the policy first fits the whole tree's projected filters under
/// it (largest levels first), then the new table is capped by the room actually left: the
/// limit minus the filters alive now, plus those the job replaces. Tables written before the
/// limit began to bind shrink as compaction rewrites them. Never below 1 bit per key.
pub(crate) fn bits_for_new_table(
    opts: &Options,
    version: &Version,
    incoming: &Incoming<'_>,
) -> f64 {
    let bits = match &opts.filter_policy {
        FilterPolicy::None => return 0.0,
        FilterPolicy::Uniform { .. } | FilterPolicy::PerLevel(_)
            if opts.filter_memory_limit.is_none() =>
        {
            return bits_per_level(opts, &[])[incoming.level];
        }
        _ => bits_per_level(opts, &level_shapes(version, Some(incoming)))[incoming.level],
    };
    let Some(limit) = opts.filter_memory_limit else {
        return bits;
    };
    if bits <= 0.0 || incoming.output_keys == 0 {
        return bits;
    }
    let alive: u64 = version
        .levels
        .iter()
        .flatten()
        .map(|t| t.filter_bytes() as u64)
        .sum();
    let used = alive.saturating_sub(incoming.replaced_filter_bytes);
    let room = limit.saturating_sub(used) as f64 * 8.0 / incoming.output_keys as f64;
    if room < bits {
        let capped = room.max(allocation::MIN_BITS);
        log::info!(
            "filter memory limit: a new L{} table gets {capped:.2} bits/key instead of {bits:.2} ({used} of {limit} bytes in use)",
            incoming.level
        );
        capped
    } else {
        bits
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(keys: &[u64]) -> Vec<LevelShape> {
        keys.iter()
            .enumerate()
            .map(|(l, &k)| LevelShape {
                keys: k,
                probes: if l == 0 && k > 0 { 2.0 } else { 1.0 },
                in_budget: true,
            })
            .collect()
    }

    #[test]
    fn key_distribution_shares() {
        let k = |v: u64| v.to_be_bytes();
        // Two tables over [0, 100) and [100, 200] with 100 keys each, one point table.
        let d = KeyDistribution::new(&[
            (0.0, 100.0, 100.0),
            (100.0, 200.0, 100.0),
            (150.0, 150.0, 10.0),
        ]);
        assert!((d.share(&k(0), &k(100)) - 100.0 / 210.0).abs() < 0.01);
        assert!((d.share(&k(0), &k(200)) - 1.0).abs() < 1e-9);
        assert!(d.share(&k(150), &k(150)) > 0.04);
        assert_eq!(d.share(&k(300), &k(400)), 0.0);
        let empty = KeyDistribution::new(&[]);
        assert_eq!(empty.share(b"a", b"b"), 1.0);
        assert!(key_pos(b"a") < key_pos(b"ab") && key_pos(b"ab") < key_pos(b"b"));
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
