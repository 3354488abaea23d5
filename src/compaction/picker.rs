//! Choosing the next compaction.
//!
//! Each level gets a score: L0 its table count over `l0_compaction_trigger`, L1..L5 their bytes
//! over their target size. The level with the highest score of at least 1 is compacted: for L0
//! every L0 table (they overlap), for deeper levels the next table after the level's compact
//! pointer (round robin by key, as LevelDB), plus every overlapping table of the next level.
//! An automatic compaction moves its inputs down without rewriting them when nothing below
//! overlaps (a trivial move); the plans of a manual compaction ([`super::manual`]) never do.

use crate::key;
use crate::options::Options;
use crate::version::{TableHandle, Version, NUM_LEVELS};
use std::sync::Arc;

/// One compaction to run.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    /// Level the inputs come from.
    pub(crate) level: usize,
    /// Level the outputs go to: `level + 1`, or `level` itself for a manual rewrite of the
    /// bottom level in place.
    pub(crate) output_level: usize,
    /// Inputs from `level`.
    pub(crate) inputs: Vec<Arc<TableHandle>>,
    /// Overlapping inputs from `level + 1`.
    pub(crate) next_inputs: Vec<Arc<TableHandle>>,
    /// Tables of `level + 2` overlapping the inputs (for splitting outputs).
    pub(crate) grandparents: Vec<Arc<TableHandle>>,
    /// True if the inputs can move down without rewriting.
    pub(crate) trivial_move: bool,
}

impl Plan {
    pub(crate) fn output_level(&self) -> usize {
        self.output_level
    }

    /// Entries entering the output level: every entry of `inputs`, none for a rewrite in
    /// place (they are there already).
    pub(crate) fn incoming_entries(&self) -> u64 {
        if self.output_level == self.level {
            0
        } else {
            self.inputs
                .iter()
                .map(|t| t.meta.entries)
                .fold(0, u64::saturating_add)
        }
    }

    /// Every input table.
    pub(crate) fn all_inputs(&self) -> impl Iterator<Item = &Arc<TableHandle>> {
        self.inputs.iter().chain(&self.next_inputs)
    }

    /// An automatic compaction of `inputs` from `level` into `level + 1`: a trivial move when
    /// nothing below overlaps them.
    fn new(version: &Version, level: usize, inputs: Vec<Arc<TableHandle>>, opts: &Options) -> Plan {
        let mut plan = Plan::merge_down(version, level, inputs);
        let gp_bytes = plan
            .grandparents
            .iter()
            .map(|t| t.meta.size)
            .fold(0, u64::saturating_add);
        // A sorted level's tables never share user keys, so any set of them with nothing
        // overlapping below can move down as is. L0 tables may overlap each other: they move
        // together only if no two share a user key (a sequential load's flushes), and then
        // in any order.
        let movable = if level == 0 {
            disjoint(&plan.inputs)
        } else {
            !plan.inputs.is_empty()
        };
        plan.trivial_move = movable
            && plan.next_inputs.is_empty()
            && gp_bytes <= max_grandparent_overlap(opts)
            && plan.inputs.iter().all(|t| !t.is_broken());
        plan
    }

    /// A compaction of `inputs` from `level` with every overlapping table of `level + 1`
    /// into `level + 1` that rewrites them all, never a trivial move.
    pub(super) fn merge_down(
        version: &Version,
        level: usize,
        inputs: Vec<Arc<TableHandle>>,
    ) -> Plan {
        let (lo, hi) = user_range(&inputs);
        let next_inputs = version.overlapping(level + 1, &lo, &hi);
        let (glo, ghi) = user_range(inputs.iter().chain(&next_inputs));
        Plan {
            level,
            output_level: level + 1,
            grandparents: below(version, level + 1, &glo, &ghi),
            inputs,
            next_inputs,
            trivial_move: false,
        }
    }

    /// A rewrite of `inputs`, adjacent tables of sorted level `level >= 1`, into the same
    /// level: what a manual compaction does to the bottom level, where nothing lies below.
    pub(super) fn rewrite_in_place(
        version: &Version,
        level: usize,
        inputs: Vec<Arc<TableHandle>>,
    ) -> Plan {
        let (lo, hi) = user_range(&inputs);
        Plan {
            level,
            output_level: level,
            grandparents: below(version, level, &lo, &hi),
            inputs,
            next_inputs: Vec::new(),
            trivial_move: false,
        }
    }
}

/// The tables of the level below `level` overlapping `[lo, hi]` (none below the last level).
fn below(version: &Version, level: usize, lo: &[u8], hi: &[u8]) -> Vec<Arc<TableHandle>> {
    if level + 1 < NUM_LEVELS {
        version.overlapping(level + 1, lo, hi)
    } else {
        Vec::new()
    }
}

/// True if `tables` is not empty and no two of them share a user key: sorted by smallest
/// key, each ends (in user-key order) before the next begins.
fn disjoint(tables: &[Arc<TableHandle>]) -> bool {
    let mut sorted: Vec<&Arc<TableHandle>> = tables.iter().collect();
    sorted.sort_by(|a, b| key::cmp_encoded(&a.meta.smallest, &b.meta.smallest));
    !sorted.is_empty()
        && sorted
            .windows(2)
            .all(|w| key::user_key(&w[0].meta.largest) < key::user_key(&w[1].meta.smallest))
}

/// Grandparent bytes one output table may overlap before it is cut (LevelDB's rule).
pub(crate) fn max_grandparent_overlap(opts: &Options) -> u64 {
    opts.target_table_size.saturating_mul(10)
}

/// The user-key range covered by some tables.
pub(crate) fn user_range<'a>(
    tables: impl IntoIterator<Item = &'a Arc<TableHandle>>,
) -> (Vec<u8>, Vec<u8>) {
    let mut lo: Option<&[u8]> = None;
    let mut hi: Option<&[u8]> = None;
    for t in tables {
        let (s, l) = (t.meta.smallest_user(), t.meta.largest_user());
        if lo.is_none_or(|x| s < x) {
            lo = Some(s);
        }
        if hi.is_none_or(|x| l > x) {
            hi = Some(l);
        }
    }
    (lo.unwrap_or(&[]).to_vec(), hi.unwrap_or(&[]).to_vec())
}

/// Compaction scores per level (L0..L5); L6 has nowhere to go.
pub(crate) fn scores(version: &Version, opts: &Options) -> Vec<f64> {
    (0..NUM_LEVELS - 1)
        .map(|l| {
            if l == 0 {
                version.levels[0].len() as f64 / opts.l0_compaction_trigger as f64
            } else {
                version.level_bytes(l) as f64 / opts.level_target(l) as f64
            }
        })
        .collect()
}

/// The compaction of L0 into L1 (every L0 table, as [`pick`] makes it), if L0 holds at least
/// `l0_compaction_trigger` tables; whatever the other levels' scores.
pub(crate) fn level0(version: &Version, opts: &Options) -> Option<Plan> {
    let tables = &version.levels[0];
    (!tables.is_empty() && tables.len() >= opts.l0_compaction_trigger)
        .then(|| Plan::new(version, 0, tables.clone(), opts))
}

/// The compaction to run next, if any level is over its target.
pub(crate) fn pick(
    version: &Version,
    opts: &Options,
    compact_pointers: &[Vec<u8>],
) -> Option<Plan> {
    let scores = scores(version, opts);
    let (level, score) = scores
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map(|(l, s)| (l, *s))?;
    if score < 1.0 {
        return None;
    }
    if level == 0 {
        return level0(version, opts);
    }
    let inputs = {
        let tables = &version.levels[level];
        let pointer = &compact_pointers[level];
        let next = tables
            .iter()
            .find(|t| pointer.is_empty() || key::cmp_encoded(&t.meta.largest, pointer).is_gt())
            .or_else(|| tables.first())?;
        vec![next.clone()]
    };
    Some(Plan::new(version, level, inputs, opts))
}
