//! The plans of a manual compaction ([`Db::compact`](crate::Db::compact) and
//! [`Db::compact_range`](crate::Db::compact_range)): level by level, the tables overlapping a
//! key range merge into the level below, and at the bottom the tables not yet rewritten are
//! rewritten in place. Unlike automatic compaction, nothing is moved without being rewritten:
//! the point of a manual compaction is to drop overwritten versions and tombstones and to cut
//! tables at the target size, which a move does not do (LevelDB too takes the trivial-move
//! shortcut only for automatic compactions).

use super::picker::Plan;
use crate::iter::KeyRange;
use crate::version::{TableHandle, Version};
use std::sync::Arc;

/// The compaction of the tables of `level` overlapping `range` (and of every table of
/// `level + 1` overlapping those) into `level + 1`; `None` if no table of `level` overlaps.
///
/// For L0 the inputs grow until no L0 table outside them overlaps their key range: L0 tables
/// overlap each other, and a newer table must not move below an older one holding the same
/// key, or the older version would be found first.
pub(crate) fn into_next_level(version: &Version, level: usize, range: &KeyRange) -> Option<Plan> {
    let tables = &version.levels[level];
    let mut inputs: Vec<Arc<TableHandle>> = tables
        .iter()
        .filter(|t| range.overlaps(t.meta.smallest_user(), t.meta.largest_user()))
        .cloned()
        .collect();
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
/// compaction); `None` when none is left.
pub(crate) fn next_bottom_rewrite(
    version: &Version,
    level: usize,
    range: &KeyRange,
    rewritten: impl Fn(&TableHandle) -> bool,
) -> Option<Plan> {
    // A run stops at a table already rewritten: outputs spanning it would overlap it.
    let run: Vec<Arc<TableHandle>> = version.levels[level]
        .iter()
        .filter(|t| range.overlaps(t.meta.smallest_user(), t.meta.largest_user()))
        .skip_while(|t| rewritten(t))
        .take_while(|t| !rewritten(t))
        .cloned()
        .collect();
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
        let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
        let enc = |k: &str| {
            let mut v = Vec::new();
            key::encode_into(&mut v, k.as_bytes(), key::trailer(seq, ValueKind::Put));
            Bytes::from(v)
        };
        let meta = FileMeta {
            number,
            size: 100,
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
        let p = into_next_level(&v, 0, &range("o", "p")).unwrap();
        assert_eq!(numbers(&p.inputs), vec![4, 3, 2]);
        assert_eq!(numbers(&p.next_inputs), vec![5]);
        assert_eq!((p.output_level(), p.trivial_move), (1, false));
        assert!(into_next_level(&v, 0, &range("q", "w")).is_none());
    }

    #[test]
    fn a_lone_table_with_nothing_below_is_rewritten_not_moved() {
        let mut v = Version::default();
        v.levels[0] = vec![table(1, "a", "z", 10)];
        let p = into_next_level(&v, 0, &KeyRange::all()).unwrap();
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
        let p = next_bottom_rewrite(&v, 2, &range("b", "z"), fresh).unwrap();
        assert_eq!(numbers(&p.inputs), vec![1, 2]);
        assert_eq!((p.level, p.output_level(), p.incoming_entries()), (2, 2, 0));
        v.levels[2].retain(|t| t.number() > 2);
        let p = next_bottom_rewrite(&v, 2, &range("b", "z"), fresh).unwrap();
        assert_eq!(numbers(&p.inputs), vec![3, 4]);
        assert!(next_bottom_rewrite(&v, 2, &range("e", "f"), fresh).is_none());
    }
}
