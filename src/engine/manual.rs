//! Manual compaction ([`Db::compact`](crate::Db::compact),
//! [`Db::compact_range`](crate::Db::compact_range)): the caller's request waits for the
//! compaction thread, which runs it between automatic compactions.
//!
//! The tables overlapping the key range merge down level by level to the deepest level that
//! holds data, rewritten at every step (no trivial move), and the tables of that bottom level
//! the steps above did not rewrite are rewritten in place. Every output is written by a merge
//! that drops the versions no snapshot can see and, at the bottom, the tombstones no snapshot
//! can see, and is cut at `target_table_size`.
//!
//! Below L0 the merges and the rewrite go in steps of bounded input (see
//! [`manual::step_bytes`]), and after each step L0 is compacted into L1 if it holds
//! `l0_compaction_trigger` tables (with automatic compaction on): the flushes of the writes
//! made meanwhile would otherwise pile up in L0 for the whole manual compaction, and stop
//! writers at `l0_stop_trigger`, since the one compaction thread runs nothing else.

use super::{Core, State};
use crate::compaction::{manual, picker, Plan};
use crate::error::Result;
use crate::iter::KeyRange;
use crate::version::NUM_LEVELS;
use parking_lot::MutexGuard;
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
        st.bg.manual_waiting.insert(id);
        let outcome = self.wait_for_manual(&mut st, id, range);
        // Whichever way the wait ended, no outcome is kept for this request from now on.
        st.bg.manual_waiting.remove(&id);
        st.bg.manual_results.remove(&id);
        drop(st);
        outcome?;
        self.wait_for_purge()
    }

    /// Queues manual compaction `id` of `range` and waits for its outcome.
    fn wait_for_manual(
        &self,
        st: &mut MutexGuard<'_, State>,
        id: u64,
        range: KeyRange,
    ) -> Result<()> {
        // One request at a time: wait for the slot. Writes stopped (a failure, or a panic of
        // the compaction thread, which then never frees it) or closing end the wait.
        while st.bg.manual.is_some() {
            self.done_cv.wait_for(st, Duration::from_millis(100));
            self.writable(st)?;
        }
        st.bg.manual = Some((id, range));
        self.bg_cv.notify_all();
        // Then for this request's own outcome (not the last one finished: requests that
        // waited for the slot together may take it in any order). A stop or a close ends the
        // wait: a job not yet started then never runs, one running finishes for no one.
        loop {
            if let Some(outcome) = st.bg.manual_results.remove(&id) {
                return outcome;
            }
            self.writable(st)?;
            self.done_cv.wait_for(st, Duration::from_millis(100));
        }
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
        let budget = manual::step_bytes(&self.opts);
        for level in 0..bottom {
            // What the level holds of the range now (see `manual::level_span`).
            let span = match manual::level_span(&self.versions.lock().current(), level, range) {
                Some(span) => span,
                None => continue,
            };
            // The largest key of the step before: each step starts past it.
            let mut after: Option<Vec<u8>> = None;
            loop {
                let (plan, version) = {
                    let v = self.versions.lock().current();
                    match span.next_step(&v, level, after.as_deref(), budget) {
                        Some(p) => (p, v),
                        None => break,
                    }
                };
                after = Some(picker::user_range(&plan.inputs).1);
                self.run_manual_step(&plan, &version)?;
                if level == 0 {
                    // L0 goes down in one step (its tables overlap each other).
                    break;
                }
            }
        }
        loop {
            let (plan, version) = {
                let v = self.versions.lock().current();
                // An output of this compaction, or of an L0 compaction between its steps.
                let fresh = |t: &crate::version::TableHandle| t.number() >= first_output;
                match manual::next_bottom_rewrite(&v, bottom, range, fresh, budget) {
                    Some(p) => (p, v),
                    None => return Ok(()),
                }
            };
            self.run_manual_step(&plan, &version)?;
        }
    }

    /// Runs one step of a manual compaction, then compacts L0 into L1 if it holds
    /// `l0_compaction_trigger` tables and automatic compaction is on (the compaction of L0
    /// that [`picker::pick`] would choose), so that writes made meanwhile are not stopped at
    /// `l0_stop_trigger` until the manual compaction is over. Either ends at once if writes
    /// have stopped, or with [`Error::Closed`](crate::Error::Closed) once the database is
    /// closing (a step may be too small for the job's own check, every 1,024 entries, to
    /// see it, and `close` waits for this thread).
    fn run_manual_step(&self, plan: &Plan, version: &crate::version::Version) -> Result<()> {
        self.read_path().check_open()?;
        self.stop_if_writes_stopped()?;
        self.run_plan(plan, version)?;
        self.read_path().check_open()?;
        if !self.opts.auto_compaction {
            return Ok(());
        }
        let (plan, version) = {
            let v = self.versions.lock().current();
            match picker::level0(&v, &self.opts) {
                Some(p) => (p, v),
                None => return Ok(()),
            }
        };
        self.stop_if_writes_stopped()?;
        self.run_plan(&plan, &version)
    }

    /// The stop error once writes have stopped: a manual compaction then ends between two of
    /// its steps, as no automatic one would run (its caller has been told of the stop).
    fn stop_if_writes_stopped(&self) -> Result<()> {
        let mut st = self.state.lock();
        match st.life.poisoned.clone() {
            Some(e) => {
                st.bg.manual_gave_up = true;
                Err(e)
            }
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::error::Error;
    use crate::fs::{FileSystem, MemFs};
    use crate::iter::KeyRange;
    use crate::{Db, Options};
    use std::path::Path;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    /// A database on `fs` with two L0 tables of the same 100 keys; with `below`, a first
    /// table of them compacted into L1 before those, for a manual compaction's steps to reach.
    fn flushed_twice(fs: &MemFs, below: bool) -> Db {
        let opts = Options::default()
            .file_system(Arc::new(fs.clone()) as Arc<dyn FileSystem>)
            .auto_compaction(false);
        let db = Db::open_with("/db", opts).unwrap();
        for round in 0..2 + u32::from(below) {
            for i in 0..100u32 {
                db.insert(format!("k{i:03}"), format!("v{round}")).unwrap();
            }
            db.flush().unwrap();
            if below && round == 0 {
                db.compact().unwrap();
            }
        }
        db
    }

    /// Stops writes as a failed WAL fsync does; returns the state lock it took.
    fn stop_writes(core: &super::Core) -> parking_lot::MutexGuard<'_, super::State> {
        let mut st = core.state.lock();
        let cause = Error::Io(Arc::new(std::io::Error::other("a failed WAL fsync")));
        core.poison(&mut st, &cause);
        st
    }

    /// Review finding (session 22): a manual compaction queued before writes stopped still
    /// ran once the compaction thread got to it (rewriting its whole range on a database that
    /// refuses writes, where an automatic one would not run), and its outcome was kept for a
    /// caller that had already left on the stop, never to be taken.
    #[test]
    fn a_manual_compaction_queued_before_a_stop_does_not_run() {
        let fs = MemFs::new();
        let db = flushed_twice(&fs, false);
        let core = db.core();
        {
            // The state a caller leaves behind when the stop ends its wait: the request in
            // the slot, not started, and no one waiting for it.
            let mut st = stop_writes(core);
            st.bg.next_manual += 1;
            st.bg.manual = Some((st.bg.next_manual, KeyRange::all()));
            core.bg_cv.notify_all();
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let st = core.state.lock();
            if st.bg.manual.is_none() && !st.bg.compaction_running {
                assert!(st.bg.manual_results.is_empty());
                break;
            }
            drop(st);
            assert!(Instant::now() < deadline, "the request was never taken");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(db.stats().compactions, 0);
        assert_eq!(db.levels()[0].tables, 2);
        let tables = fs.list(Path::new("/db")).unwrap();
        assert_eq!(tables.iter().filter(|n| n.ends_with(".sst")).count(), 2);
        // A caller asking now is refused at once.
        assert!(matches!(db.compact(), Err(Error::Poisoned(_))));
    }

    /// Review finding (session 27): `wait_for_compactions` returned while a manual compaction
    /// was asked for but not started (the compaction thread not woken to it yet), which then
    /// rewrote tables after the caller was told the tree was quiet. It waits for it now.
    #[test]
    fn wait_for_compactions_waits_for_a_manual_compaction_not_started() {
        let db = Arc::new(flushed_twice(&MemFs::new(), false));
        {
            // A request in the slot, the compaction thread not told yet.
            let mut st = db.core().state.lock();
            st.bg.next_manual += 1;
            st.bg.manual = Some((st.bg.next_manual, KeyRange::all()));
        }
        // What the tree looks like the moment the wait returns.
        let waiting = {
            let db = Arc::clone(&db);
            std::thread::spawn(move || {
                db.wait_for_compactions().unwrap();
                let pending = db.core().state.lock().bg.manual.is_some();
                (pending, db.levels()[0].tables)
            })
        };
        // The compaction thread may wake to the request on its own meanwhile, or now.
        std::thread::sleep(Duration::from_millis(200));
        db.core().bg_cv.notify_all();
        let (pending, l0) = waiting.join().unwrap();
        assert!(!pending, "returned with a manual compaction pending");
        assert_eq!(l0, 0, "returned before the manual compaction ran");
    }

    /// Review finding (session 22): a manual compaction that was running when writes stopped
    /// went on through every remaining step (each level's merge, then the bottom rewrites)
    /// for a caller that had left. It ends before its next step.
    #[test]
    fn a_running_manual_compaction_ends_at_its_next_step_once_writes_stop() {
        let db = flushed_twice(&MemFs::new(), true);
        let compactions = db.stats().compactions;
        let core = db.core();
        drop(stop_writes(core));
        // What the compaction thread runs for a request: here it finds writes stopped before
        // its first step.
        let res = core.run_manual_compaction(&KeyRange::all());
        assert!(matches!(res, Err(Error::Poisoned(_))), "{res:?}");
        assert!(core.state.lock().bg.manual_gave_up);
        assert_eq!(db.stats().compactions, compactions);
        assert_eq!(db.levels()[0].tables, 2);
    }
}
