//! Opening a database directory: take the lock, read `CURRENT` and replay the manifest,
//! replay the WALs the manifest does not cover (checking that sequence numbers continue
//! without a gap and never go backwards), refuse to delete an orphan table that holds writes
//! nobody else records, and, unless read-only, write the replayed writes to an L0 table under a
//! fresh manifest and remove every file the manifest does not reference.

use super::write::{apply_op, apply_range_deletes};
use crate::compaction::{self, JobContext, JobOutput};
use crate::error::{io_context, Error, Result};
use crate::filename::{self, FileKind};
use crate::fs::{FileLock, FileSystem};
use crate::key::{SeqNo, MAX_SEQ};
use crate::memtable::{MemWriter, Memtable};
use crate::options::Options;
use crate::stats::Counters;
use crate::version::set::{self as vset, VersionSet};
use crate::version::TableEnv;
use crate::wal::{self, WalBatch, WalWriter};
use parking_lot::Mutex;
use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// What an open found and prepared.
pub(super) struct Recovered {
    pub(super) lock: Option<Box<dyn FileLock>>,
    pub(super) versions: VersionSet,
    /// The memtable to write to (read-only: the replayed writes, the newest of them).
    pub(super) mem: Arc<Memtable>,
    /// Read-only: the older replayed writes, in memtables that filled up, oldest first.
    pub(super) imms: Vec<Arc<Memtable>>,
    /// The WAL to append to (`None` when read-only).
    pub(super) wal: Option<WalWriter>,
    /// The last sequence number in use.
    pub(super) last_seq: SeqNo,
    /// What the open counted (torn WAL tails), for the engine's statistics.
    pub(super) counters: Arc<Counters>,
}

/// How many times a read-only open starts again when a WAL it listed is removed before it
/// reads it (see [`recover`]).
const READ_ONLY_RESTARTS: u32 = 8;

/// What the steps of an open share.
struct Ctx<'a> {
    fs: &'a Arc<dyn FileSystem>,
    dir: &'a Path,
    opts: &'a Options,
    counters: &'a Counters,
    shutting_down: &'a AtomicBool,
}

/// Opens the database in `dir`; see the module documentation.
///
/// A read-only open holds no lock: the writer beside it may flush a memtable between this
/// open's listing of the directory (and read of the manifest) and its replay of that
/// memtable's WAL, and then remove the WAL. The manifest read is then older than the flush,
/// and the writes are in a table it does not list: the open starts again from the listing
/// (a few times at most) instead of failing with the missing file.
pub(super) fn recover(dir: &Path, opts: &Options, shutting_down: &AtomicBool) -> Result<Recovered> {
    let mut restarts = 0;
    loop {
        // Counted afresh each time: a restarted open keeps nothing it counted.
        let counters = Arc::new(Counters::default());
        let may_restart = opts.read_only && restarts < READ_ONLY_RESTARTS;
        if let Some(r) = recover_once(dir, opts, &counters, shutting_down, may_restart)? {
            return Ok(r);
        }
        restarts += 1;
        log::info!(
            "{}: a WAL was removed while opening read-only (a writer flushed it, or removed an unused one made ahead); starting again",
            dir.display()
        );
    }
}

/// One attempt of [`recover`]: `None` if a WAL it listed was gone when it came to replay it,
/// and `may_restart`; with `may_restart` false, that is the [`Error::Io`] it is.
fn recover_once(
    dir: &Path,
    opts: &Options,
    counters: &Arc<Counters>,
    shutting_down: &AtomicBool,
    may_restart: bool,
) -> Result<Option<Recovered>> {
    let fs = &opts.file_system;
    let ctx = Ctx {
        fs,
        dir,
        opts,
        counters,
        shutting_down,
    };
    // Whether a database must exist, or must not: checked before the lock (a refused open
    // touches nothing, not even the lock of a database open elsewhere) and again once it is
    // held, since another process may have created or destroyed the database in between.
    let check_exists = || -> Result<()> {
        let exists = fs.exists(&dir.join(filename::CURRENT));
        if exists && opts.error_if_exists {
            return Err(Error::InvalidArgument(format!(
                "a database already exists in {} and error_if_exists is true",
                dir.display()
            )));
        }
        if !exists && (opts.read_only || !opts.create_if_missing) {
            return Err(Error::InvalidArgument(format!(
                "no database in {}{}",
                dir.display(),
                if opts.read_only {
                    " (a read-only open never creates one)"
                } else {
                    " and create_if_missing is false"
                }
            )));
        }
        Ok(())
    };
    check_exists()?;
    let lock = if opts.read_only {
        None
    } else {
        fs.create_dir_all(dir)
            .map_err(|e| io_context("create directory", dir, e))?;
        let lock = fs.lock(&dir.join(filename::LOCK)).map_err(|e| {
            if e.kind() == std::io::ErrorKind::WouldBlock {
                Error::Locked
            } else {
                io_context("lock", &dir.join(filename::LOCK), e)
            }
        })?;
        check_exists()?;
        Some(lock)
    };
    let files = vset::list_files(fs.as_ref(), dir)?;
    let mut versions = open_versions(&ctx, &files)?;

    // Replay the WALs that the manifest does not cover, oldest first.
    let wals = wals_to_replay(&files, versions.log_number());
    if !opts.read_only {
        // Tables an earlier open's replay of these WALs wrote and never committed go first,
        // before this replay writes its own: left, they would take the room this open needs
        // (an open that failed for a full disk would fail again, and every crash during
        // recovery would leave another set). The directory sync below makes the removals
        // durable before this replay's tables appear.
        remove_uncommitted_replays(fs.as_ref(), dir, &files, &versions, &wals)?;
        // The WALs may hold bytes a crash left only in the page cache. Make them durable
        // before any of their contents go to a table: otherwise a power loss during this open
        // could leave a synced table holding writes that the WALs no longer hold.
        for &n in &wals {
            let path = filename::wal_path(dir, n);
            fs.sync_file(&path)
                .map_err(|e| io_context("sync", &path, e))?;
        }
        // And their names: a WAL takes records before the seal of the one before it syncs
        // the directory, so a crash can leave a WAL whose name is not durable yet.
        fs.sync_dir(dir)
            .map_err(|e| io_context("sync directory", dir, e))?;
    }
    // Replay flushes an L0 table whenever the recovered writes reach a memtable's size (or
    // a table's, if smaller), so that memory stays bounded however large the WALs are. The
    // tables join the tree in one manifest edit at the end; a crash before it leaves them
    // as unreferenced files that the next open removes (the WALs still hold their writes).
    // A read-only open writes nothing and keeps every replayed write in memory, in memtables
    // sealed at the same points (a skiplist holds at most 14 Mi entries).
    let part_limit = opts
        .memtable_size
        .min(usize::try_from(opts.target_table_size).unwrap_or(usize::MAX))
        .max(1);
    let (mut recovered, mut writer) = fresh_memtable()?;
    let mut parts = UncommittedParts {
        fs: fs.as_ref(),
        dir,
        list: Vec::new(),
    };
    let mut kept: Vec<Arc<Memtable>> = Vec::new();
    let mut seqs = SeqCheck::new(versions.last_sequence());
    // Where the history ends early: a WAL cut at pages a power loss lost, or a WAL whose
    // first write does not follow the last one replayed (the end of an earlier WAL was lost).
    // A WAL is sealed (synced whole) by the seal thread while the next one takes writes, and
    // no fsync of a WAL returns before every earlier one is sealed (`engine::seal`): so the
    // records after such an end were never synced, and are dropped as a power loss may drop
    // them, unless a sync mark after it proves a later fsync returned (corruption).
    let mut lost_end: Option<LostEnd> = None;
    // Keys and values of the writes replayed: the user bytes behind the tables that replay
    // writes (see `flush_recovered`).
    let mut replayed_user_bytes = 0u64;
    for (i, &n) in wals.iter().enumerate() {
        let path = filename::wal_path(dir, n);
        let mut first_in_file = true;
        let replayed = wal::replay(fs.as_ref(), &path, n, opts.read_only, |batch| {
            if lost_end.is_none() && i > 0 && first_in_file && seqs.starts_after_gap(&batch) {
                lost_end = Some(LostEnd {
                    path: path.clone(),
                    offset: batch.offset,
                    why: "its first write does not follow the last write of the WALs before it",
                    dropped: 0,
                });
                // (A cut at lost pages is counted below as the torn tail it is.)
                Counters::add(&counters.wal_torn_tails, 1);
            }
            if !batch.ops.is_empty() {
                first_in_file = false;
            }
            if let Some(end) = &mut lost_end {
                return end.drop_record(&path, &batch);
            }
            seqs.check(&path, &batch)?;
            // `check` proved `first_seq + ops - 1` does not overflow.
            let mut seal = |mem: &mut Memtable, writer: &mut MemWriter| {
                seal_replayed(
                    &ctx,
                    &versions,
                    (wals[0], n),
                    mem,
                    writer,
                    &mut parts.list,
                    &mut kept,
                )
            };
            let mut ranges = Vec::new();
            for (seq, op) in (batch.first_seq..).zip(batch.ops) {
                // A full memtable is written out even inside a record: the parts join the
                // tree together, so a batch still appears whole (and a WAL of an older
                // version, whose batches could hold more operations, still fits). Each part
                // keeps the range deletes of its own operations.
                if recovered.is_full() {
                    apply_range_deletes(&recovered, std::mem::take(&mut ranges));
                    seal(&mut recovered, &mut writer)?;
                }
                // The operation slices the record: the memtable counts the bytes it keeps.
                recovered.count_shared(op.key.len() + op.value.len());
                replayed_user_bytes += (op.key.len() + op.value.len()) as u64;
                apply_op(
                    &recovered,
                    &mut writer,
                    op.kind,
                    op.key,
                    op.value,
                    seq,
                    &mut ranges,
                )?;
            }
            apply_range_deletes(&recovered, ranges);
            if recovered.approx_bytes() >= part_limit {
                seal(&mut recovered, &mut writer)?;
            }
            Ok(())
        });
        let tail = match replayed {
            Err(Error::Io(e))
                if may_restart && e.kind() == std::io::ErrorKind::NotFound && !fs.exists(&path) =>
            {
                return Ok(None);
            }
            res => res?,
        };
        if let Some(at) = tail.torn_at {
            // Inside a history that already ended (a gap, or lost pages, in this WAL or an
            // earlier one) the tail is part of what that end dropped, which was counted.
            let counted = lost_end.is_none();
            if tail.lost_pages {
                log::warn!(
                    "{}: cut at offset {at}: pages there were lost, or a record header was stored half (a power loss before they were synced), while later ones were written; {} bytes of unsynced writes after them are dropped",
                    path.display(),
                    tail.dropped_bytes
                );
                if lost_end.is_none() {
                    lost_end = Some(LostEnd {
                        path: path.clone(),
                        offset: at,
                        why: "it was cut at pages lost unsynced",
                        dropped: 0,
                    });
                }
            } else {
                log::warn!(
                    "{}: cut a torn tail of {} bytes at offset {at}",
                    path.display(),
                    tail.dropped_bytes
                );
            }
            if counted {
                Counters::add(&counters.wal_torn_tails, 1);
                Counters::add(&counters.wal_torn_bytes, tail.dropped_bytes);
            }
        }
        log::info!("{}: replayed", path.display());
    }
    if let Some(end) = &lost_end {
        if end.dropped > 0 {
            log::warn!(
                "{}: the history ends at offset {} ({}): {} later records were never synced and are dropped",
                end.path.display(),
                end.offset,
                end.why,
                end.dropped
            );
        }
    }
    let last_seq = seqs.last;
    let leftovers = check_orphans(fs.as_ref(), dir, &files, &versions, &wals, last_seq)?;
    // A writable open removed every such leftover before its replay (and synced the
    // directory), so none can come back as a lost edit once this open's edit retires its
    // WALs; a read-only open leaves them.
    debug_assert!(opts.read_only || leftovers.is_empty(), "{leftovers:?}");

    if opts.read_only {
        // Nothing is written: the replayed writes stay in memory.
        return Ok(Some(Recovered {
            lock,
            versions,
            mem: Arc::new(recovered),
            imms: kept,
            wal: None,
            last_seq,
            counters: counters.clone(),
        }));
    }
    let replayed_wals = wals.first().copied().zip(wals.last().copied());
    let new_wal = flush_recovered(
        &ctx,
        &mut versions,
        &mut parts,
        &recovered,
        replayed_wals,
        last_seq,
    )?;
    // The tables replay wrote count as flushes (`flush_recovered`), and the writes in them
    // as user bytes, so that `Stats::write_amplification` of a reopened handle stays a ratio
    // of table bytes to the user bytes behind them.
    Counters::add(&counters.user_bytes_written, replayed_user_bytes);
    let wal_path = filename::wal_path(dir, new_wal);
    let writer = WalWriter::create(fs.as_ref(), &wal_path, new_wal, opts.log_writes)?;
    fs.sync_dir(dir)
        .map_err(|e| io_context("sync directory", dir, e))?;
    remove_unreferenced(fs.as_ref(), dir, &versions, new_wal)?;
    Ok(Some(Recovered {
        lock,
        versions,
        mem: Arc::new(Memtable::sized_for(new_wal, opts.memtable_size)),
        imms: Vec::new(),
        wal: Some(writer),
        last_seq,
        counters: counters.clone(),
    }))
}

/// The numbers of the WALs in `files` that the manifest does not cover (from `log_number`
/// on), oldest first.
fn wals_to_replay(files: &[(String, FileKind)], log_number: u64) -> Vec<u64> {
    let mut wals: Vec<u64> = files
        .iter()
        .filter_map(|(_, k)| match k {
            FileKind::Wal(n) if *n >= log_number => Some(*n),
            _ => None,
        })
        .collect();
    wals.sort_unstable();
    wals
}

/// The version set the manifest describes, or an empty one for a new database.
fn open_versions(ctx: &Ctx<'_>, files: &[(String, FileKind)]) -> Result<VersionSet> {
    let (fs, dir) = (ctx.fs, ctx.dir);
    let env = TableEnv::with_mode(
        fs.clone(),
        dir,
        ctx.opts.effective_max_open_files(),
        ctx.opts.make_block_cache(),
        ctx.opts.read_only,
    );
    log::info!(
        "{}: up to {} table files open at once (max_open_files {})",
        dir.display(),
        env.caches.files.capacity(),
        ctx.opts.max_open_files
    );
    let mut versions = match vset::read_current(fs.as_ref(), dir)? {
        Some(number) => {
            let (_, st) =
                vset::replay_current_manifest(fs.as_ref(), dir, number, ctx.opts.read_only)?;
            VersionSet::from_state(fs.clone(), &env, &st)
        }
        None => {
            if let Some((name, _)) = files
                .iter()
                .find(|(_, k)| matches!(k, FileKind::Table(_) | FileKind::Wal(_)))
            {
                return Err(Error::corruption(
                    &dir.join(filename::CURRENT),
                    0,
                    format!("CURRENT is missing but the directory holds {name}"),
                ));
            }
            log::info!("creating a new database in {}", dir.display());
            VersionSet::new_empty(fs.clone(), &env)
        }
    };
    for (_, k) in files {
        if let FileKind::Table(n) | FileKind::Wal(n) | FileKind::Manifest(n) | FileKind::Temp(n) = k
        {
            versions.mark_file_number_used(*n);
        }
    }
    versions.set_rewrite_at(ctx.opts.max_manifest_size);
    Ok(versions)
}

/// Where replay found the end of the durable history before the end of the last WAL (see
/// `recover`): every later record is dropped, and a later sync mark is corruption.
struct LostEnd {
    /// The WAL and offset where the history ends.
    path: PathBuf,
    offset: u64,
    why: &'static str,
    /// Records with writes dropped after it.
    dropped: u64,
}

impl LostEnd {
    /// Drops a record replayed after the end: fine for writes that were never synced, but a
    /// sync mark proves that an fsync of its WAL returned, which happens only once every
    /// earlier WAL is sealed whole, so the end before it is damage, not a power loss.
    fn drop_record(&mut self, path: &Path, batch: &WalBatch) -> Result<()> {
        if batch.ops.is_empty() {
            return Err(Error::corruption(
                path,
                batch.offset,
                format!(
                    "a sync mark follows the end of the history at {} offset {} ({}): writes synced before it were lost",
                    self.path.display(),
                    self.offset,
                    self.why
                ),
            ));
        }
        self.dropped += 1;
        Ok(())
    }
}

/// Sequence numbers across the manifest and the WAL records: they continue without a gap (a
/// gap means writes were lost: a WAL, or a manifest edit that retired one) and never go
/// backwards (a record older than the one before it is not a crash artefact). All arithmetic
/// on them is checked: they come from disk.
struct SeqCheck {
    /// The last sequence number seen (manifest, then each record).
    last: SeqNo,
    /// The last sequence number the manifest records (written to tables).
    manifest_last: SeqNo,
    /// The last sequence number of the previous WAL record, if any.
    prev_record_end: Option<SeqNo>,
}

impl SeqCheck {
    fn new(manifest_last: SeqNo) -> SeqCheck {
        SeqCheck {
            last: manifest_last,
            manifest_last,
            prev_record_end: None,
        }
    }

    /// True if `batch` holds writes that start past the next sequence number (and past the
    /// manifest's): writes between were lost.
    fn starts_after_gap(&self, batch: &WalBatch) -> bool {
        !batch.ops.is_empty()
            && batch.first_seq > self.manifest_last
            && batch.first_seq > self.last.saturating_add(1)
    }

    fn check(&mut self, path: &Path, batch: &WalBatch) -> Result<()> {
        let bad = |detail: String| Error::corruption(path, batch.offset, detail);
        if batch.ops.is_empty() {
            return Ok(());
        }
        let count = batch.ops.len() as u64;
        let end = batch
            .first_seq
            .checked_add(count - 1)
            .filter(|&e| e < MAX_SEQ)
            .ok_or_else(|| {
                bad(format!(
                    "record of {count} writes from sequence {} runs past the largest sequence number {MAX_SEQ}",
                    batch.first_seq
                ))
            })?;
        if batch.first_seq == 0 {
            return Err(bad("record starts at sequence number 0".into()));
        }
        // A WAL the manifest does not cover holds only writes after its last sequence: a
        // record at or below it would shadow newer versions in the tables.
        if batch.first_seq <= self.manifest_last {
            return Err(bad(format!(
                "record starts at sequence {} but the manifest already covers writes up to {}",
                batch.first_seq, self.manifest_last
            )));
        }
        if let Some(prev) = self.prev_record_end {
            if batch.first_seq <= prev {
                return Err(bad(format!(
                    "sequence numbers go backwards: this record starts at {} but an earlier record ended at {prev}",
                    batch.first_seq
                )));
            }
        }
        // `last < MAX_SEQ` here (it is a record end, or a manifest value checked on decode and
        // clamped below), so `last + 1` cannot wrap.
        let next = self.last.saturating_add(1);
        if batch.first_seq > next {
            return Err(bad(format!(
                "sequence numbers {next}..{} are missing before this record: a WAL or a manifest edit was lost",
                batch.first_seq - 1
            )));
        }
        self.prev_record_end = Some(end);
        self.last = self.last.max(end);
        Ok(())
    }
}

/// Starts a fresh manifest for this session, writes the replayed writes to an L0 table and
/// records that the old WALs are no longer needed. Returns the number of the WAL to write to
/// next.
///
/// The parts (and the last one, written here) stay in `parts`, removed if this fails, until
/// just before the edit that lists them is appended: from there a failure may come after the
/// manifest lists them, and they stay.
fn flush_recovered(
    ctx: &Ctx<'_>,
    versions: &mut VersionSet,
    parts: &mut UncommittedParts<'_>,
    recovered: &Memtable,
    replayed_wals: Option<(u64, u64)>,
    last_seq: SeqNo,
) -> Result<u64> {
    versions.write_new_manifest()?;
    let new_wal = filename::check_new_number(ctx.dir, versions.new_file_number())?;
    if let Some(wals) = replayed_wals {
        let last = flush_part(ctx, versions, wals, recovered)?;
        if !last.edit.added.is_empty() {
            parts.list.push(last);
        }
    }
    let mut edit = crate::version::VersionEdit::default();
    let mut opened = Vec::new();
    let mut bytes = 0;
    let tables = parts.list.len();
    for out in std::mem::take(&mut parts.list) {
        bytes += out.bytes_written;
        edit.added.extend(out.edit.added);
        opened.extend(out.opened);
    }
    edit.log_number = Some(new_wal);
    edit.last_sequence = Some(last_seq);
    versions.log_and_apply(edit, &opened)?;
    if let Some(e) = versions.failure() {
        // The edit is durable but the rewrite of an oversized manifest after it failed: a
        // database that could record no further edit is not opened for writing (D7).
        return Err(e.clone());
    }
    if bytes > 0 {
        Counters::add(&ctx.counters.flushes, tables as u64);
        Counters::add(&ctx.counters.bytes_flushed, bytes);
        log::info!("recovered the WALs into {tables} L0 tables ({bytes} bytes)");
    }
    Ok(new_wal)
}

/// Removes the tables, not in the manifest, that an earlier open's replay of WALs this open
/// replays again wrote (their first and last WALs, recorded in their properties, are still
/// at or above the manifest's log number, which that replay's edit would have moved past
/// them): that edit never committed, and the WALs still hold their writes. Tables that do not
/// open are left to [`check_orphans`]. If there are any to remove, the WALs are read first
/// (their checksums and contents, not replayed), and a damaged one fails the open before
/// anything is removed.
///
/// # Errors
/// An `Error::Io` if a table cannot be removed; the error reading a WAL (`Error::Corruption`
/// for a damaged one) if one cannot be read back.
fn remove_uncommitted_replays(
    fs: &dyn FileSystem,
    dir: &Path,
    files: &[(String, FileKind)],
    versions: &VersionSet,
    wals: &[u64],
) -> Result<()> {
    let live: HashSet<u64> = versions.current().live_numbers().into_iter().collect();
    let mut uncommitted = Vec::new();
    for (name, kind) in files {
        let FileKind::Table(n) = kind else { continue };
        if live.contains(n) {
            continue;
        }
        let path = dir.join(name);
        let Some(t) = open_orphan(fs, &path)? else {
            continue;
        };
        let Some((first, last)) = t.properties().replayed_wals else {
            continue;
        };
        if wals.binary_search(&first).is_ok() && wals.binary_search(&last).is_ok() {
            uncommitted.push((path, first, last));
        }
    }
    if uncommitted.is_empty() {
        return Ok(());
    }
    // Only once the WALs read back whole: if one was damaged since, this open fails on it,
    // and those tables may be the only intact copy of its writes (for an operator to dump).
    for &n in wals {
        wal::replay(fs, &filename::wal_path(dir, n), n, false, |_| Ok(()))?;
    }
    for (path, first, last) in uncommitted {
        fs.remove(&path)
            .map_err(|e| io_context("remove", &path, e))?;
        log::info!(
            "removed {}: left by a replay of WALs {first}..={last} that never committed",
            path.display()
        );
    }
    Ok(())
}

/// The L0 tables replay wrote that no manifest edit lists yet. If the open fails before
/// they are handed to the edit (a later WAL is damaged, an orphan check fails), they are
/// removed: the WALs still hold their writes, and an open retried again and again would
/// otherwise leave a new set each time.
struct UncommittedParts<'a> {
    fs: &'a dyn FileSystem,
    dir: &'a Path,
    list: Vec<JobOutput>,
}

impl Drop for UncommittedParts<'_> {
    fn drop(&mut self) {
        for out in self.list.drain(..) {
            let JobOutput { edit, opened, .. } = out;
            drop(opened);
            for (_, meta) in edit.added {
                let path = filename::table_path(self.dir, meta.number);
                if let Err(e) = self.fs.remove(&path) {
                    log::warn!("{}: not removed after a failed open: {e}", path.display());
                }
            }
        }
    }
}

/// Writes `mem` out as [`flush_part`] does, and starts the next part in an empty memtable.
/// Ends the memtable of replayed writes and starts the next: writes it to L0 tables (added
/// to `parts`), or, read-only, keeps it in memory (in `kept`).
fn seal_replayed(
    ctx: &Ctx<'_>,
    versions: &VersionSet,
    wals: (u64, u64),
    mem: &mut Memtable,
    writer: &mut MemWriter,
    parts: &mut Vec<JobOutput>,
    kept: &mut Vec<Arc<Memtable>>,
) -> Result<()> {
    if !ctx.opts.read_only {
        parts.push(flush_part(ctx, versions, wals, mem)?);
    }
    let (next, next_writer) = fresh_memtable()?;
    let full = std::mem::replace(mem, next);
    *writer = next_writer;
    if ctx.opts.read_only {
        kept.push(Arc::new(full));
    }
    Ok(())
}

/// An empty memtable for replayed writes, and its writer.
fn fresh_memtable() -> Result<(Memtable, MemWriter)> {
    let mem = Memtable::new(0);
    let writer = mem
        .take_writer()
        .ok_or_else(|| Error::other("a new memtable's writer was taken"))?;
    Ok((mem, writer))
}

/// Writes `mem` (replayed writes, from the WALs numbered `wals.0` to `wals.1`) to L0 table
/// files, synced, which record those numbers (see [`check_orphans`]); the caller adds them to
/// the manifest.
fn flush_part(
    ctx: &Ctx<'_>,
    versions: &VersionSet,
    wals: (u64, u64),
    mem: &Memtable,
) -> Result<JobOutput> {
    let numbers = versions.file_numbers();
    let pending_outputs = Mutex::new(BTreeSet::new());
    let env = versions.table_env().clone();
    let job = JobContext {
        fs: ctx.fs,
        dir: ctx.dir,
        opts: ctx.opts,
        file_numbers: &numbers,
        shutting_down: ctx.shutting_down,
        pending_outputs: &pending_outputs,
        env: &env,
        replayed_wals: Some(wals),
    };
    // No snapshot outlives a reopen: of a range tombstone piece's sequence numbers, the
    // newest is all any reader can see.
    compaction::flush_memtable(&job, mem, versions.current(), crate::key::MAX_SEQ)
}

/// Tables on disk that the manifest does not list are outputs of jobs that never committed,
/// and go. But one that holds writes newer than anything the manifest and the WALs record is
/// evidence of a lost manifest edit: deleting it would lose those writes for good.
///
/// Except a table an earlier open's replay wrote, when that replay never committed: the
/// first and the last WAL it replayed are among `wals`, the ones the manifest still needs
/// (so its log number is at most the first) that are still there. Its writes are those WALs' records,
/// and any the WALs no longer hold were never durable: the WALs were synced before it was
/// written, and a sync that returned without making them durable follows a failed one
/// (`docs/durability.md`, "fsyncgate"), after which no write they carried was acknowledged
/// as durable. Once a replay commits, its WALs are retired and removed, so a lost edit
/// after that is still caught. Returns those of such tables that hold writes past
/// `last_seq`: they must be gone, durably, before a manifest edit retires their WALs (a
/// writable open removed them all before its replay: see [`remove_uncommitted_replays`]).
fn check_orphans(
    fs: &dyn FileSystem,
    dir: &Path,
    files: &[(String, FileKind)],
    versions: &VersionSet,
    wals: &[u64],
    last_seq: SeqNo,
) -> Result<Vec<PathBuf>> {
    let mut leftovers = Vec::new();
    let live: HashSet<u64> = versions.current().live_numbers().into_iter().collect();
    for (name, kind) in files {
        let FileKind::Table(n) = kind else { continue };
        if live.contains(n) {
            continue;
        }
        let path: PathBuf = dir.join(name);
        let Some(t) = open_orphan(fs, &path)? else {
            continue;
        };
        // Its writes: entries, and range tombstones (a table may hold only those).
        let range_dels = t.range_dels().filter(|f| !f.is_empty());
        let b = crate::sstable::table_bounds(t.properties(), range_dels.map(|f| &**f));
        if let Some((first, last)) = t.properties().replayed_wals {
            if wals.binary_search(&first).is_ok() && wals.binary_search(&last).is_ok() {
                if b.max_seq > last_seq {
                    log::warn!(
                        "{}: left by an open's replay of WALs {first}..={last} that never \
                         committed, holds writes up to sequence {} the WALs no longer hold \
                         (they were never durable): not a lost manifest edit",
                        path.display(),
                        b.max_seq
                    );
                    leftovers.push(path);
                }
                continue;
            }
        }
        if (b.entries > 0 || range_dels.is_some()) && b.max_seq > last_seq {
            return Err(Error::corruption(
                &path,
                0,
                format!(
                    "table is not in the manifest but holds writes up to sequence {} \
                     while the manifest and WALs end at {last_seq}: a manifest edit was lost",
                    b.max_seq
                ),
            ));
        }
    }
    Ok(leftovers)
}

/// A table on disk that the manifest does not list, opened to account for its writes; `None`
/// for one with nothing to account for. One that does not read as a table was cut short by a
/// crash; one gone since the directory was listed was deleted by a writer's compaction (a
/// read-only open beside it).
///
/// # Errors
/// Any other error opening it (an I/O error): such a table may hold anything, and the open
/// fails rather than delete it or take it for nothing.
fn open_orphan(fs: &dyn FileSystem, path: &Path) -> Result<Option<crate::sstable::TableReader>> {
    match crate::sstable::TableReader::open(fs, path) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.is_corruption() => Ok(None),
        Err(Error::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Removes the files the manifest does not reference: old WALs and manifests, temporaries,
/// and tables left by jobs that never committed.
fn remove_unreferenced(
    fs: &dyn FileSystem,
    dir: &Path,
    versions: &VersionSet,
    wal: u64,
) -> Result<()> {
    let live: HashSet<u64> = versions.current().live_numbers().into_iter().collect();
    let current_manifest = versions.manifest_number();
    let files = vset::list_files(fs, dir)?;
    // Tables the manifest lists but the directory lacks mean a damaged directory (or a
    // manifest cut before its last edits, whose tables may be among those it does not
    // list, holding the only copy of what they compacted): keep every table then, and say so.
    let present: HashSet<u64> = files
        .iter()
        .filter_map(|(_, k)| match k {
            FileKind::Table(n) => Some(*n),
            _ => None,
        })
        .collect();
    let missing = live.iter().filter(|n| !present.contains(n)).count();
    if missing > 0 {
        log::warn!(
            "{}: {missing} tables the manifest lists are missing: tables it does not list are kept",
            dir.display()
        );
    }
    for (name, kind) in files {
        let obsolete = match kind {
            FileKind::Table(n) => !live.contains(&n) && missing == 0,
            FileKind::Wal(n) => n != wal,
            FileKind::Manifest(n) => Some(n) != current_manifest,
            FileKind::Temp(_) => true,
            FileKind::Current | FileKind::Lock => false,
        };
        if obsolete {
            match fs.remove(&dir.join(&name)) {
                Ok(()) => log::info!("removed {name}: not referenced by the manifest"),
                Err(e) => log::warn!("could not remove {name}: {e}"),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wal::{Op, OpKind};
    use bytes::Bytes;

    fn batch(first_seq: SeqNo, ops: usize, offset: u64) -> WalBatch {
        WalBatch {
            offset,
            first_seq,
            ops: (0..ops)
                .map(|_| Op {
                    kind: OpKind::Put,
                    key: Bytes::from_static(b"k"),
                    value: Bytes::from_static(b"v"),
                })
                .collect(),
        }
    }

    fn corruption_at(r: Result<()>, offset: u64) {
        match r {
            Err(Error::Corruption {
                file, offset: at, ..
            }) => {
                assert_eq!(file, Path::new("/db/000007.wal"));
                assert_eq!(at, offset);
            }
            other => panic!("expected Corruption at {offset}, got {other:?}"),
        }
    }

    #[test]
    fn sequence_numbers_continue_without_gaps_and_never_go_back() {
        let p = Path::new("/db/000007.wal");
        let mut c = SeqCheck::new(10);
        // At or below what the manifest covers.
        corruption_at(c.check(p, &batch(10, 1, 0)), 0);
        corruption_at(c.check(p, &batch(3, 2, 16)), 16);
        c.check(p, &batch(11, 2, 32)).unwrap(); // 11..=12
        c.check(p, &batch(13, 1, 64)).unwrap(); // 13
                                                // Backwards or repeated after a record.
        corruption_at(c.check(p, &batch(13, 1, 96)), 96);
        corruption_at(c.check(p, &batch(12, 3, 128)), 128);
        // A gap: writes were lost.
        corruption_at(c.check(p, &batch(15, 1, 160)), 160);
        // Past the largest sequence number, or overflowing.
        let mut c = SeqCheck::new(MAX_SEQ - 2);
        corruption_at(c.check(p, &batch(MAX_SEQ - 1, 2, 192)), 192);
        corruption_at(c.check(p, &batch(u64::MAX, 2, 224)), 224);
        c.check(p, &batch(MAX_SEQ - 1, 1, 256)).unwrap();
        assert_eq!(c.last, MAX_SEQ - 1);
    }

    /// A table not in the manifest with writes past the manifest and WALs is a lost edit,
    /// unless a replay that never committed wrote it: the manifest still needs its first WAL
    /// and its first and last WALs are there.
    #[test]
    fn a_replay_table_of_wals_still_needed_is_no_lost_edit() {
        use crate::fs::MemFs;
        use crate::sstable::{BuildOptions, TableBuilder};
        let mem = MemFs::new();
        let fs: Arc<dyn FileSystem> = Arc::new(mem.clone());
        let dir = Path::new("/db");
        fs.create_dir_all(dir).unwrap();
        // A table of writes 1..=3 at 000009.sst, written by a replay of WALs 5..=7 (or by a
        // flush: no mark).
        let table = |replayed_wals| {
            let opts = BuildOptions {
                block_size: 4096,
                filter: crate::filter::TableFilter::Bloom { bits_per_key: 10.0 },
                level: 0,
                replayed_wals,
            };
            let path = filename::table_path(dir, 9);
            let mut b = TableBuilder::create(fs.as_ref(), &path, opts).unwrap();
            for (k, seq) in [(&b"a"[..], 1), (b"b", 2), (b"c", 3)] {
                let ikey =
                    crate::key::encode(k, crate::key::trailer(seq, crate::key::ValueKind::Put));
                b.add(&ikey, b"v").unwrap();
            }
            b.finish().unwrap();
        };
        let wal = |n: u64, present: bool| {
            let path = filename::wal_path(dir, n);
            if present {
                mem.write_file(&path, b"").unwrap();
            } else if fs.exists(&path) {
                fs.remove(&path).unwrap();
            }
        };
        // The manifest's log number, and what check_orphans says with the WALs and the
        // manifest ending at write 1.
        let check = |log_number: u64| {
            let env = TableEnv::new(fs.clone(), dir, 100, None);
            let st = vset::ManifestState {
                log_number,
                next_file_number: 20,
                last_sequence: 1,
                levels: vec![Default::default(); crate::version::NUM_LEVELS],
                compact_pointers: vec![Vec::new(); crate::version::NUM_LEVELS],
                ..Default::default()
            };
            let versions = VersionSet::from_state(fs.clone(), &env, &st);
            let files = vset::list_files(fs.as_ref(), dir).unwrap();
            let wals = wals_to_replay(&files, log_number);
            check_orphans(fs.as_ref(), dir, &files, &versions, &wals, 1)
        };
        let lost_edit = |r: Result<Vec<PathBuf>>| match r {
            Err(Error::Corruption { file, offset, .. }) => {
                assert_eq!(file, filename::table_path(dir, 9));
                assert_eq!(offset, 0);
            }
            other => panic!("expected a lost manifest edit, got {other:?}"),
        };
        table(Some((5, 7)));
        wal(5, true);
        wal(7, true);
        let leftover = vec![filename::table_path(dir, 9)];
        assert_eq!(check(5).unwrap(), leftover);
        assert_eq!(check(3).unwrap(), leftover);
        // The replay committed (the manifest retired its WALs): a lost edit after it.
        lost_edit(check(6));
        lost_edit(check(8));
        // Its WALs were removed, the first or the last.
        wal(5, false);
        lost_edit(check(5));
        wal(5, true);
        wal(7, false);
        lost_edit(check(5));
        // A flush's table: always a lost edit.
        wal(7, true);
        table(None);
        lost_edit(check(5));
    }
}
