//! Manual compaction ([`Db::compact`](crate::Db::compact),
//! [`Db::compact_range`](crate::Db::compact_range)): the caller's request waits for the
//! compaction thread, which runs it between automatic compactions.
//!
//! The tables overlapping the key range merge down level by level to the deepest level that
//! holds data, rewritten at every step (no trivial move), and the tables of that bottom level
//! the steps above did not rewrite are rewritten in place. Every output is written by a merge
//! that drops the versions no snapshot can see and, at the bottom, the tombstones no snapshot
//! can see, and is cut at `target_table_size`.

use super::Core;
use crate::compaction::manual;
use crate::error::Result;
use crate::iter::KeyRange;
use crate::version::NUM_LEVELS;
use std::sync::atomic::Ordering;
use std::time::Duration;

impl Core {
    /// Runs a manual compaction of `range` on the compaction thread and waits for it, then
    /// for the deletion of the files it made obsolete (those no reader holds).
    pub(crate) fn compact_range(&self, range: KeyRange) -> Result<()> {
        let mut st = self.state.lock();
        self.writable(&st)?;
        st.bg.next_manual += 1;
        let id = st.bg.next_manual;
        // One request at a time: wait for the slot. Writes stopped (a failure, or a panic of
        // the compaction thread, which then never frees it) or closing end the wait.
        while st.bg.manual.is_some() {
            self.done_cv.wait_for(&mut st, Duration::from_millis(100));
            self.writable(&st)?;
        }
        st.bg.manual = Some((id, range));
        self.bg_cv.notify_all();
        // Then for this request's own outcome (not the last one finished: requests that
        // waited for the slot together may take it in any order).
        let outcome = loop {
            if let Some(outcome) = st.bg.manual_results.remove(&id) {
                break outcome;
            }
            // (Its job may still run and finish: that outcome is then kept for no one.)
            self.writable(&st)?;
            self.done_cv.wait_for(&mut st, Duration::from_millis(100));
        };
        outcome?;
        drop(st);
        self.wait_for_purge()
    }

    /// The body of a manual compaction, on the compaction thread.
    pub(super) fn run_manual_compaction(&self, range: &KeyRange) -> Result<()> {
        if range.is_empty() {
            return Ok(());
        }
        // Tables numbered from here on are this compaction's outputs (flushes write only L0),
        // so a bottom table numbered at or above it is already rewritten.
        let first_output = self.file_numbers.load(Ordering::SeqCst);
        let bottom = {
            let v = self.versions.lock().current();
            (1..NUM_LEVELS)
                .rev()
                .find(|&l| !v.levels[l].is_empty())
                .unwrap_or(1)
        };
        for level in 0..bottom {
            let (plan, version) = {
                let v = self.versions.lock().current();
                match manual::into_next_level(&v, level, range) {
                    Some(p) => (p, v),
                    None => continue,
                }
            };
            self.run_plan(&plan, &version)?;
        }
        loop {
            let (plan, version) = {
                let v = self.versions.lock().current();
                let fresh = |t: &crate::version::TableHandle| t.number() >= first_output;
                match manual::next_bottom_rewrite(&v, bottom, range, fresh) {
                    Some(p) => (p, v),
                    None => return Ok(()),
                }
            };
            self.run_plan(&plan, &version)?;
        }
    }
}
