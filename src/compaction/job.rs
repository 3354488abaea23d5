//! Running flushes and compactions.
//!
//! Range tombstones travel with the entries: a flush writes the memtable's tombstones into its
//! table; a compaction merges its inputs' tombstones, drops every version that a tombstone
//! visible to all readers covers, keeps the tombstones until the output is the bottom of the
//! tree for their range (and then only those a snapshot still needs), and cuts them at the
//! boundaries of its output tables: a table cut between user keys `k1` and `k2` takes the
//! tombstones below `k1 ++ 0x00` and the next table those from there on, so the outputs'
//! key ranges stay disjoint (see [`crate::sstable::bounds`]).

use super::bits::{filter_for_new_table, Incoming};
use super::picker::{max_grandparent_overlap, Plan};
use super::syncer::Syncer;
use crate::error::{io_context, Error, Result};
use crate::filename;
use crate::filter::TableFilter;
use crate::fs::FileSystem;
use crate::iter::{BoxedIter, KeyRange, MergeIter};
use crate::key::{self, SeqNo, ValueKind};
use crate::memtable::Memtable;
use crate::options::Options;
use crate::range_del::{self, successor, Fragments};
use crate::sstable::{BuildOptions, CacheUse, TableBuilder};
use crate::version::{
    level_entries, table_entries, FileMeta, TableEnv, TableHandle, Version, VersionEdit,
};
use bytes::Bytes;
use parking_lot::Mutex;
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// What a job needs from the database.
pub(crate) struct JobContext<'a> {
    pub(crate) fs: &'a Arc<dyn FileSystem>,
    pub(crate) dir: &'a Path,
    pub(crate) opts: &'a Options,
    pub(crate) file_numbers: &'a AtomicU64,
    pub(crate) shutting_down: &'a AtomicBool,
    /// Numbers of tables being written by running jobs: on disk, not yet in a version.
    pub(crate) pending_outputs: &'a Mutex<BTreeSet<u64>>,
    /// What the tables share (caches; the queue the files of failed outputs go to).
    pub(crate) env: &'a Arc<TableEnv>,
    /// For an open's replay: the first and last WAL its tables hold writes of, recorded in
    /// each table's properties; `None` for every other job.
    pub(crate) replayed_wals: Option<(u64, u64)>,
}

/// What a finished job produced, to be committed with one manifest edit.
#[derive(Debug, Default)]
pub(crate) struct JobOutput {
    pub(crate) edit: VersionEdit,
    pub(crate) opened: Vec<Arc<TableHandle>>,
    pub(crate) bytes_read: u64,
    pub(crate) bytes_written: u64,
    pub(crate) trivial_move: bool,
    /// Input tables dropped without being read: a range tombstone covered them whole.
    pub(crate) tables_dropped_unread: u64,
    /// The filter bytes the job held under the memory limit: to be dropped once its tables
    /// are in the version (see `bits::filter_for_new_table`).
    pub(crate) filter_reservation: Option<super::bits::FilterReservation>,
}

/// Writes tables for one job and removes them again if the job fails.
struct Outputs<'a> {
    ctx: &'a JobContext<'a>,
    level: u32,
    filter: TableFilter,
    current: Option<(u64, TableBuilder)>,
    done: Vec<(FileMeta, Arc<TableHandle>)>,
    buf: Vec<u8>,
    /// Every range tombstone the job writes; each table gets the pieces in its own span.
    range_dels: Fragments,
    /// Where the open table's span starts (`None`: below every key).
    lower: Option<Bytes>,
    /// The user key of the last entry added.
    last_user: Vec<u8>,
    /// Syncs finished tables while the next is written (compactions); `None`: each table is
    /// synced as it is finished (a flush, which writes one).
    syncer: Option<Syncer>,
}

impl<'a> Outputs<'a> {
    fn new(
        ctx: &'a JobContext<'a>,
        level: u32,
        filter: TableFilter,
        range_dels: Fragments,
        syncer: Option<Syncer>,
    ) -> Self {
        Outputs {
            syncer,
            ctx,
            level,
            filter,
            current: None,
            done: Vec::new(),
            buf: Vec::new(),
            range_dels,
            lower: None,
            last_user: Vec::new(),
        }
    }

    /// Opens a new table if none is open.
    fn open(&mut self) -> Result<()> {
        if self.current.is_none() {
            let number = self.ctx.file_numbers.fetch_add(1, Ordering::SeqCst);
            let number = filename::check_new_number(self.ctx.dir, number)?;
            self.ctx.pending_outputs.lock().insert(number);
            let path = filename::table_path(self.ctx.dir, number);
            let builder = TableBuilder::create(
                self.ctx.fs.as_ref(),
                &path,
                BuildOptions {
                    block_size: self.ctx.opts.block_size,
                    filter: self.filter,
                    level: self.level,
                    replayed_wals: self.ctx.replayed_wals,
                },
            )
            .inspect_err(|_| {
                // No builder owns the number: release it here (whatever file the failed
                // create left is garbage the obsolete-file sweep may remove).
                self.ctx.pending_outputs.lock().remove(&number);
            })?;
            self.current = Some((number, builder));
        }
        Ok(())
    }

    fn add(&mut self, user_key: &[u8], trailer: u64, value: &[u8]) -> Result<()> {
        self.open()?;
        self.last_user.clear();
        self.last_user.extend_from_slice(user_key);
        self.buf.clear();
        key::encode_into(&mut self.buf, user_key, trailer);
        if let Some((_, b)) = self.current.as_mut() {
            b.add(&self.buf, value)?;
        }
        Ok(())
    }

    fn current_size(&self) -> u64 {
        self.current.as_ref().map_or(0, |(_, b)| b.estimated_size())
    }

    fn has_current(&self) -> bool {
        self.current.as_ref().is_some_and(|(_, b)| b.entries() > 0)
    }

    /// Finishes the open table, if any, at a cut before the next entry (its range tombstones
    /// end at the successor of its last key), and opens it for reading (which verifies it).
    fn cut(&mut self) -> Result<()> {
        let upper = successor(&self.last_user);
        self.finish_current(Some(upper))
    }

    /// Finishes the open table, if any, with the range tombstones of its span, which ends at
    /// `upper` (`None`: above every key), and opens it for reading (which verifies it).
    fn finish_current(&mut self, upper: Option<Bytes>) -> Result<()> {
        let lower = std::mem::replace(&mut self.lower, upper.clone());
        let span = self.range_dels.clip(lower.as_deref(), upper.as_deref());
        if self.current.is_none() && !span.is_empty() {
            // Tombstones and no entry: a table of tombstones only.
            self.open()?;
        }
        let Some((number, mut builder)) = self.current.take() else {
            return Ok(());
        };
        builder.set_range_tombstones(span);
        let path = filename::table_path(self.ctx.dir, number);
        let finished = match self.syncer.as_mut() {
            Some(syncer) => builder
                .finish_unsynced()
                .and_then(|(built, file, path)| syncer.submit(path, file).map(|()| built)),
            None => builder.finish(),
        };
        let built = match finished {
            Ok(b) => b,
            Err(e) => {
                let _ = self.ctx.fs.remove(&path);
                self.ctx.pending_outputs.lock().remove(&number);
                return Err(e);
            }
        };
        if built.fuse_fell_back {
            self.ctx
                .env
                .fuse_fallbacks
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let meta = FileMeta::new(number, built.file_size, &built.bounds);
        let handle = TableHandle::open(self.ctx.env, meta.clone());
        if let Err(e) = handle.reader() {
            handle.mark_obsolete();
            self.ctx.pending_outputs.lock().remove(&number);
            return Err(e);
        }
        self.done.push((meta, handle));
        Ok(())
    }

    /// Waits until every table is synced, then syncs the directory so that the new files'
    /// names are durable before the manifest refers to them.
    fn commit(mut self) -> Result<Vec<(FileMeta, Arc<TableHandle>)>> {
        self.finish_current(None)?;
        if let Some(syncer) = self.syncer.take() {
            syncer.wait()?;
        }
        if !self.done.is_empty() {
            self.ctx
                .fs
                .sync_dir(self.ctx.dir)
                .map_err(|e| io_context("sync directory", self.ctx.dir, e))?;
        }
        Ok(std::mem::take(&mut self.done))
    }
}

impl Drop for Outputs<'_> {
    fn drop(&mut self) {
        // Syncs still in flight end first: nothing of the job's outlives it.
        drop(self.syncer.take());
        // Reached with tables still listed only when the job failed: delete them.
        let mut pending = self.ctx.pending_outputs.lock();
        if let Some((number, _)) = self.current.take() {
            let _ = self
                .ctx
                .fs
                .remove(&filename::table_path(self.ctx.dir, number));
            pending.remove(&number);
        }
        for (meta, handle) in self.done.drain(..) {
            handle.mark_obsolete();
            pending.remove(&meta.number);
        }
    }
}

/// Writes a sealed memtable to one L0 table. An empty memtable writes nothing.
pub(crate) fn flush_memtable(
    ctx: &JobContext<'_>,
    mem: &Memtable,
    version: Arc<Version>,
    smallest_snapshot: SeqNo,
) -> Result<JobOutput> {
    let mut out = JobOutput::default();
    if mem.is_empty() {
        return Ok(out);
    }
    let first = mem.first().map(|(k, _)| k.user_key).unwrap_or_default();
    let last = mem.last().map(|(k, _)| k.user_key).unwrap_or_default();
    let incoming = Incoming {
        level: 0,
        keys: mem.len() as u64,
        output_keys: mem.len() as u64,
        range: (&first, &last),
        replaced_filter_bytes: 0,
    };
    let (filter, reservation) =
        filter_for_new_table(ctx.opts, &version, &incoming, &ctx.env.filter_bytes_planned);
    out.filter_reservation = reservation;
    // Only the filter needed it: held while the table is written, it could be the last
    // holder of tables a compaction makes obsolete meanwhile, and keep them on disk past the
    // `compact()` that made them so.
    drop(version);
    // Of each piece's sequence numbers, only those a live snapshot can tell apart are kept
    // (nested range removes, such as a log purged again and again, would otherwise keep one
    // per remove in every piece).
    let range_dels = mem
        .range_tombstones()
        .map(|r| r.fragments().collapse(smallest_snapshot, |_| false))
        .unwrap_or_default();
    let mut outputs = Outputs::new(ctx, 0, filter, range_dels, None);
    for (k, v) in mem.iter() {
        outputs.add(&k.user_key, k.trailer, v)?;
    }
    for (meta, handle) in outputs.commit()? {
        out.bytes_written += meta.size;
        out.edit.last_sequence = Some(meta.max_seq);
        out.edit.added.push((0, meta));
        out.opened.push(handle);
    }
    Ok(out)
}

/// Tells, for increasing user keys, whether any level below the output holds a key.
struct DeeperLevels<'a> {
    levels: Vec<(&'a [Arc<TableHandle>], usize)>,
}

impl<'a> DeeperLevels<'a> {
    fn new(version: &'a Version, output_level: usize) -> Self {
        DeeperLevels {
            levels: version.levels[output_level + 1..]
                .iter()
                .map(|l| (l.as_slice(), 0))
                .collect(),
        }
    }

    /// True if no deeper level's key range contains `user_key` (keys must not decrease
    /// between calls).
    fn is_base_for(&mut self, user_key: &[u8]) -> bool {
        for (tables, i) in self.levels.iter_mut() {
            while *i < tables.len() && tables[*i].meta.largest_user() < user_key {
                *i += 1;
            }
            if *i < tables.len() && tables[*i].meta.smallest_user() <= user_key {
                return false;
            }
        }
        true
    }
}

/// True if a level below `output_level` holds a table whose key range meets `[start, end)`
/// (`end = None`: unbounded): a range tombstone over it may still delete something there.
fn overlaps_deeper(
    version: &Version,
    output_level: usize,
    start: &[u8],
    end: Option<&[u8]>,
) -> bool {
    version.levels[output_level + 1..].iter().any(|tables| {
        let i = tables.partition_point(|t| t.meta.largest_user() < start);
        tables
            .get(i)
            .is_some_and(|t| end.is_none_or(|e| t.meta.smallest_user() < e))
    })
}

/// Cuts outputs so that no one output overlaps too many grandparent bytes.
struct GrandparentCut<'a> {
    tables: &'a [Arc<TableHandle>],
    i: usize,
    overlapped: u64,
    seen_key: bool,
    limit: u64,
}

impl GrandparentCut<'_> {
    fn should_cut_before(&mut self, user_key: &[u8]) -> bool {
        while self.i < self.tables.len()
            && key::cmp_user(self.tables[self.i].meta.largest_user(), user_key).is_lt()
        {
            if self.seen_key {
                self.overlapped += self.tables[self.i].meta.size;
            }
            self.i += 1;
        }
        self.seen_key = true;
        if self.overlapped > self.limit {
            self.overlapped = 0;
            return true;
        }
        false
    }
}

/// Runs a compaction: merges the inputs, drops versions no snapshot can see and tombstones
/// with nothing below them, and writes outputs split at the target size, at too much
/// grandparent overlap, and only between user keys.
pub(crate) fn compact(
    ctx: &JobContext<'_>,
    plan: &Plan,
    version: &Version,
    smallest_snapshot: SeqNo,
) -> Result<JobOutput> {
    let level = plan.level;
    let out_level = plan.output_level();
    let mut out = JobOutput::default();
    if let Some(last) = plan
        .inputs
        .iter()
        .map(|t| &t.meta.largest)
        .max_by(|a, b| key::cmp_encoded(a, b))
    {
        out.edit
            .compact_pointers
            .push((level as u32, last.to_vec()));
    }
    if plan.trivial_move {
        for t in &plan.inputs {
            out.edit.deleted.push((level as u32, t.number()));
            out.edit.added.push((out_level as u32, t.meta.clone()));
        }
        out.trivial_move = true;
        return Ok(out);
    }
    // The inputs' range tombstones: what they delete, and what of them must be kept.
    let mut input_rd = Vec::new();
    for t in plan.all_inputs() {
        input_rd.extend(t.reader()?.range_dels().cloned());
    }
    let input_rd = range_del::merge(input_rd.iter().map(|f| &**f));
    // A table whose whole key range a newer tombstone that every reader sees covers holds
    // nothing any reader can see: it goes without being read (RocksDB's "delete files in
    // range"). Its own tombstones stay in the merged set above (they are older and inside
    // its range, so the covering one shadows them, and `collapse` drops them as such).
    let unread = |t: &TableHandle| {
        !input_rd.is_empty()
            && input_rd.covers_span(
                t.meta.smallest_user(),
                t.meta.largest_user(),
                t.meta.max_seq,
                smallest_snapshot,
            )
    };
    let read_inputs: Vec<Arc<TableHandle>> =
        plan.inputs.iter().filter(|t| !unread(t)).cloned().collect();
    let read_next: Vec<Arc<TableHandle>> = plan
        .next_inputs
        .iter()
        .filter(|t| !unread(t))
        .cloned()
        .collect();
    out.tables_dropped_unread =
        (plan.inputs.len() + plan.next_inputs.len() - read_inputs.len() - read_next.len()) as u64;
    let mut sources: Vec<BoxedIter> = Vec::new();
    if level == 0 {
        for t in &read_inputs {
            sources.push(Box::new(table_entries(
                t,
                KeyRange::all(),
                CacheUse::Bypass,
            )?));
        }
    } else {
        sources.push(Box::new(level_entries(
            &read_inputs,
            KeyRange::all(),
            CacheUse::Bypass,
        )));
    }
    sources.push(Box::new(level_entries(
        &read_next,
        KeyRange::all(),
        CacheUse::Bypass,
    )));
    let (lo, hi) = super::picker::user_range(plan.all_inputs());
    let incoming = Incoming {
        level: out_level,
        keys: plan.incoming_entries(),
        output_keys: plan
            .all_inputs()
            .map(|t| t.meta.entries)
            .fold(0, u64::saturating_add),
        range: (&lo, &hi),
        replaced_filter_bytes: plan.all_inputs().map(|t| t.filter_bytes() as u64).sum(),
    };
    let (filter, reservation) =
        filter_for_new_table(ctx.opts, version, &incoming, &ctx.env.filter_bytes_planned);
    out.filter_reservation = reservation;
    let kept_rd = input_rd.collapse(smallest_snapshot, |f| {
        !overlaps_deeper(version, out_level, &f.start, f.end.as_deref())
    });
    let mut outputs = Outputs::new(ctx, out_level as u32, filter, kept_rd, Some(Syncer::new()));
    let mut deeper = DeeperLevels::new(version, out_level);
    let mut cut = GrandparentCut {
        tables: &plan.grandparents,
        i: 0,
        overlapped: 0,
        seen_key: false,
        limit: max_grandparent_overlap(ctx.opts),
    };
    // The user key of the entry before (in one reused buffer: no allocation per key).
    let mut current_user: Vec<u8> = Vec::new();
    let mut last_seq_for_key = SeqNo::MAX;
    let mut n = 0u64;
    for entry in MergeIter::new(sources) {
        let e = entry?;
        n += 1;
        if n.is_multiple_of(1024) && ctx.shutting_down.load(Ordering::Relaxed) {
            return Err(Error::Closed);
        }
        let new_key = n == 1 || !key::same_user(&current_user, &e.user_key);
        if new_key {
            current_user.clear();
            current_user.extend_from_slice(&e.user_key);
            last_seq_for_key = SeqNo::MAX;
        }
        let seq = e.seq();
        let drop = if last_seq_for_key <= smallest_snapshot {
            // A newer version of this key is visible to every snapshot.
            true
        } else if input_rd.covering_seq(&e.user_key, smallest_snapshot) > seq {
            // A range tombstone that every snapshot sees deletes it.
            true
        } else {
            e.kind() == Some(ValueKind::Delete)
                && seq <= smallest_snapshot
                && deeper.is_base_for(&e.user_key)
        };
        last_seq_for_key = seq;
        if drop {
            continue;
        }
        if new_key && outputs.has_current() {
            let gp_cut = cut.should_cut_before(&e.user_key);
            if gp_cut || outputs.current_size() >= ctx.opts.target_table_size {
                outputs.cut()?;
            }
        } else if new_key {
            cut.should_cut_before(&e.user_key);
        }
        outputs.add(&e.user_key, e.trailer, &e.value)?;
    }
    out.bytes_read = read_inputs
        .iter()
        .chain(&read_next)
        .map(|t| t.meta.size)
        .fold(0, u64::saturating_add);
    for t in &plan.inputs {
        out.edit.deleted.push((level as u32, t.number()));
    }
    for t in &plan.next_inputs {
        out.edit.deleted.push((out_level as u32, t.number()));
    }
    for (meta, handle) in outputs.commit()? {
        out.bytes_written += meta.size;
        out.edit.added.push((out_level as u32, meta));
        out.opened.push(handle);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::MemFs;
    use crate::key::ValueKind;

    #[test]
    fn failed_job_removes_its_outputs() {
        let mem = MemFs::new();
        let dir = Path::new("/db");
        mem.create_dir_all(dir).unwrap();
        let fs: Arc<dyn FileSystem> = Arc::new(mem.clone());
        let numbers = AtomicU64::new(10);
        let stop = AtomicBool::new(false);
        let pending = Mutex::new(BTreeSet::new());
        let env = TableEnv::new(fs.clone(), dir, 100, None);
        let opts = Options::default();
        let ctx = JobContext {
            fs: &fs,
            dir,
            opts: &opts,
            file_numbers: &numbers,
            shutting_down: &stop,
            pending_outputs: &pending,
            env: &env,
            replayed_wals: None,
        };
        let m = Memtable::new(1);
        m.insert(
            Bytes::from_static(b"k"),
            1,
            ValueKind::Put,
            Bytes::from_static(b"v"),
        )
        .unwrap();
        // Fail the table's sync: the job fails and leaves no file behind.
        mem.set_fault(Some(crate::fs::FaultPlan::nth(crate::fs::OpKind::Sync, 0)));
        assert!(flush_memtable(&ctx, &m, Arc::default(), SeqNo::MAX).is_err());
        assert!(mem.list(dir).unwrap().is_empty());
        assert!(pending.lock().is_empty());
        mem.set_fault(None);
        let out = flush_memtable(&ctx, &m, Arc::default(), SeqNo::MAX).unwrap();
        assert_eq!(out.edit.added.len(), 1);
        assert_eq!(mem.list(dir).unwrap(), vec!["000011.sst".to_string()]);
        assert_eq!(pending.lock().iter().copied().collect::<Vec<_>>(), vec![11]);
        pending.lock().clear();
        // A table file that cannot even be created releases its number too.
        mem.set_fault(Some(crate::fs::FaultPlan::nth(
            crate::fs::OpKind::Create,
            0,
        )));
        assert!(flush_memtable(&ctx, &m, Arc::default(), SeqNo::MAX).is_err());
        assert!(pending.lock().is_empty(), "{:?}", pending.lock());
    }
}
