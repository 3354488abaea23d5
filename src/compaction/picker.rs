//! Choosing the next compaction.
//!
//! Each level gets a score: L0 its table count over `l0_compaction_trigger`, L1..L5 their bytes
//! over their target size. The level with the highest score of at least 1 is compacted: for L0
//! every L0 table (they overlap), for deeper levels the next table after the level's compact
//! pointer (round robin by key, as LevelDB), plus every overlapping table of the next level.

use crate::key;
use crate::options::Options;
use crate::version::{TableHandle, Version, NUM_LEVELS};
use std::sync::Arc;

/// One compaction to run.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    /// Level the inputs come from.
    pub(crate) level: usize,
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
        self.level + 1
    }

    /// Every input table.
    pub(crate) fn all_inputs(&self) -> impl Iterator<Item = &Arc<TableHandle>> {
        self.inputs.iter().chain(&self.next_inputs)
    }

    fn new(version: &Version, level: usize, inputs: Vec<Arc<TableHandle>>, opts: &Options) -> Plan {
        let (lo, hi) = user_range(&inputs);
        let next_inputs = version.overlapping(level + 1, &lo, &hi);
        let grandparents = if level + 2 < NUM_LEVELS {
            let (glo, ghi) = user_range(inputs.iter().chain(&next_inputs));
            version.overlapping(level + 2, &glo, &ghi)
        } else {
            Vec::new()
        };
        let gp_bytes: u64 = grandparents.iter().map(|t| t.meta.size).sum();
        // A sorted level's tables never share user keys, so any set of them with nothing
        // overlapping below can move down as is. L0 tables may overlap each other: only one.
        let movable = if level == 0 {
            inputs.len() == 1
        } else {
            !inputs.is_empty()
        };
        let trivial_move = movable
            && next_inputs.is_empty()
            && gp_bytes <= max_grandparent_overlap(opts)
            && inputs.iter().all(|t| !t.is_broken());
        Plan {
            level,
            inputs,
            next_inputs,
            grandparents,
            trivial_move,
        }
    }
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
    let inputs = if level == 0 {
        version.levels[0].clone()
    } else {
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

/// A compaction of every table of `level` into `level + 1` (for `Db::compact`).
pub(crate) fn whole_level(version: &Version, opts: &Options, level: usize) -> Option<Plan> {
    let inputs = version.levels[level].clone();
    if inputs.is_empty() || level + 1 >= NUM_LEVELS {
        return None;
    }
    Some(Plan::new(version, level, inputs, opts))
}
