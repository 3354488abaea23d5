//! Invariant checks of the tree and the directory, for tests and tools: levels 1+ sorted and
//! not overlapping, and every table file in the directory accounted for (in the current
//! version, being written by a job, held by an older reader, or queued for deletion).

use super::Core;
use crate::filename::{self, FileKind};
use crate::version::set as vset;
use std::collections::HashSet;
use std::time::Duration;

impl Core {
    /// Returns a description of the first violation found.
    pub(crate) fn check_invariants(&self) -> std::result::Result<(), String> {
        // A table's last holder queues its file just before the purge thread deletes it, so a
        // file seen between the two may look orphaned: only one that stays is a leak.
        let mut last = Ok(());
        for _ in 0..50 {
            last = self.check_invariants_once();
            match &last {
                Err(e) if e.contains("no version references it") => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => return last,
            }
        }
        last
    }

    fn check_invariants_once(&self) -> std::result::Result<(), String> {
        let vs = self.versions.lock();
        let v = vs.current();
        v.check_invariants()?;
        let live: HashSet<u64> = v.live_numbers().into_iter().collect();
        let files = vset::list_files(self.fs.as_ref(), &self.dir).map_err(|e| e.to_string())?;
        let pending = self.pending_outputs.lock().clone();
        let tables = self.tables.lock();
        for (name, kind) in files {
            if let FileKind::Table(n) = kind {
                // A table may be on disk outside the current version only while a job is
                // writing it, while a reader of an older version still holds it, or while it
                // waits for the purge thread.
                let held = tables.get(&n).is_some_and(|w| w.strong_count() > 0);
                let queued = self
                    .env
                    .obsolete
                    .is_pending(&filename::table_path(&self.dir, n));
                if !live.contains(&n) && !pending.contains(&n) && !held && !queued {
                    let mut live: Vec<u64> = live.iter().copied().collect();
                    live.sort_unstable();
                    return Err(format!(
                        "table {name} is on disk but no version references it \
                         (current version: {live:?}, being written: {pending:?})"
                    ));
                }
            }
        }
        Ok(())
    }
}
