//! The plans of a manual compaction ([`Db::compact`](crate::Db::compact) and
//! [`Db::compact_range`](crate::Db::compact_range)): level by level, the tables overlapping a
//! key range merge into the level below, and at the bottom the tables not yet rewritten are
//! rewritten in place. Unlike automatic compaction, nothing is moved without being rewritten:
//! the point of a manual compaction is to drop overwritten versions and tombstones and to cut
//! tables at the target size, which a move does not do (LevelDB too takes the trivial-move
//! shortcut only for automatic compactions).
//!
//! Below L0 a level is merged down, and the bottom rewritten, in steps of at most
//! [`step_bytes`] of input each (in key order), as RocksDB splits a manual compaction at
//! `max_compaction_bytes`: a step is one compaction job, and between two steps the compaction
//! thread may compact L0 (see `Core::run_manual_compaction`), which a whole level merged at
//! once would keep waiting for as long as the merge takes.

use super::picker::Plan;
use crate::iter::KeyRange;
use crate::options::Options;
use crate::version::{TableHandle, Version};
use bytes::Bytes;
use std::ops::Bound;
use std::sync::Arc;

/// Input bytes one step of a manual compaction below L0 takes, at most: 25 tables of
/// `target_table_size` (RocksDB's default `max_compaction_bytes`). A step takes at least one
/// table, with the tables of the level below that it overlaps, whatever their size.
pub(crate) fn step_bytes(opts: &Options) -> u64 {
    opts.target_table_size.saturating_mul(25)
}

/// The first tables of `tables` (in key order) whose costs add up to at most `budget`, and
/// at least the first.
fn within_budget(
    tables: impl IntoIterator<Item = Arc<TableHandle>>,
    budget: u64,
    cost: impl Fn(&TableHandle) -> u64,
) -> Vec<Arc<TableHandle>> {
    let mut taken = Vec::new();
    let mut total = 0u64;
    for t in tables {
        let c = cost(&t);
        if !taken.is_empty() && total.saturating_add(c) > budget {
            break;
        }
        total = total.saturating_add(c);
        taken.push(t);
    }
    taken
}

/// What a manual compaction merges down from one level ([`level_span`]), fixed when the
/// level's steps begin so that they end: L0 compactions between two steps add tables to L1.
pub(crate) struct LevelSpan {
    /// The caller's range, cut short at `end`: a table an L0 compaction adds wholly past it
    /// (keys that ascend: a log, timestamps) is not taken.
    range: KeyRange,
    /// The largest key of the level's tables that overlapped the range then.
    end: Bytes,
}

/// The [`LevelSpan`] of `range` in `level` now; `None` if `range` overlaps none of its tables.
pub(crate) fn level_span(version: &Version, level: usize, range: &KeyRange) -> Option<LevelSpan> {
    let end = version.levels[level]
        .iter()
        .filter(|t| range.overlaps(t.meta.smallest_user(), t.meta.largest_user()))
        .map(|t| t.meta.largest_user())
        .max()?;
    let hi = if range.below_hi(end) {
        Bound::Included(Bytes::copy_from_slice(end))
    } else {
        range.hi.clone()
    };
    Some(LevelSpan {
        range: KeyRange {
            lo: range.lo.clone(),
            hi,
        },
        end: Bytes::copy_from_slice(end),
    })
}

impl LevelSpan {
    /// The next step ([`into_next_level`] within the span), or `None` once the last step
    /// (whose largest key is `after`) reached `end`. Every key the level held in the range
    /// when its steps began is at or below `end`, and went down with the step that reached
    /// it (a step takes every table of the level up to its largest key, an L0 compaction's
    /// outputs too); going on would take tables an L0 compaction makes meanwhile that start
    /// within the span and reach past it (a key written again, then new keys above), again
    /// and again for as long as writes go on.
    pub(crate) fn next_step(
        &self,
        version: &Version,
        level: usize,
        after: Option<&[u8]>,
        budget: u64,
    ) -> Option<Plan> {
        if after.is_some_and(|a| a >= &self.end[..]) {
            return None;
        }
        into_next_level(version, level, &self.range, after, budget)
    }
}

/// The next step of merging the tables of `level` that overlap `range` into `level + 1`
/// (with every table of `level + 1` they overlap); `None` if no table is left.
///
/// For L0, one step: every L0 table overlapping `range`, the inputs grown until no L0 table
/// outside them overlaps their key range (L0 tables overlap each other, and a newer table
/// must not move below an older one holding the same key, or the older version would be
/// found first). Deeper, the tables whose largest key is past `after` (the largest key of
/// the step before; `None` for the first), in key order, as many as `budget` bytes hold
/// counting each with the tables below that it overlaps, and at least one (a sorted level's
/// tables share no user key, so any run of them can go down on its own).
pub(crate) fn into_next_level(
    version: &Version,
    level: usize,
    range: &KeyRange,
    after: Option<&[u8]>,
    budget: u64,
) -> Option<Plan> {
    let tables = &version.levels[level];
    let overlapping = tables
        .iter()
        .filter(|t| range.overlaps(t.meta.smallest_user(), t.meta.largest_user()));
    let mut inputs: Vec<Arc<TableHandle>> = if level == 0 {
        overlapping.cloned().collect()
    } else {
        let left = overlapping
            .filter(|t| after.is_none_or(|a| t.meta.largest_user() > a))
            .cloned();
        within_budget(left, budget, |t| {
            let below =
                version.overlapping(level + 1, t.meta.smallest_user(), t.meta.largest_user());
            below
                .iter()
                .map(|b| b.meta.size)
                .fold(t.meta.size, u64::saturating_add)
        })
    };
    if inputs.is_empty() {
        return None;
    }
    if level == 0 {
        loop {
            let (lo, hi) = super::picker::user_range(&inputs);
            let grown = version.overlapping(0, &lo, &hi);
            if grown.len() == inputs.len() {
                break;
            }
            inputs = grown;
        }
    }
    Some(Plan::merge_down(version, level, inputs))
}

/// The next rewrite in place of the bottom level `level >= 1`: the first run of adjacent
/// tables that overlap `range` and that `rewritten` does not claim (the outputs of this manual
/// compaction), as many as `budget` bytes hold and at least one; `None` when none is left.
pub(crate) fn next_bottom_rewrite(
    version: &Version,
    level: usize,
    range: &KeyRange,
    rewritten: impl Fn(&TableHandle) -> bool,
    budget: u64,
) -> Option<Plan> {
    // A run stops at a table already rewritten: outputs spanning it would overlap it.
    let run = version.levels[level]
        .iter()
        .filter(|t| range.overlaps(t.meta.smallest_user(), t.meta.largest_user()))
        .skip_while(|t| rewritten(t))
        .take_while(|t| !rewritten(t))
        .cloned();
    let run = within_budget(run, budget, |t| t.meta.size);
    if run.is_empty() {
        return None;
    }
    Some(Plan::rewrite_in_place(version, level, run))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::{FileSystem, MemFs};
    use crate::key::{self, ValueKind};
    use crate::version::{FileMeta, TableEnv};
    use bytes::Bytes;
    use std::ops::Bound;
    use std::path::Path;

    /// A handle for a table that is not on disk: enough for planning (it is never read).
    fn table(number: u64, lo: &str, hi: &str, seq: u64) -> Arc<TableHandle> {
        sized(number, lo, hi, seq, 100)
    }

    /// [`table`] of `size` bytes.
    fn sized(number: u64, lo: &str, hi: &str, seq: u64, size: u64) -> Arc<TableHandle> {
        let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
        let enc = |k: &str| {
            let mut v = Vec::new();
            key::encode_into(&mut v, k.as_bytes(), key::trailer(seq, ValueKind::Put));
            Bytes::from(v)
        };
        let meta = FileMeta {
            number,
            size,
            smallest: enc(lo),
            largest: enc(hi),
            min_seq: seq,
            max_seq: seq,
            entries: 1,
        };
        TableHandle::open(&TableEnv::new(fs, Path::new("/none"), 10, None), meta)
    }

    fn range(lo: &str, hi: &str) -> KeyRange {
        KeyRange {
            lo: Bound::Included(Bytes::copy_from_slice(lo.as_bytes())),
            hi: Bound::Excluded(Bytes::copy_from_slice(hi.as_bytes())),
        }
    }

    fn numbers(tables: &[Arc<TableHandle>]) -> Vec<u64> {
        tables.iter().map(|t| t.number()).collect()
    }

    #[test]
    fn l0_inputs_grow_over_every_overlapping_table() {
        let mut v = Version::default();
        // Newest first: 4 [m..p] overlaps 3 [c..n], which overlaps 2 [a..d]; 1 [x..z] is apart.
        v.levels[0] = vec![
            table(4, "m", "p", 40),
            table(3, "c", "n", 30),
            table(2, "a", "d", 20),
            table(1, "x", "z", 10),
        ];
        v.levels[1] = vec![table(5, "a", "b", 1), table(6, "y", "y", 1)];
        let p = into_next_level(&v, 0, &range("o", "p"), None, 1).unwrap();
        assert_eq!(numbers(&p.inputs), vec![4, 3, 2]);
        assert_eq!(numbers(&p.next_inputs), vec![5]);
        assert_eq!((p.output_level(), p.trivial_move), (1, false));
        assert!(into_next_level(&v, 0, &range("q", "w"), None, 1).is_none());
    }

    #[test]
    fn a_lone_table_with_nothing_below_is_rewritten_not_moved() {
        let mut v = Version::default();
        v.levels[0] = vec![table(1, "a", "z", 10)];
        let p = into_next_level(&v, 0, &KeyRange::all(), None, u64::MAX).unwrap();
        assert!(!p.trivial_move && p.next_inputs.is_empty());
    }

    #[test]
    fn bottom_runs_skip_rewritten_tables_and_stop_at_them() {
        let mut v = Version::default();
        v.levels[2] = vec![
            table(1, "a", "b", 1),
            table(2, "c", "d", 1),
            table(9, "e", "f", 1),
            table(3, "g", "h", 1),
            table(4, "i", "j", 1),
        ];
        let fresh = |t: &TableHandle| t.number() >= 9;
        let p = next_bottom_rewrite(&v, 2, &range("b", "z"), fresh, u64::MAX).unwrap();
        assert_eq!(numbers(&p.inputs), vec![1, 2]);
        assert_eq!((p.level, p.output_level(), p.incoming_entries()), (2, 2, 0));
        v.levels[2].retain(|t| t.number() > 2);
        let p = next_bottom_rewrite(&v, 2, &range("b", "z"), fresh, u64::MAX).unwrap();
        assert_eq!(numbers(&p.inputs), vec![3, 4]);
        assert!(next_bottom_rewrite(&v, 2, &range("e", "f"), fresh, u64::MAX).is_none());
    }

    #[test]
    fn a_level_goes_down_in_steps_of_the_budget_each_counting_what_it_overlaps_below() {
        let mut v = Version::default();
        v.levels[1] = vec![
            sized(1, "a", "b", 5, 100),
            sized(2, "c", "d", 5, 100),
            sized(3, "e", "f", 5, 100),
            sized(4, "g", "h", 5, 1000),
            sized(5, "i", "j", 5, 100),
        ];
        // Under table 2 lie 6 and 7 (300 bytes); under 3, 7 again.
        v.levels[2] = vec![
            sized(6, "c", "c", 1, 100),
            sized(7, "d", "e", 1, 200),
            sized(8, "x", "z", 1, 100),
        ];
        let all = KeyRange::all();
        let step = |v: &Version, after: Option<&str>| {
            into_next_level(v, 1, &all, after.map(str::as_bytes), 500)
                .map(|p| (numbers(&p.inputs), numbers(&p.next_inputs)))
        };
        // 1 (100) and 2 (100 + 300) fit in 500; 3 (100 + 200) would not.
        assert_eq!(step(&v, None), Some((vec![1, 2], vec![6, 7])));
        assert_eq!(step(&v, Some("d")), Some((vec![3], vec![7])));
        // A table larger than the budget goes down on its own.
        assert_eq!(step(&v, Some("f")), Some((vec![4], vec![])));
        assert_eq!(step(&v, Some("h")), Some((vec![5], vec![])));
        assert_eq!(step(&v, Some("j")), None);
        // A table that straddles the last step's end (one a compaction of L0 added between
        // two steps) is in the next step, and the range still limits the steps.
        v.levels[1].insert(2, sized(9, "d0", "e5", 9, 100));
        v.levels[1].retain(|t| t.number() != 3);
        assert_eq!(step(&v, Some("d")).map(|s| s.0), Some(vec![9]));
        let p = into_next_level(&v, 1, &range("a", "c"), None, 500).unwrap();
        assert_eq!(numbers(&p.inputs), vec![1]);
    }

    #[test]
    fn a_bottom_rewrite_takes_as_many_tables_as_the_budget_holds_and_at_least_one() {
        let mut v = Version::default();
        v.levels[2] = vec![
            sized(1, "a", "b", 1, 300),
            sized(2, "c", "d", 1, 300),
            sized(3, "e", "f", 1, 900),
            sized(4, "g", "h", 1, 100),
        ];
        let all = KeyRange::all();
        let mut done = std::collections::HashSet::new();
        let mut steps = Vec::new();
        while let Some(p) = next_bottom_rewrite(&v, 2, &all, |t| done.contains(&t.number()), 700) {
            let n = numbers(&p.inputs);
            done.extend(n.iter().copied());
            steps.push(n);
        }
        assert_eq!(steps, vec![vec![1, 2], vec![3], vec![4]]);
    }

    #[test]
    fn a_level_span_ends_at_its_largest_key_then_and_takes_tables_across_that_end() {
        let mut v = Version::default();
        v.levels[1] = vec![sized(1, "a", "c", 5, 100), sized(2, "e", "g", 5, 100)];
        let span = level_span(&v, 1, &KeyRange::all()).unwrap();
        assert!(span.range.below_hi(b"g") && !span.range.below_hi(b"g0"));
        assert_eq!(&span.end[..], b"g");
        // A narrower range keeps its own end.
        let narrow = level_span(&v, 1, &range("b", "f")).unwrap();
        assert!(narrow.range.below_hi(b"e") && !narrow.range.below_hi(b"f"));
        assert!(level_span(&v, 1, &range("h", "z")).is_none());
        // Tables an L0 compaction adds meanwhile: one across the end (old keys in it) is
        // taken, one wholly past it (new keys only) is not.
        v.levels[1] = vec![
            sized(1, "a", "c", 5, 100),
            sized(3, "f", "h", 9, 100),
            sized(4, "i", "k", 9, 100),
        ];
        let mut steps = Vec::new();
        let mut after: Option<Vec<u8>> = None;
        while let Some(p) = span.next_step(&v, 1, after.as_deref(), 150) {
            after = Some(super::super::picker::user_range(&p.inputs).1);
            steps.push(numbers(&p.inputs));
        }
        assert_eq!(steps, vec![vec![1], vec![3]]);
    }

    /// Review finding: a table an L0 compaction makes from a key written again inside the
    /// span and new keys past its end starts within the span and ends past the last step;
    /// without an end to the steps, each such table was taken by one more step.
    #[test]
    fn a_level_s_steps_end_once_past_its_end_whatever_starts_within_it() {
        let mut v = Version::default();
        v.levels[1] = vec![sized(1, "a", "c", 5, 100), sized(2, "e", "g", 5, 100)];
        let span = level_span(&v, 1, &KeyRange::all()).unwrap();
        let first = span.next_step(&v, 1, None, 150).unwrap();
        assert_eq!(numbers(&first.inputs), vec![1]);
        // An L0 compaction merges table 2 with new writes of "b" and of "t..." keys.
        v.levels[1] = vec![sized(3, "b", "t5", 9, 100)];
        let second = span.next_step(&v, 1, Some(b"c"), 150).unwrap();
        assert_eq!(numbers(&second.inputs), vec![3]);
        // Again, past the end: the steps are over.
        v.levels[1] = vec![sized(4, "b", "t9", 9, 100)];
        assert!(span.next_step(&v, 1, Some(b"t5"), 150).is_none());
        // (What a step past the end would have taken.)
        assert!(into_next_level(&v, 1, &span.range, Some(b"t5"), 150).is_some());
    }
}
